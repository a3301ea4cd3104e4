// The DCQCN reaction point, rule by rule, against values worked out by hand
// (the comments show the arithmetic), and the documented defaults file.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cc/dcqcn.h"

namespace uroce::test {
namespace {

constexpr std::uint64_t kNever = 1ull << 60;

// The paper's 40 Gb/s setting, starting at line rate and clamping the
// target on every CNP (as the paper does), so the arithmetic below follows
// the paper's rules one by one.
cc::DcqcnParams params_40g() {
  cc::DcqcnParams p;
  p.line_rate_bps = 40e9;
  p.start_rate_fraction = 1;
  p.clamp_tgt_rate = true;
  p.min_rate_bps = 10e6;
  p.g = 1.0 / 256;
  p.ai_rate_bps = 40e6;
  p.hai_rate_bps = 400e6;
  p.fast_recovery_steps = 5;
  p.increase_reference_bps = 0;  // R_AI and R_HAI as given, the paper's
  return p;
}

TEST(Dcqcn, StartsAtLineRateWithAlphaOne) {
  const cc::DcqcnParams p = params_40g();
  cc::DcqcnRate r(&p, 0);
  EXPECT_EQ(r.rate_bps(), 40e9);
  EXPECT_EQ(r.target_bps(), 40e9);
  EXPECT_EQ(r.alpha(), 1.0);
}

TEST(Dcqcn, StartsAtTheStartRateAndClimbsFromIt) {
  cc::DcqcnParams p = params_40g();
  p.start_rate_fraction = 0.125;
  p.alpha_period_ns = kNever;
  p.byte_counter = 0;
  p.rate_period_ns = 55'000;
  cc::DcqcnRate r(&p, 0);
  // Rc = Rt = 40 / 8 = 5 Gb/s.
  EXPECT_EQ(r.rate_bps(), 5e9);
  EXPECT_EQ(r.target_bps(), 5e9);
  // Fast recovery has nothing to recover (Rt = Rc) for F = 5 steps; the
  // 6th adds R_AI: Rt = 5.04, Rc = (5.04 + 5) / 2 = 5.02.
  r.advance(5 * 55'000);
  EXPECT_EQ(r.rate_bps(), 5e9);
  r.advance(6 * 55'000);
  EXPECT_DOUBLE_EQ(r.target_bps(), 5.04e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 5.02e9);
  // Never below the floor: 0.01% of 40 Gb/s is 4 Mb/s, the floor 10 Mb/s.
  p.start_rate_fraction = 0.0001;
  r.reset(&p, 0);
  EXPECT_EQ(r.rate_bps(), 10e6);
}

// ConnectX's default (rp_clamp_tgt_rate = 0, rp_clamp_tgt_rate_after_time_inc
// = 1): a CNP sets Rt = Rc only when an increase event came since the last
// cut; CNPs in a row keep the target the series started from.
TEST(Dcqcn, WithoutClampingOnlyTheFirstCnpAfterAnIncreaseSetsTheTarget) {
  cc::DcqcnParams p = params_40g();
  p.clamp_tgt_rate = false;
  p.alpha_period_ns = kNever;
  p.byte_counter = 0;
  p.rate_period_ns = 55'000;
  cc::DcqcnRate r(&p, 0);
  r.on_cnp(0);
  r.on_cnp(1000);
  // Rt stays 40; Rc = 40 / 2 / 2 = 10 (alpha = 1 throughout: (255/256) * 1 + 1/256).
  EXPECT_DOUBLE_EQ(r.target_bps(), 40e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 10e9);
  // A timer step 55 us after the last CNP: Rc = (40 + 10) / 2 = 25.
  r.advance(56'000);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 25e9);
  // That step was an increase event: this CNP sets Rt = 25, Rc = 12.5.
  r.on_cnp(57'000);
  EXPECT_DOUBLE_EQ(r.target_bps(), 25e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 12.5e9);
  // And the next one, with no increase between, keeps Rt: Rc = 6.25.
  r.on_cnp(58'000);
  EXPECT_DOUBLE_EQ(r.target_bps(), 25e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 6.25e9);
}

// rp_clamp_tgt_rate_after_time_inc = 0: only byte-counter increases count.
TEST(Dcqcn, WithoutClampingAfterTimeIncreasesOnlyAByteCounterStepSetsTheTarget) {
  cc::DcqcnParams p = params_40g();
  p.clamp_tgt_rate = false;
  p.clamp_tgt_rate_after_time_inc = false;
  p.alpha_period_ns = kNever;
  p.byte_counter = 1'000'000;
  p.rate_period_ns = 55'000;
  cc::DcqcnRate r(&p, 0);
  r.on_cnp(0);
  r.on_cnp(1000);
  r.advance(56'000);  // timer step: Rc = (40 + 10) / 2 = 25
  r.on_cnp(57'000);   // not a byte step: Rt stays 40; Rc = 12.5
  EXPECT_DOUBLE_EQ(r.target_bps(), 40e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 12.5e9);
  r.on_sent(1'000'000);  // byte step: Rc = (40 + 12.5) / 2 = 26.25
  EXPECT_DOUBLE_EQ(r.rate_bps(), 26.25e9);
  r.on_cnp(58'000);  // Rt = 26.25; Rc = 13.125
  EXPECT_DOUBLE_EQ(r.target_bps(), 26.25e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 13.125e9);
}

TEST(Dcqcn, ACnpCutsByHalfAlphaAndRemembersTheRateAsTarget) {
  cc::DcqcnParams p = params_40g();
  p.rate_period_ns = kNever;
  p.byte_counter = 0;
  cc::DcqcnRate r(&p, 0);
  r.on_cnp(0);
  // Rt = 40; Rc = 40 * (1 - 1/2) = 20; alpha = (255/256) * 1 + 1/256 = 1.
  EXPECT_DOUBLE_EQ(r.target_bps(), 40e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 20e9);
  EXPECT_DOUBLE_EQ(r.alpha(), 1.0);
  r.on_cnp(1000);
  // Rt = 20; Rc = 10.
  EXPECT_DOUBLE_EQ(r.target_bps(), 20e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 10e9);
  EXPECT_EQ(r.cnps(), 2u);
}

TEST(Dcqcn, AlphaDecaysOncePerQuietPeriodAndSetsTheNextCut) {
  cc::DcqcnParams p = params_40g();
  p.rate_period_ns = kNever;
  p.byte_counter = 0;
  cc::DcqcnRate r(&p, 0);
  r.advance(54'999);
  EXPECT_EQ(r.alpha(), 1.0) << "not a whole period yet";
  r.advance(165'000);  // three periods: 55, 110, 165 us
  // alpha = (255/256)^3 = 0.98832696676...
  EXPECT_NEAR(r.alpha(), 0.9883269667625427, 1e-15);
  r.on_cnp(165'000);
  // Rc = 40 * (1 - 0.98832696676 / 2) = 20.23346066475 Gb/s;
  // alpha = (255/256) * 0.98832696676 + 1/256 = 0.98837256455.
  EXPECT_NEAR(r.rate_bps(), 20233460664.749146, 1e-3);
  EXPECT_NEAR(r.alpha(), 0.9883725645486265, 1e-15);
  // A CNP restarts the period: no decay until 55 us after it.
  r.advance(165'000 + 54'999);
  EXPECT_NEAR(r.alpha(), 0.9883725645486265, 1e-15);
}

// After two CNPs: Rt = 20, Rc = 10 (Gb/s).
cc::DcqcnRate two_cnps(const cc::DcqcnParams& p) {
  cc::DcqcnRate r(&p, 0);
  r.on_cnp(0);
  r.on_cnp(0);
  return r;
}

TEST(Dcqcn, TimerStepsRecoverFastThenIncreaseAdditively) {
  cc::DcqcnParams p = params_40g();
  p.alpha_period_ns = kNever;
  p.byte_counter = 0;
  p.rate_period_ns = 55'000;
  cc::DcqcnRate r = two_cnps(p);
  ASSERT_DOUBLE_EQ(r.rate_bps(), 10e9);
  // Fast recovery, F = 5 steps: Rc = (20 + Rc) / 2.
  const double fast[] = {15e9, 17.5e9, 18.75e9, 19.375e9, 19.6875e9};
  for (int i = 0; i < 5; ++i) {
    r.advance(55'000ull * (i + 1));
    EXPECT_EQ(r.timer_count(), static_cast<std::uint32_t>(i + 1));
    EXPECT_DOUBLE_EQ(r.target_bps(), 20e9);
    EXPECT_DOUBLE_EQ(r.rate_bps(), fast[i]) << "step " << i + 1;
  }
  // Step 6: additive increase, Rt = 20 + 0.04 = 20.04; Rc = (20.04 + 19.6875) / 2 = 19.86375.
  r.advance(6 * 55'000);
  EXPECT_DOUBLE_EQ(r.target_bps(), 20.04e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 19.86375e9);
  // Step 7: Rt = 20.08; Rc = (20.08 + 19.86375) / 2 = 19.971875.
  r.advance(7 * 55'000);
  EXPECT_DOUBLE_EQ(r.target_bps(), 20.08e9);
  EXPECT_DOUBLE_EQ(r.rate_bps(), 19.971875e9);
}

TEST(Dcqcn, ByteCounterStepsAndHyperIncreaseWhenBothCountersPassF) {
  cc::DcqcnParams p = params_40g();
  p.alpha_period_ns = kNever;
  p.rate_period_ns = 55'000;
  p.byte_counter = 1'000'000;
  cc::DcqcnRate r = two_cnps(p);
  r.advance(6 * 55'000);  // T = 6: as above, Rt = 20.04, Rc = 19.86375
  ASSERT_DOUBLE_EQ(r.rate_bps(), 19.86375e9);
  r.on_sent(999'999);
  EXPECT_EQ(r.byte_count(), 0u) << "one byte short of B";
  // BC = 1..5 with T = 6: one counter past F, additive each time.
  // Rt: 20.08, 20.12, 20.16, 20.20, 20.24; Rc = (Rt + Rc) / 2 each time.
  const double rt[] = {20.08e9, 20.12e9, 20.16e9, 20.20e9, 20.24e9};
  const double rc[] = {19.971875e9, 20.0459375e9, 20.10296875e9, 20.151484375e9, 20.1957421875e9};
  r.on_sent(1);
  for (int i = 0; i < 5; ++i) {
    if (i > 0) r.on_sent(1'000'000);
    EXPECT_EQ(r.byte_count(), static_cast<std::uint32_t>(i + 1));
    EXPECT_NEAR(r.target_bps(), rt[i], 1e-3);
    EXPECT_NEAR(r.rate_bps(), rc[i], 1e-3);
  }
  // BC = 6, T = 6: both past F, hyper increase i = 1: Rt = 20.24 + 0.4 = 20.64;
  // Rc = (20.64 + 20.1957421875) / 2 = 20.41787109375.
  r.on_sent(1'000'000);
  EXPECT_NEAR(r.target_bps(), 20.64e9, 1e-3);
  EXPECT_NEAR(r.rate_bps(), 20.41787109375e9, 1e-3);
  // T = 7, BC = 6: i = min(7, 6) - 5 = 1 again: Rt = 21.04.
  r.advance(7 * 55'000);
  EXPECT_NEAR(r.target_bps(), 21.04e9, 1e-3);
  // BC = 7, T = 7: i = 2: Rt = 21.04 + 0.8 = 21.84.
  r.on_sent(1'000'000);
  EXPECT_NEAR(r.target_bps(), 21.84e9, 1e-3);
  // A CNP starts the stages over.
  r.on_cnp(7 * 55'000);
  EXPECT_EQ(r.timer_count(), 0u);
  EXPECT_EQ(r.byte_count(), 0u);
}

TEST(Dcqcn, RatesStayBetweenTheFloorAndLineRate) {
  cc::DcqcnParams p = params_40g();
  cc::DcqcnRate r(&p, 0);
  for (int i = 0; i < 40; ++i) r.on_cnp(static_cast<std::uint64_t>(i));
  EXPECT_EQ(r.rate_bps(), 10e6) << "40 halvings would reach 36 b/s";
  r.advance(10'000'000'000ull);  // 10 s of increase steps
  EXPECT_EQ(r.rate_bps(), 40e9);
  EXPECT_EQ(r.target_bps(), 40e9);
}

TEST(Dcqcn, TheDocumentedDefaultsAreTheCodesDefaults) {
  std::ifstream in(std::string(UROCE_SOURCE_ROOT) + "/conf/dcqcn.conf");
  ASSERT_TRUE(in) << "conf/dcqcn.conf";
  std::stringstream text;
  text << in.rdbuf();
  const cc::DcqcnParams d;
  cc::DcqcnParams parsed;
  parsed.line_rate_bps = parsed.min_rate_bps = parsed.g = 0;  // all must come from the file
  parsed.alpha_period_ns = parsed.rate_period_ns = parsed.byte_counter = 0;
  parsed.start_rate_fraction = 0;
  parsed.window_rtt_ns = 0;
  parsed.increase_reference_bps = 0;
  parsed.clamp_tgt_rate = !d.clamp_tgt_rate;
  parsed.clamp_tgt_rate_after_time_inc = !d.clamp_tgt_rate_after_time_inc;
  ASSERT_EQ(cc::parse_dcqcn_params(text.str(), parsed), "");
  EXPECT_EQ(parsed.enabled, d.enabled);
  EXPECT_EQ(parsed.line_rate_bps, d.line_rate_bps);
  EXPECT_EQ(parsed.min_rate_bps, d.min_rate_bps);
  EXPECT_EQ(parsed.g, d.g);
  EXPECT_EQ(parsed.initial_alpha, d.initial_alpha);
  EXPECT_EQ(parsed.alpha_period_ns, d.alpha_period_ns);
  EXPECT_EQ(parsed.rate_period_ns, d.rate_period_ns);
  EXPECT_EQ(parsed.byte_counter, d.byte_counter);
  EXPECT_EQ(parsed.fast_recovery_steps, d.fast_recovery_steps);
  EXPECT_EQ(parsed.ai_rate_bps, d.ai_rate_bps);
  EXPECT_EQ(parsed.hai_rate_bps, d.hai_rate_bps);
  EXPECT_EQ(parsed.start_rate_fraction, d.start_rate_fraction);
  EXPECT_EQ(parsed.window_rtt_ns, d.window_rtt_ns);
  EXPECT_EQ(parsed.increase_reference_bps, d.increase_reference_bps);
  EXPECT_EQ(parsed.clamp_tgt_rate, d.clamp_tgt_rate);
  EXPECT_EQ(parsed.clamp_tgt_rate_after_time_inc, d.clamp_tgt_rate_after_time_inc);
  EXPECT_EQ(parsed.cnp_interval_ns, d.cnp_interval_ns);
  EXPECT_EQ(parsed.cnp_dscp, d.cnp_dscp);
  EXPECT_EQ(parsed.cnp_priority, d.cnp_priority);
  EXPECT_EQ(parsed.data_ecn, d.data_ecn);
}

TEST(Dcqcn, BadConfigLinesAreNamed) {
  cc::DcqcnParams p;
  EXPECT_EQ(cc::parse_dcqcn_params("# fine\n\nrp_g = 0.5\n", p), "");
  EXPECT_EQ(p.g, 0.5);
  EXPECT_EQ(cc::parse_dcqcn_params("rp_g = 0.5\nrp_ai_rate_mbps\n", p),
            "line 2: expected 'name = value', got 'rp_ai_rate_mbps'");
  EXPECT_EQ(cc::parse_dcqcn_params("rp_ai_rate_mbps = fast", p),
            "line 1: rp_ai_rate_mbps takes a non-negative number, not 'fast'");
  EXPECT_EQ(cc::parse_dcqcn_params("np_cnp_dscp = 64", p),
            "line 1: unknown name or value out of range: np_cnp_dscp = 64");
  EXPECT_EQ(cc::parse_dcqcn_params("rp_g = 2", p), "line 1: rp_g and rp_initial_alpha are fractions between 0 and 1");
}

TEST(Dcqcn, StartRateAndClampingParse) {
  cc::DcqcnParams p;
  ASSERT_EQ(cc::parse_dcqcn_params("rp_start_rate_percent = 25\nrp_clamp_tgt_rate = 1\n"
                                   "rp_clamp_tgt_rate_after_time_inc = 0\n",
                                   p),
            "");
  EXPECT_EQ(p.start_rate_fraction, 0.25);
  EXPECT_TRUE(p.clamp_tgt_rate);
  EXPECT_FALSE(p.clamp_tgt_rate_after_time_inc);
  ASSERT_EQ(cc::parse_dcqcn_params("rp_start_rate_percent = 100", p), "");
  EXPECT_EQ(p.start_rate_fraction, 1.0);
  EXPECT_EQ(cc::parse_dcqcn_params("rp_start_rate_percent = 0", p),
            "line 1: rp_start_rate_percent is a share of the line rate: above 0, at most 100, not '0'");
  EXPECT_EQ(cc::parse_dcqcn_params("\nrp_start_rate_percent = 120", p),
            "line 2: rp_start_rate_percent is a share of the line rate: above 0, at most 100, not '120'");
  EXPECT_EQ(cc::parse_dcqcn_params("rp_clamp_tgt_rate = 2", p), "line 1: rp_clamp_tgt_rate takes 0 or 1, not '2'");
  EXPECT_EQ(cc::parse_dcqcn_params("rp_clamp_tgt_rate_after_time_inc = 0.5", p),
            "line 1: rp_clamp_tgt_rate_after_time_inc takes 0 or 1, not '0.5'");
}

// R_AI and R_HAI are given for increase_reference_bps and scale with the
// line rate: with the defaults' 20 Mb/s for 10 Gb/s, one additive step adds
// 50 Mb/s at 25 Gb/s and 800 Mb/s at 400 Gb/s (0.2% of the line each).
TEST(Dcqcn, IncreaseStepsScaleWithTheLineRate) {
  cc::DcqcnParams p;
  p.line_rate_bps = 25e9;
  p.start_rate_fraction = 0.5;  // 12.5 Gb/s, room to climb
  p.alpha_period_ns = kNever;
  p.byte_counter = 0;
  p.rate_period_ns = 1'000;
  p.fast_recovery_steps = 1;
  ASSERT_EQ(p.increase_reference_bps, 10e9);
  ASSERT_EQ(p.ai_rate_bps, 20e6);
  cc::DcqcnRate r(&p, 0);
  // Step 1 is fast recovery (Rt = Rc); step 2 additive: Rt = 12.5 + 0.05.
  r.advance(2'000);
  EXPECT_DOUBLE_EQ(r.target_bps(), 12.55e9);
  // At 400 Gb/s the same step is 800 Mb/s.
  p.line_rate_bps = 400e9;
  r.reset(&p, 0);
  r.advance(2'000);
  EXPECT_DOUBLE_EQ(r.target_bps(), 200.8e9);
  // With no reference the step is R_AI as given.
  p.increase_reference_bps = 0;
  r.reset(&p, 0);
  r.advance(2'000);
  EXPECT_DOUBLE_EQ(r.target_bps(), 200.02e9);
}

// The cap on packets in flight: line rate x window_rtt over the frame
// (payload + 98 bytes of headers, preamble and gap), rounded up.
TEST(Dcqcn, WindowPacketsIsTheBandwidthDelayProductInFrames) {
  cc::DcqcnParams p;
  ASSERT_EQ(p.window_rtt_ns, 16'000u);
  // 100 Gb/s x 16 us = 200,000 bytes; / 4,194 = 47.7 -> 48.
  EXPECT_EQ(cc::window_packets(p, 4096), 48u);
  // 1 KiB MTU: 200,000 / 1,122 = 178.3 -> 179.
  EXPECT_EQ(cc::window_packets(p, 1024), 179u);
  // 25 Gb/s: 50,000 / 4,194 = 11.9 -> 12.
  p.line_rate_bps = 25e9;
  EXPECT_EQ(cc::window_packets(p, 4096), 12u);
  // 10 Mb/s: 20 bytes, less than a frame: at least 1.
  p.line_rate_bps = 10e6;
  EXPECT_EQ(cc::window_packets(p, 4096), 1u);
  p.window_rtt_ns = 0;
  EXPECT_EQ(cc::window_packets(p, 4096), 0u) << "no cap";
  ASSERT_EQ(cc::parse_dcqcn_params("rp_window_rtt_us = 2.5\nrp_increase_reference_gbps = 25\n", p), "");
  EXPECT_EQ(p.window_rtt_ns, 2'500u);
  EXPECT_EQ(p.increase_reference_bps, 25e9);
}

}  // namespace
}  // namespace uroce::test
