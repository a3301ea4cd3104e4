// Which QPs get series of their own (those that moved lately, the busiest
// first, at most max_qps) and the port sums over all of them, which never go
// down when QPs are destroyed or their numbers reused.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "support/test_seed.h"
#include "metrics/metrics_helpers.h"

namespace uroce::test {
namespace {

using metrics::DeviceSnapshot;
using metrics::Exposition;
using metrics::Snapshot;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

Snapshot one_port(const std::vector<QpStats>& qps) {
  Snapshot s;
  DeviceSnapshot d;
  d.port = "0";
  d.qps = qps;
  s.devices.push_back(std::move(d));
  return s;
}

// The QPNs with series of their own: those of uroce_qp_info.
std::set<std::uint32_t> shown(const Page& p) {
  std::set<std::uint32_t> out;
  for (const auto* s : p.find("uroce_qp_info")) out.insert(static_cast<std::uint32_t>(std::stoul(s->label("qpn"))));
  return out;
}

// Every QPN any uroce_qp_* series names.
std::set<std::uint32_t> named_anywhere(const Page& p) {
  std::set<std::uint32_t> out;
  for (const auto& [name, f] : p.families) {
    if (name.rfind("uroce_qp_", 0) != 0) continue;
    for (const auto& s : f.samples) out.insert(static_cast<std::uint32_t>(std::stoul(s.label("qpn"))));
  }
  return out;
}

Page rendered(Exposition& e, const Snapshot& s, Clock::time_point t) {
  const std::string text = e.render(s, t);
  Page p = parse_page(text);
  for (const auto& problem : p.problems) ADD_FAILURE() << problem;
  return p;
}

std::uint64_t sum_of(const std::vector<QpStats>& qps, const char* name) {
  std::uint64_t total = 0;
  for (auto q : qps) total += row(q, name).value;
  return total;
}

// 1000 QPs with large old counts, 10 of which move by different amounts.
struct ThousandQps : ::testing::Test {
  void SetUp() override {
    for (std::uint32_t qpn = 1; qpn <= 1000; ++qpn) {
      QpStats q = make_qp(qpn);
      add_traffic(q, 10'000'000 + qpn);  // idle ones count far more in total than the movers move
      qps.push_back(q);
    }
  }
  // Mover k (QPN 100 * (k + 1)) moves (k * 7 % 10 + 1) KB: not in QPN order.
  void move_the_ten() {
    for (std::uint32_t k = 0; k < 10; ++k) add_traffic(qps[100 * (k + 1) - 1], (k * 7 % 10 + 1) * 1000);
  }
  std::vector<QpStats> qps;
  Exposition e{5, seconds(300)};
  Clock::time_point t0 = Clock::now();
};

TEST_F(ThousandQps, OnlyTheFiveBusiestMoversHaveSeries) {
  Page p = rendered(e, one_port(qps), t0);
  EXPECT_TRUE(named_anywhere(p).empty()) << "the baseline: no QP has moved yet";
  move_the_ten();
  p = rendered(e, one_port(qps), t0 + seconds(15));
  // Moves by mover k: k=7 → 10 KB, k=4 → 9, k=1 → 8, k=8 → 7, k=5 → 6.
  EXPECT_EQ(shown(p), (std::set<std::uint32_t>{800, 500, 200, 900, 600}));
  EXPECT_EQ(named_anywhere(p), shown(p)) << "every per-QP family holds the same five";
  EXPECT_EQ(p.value("uroce_port_qps", {{"state", "RTS"}}), 1000);
  EXPECT_EQ(p.value("uroce_port_qp_tx_bytes_total"), sum_of(qps, "tx_bytes"));
  EXPECT_EQ(p.value("uroce_port_qp_rx_packets_total"), sum_of(qps, "rx_packets"));
  EXPECT_EQ(p.value("uroce_metrics_qps_hidden"), 995);
  EXPECT_EQ(e.qps_seen(), 1000u);
  EXPECT_EQ(e.qps_shown(), 5u);
}

TEST_F(ThousandQps, IdleQpsNeverHaveSeriesAndMoversLoseThemWhenIdle) {
  rendered(e, one_port(qps), t0);
  move_the_ten();
  rendered(e, one_port(qps), t0 + seconds(15));
  // Still within qp_idle of their move: five of the ten movers, none of the others.
  Page p = rendered(e, one_port(qps), t0 + seconds(15 + 200));
  EXPECT_EQ(shown(p).size(), 5u);
  for (const auto qpn : shown(p)) EXPECT_EQ(qpn % 100, 0u) << qpn << " never moved";
  // Past it: nobody.
  p = rendered(e, one_port(qps), t0 + seconds(15 + 301));
  EXPECT_TRUE(named_anywhere(p).empty());
  EXPECT_EQ(p.value("uroce_port_qp_tx_bytes_total"), sum_of(qps, "tx_bytes")) << "the sums still cover all";
  // One moves again: it alone.
  add_traffic(qps[41], 1);
  p = rendered(e, one_port(qps), t0 + seconds(15 + 302));
  EXPECT_EQ(shown(p), (std::set<std::uint32_t>{42}));
}

TEST(Cardinality, DestroyedQpsStayInTheSums) {
  std::vector<QpStats> qps = {make_qp(1), make_qp(2), make_qp(3)};
  Exposition e(100, seconds(0));  // series only for QPs that moved in this collection
  const auto t0 = Clock::now();
  rendered(e, one_port(qps), t0);
  for (auto& q : qps) add_traffic(q, 100'000);
  Page p = rendered(e, one_port(qps), t0 + seconds(1));
  const double before = p.value("uroce_port_qp_tx_bytes_total");
  EXPECT_EQ(before, 300'000);
  EXPECT_EQ(shown(p), (std::set<std::uint32_t>{1, 2, 3}));

  // QP 2 destroyed: its counts stay.
  std::vector<QpStats> without2 = {qps[0], qps[2]};
  p = rendered(e, one_port(without2), t0 + seconds(2));
  EXPECT_EQ(p.value("uroce_port_qp_tx_bytes_total"), before);
  EXPECT_EQ(p.value("uroce_port_qps", {{"state", "RTS"}}), 2);
  EXPECT_EQ(shown(p).count(2), 0u);

  // QPN 2 made again, counting from zero: a new QP, added to the sum.
  QpStats new2 = make_qp(2);
  add_traffic(new2, 500);
  std::vector<QpStats> with_new2 = {qps[0], new2, qps[2]};
  p = rendered(e, one_port(with_new2), t0 + seconds(3));
  EXPECT_EQ(p.value("uroce_port_qp_tx_bytes_total"), before + 500);
  EXPECT_EQ(shown(p), (std::set<std::uint32_t>{2})) << "the new QP counted; 1 and 3 did not move";

  // QPN 3 destroyed and made again between two collections: its counter went
  // down, so it is a new QP and the old one's counts stay.
  QpStats new3 = make_qp(3);
  add_traffic(new3, 70);
  std::vector<QpStats> with_new3 = {qps[0], new2, new3};
  p = rendered(e, one_port(with_new3), t0 + seconds(4));
  EXPECT_EQ(p.value("uroce_port_qp_tx_bytes_total"), before + 500 + 70);

  // Everything gone: the sums stay where they were.
  p = rendered(e, one_port({}), t0 + seconds(5));
  EXPECT_EQ(p.value("uroce_port_qp_tx_bytes_total"), before + 500 + 70);
  EXPECT_EQ(p.value("uroce_port_qps", {{"state", "RTS"}}), 0);
}

TEST(Cardinality, NoQpYetStillGivesTheSumsAtZero) {
  Exposition e;
  const Page p = rendered(e, one_port({}), Clock::now());
  EXPECT_EQ(p.value("uroce_port_qp_tx_bytes_total"), 0) << "a first QP's counts are an increase";
  EXPECT_EQ(p.value("uroce_port_qp_retransmitted_packets_total"), 0);
}

// QPs come, move and go at random; at every collection the sums equal the
// counts of every QP as last collected, never go down, and the QPs shown
// are the busiest of those that moved lately.
TEST(Cardinality, RandomChurnKeepsTheSumsMonotonicAndShowsTheBusiest) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  constexpr std::size_t kMaxQps = 7;
  constexpr auto kIdle = seconds(60);
  Exposition e(kMaxQps, kIdle);
  const auto t0 = Clock::now();
  auto now = t0;

  struct Model {
    QpStats q;
    std::uint64_t collected_tx = 0;   // tx_bytes at the last collection
    std::uint64_t collected_all = 0;  // tx_bytes + rx_bytes then
    std::optional<Clock::time_point> moved_at;
  };
  std::map<std::uint32_t, Model> live;
  std::set<std::uint32_t> absent_since_collection;  // QPNs free to be made again
  std::uint64_t retired_tx = 0;
  double previous_sum = 0;
  for (std::uint32_t qpn = 1; qpn <= 60; ++qpn) absent_since_collection.insert(qpn);

  for (int round = 0; round < 300; ++round) {
    std::set<std::uint32_t> destroyed_now;
    // Make some QPs, destroy some, move some.
    for (int k = std::uniform_int_distribution<int>(0, 3)(rng); k > 0 && !absent_since_collection.empty(); --k) {
      auto it = absent_since_collection.begin();
      std::advance(it, std::uniform_int_distribution<std::size_t>(0, absent_since_collection.size() - 1)(rng));
      live[*it].q = make_qp(*it);
      absent_since_collection.erase(it);
    }
    for (auto it = live.begin(); it != live.end();) {
      if (std::uniform_int_distribution<int>(0, 19)(rng) == 0) {
        retired_tx += it->second.collected_tx;  // what it counted since is not seen
        destroyed_now.insert(it->first);
        it = live.erase(it);
      } else {
        if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
          add_traffic(it->second.q, std::uniform_int_distribution<std::uint64_t>(1, 1'000'000)(rng));
        }
        ++it;
      }
    }
    now += seconds(std::uniform_int_distribution<int>(1, 40)(rng));
    std::vector<QpStats> qps;
    for (const auto& [qpn, m] : live) qps.push_back(m.q);
    std::shuffle(qps.begin(), qps.end(), rng);
    const Page p = rendered(e, one_port(qps), now);

    // The model's view of this collection.
    std::map<std::uint32_t, std::uint64_t> moved_bytes;  // of the QPs that may be shown
    std::uint64_t expected = retired_tx;
    for (auto& [qpn, m] : live) {
      const std::uint64_t all = row(m.q, "tx_bytes").value + row(m.q, "rx_bytes").value;
      const std::uint64_t delta = all - m.collected_all;
      if (delta > 0 && round > 0) m.moved_at = now;
      m.collected_all = all;
      m.collected_tx = row(m.q, "tx_bytes").value;
      expected += m.collected_tx;
      if (m.moved_at && now - *m.moved_at <= kIdle) moved_bytes[qpn] = *m.moved_at == now ? delta : 0;
    }
    for (const auto qpn : destroyed_now) absent_since_collection.insert(qpn);

    const double sum = p.value("uroce_port_qp_tx_bytes_total");
    ASSERT_EQ(sum, static_cast<double>(expected)) << "round " << round << ", " << seed_note(seed);
    ASSERT_GE(sum, previous_sum) << "round " << round << ", " << seed_note(seed);
    previous_sum = sum;

    const auto s = shown(p);
    ASSERT_EQ(s.size(), std::min(kMaxQps, moved_bytes.size())) << "round " << round << ", " << seed_note(seed);
    std::uint64_t least_shown = UINT64_MAX;
    std::uint64_t most_hidden = 0;
    for (const auto& [qpn, bytes] : moved_bytes) {
      if (s.count(qpn) != 0) {
        least_shown = std::min(least_shown, bytes);
      } else {
        most_hidden = std::max(most_hidden, bytes);
      }
    }
    for (const auto qpn : s) {
      ASSERT_EQ(moved_bytes.count(qpn), 1u) << qpn << " shown without moving lately, round " << round << ", "
                                             << seed_note(seed);
    }
    if (moved_bytes.size() > kMaxQps) {
      ASSERT_GE(least_shown, most_hidden) << "a busier QP was left out, round " << round << ", " << seed_note(seed);
    }
  }
}

}  // namespace
}  // namespace uroce::test
