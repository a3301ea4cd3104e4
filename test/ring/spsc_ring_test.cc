// lib/ring's SpscRing on its own: batches, the exact limit, cursors across
// 2^32, a hostile peer's cursors, both sides on two threads; and uroced's
// ring header built on its cursors keeps the protocol's layout.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "ring/spsc_ring.h"
#include "service/shm.h"

namespace uroce {
namespace {

TEST(SpscRing, PushesAndPopsInBatchesInOrder) {
  ring::SpscRing<std::uint32_t> r(8);
  EXPECT_EQ(r.capacity(), 8u);
  EXPECT_EQ(r.room(), 8u);
  for (std::uint32_t i = 0; i < 5; ++i) r.slot(i) = 100 + i;
  EXPECT_EQ(r.ready(), 0u) << "nothing is seen before publish";
  r.publish(5);
  EXPECT_EQ(r.published(), 5u);
  EXPECT_EQ(r.room(), 3u);
  EXPECT_EQ(r.ready(), 5u);
  EXPECT_EQ(r.at(4), 104u);
  std::uint32_t out[8] = {};
  ASSERT_EQ(r.pop(out, 3), 3u);
  EXPECT_EQ(out[0], 100u);
  EXPECT_EQ(out[2], 102u);
  EXPECT_EQ(r.consumed(), 3u);
  ASSERT_EQ(r.pop(out, 8), 2u);
  EXPECT_EQ(out[1], 104u);
  EXPECT_EQ(r.pop(out, 8), 0u);
  EXPECT_EQ(r.room(), 3u) << "the consumer's cursor as last seen: enough for one";
  EXPECT_EQ(r.room(8), 8u) << "asked for more: seen again";
}

TEST(SpscRing, HoldsExactlyItsLimitNotItsCapacity) {
  // A CQ of cqe = 5 holds 5 completions; the sixth overflows it.
  ring::SpscRing<int> r(5);
  EXPECT_EQ(r.capacity(), 8u);
  EXPECT_EQ(r.limit(), 5u);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(r.push(i)) << i;
  EXPECT_EQ(r.room(), 0u);
  EXPECT_FALSE(r.push(5));
  int out[8];
  ASSERT_EQ(r.pop(out, 1), 1u);
  EXPECT_EQ(r.room(), 1u);
  EXPECT_TRUE(r.push(5));
  EXPECT_FALSE(r.push(6));
  ASSERT_EQ(r.ready(), 5u);
  EXPECT_EQ(r.at(0), 1);
  EXPECT_EQ(r.at(4), 5);
}

TEST(SpscRing, CursorsWrapAcross2To32) {
  // Mapped cursors just below 2^32, as after four billion entries.
  ring::Cursors c;
  c.head.store(0xFFFFFFFAu);
  c.tail.store(0xFFFFFFFAu);
  std::vector<std::uint64_t> slots(4);
  ring::SpscRing<std::uint64_t> producer, consumer;
  producer.attach(&c, slots.data(), 4, 3);
  consumer.attach(&c, slots.data(), 4, 3);
  std::uint64_t next = 0, expect = 0;
  std::uint64_t out[4];
  for (int round = 0; round < 8; ++round) {
    const std::uint32_t n = producer.room();
    ASSERT_EQ(n, 3u) << "round " << round;
    for (std::uint32_t k = 0; k < n; ++k) producer.slot(k) = next++;
    producer.publish(n);
    EXPECT_FALSE(producer.push(99)) << "full at the limit across the wrap, round " << round;
    ASSERT_EQ(consumer.ready(), 3u);
    ASSERT_EQ(consumer.pop(out, 4), 3u);
    for (std::uint32_t k = 0; k < 3; ++k) ASSERT_EQ(out[k], expect++);
  }
  EXPECT_LT(c.head.load(), 0xFFFFFFFAu) << "the cursors wrapped";
  EXPECT_EQ(c.head.load(), 0xFFFFFFFAu + 24u);
}

TEST(SpscRing, BoundsAHostilePeersCursors) {
  // A peer that shares the memory writes the words it owns as it likes: no
  // value makes this side read more than a ring or fill past its limit.
  ring::Cursors c;
  std::vector<int> slots(8, 7);
  ring::SpscRing<int> consumer, producer;
  consumer.attach(&c, slots.data(), 8, 8);
  producer.attach(&c, slots.data(), 8, 8);
  for (const std::uint32_t head : {9u, 100u, 0x80000000u, 0xFFFFFFFFu}) {
    c.head.store(head);  // the producer's word, wild
    bool wild = false;
    EXPECT_EQ(consumer.ready_from(0, &wild), 0u) << head;
    EXPECT_TRUE(wild) << head;
    EXPECT_EQ(consumer.ready(), 0u) << head;
    int out[16];
    EXPECT_EQ(consumer.pop(out, 16), 0u) << head;
  }
  c.head.store(8);  // a full ring is not wild
  bool wild = true;
  EXPECT_EQ(consumer.ready_from(0, &wild), 8u);
  EXPECT_FALSE(wild);
  c.head.store(0);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(producer.push(i));  // full: the next room() loads the tail
  for (const std::uint32_t tail : {9u, 100u, 0x80000000u, 0xFFFFFFF0u}) {
    c.tail.store(tail);  // the consumer's word: ahead of the head, or more than a ring behind it
    EXPECT_EQ(producer.room(), 0u) << tail;
    EXPECT_FALSE(producer.push(1)) << tail;
  }
  c.tail.store(3);
  EXPECT_EQ(producer.room(), 3u) << "an honest tail again frees its slots";
}

TEST(SpscRing, KeepsOrderBetweenTwoThreads) {
  ring::SpscRing<std::uint64_t> r(100);  // a limit short of the capacity
  constexpr std::uint64_t kCount = 1'000'000;
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kCount;) {
      const std::uint32_t n = r.room();
      std::uint32_t k = 0;
      for (; k < n && i < kCount; ++k) r.slot(k) = i++;
      if (k != 0) r.publish(k);
    }
  });
  std::uint64_t next = 0;
  std::uint64_t out[64];
  while (next < kCount) {
    const std::uint32_t n = r.pop(out, 64);
    ASSERT_LE(r.published() - r.tail(), 100u) << "more in the ring than its limit";
    for (std::uint32_t k = 0; k < n; ++k) ASSERT_EQ(out[k], next++);
  }
  producer.join();
}

TEST(SpscRing, AnOwnedRingMovesWithItsCursors) {
  ring::SpscRing<int> a(4);
  ASSERT_TRUE(a.push(1));
  ASSERT_TRUE(a.push(2));
  ring::SpscRing<int> b(std::move(a));
  EXPECT_EQ(b.ready(), 2u);
  EXPECT_EQ(b.published(), 2u);
  ASSERT_TRUE(b.push(3));
  int out[4];
  ASSERT_EQ(b.pop(out, 4), 3u);
  EXPECT_EQ(out[2], 3);
  EXPECT_EQ(b.room(4), 4u);
}

TEST(SpscRing, UrocedsRingHeaderKeepsItsLayout) {
  // service::kProtocolVersion is unchanged: the header's words stay where
  // they were.
  service::RingHeader h;
  const auto at = [&](const void* p) { return static_cast<const char*>(p) - reinterpret_cast<const char*>(&h); };
  EXPECT_EQ(at(&h.head), 0);
  EXPECT_EQ(at(&h.tail), 64);
  EXPECT_EQ(at(&h.retired), 128);
  EXPECT_EQ(at(&h.state), 132);
  EXPECT_EQ(at(&h.armed), 192);
  EXPECT_EQ(at(&h.overflow), 196);
  EXPECT_EQ(sizeof h, 256u);
}

}  // namespace
}  // namespace uroce
