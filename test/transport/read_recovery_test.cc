// Recovery of a large RDMA READ whose answer loses packets in bursts (as an
// af_packet ring that overflows does: Open MPI over UCX moves every large
// message by READ, and a 4 MiB one is 1024 response packets in one burst).
// Against a peer the test plays by hand (ScriptedRc):
//  - requester: the answer to the READ sent again loses its first packets
//    too; the gap is asked for again at once, not after the local ACK
//    timeout (UCX's is about a second: the cliff of issue 27);
//  - requester: a READ larger than the window is asked for in segments, so
//    that no answer in flight is larger than the window (the tail of a
//    bigger one is lost whole by a ring that cannot hold it, and only the
//    timeout finds it);
//  - responder: a duplicate READ in the middle of an answer still being sent
//    restarts that answer from the duplicate's PSN, instead of sending the
//    rest of the old one first and then the same bytes again.
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "support/scripted_rc.h"
#include "support/work_requests.h"
#include "transport/qp.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

using wire::Opcode;

constexpr std::uint32_t kMtu = 1024;  // ConnectParams' default path MTU

// The READ requests among the frames sent from index `from` on, as
// (PSN, DMA length).
std::vector<std::pair<std::uint32_t, std::uint32_t>> read_requests(ScriptedRc& r, std::size_t from = 0) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  const auto sent = r.sent();
  for (std::size_t i = from; i < sent.size(); ++i) {
    if (sent[i].opcode != static_cast<std::uint8_t>(Opcode::kRcReadRequest)) continue;
    out.emplace_back(sent[i].bth().psn.get(), sent[i].reth().dma_length.get());
  }
  return out;
}

// Packet `i` of an 8-packet READ answer starting at kSqPsn, carrying byte
// value i + 1.
void answer(ScriptedRc& r, std::uint32_t i, std::uint32_t packets) {
  const Opcode op = i == 0 ? Opcode::kRcReadResponseFirst
                    : i + 1 == packets ? Opcode::kRcReadResponseLast
                                       : Opcode::kRcReadResponseMiddle;
  r.inject(r.spec(op, kSqPsn + i), std::vector<std::uint8_t>(kMtu, static_cast<std::uint8_t>(i + 1)));
}

TEST(ReadRecovery, AResentReadAnswerThatLosesItsHeadIsAskedForAgainAtOnce) {
  ScriptedRc r;
  constexpr std::uint32_t kPackets = 8;
  std::vector<std::uint8_t> dst(kPackets * kMtu, 0);
  MemoryRegion* mr = r.dev.pd->reg_mr(dst.data(), dst.size(), kAll);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_rdma(r.dev.qp, IBV_WR_RDMA_READ, dst.data(), static_cast<std::uint32_t>(dst.size()), mr->lkey,
                      0x10000, 0x99, 7),
            0);
  r.run(2);
  ASSERT_EQ(read_requests(r).size(), 1u);

  // The answer: packet 0 arrives, 1 and 2 are lost, 3 arrives: the gap is
  // found (an implicit NAK) and the READ is asked for again from packet 1.
  answer(r, 0, kPackets);
  answer(r, 3, kPackets);
  r.run(2);
  auto asked = read_requests(r);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[1].first, kSqPsn + 1);
  EXPECT_EQ(asked[1].second, (kPackets - 1) * kMtu);

  // The rest of the first answer (the responder had not seen the request
  // yet) arrives: stale, rising; nothing is asked for again.
  const std::size_t mark = r.dev.port.sent.size();
  answer(r, 4, kPackets);
  answer(r, 5, kPackets);
  r.run(2);
  EXPECT_TRUE(read_requests(r, mark).empty()) << "the tail of the first answer is no new loss";

  // The second answer begins: its packet 1 is lost, packet 2 arrives. Its
  // PSN is below the highest seen since going back, so it is the new
  // answer and packet 1 is missing again. No time passes: the local ACK
  // timeout has not run out.
  answer(r, 2, kPackets);
  r.run(2);
  asked = read_requests(r, mark);
  std::printf("  after the resent answer lost its head: %zu READ request(s), read_restart_lost %llu, timeouts %llu\n",
              asked.size(), static_cast<unsigned long long>(r.dev.qp->counter("read_restart_lost")),
              static_cast<unsigned long long>(r.dev.qp->counter("timeouts")));
  ASSERT_EQ(asked.size(), 1u) << "the lost head of the resent answer must be asked for at once, not at the timeout";
  EXPECT_EQ(asked[0].first, kSqPsn + 1);
  EXPECT_EQ(r.dev.qp->counter("read_restart_lost"), 1u);
  EXPECT_EQ(r.dev.qp->counter("timeouts"), 0u);

  // The third answer arrives whole: the READ completes with every byte.
  for (std::uint32_t i = 1; i < kPackets; ++i) answer(r, i, kPackets);
  r.run(4);
  ibv_wc wc[4];
  ASSERT_EQ(r.dev.cq->poll(4, wc), 1);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].wr_id, 7u);
  for (std::uint32_t i = 0; i < kPackets; ++i) EXPECT_EQ(dst[i * kMtu], i + 1) << "packet " << i;
  EXPECT_EQ(r.dev.qp->state(), IBV_QPS_RTS);
}

// Packet `i` of a segmented READ answer (segments of kReadSegmentPackets,
// each answered First ... Last), carrying byte value i % 251 + 1.
void segment_answer(ScriptedRc& r, std::uint32_t i, std::uint32_t packets) {
  const std::uint32_t seg = transport::kReadSegmentPackets;
  const bool first = i % seg == 0;
  const bool last = i + 1 == packets || (i + 1) % seg == 0;
  const Opcode op = first && last ? Opcode::kRcReadResponseOnly
                    : first       ? Opcode::kRcReadResponseFirst
                    : last        ? Opcode::kRcReadResponseLast
                                  : Opcode::kRcReadResponseMiddle;
  r.inject(r.spec(op, kSqPsn + i), std::vector<std::uint8_t>(kMtu, static_cast<std::uint8_t>(i % 251 + 1)));
}

TEST(ReadRecovery, AReadLargerThanTheWindowIsAskedForInSegments) {
  ScriptedRc r;
  constexpr std::uint32_t kPackets = 600;  // 4.7 segments
  const std::uint32_t seg = transport::kReadSegmentPackets;
  std::vector<std::uint8_t> dst(kPackets * kMtu, 0);
  MemoryRegion* mr = r.dev.pd->reg_mr(dst.data(), dst.size(), kAll);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_rdma(r.dev.qp, IBV_WR_RDMA_READ, dst.data(), static_cast<std::uint32_t>(dst.size()), mr->lkey,
                      0x10000, 0x99, 5),
            0);
  r.run(4);
  auto asked = read_requests(r);
  std::printf("  a READ of %u packets: %zu request(s) at first, the first for %u bytes\n", kPackets, asked.size(),
              asked.empty() ? 0 : asked[0].second);
  // Two segments fill the window; the answer in flight never exceeds it.
  ASSERT_EQ(asked.size(), transport::kWindowPackets / seg);
  EXPECT_EQ(asked[0], std::make_pair(kSqPsn, seg * kMtu));
  EXPECT_EQ(asked[1], std::make_pair(kSqPsn + seg, seg * kMtu));
  // The first segment's answer opens room for the third segment, and so on.
  std::uint32_t answered = 0;
  for (std::uint32_t s = 0; answered < kPackets; ++s) {
    const std::uint32_t end = std::min(kPackets, (s + 1) * seg);
    for (; answered < end; ++answered) segment_answer(r, answered, kPackets);
    r.run(4);
    asked = read_requests(r);
    const std::uint32_t want = std::min((kPackets + seg - 1) / seg, s + 1 + transport::kWindowPackets / seg);
    ASSERT_EQ(asked.size(), want) << "after segment " << s;
  }
  // The last segment asks for what is left.
  EXPECT_EQ(asked.back(), std::make_pair(kSqPsn + 4 * seg, (kPackets - 4 * seg) * kMtu));
  ibv_wc wc[2];
  ASSERT_EQ(r.dev.cq->poll(2, wc), 1);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].wr_id, 5u);
  for (std::uint32_t i = 0; i < kPackets; ++i) ASSERT_EQ(dst[i * kMtu], i % 251 + 1) << "packet " << i;
  EXPECT_EQ(r.dev.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(r.dev.qp->counter("timeouts"), 0u);
}

// Stale packets alone (the first answer's tail, rising) never make the
// requester ask again: only a PSN that goes back down does.
TEST(ReadRecovery, TheTailOfTheAnswerCutShortAsksForNothing) {
  ScriptedRc r;
  constexpr std::uint32_t kPackets = 16;
  std::vector<std::uint8_t> dst(kPackets * kMtu, 0);
  MemoryRegion* mr = r.dev.pd->reg_mr(dst.data(), dst.size(), kAll);
  ASSERT_EQ(post_rdma(r.dev.qp, IBV_WR_RDMA_READ, dst.data(), static_cast<std::uint32_t>(dst.size()), mr->lkey,
                      0x10000, 0x99, 1),
            0);
  r.run(2);
  answer(r, 0, kPackets);
  answer(r, 2, kPackets);  // 1 lost: asked again from 1
  r.run(2);
  ASSERT_EQ(read_requests(r).size(), 2u);
  const std::size_t mark = r.dev.port.sent.size();
  for (std::uint32_t i = 3; i < kPackets; ++i) answer(r, i, kPackets);
  r.run(4);
  EXPECT_TRUE(read_requests(r, mark).empty());
  EXPECT_EQ(r.dev.qp->counter("read_restart_lost"), 0u);
  // The new answer, whole: done.
  for (std::uint32_t i = 1; i < kPackets; ++i) answer(r, i, kPackets);
  r.run(4);
  ibv_wc wc[2];
  ASSERT_EQ(r.dev.cq->poll(2, wc), 1);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
}

// The responder: a duplicate READ that names a PSN inside an answer still
// being sent restarts the answer there. Every PSN from the duplicate's on is
// sent once after it, in order; the old answer's rest is not sent.
TEST(ReadRecovery, ADuplicateReadRestartsTheAnswerInProgress) {
  ScriptedRc r;
  constexpr std::uint32_t kPackets = 1024;  // 1 MiB: more than one poll sends
  std::vector<std::uint8_t> region(kPackets * kMtu, 0x33);
  MemoryRegion* mr = r.dev.pd->reg_mr(region.data(), region.size(), kAll);
  ASSERT_NE(mr, nullptr);
  auto read = [&](std::uint32_t from) {
    wire::FrameSpec f = r.spec(Opcode::kRcReadRequest, kRqPsn + from);
    f.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()) + from * kMtu);
    f.reth.rkey.set(mr->rkey);
    f.reth.dma_length.set((kPackets - from) * kMtu);
    return f;
  };
  r.inject(read(0));
  r.run(1);
  const std::size_t first_poll = r.dev.port.sent.size();
  ASSERT_GT(first_poll, 20u);
  ASSERT_LT(first_poll, kPackets) << "the answer must still be in progress for this case";
  // The requester found packet 10 missing and asks again from there.
  r.inject(read(10));
  for (std::uint64_t last = ~0ull; r.dev.port.tx_count != last;) {
    last = r.dev.port.tx_count;
    r.run(64);
  }
  const auto sent = r.sent();
  std::vector<std::uint32_t> after;
  for (std::size_t i = first_poll; i < sent.size(); ++i) after.push_back(sent[i].bth().psn.get() - kRqPsn);
  std::printf("  first poll sent %zu; after the duplicate at 10: %zu packets, first %u, last %u (old rest not resent: %s)\n",
              first_poll, after.size(), after.empty() ? 0 : after.front(), after.empty() ? 0 : after.back(),
              after.size() == kPackets - 10 ? "yes" : "no");
  ASSERT_EQ(after.size(), kPackets - 10) << "the rest of the old answer was sent as well as the new one";
  for (std::uint32_t i = 0; i < after.size(); ++i) ASSERT_EQ(after[i], 10 + i) << "at " << i;
  EXPECT_EQ(sent.back().opcode, static_cast<std::uint8_t>(Opcode::kRcReadResponseLast));
  EXPECT_EQ(r.dev.qp->counter("duplicate_requests"), 1u);
  EXPECT_EQ(r.dev.qp->state(), IBV_QPS_RTS);
}

}  // namespace
}  // namespace uroce::test
