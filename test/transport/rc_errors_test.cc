// Error cases of the RC transport: each produces the exact NAK on the wire
// and the exact completion status on both sides (IBTA 9.7.5.2 NAK codes,
// 11.6.2 completion statuses).
#include <gtest/gtest.h>

#include <cstring>

#include "support/rc_fixture.h"
#include "transport/rnr.h"
#include "transport/rules.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

struct Seen {
  std::uint8_t opcode;
  std::uint32_t psn;
  std::uint8_t syndrome;  // for ACK/NAK
};

// Records the BTH opcode, PSN and AETH syndrome of every frame each side sends.
struct Wire {
  explicit Wire(RcPair& p) {
    p.net.link.observe([this](int from, std::span<const std::uint8_t> f) {
      wire::ParsedFrame parsed;
      if (wire::parse_frame(f, parsed) != wire::ParseStatus::kOk) return;
      Seen s{parsed.opcode, parsed.bth().psn.get(), 0};
      if (parsed.has(wire::ExtHdr::kAeth)) s.syndrome = parsed.aeth().syndrome;
      sent[from].push_back(s);
    });
  }
  // The ACK/NAK packets side `from` sent with this syndrome.
  std::vector<Seen> with_syndrome(int from, std::uint8_t syndrome) const {
    std::vector<Seen> v;
    for (const Seen& s : sent[from]) {
      if (s.opcode == 0x11 && s.syndrome == syndrome) v.push_back(s);
    }
    return v;
  }
  std::vector<Seen> sent[2];
};

constexpr std::uint8_t kNakInvalidRequest = 0x61;
constexpr std::uint8_t kNakRemoteAccess = 0x62;
constexpr std::uint8_t kNakRemoteOperational = 0x63;

class RcErrors : public ::testing::Test {
 protected:
  RcErrors() : p(5, 1 << 20), wire(p) {}

  // Posts one request from A and runs until A completes it; returns A's completion.
  ibv_wc run_one(ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(p.qa->post_send(&wr, &bad), 0);
    const auto got = p.wait(p.cqa, 1);
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? ibv_wc{} : got[0];
  }

  ibv_send_wr rdma(ibv_wr_opcode op, std::uint64_t remote, std::uint32_t rkey, std::uint32_t len) {
    sge = ibv_sge{reinterpret_cast<std::uint64_t>(p.bufa), len, p.mra->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 42;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    return wr;
  }

  ibv_send_wr atomic(std::uint64_t remote, std::uint32_t rkey) {
    sge = ibv_sge{reinterpret_cast<std::uint64_t>(p.bufa), 8, p.mra->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 43;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = remote;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = 1;
    return wr;
  }

  // After a fatal NAK: both QPs in ERR, B's posted receive flushed, and a
  // later request on A flushed too.
  void expect_both_in_error(std::uint64_t flushed_recv_wr_id) {
    EXPECT_EQ(p.qa->state(), IBV_QPS_ERR);
    EXPECT_EQ(p.qb->state(), IBV_QPS_ERR);
    const auto b = p.wait(p.cqb, 1, 1'000'000);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0].wr_id, flushed_recv_wr_id);
    EXPECT_EQ(b[0].status, IBV_WC_WR_FLUSH_ERR);
    ibv_send_wr later = rdma(IBV_WR_RDMA_WRITE, reinterpret_cast<std::uint64_t>(p.bufb), p.mrb->rkey, 8);
    later.wr_id = 99;
    const ibv_wc wc = run_one(later);
    EXPECT_EQ(wc.wr_id, 99u);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  }

  // The single NAK B sent, for the request's PSN (0x100 is A's first PSN).
  void expect_nak(std::uint8_t syndrome, std::uint32_t psn = 0x100) {
    const auto naks = wire.with_syndrome(1, syndrome);
    ASSERT_EQ(naks.size(), 1u) << "syndrome 0x" << std::hex << int(syndrome);
    EXPECT_EQ(naks[0].psn, psn);
  }

  RcPair p;
  Wire wire;
  ibv_sge sge{};
};

TEST_F(RcErrors, WrongRkeyIsRemoteAccessError) {
  ASSERT_EQ(p.post_recv_b(0, 64, 7), 0);
  auto wr = rdma(IBV_WR_RDMA_WRITE, reinterpret_cast<std::uint64_t>(p.bufb), p.mrb->rkey ^ 0x100, 64);
  const ibv_wc wc = run_one(wr);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << wc_status_str(wc.status);
  EXPECT_EQ(wc.wr_id, 42u);
  expect_nak(kNakRemoteAccess);
  expect_both_in_error(7);
}

TEST_F(RcErrors, OutOfBoundsWriteIsRemoteAccessError) {
  ASSERT_EQ(p.post_recv_b(0, 64, 7), 0);
  auto wr = rdma(IBV_WR_RDMA_WRITE, reinterpret_cast<std::uint64_t>(p.bufb) + p.size - 100, p.mrb->rkey, 200);
  EXPECT_EQ(run_one(wr).status, IBV_WC_REM_ACCESS_ERR);
  expect_nak(kNakRemoteAccess);
  std::uint8_t zero[100] = {};
  EXPECT_EQ(std::memcmp(p.bufb + p.size - 100, zero, 100), 0) << "nothing may be placed";
  expect_both_in_error(7);
}

TEST_F(RcErrors, WriteWithoutRemoteWriteRightIsRemoteAccessError) {
  ASSERT_EQ(p.post_recv_b(0, 64, 7), 0);
  MemoryRegion* ro = p.pdb->reg_mr(p.bufb + 65536, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(ro, nullptr);
  auto wr = rdma(IBV_WR_RDMA_WRITE, reinterpret_cast<std::uint64_t>(p.bufb) + 65536, ro->rkey, 64);
  EXPECT_EQ(run_one(wr).status, IBV_WC_REM_ACCESS_ERR);
  expect_nak(kNakRemoteAccess);
  expect_both_in_error(7);
}

TEST_F(RcErrors, RkeyOfAnotherPdIsRemoteAccessError) {
  ASSERT_EQ(p.post_recv_b(0, 64, 7), 0);
  ProtectionDomain* other = p.net.b->alloc_pd();
  MemoryRegion* mr = other->reg_mr(p.bufb + 65536, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr);
  auto wr = rdma(IBV_WR_RDMA_WRITE, reinterpret_cast<std::uint64_t>(p.bufb) + 65536, mr->rkey, 64);
  EXPECT_EQ(run_one(wr).status, IBV_WC_REM_ACCESS_ERR);
  expect_nak(kNakRemoteAccess);
  expect_both_in_error(7);
}

TEST_F(RcErrors, ReadWithoutRemoteReadRightIsRemoteAccessError) {
  ASSERT_EQ(p.post_recv_b(0, 64, 7), 0);
  MemoryRegion* wo = p.pdb->reg_mr(p.bufb + 65536, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  auto wr = rdma(IBV_WR_RDMA_READ, reinterpret_cast<std::uint64_t>(p.bufb) + 65536, wo->rkey, 64);
  EXPECT_EQ(run_one(wr).status, IBV_WC_REM_ACCESS_ERR);
  expect_nak(kNakRemoteAccess);
  expect_both_in_error(7);
}

TEST_F(RcErrors, AtomicWithoutRemoteAtomicRightIsRemoteAccessError) {
  ASSERT_EQ(p.post_recv_b(0, 64, 7), 0);
  MemoryRegion* mr = p.pdb->reg_mr(p.bufb + 65536, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  auto wr = atomic(reinterpret_cast<std::uint64_t>(p.bufb) + 65536, mr->rkey);
  EXPECT_EQ(run_one(wr).status, IBV_WC_REM_ACCESS_ERR);
  expect_nak(kNakRemoteAccess);
  expect_both_in_error(7);
}

TEST_F(RcErrors, MisalignedAtomicIsInvalidRequest) {
  ASSERT_EQ(p.post_recv_b(0, 64, 7), 0);
  auto wr = atomic(reinterpret_cast<std::uint64_t>(p.bufb) + 4, p.mrb->rkey);
  EXPECT_EQ(run_one(wr).status, IBV_WC_REM_INV_REQ_ERR);
  expect_nak(kNakInvalidRequest);
  expect_both_in_error(7);
}

TEST_F(RcErrors, SendLongerThanTheReceiveIsInvalidRequestAndLocalLengthError) {
  ASSERT_EQ(p.post_recv_b(0, 1500, 7), 0);
  ASSERT_EQ(p.post_recv_b(4096, 1500, 8), 0);
  EXPECT_EQ(p.post_send(IBV_WR_SEND, 0, 3000, 0, 42), 0);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_REM_INV_REQ_ERR) << wc_status_str(a[0].status);
  const auto b = p.wait(p.cqb, 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].wr_id, 7u);
  EXPECT_EQ(b[0].status, IBV_WC_LOC_LEN_ERR) << wc_status_str(b[0].status);
  EXPECT_EQ(b[1].wr_id, 8u);
  EXPECT_EQ(b[1].status, IBV_WC_WR_FLUSH_ERR);
  // 3000 bytes at MTU 1024: the NAK names the second packet, the first that overflows.
  expect_nak(kNakInvalidRequest, 0x101);
  EXPECT_EQ(p.qb->state(), IBV_QPS_ERR);
  EXPECT_EQ(p.qa->state(), IBV_QPS_ERR);
}

TEST_F(RcErrors, BadReceiveLkeyIsRemoteOperationalError) {
  ibv_sge s{reinterpret_cast<std::uint64_t>(p.bufb), 64, p.mrb->lkey ^ 0x100};
  ibv_recv_wr rw{};
  rw.wr_id = 7;
  rw.sg_list = &s;
  rw.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(p.qb->post_recv(&rw, &bad), 0);
  EXPECT_EQ(p.post_send(IBV_WR_SEND, 0, 64, 0, 42), 0);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_REM_OP_ERR) << wc_status_str(a[0].status);
  const auto b = p.wait(p.cqb, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].status, IBV_WC_LOC_PROT_ERR);
  expect_nak(kNakRemoteOperational);
}

TEST_F(RcErrors, NoReceiveIsRnrNakThenSuccessOncePosted) {
  fill_pattern(p.bufa, 64, 1);
  EXPECT_EQ(p.post_send(IBV_WR_SEND, 0, 64, 0, 42), 0);
  // Run 2 ms of virtual time without a receive: RNR NAKs (timer code 12, 0.64 ms).
  p.net.run_until([] { return false; }, 2'000'000);
  const auto rnr = wire.with_syndrome(1, 0x20 | 12);
  ASSERT_GE(rnr.size(), 2u);
  EXPECT_EQ(rnr[0].psn, 0x100u);
  EXPECT_GE(p.qa->counter("rnr_naks_received"), 2u);
  ibv_wc wc;
  EXPECT_EQ(p.cqa->poll(1, &wc), 0) << "no completion while RNR retries go on";
  ASSERT_EQ(p.post_recv_b(0, 64, 7), 0);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_SUCCESS);
  const auto b = p.wait(p.cqb, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb, 64), 0);
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS);
}

TEST(RcErrorsRetry, RnrRetryZeroEndsInRnrRetryExceeded) {
  ConnectParams params;
  params.rnr_retry = 0;
  RcPair p(6, 1 << 16, params);
  Wire wire(p);
  ASSERT_EQ(p.connect_rc, 0);
  EXPECT_EQ(p.post_send(IBV_WR_SEND, 0, 64, 0, 42), 0);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_RNR_RETRY_EXC_ERR) << wc_status_str(a[0].status);
  EXPECT_EQ(wire.with_syndrome(1, 0x20 | 12).size(), 1u);
  EXPECT_EQ(p.qa->state(), IBV_QPS_ERR);
  // The responder is fine: it only said "not ready".
  EXPECT_EQ(p.qb->state(), IBV_QPS_RTS);
}

TEST(RcErrorsRetry, DeadPeerEndsInRetryExceededAfterRetryCntTimeouts) {
  ConnectParams params;
  params.retry_cnt = 3;
  params.timeout = 10;  // 4.096 us * 2^10 = 4.19 ms
  sim::Impairments dead;
  dead.loss = 1.0;
  RcPair p(7, 1 << 16, params, dead, {});
  ASSERT_EQ(p.connect_rc, 0);
  const std::uint64_t start = p.net.clock.now_ns();
  EXPECT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 5000, 0, 42), 0);
  EXPECT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 10, 0, 43), 0);
  const auto a = p.wait(p.cqa, 2);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].wr_id, 42u);
  EXPECT_EQ(a[0].status, IBV_WC_RETRY_EXC_ERR) << wc_status_str(a[0].status);
  EXPECT_EQ(a[1].wr_id, 43u);
  EXPECT_EQ(a[1].status, IBV_WC_WR_FLUSH_ERR);
  // The first send and retry_cnt retries, each ending in a timeout.
  EXPECT_EQ(p.qa->counter("timeouts"), 4u);
  const double elapsed_ms = static_cast<double>(p.net.clock.now_ns() - start) / 1e6;
  EXPECT_NEAR(elapsed_ms, 4 * transport::ack_timeout_ns(10) / 1e6, 0.5);
  // Each try sent the whole message (5 packets at MTU 1024) and the next one.
  EXPECT_EQ(p.net.link.stats(0).sent, 4u * 6u);
  EXPECT_EQ(p.qa->state(), IBV_QPS_ERR);
}

// The device's floor under the local ACK timeout (PortConfig::min_ack_timeout):
// a QP with a shorter timeout waits the floor's time before each resend, one
// with a longer one keeps its own, and query_qp reports what was set.
double retry_exceeded_after_ms(std::uint8_t timeout, std::uint8_t floor) {
  ConnectParams params;
  params.retry_cnt = 3;
  params.timeout = timeout;
  sim::Impairments dead;
  dead.loss = 1.0;
  RcPair p(8, 1 << 16, params, dead, {}, 1024, nullptr, floor);
  EXPECT_EQ(p.connect_rc, 0);
  ibv_qp_attr attr{};
  EXPECT_EQ(p.qa->query(attr, IBV_QP_TIMEOUT), 0);
  EXPECT_EQ(attr.timeout, timeout);
  const std::uint64_t start = p.net.clock.now_ns();
  EXPECT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 100, 0, 42), 0);
  const auto a = p.wait(p.cqa, 1, 3'600'000'000'000ull);
  EXPECT_EQ(a.size(), 1u);
  if (a.empty()) return -1;
  EXPECT_EQ(a[0].status, IBV_WC_RETRY_EXC_ERR) << wc_status_str(a[0].status);
  EXPECT_EQ(p.qa->counter("timeouts"), 4u);
  return static_cast<double>(p.net.clock.now_ns() - start) / 1e6;
}

TEST(RcErrorsRetry, DeviceFloorLengthensAShorterLocalAckTimeout) {
  EXPECT_NEAR(retry_exceeded_after_ms(10, 0), 4 * transport::ack_timeout_ns(10) / 1e6, 0.5);
  EXPECT_NEAR(retry_exceeded_after_ms(10, 14), 4 * transport::ack_timeout_ns(14) / 1e6, 0.5);
  EXPECT_NEAR(retry_exceeded_after_ms(14, 10), 4 * transport::ack_timeout_ns(14) / 1e6, 0.5);
  EXPECT_NEAR(retry_exceeded_after_ms(12, 12), 4 * transport::ack_timeout_ns(12) / 1e6, 0.5);
}

TEST(RcErrorsRetry, DeviceFloorLeavesAnInfiniteTimeoutInfinite) {
  ConnectParams params;
  params.timeout = 0;  // infinite: the QP waits for its peer for ever
  sim::Impairments dead;
  dead.loss = 1.0;
  RcPair p(9, 1 << 16, params, dead, {}, 1024, nullptr, 10);
  ASSERT_EQ(p.connect_rc, 0);
  EXPECT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 100, 0, 42), 0);
  EXPECT_TRUE(p.wait(p.cqa, 1, 60'000'000'000ull).empty());
  EXPECT_EQ(p.qa->counter("timeouts"), 0u);
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS);
}

TEST(RcErrorsRetry, DeviceFloorPastThirtyOneIsRefusedAtOpen) {
  const std::uint8_t mac0[6] = {2, 0, 0, 0, 0, 1};
  const std::uint8_t mac1[6] = {2, 0, 0, 0, 0, 2};
  sim::VirtualClock clock;
  sim::SimLink link(clock, 1, mac0, mac1, {}, {});
  PortConfig port;
  port.io = &link.port(0);
  port.clock = &clock;
  port.min_ack_timeout = 32;
  std::string error;
  EXPECT_EQ(Context::open(port, error), nullptr);
  EXPECT_NE(error.find("min_ack_timeout 32"), std::string::npos) << error;
  port.min_ack_timeout = 31;
  EXPECT_NE(Context::open(port, error), nullptr) << error;
}

}  // namespace
}  // namespace uroce::test
