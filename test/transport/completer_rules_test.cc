// The requester's and completer's rules (lib/transport/rules.h,
// kCompleterExits), one case family per rule, against a peer that answers
// with frames the test writes (ScriptedRc) or on a simulated link (RcPair):
// responses for nothing outstanding or for PSNs never sent, reserved AETH
// syndromes, and our own regions deregistered while our WRITE or READ uses
// them. The one case per exit row that reads its counter is in
// transport_exits_test.cc; these push each rule further.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "support/exit_rig.h"
#include "support/rc_fixture.h"
#include "support/scripted_rc.h"
#include "support/work_requests.h"
#include "verbs/verbs_impl.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

using wire::NakCode;
using wire::Opcode;

int poll_all(CompletionQueue* cq, std::vector<ibv_wc>& out) {
  ibv_wc wc[64];
  int total = 0;
  for (int n; (n = cq->poll(64, wc)) > 0;) {
    out.insert(out.end(), wc, wc + n);
    total += n;
  }
  return total;
}

// --- not_sent, stale (9.7.5.1): a response answers only a PSN that was sent -------------

struct Stray {
  const char* name;
  Opcode opcode;
  std::uint8_t syndrome;
};

const Stray kStrays[] = {
    {"ACK", Opcode::kRcAcknowledge, 0x1f},
    {"RNR NAK", Opcode::kRcAcknowledge, wire::make_syndrome(wire::AethKind::kRnrNak, 1)},
    {"sequence NAK", Opcode::kRcAcknowledge, nak(NakCode::kPsnSequenceError)},
    {"NAK invalid request", Opcode::kRcAcknowledge, nak(NakCode::kInvalidRequest)},
    {"NAK remote access", Opcode::kRcAcknowledge, nak(NakCode::kRemoteAccessError)},
    {"NAK remote operational", Opcode::kRcAcknowledge, nak(NakCode::kRemoteOperationalError)},
    {"READ response only", Opcode::kRcReadResponseOnly, 0x1f},
    {"atomic ACK", Opcode::kRcAtomicAcknowledge, 0x1f},
};

// A QP with nothing outstanding, and no retries left to spend, takes every
// kind of response at every PSN from its next one on: none completes a work
// request, moves the QP or costs time (each was a phantom completion and a
// 2^32-entry flush before).
TEST(CompleterRules, ResponsesToAnIdleQpAreDroppedAndCounted) {
  ConnectParams params;
  params.retry_cnt = 0;
  params.rnr_retry = 0;
  ScriptedRc r(params);
  QueuePair* qp = r.dev.qp;
  std::uint64_t injected = 0;
  for (const Stray& s : kStrays) {
    for (const std::uint32_t psn : {kSqPsn, kSqPsn + 1, kSqPsn + 100000}) {
      wire::FrameSpec f = r.spec(s.opcode, psn);
      f.aeth.syndrome = s.syndrome;
      r.inject(f, s.opcode == Opcode::kRcReadResponseOnly ? std::vector<std::uint8_t>(8, 1)
                                                          : std::vector<std::uint8_t>{});
      ++injected;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  r.run(8);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<ibv_wc> wc;
  EXPECT_EQ(poll_all(r.dev.cq, wc), 0);
  EXPECT_EQ(qp->counter("drop_response_not_sent"), injected);
  EXPECT_EQ(qp->counter("completions"), 0u);
  EXPECT_EQ(qp->counter("flushed"), 0u);
  EXPECT_EQ(qp->state(), IBV_QPS_RTS);
  EXPECT_LT(secs, 0.5);
  // A stale one (older than anything outstanding) is a duplicate, not a drop
  // of this kind.
  r.inject(r.ack(kSqPsn - 2));
  r.run(2);
  EXPECT_EQ(qp->counter("duplicate_responses"), 1u);
  EXPECT_EQ(qp->counter("drop_response_not_sent"), injected);
  // The QP still works: a WRITE leaves with the next PSN and completes.
  std::vector<std::uint8_t> buf(64, 7);
  MemoryRegion* mr = r.dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_rdma(qp, IBV_WR_RDMA_WRITE, buf.data(), 64, mr->lkey, std::uint64_t{0x5000}, 0x77, 5), 0);
  r.run(2);
  const auto sent = r.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].bth().psn.get(), kSqPsn);
  r.inject(r.ack(kSqPsn));
  r.run(2);
  ASSERT_EQ(poll_all(r.dev.cq, wc), 1);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
}

// One NAK at an idle QP: it completes no work request that was never
// posted and flushes nothing (rxe: get_wqe() finds no WQE, the packet is
// done with). It once flushed 2^32-1 phantom completions into the CQ.
TEST(CompleterRules, ANakForAnIdleQpIsDropped) {
  ScriptedRc r;
  QueuePair* qp = r.dev.qp;
  auto s = r.spec(wire::Opcode::kRcAcknowledge, kSqPsn);
  s.aeth.syndrome = nak(NakCode::kInvalidRequest);
  r.inject(s);
  const auto t0 = std::chrono::steady_clock::now();
  r.run(1);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ibv_wc wc[64];
  const int n = r.dev.cq->poll(64, wc);
  std::printf("  one NAK to an idle QP: progress() took %.2f s, poll() = %d, flushed counter = %llu, state %d\n",
              secs, n, static_cast<unsigned long long>(qp->counter("flushed")), qp->state());
  EXPECT_EQ(n, 0) << "no work request was posted, so nothing may complete";
  EXPECT_EQ(qp->counter("flushed"), 0u);
  EXPECT_EQ(qp->state(), IBV_QPS_RTS) << "a NAK that answers no request is ignored";
  EXPECT_LT(secs, 0.5);
}

// The same through an RNR NAK once rnr_retry is spent (rnr_retry = 0).
TEST(CompleterRules, AnRnrNakForAnIdleQpWithNoRnrRetryLeftIsDropped) {
  ConnectParams p;
  p.rnr_retry = 0;
  ScriptedRc r(p);
  auto s = r.spec(wire::Opcode::kRcAcknowledge, kSqPsn);
  s.aeth.syndrome = wire::make_syndrome(wire::AethKind::kRnrNak, 1);
  r.inject(s);
  const auto t0 = std::chrono::steady_clock::now();
  r.run(1);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ibv_wc wc[4];
  const int n = r.dev.cq->poll(4, wc);
  std::printf("  one RNR NAK to an idle QP: %.2f s, poll() = %d, flushed = %llu\n", secs, n,
              static_cast<unsigned long long>(r.dev.qp->counter("flushed")));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(r.dev.qp->state(), IBV_QPS_RTS);
}

// A sequence NAK ahead of anything sent does not move the requester's next
// PSN: the next WRITE leaves in sequence and completes.
TEST(CompleterRules, ASequenceNakAheadOfEverythingSentIsDropped) {
  ScriptedRc r;
  QueuePair* qp = r.dev.qp;
  auto s = r.spec(wire::Opcode::kRcAcknowledge, kSqPsn + 1000);
  s.aeth.syndrome = nak(NakCode::kPsnSequenceError);
  r.inject(s);
  r.run(2);
  std::vector<std::uint8_t> buf(64, 1);
  MemoryRegion* mr = r.dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_rdma(qp, IBV_WR_RDMA_WRITE, buf.data(), 64, mr->lkey, std::uint64_t{0x5000}, 0x77, 9), 0);
  r.run(2);
  const auto sent = r.sent();
  std::printf("  after a stray sequence NAK: %zu packets sent, req.psn=0x%x comp.psn=0x%x, drops counted %llu\n",
              sent.size(), testing::transport_qp(qp).req.psn, testing::transport_qp(qp).comp.psn,
              static_cast<unsigned long long>(qp->counter("drop_response_not_sent")));
  ASSERT_EQ(sent.size(), 1u) << "the WRITE must go out";
  EXPECT_EQ(sent[0].bth().psn.get(), kSqPsn) << "with the next PSN in sequence";
  EXPECT_EQ(qp->counter("drop_response_not_sent"), 1u);
  // The peer acknowledges it: the QP is not wedged.
  r.inject(r.spec(wire::Opcode::kRcAcknowledge, kSqPsn));
  r.run(2);
  ibv_wc wc[4];
  ASSERT_EQ(r.dev.cq->poll(4, wc), 1);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].wr_id, 9u);
}

// A 1 MiB WRITE of which the window let 256 packets leave: an ACK for its
// last PSN (never sent) does not complete it.
TEST(CompleterRules, AnAckForAPsnNeverSentCompletesNothing) {
  ScriptedRc r;
  QueuePair* qp = r.dev.qp;
  std::vector<std::uint8_t> buf(1 << 20, 0x5a);
  MemoryRegion* mr = r.dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_rdma(qp, IBV_WR_RDMA_WRITE, buf.data(), 1 << 20, mr->lkey, std::uint64_t{0x5000}, 0x77, 7), 0);
  r.run(20);
  const auto sent_before = r.dev.port.sent.size();
  EXPECT_EQ(sent_before, 256u) << "the window (kWindowPackets) holds the rest back";
  r.inject(r.spec(wire::Opcode::kRcAcknowledge, kSqPsn + 1023));  // the WRITE's last PSN: never sent
  r.run(20);
  ibv_wc wc[4];
  const int n = r.dev.cq->poll(4, wc);
  std::printf("  packets sent: %zu of 1024; completions: %d (status %d)\n", r.dev.port.sent.size(), n,
              n > 0 ? wc[0].status : -1);
  EXPECT_EQ(n, 0) << "an ACK for PSN " << kSqPsn + 1023 << " (never sent: highest sent is " << kSqPsn + 255
                  << ") must be dropped, not complete the WRITE";
}

// An ACK inside the unsent part does not move the requester past packets
// it has not sent: every packet of the WRITE leaves.
TEST(CompleterRules, AnAckInsideTheUnsentPartSkipsNoPacket) {
  ScriptedRc r;
  QueuePair* qp = r.dev.qp;
  std::vector<std::uint8_t> buf(1 << 20, 0x5a);
  MemoryRegion* mr = r.dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_rdma(qp, IBV_WR_RDMA_WRITE, buf.data(), 1 << 20, mr->lkey, std::uint64_t{0x5000}, 0x77, 7), 0);
  r.run(20);
  ASSERT_EQ(r.dev.port.sent.size(), 256u);
  r.inject(r.spec(wire::Opcode::kRcAcknowledge, kSqPsn + 600));  // never sent
  // Then an honest peer acknowledges whatever it gets.
  for (int round = 0; round < 40; ++round) {
    r.run(4);
    if (!r.dev.port.sent.empty()) {
      wire::ParsedFrame last;
      ASSERT_EQ(wire::parse_frame(r.dev.port.sent.back(), last), wire::ParseStatus::kOk);
      r.inject(r.spec(wire::Opcode::kRcAcknowledge, last.bth().psn.get()));
    }
  }
  std::vector<bool> seen(1024, false);
  for (const auto& p : r.sent()) {
    const std::uint32_t i = (p.bth().psn.get() - kSqPsn) & 0xffffff;
    if (i < 1024) seen[i] = true;
  }
  int missing = 0;
  for (bool b : seen) missing += !b;
  ibv_wc wc[4];
  const int n = r.dev.cq->poll(4, wc);
  std::printf("  PSNs of the WRITE never transmitted: %d; completion: %d, status %d\n", missing, n,
              n > 0 ? wc[0].status : -1);
  EXPECT_EQ(missing, 0) << "every packet of a WRITE that completes successfully must have been sent";
}

// A 1 MiB WRITE of which the window has let 256 packets leave: ACKs and
// NAKs for PSNs at or past the 257th are ignored and counted; an honest peer
// then sees every packet once, in order, and the WRITE completes.
TEST(CompleterRules, ResponsesBeyondTheLastPsnSentAreIgnored) {
  ScriptedRc r;
  QueuePair* qp = r.dev.qp;
  std::vector<std::uint8_t> buf(1 << 20, 0x5a);
  MemoryRegion* mr = r.dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_rdma(qp, IBV_WR_RDMA_WRITE, buf.data(), 1 << 20, mr->lkey, std::uint64_t{0x5000}, 0x77, 7), 0);
  r.run(20);
  ASSERT_EQ(r.dev.port.sent.size(), 256u);
  r.inject(r.ack(kSqPsn + 256));                                      // just past the last sent
  r.inject(r.ack(kSqPsn + 1023));                                     // the WRITE's last PSN
  r.inject(r.ack(kSqPsn + 600, nak(NakCode::kPsnSequenceError)));     // ahead of everything
  r.inject(r.ack(kSqPsn + 300, nak(NakCode::kRemoteAccessError)));    // an error for a PSN never sent
  r.inject(r.ack(kSqPsn + 400, wire::make_syndrome(wire::AethKind::kRnrNak, 3)));
  r.run(4);
  EXPECT_EQ(qp->counter("drop_response_not_sent"), 5u);
  std::vector<ibv_wc> wc;
  EXPECT_EQ(poll_all(r.dev.cq, wc), 0);
  EXPECT_EQ(qp->state(), IBV_QPS_RTS);
  // The honest peer acknowledges what it gets.
  std::vector<std::uint32_t> psns;
  for (int round = 0; round < 100 && wc.empty(); ++round) {
    r.run(2);
    for (const auto& p : r.sent()) psns.push_back(p.bth().psn.get());
    r.dev.port.sent.clear();
    if (!psns.empty()) r.inject(r.ack(psns.back()));
    r.run(1);
    poll_all(r.dev.cq, wc);
  }
  ASSERT_EQ(psns.size(), 1024u);
  for (std::uint32_t i = 0; i < 1024; ++i) ASSERT_EQ(psns[i], kSqPsn + i) << i;
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(qp->counter("retransmitted_packets"), 0u);
}

// --- reserved_syndrome (9.7.5.1): AETH syndrome 0b10xxxxx is reserved ------------------

// Dropped and counted; the WRITE completes on the next ACK.
TEST(CompleterRules, AReservedAethSyndromeIsCounted) {
  ScriptedRc r;
  std::vector<std::uint8_t> buf(64, 7);
  MemoryRegion* mr = r.dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_rdma(r.dev.qp, IBV_WR_RDMA_WRITE, buf.data(), 64, mr->lkey, std::uint64_t{0x5000}, 0x77, 5), 0);
  r.run(2);
  r.inject(r.ack(kSqPsn, wire::make_syndrome(wire::AethKind::kReserved, 0x1f)));
  r.run(2);
  std::vector<ibv_wc> wc;
  EXPECT_EQ(poll_all(r.dev.cq, wc), 0);
  EXPECT_EQ(r.dev.qp->counter("drop_reserved_syndrome"), 1u);
  r.inject(r.ack(kSqPsn));
  r.run(2);
  ASSERT_EQ(poll_all(r.dev.cq, wc), 1);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
}

// --- Our own region deregistered while our WR uses it (10.6) -----------------------

constexpr std::uint32_t kBig = 1 << 20;

// local_revoked: the requester's READ destination goes while responses
// arrive: none is placed after dereg_mr; the WR ends with a local
// protection error.
TEST(CompleterRules, DeregOfAReadDestinationEndsTheWr) {
  RcPair p(14, kBig);
  ASSERT_EQ(p.connect_rc, 0);
  std::memset(p.bufb, 0x5a, kBig);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_READ, 0, kBig, 0, 1), 0);
  run_until(p, [&] { return p.bufa[64 * 1024] == 0x5a; });
  ASSERT_EQ(p.pda->dereg_mr(p.mra), 0);
  std::memset(p.bufa, 0, kBig);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_FALSE(any_byte(p.bufa, kBig, 0x5a)) << "a READ response was placed after dereg_mr";
  EXPECT_EQ(p.qa->counter("mr_revoked_in_flight"), 1u);
}

// The requester's own region goes while its WRITE is being sent: no packet
// reads it after dereg_mr; the WR ends with a local protection error.
TEST(RequesterRules, DeregOfAWriteSourceEndsTheWr) {
  RcPair p(13, kBig);
  ASSERT_EQ(p.connect_rc, 0);
  std::memset(p.bufa, 0x5a, kBig);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, kBig, 0, 1), 0);
  run_until(p, [&] { return p.bufb[64 * 1024] == 0x5a; });
  ASSERT_EQ(p.pda->dereg_mr(p.mra), 0);
  std::memset(p.bufa, 0xee, kBig);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_LOC_PROT_ERR);
  p.wait(p.cqb, 1, 100'000'000);  // let whatever is on the wire land
  EXPECT_FALSE(any_byte(p.bufb, kBig, 0xee)) << "a request packet read the region after dereg_mr";
  EXPECT_EQ(p.qa->counter("mr_revoked_in_flight"), 1u);
}

}  // namespace
}  // namespace uroce::test
