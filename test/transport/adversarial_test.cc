// Adversarial peers, one rule at a time (the review's D1-D10 as families of
// cases): responses for nothing outstanding or for PSNs never sent, READ and
// WRITE lengths past 2^31, packets that do not fit the path MTU, and regions
// deregistered while traffic to or from them is in flight. Each case asserts
// the counter that names what happened, and that nothing else did.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "support/rc_fixture.h"
#include "support/scripted_rc.h"
#include "transport/rules.h"
#include "verbs/verbs_impl.h"
#include "support/work_requests.h"

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

// --- Responses that answer nothing -----------------------------------------------

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
TEST(Adversarial, ResponsesToAnIdleQpAreDroppedAndCounted) {
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

// A 1 MiB WRITE of which the window has let 256 packets leave: ACKs and
// NAKs for PSNs at or past the 257th are ignored and counted; an honest peer
// then sees every packet once, in order, and the WRITE completes.
TEST(Adversarial, ResponsesBeyondTheLastPsnSentAreIgnored) {
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

// --- Lengths ---------------------------------------------------------------

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

TEST(Adversarial, RequestsOfBadLengthAreInvalidRequests) {
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
TEST(Adversarial, AnEmptyWriteLastIsAnInvalidRequest) {
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
TEST(Adversarial, AShortSendMiddleIsAnInvalidRequest) {
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

// A READ of exactly 2^31 bytes is legal: it is answered, at 2^21 PSNs.
TEST(Adversarial, AReadOfTwoGiBIsAnswered) {
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

// --- Deregistration while traffic is in flight, both ends, both directions --------

constexpr std::uint32_t kBig = 1 << 20;

// Steps the pair until `cond` holds, then returns; fails the test if it never does.
template <typename Cond>
void run_until(RcPair& p, Cond cond) {
  ASSERT_TRUE(p.net.run_until(cond, 10'000'000'000ull));
}

bool any_byte(const std::uint8_t* p, std::size_t n, std::uint8_t v) {
  return std::find(p, p + n, v) != p + n;
}

// The responder's region goes while a WRITE into it is under way: nothing
// lands after dereg_mr, the requester gets a remote access error.
TEST(Adversarial, DeregOfAWriteTargetStopsTheWrite) {
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

// The responder's region goes while a READ from it is being answered: no
// response carries what the memory holds after dereg_mr.
TEST(Adversarial, DeregOfAReadSourceStopsTheResponses) {
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

// The requester's own region goes while its WRITE is being sent: no packet
// reads it after dereg_mr; the WR ends with a local protection error.
TEST(Adversarial, DeregOfAWriteSourceEndsTheWr) {
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

// The requester's READ destination goes while responses arrive: none is
// placed after dereg_mr; the WR ends with a local protection error.
TEST(Adversarial, DeregOfAReadDestinationEndsTheWr) {
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

// --- Exits that used to be silent ---------------------------------------------------

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

// With one responder resource, a duplicate of the READ before the last is
// too old to answer: dropped, counted, the QP goes on.
TEST(Adversarial, ADuplicateReadOlderThanEveryResourceIsCounted) {
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

TEST(Adversarial, ADuplicateAtomicWhoseResultIsGoneIsCounted) {
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
TEST(Adversarial, ADuplicateReadWithTheAnswerQueueFullIsCounted) {
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

// An ACK the responder owes when its answer queue is full is not sent (the
// requester's timer recovers it): counted.
TEST(Adversarial, AnAckLostToAFullAnswerQueueIsCounted) {
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

// AETH syndrome 0b10xxxxx is reserved (9.7.5.1): dropped and counted.
TEST(Adversarial, AReservedAethSyndromeIsCounted) {
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

// The rules tables: every step and exit has a name and a rule, names are
// unique, and each exit's counter exists by its name.
TEST(TransportRules, EveryStepAndExitIsNamedOnce) {
  std::set<std::string> names;
  for (const transport::ExitRule& e : transport::kResponderExits) {
    EXPECT_TRUE(names.insert(std::string("responder.") + e.name).second) << e.name;
    EXPECT_GT(std::strlen(e.rule), 10u) << e.name;
    EXPECT_NE(transport::qp_counter_by_name(transport::qp_counter_name(e.counter)), transport::QpCounter::kCount);
    const bool fatal = e.answer == transport::Answer::kInvalidRequest || e.answer == transport::Answer::kRemoteAccess ||
                       e.answer == transport::Answer::kRemoteOperational;
    if (!fatal) {
      EXPECT_EQ(e.status, transport::kNoCompletion) << e.name << ": only a fatal exit ends a receive";
    }
  }
  for (const transport::CompleterRule& e : transport::kCompleterExits) {
    EXPECT_TRUE(names.insert(std::string("completer.") + e.name).second) << e.name;
    EXPECT_GT(std::strlen(e.rule), 10u) << e.name;
  }
  for (const char* n : transport::kResponderStepNames) EXPECT_TRUE(names.insert(std::string("rstep.") + n).second);
  for (const char* n : transport::kCompleterStepNames) EXPECT_TRUE(names.insert(std::string("cstep.") + n).second);
  EXPECT_EQ(transport::rule_of(transport::nak_exit(wire::NakCode::kInvalidRequest)).status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(transport::rule_of(transport::nak_exit(wire::NakCode::kRemoteOperationalError)).status, IBV_WC_REM_OP_ERR);
  EXPECT_EQ(transport::wc_opcode_for(IBV_WR_RDMA_WRITE_WITH_IMM), IBV_WC_RDMA_WRITE);
  EXPECT_EQ(transport::wc_opcode_for(IBV_WR_SEND_WITH_INV), IBV_WC_SEND);
  EXPECT_EQ(transport::wc_opcode_for(IBV_WR_ATOMIC_CMP_AND_SWP), IBV_WC_COMP_SWAP);
}

}  // namespace
}  // namespace uroce::test
