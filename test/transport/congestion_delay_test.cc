// Delay-based congestion control (cc = delay, lib/cc/delay.h) in the
// transport, over the simulated link: the device takes it or DCQCN, never
// both.
#include <gtest/gtest.h>

#include <sstream>

#include "cc/dcqcn.h"
#include "cc/delay.h"
#include "sim/sim_link.h"
#include "support/rc_fixture.h"
#include "transport/qp.h"
#include "wire/frame.h"
#include "uroce/verbs.h"

namespace uroce::test {
namespace {

TEST(CongestionDelay, TheDeviceRefusesBothControllersAndTakesEitherAlone) {
  sim::VirtualClock clock;
  const std::uint8_t mac_a[6] = {2, 0, 0, 0, 0, 0xa};
  const std::uint8_t mac_b[6] = {2, 0, 0, 0, 0, 0xb};
  sim::SimLink link(clock, 1, mac_a, mac_b, {}, {});
  const cc::DcqcnParams dcqcn;
  const cc::DelayParams delay;
  PortConfig port;
  port.io = &link.port(0);
  port.clock = &clock;
  std::copy(mac_a, mac_a + 6, port.mac);
  port.gid = ipv4_gid({10, 99, 0, 1});
  port.dcqcn = &dcqcn;
  port.delay_cc = &delay;
  std::string error;
  EXPECT_EQ(Context::open(port, error), nullptr);
  EXPECT_NE(error.find("both dcqcn and delay_cc"), std::string::npos) << error;
  port.dcqcn = nullptr;
  error.clear();
  EXPECT_NE(Context::open(port, error), nullptr) << error;
  port.dcqcn = &dcqcn;
  port.delay_cc = nullptr;
  EXPECT_NE(Context::open(port, error), nullptr) << error;
}

struct Transfer {
  std::uint64_t ns = 0;       // virtual time from the first post to the last completion
  double gbps = 0;            // payload over that time
  std::uint64_t min_cwnd_milli = ~0ull;  // the smallest window seen (thousandths of a packet)
  bool intact = false;
};

// `messages` WRITEs of `bytes` each from A to B over `to_b`, A's window
// watched at every step; B's memory compared with A's.
Transfer write_through(std::uint64_t seed, const cc::DelayParams& params, const sim::Impairments& to_b,
                       int messages, std::uint32_t bytes, RcPair*& out_pair, const ConnectParams& connect = {}) {
  sim::Impairments to_a = to_b;
  to_a.loss = 0;
  const std::size_t total = static_cast<std::size_t>(messages) * bytes;
  static std::unique_ptr<RcPair> keep;
  keep = std::make_unique<RcPair>(seed, total, connect, to_b, to_a, 1024, nullptr, 0, &params);
  RcPair& p = *keep;
  out_pair = &p;
  Transfer t;
  if (p.connect_rc != 0) return t;
  fill_pattern(p.bufa, total, static_cast<std::uint8_t>(seed));
  const std::uint64_t start = p.net.clock.now_ns();
  for (int i = 0; i < messages; ++i) {
    if (p.post_send(IBV_WR_RDMA_WRITE, static_cast<std::uint64_t>(i) * bytes, bytes,
                    static_cast<std::uint64_t>(i) * bytes, static_cast<std::uint64_t>(i)) != 0) {
      return t;
    }
  }
  const transport::Qp& qa = testing::transport_qp(p.qa);
  std::size_t done = 0;
  ibv_wc wc[64];
  bool ok = true;
  p.net.run_until(
      [&] {
        if (qa.delay != nullptr) {
          t.min_cwnd_milli = std::min<std::uint64_t>(t.min_cwnd_milli, qa.counters.get(transport::QpCounter::cc_cwnd));
        }
        for (int k; (k = p.cqa->poll(64, wc)) > 0;) {
          for (int j = 0; j < k; ++j) ok = ok && wc[j].status == IBV_WC_SUCCESS;
          done += static_cast<std::size_t>(k);
        }
        return done >= static_cast<std::size_t>(messages);
      },
      10'000'000'000ull);
  t.ns = p.net.clock.now_ns() - start;
  t.gbps = t.ns == 0 ? 0 : static_cast<double>(total) * 8 / static_cast<double>(t.ns);
  t.intact = ok && done == static_cast<std::size_t>(messages) && std::memcmp(p.bufa, p.bufb, total) == 0;
  return t;
}

// A 10 Gb/s sender whose round trip with empty queues is 10 us: the BDP
// at a 1024-byte MTU is 13 packets (the window's cap).
cc::DelayParams params_10g() {
  cc::DelayParams p;
  p.line_rate_bps = 10e9;
  p.base_rtt_ns = 10'000;
  return p;
}

sim::Impairments link_at(double gbps) {
  sim::Impairments link;
  link.gbps = gbps;
  link.delay_ns = 4'000;  // each way; with serialisation and the hosts, ~10 us round trip
  return link;
}

std::string describe(const Transfer& t, const transport::Qp& qa) {
  std::ostringstream o;
  o << t.gbps << " Gb/s over " << t.ns / 1000 << " us, window " << qa.delay->window.cwnd() << " (cap "
    << qa.delay->window.max_cwnd() << ", least " << static_cast<double>(t.min_cwnd_milli) / 1000 << "), srtt "
    << qa.delay->window.srtt_ns() << " ns, " << qa.delay->window.increases() << " increases, "
    << qa.delay->window.decreases() << " decreases, " << qa.delay->window.losses() << " losses, "
    << qa.delay->window.timeouts() << " timeouts";
  return o.str();
}

// The same transfer with congestion control off: what the link gives.
double uncontrolled_gbps(std::uint64_t seed, const sim::Impairments& link) {
  sim::Impairments to_a = link;
  to_a.loss = 0;
  constexpr int kMessages = 64;
  constexpr std::uint32_t kBytes = 65536;
  RcPair p(seed, kMessages * kBytes, ConnectParams{}, link, to_a, 1024);
  EXPECT_EQ(p.connect_rc, 0);
  const std::uint64_t start = p.net.clock.now_ns();
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ(p.post_send(IBV_WR_RDMA_WRITE, static_cast<std::uint64_t>(i) * kBytes, kBytes,
                          static_cast<std::uint64_t>(i) * kBytes, static_cast<std::uint64_t>(i)),
              0);
  }
  EXPECT_EQ(p.wait(p.cqa, kMessages).size(), static_cast<std::size_t>(kMessages));
  return static_cast<double>(kMessages) * kBytes * 8 / static_cast<double>(p.net.clock.now_ns() - start);
}

TEST(CongestionDelay, AloneOnAnIdleLinkTheWindowEndsAtItsCapAndTheQpFillsTheLine) {
  const cc::DelayParams params = params_10g();
  RcPair* p = nullptr;
  const Transfer t = write_through(7, params, link_at(10), 64, 65536, p);
  const transport::Qp& qa = testing::transport_qp(p->qa);
  ASSERT_NE(qa.delay, nullptr);
  ASSERT_TRUE(t.intact) << describe(t, qa);
  EXPECT_EQ(qa.delay->window.max_cwnd(), 13) << "the BDP: 10 Gb/s * 10 us / 1024 bytes, rounded up";
  EXPECT_EQ(qa.delay->window.cwnd(), qa.delay->window.max_cwnd()) << describe(t, qa);
  EXPECT_EQ(p->qa->counter("cc_cwnd"), 13'000u);
  // Only the first window's burst (13 packets queued at once in the
  // sender's own link) may cross the target; then every ACK is below it.
  EXPECT_LE(qa.delay->window.decreases(), 2u) << describe(t, qa);
  EXPECT_GT(qa.delay->window.increases(), 1000u) << describe(t, qa);
  EXPECT_EQ(p->qa->counter("cc_increases"), qa.delay->window.increases());
  EXPECT_EQ(p->qa->counter("cc_decreases"), qa.delay->window.decreases());
  EXPECT_GT(p->qa->counter("cc_rtt_us"), 0u);
  EXPECT_LT(p->qa->counter("cc_rtt_us"), 14u) << "no standing queue";
  // As fast as the link goes with no control at all.
  const double off = uncontrolled_gbps(7, link_at(10));
  EXPECT_GE(t.gbps, 0.95 * off) << describe(t, qa) << "; uncontrolled: " << off << " Gb/s";
}

TEST(CongestionDelay, ALinkSlowerThanTheSenderBuildsDelayAndTheWindowShrinksBelowItsCap) {
  const cc::DelayParams params = params_10g();
  for (std::uint64_t seed : {1, 2, 3}) {
    RcPair* p = nullptr;
    const Transfer t = write_through(seed, params, link_at(5), 64, 65536, p);
    const transport::Qp& qa = testing::transport_qp(p->qa);
    ASSERT_TRUE(t.intact) << "seed " << seed << ": " << describe(t, qa);
    // Half the line: a full window queues at the link, the RTT passes the
    // target, and the window gives way, yet keeps the slower link busy.
    EXPECT_LT(t.min_cwnd_milli, 12'000u) << "seed " << seed << ": " << describe(t, qa);
    EXPECT_LT(qa.delay->window.cwnd(), qa.delay->window.max_cwnd()) << "seed " << seed << ": " << describe(t, qa);
    EXPECT_GT(qa.delay->window.decreases(), 10u) << "seed " << seed << ": " << describe(t, qa);
    EXPECT_GT(qa.delay->window.srtt_ns(), params.base_rtt_ns) << "seed " << seed << ": " << describe(t, qa);
    // ... and the window bounds the queue near the target (13.5 us plus
    // flow scaling): uncapped, the transport's own 256-packet window would
    // queue ~450 us at 5 Gb/s.
    EXPECT_LT(qa.delay->window.srtt_ns(), 20'000u) << "seed " << seed << ": " << describe(t, qa);
    EXPECT_EQ(p->qa->counter("retransmitted_packets"), 0u) << "seed " << seed;
    const double off = uncontrolled_gbps(seed, link_at(5));
    EXPECT_GE(t.gbps, 0.9 * off) << "seed " << seed << ": " << describe(t, qa) << "; uncontrolled: " << off;
  }
}

TEST(CongestionDelay, ALossCutsTheWindowAndATimeoutIsCountedByIt) {
  const cc::DelayParams params = params_10g();
  for (std::uint64_t seed : {11, 12, 13}) {
    sim::Impairments link = link_at(10);
    link.loss = 0.01;
    RcPair* p = nullptr;
    const Transfer t = write_through(seed, params, link, 32, 65536, p);
    const transport::Qp& qa = testing::transport_qp(p->qa);
    ASSERT_TRUE(t.intact) << "seed " << seed << ": " << describe(t, qa);
    ASSERT_GT(p->net.link.stats(0).lost, 0u) << "seed " << seed;
    // Every sequence NAK (or a lost READ answer) went to the window as a
    // loss, every local ACK timeout as a timeout.
    EXPECT_GT(qa.delay->window.losses(), 0u) << "seed " << seed << ": " << describe(t, qa);
    EXPECT_GE(p->qa->counter("nak_seq_received"), qa.delay->window.losses()) << "seed " << seed;
    EXPECT_EQ(qa.delay->window.timeouts(), p->qa->counter("timeouts")) << "seed " << seed;
    EXPECT_LE(t.min_cwnd_milli, 6'500u) << "seed " << seed << ": " << describe(t, qa) << " (a loss halves the window)";
    EXPECT_GT(p->qa->counter("cc_decreases"), 0u) << "seed " << seed;
  }
}

// Below one packet the window paces: with a target no RTT can meet (4 us,
// the link's round trip is twice that), the window falls to its floor (0.1
// here) and the QP sends one packet per rtt / 0.1, bounded by the floor's
// gap on the largest target, 4 us / 0.1 = 40 us (no flow scaling, no
// per-hop term here): about five round trips apart, with no timeout, and
// the data arrives.
TEST(CongestionDelay, BelowOnePacketTheQpIsPacedWithoutTimingOut) {
  cc::DelayParams params = params_10g();
  params.base_target_ns = 4'000;
  params.per_hop_ns = 0;
  params.fs_range_ns = 0;
  params.min_cwnd = 0.1;
  sim::Impairments link = link_at(10);
  sim::Impairments to_a = link;
  constexpr std::uint32_t kMessages = 24;
  constexpr std::uint32_t kBytes = kMessages * 4096;
  RcPair p(5, kBytes, ConnectParams{}, link, to_a, 1024, nullptr, 0, &params);
  ASSERT_EQ(p.connect_rc, 0);
  std::vector<std::uint64_t> departures;
  p.net.link.observe([&](int from, std::span<const std::uint8_t> f) {
    wire::ParsedFrame pf;
    if (from == 0 && wire::parse_frame(f, pf) == wire::ParseStatus::kOk && pf.payload_length > 0) {
      departures.push_back(p.net.clock.now_ns());
    }
  });
  fill_pattern(p.bufa, kBytes, 5);
  for (std::uint32_t i = 0; i < kMessages; ++i) {
    ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, i * 4096, 4096, i * 4096, i), 0);
  }
  const auto done = p.wait(p.cqa, kMessages);
  ASSERT_EQ(done.size(), kMessages);
  for (const auto& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb, kBytes), 0);
  const transport::Qp& qa = testing::transport_qp(p.qa);
  EXPECT_EQ(qa.delay->window.cwnd(), 0.1);
  EXPECT_EQ(p.qa->counter("timeouts"), 0u);
  EXPECT_EQ(p.qa->counter("retransmitted_packets"), 0u);
  ASSERT_EQ(departures.size(), 4u * kMessages);
  // The last quarter leaves with the window at its floor: departures
  // 40 us apart (rtt / 0.1 would be ~85 us), where the window alone would
  // send one packet per round trip.
  const std::uint64_t rtt = qa.delay->window.rtt_ns();
  ASSERT_GT(rtt, 6'000u) << "the target must be out of reach";
  for (std::size_t i = 3 * kMessages; i < departures.size(); ++i) {
    EXPECT_GE(departures[i] - departures[i - 1], 40'000u * 95 / 100) << "packet " << i << ", rtt " << rtt;
    EXPECT_LE(departures[i] - departures[i - 1], 40'000u * 105 / 100) << "packet " << i << ", rtt " << rtt;
  }
}

// The target counts the path's switches from the TTL the responses arrive
// with (Swift's rule): a peer sending with TTL 64 is one switch away (a
// layer-2 fabric shows none), one whose packets arrive with 61 three.
TEST(CongestionDelay, TheTargetCountsTheRoutersTheAcksCrossed) {
  const cc::DelayParams params = params_10g();
  for (const auto& [ttl, hops] : {std::pair<std::uint8_t, std::uint32_t>{64, 1}, {61, 3}, {1, 1}}) {
    ConnectParams cp;
    cp.hop_limit = ttl;  // both ends send with it
    RcPair p(9, 64 * 1024, cp, link_at(10), link_at(10), 1024, nullptr, 0, &params);
    ASSERT_EQ(p.connect_rc, 0);
    fill_pattern(p.bufa, 64 * 1024, 9);
    ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 64 * 1024, 0, 1), 0);
    const auto done = p.wait(p.cqa, 1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(p.bufa, p.bufb, 64 * 1024), 0);
    const cc::DelayWindow& w = testing::transport_qp(p.qa).delay->window;
    EXPECT_EQ(w.hops(), hops) << "TTL " << int{ttl};
    EXPECT_DOUBLE_EQ(w.target_ns(), cc::target_delay_ns(params, hops, w.cwnd())) << "TTL " << int{ttl};
  }
}

// Selective repeat keeps its own departure times per PSN: its SACKs feed
// the window (a queue at a slower link shrinks it), and RACK's losses cut it.
TEST(CongestionDelay, SelectiveRepeatFeedsTheWindowFromItsSacksAndLosses) {
  const cc::DelayParams params = params_10g();
  ConnectParams sr;
  sr.transport.selective_repeat = true;
  for (std::uint64_t seed : {21, 22, 23}) {
    sim::Impairments link = link_at(5);
    link.loss = 0.01;
    RcPair* p = nullptr;
    const Transfer t = write_through(seed, params, link, 32, 65536, p, sr);
    const transport::Qp& qa = testing::transport_qp(p->qa);
    ASSERT_NE(qa.sr, nullptr) << "seed " << seed;
    ASSERT_TRUE(t.intact) << "seed " << seed << ": " << describe(t, qa);
    EXPECT_EQ(qa.delay->count, 0u) << "selective repeat leaves the ring empty";
    EXPECT_GT(qa.delay->window.increases() + qa.delay->window.decreases() + qa.delay->window.decreases_held(), 100u)
        << "seed " << seed << ": " << describe(t, qa);
    EXPECT_GT(qa.delay->window.srtt_ns(), params.base_rtt_ns / 2) << "seed " << seed << ": " << describe(t, qa);
    EXPECT_LT(t.min_cwnd_milli, 12'000u) << "seed " << seed << ": " << describe(t, qa);
    EXPECT_GT(qa.delay->window.losses(), 0u) << "seed " << seed << ": " << describe(t, qa);
    EXPECT_EQ(qa.delay->window.timeouts(), p->qa->counter("timeouts")) << "seed " << seed;
  }
}

}  // namespace
}  // namespace uroce::test
