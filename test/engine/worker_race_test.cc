// Two devices on worker threads joined by a thread-safe loopback, the
// application posting and polling on its own thread while another thread
// makes control calls and reads QP state and counters (review D13). Its
// value is under ThreadSanitizer (tools/tsan.sh): no report means those
// reads are synchronised with the workers.
#include <gtest/gtest.h>

#include <dirent.h>

#include <fstream>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/packet_io.h"
#include "uroce/stats.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"
#include "verbs/internal.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

struct Wire {
  std::mutex m;
  std::deque<std::vector<std::uint8_t>> q[2];
};

class LoopPort : public engine::PacketIo {
 public:
  LoopPort(Wire& w, int side) : w_(w), side_(side) {}
  std::uint16_t rx_burst(engine::RxFrame* frames, std::uint16_t max) override {
    std::lock_guard<std::mutex> l(w_.m);
    std::uint16_t n = 0;
    while (n < max && !w_.q[side_].empty()) {
      in_use_.push_back(std::move(w_.q[side_].front()));
      w_.q[side_].pop_front();
      frames[n++] = engine::RxFrame{in_use_.back().data(), static_cast<std::uint16_t>(in_use_.back().size()), nullptr};
    }
    return n;
  }
  void rx_release(engine::RxFrame*, std::uint16_t) override { in_use_.clear(); }
  std::uint16_t tx_burst(const wire::TxFrame* frames, std::uint16_t n) override {
    std::lock_guard<std::mutex> l(w_.m);
    for (std::uint16_t i = 0; i < n; ++i) {
      std::vector<std::uint8_t> b(frames[i].frame_bytes());
      frames[i].copy_to(b.data());
      w_.q[1 - side_].push_back(std::move(b));
    }
    return n;
  }
  Resolution resolve(const ibv_gid&, std::uint8_t mac[6], bool) override {
    std::memset(mac, 0x52, 6);
    return Resolution::kKnown;
  }

 private:
  Wire& w_;
  int side_;
  std::deque<std::vector<std::uint8_t>> in_use_;
};

class WallClock : public engine::Clock {
 public:
  std::uint64_t now_ns() override {
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
};

// Two contexts, each with one worker (or helper), joined by the loopback; A's QP
// connected to B's, 64 KiB regions on both.
struct Pair {
  // kCaller: each context's helper thread instead of its worker.
  explicit Pair(Context::Progress mode = Context::Progress::kWorkers, Context::WorkerHook hook = {})
      : pa(wire, 0), pb(wire, 1) {
    std::string error;
    PortConfig ca;
    ca.io = &pa;
    ca.clock = &clock;
    ca.gid = ipv4_gid({10, 0, 0, 1});
    PortConfig cb = ca;
    cb.io = &pb;
    cb.gid = ipv4_gid({10, 0, 0, 2});
    a = Context::open(ca, error);
    b = Context::open(cb, error);
    EXPECT_TRUE(a && b) << error;
    if (!a || !b) return;
    EXPECT_EQ(a->set_progress(mode), 0);
    EXPECT_EQ(b->set_progress(mode), 0);
    EXPECT_EQ(a->start_workers({-1}, hook), 0);
    EXPECT_EQ(b->start_workers({-1}), 0);
    pda = a->alloc_pd();
    pdb = b->alloc_pd();
    cqa = a->create_cq(4096);
    cqb = b->create_cq(4096);
    QpInitAttr init;
    init.cap = ibv_qp_cap{128, 128, 1, 1, 64};
    init.send_cq = init.recv_cq = cqa;
    qa = pda->create_qp(init);
    init.send_cq = init.recv_cq = cqb;
    qb = pdb->create_qp(init);
    const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    mra = pda->reg_mr(bufa.data(), bufa.size(), all);
    mrb = pdb->reg_mr(bufb.data(), bufb.size(), all);
    ConnectParams p;
    EXPECT_EQ(connect_rc(qa, ipv4_gid({10, 0, 0, 2}), qb->qp_num(), 0x100, 0x200, p), 0);
    EXPECT_EQ(connect_rc(qb, ipv4_gid({10, 0, 0, 1}), qa->qp_num(), 0x200, 0x100, p), 0);
  }
  ~Pair() {
    if (a) a->stop_workers();
    if (b) b->stop_workers();
  }
  bool ready() const { return a && b && qa && qb && mra && mrb; }

  Wire wire;
  WallClock clock;
  LoopPort pa, pb;
  std::unique_ptr<Context> a, b;
  ProtectionDomain* pda = nullptr;
  ProtectionDomain* pdb = nullptr;
  CompletionQueue* cqa = nullptr;
  CompletionQueue* cqb = nullptr;
  QueuePair* qa = nullptr;
  QueuePair* qb = nullptr;
  std::vector<std::uint8_t> bufa = std::vector<std::uint8_t>(1 << 16, 1);
  std::vector<std::uint8_t> bufb = std::vector<std::uint8_t>(1 << 16, 2);
  MemoryRegion* mra = nullptr;
  MemoryRegion* mrb = nullptr;
};

// Values read on one thread that must never go back.
class Rising {
 public:
  void see(const std::string& what, std::uint64_t v) {
    std::uint64_t& before = last_[what];
    if (v < before && ++backwards_ <= 5) {
      first_ += "\n  " + what + " went back from " + std::to_string(before) + " to " + std::to_string(v);
    }
    before = v;
  }
  int backwards() const { return backwards_; }
  const std::string& first() const { return first_; }

 private:
  std::map<std::string, std::uint64_t> last_;
  int backwards_ = 0;
  std::string first_;
};

// 3000 4 KiB WRITEs and READs, up to 64 outstanding, posted and polled on
// this thread while another queries A's QP, registers and deregisters
// regions, and reads state() and the QP and engine counters, which must
// rise only, with the QP in RTS throughout.
TEST(WorkerRace, PostPollAndControlCallsWhileWorkersRun) {
  Pair p;
  ASSERT_TRUE(p.ready());
  QueuePair* qa = p.qa;
  std::atomic<bool> stop{false};
  Rising rising;
  int reads = 0, not_rts = 0;
  std::thread control([&] {
    std::vector<std::uint8_t> scratch(4096);
    while (!stop.load()) {
      ibv_qp_attr attr{};
      qa->query(attr, 0);
      not_rts += attr.qp_state != IBV_QPS_RTS;
      MemoryRegion* m = p.pda->reg_mr(scratch.data(), scratch.size(), IBV_ACCESS_LOCAL_WRITE);
      p.pda->dereg_mr(m);
      not_rts += qa->state() != IBV_QPS_RTS;
      for (const char* name : {"tx_packets", "tx_bytes", "rx_bytes", "acks_received", "completions"}) {
        rising.see(std::string("A.") + name, qa->counter(name));
        rising.see(std::string("B.") + name, p.qb->counter(name));
      }
      rising.see("A.tx_frames", internal::engine_of(*p.a).counter(engine::EngineCounter::tx_frames));
      rising.see("B.rx_frames", internal::engine_of(*p.b).counter(engine::EngineCounter::rx_frames));
      ++reads;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  int done = 0, posted = 0;
  ibv_wc wc[32];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done < 3000 && std::chrono::steady_clock::now() < deadline) {
    while (posted - done < 64 && posted < 3000) {
      const ibv_wr_opcode op = posted % 2 ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
      if (post_rdma(qa, op, p.bufa.data() + (posted % 8) * 4096, 4096, p.mra->lkey,
                    p.bufb.data() + (posted % 8) * 4096, p.mrb->rkey, static_cast<std::uint64_t>(posted)) != 0) {
        break;
      }
      ++posted;
    }
    const int n = p.cqa->poll(32, wc);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i) ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS) << wc[i].wr_id;
    done += n;
  }
  stop = true;
  control.join();
  EXPECT_EQ(done, 3000);
  EXPECT_EQ(not_rts, 0) << "A's QP left RTS";
  EXPECT_EQ(rising.backwards(), 0) << rising.first();
  EXPECT_GT(reads, 0);
  EXPECT_EQ(qa->counter("completions"), 3000u);
  // The WRITEs' payload, each packet once, plus what was sent again: a
  // worker starved on a loaded machine can answer late enough for the
  // retransmission timer to resend a window (go-back-N), WRITEs (4 KiB
  // each) and READ requests (no payload) alike; tx_bytes counts every packet.
  const std::uint64_t resent = qa->counter("retransmitted_packets");
  EXPECT_GE(qa->counter("tx_bytes"), 1500u * 4096) << "the WRITEs' payload";
  EXPECT_LE(qa->counter("tx_bytes"), (1500u + resent) * 4096) << resent << " packets sent again";
  EXPECT_EQ(p.qb->counter("rx_bytes"), 1500u * 4096);
  std::printf("  %d rounds of control calls and reads during 3000 operations\n", reads);
}

// A transition the engine makes reaches state() on the application's
// thread, which reads it while the worker runs: a WRITE with a bad rkey
// draws NAK Remote Access Error, which completes it with REM_ACCESS_ERR and
// moves A's QP to ERR.
TEST(WorkerRace, StateFollowsTheEngineIntoError) {
  Pair p;
  ASSERT_TRUE(p.ready());
  ASSERT_EQ(p.qa->state(), IBV_QPS_RTS);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_WRITE, p.bufa.data(), 4096, p.mra->lkey, p.bufb.data(), ~p.mrb->rkey,
                      7),
            0);
  ibv_wc wc{};
  int got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((got == 0 || p.qa->state() != IBV_QPS_ERR) && std::chrono::steady_clock::now() < deadline) {
    if (got == 0) got = p.cqa->poll(1, &wc);
  }
  ASSERT_EQ(got, 1);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << wc_status_str(wc.status);
  EXPECT_EQ(p.qa->state(), IBV_QPS_ERR);
  ibv_qp_attr attr{};
  ASSERT_EQ(p.qa->query(attr, 0), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR) << "query() and state() agree";
  EXPECT_EQ(p.qa->counter("nak_rem_access_received"), 1u);
}

// Receives ring no doorbell outside ERR: the engine takes them in when a
// message needs one, and as it enters ERR. Every receive posted on B's QP
// while it moves to ERR is flushed, those posted before the poster saw ERR
// (no doorbell) included: in odd rounds B's engine moves it (its WRITE with
// a bad rkey draws a NAK), in even ones this thread (modify to ERR). The poster stops once
// it sees ERR, so no later doorbell takes them in instead.
TEST(WorkerRace, ReceivesPostedAsTheQpEntersErrorAreAllFlushed) {
  int total = 0;
  for (int round = 0; round < 20; ++round) {
    Pair p;
    ASSERT_TRUE(p.ready());
    std::atomic<bool> go{false};
    int posted = 0, refused = 0;
    std::thread poster([&] {
      ibv_sge sge{reinterpret_cast<std::uint64_t>(p.bufb.data()), 64, p.mrb->lkey};
      while (!go.load()) {
      }
      while (p.qb->state() != IBV_QPS_ERR) {
        ibv_recv_wr wr{};
        wr.wr_id = static_cast<std::uint64_t>(posted);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (p.qb->post_recv(&wr, &bad) == 0) {
          ++posted;
        } else {
          ++refused;  // full: 128 posted before the WRITE came
        }
        std::this_thread::sleep_for(std::chrono::microseconds(posted % 8));
      }
    });
    go = true;
    std::this_thread::sleep_for(std::chrono::microseconds(20 * (round % 5)));
    if (round % 2 == 1) {
      ASSERT_EQ(post_rdma(p.qb, IBV_WR_RDMA_WRITE, p.bufb.data(), 64, p.mrb->lkey, p.bufa.data(), ~p.mra->rkey, 1),
                0);
    } else {
      ibv_qp_attr err{};
      err.qp_state = IBV_QPS_ERR;
      ASSERT_EQ(p.qb->modify(err, IBV_QP_STATE), 0);
    }
    poster.join();
    total += posted;
    ibv_wc wc[32];
    int flushed = 0, other = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (flushed + other < posted + round % 2 && std::chrono::steady_clock::now() < deadline) {
      const int n = p.cqb->poll(32, wc);
      ASSERT_GE(n, 0);
      for (int i = 0; i < n; ++i) (wc[i].status == IBV_WC_WR_FLUSH_ERR ? flushed : other) += 1;
    }
    // B's failed WRITE completes on the same CQ (REM_ACCESS_ERR); every
    // receive is flushed.
    EXPECT_EQ(flushed, posted) << "round " << round << ": receives posted before ERR never completed ("
                                       << refused << " refused as full)";
    EXPECT_LE(other, round % 2) << "round " << round;
  }
  EXPECT_GT(total, 20) << "the poster hardly ever posted before ERR: the race was not run";
  std::printf("  %d receives posted as the QP entered ERR, in 20 rounds\n", total);
}

// Two threads whose calls fail at once each read their own message: a bad
// WR posted on one thread, a bad registration on another (last_error is
// per thread).
TEST(WorkerRace, EachThreadReadsItsOwnLastError) {
  Pair p;
  ASSERT_TRUE(p.ready());
  std::atomic<int> mismatches{0};
  auto poster = [&] {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(p.bufa.data()), 8, p.mra->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 99;  // more SGEs than the QP has: EINVAL
    wr.opcode = IBV_WR_SEND;
    for (int i = 0; i < 2000; ++i) {
      ibv_send_wr* bad = nullptr;
      if (p.qa->post_send(&wr, &bad) != EINVAL ||
          p.a->last_error().find("bad send WR") == std::string::npos) {
        ++mismatches;
      }
    }
  };
  auto registrar = [&] {
    for (int i = 0; i < 2000; ++i) {
      if (p.pda->reg_mr(p.bufa.data(), 0, 0) != nullptr || p.a->last_error().find("bad region") == std::string::npos) {
        ++mismatches;
      }
    }
  };
  std::thread t1(poster), t2(registrar);
  t1.join();
  t2.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(p.b->last_error(), "") << "another context's errors are not this one's";
}

// --- Caller progress (Context::Progress::kCaller) ------------------------

// This process's threads named `name`.
int threads_named(const std::string& name) {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* t = readdir(d)) {
      if (t->d_name[0] == '.') continue;
      std::ifstream in(std::string("/proc/self/task/") + t->d_name + "/comm");
      std::string comm;
      std::getline(in, comm);
      n += comm == name;
    }
    closedir(d);
  }
  return n;
}

// Posts `count` 4 KiB WRITEs and READs from A, up to 64 outstanding, and
// polls A's CQ, calling A's progress() before each poll when `drive`:
// the completions seen (all successful, or the test fails).
int transfer(Pair& p, int count, bool drive, std::chrono::seconds limit) {
  int done = 0, posted = 0;
  ibv_wc wc[32];
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (done < count && std::chrono::steady_clock::now() < deadline) {
    while (posted - done < 64 && posted < count) {
      const ibv_wr_opcode op = posted % 2 ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
      if (post_rdma(p.qa, op, p.bufa.data() + (posted % 8) * 4096, 4096, p.mra->lkey,
                    p.bufb.data() + (posted % 8) * 4096, p.mrb->rkey, static_cast<std::uint64_t>(posted)) != 0) {
        break;
      }
      ++posted;
    }
    if (drive) p.a->progress();
    const int n = p.cqa->poll(32, wc);
    EXPECT_GE(n, 0);
    if (n < 0) return done;
    for (int i = 0; i < n; ++i) EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS) << wc[i].wr_id;
    done += n;
    if (!drive && n == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return done;
}

// One helper per context and no worker while they run; none after
// stop_workers; the mode cannot change under them.
TEST(CallerProgress, AHelperInsteadOfAWorkerUntilStopped) {
  const int workers = threads_named("uroce-worker"), helpers = threads_named("uroce-helper");
  {
    Pair p(Context::Progress::kCaller);
    ASSERT_TRUE(p.ready());
    EXPECT_EQ(p.a->progress_mode(), Context::Progress::kCaller);
    EXPECT_EQ(threads_named("uroce-helper"), helpers + 2);
    EXPECT_EQ(threads_named("uroce-worker"), workers);
    EXPECT_EQ(p.a->set_progress(Context::Progress::kWorkers), EBUSY);
    EXPECT_NE(p.a->last_error().find("stop_workers()"), std::string::npos) << p.a->last_error();
    EXPECT_EQ(p.a->start_workers({-1}), EBUSY);
    p.a->stop_workers();
    EXPECT_EQ(threads_named("uroce-helper"), helpers + 1);
    // Stopped, it may change, and start again.
    EXPECT_EQ(p.a->set_progress(Context::Progress::kWorkers), 0);
    EXPECT_EQ(p.a->start_workers({-1}), 0);
    EXPECT_EQ(threads_named("uroce-worker"), workers + 1);
    EXPECT_EQ(transfer(p, 200, false, std::chrono::seconds(30)), 200);
  }
  EXPECT_EQ(threads_named("uroce-helper"), helpers);
  EXPECT_EQ(threads_named("uroce-worker"), workers);
}

// The application's thread runs A's engine in progress() while A's helper
// may too and another thread makes control calls (one poller at a time:
// under ThreadSanitizer, tools/tsan.sh, no report); B runs on its helper
// alone.
TEST(CallerProgress, CallersHelpersAndControlCallsShareTheEngines) {
  Pair p(Context::Progress::kCaller);
  ASSERT_TRUE(p.ready());
  std::atomic<bool> stop{false};
  int reads = 0;
  std::thread control([&] {
    std::vector<std::uint8_t> scratch(4096);
    while (!stop.load()) {
      ibv_qp_attr attr{};
      p.qa->query(attr, 0);
      MemoryRegion* m = p.pda->reg_mr(scratch.data(), scratch.size(), IBV_ACCESS_LOCAL_WRITE);
      p.pda->dereg_mr(m);
      (void)p.a->stats();
      ++reads;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  const int done = transfer(p, 3000, true, std::chrono::seconds(60));
  stop = true;
  control.join();
  EXPECT_EQ(done, 3000);
  EXPECT_GT(reads, 0);
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.qb->counter("rx_bytes"), 1500u * 4096);
}

// Nobody calls progress(): the helpers alone carry every operation (a
// program asleep or blocked between its posts and polls).
TEST(CallerProgress, TheHelpersCarryWhatNoCallerPolls) {
  Pair p(Context::Progress::kCaller);
  ASSERT_TRUE(p.ready());
  EXPECT_EQ(transfer(p, 1000, false, std::chrono::seconds(60)), 1000);
  EXPECT_EQ(p.qb->counter("rx_bytes"), 500u * 4096);
}

// The hook given to start_workers runs around the engine's poll inside
// progress(), whichever thread calls it; none once stopped.
std::atomic<int> hook_before{0}, hook_after{0}, hook_here{0};
std::thread::id hook_thread;
TEST(CallerProgress, TheHookRunsInsideProgress) {
  hook_thread = std::this_thread::get_id();
  Context::WorkerHook hook;
  hook.before = [](void*, std::size_t worker) -> std::size_t {
    EXPECT_EQ(worker, 0u);
    hook_before.fetch_add(1);
    if (std::this_thread::get_id() == hook_thread) hook_here.fetch_add(1);
    return 0;
  };
  hook.run = [](void*, std::size_t) -> std::size_t {
    hook_after.fetch_add(1);
    return 0;
  };
  Pair p(Context::Progress::kCaller, hook);
  ASSERT_TRUE(p.ready());
  // A call that finds the helper polling returns at once (on a loaded
  // machine the helper may lose its core while it polls): calls until ten
  // of them ran the engine, for 10 s at most.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int calls = 0;
  while (hook_here.load() < 10 && std::chrono::steady_clock::now() < deadline) {
    p.a->progress();
    if (++calls % 64 == 0) std::this_thread::yield();
  }
  EXPECT_GE(hook_here.load(), 10) << "of " << calls << " calls on this thread";
  p.a->stop_workers();
  EXPECT_EQ(hook_before.load(), hook_after.load());
  const int stopped = hook_before.load();
  for (int i = 0; i < 10; ++i) p.a->progress();
  EXPECT_EQ(hook_before.load(), stopped);
}

}  // namespace
}  // namespace uroce::test
