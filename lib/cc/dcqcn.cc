#include "cc/dcqcn.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace uroce::cc {

std::uint32_t window_packets(const DcqcnParams& p, std::uint32_t mtu) {
  if (p.window_rtt_ns == 0) return 0;
  const double bdp_bytes = p.line_rate_bps * static_cast<double>(p.window_rtt_ns) / 8e9;
  const double frame = static_cast<double>(mtu) + 98;
  return static_cast<std::uint32_t>(std::max(1.0, std::ceil(bdp_bytes / frame)));
}

void DcqcnRate::reset(const DcqcnParams* params, std::uint64_t now_ns) {
  p_ = params;
  rc_ = rt_ = p_->line_rate_bps * p_->start_rate_fraction;
  bound_rates();
  alpha_ = p_->initial_alpha;
  t_ = bc_ = 0;
  bytes_ = 0;
  alpha_due_ = now_ns + p_->alpha_period_ns;
  rate_due_ = now_ns + p_->rate_period_ns;
  cnps_ = 0;
}

void DcqcnRate::bound_rates() {
  rt_ = std::clamp(rt_, p_->min_rate_bps, p_->line_rate_bps);
  rc_ = std::clamp(rc_, p_->min_rate_bps, p_->line_rate_bps);
}

bool DcqcnRate::clamps_target() const {
  // T and BC count the timer and byte-counter expiries since the last cut.
  return p_->clamp_tgt_rate || bc_ > 0 || (p_->clamp_tgt_rate_after_time_inc && t_ > 0);
}

void DcqcnRate::on_cnp(std::uint64_t now_ns) {
  advance(now_ns);
  ++cnps_;
  if (clamps_target()) rt_ = rc_;
  rc_ = rc_ * (1 - alpha_ / 2);
  alpha_ = (1 - p_->g) * alpha_ + p_->g;
  bound_rates();
  // The increase starts over; alpha decays only after a whole period
  // without a CNP.
  t_ = bc_ = 0;
  bytes_ = 0;
  alpha_due_ = now_ns + p_->alpha_period_ns;
  rate_due_ = now_ns + p_->rate_period_ns;
}

void DcqcnRate::increase() {
  const std::uint32_t f = p_->fast_recovery_steps;
  if (std::max(t_, bc_) <= f) {
    // Fast recovery: halfway back to the rate before the last cut.
  } else if (std::min(t_, bc_) > f) {
    rt_ += static_cast<double>(std::min(t_, bc_) - f) * p_->hai_rate_bps * scale();
  } else {
    rt_ += p_->ai_rate_bps * scale();
  }
  rc_ = (rt_ + rc_) / 2;
  bound_rates();
}

void DcqcnRate::on_sent(std::uint64_t bytes) {
  bytes_ += bytes;
  while (p_->byte_counter > 0 && bytes_ >= p_->byte_counter) {
    bytes_ -= p_->byte_counter;
    ++bc_;
    increase();
  }
}

void DcqcnRate::advance(std::uint64_t now_ns) {
  // The two timers do not depend on each other: each runs every period that
  // has passed. A QP that was quiet for a while catches up at once.
  if (alpha_due_ <= now_ns) {
    const std::uint64_t k = (now_ns - alpha_due_) / p_->alpha_period_ns + 1;
    alpha_ *= k == 1 ? 1 - p_->g : std::pow(1 - p_->g, static_cast<double>(k));
    alpha_due_ += k * p_->alpha_period_ns;
  }
  while (rate_due_ <= now_ns) {
    if (rc_ >= p_->line_rate_bps && rt_ >= p_->line_rate_bps) {
      // At line rate nothing can rise: only the step count moves on.
      const std::uint64_t k = (now_ns - rate_due_) / p_->rate_period_ns + 1;
      t_ += static_cast<std::uint32_t>(std::min<std::uint64_t>(k, 1u << 30));
      rate_due_ += k * p_->rate_period_ns;
      return;
    }
    ++t_;
    increase();
    rate_due_ += p_->rate_period_ns;
  }
}


std::string parse_dcqcn_params(const std::string& text, DcqcnParams& p) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    line = line.substr(0, line.find('#'));
    const auto eq = line.find('=');
    auto trim = [](std::string s) {
      const auto b = s.find_first_not_of(" \t\r");
      const auto e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    if (trim(line).empty()) continue;
    const std::string where = "line " + std::to_string(n) + ": ";
    if (eq == std::string::npos) return where + "expected 'name = value', got '" + trim(line) + "'";
    const std::string key = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || v < 0) return where + key + " takes a non-negative number, not '" + value + "'";
    const auto u64 = static_cast<std::uint64_t>(v);
    const auto u8 = static_cast<std::uint8_t>(std::min(v, 255.0));
    if (key == "enabled") p.enabled = v != 0;
    else if (key == "rp_line_rate_gbps") p.line_rate_bps = v * 1e9;
    else if (key == "rp_min_rate_mbps") p.min_rate_bps = v * 1e6;
    else if (key == "rp_g") p.g = v;
    else if (key == "rp_initial_alpha") p.initial_alpha = v;
    else if (key == "rp_alpha_period_us") p.alpha_period_ns = u64 * 1000;
    else if (key == "rp_rate_period_us") p.rate_period_ns = u64 * 1000;
    else if (key == "rp_byte_counter") p.byte_counter = u64;
    else if (key == "rp_fast_recovery_steps") p.fast_recovery_steps = static_cast<std::uint32_t>(u64);
    else if (key == "rp_ai_rate_mbps") p.ai_rate_bps = v * 1e6;
    else if (key == "rp_hai_rate_mbps") p.hai_rate_bps = v * 1e6;
    else if (key == "rp_increase_reference_gbps") p.increase_reference_bps = v * 1e9;
    else if (key == "rp_window_rtt_us") p.window_rtt_ns = static_cast<std::uint64_t>(v * 1000);
    else if (key == "rp_start_rate_percent") {
      if (v <= 0 || v > 100) return where + "rp_start_rate_percent is a share of the line rate: above 0, at most 100, not '" + value + "'";
      p.start_rate_fraction = v / 100;
    } else if (key == "rp_clamp_tgt_rate" || key == "rp_clamp_tgt_rate_after_time_inc") {
      if (v != 0 && v != 1) return where + key + " takes 0 or 1, not '" + value + "'";
      (key == "rp_clamp_tgt_rate" ? p.clamp_tgt_rate : p.clamp_tgt_rate_after_time_inc) = v != 0;
    } else if (key == "np_cnp_interval_us") p.cnp_interval_ns = u64 * 1000;
    else if (key == "np_cnp_dscp" && v <= 63) p.cnp_dscp = u8;
    else if (key == "np_cnp_priority" && v <= 7) p.cnp_priority = u8;
    else if (key == "data_ecn" && (v == 1 || v == 2)) p.data_ecn = u8;
    else return where + "unknown name or value out of range: " + key + " = " + value;
    if (p.g > 1 || p.initial_alpha > 1) return where + "rp_g and rp_initial_alpha are fractions between 0 and 1";
  }
  if (p.min_rate_bps > p.line_rate_bps) return "rp_min_rate_mbps is above rp_line_rate_gbps";
  return "";
}

}  // namespace uroce::cc
