// The responder's rules (lib/transport/rules.h, kResponderExits), one case
// family per rule, against a peer whose requests the test writes
// (ScriptedRc) or on a simulated link (RcPair): duplicates older than what
// the responder keeps, RNR NAKs and ACKs that find the answer queue full,
// READs and atomics without responder resources, lengths that do not fit
// the path MTU or pass 2^31, SEND with Invalidate, stale rkeys, and regions
// deregistered while a WRITE into them or a READ from them is under way.
// The one case per exit row that reads its counter is in
// transport_exits_test.cc; these push each rule further.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "support/exit_rig.h"
#include "support/rc_fixture.h"
#include "support/scripted_rc.h"
#include "support/work_requests.h"
#include "verbs/connect.h"
#include "verbs/verbs_impl.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

using transport::QpCounter;
using wire::NakCode;
using wire::Opcode;

// Fills the responder's answer queue with RNR NAKs for `psn` (they neither
// coalesce nor are dropped by a duplicate at a later PSN).
void fill_answer_queue(QueuePair* qp, std::uint32_t psn) {
  transport::Qp& t = testing::transport_qp(qp);
  while (t.resp.out_tail - t.resp.out_head < t.resp.out.limit()) {
    transport::Response& r = t.resp.out[t.resp.out_tail++];
    r = transport::Response{};
    r.psn = psn;
    r.syndrome = wire::make_syndrome(wire::AethKind::kRnrNak, 1);
  }
}

wire::FrameSpec read_request(ScriptedRc& r, std::uint32_t psn, const std::vector<std::uint8_t>& region,
                             const MemoryRegion* mr, std::uint32_t len) {
  wire::FrameSpec f = r.spec(Opcode::kRcReadRequest, psn);
  f.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
  f.reth.rkey.set(mr->rkey);
  f.reth.dma_length.set(len);
  return f;
}

// --- duplicate_read_unknown, duplicate_atomic_unknown, duplicate_no_room
//     (9.7.5.1.2-3: a duplicate is answered, never executed twice) -------------------

// With one responder resource, a duplicate of the READ before the last is
// too old to answer: dropped, counted, the QP goes on.
TEST(ResponderRules, ADuplicateReadOlderThanEveryResourceIsCounted) {
  ConnectParams params;
  params.max_rd_atomic = 1;
  ScriptedRc r(params);
  std::vector<std::uint8_t> region(64, 0x44);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  r.inject(read_request(r, kRqPsn, region, mr, 8));
  r.run(2);
  r.inject(read_request(r, kRqPsn + 1, region, mr, 8));
  r.run(2);
  const std::size_t before = r.dev.port.sent.size();
  ASSERT_EQ(before, 2u);
  r.inject(read_request(r, kRqPsn, region, mr, 8));  // its resource now holds the second READ
  r.run(2);
  EXPECT_EQ(r.dev.port.sent.size(), before) << "no answer";
  EXPECT_EQ(r.dev.qp->counter("duplicate_requests"), 1u);
  EXPECT_EQ(r.dev.qp->counter("drop_duplicate_unanswered"), 1u);
  EXPECT_EQ(r.dev.qp->state(), IBV_QPS_RTS);
  // The newer one is still answered again.
  r.inject(read_request(r, kRqPsn + 1, region, mr, 8));
  r.run(2);
  EXPECT_EQ(r.dev.port.sent.size(), before + 1);
}

TEST(ResponderRules, ADuplicateAtomicWhoseResultIsGoneIsCounted) {
  ConnectParams params;
  params.max_rd_atomic = 1;
  ScriptedRc r(params);
  std::vector<std::uint64_t> word(2, 5);
  MemoryRegion* mr = r.dev.pd->reg_mr(word.data(), sizeof(std::uint64_t) * 2, kAll);
  auto fetch_add = [&](std::uint32_t psn) {
    wire::FrameSpec f = r.spec(Opcode::kRcFetchAdd, psn);
    f.atomic_eth.va.set(reinterpret_cast<std::uint64_t>(word.data()));
    f.atomic_eth.rkey.set(mr->rkey);
    f.atomic_eth.swap_add.set(1);
    return f;
  };
  r.inject(fetch_add(kRqPsn));
  r.run(2);
  r.inject(fetch_add(kRqPsn + 1));
  r.run(2);
  r.inject(fetch_add(kRqPsn));  // its result is no longer kept
  r.run(2);
  EXPECT_EQ(word[0], 7u) << "executed twice, never three times";
  EXPECT_EQ(r.dev.qp->counter("drop_duplicate_unanswered"), 1u);
  EXPECT_EQ(r.dev.qp->counter("atomics_replayed"), 0u);
  EXPECT_EQ(r.dev.port.sent.size(), 2u);
}

// A duplicate READ that would answer while the answer queue is full (only
// reachable when older answers wait: the queue is filled by hand here).
TEST(ResponderRules, ADuplicateReadWithTheAnswerQueueFullIsCounted) {
  ScriptedRc r;
  std::vector<std::uint8_t> region(64, 0x44);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  r.inject(read_request(r, kRqPsn, region, mr, 8));
  r.run(2);
  ASSERT_EQ(r.dev.port.sent.size(), 1u);
  fill_answer_queue(r.dev.qp, kRqPsn - 1);
  r.inject(read_request(r, kRqPsn, region, mr, 8));
  r.dev.ctx->progress();  // takes the duplicate in, then sends the queue
  EXPECT_EQ(r.dev.qp->counter("drop_duplicate_unanswered"), 1u);
  EXPECT_EQ(r.dev.qp->state(), IBV_QPS_RTS);
}

// --- Answers in PSN order (9.7.5.1: a responder answers in the order it received) ----

// An ACK owed while nothing else is (go-back-N holds it in the QP, not in
// the answer queue) is moved forward by the next ACK and still leaves ahead
// of a READ response or a NAK queued after it, in one burst.
TEST(ResponderRules, AnOwedAckLeavesAheadOfTheAnswersQueuedAfterIt) {
  ScriptedRc r;
  std::vector<std::uint8_t> region(4096, 0x5a);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  const auto write = [&](std::uint32_t psn) {
    wire::FrameSpec w = r.spec(Opcode::kRcWriteOnly, psn);
    w.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()) + 2048);
    w.reth.rkey.set(mr->rkey);
    w.reth.dma_length.set(16);
    w.bth.set_ack_req(true);
    r.inject(w, std::vector<std::uint8_t>(16, 0x77));
  };
  write(kRqPsn);
  write(kRqPsn + 1);
  r.inject(read_request(r, kRqPsn + 2, region, mr, 8));
  write(kRqPsn + 3);
  r.inject(r.spec(Opcode::kRcSendOnly, kRqPsn + 5));  // kRqPsn + 4 lost: a sequence NAK
  r.dev.ctx->progress();
  const auto sent = r.sent();
  ASSERT_EQ(sent.size(), 4u);
  EXPECT_EQ(sent[0].opcode, static_cast<std::uint8_t>(Opcode::kRcAcknowledge));
  EXPECT_EQ(sent[0].aeth().syndrome, 0x1f);
  EXPECT_EQ(sent[0].bth().psn.get(), kRqPsn + 1) << "the two WRITEs' ACKs coalesce";
  EXPECT_EQ(sent[1].opcode, static_cast<std::uint8_t>(Opcode::kRcReadResponseOnly));
  EXPECT_EQ(sent[1].bth().psn.get(), kRqPsn + 2);
  EXPECT_EQ(sent[2].opcode, static_cast<std::uint8_t>(Opcode::kRcAcknowledge));
  EXPECT_EQ(sent[2].aeth().syndrome, 0x1f);
  EXPECT_EQ(sent[2].bth().psn.get(), kRqPsn + 3);
  EXPECT_EQ(sent[3].opcode, static_cast<std::uint8_t>(Opcode::kRcAcknowledge));
  EXPECT_EQ(sent[3].aeth().syndrome, nak(NakCode::kPsnSequenceError));
  EXPECT_EQ(sent[3].bth().psn.get(), kRqPsn + 4);
  EXPECT_EQ(r.dev.qp->counter("acks_sent"), 3u) << "ACKs and NAKs alike";
}

// --- Answers that find the answer queue full -------------------------------------------

// An ACK the responder owes when its answer queue is full is not sent (the
// requester's timer recovers it): counted.
TEST(ResponderRules, AnAckLostToAFullAnswerQueueIsCounted) {
  ScriptedRc r;
  std::vector<std::uint8_t> region(4096, 0);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  fill_answer_queue(r.dev.qp, kRqPsn - 1);
  wire::FrameSpec w = r.spec(Opcode::kRcWriteOnly, kRqPsn);
  w.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
  w.reth.rkey.set(mr->rkey);
  w.reth.dma_length.set(64);
  w.bth.set_ack_req(true);
  r.inject(w, std::vector<std::uint8_t>(64, 0x99));
  r.dev.ctx->progress();
  EXPECT_EQ(region[0], 0x99) << "the WRITE itself executes";
  EXPECT_EQ(r.dev.qp->counter("drop_answer_ring_full"), 1u);
}

// no_receive (9.7.5.2.8): rnr_naks_sent counts RNR NAKs sent, as the
// other NAK counters do: one that finds the answer queue full (ten READs'
// answers, one resource) is not sent and counted only as
// drop_answer_ring_full; the peer's retry, after its timer, gets it.
TEST(ResponderRules, AnRnrNakIsCountedOnlyWhenSent) {
  ExitRig rig;
  ConnectParams params;
  params.max_rd_atomic = 1;
  ScriptedRc& r = rig.connect(params);
  rig.mark();
  for (std::uint32_t i = 0; i < 10; ++i) r.inject(rig.read(kRqPsn + i));
  rig.send_only(kRqPsn + 10);  // no receive posted
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::drop_answer_ring_full), 1u);
  EXPECT_EQ(rig.delta(QpCounter::rnr_naks_sent), 0u) << "an RNR NAK that was not sent was counted";
  EXPECT_EQ(r.sent().size(), 10u) << "the READs' responses, and no RNR NAK";
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);
  rig.mark();
  rig.send_only(kRqPsn + 10);  // the peer's retry
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::rnr_naks_sent), 1u);
  EXPECT_EQ(rig.delta(QpCounter::drop_answer_ring_full), 0u);
  const auto sent = r.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(int{sent[0].aeth().syndrome}, int{wire::make_syndrome(wire::AethKind::kRnrNak, params.min_rnr_timer)});
  EXPECT_EQ(sent[0].bth().psn.get(), kRqPsn + 10);
}

// --- no_resources (9.7.5.2.4): max_dest_rd_atomic = 0 executes no READ ---------------

// rxe: check_resource answers RESPST_ERR_TOO_MANY_RDMA_ATM_REQ (NAK Invalid Request).
TEST(ResponderRules, AReadWithNoResponderResourcesIsNotExecuted) {
  ConnectParams p;
  p.max_rd_atomic = 0;  // connect_rc sets max_dest_rd_atomic and max_rd_atomic from it
  ScriptedRc r(p);
  std::vector<std::uint8_t> region(64, 0x44);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  auto read = r.spec(wire::Opcode::kRcReadRequest, kRqPsn);
  read.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
  read.reth.rkey.set(mr->rkey);
  read.reth.dma_length.set(64);
  r.inject(read);
  r.run(2);
  const auto sent = r.sent();
  ASSERT_FALSE(sent.empty());
  std::printf("  max_dest_rd_atomic=0: answer %s\n", wire::opcode_name(sent[0].opcode));
  EXPECT_NE(sent[0].opcode, static_cast<std::uint8_t>(wire::Opcode::kRcReadResponseOnly));
}

// --- bad_length (C9-92, C9-94): payloads fit the path MTU, DMA lengths 2^31 at most ----

struct BadLength {
  const char* name;
  Opcode opcode;
  std::uint32_t payload;
  std::uint32_t dma_length;  // RETH, where the opcode has one
};

// Path MTU 1024 (C9-92): First/Middle exactly 1024, Last 1..1024, Only at
// most 1024. DMA length at most 2^31 (C9-94).
const BadLength kBadLengths[] = {
    {"SEND First shorter than the MTU", Opcode::kRcSendFirst, 512, 0},
    {"SEND First longer than the MTU", Opcode::kRcSendFirst, 2048, 0},
    // Lengths that are no IB MTU at all reach the responder too (the parser
    // once dropped them in silence; tools/probe-rxe.sh found it).
    {"SEND First of 1000 bytes", Opcode::kRcSendFirst, 1000, 0},
    {"SEND First of 1028 bytes", Opcode::kRcSendFirst, 1028, 0},
    {"WRITE First of 1000 bytes", Opcode::kRcWriteFirst, 1000, 4096},
    {"SEND Only longer than the MTU", Opcode::kRcSendOnly, 1028, 0},
    {"WRITE First shorter than the MTU", Opcode::kRcWriteFirst, 256, 4096},
    {"WRITE Only longer than the MTU", Opcode::kRcWriteOnly, 4096, 4096},
    {"WRITE Only with a DMA length over 2^31", Opcode::kRcWriteOnly, 0, 0x80000001u},
    {"READ of 2^31 + 1 bytes", Opcode::kRcReadRequest, 0, 0x80000001u},
    {"READ of 2^32 - 1 bytes", Opcode::kRcReadRequest, 0, 0xffffffffu},
};

TEST(ResponderRules, RequestsOfBadLengthAreInvalidRequests) {
  for (const BadLength& c : kBadLengths) {
    SCOPED_TRACE(c.name);
    ScriptedRc r;
    QueuePair* qp = r.dev.qp;
    std::vector<std::uint8_t> region(8192, 0);
    MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
    for (int i = 0; i < 4; ++i) {
      ibv_sge sge{reinterpret_cast<std::uint64_t>(region.data()), 8192, mr->lkey};
      ibv_recv_wr rw{};
      rw.wr_id = 100 + i;
      rw.sg_list = &sge;
      rw.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      ASSERT_EQ(qp->post_recv(&rw, &bad), 0);
    }
    wire::FrameSpec f = r.spec(c.opcode, kRqPsn);
    f.bth.set_ack_req(true);
    f.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
    f.reth.rkey.set(mr->rkey);
    f.reth.dma_length.set(c.dma_length);
    r.inject(f, std::vector<std::uint8_t>(c.payload, 0x77));
    r.run(2);
    const auto sent = r.sent();
    ASSERT_EQ(sent.size(), 1u) << "one NAK and nothing else";
    EXPECT_EQ(sent[0].opcode, static_cast<std::uint8_t>(Opcode::kRcAcknowledge));
    EXPECT_EQ(sent[0].aeth().syndrome, nak(NakCode::kInvalidRequest));
    EXPECT_EQ(sent[0].bth().psn.get(), kRqPsn);
    EXPECT_EQ(qp->counter("drop_bad_length"), 1u);
    EXPECT_EQ(qp->counter("nak_inv_req_sent"), 1u);
    EXPECT_EQ(qp->counter("rx_bytes"), 0u);
    EXPECT_EQ(qp->state(), IBV_QPS_ERR) << "Invalid Request is fatal (class C)";
    EXPECT_TRUE(std::all_of(region.begin(), region.end(), [](std::uint8_t b) { return b == 0; })) << "nothing placed";
  }
}

// A Last packet must carry at least one byte; a right-sized message around it
// is taken.
TEST(ResponderRules, AnEmptyWriteLastIsAnInvalidRequest) {
  ScriptedRc r;
  std::vector<std::uint8_t> region(4096, 0);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  wire::FrameSpec first = r.spec(Opcode::kRcWriteFirst, kRqPsn);
  first.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
  first.reth.rkey.set(mr->rkey);
  first.reth.dma_length.set(1024);
  r.inject(first, std::vector<std::uint8_t>(1024, 0x11));
  wire::FrameSpec last = r.spec(Opcode::kRcWriteLast, kRqPsn + 1);
  last.bth.set_ack_req(true);
  r.inject(last);
  r.run(2);
  EXPECT_EQ(r.dev.qp->counter("drop_bad_length"), 1u);
  EXPECT_EQ(r.dev.qp->counter("nak_inv_req_sent"), 1u);
  EXPECT_EQ(r.dev.qp->state(), IBV_QPS_ERR);
}

// A Middle packet must carry exactly the path MTU, whatever its length:
// the First before it is taken, the short Middle NAKed at its own PSN.
TEST(ResponderRules, AShortSendMiddleIsAnInvalidRequest) {
  for (const std::size_t len : {std::size_t{512}, std::size_t{1000}, std::size_t{1020}}) {
    SCOPED_TRACE(len);
    ScriptedRc r;
    std::vector<std::uint8_t> region(4096, 0);
    MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
    ibv_sge sge{reinterpret_cast<std::uint64_t>(region.data()), 4096, mr->lkey};
    ibv_recv_wr rw{};
    rw.sg_list = &sge;
    rw.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(r.dev.qp->post_recv(&rw, &bad), 0);
    r.inject(r.spec(Opcode::kRcSendFirst, kRqPsn), std::vector<std::uint8_t>(1024, 0x11));
    wire::FrameSpec middle = r.spec(Opcode::kRcSendMiddle, kRqPsn + 1);
    middle.bth.set_ack_req(true);
    r.inject(middle, std::vector<std::uint8_t>(len, 0x22));
    r.run(2);
    const auto sent = r.sent();
    ASSERT_EQ(sent.size(), 1u) << "one NAK and nothing else";
    EXPECT_EQ(sent[0].aeth().syndrome, nak(NakCode::kInvalidRequest));
    EXPECT_EQ(sent[0].bth().psn.get(), kRqPsn + 1);
    EXPECT_EQ(r.dev.qp->counter("drop_bad_length"), 1u);
    EXPECT_EQ(r.dev.qp->state(), IBV_QPS_ERR);
  }
}

// A 4096-byte WRITE Only on a 1024-byte path MTU places nothing (the
// parser once checked Only/Last against 4096, never the QP's MTU).
TEST(ResponderRules, AWriteLongerThanThePathMtuIsNotPlaced) {
  ScriptedRc r;  // MTU 1024
  std::vector<std::uint8_t> region(8192, 0);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  auto w = r.spec(wire::Opcode::kRcWriteOnly, kRqPsn);
  w.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
  w.reth.rkey.set(mr->rkey);
  w.reth.dma_length.set(4096);
  w.bth.set_ack_req(true);
  r.inject(w, std::vector<std::uint8_t>(4096, 0x77));
  r.run(2);
  std::printf("  4096-byte WRITE Only on a 1024-MTU QP: placed=%d, QP state %d\n", region[4095] == 0x77,
              r.dev.qp->state());
  EXPECT_NE(region[4095], 0x77) << "a 4096-byte packet on a 1024-byte path MTU must be refused";
}

// A READ of exactly 2^31 bytes is legal: it is answered, at 2^21 PSNs.
TEST(ResponderRules, AReadOfTwoGiBIsAnswered) {
  ScriptedRc r;
  const std::size_t bytes = std::size_t{1} << 31;
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  MemoryRegion* mr = r.dev.pd->reg_mr(map, bytes, kAll);
  ASSERT_NE(mr, nullptr);
  wire::FrameSpec read = r.spec(Opcode::kRcReadRequest, kRqPsn);
  read.reth.va.set(reinterpret_cast<std::uint64_t>(map));
  read.reth.rkey.set(mr->rkey);
  read.reth.dma_length.set(0x80000000u);
  r.inject(read);
  r.run(1);
  const auto sent = r.sent();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent[0].opcode, static_cast<std::uint8_t>(Opcode::kRcReadResponseFirst));
  EXPECT_EQ(testing::transport_qp(r.dev.qp).resp.psn, kRqPsn + (1u << 21));
  EXPECT_EQ(r.dev.qp->counter("drop_bad_length"), 0u);
  ASSERT_EQ(r.dev.pd->dereg_mr(mr), 0);
  munmap(map, bytes);
}

// A READ of 3 GiB is NAKed, not executed.
TEST(ResponderRules, AReadOfThreeGiBIsAnInvalidRequest) {
  ScriptedRc r;
  const std::size_t bytes = std::size_t{3} << 30;
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  MemoryRegion* mr = r.dev.pd->reg_mr(map, bytes, kAll);
  auto read = r.spec(wire::Opcode::kRcReadRequest, kRqPsn);
  read.reth.va.set(reinterpret_cast<std::uint64_t>(map));
  read.reth.rkey.set(mr->rkey);
  read.reth.dma_length.set(0xC0000000u);  // 3 GiB > 2^31
  r.inject(read);
  r.run(1);
  const auto sent = r.sent();
  ASSERT_FALSE(sent.empty());
  std::printf("  3 GiB READ: first answer %s, QP state %d\n", wire::opcode_name(sent[0].opcode), r.dev.qp->state());
  EXPECT_EQ(sent[0].opcode, static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge))
      << "a DMA length above 2^31 must be NAKed (Invalid Request), not executed";
  munmap(map, bytes);
}

// A READ of 2^32 - 1 bytes (legal to a region of 4 GiB or more) is one NAK
// and moves the expected PSN (its packet count once overflowed 32 bits:
// no PSN moved and the answer ran 2^24 packets).
TEST(ResponderRules, AReadOfFourGiBIsOneNak) {
  ScriptedRc r;
  const std::size_t bytes = (std::size_t{1} << 32) + 65536;
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  MemoryRegion* mr = r.dev.pd->reg_mr(map, bytes, kAll);
  ASSERT_NE(mr, nullptr);
  auto read = r.spec(wire::Opcode::kRcReadRequest, kRqPsn);
  read.reth.va.set(reinterpret_cast<std::uint64_t>(map));
  read.reth.rkey.set(mr->rkey);
  read.reth.dma_length.set(0xffffffffu);
  r.inject(read);
  r.run(1);
  const transport::Qp& t = testing::transport_qp(r.dev.qp);
  const auto sent = r.sent();
  std::printf("  after a 0xffffffff READ at PSN 0x%x: expected PSN 0x%x, %zu responses, first opcode %s\n", kRqPsn,
              t.resp.psn, sent.size(), sent.empty() ? "-" : wire::opcode_name(sent[0].opcode));
  // IBTA/rxe: a DMA length above 2^31 is an Invalid Request (NAK, QP to ERR).
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent[0].opcode, static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge)) << "a NAK";
  EXPECT_TRUE(t.resp.psn != kRqPsn || r.dev.qp->state() == IBV_QPS_ERR)
      << "the expected PSN must move past the READ (or the QP be in ERR)";
  EXPECT_EQ(sent.size(), 1u) << "one NAK, no READ response";
  munmap(map, bytes);
}

// The same READ, run until the port is quiet: one packet in all.
TEST(ResponderRules, AReadOfFourGiBSendsNothingAfterItsNak) {
  ScriptedRc r;
  r.dev.port.keep_sent = false;
  const std::size_t bytes = (std::size_t{1} << 32) + 65536;
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  MemoryRegion* mr = r.dev.pd->reg_mr(map, bytes, kAll);
  auto read = r.spec(wire::Opcode::kRcReadRequest, kRqPsn);
  read.reth.va.set(reinterpret_cast<std::uint64_t>(map));
  read.reth.rkey.set(mr->rkey);
  read.reth.dma_length.set(0xffffffffu);
  r.inject(read);
  std::uint64_t last = ~0ull;
  while (r.dev.port.tx_count != last) {
    last = r.dev.port.tx_count;
    r.run(1024);
  }
  std::printf("  one 0xffffffff READ request answered with %llu packets (the data needs %u)\n",
              static_cast<unsigned long long>(r.dev.port.tx_count), (0xffffffffu / 1024) + 1);
  EXPECT_LE(r.dev.port.tx_count, 1u);
  munmap(map, bytes);
}

// --- invalidate_refused (10.6.6.1, class J) --------------------------------------------

// SEND with Invalidate naming a reg_mr region (verbs cannot re-validate it:
// no fast-register, LOCAL_INV or bind) is refused, so one peer cannot revoke
// the access another QP's peer has to that PD's regions. rxe refuses it too
// (rxe_invalidate_mr: only IB_MR_TYPE_MEM_REG).
TEST(ResponderRules, SendWithInvalidateCannotRevokeAnOrdinaryRegion) {
  ScriptedRc r;
  // A second QP on the same PD, connected to 10.0.0.3.
  QpInitAttr init;
  init.send_cq = init.recv_cq = r.dev.cq;
  init.cap = ibv_qp_cap{8, 8, 1, 1, 0};
  QueuePair* qp_b = r.dev.pd->create_qp(init);
  ASSERT_NE(qp_b, nullptr);
  ASSERT_EQ(connect_rc(qp_b, ipv4_gid({10, 0, 0, 3}), 0x43, kSqPsn, kRqPsn, ConnectParams{}), 0);
  std::vector<std::uint8_t> shared(4096, 0);  // B's peer writes here
  MemoryRegion* mr_b = r.dev.pd->reg_mr(shared.data(), shared.size(), kAll);
  std::vector<std::uint8_t> rbuf(256, 0);
  MemoryRegion* mr_r = r.dev.pd->reg_mr(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(rbuf.data()), 256, mr_r->lkey};
  ibv_recv_wr rw{};
  rw.sg_list = &sge;
  rw.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(r.dev.qp->post_recv(&rw, &bad), 0);
  // Peer A: SEND_ONLY_WITH_INVALIDATE naming B's region.
  auto inv = r.spec(wire::Opcode::kRcSendOnlyInv, kRqPsn);
  inv.ieth.rkey.set(mr_b->rkey);
  inv.bth.set_ack_req(true);
  r.inject(inv, std::vector<std::uint8_t>(16, 1));
  r.run(2);
  // Peer B writes into its region, as it always has.
  auto w = r.spec(wire::Opcode::kRcWriteOnly, kRqPsn, qp_b, 3);
  w.reth.va.set(reinterpret_cast<std::uint64_t>(shared.data()));
  w.reth.rkey.set(mr_b->rkey);
  w.reth.dma_length.set(64);
  w.bth.set_ack_req(true);
  r.inject(w, std::vector<std::uint8_t>(64, 0xbb));
  r.run(2);
  std::printf("  after A's SEND-with-invalidate: B's WRITE placed=%d, B's QP state %d, NAK rem access sent=%llu\n",
              shared[0] == 0xbb, qp_b->state(), static_cast<unsigned long long>(qp_b->counter("nak_rem_access_sent")));
  EXPECT_EQ(shared[0], 0xbb) << "peer A invalidated the rkey of a reg_mr region that peer B uses";
  EXPECT_EQ(qp_b->state(), IBV_QPS_RTS);
}

// --- rkey_violation (10.6, C9-88) -------------------------------------------------------

// A key that outlives its region is not honoured by the next one at the
// same slot and iova (keys once repeated after 256 registrations of a slot).
TEST(ResponderRules, AStaleRkeyDoesNotOpenARegionRegisteredLater) {
  ScriptedRc r;
  std::vector<std::uint8_t> old_buf(4096, 0), new_buf(4096, 0);
  MemoryRegion* old_mr = r.dev.pd->reg_mr_iova(old_buf.data(), 4096, 0x100000, kAll);
  const std::uint32_t stale = old_mr->rkey;  // the peer keeps this
  ASSERT_EQ(r.dev.pd->dereg_mr(old_mr), 0);
  for (int i = 0; i < 255; ++i) {
    MemoryRegion* m = r.dev.pd->reg_mr(old_buf.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(m->rkey, stale);
    ASSERT_EQ(r.dev.pd->dereg_mr(m), 0);
  }
  MemoryRegion* new_mr = r.dev.pd->reg_mr_iova(new_buf.data(), 4096, 0x100000, kAll);
  auto w = r.spec(wire::Opcode::kRcWriteOnly, kRqPsn);
  w.reth.va.set(0x100000);
  w.reth.rkey.set(stale);
  w.reth.dma_length.set(64);
  r.inject(w, std::vector<std::uint8_t>(64, 0xcc));
  r.run(2);
  std::printf("  stale rkey 0x%x, new region's rkey 0x%x, new region written: %d\n", stale, new_mr->rkey,
              new_buf[0] == 0xcc);
  EXPECT_NE(new_mr->rkey, stale);
  EXPECT_EQ(new_buf[0], 0) << "a deregistered region's rkey wrote into a new region";
}

// --- write_revoked, read_revoked (10.6): once dereg_mr returns, the region is inaccessible

constexpr std::uint32_t kBig = 1 << 20;

// WRITE Middle and Last after dereg_mr place nothing (WRITE First once
// cached the host pointer and the rest wrote through it unchecked).
TEST(ResponderRules, WriteMiddleAndLastAfterDeregPlaceNothing) {
  ScriptedRc r;
  std::vector<std::uint8_t> region(4096, 0);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  auto first = r.spec(wire::Opcode::kRcWriteFirst, kRqPsn);
  first.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
  first.reth.rkey.set(mr->rkey);
  first.reth.dma_length.set(3072);
  r.inject(first, std::vector<std::uint8_t>(1024, 0x11));
  r.run(2);
  ASSERT_EQ(region[0], 0x11);
  ASSERT_EQ(r.dev.pd->dereg_mr(mr), 0);
  r.inject(r.spec(wire::Opcode::kRcWriteMiddle, kRqPsn + 1), std::vector<std::uint8_t>(1024, 0x22));
  auto last = r.spec(wire::Opcode::kRcWriteLast, kRqPsn + 2);
  last.bth.set_ack_req(true);
  r.inject(last, std::vector<std::uint8_t>(1024, 0x33));
  r.run(2);
  std::printf("  after dereg_mr: region[1024]=0x%02x region[2048]=0x%02x, QP state %d\n", region[1024], region[2048],
              r.dev.qp->state());
  EXPECT_EQ(region[1024], 0) << "a WRITE Middle placed data into a deregistered region";
  EXPECT_EQ(region[2048], 0) << "a WRITE Last placed data into a deregistered region";
}

// The same with the region freed after dereg_mr: the engine must not touch
// it (it once died writing into the freed buffer).
TEST(ResponderRules, AWriteAfterDeregAndFreeTouchesNoMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ScriptedRc r;
        auto* region = static_cast<std::uint8_t*>(r.dev.ctx->alloc_buffer(1 << 16));
        MemoryRegion* mr = r.dev.pd->reg_mr(region, 1 << 16, kAll);
        auto first = r.spec(wire::Opcode::kRcWriteFirst, kRqPsn);
        first.reth.va.set(reinterpret_cast<std::uint64_t>(region));
        first.reth.rkey.set(mr->rkey);
        first.reth.dma_length.set(3072);
        r.inject(first, std::vector<std::uint8_t>(1024, 0x11));
        r.run(2);
        r.dev.pd->dereg_mr(mr);
        r.dev.ctx->free_buffer(region);  // the application frees what it deregistered
        r.inject(r.spec(wire::Opcode::kRcWriteMiddle, kRqPsn + 1), std::vector<std::uint8_t>(1024, 0x22));
        r.run(2);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "")
      << "the engine must not touch a region after dereg_mr (here it dies writing into the freed buffer)";
}

// The responder's region goes while a WRITE into it is under way: nothing
// lands after dereg_mr, the requester gets a remote access error.
TEST(ResponderRules, DeregOfAWriteTargetStopsTheWrite) {
  RcPair p(11, kBig);
  ASSERT_EQ(p.connect_rc, 0);
  std::memset(p.bufa, 0x5a, kBig);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, kBig, 0, 1), 0);
  run_until(p, [&] { return p.bufb[64 * 1024] == 0x5a; });
  ASSERT_NE(p.bufb[kBig - 1], 0x5a) << "the WRITE must still be under way";
  ASSERT_EQ(p.pdb->dereg_mr(p.mrb), 0);
  std::memset(p.bufb, 0, kBig);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_FALSE(any_byte(p.bufb, kBig, 0x5a)) << "bytes placed after dereg_mr";
  EXPECT_EQ(p.qb->counter("mr_revoked_in_flight"), 1u);
  EXPECT_EQ(p.qb->counter("nak_rem_access_sent"), 1u);
}

// Queued READ responses do not go on sending the region's bytes after
// dereg_mr (they once kept a raw pointer).
TEST(ResponderRules, NoReadResponseLeavesFromADeregisteredRegion) {
  ScriptedRc r;
  std::vector<std::uint8_t> region(64 * 1024, 0xaa);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  auto read = r.spec(wire::Opcode::kRcReadRequest, kRqPsn);
  read.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
  read.reth.rkey.set(mr->rkey);
  read.reth.dma_length.set(64 * 1024);  // 64 responses at MTU 1024; one poll sends 32
  r.inject(read);
  r.run(1);
  const std::size_t before = r.dev.port.sent.size();
  ASSERT_EQ(r.dev.pd->dereg_mr(mr), 0);
  std::memset(region.data(), 0xee, region.size());  // the memory now holds something else
  r.run(4);
  std::size_t leaked = 0;
  for (const auto& p : r.sent()) {
    if (p.info->has(wire::kReadResponse) && p.payload_length > 0 && p.payload()[0] == 0xee) ++leaked;
  }
  std::printf("  READ responses before dereg: %zu; after dereg carrying the new bytes: %zu\n", before, leaked);
  EXPECT_EQ(leaked, 0u) << "READ responses read a region after dereg_mr returned";
}

// The responder's region goes while a READ from it is being answered: no
// response carries what the memory holds after dereg_mr.
TEST(ResponderRules, DeregOfAReadSourceStopsTheResponses) {
  RcPair p(12, kBig);
  ASSERT_EQ(p.connect_rc, 0);
  std::memset(p.bufb, 0x5a, kBig);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_READ, 0, kBig, 0, 1), 0);
  // The responder queues the whole READ at once and sends it as fast as the
  // port takes it: deregister once it has begun.
  run_until(p, [&] { return p.qb->counter("read_responses_sent") > 0; });
  ASSERT_LT(p.qb->counter("read_responses_sent"), kBig / 1024);
  ASSERT_EQ(p.pdb->dereg_mr(p.mrb), 0);
  std::memset(p.bufb, 0xee, kBig);  // what the memory holds now must not leave
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_FALSE(any_byte(p.bufa, kBig, 0xee)) << "a READ response read the region after dereg_mr";
  EXPECT_EQ(p.qb->counter("mr_revoked_in_flight"), 1u);
}

}  // namespace
}  // namespace uroce::test
