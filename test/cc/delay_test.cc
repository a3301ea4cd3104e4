// The delay-based window (Swift), rule by rule, against values worked out by
// hand (the comments show the arithmetic); the documented defaults file; the
// parser's errors; and a seeded random ACK stream against the rules' bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "cc/delay.h"
#include "support/test_seed.h"

namespace uroce::test {
namespace {

// Round numbers for the arithmetic: fs_min_cwnd = 0.25 and fs_max_cwnd = 100
// give 1/sqrt = 2 and 0.1, so with fs_range = 19 us
//   alpha = 19000 / (2 - 0.1) = 10000 ns,  beta = -10000 / 10 = -1000 ns,
//   flow scaling = 10000 / sqrt(cwnd) - 1000, clamped to [0, 19000];
// two hops add 2 * 1000, so target = 12000 + flow scaling.
cc::DelayParams round_params() {
  cc::DelayParams p;
  p.base_target_ns = 10'000;
  p.per_hop_ns = 1'000;
  p.fs_range_ns = 19'000;
  p.fs_min_cwnd = 0.25;
  p.fs_max_cwnd = 100;
  p.ai = 1;
  p.beta_md = 0.8;
  p.max_mdf = 0.5;
  p.min_cwnd = 0.01;
  p.max_cwnd = 100;
  p.retx_reset_threshold = 3;
  p.srtt_weight = 0.25;
  p.round_least = false;  // Swift's rule, each ACK's own RTT; round_least has tests of its own
  return p;
}

cc::DelayPath two_hops() {
  cc::DelayPath path;
  path.line_rate_bps = 100e9;
  path.base_rtt_ns = 10'000;
  path.packet_bytes = 4096;
  path.hops = 2;
  return path;
}

TEST(DelayCc, TargetScalesWithHopsAndShrinkingWindows) {
  const cc::DelayParams p = round_params();
  // cwnd 4: 10000 / 2 - 1000 = 4000; 12000 + 4000 = 16000.
  EXPECT_DOUBLE_EQ(cc::target_delay_ns(p, 2, 4), 16'000);
  // cwnd 25: 10000 / 5 - 1000 = 1000; 13000.
  EXPECT_DOUBLE_EQ(cc::target_delay_ns(p, 2, 25), 13'000);
  // Below fs_min_cwnd the term would be 10000 / 0.2 - 1000 = 49000 at cwnd
  // 0.04: clamped to fs_range, 19000; 31000.
  EXPECT_DOUBLE_EQ(cc::target_delay_ns(p, 2, 0.04), 31'000);
  // At fs_min_cwnd exactly: 10000 / 0.5 - 1000 = 19000 = fs_range.
  EXPECT_DOUBLE_EQ(cc::target_delay_ns(p, 2, 0.25), 31'000);
  // At fs_max_cwnd: 10000 / 10 - 1000 = 0; above it 10000 / 20 - 1000 = -500,
  // clamped to 0: the target is base + hops alone.
  EXPECT_DOUBLE_EQ(cc::target_delay_ns(p, 2, 100), 12'000);
  EXPECT_DOUBLE_EQ(cc::target_delay_ns(p, 2, 400), 12'000);
  // Hops: 0 hops 10000 + 4000, 5 hops 15000 + 4000.
  EXPECT_DOUBLE_EQ(cc::target_delay_ns(p, 0, 4), 14'000);
  EXPECT_DOUBLE_EQ(cc::target_delay_ns(p, 5, 4), 19'000);
}

// Swift counts the path's switches from the TTL an ACK arrives with; the
// window's target follows (per_hop 1000 ns each in round_params).
TEST(DelayCc, HopsFromTheTtlSetTheTarget) {
  EXPECT_EQ(cc::hops_from_ttl(64), 1u) << "no router: one (layer-2) switch";
  EXPECT_EQ(cc::hops_from_ttl(61), 3u);
  EXPECT_EQ(cc::hops_from_ttl(127), 1u);
  EXPECT_EQ(cc::hops_from_ttl(123), 5u);
  EXPECT_EQ(cc::hops_from_ttl(255), 1u);
  EXPECT_EQ(cc::hops_from_ttl(250), 5u);
  EXPECT_EQ(cc::hops_from_ttl(64 - 16), 16u);
  EXPECT_EQ(cc::hops_from_ttl(64 - 17), 1u) << "no datacenter path: a sender's own initial TTL";
  EXPECT_EQ(cc::hops_from_ttl(1), 1u) << "ibv_rc_pingpong's hop limit";
  EXPECT_EQ(cc::hops_from_ttl(0), 1u);
  const cc::DelayParams p = round_params();
  cc::DelayWindow w(&p, two_hops());
  w.on_loss(0);  // 100 -> 50
  // Target at 50 on two hops: 10000 + 2000 + 10000 / sqrt(50) - 1000.
  EXPECT_DOUBLE_EQ(w.target_ns(), 10'000 + 2'000 + 10'000 / std::sqrt(50.0) - 1'000);
  w.set_hops(cc::hops_from_ttl(59));  // five routers
  EXPECT_EQ(w.hops(), 5u);
  EXPECT_DOUBLE_EQ(w.target_ns(), 10'000 + 5'000 + 10'000 / std::sqrt(50.0) - 1'000);
}

TEST(DelayCc, StartsAtTheBdpCapOrTheConfiguredOne) {
  cc::DelayParams p = round_params();
  p.max_cwnd = 0;
  // 100 Gb/s * 10 us = 125000 bytes; / 4096 = 30.5, rounded up: 31.
  cc::DelayPath path = two_hops();
  EXPECT_EQ(cc::bdp_packets(path), 31);
  cc::DelayWindow w(&p, path);
  EXPECT_EQ(w.cwnd(), 31);
  EXPECT_EQ(w.max_cwnd(), 31);
  EXPECT_EQ(w.window_packets(), 31u);
  EXPECT_EQ(w.pacing_gap_ns(), 0u);
  EXPECT_EQ(w.rtt_ns(), 10'000u) << "the base RTT before any sample";
  EXPECT_EQ(w.srtt_ns(), 0u);
  // 25 Gb/s * 8 us = 25000 bytes; / 1024 = 24.4: 25.
  path.line_rate_bps = 25e9;
  path.base_rtt_ns = 8'000;
  path.packet_bytes = 1024;
  EXPECT_EQ(cc::bdp_packets(path), 25);
  // 1 Gb/s * 1 us = 125 bytes, less than a packet: at least 1.
  path.line_rate_bps = 1e9;
  path.base_rtt_ns = 1'000;
  path.packet_bytes = 4096;
  EXPECT_EQ(cc::bdp_packets(path), 1);
  // A configured cap wins over the path's BDP.
  p.max_cwnd = 12.5;
  w.reset(&p, two_hops());
  EXPECT_EQ(w.cwnd(), 12.5);
  EXPECT_EQ(w.window_packets(), 12u);
}

TEST(DelayCc, AdditiveIncreasePerWindowAboveOnePacketAndPerPacketBelow) {
  cc::DelayParams p = round_params();
  p.max_cwnd = 8;
  cc::DelayWindow w(&p, two_hops());
  w.on_loss(0);  // 8 * (1 - 0.5) = 4
  ASSERT_EQ(w.cwnd(), 4);
  // Target at cwnd 4: 16000; 10000 is below it. ai * n / cwnd = 1 * 2 / 4.
  w.on_ack(1'000, 2, 10'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 4.5);
  // n = 1: 4.5 + 1 / 4.5.
  w.on_ack(2'000, 1, 10'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 4.5 + 1 / 4.5);
  EXPECT_EQ(w.increases(), 2u);
  EXPECT_EQ(w.decreases(), 1u);

  // Below one packet the increase is ai * n, not divided by cwnd.
  p.retx_reset_threshold = 1;
  p.ai = 0.25;
  w.reset(&p, two_hops());
  w.on_timeout(0);  // first timeout at threshold 1: cwnd = min_cwnd
  ASSERT_EQ(w.cwnd(), 0.01);
  // Targets here are 31000 (cwnd <= 0.25) or more than 12000: 10000 is below.
  w.on_ack(1'000, 1, 10'000);  // 0.01 + 0.25
  EXPECT_DOUBLE_EQ(w.cwnd(), 0.26);
  w.on_ack(2'000, 2, 10'000);  // 0.26 + 0.25 * 2
  EXPECT_DOUBLE_EQ(w.cwnd(), 0.76);
  w.on_ack(3'000, 1, 10'000);  // 0.76 + 0.25 = 1.01
  EXPECT_DOUBLE_EQ(w.cwnd(), 1.01);
  w.on_ack(4'000, 1, 10'000);  // now per window: 1.01 + 0.25 / 1.01
  EXPECT_DOUBLE_EQ(w.cwnd(), 1.01 + 0.25 / 1.01);
}

TEST(DelayCc, MultiplicativeDecreaseByTheExcessDelayBoundedByMaxMdf) {
  const cc::DelayParams p = round_params();
  cc::DelayWindow w(&p, two_hops());
  ASSERT_EQ(w.cwnd(), 100);
  // Target at cwnd 100: 12000. rtt 15000:
  // 1 - 0.8 * (15000 - 12000) / 15000 = 1 - 0.16 = 0.84; cwnd 84.
  w.on_ack(100'000, 1, 15'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 84);
  EXPECT_EQ(w.decreases(), 1u);
  // Target at cwnd 84: 12000 + 10000 / sqrt(84) - 1000 = 12091.089...; rtt
  // 60000, one RTT later: 1 - 0.8 * (60000 - 12091.089) / 60000 = 0.3612,
  // below 1 - max_mdf = 0.5: cwnd 84 * 0.5 = 42.
  w.on_ack(160'000, 1, 60'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 42);
  EXPECT_EQ(w.decreases(), 2u);
  EXPECT_EQ(w.increases(), 0u);
}

TEST(DelayCc, AtMostOneDecreasePerRoundTripOfTheLatestSample) {
  const cc::DelayParams p = round_params();
  cc::DelayWindow w(&p, two_hops());
  w.on_ack(100'000, 1, 15'000);  // 100 -> 84, as above
  ASSERT_DOUBLE_EQ(w.cwnd(), 84);
  // 14999 ns later, rtt 15000: less than a round trip, held.
  w.on_ack(114'999, 1, 15'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 84);
  EXPECT_EQ(w.decreases_held(), 1u);
  // 15000 ns later, but the sample is now 20000: the spacing follows the
  // latest sample, so still held.
  w.on_ack(115'000, 1, 20'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 84);
  EXPECT_EQ(w.decreases_held(), 2u);
  // An ACK below target in between still increases: 84 + 1 / 84.
  w.on_ack(116'000, 1, 10'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 84 + 1.0 / 84);
  // 20000 ns after the decrease with rtt 20000: allowed. Target at
  // cwnd 84.0119: 12000 + 10000 / sqrt(84.0119) - 1000 = 12091.02; cut
  // 1 - 0.8 * (20000 - 12091.02) / 20000.
  w.on_ack(120'000, 1, 20'000);
  const double c = 84 + 1.0 / 84;
  const double target = 12'000 + 10'000 / std::sqrt(c) - 1'000;
  EXPECT_DOUBLE_EQ(w.cwnd(), c * (1 - 0.8 * (20'000 - target) / 20'000));
  EXPECT_NEAR(w.cwnd(), 84.0119 * 0.68364, 1e-3);
  EXPECT_EQ(w.decreases(), 2u);
  // Losses and timeouts keep the same spacing (rtt now 20000).
  w.on_loss(139'999);
  EXPECT_EQ(w.decreases(), 2u);
  w.on_timeout(139'999);
  EXPECT_EQ(w.decreases(), 2u);
  w.on_loss(140'000);
  EXPECT_EQ(w.decreases(), 3u);
}

// round_least: a decrease compares the least RTT of the round (since the
// last decrease, or since a round trip ago) with the target, so one late
// sample among timely ones cuts nothing, while a round of late ones cuts by
// the least excess.
TEST(DelayCc, WithRoundLeastOneLateSampleAmongTimelyOnesCutsNothing) {
  cc::DelayParams p = round_params();
  p.round_least = true;
  p.max_cwnd = 16;
  cc::DelayWindow w(&p, two_hops());
  // Target at cwnd 16: 12000 + 10000 / 4 - 1000 = 13500. A timely sample
  // (10000) opens the round at t = 0 and increases: 16 is the cap, so 16.
  w.on_ack(0, 1, 10'000);
  ASSERT_DOUBLE_EQ(w.cwnd(), 16);
  // 2 ms of host delay in one sample 5 us later: the round (started 5 us
  // ago, shorter than the round trip of 10 us) holds 10000, below target.
  w.on_ack(5'000, 1, 2'000'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 16);
  EXPECT_EQ(w.decreases(), 0u);
  EXPECT_EQ(w.decreases_held(), 1u);
  // A round lasts the larger of the latest and the smoothed round trip:
  // now 2 ms (srtt 10000 + 0.25 * 1990000 = 507500), so the round that
  // began at 0 holds a sample at 1 ms too. Held again.
  w.on_ack(1'000'000, 1, 30'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 16);
  EXPECT_EQ(w.decreases_held(), 2u);
  // At 2.5 ms (more than max(30000, srtt 388125) since the round began) a
  // new round starts with this sample alone: 20000 against 13500 cuts
  // 16 * (1 - 0.8 * 6500 / 20000) = 11.84.
  w.on_ack(2'500'000, 1, 20'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), 16 * (1 - 0.8 * (20'000 - 13'500) / 20'000.0));
  EXPECT_EQ(w.decreases(), 1u);
  // The decrease starts a round. 10 us later a sample of 40000: within a
  // round trip of the cut (the spacing follows the latest sample), held;
  // it opens the round. 35 us later, still within that round (srtt is
  // 232070 ns by then), 15000: the round's least. Target at cwnd 11.84:
  // 12000 + 10000 / sqrt(11.84) - 1000 = 13906.2, so the cut is by
  // 15000's excess, not 40000's: 11.84 * (1 - 0.8 * 1093.8 / 15000).
  const double c = w.cwnd();
  w.on_ack(2'510'000, 1, 40'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), c);
  EXPECT_EQ(w.decreases_held(), 3u);
  const double target = 12'000 + 10'000 / std::sqrt(c) - 1'000;
  w.on_ack(2'545'000, 1, 15'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), c * (1 - 0.8 * (15'000 - target) / 15'000));
  EXPECT_NEAR(w.cwnd(), 11.84 * (1 - 0.8 * 1093.8 / 15'000), 1e-3);
  EXPECT_EQ(w.decreases(), 2u);
}

// Swift's Algorithm 1 also restarts the decrease spacing when an increase is
// held at max_cwnd (cwnd <= its previous value); here only decreases do, so a
// QP at its cap cuts at the first ACK above target.
TEST(DelayCc, AnIncreaseHeldAtTheCapDoesNotDelayTheNextDecrease) {
  cc::DelayParams p = round_params();
  p.max_cwnd = 8;
  cc::DelayWindow w(&p, two_hops());
  w.on_loss(0);  // 4
  for (std::uint64_t t = 1'000; t <= 100'000; t += 1'000) w.on_ack(t, 1, 10'000);
  ASSERT_EQ(w.cwnd(), 8) << "the increases reach the cap and stay there";
  // Target at cwnd 8: 12000 + 10000 / sqrt(8) - 1000 = 14535.53; rtt 20000
  // 1 ns after the last (held) increase: 8 * (1 - 0.8 * 5464.47 / 20000).
  w.on_ack(100'001, 1, 20'000);
  const double target = 12'000 + 10'000 / std::sqrt(8.0) - 1'000;
  EXPECT_DOUBLE_EQ(w.cwnd(), 8 * (1 - 0.8 * (20'000 - target) / 20'000));
  EXPECT_EQ(w.decreases_held(), 0u);
}

TEST(DelayCc, TimeoutsCutThenResetToMinCwndAtTheThreshold) {
  cc::DelayParams p = round_params();
  p.max_cwnd = 64;
  cc::DelayWindow w(&p, two_hops());  // threshold 3, rtt 10000 (base)
  w.on_timeout(0);  // 1st: 64 * 0.5 = 32
  EXPECT_EQ(w.cwnd(), 32);
  EXPECT_EQ(w.retransmit_count(), 1u);
  w.on_timeout(5'000);  // 2nd, within a round trip of the cut: counted, no cut
  EXPECT_EQ(w.cwnd(), 32);
  EXPECT_EQ(w.retransmit_count(), 2u);
  w.on_timeout(6'000);  // 3rd in a row: min_cwnd, spacing or not
  EXPECT_EQ(w.cwnd(), 0.01);
  EXPECT_EQ(w.timeouts(), 3u);
  EXPECT_EQ(w.resets(), 1u);
  EXPECT_EQ(w.decreases(), 2u);
  // An ACK starts the count over: the next timeout is the 1st again (a cut,
  // held at min_cwnd).
  w.on_ack(30'000, 1, 10'000);  // 0.01 + 1 = 1.01
  EXPECT_EQ(w.retransmit_count(), 0u);
  w.on_timeout(50'000);
  EXPECT_EQ(w.retransmit_count(), 1u);
  EXPECT_DOUBLE_EQ(w.cwnd(), 1.01 * 0.5);
  EXPECT_EQ(w.resets(), 1u);
  // So does a loss found by a NAK or a SACK hole (the peer answered).
  w.on_timeout(70'000);
  EXPECT_EQ(w.retransmit_count(), 2u);
  w.on_loss(90'000);
  EXPECT_EQ(w.retransmit_count(), 0u);
  EXPECT_EQ(w.losses(), 1u);
  w.on_timeout(110'000);
  w.on_timeout(130'000);
  EXPECT_EQ(w.resets(), 1u) << "two in a row since the loss, not three";
  w.on_timeout(150'000);
  EXPECT_EQ(w.resets(), 2u);
  EXPECT_EQ(w.cwnd(), 0.01);
}

TEST(DelayCc, BelowOnePacketTheQpIsPacedAtRttOverCwndWithABound) {
  cc::DelayParams p = round_params();
  p.retx_reset_threshold = 1;
  p.min_cwnd = 0.25;
  p.ai = 0.25;
  cc::DelayWindow w(&p, two_hops());
  w.on_timeout(0);  // min_cwnd 0.25
  ASSERT_EQ(w.cwnd(), 0.25);
  // No sample yet: the base RTT, 10000 / 0.25 = 40000 ns between packets.
  EXPECT_EQ(w.pacing_gap_ns(), 40'000u);
  EXPECT_EQ(w.window_packets(), 1u);
  // Sample 20000 (target at 0.25: 31000, below): cwnd 0.5, gap 20000 / 0.5.
  w.on_ack(50'000, 1, 20'000);
  EXPECT_EQ(w.cwnd(), 0.5);
  EXPECT_EQ(w.pacing_gap_ns(), 40'000u);
  // Sample 30000 (target at 0.5: 12000 + 10000 / 0.7071 - 1000 = 25142,
  // above; a round trip since the timeout): 0.5 * (1 - 0.8 * 4858 / 30000)
  // = 0.43523; gap 30000 / 0.43523 = 68929 ns.
  w.on_ack(100'000, 1, 30'000);
  const double target = 12'000 + 10'000 / std::sqrt(0.5) - 1'000;
  const double cwnd = 0.5 * (1 - 0.8 * (30'000 - target) / 30'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), cwnd);
  EXPECT_EQ(w.pacing_gap_ns(), static_cast<std::uint64_t>(std::llround(30'000 / cwnd)));
  EXPECT_NEAR(static_cast<double>(w.pacing_gap_ns()), 68'929, 1);
  // A host delay of 5 ms (held: within a round trip of the cut) would
  // make it 5 ms / 0.43523 = 11.5 ms; the bound is the floor's gap on the
  // largest target, (10000 + 2 * 1000 + 19000) / 0.25 = 124000 ns.
  w.on_ack(100'001, 1, 5'000'000);
  EXPECT_DOUBLE_EQ(w.cwnd(), cwnd);
  EXPECT_EQ(w.pacing_gap_ns(), 124'000u);
  // At one packet and above: no gap, the window alone.
  for (int i = 0; i < 3; ++i) w.on_ack(110'000 + i, 1, 10'000);  // + 3 * 0.25
  ASSERT_GE(w.cwnd(), 1);
  EXPECT_EQ(w.pacing_gap_ns(), 0u);
  EXPECT_EQ(w.window_packets(), 1u);
}

TEST(DelayCc, TheWindowStaysBetweenMinAndMaxCwnd) {
  cc::DelayParams p = round_params();
  p.max_cwnd = 7.9;
  cc::DelayWindow w(&p, two_hops());
  EXPECT_EQ(w.window_packets(), 7u) << "floor(7.9)";
  w.on_ack(1'000, 1000, 10'000);  // 7.9 + 1000 / 7.9, capped
  EXPECT_EQ(w.cwnd(), 7.9);
  EXPECT_EQ(w.increases(), 1u);
  // A cut of at most half per round trip: 7.9 / 2^k reaches 0.01 after 10.
  std::uint64_t t = 2'000;
  for (int i = 0; i < 20; ++i, t += 10'000) w.on_loss(t);
  EXPECT_EQ(w.cwnd(), 0.01);
  EXPECT_EQ(w.decreases(), 20u) << "cuts held at the floor still count";
  // Back up to the cap in one ACK of many packets (below 1: + ai * n).
  w.on_ack(t, 100, 10'000);
  EXPECT_EQ(w.cwnd(), 7.9);
  // The largest possible excess, a round trip of it later: a cut by
  // max_mdf, no more (7.9 * 0.5), however far above target the delay is.
  w.on_ack(t + 1'000'000'000, 1, 1'000'000'000);
  EXPECT_EQ(w.cwnd(), 3.95);
  EXPECT_EQ(w.window_packets(), 3u);
}

TEST(DelayCc, SmoothedRttIsAnEwmaOfTheSamples) {
  const cc::DelayParams p = round_params();  // weight 0.25
  cc::DelayWindow w(&p, two_hops());
  w.on_ack(0, 1, 10'000);  // the first sample: 10000
  EXPECT_EQ(w.srtt_ns(), 10'000u);
  w.on_ack(1'000, 1, 30'000);  // 10000 + 0.25 * 20000 = 15000
  EXPECT_EQ(w.srtt_ns(), 15'000u);
  w.on_ack(2'000, 1, 7'000);  // 15000 + 0.25 * -8000 = 13000
  EXPECT_EQ(w.srtt_ns(), 13'000u);
  EXPECT_EQ(w.rtt_ns(), 7'000u);
}

// A random stream of ACKs, losses and timeouts never takes cwnd outside
// [min_cwnd, max_cwnd]; ACKs all below any target only grow it; ACKs all
// above any target only shrink it, and strictly (down to the floor) when a
// round trip of the latest sample has passed since the last decrease.
TEST(DelayCc, RandomStreamsKeepTheBoundsAndTheDirection) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  cc::DelayParams p;  // the defaults
  cc::DelayPath path;
  path.hops = 3;
  const std::uint64_t lowest_target = p.base_target_ns + 3 * p.per_hop_ns;
  const std::uint64_t highest_target = lowest_target + p.fs_range_ns;
  auto uniform = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };

  cc::DelayWindow w(&p, path);
  ASSERT_EQ(w.max_cwnd(), 31) << seed_note(seed);
  std::uint64_t now = 0;
  for (int i = 0; i < 20'000; ++i) {
    now += uniform(0, 30'000);
    const std::uint64_t kind = uniform(0, 9);
    if (kind < 7) {
      w.on_ack(now, static_cast<std::uint32_t>(uniform(0, 64)), uniform(1, 200'000));
    } else if (kind < 9) {
      w.on_loss(now);
    } else {
      w.on_timeout(now);
    }
    ASSERT_GE(w.cwnd(), p.min_cwnd) << "event " << i << ", " << seed_note(seed);
    ASSERT_LE(w.cwnd(), w.max_cwnd()) << "event " << i << ", " << seed_note(seed);
    ASSERT_GE(w.window_packets(), 1u);
    ASSERT_LE(w.window_packets(), 31u);
    ASSERT_EQ(w.pacing_gap_ns() == 0, w.cwnd() >= 1) << seed_note(seed);
  }

  // Below target only: never smaller, from a small window up to the cap.
  w.reset(&p, path);
  for (int i = 0; i < 30; ++i) w.on_timeout(now += 100'000);  // down to min_cwnd
  ASSERT_EQ(w.cwnd(), p.min_cwnd) << seed_note(seed);
  for (int i = 0; i < 5'000; ++i) {
    const double before = w.cwnd();
    now += uniform(0, 30'000);
    w.on_ack(now, static_cast<std::uint32_t>(uniform(1, 8)),
             uniform(1, lowest_target - 1));
    ASSERT_GE(w.cwnd(), before) << "ACK " << i << ", " << seed_note(seed);
    ASSERT_LE(w.cwnd(), w.max_cwnd()) << seed_note(seed);
  }
  EXPECT_EQ(w.cwnd(), w.max_cwnd()) << "5000 ACKs below target reach the cap, " << seed_note(seed);
  EXPECT_EQ(w.decreases(), 30u) << seed_note(seed);

  // Above target only: never larger; smaller (or at the floor) whenever a
  // round trip has passed since the last decrease, unchanged otherwise.
  w.reset(&p, path);
  bool decreased = false;
  std::uint64_t last_decrease = 0;
  for (int i = 0; i < 5'000; ++i) {
    const double before = w.cwnd();
    const std::uint64_t rtt = uniform(highest_target + 1, 4 * 40'000);
    now += uniform(0, 2 * rtt);
    w.on_ack(now, static_cast<std::uint32_t>(uniform(0, 8)), rtt);
    if (!decreased || now - last_decrease >= rtt) {
      ASSERT_TRUE(w.cwnd() < before || w.cwnd() == p.min_cwnd) << "ACK " << i << ", " << seed_note(seed);
      decreased = true;
      last_decrease = now;
    } else {
      ASSERT_EQ(w.cwnd(), before) << "ACK " << i << " within a round trip, " << seed_note(seed);
    }
    ASSERT_GE(w.cwnd(), p.min_cwnd) << seed_note(seed);
  }
  EXPECT_EQ(w.increases(), 0u) << seed_note(seed);
  EXPECT_EQ(w.decreases() + w.decreases_held(), 5'000u) << seed_note(seed);
}

TEST(DelayCc, TheDocumentedDefaultsAreTheCodesDefaults) {
  std::ifstream in(std::string(UROCE_SOURCE_ROOT) + "/conf/delay.conf");
  ASSERT_TRUE(in) << "conf/delay.conf";
  std::stringstream text;
  text << in.rdbuf();
  const cc::DelayParams d;
  // Every value must come from the file: start from values none of its lines has.
  cc::DelayParams parsed;
  parsed.base_target_ns = parsed.per_hop_ns = parsed.fs_range_ns = 1;
  parsed.fs_min_cwnd = 0.5;
  parsed.fs_max_cwnd = 2;
  parsed.ai = parsed.beta_md = parsed.max_mdf = parsed.min_cwnd = 0.3;
  parsed.max_cwnd = 7;
  parsed.retx_reset_threshold = 99;
  parsed.srtt_weight = 0.9;
  parsed.line_rate_bps = 1;
  parsed.base_rtt_ns = 1;
  ASSERT_EQ(cc::parse_delay_params(text.str(), parsed), "");
  EXPECT_EQ(parsed.base_target_ns, d.base_target_ns);
  EXPECT_EQ(parsed.per_hop_ns, d.per_hop_ns);
  EXPECT_EQ(parsed.fs_range_ns, d.fs_range_ns);
  EXPECT_EQ(parsed.fs_min_cwnd, d.fs_min_cwnd);
  EXPECT_EQ(parsed.fs_max_cwnd, d.fs_max_cwnd);
  EXPECT_EQ(parsed.ai, d.ai);
  EXPECT_EQ(parsed.beta_md, d.beta_md);
  EXPECT_EQ(parsed.max_mdf, d.max_mdf);
  EXPECT_EQ(parsed.min_cwnd, d.min_cwnd);
  EXPECT_EQ(parsed.max_cwnd, d.max_cwnd);
  EXPECT_EQ(parsed.retx_reset_threshold, d.retx_reset_threshold);
  EXPECT_EQ(parsed.srtt_weight, d.srtt_weight);
  EXPECT_EQ(parsed.line_rate_bps, d.line_rate_bps);
  EXPECT_EQ(parsed.base_rtt_ns, d.base_rtt_ns);
  EXPECT_EQ(parsed.round_least, d.round_least);
}

TEST(DelayCc, AGoodFileSetsEveryName) {
  cc::DelayParams p;
  ASSERT_EQ(cc::parse_delay_params("# comment\n\n"
                                   "base_target_us = 20.5   # fractions of a us\n"
                                   "per_hop_us = 0\n"
                                   "fs_range_us = 3.25\n"
                                   "fs_min_cwnd = 0.5\n"
                                   "fs_max_cwnd = 50\n"
                                   "ai = 2\n"
                                   "beta_md = 1\n"
                                   "max_mdf = 0.25\n"
                                   "min_cwnd = 0.01\n"
                                   "max_cwnd = 64\n"
                                   "retx_reset_threshold = 1\n"
                                   "line_rate_gbps = 25\n"
                                   "base_rtt_us = 4.5\n"
                                   "\tsrtt_weight\t=\t0.5\r\n"
                                   "round_least = 0\n",
                                   p),
            "");
  EXPECT_EQ(p.base_target_ns, 20'500u);
  EXPECT_EQ(p.per_hop_ns, 0u);
  EXPECT_EQ(p.fs_range_ns, 3'250u);
  EXPECT_EQ(p.fs_min_cwnd, 0.5);
  EXPECT_EQ(p.fs_max_cwnd, 50);
  EXPECT_EQ(p.ai, 2);
  EXPECT_EQ(p.beta_md, 1);
  EXPECT_EQ(p.max_mdf, 0.25);
  EXPECT_EQ(p.min_cwnd, 0.01);
  EXPECT_EQ(p.max_cwnd, 64);
  EXPECT_EQ(p.retx_reset_threshold, 1u);
  EXPECT_EQ(p.srtt_weight, 0.5);
  EXPECT_EQ(p.line_rate_bps, 25e9);
  EXPECT_EQ(p.base_rtt_ns, 4'500u);
  EXPECT_FALSE(p.round_least);
  // Names not in the text keep their values.
  ASSERT_EQ(cc::parse_delay_params("ai = 3\n", p), "");
  EXPECT_EQ(p.ai, 3);
  EXPECT_EQ(p.max_mdf, 0.25);
}

TEST(DelayCc, BadLinesAreNamedWithWhatIsAllowed) {
  cc::DelayParams p;
  EXPECT_EQ(cc::parse_delay_params("ai = 1\nmax_mdf\n", p), "line 2: expected 'name = value', got 'max_mdf'");
  EXPECT_EQ(cc::parse_delay_params("\n\nbase_target = 12", p),
            "line 3: unknown name 'base_target' (known: base_target_us, per_hop_us, fs_range_us, fs_min_cwnd, "
            "fs_max_cwnd, ai, beta_md, max_mdf, min_cwnd, max_cwnd, retx_reset_threshold, line_rate_gbps, base_rtt_us, srtt_weight, "
            "round_least)");
  // Not a number: words, trailing text, nothing, infinities, NaN.
  EXPECT_EQ(cc::parse_delay_params("ai = fast", p), "line 1: ai takes a number, not 'fast'");
  EXPECT_EQ(cc::parse_delay_params("ai = 1 packet", p), "line 1: ai takes a number, not '1 packet'");
  EXPECT_EQ(cc::parse_delay_params("ai =", p), "line 1: ai takes a number, not ''");
  EXPECT_EQ(cc::parse_delay_params("fs_max_cwnd = inf", p), "line 1: fs_max_cwnd takes a number, not 'inf'");
  EXPECT_EQ(cc::parse_delay_params("beta_md = nan", p), "line 1: beta_md takes a number, not 'nan'");
  // Out of range, each kind of bound.
  EXPECT_EQ(cc::parse_delay_params("base_target_us = 0", p),
            "line 1: base_target_us is above 0, at most 1000000, not '0'");
  EXPECT_EQ(cc::parse_delay_params("per_hop_us = -1", p), "line 1: per_hop_us is 0 to 1000000, not '-1'");
  EXPECT_EQ(cc::parse_delay_params("max_mdf = 1", p), "line 1: max_mdf is above 0, below 1, not '1'");
  EXPECT_EQ(cc::parse_delay_params("beta_md = 1.5", p), "line 1: beta_md is above 0, at most 1, not '1.5'");
  EXPECT_EQ(cc::parse_delay_params("min_cwnd = 0", p),
            "line 1: min_cwnd is above 0 (and at most max_cwnd), not '0'");
  EXPECT_EQ(cc::parse_delay_params("retx_reset_threshold = 2.5", p),
            "line 1: retx_reset_threshold is a whole number from 1 to 1000, not '2.5'");
  EXPECT_EQ(cc::parse_delay_params("retx_reset_threshold = 0", p),
            "line 1: retx_reset_threshold is a whole number from 1 to 1000, not '0'");
  EXPECT_EQ(cc::parse_delay_params("srtt_weight = 0", p), "line 1: srtt_weight is above 0, at most 1, not '0'");
  // Pairs: the line that broke the pair is named.
  p = cc::DelayParams{};
  EXPECT_EQ(cc::parse_delay_params("fs_min_cwnd = 0.5\nai = 1\nfs_max_cwnd = 0.5\n", p),
            "line 3: fs_min_cwnd must be below fs_max_cwnd");
  p = cc::DelayParams{};
  EXPECT_EQ(cc::parse_delay_params("fs_min_cwnd = 200", p), "line 1: fs_min_cwnd must be below fs_max_cwnd");
  p = cc::DelayParams{};
  EXPECT_EQ(cc::parse_delay_params("max_cwnd = 0.5\nmin_cwnd = 2\n", p),
            "line 2: min_cwnd must be at most max_cwnd (or max_cwnd 0)");
  p = cc::DelayParams{};
  EXPECT_EQ(cc::parse_delay_params("max_cwnd = 0\nmin_cwnd = 2\n", p), "") << "0: the path's BDP, checked then";
}

}  // namespace
}  // namespace uroce::test
