// The bounded neighbour table (drivers/dpdk/neighbors.h, review D11) on its
// own: no EAL, no frames.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <random>

#include "dpdk/neighbors.h"

namespace uroce::test {
namespace {

using dpdk::NeighborOutcome;
using dpdk::NeighborState;
using V4 = dpdk::NeighborTable<4>;
using V6 = dpdk::NeighborTable<16>;

std::array<std::uint8_t, 4> ip(std::uint32_t i) {
  return {static_cast<std::uint8_t>(i >> 24), static_cast<std::uint8_t>(i >> 16), static_cast<std::uint8_t>(i >> 8),
          static_cast<std::uint8_t>(i)};
}

std::array<std::uint8_t, 16> ip6(std::uint32_t i) {
  std::array<std::uint8_t, 16> a{0xfe, 0x80};
  for (int k = 0; k < 4; ++k) a[12 + k] = static_cast<std::uint8_t>(i >> (24 - 8 * k));
  return a;
}

wire::MacAddr mac(std::uint32_t i) {
  return {0x02, 0, static_cast<std::uint8_t>(i >> 24), static_cast<std::uint8_t>(i >> 16),
          static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i)};
}

TEST(NeighborTier, EvictsTheLeastRecentlyUsedWhenFull) {
  dpdk::NeighborTier<4> tier(3);
  EXPECT_FALSE(tier.insert(ip(1), mac(1), false));
  EXPECT_FALSE(tier.insert(ip(2), mac(2), false));
  EXPECT_FALSE(tier.insert(ip(3), mac(3), false));
  tier.touch(*tier.find(ip(1)));  // 2 is now the oldest
  EXPECT_TRUE(tier.insert(ip(4), mac(4), false));
  EXPECT_EQ(tier.find(ip(2)), nullptr);
  ASSERT_NE(tier.find(ip(1)), nullptr);
  EXPECT_EQ(tier.find(ip(1))->mac, mac(1));
  EXPECT_EQ(tier.size(), 3u);
  tier.erase(ip(3));  // a free slot again: no eviction
  EXPECT_FALSE(tier.insert(ip(5), mac(5), true));
  EXPECT_TRUE(tier.find(ip(5))->pending);
  EXPECT_TRUE(tier.insert(ip(6), mac(6), false));
  EXPECT_EQ(tier.find(ip(1)), nullptr) << "1 was the oldest after 2 left";
  EXPECT_EQ(tier.size(), tier.capacity());
}

// Random inserts, touches and erases against a reference (a map and a use
// list), on a small tier whose keys collide often in the index.
TEST(NeighborTier, MatchesAReferenceUnderRandomOperations) {
  for (const std::uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    constexpr std::uint32_t kCapacity = 37;
    dpdk::NeighborTier<4> tier(kCapacity);
    std::map<std::uint32_t, wire::MacAddr> ref;
    std::list<std::uint32_t> order;  // oldest first
    for (int step = 0; step < 20000; ++step) {
      const auto k = static_cast<std::uint32_t>(rng() % 120);
      const auto op = static_cast<std::uint32_t>(rng() % 4);
      const bool present = ref.count(k) != 0;
      if (op < 2 && !present) {
        const bool full = ref.size() == kCapacity;
        const std::uint32_t oldest = full ? order.front() : 0;
        ASSERT_EQ(tier.insert(ip(k), mac(k + static_cast<std::uint32_t>(step)), false), full);
        if (full) {
          ref.erase(oldest);
          order.pop_front();
        }
        ref[k] = mac(k + static_cast<std::uint32_t>(step));
        order.push_back(k);
      } else if (op == 2 && present) {
        tier.touch(*tier.find(ip(k)));
        order.remove(k);
        order.push_back(k);
      } else if (op == 3) {
        tier.erase(ip(k));
        ref.erase(k);
        order.remove(k);
      }
      ASSERT_EQ(tier.size(), ref.size());
    }
    for (std::uint32_t k = 0; k < 120; ++k) {
      const auto* e = tier.find(ip(k));
      ASSERT_EQ(e != nullptr, ref.count(k) != 0) << "key " << k;
      if (e != nullptr) {
        EXPECT_EQ(e->mac, ref[k]);
      }
    }
  }
}

TEST(NeighborTable, RefusesAnswersForAddressesNeitherPendingNorKnown) {
  V4 t(8, 4);
  EXPECT_EQ(t.merge(ip(1), mac(1)), NeighborOutcome::kMissed);
  EXPECT_EQ(t.state(ip(1)), NeighborState::kAbsent);
  EXPECT_EQ(t.wanted_size() + t.learned_size(), 0u);
}

TEST(NeighborTable, APendingAddressIsFilledByItsAnswer) {
  V4 t(8, 4);
  wire::MacAddr m{};
  EXPECT_EQ(t.want(ip(1)), NeighborOutcome::kDone);
  EXPECT_EQ(t.state(ip(1)), NeighborState::kPending);
  EXPECT_EQ(t.lookup(ip(1), m), NeighborOutcome::kMissed) << "pending has no MAC yet";
  EXPECT_EQ(t.merge(ip(1), mac(1)), NeighborOutcome::kDone);
  EXPECT_EQ(t.lookup(ip(1), m), NeighborOutcome::kDone);
  EXPECT_EQ(m, mac(1));
  EXPECT_EQ(t.state(ip(1)), NeighborState::kWanted);
}

TEST(NeighborTable, GivingUpDropsOnlyAPendingAddress) {
  V4 t(8, 4);
  t.want(ip(1));
  t.configure(ip(2), mac(2));
  t.give_up(ip(1));
  t.give_up(ip(2));
  EXPECT_EQ(t.state(ip(1)), NeighborState::kAbsent);
  EXPECT_EQ(t.state(ip(2)), NeighborState::kWanted);
  EXPECT_EQ(t.merge(ip(1), mac(1)), NeighborOutcome::kMissed) << "a late answer after giving up is refused";
}

TEST(NeighborTable, SendersThatAddressUsChurnOnlyTheLearnedTier) {
  V4 t(8, 4);
  t.configure(ip(100000), mac(100000));
  t.want(ip(101000));
  wire::MacAddr m{};
  ASSERT_EQ(t.want(ip(102000)), NeighborOutcome::kDone);
  ASSERT_EQ(t.merge(ip(102000), mac(102000)), NeighborOutcome::kDone);
  for (std::uint32_t i = 0; i < 4; ++i) EXPECT_EQ(t.learn(ip(i), mac(i)), NeighborOutcome::kDone);
  for (std::uint32_t i = 4; i < 10000; ++i) ASSERT_EQ(t.learn(ip(i), mac(i)), NeighborOutcome::kEvictedLearned);
  EXPECT_EQ(t.learned_size(), 4u);
  EXPECT_EQ(t.wanted_size(), 3u);
  for (std::uint32_t i = 9996; i < 10000; ++i) EXPECT_EQ(t.state(ip(i)), NeighborState::kLearned);
  EXPECT_EQ(t.state(ip(9995)), NeighborState::kAbsent);
  EXPECT_EQ(t.lookup(ip(100000), m), NeighborOutcome::kDone);
  EXPECT_EQ(m, mac(100000));
  EXPECT_EQ(t.state(ip(101000)), NeighborState::kPending);
  EXPECT_EQ(t.state(ip(102000), &m), NeighborState::kWanted);
  EXPECT_EQ(m, mac(102000));
}

// RFC 826: a frame from a sender we hold updates its MAC, in either tier,
// whatever it asks; learning it again adds nothing.
TEST(NeighborTable, MergeUpdatesAKnownSenderInEitherTier) {
  V4 t(8, 4);
  wire::MacAddr m{};
  t.configure(ip(1), mac(1));
  t.learn(ip(2), mac(2));
  EXPECT_EQ(t.merge(ip(1), mac(11)), NeighborOutcome::kDone);
  EXPECT_EQ(t.merge(ip(2), mac(12)), NeighborOutcome::kDone);
  EXPECT_EQ(t.learn(ip(2), mac(22)), NeighborOutcome::kDone);
  EXPECT_EQ(t.state(ip(1), &m), NeighborState::kWanted);
  EXPECT_EQ(m, mac(11));
  EXPECT_EQ(t.state(ip(2), &m), NeighborState::kLearned);
  EXPECT_EQ(m, mac(22));
  EXPECT_EQ(t.learn(ip(1), mac(31)), NeighborOutcome::kDone);
  EXPECT_EQ(t.state(ip(1)), NeighborState::kWanted) << "a wanted peer stays wanted";
  EXPECT_EQ(t.learned_size(), 1u);
}

// A merge refreshes a learned entry: a sender that keeps talking to us
// outlives one-off senders.
TEST(NeighborTable, AnActiveLearnedSenderOutlivesOneOffSenders) {
  V4 t(8, 4);
  t.learn(ip(1), mac(1));
  for (std::uint32_t i = 2; i < 100; ++i) {
    t.learn(ip(i), mac(i));
    t.merge(ip(1), mac(1));
  }
  EXPECT_EQ(t.state(ip(1)), NeighborState::kLearned);
}

TEST(NeighborTable, ResolvingALearnedSenderPromotesIt) {
  V4 t(8, 2);
  wire::MacAddr m{};
  t.learn(ip(1), mac(1));
  EXPECT_EQ(t.lookup(ip(1), m), NeighborOutcome::kDone);
  EXPECT_EQ(m, mac(1));
  EXPECT_EQ(t.state(ip(1)), NeighborState::kWanted);
  EXPECT_EQ(t.learned_size(), 0u);
  for (std::uint32_t i = 2; i < 50; ++i) t.learn(ip(i), mac(i));
  EXPECT_EQ(t.state(ip(1)), NeighborState::kWanted) << "a flood evicted a promoted peer";
  // want() on a learned sender promotes it too, with its MAC.
  t.learn(ip(60), mac(60));
  EXPECT_EQ(t.want(ip(60)), NeighborOutcome::kDone);
  EXPECT_EQ(t.state(ip(60), &m), NeighborState::kWanted);
  EXPECT_EQ(m, mac(60));
}

TEST(NeighborTable, ConfiguringALearnedSenderMovesItToWanted) {
  V4 t(8, 4);
  wire::MacAddr m{};
  t.learn(ip(1), mac(1));
  EXPECT_EQ(t.configure(ip(1), mac(2)), NeighborOutcome::kDone);
  EXPECT_EQ(t.state(ip(1), &m), NeighborState::kWanted);
  EXPECT_EQ(m, mac(2));
  EXPECT_EQ(t.learned_size(), 0u);
}

TEST(NeighborTable, AFullWantedTierEvictsItsLeastRecentlyUsedEntry) {
  V4 t(3, 4);
  wire::MacAddr m{};
  t.configure(ip(1), mac(1));
  t.configure(ip(2), mac(2));
  t.configure(ip(3), mac(3));
  t.lookup(ip(1), m);  // 2 is now the least recently used
  EXPECT_EQ(t.want(ip(4)), NeighborOutcome::kEvictedWanted);
  EXPECT_EQ(t.state(ip(2)), NeighborState::kAbsent);
  EXPECT_EQ(t.state(ip(1)), NeighborState::kWanted);
  EXPECT_EQ(t.wanted_size(), 3u);
  t.learn(ip(5), mac(5));
  EXPECT_EQ(t.lookup(ip(5), m), NeighborOutcome::kEvictedWanted) << "promotion into a full tier";
  EXPECT_EQ(t.state(ip(3)), NeighborState::kAbsent);
}

TEST(NeighborTable, Ipv6KeysBehaveTheSame) {
  V6 t(4, 2);
  wire::MacAddr m{};
  EXPECT_EQ(t.merge(ip6(1), mac(1)), NeighborOutcome::kMissed) << "an unsolicited NA for an unknown target";
  t.want(ip6(1));
  EXPECT_EQ(t.merge(ip6(1), mac(1)), NeighborOutcome::kDone);
  for (std::uint32_t i = 10; i < 1000; ++i) t.learn(ip6(i), mac(i));
  EXPECT_EQ(t.learned_size(), 2u);
  EXPECT_EQ(t.lookup(ip6(1), m), NeighborOutcome::kDone);
  EXPECT_EQ(m, mac(1));
  EXPECT_EQ(t.state(ip6(999)), NeighborState::kLearned);
  EXPECT_EQ(t.state(ip6(997)), NeighborState::kAbsent);
}

TEST(NeighborTable, DefaultSizes) {
  V4 t;
  for (std::uint32_t i = 0; i < 10000; ++i) t.learn(ip(i), mac(i));
  for (std::uint32_t i = 0; i < 5000; ++i) t.want(ip(100000 + i));
  EXPECT_EQ(t.learned_size(), V4::kLearnedEntries);
  EXPECT_EQ(t.wanted_size(), V4::kWantedEntries);
}

}  // namespace
}  // namespace uroce::test
