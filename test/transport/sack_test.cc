// Selective repeat's bookkeeping (lib/transport/sack.h) against a reference
// model: a set of the PSNs that arrived. Random streams of packets (lost,
// reordered, duplicated, around the 24-bit wrap) go through a requester's
// SendScoreboard and a responder's ReceiveWindow joined by the SACKs the
// window sends back; after every step both must agree with the model, and
// the requester's resends, driven only by the SACKs, must finish the stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <set>

#include "support/test_seed.h"
#include "transport/sack.h"

namespace uroce::test {
namespace {

using transport::kSackWindow;
using transport::psn_add;
using transport::psn_diff;
using transport::ReceiveWindow;
using transport::SackBits;
using transport::SendScoreboard;
using Arrival = ReceiveWindow::Arrival;

TEST(Sack, TheWindowTakesEachPsnOnceAndMovesOnPastWhatCameAhead) {
  ReceiveWindow w;
  w.reset(0xfffffe);
  EXPECT_EQ(w.take(0x000001), Arrival::kAhead);  // across the wrap
  EXPECT_EQ(w.take(0x000001), Arrival::kDuplicate);
  EXPECT_EQ(w.take(0xffffff), Arrival::kAhead);
  EXPECT_EQ(w.take(0xfffffd), Arrival::kDuplicate);
  EXPECT_EQ(w.take(psn_add(0xfffffe, kSackWindow + 1)), Arrival::kOutside);
  EXPECT_EQ(w.take(psn_add(0xfffffe, kSackWindow)), Arrival::kAhead) << "the window's last PSN";
  EXPECT_EQ(w.take(0xfffffe), Arrival::kInOrder);
  EXPECT_EQ(w.expected(), 0x000000u) << "past 0xffffff, which came ahead; 0 has not";
  EXPECT_EQ(w.take(0x000000), Arrival::kInOrder);
  EXPECT_EQ(w.expected(), 0x000002u);
}

// A READ or atomic run in order moves the window past every PSN its answer
// occupies: what came ahead inside that range is forgotten, what came
// right after it is taken at once.
TEST(Sack, AdvancePastAReadTakesWhatCameRightAfterIt) {
  ReceiveWindow w;
  w.reset(0xfffff0);
  EXPECT_EQ(w.take(0xfffff4), Arrival::kAhead);  // inside the READ's range (a forged packet)
  EXPECT_EQ(w.take(0x000002), Arrival::kAhead);  // just past it, across the wrap
  EXPECT_EQ(w.take(0x000003), Arrival::kAhead);
  w.advance(0x000002);                           // the READ occupied 0xfffff0 to 0x000001
  EXPECT_EQ(w.expected(), 0x000004u) << "0x000002 and 0x000003 had come";
  EXPECT_EQ(w.classify(0xfffff4), Arrival::kDuplicate);
  w.advance(0x000001);  // going back moves nothing
  EXPECT_EQ(w.expected(), 0x000004u);
  w.advance(psn_add(0x000004, 1000));  // far past the window: nothing kept
  EXPECT_EQ(w.expected(), psn_add(0x000004, 1000));
  EXPECT_TRUE(w.seen().none());
}

TEST(Sack, AScoreboardRefusesSacksForPsnsNeverSentOrGoingBack) {
  SendScoreboard s;
  s.reset(100);
  SackBits bits;
  bits.set(3);  // PSN 100 + 1 + 3 = 104
  EXPECT_FALSE(s.on_sack(100, bits, 104)) << "104 was never sent (next is 104)";
  EXPECT_TRUE(s.on_sack(100, bits, 105));
  EXPECT_TRUE(s.has(104));
  EXPECT_FALSE(s.has(100));
  EXPECT_EQ(s.highest_held(), 105u);
  EXPECT_EQ(s.next_missing(100, s.highest_held()), 100u);
  EXPECT_EQ(s.next_missing(101, s.highest_held()), 101u);
  EXPECT_FALSE(s.on_sack(99, SackBits{}, 105)) << "expects a PSN before una";
  EXPECT_FALSE(s.on_sack(106, SackBits{}, 105)) << "expects a PSN never sent";
  EXPECT_TRUE(s.on_sack(103, SackBits{}, 105));
  EXPECT_EQ(s.una(), 103u);
  EXPECT_TRUE(s.has(104)) << "what the peer held stays held";
  EXPECT_EQ(s.next_missing(103, s.highest_held()), 103u);
}

// One requester and one responder over a lossy, reordering, duplicating
// link, on the bookkeeping alone: the requester sends new PSNs while fewer
// than the window are unacknowledged, and resends what the latest SACK
// shows missing below the highest PSN the peer holds (or, with nothing
// arriving, its oldest: the timeout). Checked against the model after each
// arrival.
TEST(Sack, RandomStreamsAgreeWithTheModelAndFinish) {
  const std::uint64_t seed = test_seed();
  for (int round = 0; round < 20; ++round) {
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(round));
    const std::uint32_t start = static_cast<std::uint32_t>(0xffffff - rng() % 300);
    const std::uint32_t total = 500 + static_cast<std::uint32_t>(rng() % 1500);
    const double loss = 0.01 * static_cast<double>(rng() % 20);  // up to 19%
    ReceiveWindow rx;
    rx.reset(start);
    SendScoreboard tx;
    tx.reset(start);
    std::set<std::uint32_t> arrived;  // the model: offsets from `start`
    std::uint32_t next = 0;           // offset of the next new PSN
    std::uint32_t resend_from = 0;
    std::deque<std::uint32_t> wire;   // offsets in flight, in arrival order
    int idle = 0;
    for (int step = 0; step < 200000 && tx.una() != psn_add(start, total); ++step) {
      // Send: new PSNs within the window, then what the SACKs show missing.
      while (next < total && psn_diff(psn_add(start, next), tx.una()) < static_cast<std::int32_t>(kSackWindow)) {
        wire.push_back(next++);
      }
      const std::uint32_t limit = tx.highest_held();
      const std::uint32_t miss = tx.next_missing(psn_add(start, resend_from), limit);
      if (miss != limit) {
        const auto off = static_cast<std::uint32_t>(psn_diff(miss, start));
        wire.push_back(off);
        resend_from = off + 1;
      }
      if (wire.empty() || ++idle > 50) {
        // The timeout: the oldest unacknowledged PSN again, and the resend
        // scan starts over.
        wire.push_back(static_cast<std::uint32_t>(psn_diff(tx.una(), start)));
        resend_from = 0;
        idle = 0;
      }
      // Deliver one packet: maybe lost, maybe another first, maybe twice.
      if (wire.size() > 1 && rng() % 4 == 0) std::swap(wire[0], wire[1 + rng() % (wire.size() - 1)]);
      const std::uint32_t off = wire.front();
      wire.pop_front();
      if (rng() % 50 == 0) wire.push_back(off);
      if (static_cast<double>(rng() % 10000) < loss * 10000) continue;
      idle = 0;
      const std::uint32_t psn = psn_add(start, off);
      const Arrival a = rx.take(psn);
      // The model: in order or ahead within the window exactly when new.
      const std::uint32_t expected_off = static_cast<std::uint32_t>(psn_diff(rx.expected(), start));
      if (a == Arrival::kInOrder || a == Arrival::kAhead) {
        ASSERT_TRUE(arrived.insert(off).second) << "taken twice: " << off << "; " << seed_note(seed);
      } else if (a == Arrival::kDuplicate) {
        ASSERT_TRUE(arrived.count(off) == 1 || off < expected_off) << off << "; " << seed_note(seed);
      }
      std::uint32_t contiguous = 0;
      while (arrived.count(contiguous)) ++contiguous;
      ASSERT_EQ(expected_off, contiguous) << "round " << round << "; " << seed_note(seed);
      for (std::uint32_t i = 0; i < kSackWindow; ++i) {
        ASSERT_EQ(rx.seen()[i], arrived.count(contiguous + 1 + i) == 1) << i << "; " << seed_note(seed);
      }
      // The SACK goes back (never lost here: an ACK lost is a later one's).
      ASSERT_TRUE(tx.on_sack(rx.expected(), rx.seen(), psn_add(start, next))) << seed_note(seed);
      for (std::uint32_t o = static_cast<std::uint32_t>(psn_diff(tx.una(), start)); o < next; ++o) {
        ASSERT_EQ(tx.has(psn_add(start, o)), arrived.count(o) == 1) << o << "; " << seed_note(seed);
      }
    }
    ASSERT_EQ(tx.una(), psn_add(start, total)) << "round " << round << " did not finish; " << seed_note(seed);
    ASSERT_EQ(arrived.size(), total) << seed_note(seed);
  }
}

}  // namespace
}  // namespace uroce::test
