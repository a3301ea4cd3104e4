// The DCQCN reaction point, rule by rule, against values worked out by hand
// (the comments show the arithmetic), and the documented defaults file.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cc/dcqcn.h"

namespace uroce::test {
namespace {

constexpr std::uint64_t kNever = 1ull << 60;

cc::DcqcnParams params_40g() {
  cc::DcqcnParams p;
  p.line_rate_bps = 40e9;
  p.min_rate_bps = 10e6;
  p.g = 1.0 / 256;
  p.ai_rate_bps = 40e6;
  p.hai_rate_bps = 400e6;
  p.fast_recovery_steps = 5;
  return p;
}

TEST(Dcqcn, StartsAtLineRateWithAlphaOne) {
  const cc::DcqcnParams p = params_40g();
  cc::DcqcnRate r(&p, 0);
  EXPECT_EQ(r.rate_bps(), 40e9);
  EXPECT_EQ(r.target_bps(), 40e9);
  EXPECT_EQ(r.alpha(), 1.0);
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
  cc::DcqcnParams parsed;
  parsed.line_rate_bps = parsed.min_rate_bps = parsed.g = 0;  // all must come from the file
  parsed.alpha_period_ns = parsed.rate_period_ns = parsed.byte_counter = 0;
  ASSERT_EQ(cc::parse_dcqcn_params(text.str(), parsed), "");
  const cc::DcqcnParams d;
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

}  // namespace
}  // namespace uroce::test
