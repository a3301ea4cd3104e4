// The engine's small parts on their own: the QPN map, the SPSC ring, the
// timer wheel and the handover between engines.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "engine/handover.h"
#include "engine/qpn_map.h"
#include "engine/spsc_ring.h"
#include "engine/timer_wheel.h"
#include "support/scripted_rc.h"
#include "support/test_seed.h"

namespace uroce::test {
namespace {

TEST(QpnMap, FindsEveryKeyAndNothingElse) {
  engine::QpnMap<int> m;
  EXPECT_EQ(m.find(0x11), nullptr);
  std::vector<std::pair<std::uint32_t, int>> entries;
  // Keys that share low bits, and the largest QPN.
  for (int i = 0; i < 300; ++i) entries.emplace_back(static_cast<std::uint32_t>(i) << 12, i);
  entries.emplace_back(0xffffff, -1);
  m.rebuild(entries);
  for (const auto& [qpn, v] : entries) {
    ASSERT_NE(m.find(qpn), nullptr) << qpn;
    EXPECT_EQ(*m.find(qpn), v);
  }
  EXPECT_EQ(m.find(1), nullptr);
  EXPECT_EQ(m.find(0xfffffe), nullptr);
  m.rebuild({});
  EXPECT_EQ(m.find(0), nullptr);
}

// QPNs the verbs layer gives out (low bits distinct) index the table
// directly at twice their number; one slot is looked at per lookup.
TEST(QpnMap, SequentialQpnsNeedTwiceTheirNumberOfSlots) {
  engine::QpnMap<int> m;
  std::vector<std::pair<std::uint32_t, int>> entries;
  for (int i = 0; i < 1000; ++i) entries.emplace_back(0x11 + static_cast<std::uint32_t>(i), i);
  m.rebuild(entries);
  EXPECT_EQ(m.capacity(), 2048u);
  for (const auto& [qpn, v] : entries) ASSERT_EQ(*m.find(qpn), v);
  // Any QPN a peer names costs one compare, found or not.
  for (std::uint32_t q = 0x11 + 1000; q < 0x11 + 1000 + 4096; ++q) ASSERT_EQ(m.find(q), nullptr) << q;
}

// QPs added and removed one at a time change the table in place (10,000
// QPs are set up in linear time); an insert that would collide or fill it
// past half is refused, for the caller to rebuild.
TEST(QpnMap, InsertsAndErasesInPlace) {
  engine::QpnMap<int> m;
  ASSERT_EQ(m.capacity(), 64u);
  for (int i = 0; i < 31; ++i) ASSERT_TRUE(m.insert(0x11 + static_cast<std::uint32_t>(i), i, i + 1u)) << i;
  EXPECT_FALSE(m.insert(0x11 + 31, 31, 32)) << "32 entries need 66 slots: rebuild";
  EXPECT_FALSE(m.insert(0x11 + 64, 99, 31)) << "same low bits as 0x11";
  EXPECT_EQ(*m.find(0x11), 0);
  m.erase(0x11 + 64);  // not there: nothing changes
  EXPECT_EQ(*m.find(0x11), 0);
  m.erase(0x11);
  EXPECT_EQ(m.find(0x11), nullptr);
  EXPECT_TRUE(m.insert(0x11 + 64, 99, 31)) << "the slot is free again";
  EXPECT_EQ(*m.find(0x11 + 64), 99);
  for (int i = 1; i < 31; ++i) EXPECT_EQ(*m.find(0x11 + static_cast<std::uint32_t>(i)), i);
}

// Posts reach the engine through two levels of doorbells (a bit per QP, a
// summary bit per 64 QPs): 4,200 QPs span two summary words, and a post on
// any QP, alone or beside posts on QPs sharing its words, is sent in the
// next poll, once.
TEST(Doorbells, EveryPostIsSeenWhateverItsWord) {
  ManualClock clock;
  ScriptedDevice dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{4, 4, 1, 1, 16}, 64);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  dev.port.keep_sent = false;
  QpInitAttr init;
  init.send_cq = init.recv_cq = dev.cq;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 16};
  std::vector<QueuePair*> qps{dev.qp};
  while (qps.size() < 4200) {
    QueuePair* q = dev.pd->create_qp(init);
    ASSERT_NE(q, nullptr) << dev.ctx->last_error();
    qps.push_back(q);
  }
  ConnectParams params;
  for (QueuePair* q : qps) ASSERT_EQ(connect_rc(q, ipv4_gid({10, 0, 0, 2}), 0x99, 0x100, 0x200, params), 0);
  dev.ctx->progress();
  std::uint8_t byte = 0;
  auto post = [&](QueuePair* q) {
    ibv_send_wr wr{};
    ibv_sge sge{reinterpret_cast<std::uint64_t>(&byte), 1, 0};
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_INLINE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    return q->post_send(&wr, &bad);
  };
  const std::size_t picks[][3] = {{4199, 4199, 4199}, {0, 63, 64}, {4095, 4096, 4097}, {100, 4150, 2000}, {4163, 4164, 0}};
  for (const auto& pick : picks) {
    const std::uint64_t before = dev.port.tx_count;
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(post(qps[pick[k]]), 0) << pick[k];
    }
    dev.ctx->progress();
    EXPECT_EQ(dev.port.tx_count - before, 3u) << "posts on QPs " << pick[0] << ", " << pick[1] << ", " << pick[2];
    dev.ctx->progress();
    EXPECT_EQ(dev.port.tx_count - before, 3u) << "sent again";
    // Their ACKs are never coming: the QPs just keep them outstanding.
  }
}

// create_qp gives out QPNs whose low bits no live QP shares, however QPs
// come and go (the QPN counter runs past 200 QPs' worth many times), and
// never QP0 or QP1.
TEST(QpnAllocation, LiveQpnsDifferInTheirLowBits) {
  ManualClock clock;
  ScriptedDevice dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{4, 4, 1, 1, 0}, 64);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  QpInitAttr init;
  init.send_cq = init.recv_cq = dev.cq;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  std::vector<QueuePair*> live{dev.qp};
  std::mt19937 rng(7);
  for (int round = 0; round < 3000; ++round) {
    if (live.size() > 1 && rng() % 3 == 0) {
      const std::size_t k = 1 + rng() % (live.size() - 1);
      ASSERT_EQ(dev.pd->destroy_qp(live[k]), 0);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (live.size() < 200) {
      QueuePair* q = dev.pd->create_qp(init);
      ASSERT_NE(q, nullptr) << dev.ctx->last_error();
      live.push_back(q);
    }
    // Two QPNs differ in the low bits of the smaller table either was made
    // for (at most 512 slots for 200 QPs), so in the low 9 bits.
    std::vector<std::uint32_t> residues;
    for (QueuePair* q : live) {
      ASSERT_GE(q->qp_num(), 2u);
      residues.push_back(q->qp_num() & 511);
    }
    std::sort(residues.begin(), residues.end());
    ASSERT_EQ(std::adjacent_find(residues.begin(), residues.end()), residues.end()) << "round " << round;
  }
}

TEST(SpscRing, KeepsOrderAndCapacityAcrossThreads) {
  engine::SpscRing<std::uint64_t> ring(1000);
  EXPECT_EQ(ring.capacity(), 1024u);
  for (std::uint64_t i = 0; i < 1024; ++i) ASSERT_TRUE(ring.push(i));
  EXPECT_FALSE(ring.push(1024)) << "full";
  std::uint64_t out[2048];
  ASSERT_EQ(ring.pop(out, 2048), 1024u);
  for (std::uint64_t i = 0; i < 1024; ++i) ASSERT_EQ(out[i], i);
  EXPECT_EQ(ring.pop(out, 1), 0u);
  // One producer thread, one consumer: every value once, in order, across
  // the index wrap.
  constexpr std::uint64_t kCount = 2'000'000;
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kCount;) {
      if (ring.push(i)) ++i;
    }
  });
  std::uint64_t next = 0;
  while (next < kCount) {
    const std::uint32_t n = ring.pop(out, 64);
    for (std::uint32_t k = 0; k < n; ++k) ASSERT_EQ(out[k], next++);
  }
  producer.join();
}

TEST(TimerWheel, FiresEachEntryOnceAtOrAfterItsDeadline) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  // 8 us ticks, 16 slots: a turn is 128 us, and deadlines reach far past it.
  engine::TimerWheel wheel(8000, 16);
  std::uint64_t now = 1'000'000;
  wheel.expire(now, [](const auto&) { FAIL() << "nothing inserted"; });
  std::vector<std::uint64_t> deadline(500);
  std::vector<int> fired(500, 0);
  for (std::uint32_t q = 0; q < 500; ++q) {
    deadline[q] = now + rng() % 2'000'000;  // up to 2 ms: many turns
    wheel.insert(q, q, deadline[q]);
  }
  EXPECT_EQ(wheel.size(), 500u);
  EXPECT_EQ(wheel.earliest(), *std::min_element(deadline.begin(), deadline.end()));
  while (wheel.size() > 0) {
    now += 1 + rng() % 20000;  // steps shorter and longer than a tick
    wheel.expire(now, [&](const engine::TimerWheel::Entry& e) {
      EXPECT_LE(e.at, now);
      EXPECT_EQ(e.at, deadline[e.qpn]);
      ++fired[e.qpn];
    });
    // Nothing still due stays behind, and the earliest left is known.
    std::uint64_t left = 0;
    for (std::uint32_t q = 0; q < 500; ++q) {
      if (deadline[q] <= now) {
        ASSERT_EQ(fired[q], 1) << "QP " << q << " due at " << deadline[q] << ", now " << now;
      } else if (left == 0 || deadline[q] < left) {
        left = deadline[q];
      }
    }
    ASSERT_EQ(wheel.earliest(), left);
  }
  // A deadline already past fires at the next expire; one far ahead waits
  // through a jump of many turns and fires when due.
  wheel.insert(7, 7, now - 5);
  wheel.insert(8, 8, now + 10'000'000);
  int n = 0;
  wheel.expire(now, [&](const auto& e) { EXPECT_EQ(e.qpn, 7u); ++n; });
  EXPECT_EQ(n, 1);
  wheel.expire(now + 9'999'999, [&](const auto&) { ++n; });
  EXPECT_EQ(n, 1);
  wheel.expire(now + 10'000'000, [&](const auto& e) { EXPECT_EQ(e.qpn, 8u); ++n; });
  EXPECT_EQ(n, 2);
  EXPECT_EQ(wheel.size(), 0u);
}

TEST(TimerWheel, EntriesInsertedWhileFiringWaitForTheNextCall) {
  engine::TimerWheel wheel(1000, 8);
  wheel.insert(1, 1, 500);
  int calls = 0;
  wheel.expire(1000, [&](const engine::TimerWheel::Entry& e) {
    ++calls;
    wheel.insert(e.qpn, e.qpn, 0);  // already past: must not fire within this call
  });
  EXPECT_EQ(calls, 1);
  wheel.expire(1000, [&](const auto&) { ++calls; });
  EXPECT_EQ(calls, 2);
}

// One entry per handle (a QP's engine slot): a new deadline moves it, and
// a QP that leaves takes its entry with it.
TEST(TimerWheel, ANewDeadlineMovesTheEntryAndRemoveForgetsIt) {
  engine::TimerWheel wheel(1000, 8);
  wheel.reserve(8);
  wheel.insert(3, 30, 50'000);  // a later turn
  wheel.insert(3, 30, 2'000);
  EXPECT_EQ(wheel.size(), 1u);
  EXPECT_EQ(wheel.earliest(), 2'000u);
  std::vector<engine::TimerWheel::Entry> fired;
  wheel.expire(3'000, [&](const auto& e) { fired.push_back(e); });
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].qpn, 30u);
  EXPECT_EQ(fired[0].at, 2'000u);
  wheel.expire(60'000, [&](const auto& e) { fired.push_back(e); });
  EXPECT_EQ(fired.size(), 1u) << "the moved deadline fired once, the old one never";
  wheel.insert(4, 40, 61'000);
  wheel.insert(5, 50, 62'000);
  wheel.remove(4);
  wheel.remove(4);  // twice: nothing more
  EXPECT_EQ(wheel.size(), 1u);
  EXPECT_EQ(wheel.earliest(), 62'000u);
  wheel.expire(70'000, [&](const auto& e) { fired.push_back(e); });
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[1].qpn, 50u);
  EXPECT_EQ(wheel.size(), 0u);
}

TEST(Handover, FramesReachTheirEngineFromEverySource) {
  engine::Handover h(3, 4);
  h.set_owners({{0x11, 0}, {0x12, 2}});
  ASSERT_NE(h.owner(0x12), nullptr);
  EXPECT_EQ(*h.owner(0x12), 2u);
  EXPECT_EQ(h.owner(0x13), nullptr);
  std::uint8_t a = 0, b = 0;
  EXPECT_TRUE(h.push(0, 2, engine::RxFrame{&a, 1, nullptr}));
  EXPECT_TRUE(h.push(1, 2, engine::RxFrame{&b, 2, nullptr}));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(h.push(0, 2, engine::RxFrame{&a, 3, nullptr}));
  EXPECT_FALSE(h.push(0, 2, engine::RxFrame{&a, 4, nullptr})) << "the 0->2 ring holds 4";
  engine::RxFrame out[8];
  EXPECT_EQ(h.pop(1, out, 8), 0u);
  ASSERT_EQ(h.pop(2, out, 8), 5u);
  EXPECT_EQ(out[0].len, 1);
  EXPECT_EQ(out[4].len, 2) << "engine 1's frame after engine 0's";
}

}  // namespace
}  // namespace uroce::test
