// A ScriptedRc for provoking one exit of the transport's rules at a time:
// the scenario connects it with its own parameters, sets the stage, then
// calls mark() right before the frame (or call) that takes the exit; the
// counters, the frames sent and the completions are measured from there.
// Shared by transport_exits_test.cc (one case per exit row) and the rules'
// own tests (completer_rules_test.cc, responder_rules_test.cc).
#pragma once

#include <sys/mman.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "support/scripted_rc.h"
#include "transport/counters.h"
#include "support/work_requests.h"

namespace uroce::test {

inline constexpr std::uint64_t kInUse = 0x51;  // the oldest work request: the one an exit ends
inline constexpr std::uint64_t kNext = 0x52;   // posted after it: flushed when the QP goes to ERR
inline constexpr std::uint32_t kRegion = 1 << 16;

// A ScriptedRc connected with the scenario's parameters, a registered
// region (every access), and the mark.
class ExitRig {
 public:
  ScriptedRc& connect(const ConnectParams& p = ConnectParams{}) {
    params = p;
    rc = std::make_unique<ScriptedRc>(p);
    region.assign(kRegion, 0);
    mr = rc->dev.pd->reg_mr(region.data(), region.size(), kAll);
    EXPECT_NE(mr, nullptr);
    return *rc;
  }
  QueuePair* qp() const { return rc->dev.qp; }
  // After connect(): our QP becomes an XRC target QP (IBTA annex A14) of a
  // new XRC domain, connected as the RC QP was, with one XRC SRQ of the
  // rig's PD completing on the rig's CQ. The RC QP stays, unused.
  SharedReceiveQueue* make_xrc_target() {
    Context& ctx = *rc->dev.ctx;
    xrcd = ctx.open_xrcd();
    EXPECT_NE(xrcd, nullptr) << ctx.last_error();
    SrqInitAttr s;
    s.max_wr = 16;
    s.max_sge = 1;
    s.xrcd = xrcd;
    s.cq = rc->dev.cq;
    SharedReceiveQueue* srq = rc->dev.pd->create_srq(s);
    EXPECT_NE(srq, nullptr) << ctx.last_error();
    QpInitAttr a;
    a.send_cq = a.recv_cq = rc->dev.cq;
    a.qp_type = IBV_QPT_XRC_RECV;
    a.xrcd = xrcd;
    QueuePair* target = rc->dev.pd->create_qp(a);
    EXPECT_NE(target, nullptr) << ctx.last_error();
    EXPECT_EQ(connect_rc(target, ipv4_gid({10, 0, 0, rc->host}), kPeerQpn, kSqPsn, kRqPsn, params), 0)
        << ctx.last_error();
    rc->dev.qp = target;
    return srq;
  }
  std::uint64_t va(std::size_t offset = 0) const { return reinterpret_cast<std::uint64_t>(region.data() + offset); }

  void mark() {
    ibv_wc wc[64];
    while (rc->dev.cq->poll(64, wc) > 0) {
    }
    rc->dev.port.sent.clear();
    for (std::size_t i = 0; i < transport::kQpCounterCount; ++i) {
      at_mark[i] = counter(static_cast<transport::QpCounter>(i));
    }
    state_at_mark = qp()->state();
  }
  // A counter, read by its name as an application reads it.
  std::uint64_t counter(transport::QpCounter c) const { return qp()->counter(transport::qp_counter_name(c)); }
  std::uint64_t delta(transport::QpCounter c) const { return counter(c) - at_mark[static_cast<std::size_t>(c)]; }

  // Runs the engine until the exit's answers have left; keeps the completions.
  void settle() {
    rc->run(4);
    ibv_wc wc[64];
    for (int n; (n = rc->dev.cq->poll(64, wc)) > 0;) completions.insert(completions.end(), wc, wc + n);
  }

  // --- The peer's side --------------------------------------------------------------

  // A request at `psn` whose RETH names `len` bytes at `va` under `rkey`.
  wire::FrameSpec request(wire::Opcode op, std::uint32_t psn, std::uint64_t at, std::uint32_t rkey, std::uint32_t len) {
    wire::FrameSpec f = rc->spec(op, psn);
    f.bth.set_ack_req(true);
    f.reth.va.set(at);
    f.reth.rkey.set(rkey);
    f.reth.dma_length.set(len);
    return f;
  }
  // Selective repeat's WRITE Only of `len` bytes at `at` (SRETH: the whole
  // message, its first PSN `psn`).
  wire::FrameSpec sr_write_only(std::uint32_t psn, std::uint64_t at, std::uint32_t len) {
    wire::FrameSpec f = request(static_cast<wire::Opcode>(0xca), psn, at, mr->rkey, len);
    f.sreth.length.set(len);
    f.sreth.flags = wire::kSrethLast;
    f.sreth.first_psn.set(psn);
    return f;
  }
  wire::FrameSpec read(std::uint32_t psn, std::size_t offset = 0, std::uint32_t len = 8) {
    return request(wire::Opcode::kRcReadRequest, psn, va(offset), mr->rkey, len);
  }
  wire::FrameSpec fetch_add(std::uint32_t psn, std::uint64_t at) {
    wire::FrameSpec f = rc->spec(wire::Opcode::kRcFetchAdd, psn);
    f.atomic_eth.va.set(at);
    f.atomic_eth.rkey.set(mr->rkey);
    f.atomic_eth.swap_add.set(1);
    return f;
  }
  void send_only(std::uint32_t psn, std::size_t len = 64) {
    wire::FrameSpec f = rc->spec(wire::Opcode::kRcSendOnly, psn);
    f.bth.set_ack_req(true);
    rc->inject(f, std::vector<std::uint8_t>(len, 0x5e));
  }

  // --- Our side ---------------------------------------------------------------------

  // Receives kInUse (`len` bytes at `at` under `lkey`; the region's by
  // default) and kNext.
  void post_receives(std::uint32_t len = 4096, std::uint32_t lkey = 0, void* at = nullptr) {
    EXPECT_EQ(post_recv_one(qp(), at != nullptr ? at : region.data(), len, lkey != 0 ? lkey : mr->lkey, kInUse), 0);
    EXPECT_EQ(post_recv_one(qp(), region.data() + 8192, 4096, mr->lkey, kNext), 0);
  }
  // One WRITE, READ or SEND of `len` bytes between `local` (the region's
  // second half by default) and the peer's 0x5000 under its rkey 0x77 (the
  // peer is scripted: any will do).
  int post_send(ibv_wr_opcode op, std::uint32_t len, std::uint64_t wr_id, MemoryRegion* local = nullptr) {
    void* at = local != nullptr ? local->addr : region.data() + kRegion / 2;
    const std::uint32_t lkey = local != nullptr ? local->lkey : mr->lkey;
    return post_rdma(qp(), op, at, len, lkey, std::uint64_t{0x5000}, 0x77, wr_id);
  }
  // kInUse (from `local`, if given) and kNext, both sent.
  void post_sends(ibv_wr_opcode op, std::uint32_t len = 64, MemoryRegion* local = nullptr) {
    EXPECT_EQ(post_send(op, len, kInUse, local), 0);
    EXPECT_EQ(post_send(op, len, kNext), 0);
    rc->run(2);
  }
  void enter_error() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    EXPECT_EQ(qp()->modify(a, IBV_QP_STATE), 0);
    rc->run(1);
  }

  ConnectParams params;
  XrcDomain* xrcd = nullptr;  // make_xrc_target's
  std::unique_ptr<ScriptedRc> rc;
  std::vector<std::uint8_t> region;
  MemoryRegion* mr = nullptr;
  std::array<std::uint64_t, transport::kQpCounterCount> at_mark{};
  ibv_qp_state state_at_mark = IBV_QPS_RESET;
  std::vector<ibv_wc> completions;
};

// A second region of the rig's PD, for scenarios that deregister one.
struct Doomed {
  Doomed(ExitRig& rig, int access) : bytes(kRegion, 0xd0), pd(rig.rc->dev.pd) {
    mr = pd->reg_mr(bytes.data(), bytes.size(), access);
    EXPECT_NE(mr, nullptr);
  }
  void dereg() { EXPECT_EQ(pd->dereg_mr(mr), 0); }
  std::vector<std::uint8_t> bytes;
  ProtectionDomain* pd;
  MemoryRegion* mr = nullptr;
};

// An on-demand region of the rig's PD over two pages, the second unmapped
// after registering (hole()): what an ODP access must refuse without a fault.
struct Unmapped {
  Unmapped(ExitRig& rig, int access) : pd(rig.rc->dev.pd) {
    void* p = mmap(nullptr, 2 * kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base = static_cast<std::uint8_t*>(p);
    mr = pd->reg_mr(base, 2 * kPageBytes, access | IBV_ACCESS_ON_DEMAND);
    EXPECT_NE(mr, nullptr);
    EXPECT_EQ(munmap(hole(), kPageBytes), 0);
  }
  ~Unmapped() { munmap(base, kPageBytes); }
  Unmapped(const Unmapped&) = delete;
  Unmapped& operator=(const Unmapped&) = delete;
  std::uint8_t* hole() const { return base + kPageBytes; }
  // The region as an SGE at the hole would name it.
  MemoryRegion at_hole() const {
    MemoryRegion m = *mr;
    m.addr = hole();
    return m;
  }
  static constexpr std::size_t kPageBytes = 4096;
  ProtectionDomain* pd;
  std::uint8_t* base = nullptr;
  MemoryRegion* mr = nullptr;
};

// --- Regions deregistered in flight, on a simulated pair (RcPair) ----------------------

// Steps the pair until `cond` holds, then returns; fails the test if it never does.
template <typename Pair, typename Cond>
void run_until(Pair& p, Cond cond) {
  ASSERT_TRUE(p.net.run_until(cond, 10'000'000'000ull));
}

inline bool any_byte(const std::uint8_t* p, std::size_t n, std::uint8_t v) {
  return std::find(p, p + n, v) != p + n;
}

}  // namespace uroce::test
