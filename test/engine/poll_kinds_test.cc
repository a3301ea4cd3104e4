// How Context::progress(ProgressFor) orders a poll's work (engine::Poll),
// against a peer whose requests the test writes (ScriptedRc):
// - kPolling holds a QP's lone ACK for one progress() call, whatever that
//   call's kind, and never a NAK;
// - kPosted sends what was posted before it takes frames, then answers
//   what it took in the same call;
// - a QP destroyed or moved to ERR first sends the ACK its last poll held;
// - requests_received() counts the requests handed to QPs;
// - a QP with everything acknowledged keeps no timer entry.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/scripted_rc.h"
#include "support/work_requests.h"
#include "verbs/internal.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

using For = Context::ProgressFor;
using wire::Opcode;

constexpr std::uint8_t kAck = 0x1f;

struct Rig {
  Rig() {
    mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
    EXPECT_NE(mr, nullptr);
  }
  // The peer's WRITE Only of 64 bytes of `fill` at the region's start
  // (AckReq set), with PSN `psn` and rkey `rkey` (0: the region's).
  void write(std::uint32_t psn, std::uint8_t fill, std::uint32_t rkey = 0) {
    wire::FrameSpec w = r.spec(Opcode::kRcWriteOnly, psn);
    w.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
    w.reth.rkey.set(rkey != 0 ? rkey : mr->rkey);
    w.reth.dma_length.set(64);
    w.bth.set_ack_req(true);
    r.inject(w, std::vector<std::uint8_t>(64, fill));
  }
  ScriptedRc r;
  std::vector<std::uint8_t> region = std::vector<std::uint8_t>(4096, 0);
  MemoryRegion* mr = nullptr;
};

bool is_ack(const wire::ParsedFrame& p, std::uint32_t psn, std::uint8_t syndrome = kAck) {
  return p.bth().opcode == static_cast<std::uint8_t>(Opcode::kRcAcknowledge) && p.bth().psn.get() == psn &&
         p.aeth().syndrome == syndrome;
}

TEST(PollKinds, APollingProgressHoldsALoneAckForOneCall) {
  Rig g;
  EXPECT_EQ(g.r.dev.ctx->requests_received(), 0u);
  g.write(kRqPsn, 0x5a);
  EXPECT_NE(g.r.dev.ctx->progress(For::kPolling), 0u);
  EXPECT_EQ(g.region[63], 0x5a) << "the WRITE is placed in the poll that holds its ACK";
  EXPECT_EQ(g.r.dev.ctx->requests_received(), 1u);
  EXPECT_TRUE(g.r.sent().empty()) << "the ACK went out in the poll that took the WRITE";
  // The next call sends it, even a holding one: an ACK waits one call.
  EXPECT_NE(g.r.dev.ctx->progress(For::kPolling), 0u);
  const auto sent = g.r.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn));
  EXPECT_EQ(g.r.dev.qp->counter("acks_sent"), 1u);
}

TEST(PollKinds, AnAckHeldWhileMoreRequestsComeStillLeavesAtTheNextCall) {
  Rig g;
  // Each call takes one more WRITE: the held ACK moves forward (one ACK
  // answers both) but is not held a second time.
  g.write(kRqPsn, 1);
  g.r.dev.ctx->progress(For::kPolling);
  EXPECT_TRUE(g.r.sent().empty());
  g.write(kRqPsn + 1, 2);
  g.r.dev.ctx->progress(For::kPolling);
  auto sent = g.r.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn + 1)) << "the ACK covers both WRITEs";
  g.r.dev.port.sent.clear();
  g.write(kRqPsn + 2, 3);
  g.r.dev.ctx->progress(For::kPolling);
  EXPECT_TRUE(g.r.sent().empty()) << "a new ACK after one went out may wait again";
  g.r.dev.ctx->progress(For::kAny);
  sent = g.r.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn + 2));
}

TEST(PollKinds, APlainProgressNeverHoldsAnAck) {
  Rig g;
  g.write(kRqPsn, 7);
  g.r.dev.ctx->progress();
  const auto sent = g.r.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn));
}

TEST(PollKinds, ANakIsNeverHeld) {
  Rig g;
  g.write(kRqPsn, 7, g.mr->rkey ^ 0x100);  // a key no region has
  g.r.dev.ctx->progress(For::kPolling);
  const auto sent = g.r.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn, nak(wire::NakCode::kRemoteAccessError)))
      << "syndrome " << int{sent[0].aeth().syndrome};
}

TEST(PollKinds, APostedRequestLeavesInOneBurstWithTheHeldAck) {
  Rig g;
  g.write(kRqPsn, 9);
  g.r.dev.ctx->progress(For::kPolling);
  ASSERT_TRUE(g.r.sent().empty());
  ASSERT_EQ(post_rdma(g.r.dev.qp, IBV_WR_RDMA_WRITE, g.region.data() + 1024, 8, g.mr->lkey, 0x1000, 0x77), 0);
  g.r.dev.ctx->progress(For::kPosted);
  const auto sent = g.r.sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn)) << "answers go ahead of requests in a burst";
  EXPECT_EQ(sent[1].bth().opcode, static_cast<std::uint8_t>(Opcode::kRcWriteOnly));
  EXPECT_EQ(sent[1].bth().psn.get(), kSqPsn);
  EXPECT_EQ(g.r.dev.port.bursts, 1u) << "the ACK and the WRITE in one burst";
}

TEST(PollKinds, APostedProgressSendsBeforeItReceivesThenAnswers) {
  Rig g;
  ASSERT_EQ(post_rdma(g.r.dev.qp, IBV_WR_RDMA_WRITE, g.region.data() + 1024, 8, g.mr->lkey, 0x1000, 0x77), 0);
  g.write(kRqPsn, 4);  // waits in the port as the request is posted
  g.r.dev.ctx->progress(For::kPosted);
  const auto sent = g.r.sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].bth().opcode, static_cast<std::uint8_t>(Opcode::kRcWriteOnly)) << "the posted WRITE first";
  EXPECT_TRUE(is_ack(sent[1], kRqPsn)) << "then, in the same call, the answer to what came";
  EXPECT_EQ(g.region[0], 4);
}

TEST(PollKinds, DestroyingAQpSendsTheAckItsLastPollHeld) {
  Rig g;
  g.write(kRqPsn, 3);
  g.r.dev.ctx->progress(For::kPolling);
  ASSERT_TRUE(g.r.sent().empty());
  ASSERT_EQ(g.r.dev.pd->destroy_qp(g.r.dev.qp), 0) << g.r.dev.ctx->last_error();
  g.r.dev.qp = nullptr;
  const auto sent = g.r.sent();
  ASSERT_EQ(sent.size(), 1u) << "the peer's WRITE is acknowledged before the QP goes";
  EXPECT_TRUE(is_ack(sent[0], kRqPsn));
}

TEST(PollKinds, MovingAQpToErrorSendsTheAckItsLastPollHeld) {
  Rig g;
  g.write(kRqPsn, 3);
  g.r.dev.ctx->progress(For::kPolling);
  ASSERT_TRUE(g.r.sent().empty());
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(g.r.dev.qp->modify(attr, IBV_QP_STATE), 0) << g.r.dev.ctx->last_error();
  const auto sent = g.r.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(is_ack(sent[0], kRqPsn));
}

// Once its last request is acknowledged, a QP's retransmit deadline leaves
// the timer wheel at once: left to fire, it would bring the QP back for
// nothing (with thousands of QPs, every message's QP a second time, cold).
TEST(PollKinds, AQpWithEverythingAcknowledgedKeepsNoTimer) {
  ScriptedRc r;
  std::vector<std::uint8_t> buf(64, 0x3c);
  MemoryRegion* mr = r.dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  engine::Engine& e = internal::engine_of(*r.dev.ctx);
  ASSERT_EQ(post_rdma(r.dev.qp, IBV_WR_RDMA_WRITE, buf.data(), 64, mr->lkey, std::uint64_t{0x5000}, 0x77, 1), 0);
  r.run(2);
  ASSERT_EQ(r.sent().size(), 1u);
  EXPECT_NE(e.next_timer_ns(), 0u) << "a request in flight has its deadline";
  r.inject(r.ack(kSqPsn));
  r.run(2);
  ibv_wc wc{};
  ASSERT_EQ(r.dev.cq->poll(1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(e.next_timer_ns(), 0u) << "nothing in flight, yet a deadline is kept";
}

}  // namespace
}  // namespace uroce::test
