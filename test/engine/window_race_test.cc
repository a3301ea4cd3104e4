// Memory windows on a device with two engines (two port queues, a worker
// each): one engine binds, unbinds and invalidates windows (B0's send
// queue) while the other checks a peer's READs and WRITEs through them
// (B1's responder). The region table's window slots are written by the one
// and read by the other (lib/mem/mr_table.h, "Threads"); its value is under
// ThreadSanitizer (tools/tsan.sh runs it), and every access is checked
// against what the window allowed when it ran:
// - while the binder holds the window still (it says so once its last bind
//   completed, and binds nothing more to it until told), an access through
//   a bound window succeeds with the range that binding names, and one
//   through an unbound window is refused (REM_ACCESS_ERR);
// - while the binder rebinds it, an access may be refused, but one that
//   succeeds read or wrote the range of the binding its rkey names, never
//   another's (each rkey's range follows from its consumer key).
// Meanwhile the binder also binds and locally invalidates a type 2 window
// on its own engine, so the region table keeps changing under both.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/packet_io.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"
#include "verbs/internal.h"
#include "verbs/verbs_impl.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

using namespace std::chrono_literals;

// Frames in flight: q[0] to A, q[1] to B's queue 0 (B's engine 0 hands
// B1's frames to engine 1, which releases them: each frame is its own
// allocation, freed through its cookie by whichever queue is told).
struct Wire {
  std::mutex m;
  std::deque<std::vector<std::uint8_t>*> q[2];
  ~Wire() {
    for (auto& d : q) {
      for (auto* f : d) delete f;
    }
  }
};

class QueuePort : public engine::PacketIo {
 public:
  QueuePort(Wire& w, int rx, int tx) : w_(w), rx_(rx), tx_(tx) {}
  std::uint16_t rx_burst(engine::RxFrame* frames, std::uint16_t max) override {
    if (rx_ < 0) return 0;
    std::lock_guard<std::mutex> l(w_.m);
    std::uint16_t n = 0;
    while (n < max && !w_.q[rx_].empty()) {
      std::vector<std::uint8_t>* f = w_.q[rx_].front();
      w_.q[rx_].pop_front();
      frames[n++] = engine::RxFrame{f->data(), static_cast<std::uint16_t>(f->size()), f};
    }
    return n;
  }
  void rx_release(engine::RxFrame* frames, std::uint16_t n) override {
    for (std::uint16_t i = 0; i < n; ++i) delete static_cast<std::vector<std::uint8_t>*>(frames[i].cookie);
  }
  std::uint16_t tx_burst(const wire::TxFrame* frames, std::uint16_t n) override {
    std::lock_guard<std::mutex> l(w_.m);
    for (std::uint16_t i = 0; i < n; ++i) {
      auto* b = new std::vector<std::uint8_t>(frames[i].frame_bytes());
      frames[i].copy_to(b->data());
      w_.q[tx_].push_back(b);
    }
    return n;
  }
  Resolution resolve(const ibv_gid&, std::uint8_t mac[6], bool) override {
    std::memset(mac, 0x52, 6);
    return Resolution::kKnown;
  }

 private:
  Wire& w_;
  int rx_, tx_;
};

class WallClock : public engine::Clock {
 public:
  std::uint64_t now_ns() override {
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
};

constexpr std::uint32_t kRanges = 4;
constexpr std::uint32_t kRange = 8192;  // per range: 4 KiB read by READs, then 4 KiB written by WRITEs
constexpr std::uint32_t kOp = 4096;     // four packets at the 1024-byte path MTU

// The range a type 1 binding of rkey `k` covers: it follows from the
// consumer key, so any rkey the window ever had names one range.
std::uint32_t range_of(std::uint32_t k) { return (k & 0xffu) % kRanges; }
std::uint8_t pattern(std::uint32_t range, std::uint32_t i) { return static_cast<std::uint8_t>(range * 61 + i * 7 + 1); }

const ibv_gid kGidA = ipv4_gid({10, 0, 0, 1});
const ibv_gid kGidB = ipv4_gid({10, 0, 0, 2});

// A (one engine) and B (two engines). A's QP a1 talks to B1 (engine 1), the
// accessed side; a0 to B0 (engine 0), whose send queue runs the binds.
struct Rig {
  Rig() : pa(wire, 0, 1), pb0(wire, 1, 0), pb1(wire, -1, 0) {
    std::string error;
    PortConfig ca;
    ca.io = &pa;
    ca.clock = &clock;
    ca.gid = kGidA;
    PortConfig cb;
    cb.queues = {&pb0, &pb1};
    cb.io = &pb0;
    cb.clock = &clock;
    cb.gid = kGidB;
    a = Context::open(ca, error);
    b = Context::open(cb, error);
    EXPECT_TRUE(a && b) << error;
    if (!a || !b) return;
    EXPECT_EQ(internal::engine_count(*b), 2u);
    EXPECT_EQ(a->start_workers({-1}), 0);
    EXPECT_EQ(b->start_workers({-1, -1}), 0);
    pda = a->alloc_pd();
    pdb = b->alloc_pd();
    cqa0 = a->create_cq(256);
    cqa1 = a->create_cq(256);
    cqb0 = b->create_cq(256);
    cqb1 = b->create_cq(256);
    QpInitAttr init;
    init.cap = ibv_qp_cap{64, 64, 1, 1, 0};
    init.send_cq = init.recv_cq = cqa0;
    a0 = pda->create_qp(init);
    init.send_cq = init.recv_cq = cqa1;
    a1 = pda->create_qp(init);
    init.send_cq = init.recv_cq = cqb0;
    init.worker = 0;
    b0 = pdb->create_qp(init);
    init.send_cq = init.recv_cq = cqb1;
    init.worker = 1;
    b1 = pdb->create_qp(init);
    if (b0 != nullptr && b1 != nullptr) {
      EXPECT_EQ(internal::impl_of(*b0).engine, 0u) << "B0 binds on engine 0";
      EXPECT_EQ(internal::impl_of(*b1).engine, 1u) << "B1 is accessed on engine 1";
    }
    for (std::uint32_t r = 0; r < kRanges; ++r) {
      for (std::uint32_t i = 0; i < kOp; ++i) bufb[r * kRange + i] = pattern(r, i);
    }
    mra = pda->reg_mr(bufa.data(), bufa.size(), IBV_ACCESS_LOCAL_WRITE);
    mrb = pdb->reg_mr(bufb.data(), bufb.size(),
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
    if (mrb != nullptr) region.lkey = mrb->lkey;
    w1 = pdb->alloc_mw(IBV_MW_TYPE_1);
    w2 = pdb->alloc_mw(IBV_MW_TYPE_2);
    EXPECT_EQ(connect_rc(a0, kGidB, b0->qp_num(), 0x100, 0x200, params), 0);
    EXPECT_EQ(connect_rc(b0, kGidA, a0->qp_num(), 0x200, 0x100, params), 0);
    EXPECT_EQ(connect(), 0);
  }
  ~Rig() {
    if (a) a->stop_workers();
    if (b) b->stop_workers();
  }
  bool ready() const { return a0 && a1 && b0 && b1 && mra && mrb && w1 && w2; }
  std::uint8_t* range(std::uint32_t r) { return bufb.data() + r * kRange; }

  // a1 and B1 from RESET to RTS, with PSNs not used before: after an access
  // was refused both are in ERR.
  int connect() {
    ibv_qp_attr reset{};
    reset.qp_state = IBV_QPS_RESET;
    if (a1->modify(reset, IBV_QP_STATE) != 0 || b1->modify(reset, IBV_QP_STATE) != 0) return -1;
    psn = (psn + 0x10000) & 0x7fffff;  // PSNs are 24 bits
    if (const int rc = connect_rc(a1, kGidB, b1->qp_num(), psn, psn + 0x8000, params); rc != 0) return rc;
    return connect_rc(b1, kGidA, a1->qp_num(), psn + 0x8000, psn, params);
  }

  Wire wire;
  WallClock clock;
  QueuePort pa, pb0, pb1;
  ConnectParams params;
  std::uint32_t psn = 0;
  std::unique_ptr<Context> a, b;
  ProtectionDomain* pda = nullptr;
  ProtectionDomain* pdb = nullptr;
  CompletionQueue *cqa0 = nullptr, *cqa1 = nullptr, *cqb0 = nullptr, *cqb1 = nullptr;
  QueuePair *a0 = nullptr, *a1 = nullptr, *b0 = nullptr, *b1 = nullptr;
  std::vector<std::uint8_t> bufa = std::vector<std::uint8_t>(kOp);
  std::vector<std::uint8_t> bufb = std::vector<std::uint8_t>(kRanges * kRange);
  MemoryRegion* mra = nullptr;
  MemoryRegion* mrb = nullptr;
  ibv_mr region{};  // what a bind names: the region's lkey
  MemoryWindow* w1 = nullptr;
  MemoryWindow* w2 = nullptr;
};

// One completion of `cq`; status IBV_WC_GENERAL_ERR if none came in 60 s
// (a hang guard, not a measure).
ibv_wc one(CompletionQueue* cq) {
  ibv_wc wc{};
  wc.status = IBV_WC_GENERAL_ERR;
  for (const auto end = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < end;) {
    const int n = cq->poll(1, &wc);
    if (n == 1) return wc;
    if (n < 0) break;
    std::this_thread::yield();
  }
  wc.status = IBV_WC_GENERAL_ERR;
  return wc;
}

// What the binder thread and the accessor share. The binder changes W1
// only while `hold` is clear; once it sees `hold` (for round `round`) and
// its last change of W1 has completed (one more if W1 is not as
// `want_bound` asks), it publishes W1's state and sets `held_round` to
// that round. The accessor sets `want_bound`, then `round`, then `hold`.
struct Shared {
  std::atomic<bool> stop{false};
  std::atomic<bool> hold{false};
  std::atomic<int> round{0};
  std::atomic<int> held_round{0};
  std::atomic<std::uint32_t> latest{0};  // W1's rkey after the last completed change
  std::atomic<std::uint32_t> rkey{0};    // as published for held_round
  std::atomic<bool> bound{false};        // W1 bound (true) or unbound (false) then
  std::atomic<bool> want_bound{true};    // how the accessor wants W1 held (set before `round`)
  std::atomic<int> changes{0};         // W1's completed changes
  std::atomic<int> type2_cycles{0};    // W2 bound and locally invalidated
  std::atomic<int> binder_errors{0};
  std::string first_binder_error;      // written by the binder before it counts the first error
};

// The binder: B0's send queue (engine 0). W1 rebound to the range its next
// rkey names, every fourth change an unbind; W2 bound (type 2, IBV_WR_BIND_MW)
// and invalidated (IBV_WR_LOCAL_INV) in between.
void binder(Rig& r, Shared& s) {
  auto fail = [&s](const std::string& what) {
    if (s.binder_errors.load() == 0) s.first_binder_error = what;
    s.binder_errors.fetch_add(1);
  };
  std::uint32_t w1_rkey = r.w1->rkey();
  std::uint32_t w2_rkey = r.w2->rkey();
  bool w1_bound = false;
  // W1 bound to the range of its next rkey, or unbound; false if it failed.
  auto change_w1 = [&](bool unbind) {
    const std::uint32_t next = (w1_rkey & ~0xffu) | ((w1_rkey + 1) & 0xffu);
    ibv_mw_bind bind{};
    bind.wr_id = 1;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_info.mr = &r.region;
    bind.bind_info.addr = reinterpret_cast<std::uint64_t>(r.range(range_of(next)));
    bind.bind_info.length = unbind ? 0 : kRange;
    bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (r.b0->bind_mw(r.w1, bind) != 0) {
      fail("bind_mw refused the post");
      return false;
    }
    const ibv_wc wc = one(r.cqb0);
    if (wc.status != IBV_WC_SUCCESS) {
      fail(std::string("W1 bind: ") + wc_status_str(wc.status));
      return false;
    }
    w1_rkey = next;
    w1_bound = !unbind;
    s.latest.store(next);
    s.changes.fetch_add(1);
    return true;
  };
  int change = 0;
  while (!s.stop.load()) {
    if (s.hold.load()) {
      if (const int round = s.round.load(); s.held_round.load() != round) {
        // Held as the accessor wants it this round.
        if (w1_bound != s.want_bound.load() && !change_w1(w1_bound)) return;
        s.rkey.store(w1_rkey);
        s.bound.store(w1_bound);
        s.held_round.store(round);
      }
    } else if (!change_w1(++change % 4 == 0)) {
      return;
    }
    // W2: bound through B0 to range 0, then invalidated by B0.
    const std::uint32_t next2 = (w2_rkey & ~0xffu) | ((w2_rkey + 1) & 0xffu);
    ibv_send_wr wr{};
    wr.wr_id = 2;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = r.w2->ibv();
    wr.bind_mw.rkey = next2;
    wr.bind_mw.bind_info.mr = &r.region;
    wr.bind_mw.bind_info.addr = reinterpret_cast<std::uint64_t>(r.range(0));
    wr.bind_mw.bind_info.length = kRange;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
    ibv_send_wr* bad = nullptr;
    if (r.b0->post_send(&wr, &bad) != 0) return fail("W2 bind refused the post");
    ibv_wc wc = one(r.cqb0);
    if (wc.status != IBV_WC_SUCCESS) return fail(std::string("W2 bind: ") + wc_status_str(wc.status));
    w2_rkey = next2;
    ibv_send_wr inv{};
    inv.wr_id = 3;
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.send_flags = IBV_SEND_SIGNALED;
    inv.invalidate_rkey = w2_rkey;
    if (r.b0->post_send(&inv, &bad) != 0) return fail("LOCAL_INV refused the post");
    wc = one(r.cqb0);
    if (wc.status != IBV_WC_SUCCESS) return fail(std::string("W2 LOCAL_INV: ") + wc_status_str(wc.status));
    s.type2_cycles.fetch_add(1);
  }
}

TEST(WindowRace, BindsOnOneEngineWhileAnotherChecksAccessesThroughTheWindow) {
  Rig r;
  ASSERT_TRUE(r.ready());
  Shared s;
  s.latest.store(r.w1->rkey());  // before the binder runs: it changes the MemoryWindow
  std::thread bind_thread(binder, std::ref(r), std::ref(s));
  int ok_free = 0, refused_free = 0, ok_held = 0, refused_held = 0, stamp = 0;
  std::string wrong;  // the first access whose outcome its window did not allow
  // One access through W1 under `rkey`: READ of the range's first half, or
  // WRITE of a new stamp to its second half. Whether it succeeded; `wrong`
  // set if a success moved other bytes than the binding's.
  auto access = [&](std::uint32_t rkey, bool write, const char* phase) -> int {
    const std::uint32_t rg = range_of(rkey);
    std::uint8_t* remote = r.range(rg) + (write ? kOp : 0);
    if (write) {
      ++stamp;
      for (std::uint32_t i = 0; i < kOp; ++i) r.bufa[i] = static_cast<std::uint8_t>(stamp + i);
    } else {
      std::memset(r.bufa.data(), 0, kOp);
    }
    if (post_rdma(r.a1, write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, r.bufa.data(), kOp, r.mra->lkey, remote, rkey,
                  7) != 0) {
      wrong = std::string(phase) + ": post_send failed";
      return -1;
    }
    const ibv_wc wc = one(r.cqa1);
    if (wc.status == IBV_WC_REM_ACCESS_ERR) {
      if (r.connect() != 0) {
        wrong = std::string(phase) + ": reconnecting after a refusal failed: " + r.a->last_error() + " / " +
                r.b->last_error();
      }
      return 0;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      wrong = std::string(phase) + ": " + wc_status_str(wc.status);
      return -1;
    }
    for (std::uint32_t i = 0; i < kOp; ++i) {
      const std::uint8_t want = write ? static_cast<std::uint8_t>(stamp + i) : pattern(rg, i);
      const std::uint8_t got = write ? remote[i] : r.bufa[i];
      if (got != want) {
        wrong = std::string(phase) + (write ? ": WRITE" : ": READ") + " under rkey " + std::to_string(rkey) +
                " moved other bytes than its range's at " + std::to_string(i);
        return -1;
      }
    }
    return 1;
  };
  for (int round = 0; round < 60 && wrong.empty(); ++round) {
    // Free: the binder rebinds W1 meanwhile.
    for (int i = 0; i < 4 && wrong.empty(); ++i) {
      const int got = access(s.latest.load(), (round + i) % 2 == 1, "free");
      (got == 1 ? ok_free : refused_free) += got >= 0;
    }
    // Held: W1 stays as the binder left it.
    s.want_bound.store(round % 3 != 2);
    s.round.store(round + 1);
    s.hold.store(true);
    while (s.held_round.load() != round + 1 && s.binder_errors.load() == 0) std::this_thread::yield();
    if (s.binder_errors.load() != 0) break;
    const std::uint32_t rkey = s.rkey.load();
    const bool bound = s.bound.load();
    for (int i = 0; i < 4 && wrong.empty(); ++i) {
      const int got = access(rkey, i % 2 == 1, bound ? "held, bound" : "held, unbound");
      if (got < 0) break;
      if ((got == 1) != bound) {
        wrong = std::string(bound ? "held, bound: refused" : "held, unbound: succeeded") + " under rkey " +
                std::to_string(rkey);
      }
      (got == 1 ? ok_held : refused_held) += 1;
    }
    s.hold.store(false);
  }
  s.stop.store(true);
  bind_thread.join();
  EXPECT_EQ(wrong, "");
  EXPECT_EQ(s.binder_errors.load(), 0) << s.first_binder_error;
  EXPECT_GT(s.changes.load(), 0);
  EXPECT_GT(s.type2_cycles.load(), 0);
  EXPECT_GT(ok_held, 0) << "no access through a bound window";
  EXPECT_GT(refused_held, 0) << "no access through an unbound window";
  std::printf("  W1: %d changes; free: %d ok, %d refused; held: %d ok, %d refused; W2: %d bind+invalidate\n",
              s.changes.load(), ok_free, refused_free, ok_held, refused_held, s.type2_cycles.load());
}

}  // namespace
}  // namespace uroce::test
