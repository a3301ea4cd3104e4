// Reproducers for the defects found in the correctness/security review.
// Each test states what the IBTA (or rxe) expects; a failing EXPECT is the
// defect. The frames are injected into a live QP through a ScriptedPort.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "support/scripted_rc.h"
#include "verbs/connect.h"
#include "verbs/verbs_impl.h"
#include "wire/frame.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

using Rig = ScriptedRc;
using wire::NakCode;

// ---------------------------------------------------------------------------
// D1. A NAK (Invalid Request / Remote Access / Remote Operational, or an RNR
// NAK with rnr_retry exhausted, or a sequence NAK with retry_cnt exhausted)
// for a QP with no outstanding request: complete_send() runs on an empty send
// queue. It completes a work request that was never posted, moves comp_next
// past sq_posted, and qp_enter_error() then walks 2^32-1 slots, pushing
// "flush" completions until the CQ overflows. One frame from the peer's
// address (or anyone who can spoof it and guess the QPN) stalls the engine
// for seconds and kills the CQ (every later poll returns -EOVERFLOW).
// IBTA 9.9.2 / rxe: a response whose PSN matches no outstanding request is
// dropped (rxe_completer: get_wqe() finds no WQE -> COMPST_DONE).
TEST(Review, D1_NakForAnIdleQpCompletesAPhantomWrAndFloodsTheCq) {
  Rig r;
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

// The same path through an RNR NAK once rnr_retry is spent (rnr_retry = 0).
TEST(Review, D1b_RnrNakForAnIdleQpWithRnrRetry0DoesTheSame) {
  ConnectParams p;
  p.rnr_retry = 0;
  Rig r(p);
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

// ---------------------------------------------------------------------------
// D2. ACKs for PSNs never sent are honoured. The completer checks an ACK's
// PSN only against the started WQE's last PSN, never against the highest PSN
// sent (req.high_psn). With a 1 MiB WRITE (1024 packets) of which the window
// let 256 leave, an ACK for its last PSN completes it with IBV_WC_SUCCESS;
// an ACK for a PSN in the middle makes catch_up() move the requester forward,
// so those packets are never sent and the WRITE still completes successfully.
// IBTA 9.7.5.1/9.9.2: an acknowledgement is valid only for PSNs that have
// been sent (the outstanding range); others are silently dropped.
TEST(Review, D2_AnAckForAPsnNeverSentCompletesAWriteThatWasNotSent) {
  Rig r;
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

TEST(Review, D2b_AnAckInsideTheUnsentPartMakesTheRequesterSkipPackets) {
  Rig r;
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

// ---------------------------------------------------------------------------
// D3. A sequence NAK with a PSN ahead of anything sent, at an idle QP, moves
// the requester's next PSN there (requester_rewind() with nothing begun sets
// req.psn = psn unconditionally). The next WRITE is then held back for ever:
// req.psn - comp.psn >= kWindowPackets, and no timer is armed; it neither
// leaves nor completes. (With a smaller jump it leaves with a wrong PSN and
// the same wedge follows the peer's NAK.)
TEST(Review, D3_ASequenceNakAheadOfEverythingSentWedgesTheQp) {
  Rig r;
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

// ---------------------------------------------------------------------------
// D4. A multi-packet WRITE goes on into a region after ibv_dereg_mr returned.
// WRITE First caches the host pointer (resp.write_dst); Middle/Last packets
// write through it with no further key check, so the peer keeps writing into
// memory the application has deregistered (and may have freed: then it is a
// heap corruption, or SIGSEGV for an unmapped buffer, see D4b).
// IBTA 10.6 / o10-?: once Deregister returns, the region is inaccessible;
// rxe keeps a reference (qp->resp.mr) and its pages pinned.
TEST(Review, D4_WriteMiddleAndLastLandInADeregisteredRegion) {
  Rig r;
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

TEST(Review, D4b_WriteAfterDeregAndFreeCrashesTheEngine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Rig r;
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

// D5. The same for READ: a queued READ response keeps a raw pointer
// (Response::src) and goes on sending the region's bytes after dereg_mr.
TEST(Review, D5_ReadResponsesGoOnFromADeregisteredRegion) {
  Rig r;
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

// ---------------------------------------------------------------------------
// D6. READ DMA length is not limited to 2^31 (rxe: "See IBA C9-94") and the
// packet count (len + mtu - 1) / mtu is computed in 32 bits: a 0xffffffff
// READ (legal to a >= 4 GiB region) yields npackets == 0, last_psn = psn - 1,
// the expected PSN does not move, and the responder starts a response stream
// that only ends when r.psn wraps 2^24 packets later.
TEST(Review, D6_AFourGiBReadOverflowsThePacketCount) {
  Rig r;
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

// How long the 0xffffffff READ's answer runs: 2^24 packets (10 s of CPU)
// before the fix, one NAK now.
TEST(Review, D6c_TheOverflowedReadAnswersWithOneNak) {
  Rig r;
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

TEST(Review, D6b_AReadLongerThan2GiBIsExecuted) {
  Rig r;
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

// ---------------------------------------------------------------------------
// D7. SEND with Invalidate invalidates any rkey of the PD, including regions
// registered with reg_mr (which verbs cannot re-validate: this stack has no
// fast-register or LOCAL_INV/bind). One peer thereby revokes, for good, the
// remote access other QPs' peers have to that PD's regions. rxe refuses
// (rxe_invalidate_mr: "Type (%d) is wrong" unless IB_MR_TYPE_MEM_REG) and
// fails the SEND.
TEST(Review, D7_SendWithInvalidateRevokesAnOrdinaryRegionUsedByAnotherQp) {
  Rig r;
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

// ---------------------------------------------------------------------------
// D8. Keys repeat after 256 registrations in a slot (8-bit generation, the
// lowest free slot reused first), so a peer's stale rkey opens the region
// registered 256 registrations later at the same iova. The MR table's own
// comment promises "a key that outlives its region is not honoured by the
// next one".
TEST(Review, D8_AStaleRkeyOpensARegionRegistered256RegistrationsLater) {
  Rig r;
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

// ---------------------------------------------------------------------------
// D9. max_dest_rd_atomic = 0 (no responder resources) still executes READs
// and atomics: qp_apply sizes resources as max(n, 1). rxe: check_resource
// returns RESPST_ERR_TOO_MANY_RDMA_ATM_REQ (NAK Invalid Request).
TEST(Review, D9_NoResponderResourcesStillExecutesReads) {
  ConnectParams p;
  p.max_rd_atomic = 0;  // connect_rc sets max_dest_rd_atomic and max_rd_atomic from it
  Rig r(p);
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

// ---------------------------------------------------------------------------
// D10. Packets longer than the QP's path MTU are accepted: the parser checks
// First/Middle against any IB MTU value and Only/Last against 4096, never the
// QP's MTU. IBTA C9-92 (as rxe_resp_check_length applies it): Only/Last
// <= PMTU, First/Middle == PMTU, else Invalid Request.
TEST(Review, D10_PacketsLongerThanThePathMtuAreAccepted) {
  Rig r;  // MTU 1024
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

}  // namespace
}  // namespace uroce::test
