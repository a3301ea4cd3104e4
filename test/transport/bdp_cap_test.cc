// The BDP cap (TransportOptions::bdp_packets, IRN's BDP-FC): a QP never has
// more request packets in flight than the cap, READs ask for at most half of
// it at a time, a loss is recovered without a burst past it, and the
// options are refused where they do not apply.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/rc_fixture.h"
#include "support/scripted_rc.h"
#include "support/test_seed.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

constexpr std::uint32_t kCap = 8;

ConnectParams capped() {
  ConnectParams p;
  p.transport.bdp_packets = kCap;
  return p;
}

// The data packets our QP sent so far (requests: WRITE or READ requests).
std::size_t requests_sent(ScriptedRc& r) {
  std::size_t n = 0;
  for (const wire::ParsedFrame& p : r.sent()) n += p.info->has(wire::kRequest);
  return n;
}

TEST(BdpCap, AWriteLongerThanTheCapKeepsAtMostTheCapInFlight) {
  ScriptedRc r(capped());
  std::vector<std::uint8_t> buf(65536, 0x3c);
  MemoryRegion* mr = r.dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  // 64 packets at the 1 KiB MTU.
  ASSERT_EQ(post_rdma(r.dev.qp, IBV_WR_RDMA_WRITE, buf.data(), 65536, mr->lkey, std::uint64_t{0x5000}, 0x77, 1), 0);
  r.run(8);
  EXPECT_EQ(requests_sent(r), kCap);
  // Four acknowledged: four more leave, never more than the cap beyond the ACK.
  r.inject(r.ack(kSqPsn + 3));
  r.run(8);
  EXPECT_EQ(requests_sent(r), kCap + 4);
  EXPECT_EQ(r.dev.qp->transport_options().bdp_packets, kCap);
}

TEST(BdpCap, AReadAsksForHalfTheCapAtATime) {
  ScriptedRc r(capped());
  std::vector<std::uint8_t> buf(32768);
  MemoryRegion* mr = r.dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_rdma(r.dev.qp, IBV_WR_RDMA_READ, buf.data(), 32768, mr->lkey, std::uint64_t{0x5000}, 0x77, 1), 0);
  r.run(8);
  const auto sent = r.sent();
  ASSERT_GE(sent.size(), 1u);
  std::uint32_t asked = 0;
  std::size_t requests = 0;
  for (const wire::ParsedFrame& p : sent) {
    if (!p.info->has(wire::kReadRequest)) continue;
    ++requests;
    asked += p.reth().dma_length.get();
    EXPECT_EQ(p.reth().dma_length.get(), kCap / 2 * 1024u) << "each READ request asks for half the cap";
  }
  // Two segments fill the cap; the rest waits for their answers.
  EXPECT_EQ(requests, 2u);
  EXPECT_EQ(asked, kCap * 1024u);
}

TEST(BdpCap, OptionsAreSetBeforeTheQpRunsAndOnlyWhereTheyApply) {
  ScriptedRc r;  // connected: RTS
  TransportOptions o;
  o.bdp_packets = 16;
  EXPECT_EQ(r.dev.qp->set_transport_options(o), EINVAL);
  EXPECT_NE(r.dev.ctx->last_error().find("RESET or INIT"), std::string::npos) << r.dev.ctx->last_error();
  QpInitAttr ud;
  ud.qp_type = IBV_QPT_UD;
  ud.send_cq = ud.recv_cq = r.dev.cq;
  ud.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  QueuePair* q = r.dev.pd->create_qp(ud);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->set_transport_options(o), EINVAL);
  QpInitAttr rc = ud;
  rc.qp_type = IBV_QPT_RC;
  QueuePair* fresh = r.dev.pd->create_qp(rc);
  ASSERT_NE(fresh, nullptr);
  TransportOptions spray;
  spray.spray_paths = 4;
  EXPECT_EQ(fresh->set_transport_options(spray), EINVAL) << "spraying needs selective repeat";
  EXPECT_EQ(fresh->set_transport_options(o), 0);
  EXPECT_EQ(fresh->transport_options().bdp_packets, 16u);
}

// A 1 MiB WRITE and READ under 2% loss both ways, capped at 8 packets:
// every byte arrives, and no more than the cap is ever in flight.
TEST(BdpCap, LossIsRecoveredWithinTheCap) {
  const std::uint64_t seed = test_seed();
  sim::Impairments loss;
  loss.loss = 0.02;
  RcPair p(seed, 2 << 20, capped(), loss, loss);
  ASSERT_EQ(p.connect_rc, 0);
  fill_pattern(p.bufa, 1 << 20, static_cast<std::uint32_t>(seed));
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 1 << 20, 0, 1), 0);
  fill_pattern(p.bufb + (1 << 20), 1 << 20, static_cast<std::uint32_t>(seed) + 1);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_READ, 1 << 20, 1 << 20, 1 << 20, 2), 0);
  const auto done = p.wait(p.cqa, 2);
  ASSERT_EQ(done.size(), 2u) << seed_note(seed);
  for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_str(wc.status) << "; " << seed_note(seed);
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb, 1 << 20), 0) << seed_note(seed);
  EXPECT_EQ(std::memcmp(p.bufa + (1 << 20), p.bufb + (1 << 20), 1 << 20), 0) << seed_note(seed);
  EXPECT_GT(p.qa->counter("retransmitted_packets"), 0u) << "the loss was felt; " << seed_note(seed);
  EXPECT_LE(testing::transport_qp(p.qa).comp.window, kCap);
}

}  // namespace
}  // namespace uroce::test
