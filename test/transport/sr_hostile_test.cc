// Selective repeat under hostile input (issue 30, docs/transport.md
// "Selective repeat", "Hostile input"): a scripted peer sends well-formed
// frames of the mode (valid ICRC) whose SRETH, RETH, PSN or SACK lie, and
// each case checks that the lie is refused and counted, that nothing is
// placed or completed because of it, and what the QP answers and becomes.
// One exit of each rule is in transport_exits_test.cc; these push the rules
// to the places a hostile peer aims at: a placement past the region's end
// ahead of the expected PSN (where no NAK can be sent), a receive ordinal
// beyond what is posted, the window's edge, SACKs naming PSNs never sent,
// and a SACK that claims PSNs the peer never had.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "support/exit_rig.h"
#include "wire/opcode.h"

namespace uroce::test {
namespace {

using transport::QpCounter;
using wire::NakCode;
using wire::Opcode;

constexpr std::uint32_t kMtu = 1024;  // ConnectParams' default path MTU
constexpr std::uint32_t p = kRqPsn;   // the peer's requests start here (our expected PSN)
constexpr std::uint32_t s = kSqPsn;   // ours start here

// Selective repeat's opcodes (lib/wire/opcode.h, rows 0xc0-0xdd).
constexpr auto kSendFirst = static_cast<Opcode>(0xc0);
constexpr auto kSendOnly = static_cast<Opcode>(0xc4);
constexpr auto kWriteFirst = static_cast<Opcode>(0xc6);
constexpr auto kWriteMiddle = static_cast<Opcode>(0xc7);
constexpr auto kWriteOnly = static_cast<Opcode>(0xca);
constexpr auto kReadRequest = static_cast<Opcode>(0xcc);
constexpr auto kReadResponseOnly = static_cast<Opcode>(0xd0);
constexpr auto kAck = static_cast<Opcode>(0xd1);
constexpr auto kAtomicAck = static_cast<Opcode>(0xd2);

ConnectParams sr_params() {
  ConnectParams params;
  params.transport.selective_repeat = true;
  params.timeout = 10;  // 4 ms
  params.retry_cnt = 2;
  return params;
}

// A request packet of the mode: its SRETH puts it `offset` bytes into a
// message of `length` bytes that began at `first_psn`.
wire::FrameSpec sr_packet(ExitRig& rig, Opcode op, std::uint32_t psn, std::uint32_t first_psn, std::uint32_t offset,
                          std::uint32_t length, bool last, std::uint32_t recv_index = 0) {
  wire::FrameSpec f = rig.rc->spec(op, psn);
  f.bth.set_ack_req(true);
  f.sreth.offset.set(offset);
  f.sreth.length.set(length);
  f.sreth.recv_index.set(recv_index);
  f.sreth.flags = last ? wire::kSrethLast : 0;
  f.sreth.first_psn.set(first_psn & 0xffffff);
  return f;
}

// Its RETH: the whole message's `length` bytes at `va` under `rkey`.
void with_reth(wire::FrameSpec& f, std::uint64_t va, std::uint32_t rkey, std::uint32_t length) {
  f.reth.va.set(va);
  f.reth.rkey.set(rkey);
  f.reth.dma_length.set(length);
}

// The peer's SACK: it expects `expected` and holds expected + 1 + i for each i.
wire::FrameSpec sack(ExitRig& rig, std::uint32_t expected, const std::vector<std::uint32_t>& held = {}) {
  wire::FrameSpec f = rig.rc->spec(kAck, (expected - 1) & 0xffffff);
  f.sacketh.expected.set(expected & 0xffffff);
  for (const std::uint32_t i : held) f.sacketh.bits[i / 8] = static_cast<std::uint8_t>(f.sacketh.bits[i / 8] | (0x80u >> (i % 8)));
  return f;
}

std::size_t nonzero_bytes(const std::vector<std::uint8_t>& v, std::size_t from, std::size_t to) {
  return static_cast<std::size_t>(std::count_if(v.begin() + static_cast<std::ptrdiff_t>(from),
                                                v.begin() + static_cast<std::ptrdiff_t>(to),
                                                [](std::uint8_t b) { return b != 0; }));
}

// The NAKs (and RNR NAKs) among the frames sent since the mark.
std::vector<wire::ParsedFrame> naks_sent(ExitRig& rig) {
  std::vector<wire::ParsedFrame> v;
  for (const wire::ParsedFrame& f : rig.rc->sent()) {
    if (f.info->has(wire::kAck) && wire::aeth_kind(f.aeth().syndrome) != wire::AethKind::kAck) v.push_back(f);
  }
  return v;
}

// The PSNs of the requests sent since the mark, in order.
std::vector<std::uint32_t> requests_sent(ExitRig& rig) {
  std::vector<std::uint32_t> v;
  for (const wire::ParsedFrame& f : rig.rc->sent()) {
    if (f.info->has(wire::kRequest)) v.push_back(f.bth().psn.get());
  }
  return v;
}

// --- Responder ---------------------------------------------------------------------

// A second region of the rig's PD over region[4096, 8192): bytes of the rig's
// region on either side are outside it, and readable to prove nothing landed.
constexpr std::size_t kSmallAt = 4096;
constexpr std::size_t kSmallLen = 4096;

TEST(SrHostile, WriteAheadOutsideTheRegionIsRefusedUnansweredThenNakedInOrder) {
  ExitRig rig;
  ScriptedRc& r = rig.connect(sr_params());
  MemoryRegion* small = rig.rc->dev.pd->reg_mr(rig.region.data() + kSmallAt, kSmallLen, kAll);
  ASSERT_NE(small, nullptr);
  // A WRITE of 3 packets whose RETH starts inside the small region: the
  // first packet lies inside it, the second (va + SRETH offset) runs 1008
  // bytes past its end.
  const std::uint64_t va = rig.va(kSmallAt + kSmallLen - kMtu - 16);
  const std::uint32_t length = 3 * kMtu;
  wire::FrameSpec middle = sr_packet(rig, kWriteMiddle, p + 2, p + 1, kMtu, length, false);
  with_reth(middle, va, small->rkey, length);
  const std::vector<std::uint8_t> bytes(kMtu, 0xab);

  rig.mark();
  r.inject(middle, bytes);
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::sr_ahead_refused), 1u);
  EXPECT_EQ(rig.delta(QpCounter::sr_ahead_placed), 0u);
  EXPECT_EQ(rig.delta(QpCounter::drop_rkey_violation), 0u) << "judged only in order";
  EXPECT_TRUE(rig.rc->dev.port.sent.empty()) << "ahead, nothing is answered (no NAK)";
  EXPECT_EQ(nonzero_bytes(rig.region, 0, rig.region.size()), 0u) << "nothing placed";
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);

  // The PSNs before it arrive (a WRITE Only, the message's First): placed.
  wire::FrameSpec only = rig.sr_write_only(p, rig.va(0), 64);
  r.inject(only, std::vector<std::uint8_t>(64, 0x11));
  wire::FrameSpec first = sr_packet(rig, kWriteFirst, p + 1, p + 1, 0, length, false);
  with_reth(first, va, small->rkey, length);
  r.inject(first, std::vector<std::uint8_t>(kMtu, 0x22));
  rig.settle();
  ASSERT_EQ(rig.qp()->state(), IBV_QPS_RTS);
  EXPECT_EQ(nonzero_bytes(rig.region, 0, 64), 64u);
  const std::size_t first_at = kSmallAt + kSmallLen - kMtu - 16;
  EXPECT_EQ(nonzero_bytes(rig.region, first_at, first_at + kMtu), kMtu);

  // The same packet, now at the expected PSN: NAK remote access, ERR.
  rig.mark();
  r.inject(middle, bytes);
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::drop_rkey_violation), 1u);
  EXPECT_EQ(rig.delta(QpCounter::nak_rem_access_sent), 1u);
  const std::vector<wire::ParsedFrame> naks = naks_sent(rig);
  ASSERT_EQ(naks.size(), 1u);
  EXPECT_EQ(int{naks[0].aeth().syndrome}, int{nak(NakCode::kRemoteAccessError)});
  EXPECT_EQ(naks[0].bth().psn.get(), p + 2);
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_ERR);
  EXPECT_EQ(nonzero_bytes(rig.region, first_at + kMtu, rig.region.size()), 0u) << "the refused packet placed nothing";
}

TEST(SrHostile, SendAheadNamingAReceiveBeyondThePostedIsRefused) {
  ExitRig rig;
  ScriptedRc& r = rig.connect(sr_params());
  rig.post_receives();  // ordinals 0 and 1: region[0, 4096) and region[8192, 12288)
  rig.mark();
  // Ordinal 2 (one past the posted) and one far beyond, both ahead.
  r.inject(sr_packet(rig, kSendOnly, p + 1, p + 1, 0, 64, true, 2), std::vector<std::uint8_t>(64, 0x5e));
  r.inject(sr_packet(rig, kSendOnly, p + 2, p + 2, 0, 64, true, 0x7abcde), std::vector<std::uint8_t>(64, 0x5e));
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::sr_ahead_refused), 2u);
  EXPECT_EQ(rig.delta(QpCounter::sr_ahead_placed), 0u);
  EXPECT_EQ(rig.delta(QpCounter::rnr_naks_sent), 0u);
  EXPECT_TRUE(rig.rc->dev.port.sent.empty());
  EXPECT_TRUE(rig.completions.empty());
  EXPECT_EQ(nonzero_bytes(rig.region, 0, rig.region.size()), 0u);
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);

  // In order the same ordinal finds no receive: RC's rule, an RNR NAK (the
  // requester may try again once more are posted), nothing placed.
  rig.mark();
  r.inject(sr_packet(rig, kSendOnly, p, p, 0, 64, true, 0x7abcde), std::vector<std::uint8_t>(64, 0x5e));
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::rnr_naks_sent), 1u);
  EXPECT_EQ(nonzero_bytes(rig.region, 0, rig.region.size()), 0u);
  EXPECT_TRUE(rig.completions.empty());
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);
}

TEST(SrHostile, SendNamingAPostedReceiveOutOfTurnEndsTheQp) {
  // Ordinal 1 while 0 is the next: the bytes go to our own receive 1 (a
  // posted buffer of this QP), but the message cannot complete out of
  // turn: NAK invalid request, ERR, no receive completes successfully.
  ExitRig rig;
  ScriptedRc& r = rig.connect(sr_params());
  rig.post_receives();
  rig.mark();
  r.inject(sr_packet(rig, kSendOnly, p, p, 0, 64, true, 1), std::vector<std::uint8_t>(64, 0x5e));
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::drop_bad_sreth), 1u);
  const std::vector<wire::ParsedFrame> naks = naks_sent(rig);
  ASSERT_EQ(naks.size(), 1u);
  EXPECT_EQ(int{naks[0].aeth().syndrome}, int{nak(NakCode::kInvalidRequest)});
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_ERR);
  EXPECT_EQ(nonzero_bytes(rig.region, 0, 8192), 0u) << "receive 0 untouched";
  for (const ibv_wc& wc : rig.completions) EXPECT_NE(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
}

// A Last whose SRETH passes an earlier message's PSN off as its own first
// one (SEND Only at p, then SEND Last at p + 1 claiming p as its first, with
// the length of a two-packet message): every PSN from a message's first to
// its last must be a packet of it, so the Last is NAKed Invalid Request at
// delivery, the QP goes to ERR and receive 1 does not complete.
TEST(SrHostile, ALastClaimingAnotherMessagesPsnsIsRefused) {
  ExitRig rig;
  ScriptedRc& r = rig.connect(sr_params());
  rig.post_receives();
  rig.mark();
  r.inject(sr_packet(rig, kSendOnly, p, p, 0, 8, true, 0), std::vector<std::uint8_t>(8, 0x11));
  r.inject(sr_packet(rig, static_cast<Opcode>(0xc2), p + 1, p, kMtu, kMtu + 8, true, 1),
           std::vector<std::uint8_t>(8, 0x22));  // SR_SEND_LAST
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::drop_bad_sreth), 1u);
  const std::vector<wire::ParsedFrame> naks = naks_sent(rig);
  ASSERT_EQ(naks.size(), 1u);
  EXPECT_EQ(int{naks[0].aeth().syndrome}, int{nak(NakCode::kInvalidRequest)});
  EXPECT_EQ(naks[0].bth().psn.get(), p + 1);
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_ERR);
  bool first_done = false;
  for (const ibv_wc& wc : rig.completions) {
    if (wc.wr_id == kInUse && wc.status == IBV_WC_SUCCESS) first_done = true;
    if (wc.wr_id == kNext) {
      EXPECT_NE(wc.status, IBV_WC_SUCCESS) << "receive 1 completed as a message it never got";
    }
  }
  EXPECT_TRUE(first_done) << "the honest SEND Only before it completes";
}

TEST(SrHostile, PsnBeyondTheWindowIsDroppedUnanswered) {
  ExitRig rig;
  ScriptedRc& r = rig.connect(sr_params());
  rig.post_receives();
  rig.mark();
  // 129 ahead: one past the window's last PSN (expected + 128).
  r.inject(rig.sr_write_only(p + 129, rig.va(0), 64), std::vector<std::uint8_t>(64, 1));
  r.inject(sr_packet(rig, kSendOnly, p + 129, p + 129, 0, 64, true, 0), std::vector<std::uint8_t>(64, 1));
  wire::FrameSpec read = sr_packet(rig, kReadRequest, p + 4000, p + 4000, 0, 8, true);
  with_reth(read, rig.va(0), rig.mr->rkey, 8);
  r.inject(read);
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::sr_out_of_window), 3u);
  EXPECT_EQ(rig.delta(QpCounter::sr_ahead_refused), 0u);
  EXPECT_TRUE(rig.rc->dev.port.sent.empty()) << "no answer";
  EXPECT_EQ(nonzero_bytes(rig.region, 0, rig.region.size()), 0u);
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);

  // The window's last PSN is taken (placed, SACKed): the edge is exact.
  rig.mark();
  r.inject(rig.sr_write_only(p + 128, rig.va(0), 64), std::vector<std::uint8_t>(64, 1));
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::sr_ahead_placed), 1u);
  EXPECT_EQ(rig.delta(QpCounter::sr_out_of_window), 0u);
  EXPECT_EQ(nonzero_bytes(rig.region, 0, 64), 64u);
}

// One SRETH that disagrees with the packet it rides on, at `psn`.
struct Disagreement {
  const char* name;
  std::function<void(ExitRig&, std::uint32_t psn)> inject;
};

std::vector<Disagreement> disagreements() {
  const auto write = [](ExitRig& rig, Opcode op, std::uint32_t psn, std::uint32_t first_psn, std::uint32_t offset,
                        std::uint32_t length, std::uint32_t reth_length, std::uint32_t payload, bool last) {
    wire::FrameSpec f = sr_packet(rig, op, psn, first_psn, offset, length, last);
    with_reth(f, rig.va(0), rig.mr->rkey, reth_length);
    rig.rc->inject(f, std::vector<std::uint8_t>(payload, 0x77));
  };
  return {
      {"OffsetNotItsPsns",  // one PSN after the first, two MTUs in
       [=](ExitRig& rig, std::uint32_t psn) {
         write(rig, kWriteMiddle, psn, psn - 1, 2 * kMtu, 4 * kMtu, 4 * kMtu, kMtu, false);
       }},
      {"OffsetNotAnMtuMultiple",
       [=](ExitRig& rig, std::uint32_t psn) {
         write(rig, kWriteMiddle, psn, psn - 1, kMtu + 8, 4 * kMtu, 4 * kMtu, kMtu, false);
       }},
      {"WriteFirstNotAtZero",  // PSN and offset agree; the opcode says First
       [=](ExitRig& rig, std::uint32_t psn) {
         write(rig, kWriteFirst, psn, psn - 1, kMtu, 4 * kMtu, 4 * kMtu, kMtu, false);
       }},
      {"SendFirstNotAtZero",
       [](ExitRig& rig, std::uint32_t psn) {
         rig.rc->inject(sr_packet(rig, kSendFirst, psn, psn - 1, kMtu, 4 * kMtu, false),
                        std::vector<std::uint8_t>(kMtu, 0x77));
       }},
      {"RethLengthNotTheMessages",
       [=](ExitRig& rig, std::uint32_t psn) { write(rig, kWriteOnly, psn, psn, 0, 64, 128, 64, true); }},
      {"PayloadPastTheMessageEnd",  // a Middle whose MTU of payload runs 1016 bytes past it
       [=](ExitRig& rig, std::uint32_t psn) {
         write(rig, kWriteMiddle, psn, psn - 1, kMtu, kMtu + 8, kMtu + 8, kMtu, false);
       }},
      {"LastFlagOnAMiddle",
       [=](ExitRig& rig, std::uint32_t psn) {
         write(rig, kWriteMiddle, psn, psn - 1, kMtu, 2 * kMtu, 2 * kMtu, kMtu, true);
       }},
  };
}

// gtest names a failing case's parameter with this.
void PrintTo(const Disagreement& d, std::ostream* os) { *os << d.name; }

class SrethDisagrees : public ::testing::TestWithParam<Disagreement> {};

TEST_P(SrethDisagrees, AheadRefusedUnanswered) {
  ExitRig rig;
  rig.connect(sr_params());
  rig.post_receives();
  rig.mark();
  GetParam().inject(rig, p + 3);
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::sr_ahead_refused), 1u);
  EXPECT_EQ(rig.delta(QpCounter::sr_ahead_placed), 0u);
  EXPECT_EQ(rig.delta(QpCounter::drop_bad_sreth), 0u) << "judged only in order";
  EXPECT_TRUE(rig.rc->dev.port.sent.empty());
  EXPECT_EQ(nonzero_bytes(rig.region, 0, rig.region.size()), 0u);
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);
}

TEST_P(SrethDisagrees, InOrderNakedInvalidRequest) {
  ExitRig rig;
  rig.connect(sr_params());
  rig.post_receives();
  rig.mark();
  GetParam().inject(rig, p);
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::drop_bad_sreth), 1u);
  EXPECT_EQ(rig.delta(QpCounter::nak_inv_req_sent), 1u);
  const std::vector<wire::ParsedFrame> naks = naks_sent(rig);
  ASSERT_EQ(naks.size(), 1u);
  EXPECT_EQ(int{naks[0].aeth().syndrome}, int{nak(NakCode::kInvalidRequest)});
  EXPECT_EQ(naks[0].bth().psn.get(), p);
  EXPECT_EQ(nonzero_bytes(rig.region, 0, rig.region.size()), 0u);
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_ERR);
  for (const ibv_wc& wc : rig.completions) EXPECT_NE(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
}

INSTANTIATE_TEST_SUITE_P(Rules, SrethDisagrees, ::testing::ValuesIn(disagreements()),
                         [](const auto& row) { return std::string(row.param.name); });

// --- Requester ---------------------------------------------------------------------

// The statuses of the completions of `wr_id` so far.
std::vector<ibv_wc_status> statuses(const ExitRig& rig, std::uint64_t wr_id) {
  std::vector<ibv_wc_status> v;
  for (const ibv_wc& wc : rig.completions) {
    if (wc.wr_id == wr_id) v.push_back(wc.status);
  }
  return v;
}

TEST(SrHostile, SackNamingPsnsNeverSentIsRefusedAndCompletesNothing) {
  ExitRig rig;
  ScriptedRc& r = rig.connect(sr_params());
  rig.post_sends(IBV_WR_RDMA_WRITE);  // kInUse at s, kNext at s + 1
  rig.mark();
  r.inject(sack(rig, s + 1, {0}));    // s + 1 held? fine, but s + 2 was never sent
  r.inject(sack(rig, s, {0, 127}));   // s + 128: far past what was sent
  r.inject(sack(rig, s + 3));         // expects a PSN past the highest sent
  r.inject(sack(rig, s + 0x400000));  // and far past it
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::sr_sack_refused), 4u);
  EXPECT_TRUE(rig.completions.empty()) << "a refused SACK acknowledges nothing, not even s";
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);

  // The truth completes both: the refusals left nothing behind.
  r.inject(sack(rig, s + 2));
  rig.settle();
  EXPECT_EQ(statuses(rig, kInUse), std::vector<ibv_wc_status>{IBV_WC_SUCCESS});
  EXPECT_EQ(statuses(rig, kNext), std::vector<ibv_wc_status>{IBV_WC_SUCCESS});
}

TEST(SrHostile, StaleSackIsCountedAndIgnored) {
  ExitRig rig;
  ScriptedRc& r = rig.connect(sr_params());
  rig.post_sends(IBV_WR_RDMA_WRITE);
  r.inject(sack(rig, s + 1));  // kInUse acknowledged
  rig.settle();
  ASSERT_EQ(statuses(rig, kInUse), std::vector<ibv_wc_status>{IBV_WC_SUCCESS});
  rig.completions.clear();
  rig.mark();
  // Older than what was acknowledged, and claiming s + 1 besides.
  r.inject(sack(rig, s, {0}));
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::duplicate_responses), 1u);
  EXPECT_EQ(rig.delta(QpCounter::sr_sack_refused), 0u);
  EXPECT_TRUE(rig.completions.empty());
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);
  // Its claim was not taken: once the short timeout runs, s + 1 goes again.
  rig.rc->clock.now += 1'000'000;  // 1 ms: past RTO_low (100 us before any RTT sample), before the 4 ms ACK timeout
  rig.settle();
  EXPECT_EQ(requests_sent(rig), std::vector<std::uint32_t>{s + 1});
}

TEST(SrHostile, ForgedResponsesForPsnsNeverSentAreRefused) {
  ExitRig rig;
  ScriptedRc& r = rig.connect(sr_params());
  rig.post_sends(IBV_WR_RDMA_READ);  // kInUse at s, kNext at s + 1, into region[kRegion / 2, + 64)
  rig.mark();
  wire::FrameSpec read = rig.rc->spec(kReadResponseOnly, s + 7);
  r.inject(read, std::vector<std::uint8_t>(64, 0xee));
  wire::FrameSpec atomic = rig.rc->spec(kAtomicAck, s + 7);
  atomic.atomic_ack_eth.orig_data.set(0xeeeeeeeeeeeeeeeeull);
  r.inject(atomic);
  wire::FrameSpec far = rig.rc->spec(kReadResponseOnly, s + 0x300000);
  r.inject(far, std::vector<std::uint8_t>(64, 0xee));
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::drop_response_not_sent), 3u);
  EXPECT_TRUE(rig.completions.empty());
  EXPECT_EQ(nonzero_bytes(rig.region, 0, rig.region.size()), 0u) << "no response byte placed";
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);

  // An atomic ACK for a READ's PSN (sent, but no atomic waits there).
  rig.mark();
  atomic.bth.psn.set(s);
  r.inject(atomic);
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::duplicate_responses), 1u);
  EXPECT_TRUE(rig.completions.empty());
  EXPECT_EQ(nonzero_bytes(rig.region, 0, rig.region.size()), 0u);
}

TEST(SrHostile, SackClaimingPsnsLostOnTheLinkCompletesNothingUnacknowledged) {
  // Three WRITEs: A at s, B at s + 1 and s + 2, C at s + 3, all lost on the
  // link. The peer lies once that it holds s + 1 to s + 3, then answers
  // truthfully what it holds. Completion needs the cumulative
  // acknowledgement, so nothing completes for the lie; the requester
  // believes the claim only until the peer's expected PSN reaches a claimed
  // one (a PSN the peer still expects is not held, whatever was claimed
  // before), so each is sent again in turn and all three complete once the
  // peer really holds them, in posting order.
  ExitRig rig;
  ScriptedRc& r = rig.connect(sr_params());
  const std::uint64_t ids[] = {0xa, 0xb, 0xc};
  const std::uint32_t ends[] = {s + 1, s + 3, s + 4};  // one past each WR's last PSN
  ASSERT_EQ(rig.post_send(IBV_WR_RDMA_WRITE, 64, ids[0]), 0);
  ASSERT_EQ(rig.post_send(IBV_WR_RDMA_WRITE, 2 * kMtu, ids[1]), 0);
  ASSERT_EQ(rig.post_send(IBV_WR_RDMA_WRITE, 64, ids[2]), 0);
  r.run(2);
  ASSERT_EQ(rig.rc->sent().size(), 4u);
  rig.mark();  // the four first transmissions are lost
  r.inject(sack(rig, s, {0, 1, 2}));
  rig.settle();
  EXPECT_TRUE(rig.completions.empty()) << "nothing was acknowledged cumulatively";

  // The peer now holds what reaches it, and says so.
  std::vector<bool> held(4, false);
  const auto expected = [&] {
    std::uint32_t e = 0;
    while (e < held.size() && held[e]) ++e;
    return s + e;
  };
  // Whatever the requester sent reaches the peer, which answers at once.
  std::vector<std::uint32_t> resent;
  const auto answer = [&] {
    for (;;) {
      const std::vector<std::uint32_t> sent = requests_sent(rig);
      rig.rc->dev.port.sent.clear();
      if (sent.empty()) return;
      for (const std::uint32_t psn : sent) {
        ASSERT_LT(psn - s, held.size());
        held[psn - s] = true;
        resent.push_back(psn);
      }
      std::vector<std::uint32_t> bits;
      for (std::uint32_t psn = expected() + 1; psn < s + held.size(); ++psn) {
        if (held[psn - s]) bits.push_back(psn - expected() - 1);
      }
      r.inject(sack(rig, expected(), bits));
      rig.settle();
      for (const ibv_wc& wc : rig.completions) {
        const auto k = static_cast<std::size_t>(std::find(std::begin(ids), std::end(ids), wc.wr_id) - std::begin(ids));
        ASSERT_LT(k, 3u);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_LE(ends[k], expected()) << "WR " << wc.wr_id << " completed before the peer held all of it";
      }
    }
  };
  for (int round = 0; round < 40 && rig.completions.size() < 3; ++round) {
    rig.rc->clock.now += 1'000'000;  // past RTO_low, before the 4 ms ACK timeout
    rig.settle();
    answer();
  }
  ASSERT_EQ(rig.completions.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(rig.completions[k].wr_id, ids[k]) << "posting order";
  EXPECT_EQ(rig.qp()->state(), IBV_QPS_RTS);
  // Each PSN went again once, in order: none was resent while the peer's
  // answer still claimed it.
  EXPECT_EQ(resent, (std::vector<std::uint32_t>{s, s + 1, s + 2, s + 3}));
}

}  // namespace
}  // namespace uroce::test
