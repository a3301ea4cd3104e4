#include "cc/delay.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace uroce::cc {

double bdp_packets(const DelayPath& path) {
  const double bytes = path.line_rate_bps / 8 * static_cast<double>(path.base_rtt_ns) / 1e9;
  const double packets = path.packet_bytes == 0 ? 1 : std::ceil(bytes / path.packet_bytes);
  return std::max(packets, 1.0);
}

double target_delay_ns(const DelayParams& p, std::uint32_t hops, double cwnd) {
  const double alpha = static_cast<double>(p.fs_range_ns) / (1 / std::sqrt(p.fs_min_cwnd) - 1 / std::sqrt(p.fs_max_cwnd));
  const double beta = -alpha / std::sqrt(p.fs_max_cwnd);
  const double flow_scaling = std::clamp(alpha / std::sqrt(cwnd) + beta, 0.0, static_cast<double>(p.fs_range_ns));
  return static_cast<double>(p.base_target_ns) + hops * static_cast<double>(p.per_hop_ns) + flow_scaling;
}

std::uint32_t hops_from_ttl(std::uint8_t ttl) {
  const unsigned initial = ttl <= 64 ? 64 : ttl <= 128 ? 128 : 255;
  const unsigned hops = initial - ttl;
  return hops >= 1 && hops <= kMaxHops ? hops : 1;
}

void DelayWindow::reset(const DelayParams* params, const DelayPath& path) {
  p_ = params;
  hops_ = path.hops;
  max_cwnd_ = p_->max_cwnd > 0 ? p_->max_cwnd : bdp_packets(path);
  max_cwnd_ = std::max(max_cwnd_, p_->min_cwnd);
  cwnd_ = max_cwnd_;
  rtt_ns_ = path.base_rtt_ns;
  srtt_ns_ = 0;
  decreased_ = false;
  t_last_decrease_ = 0;
  round_start_ns_ = round_least_ns_ = 0;
  retx_ = 0;
  increases_ = decreases_ = held_ = timeouts_ = losses_ = resets_ = 0;
}

std::uint32_t DelayWindow::window_packets() const {
  // cwnd <= max_cwnd, a configured double: keep the conversion in range.
  const double w = std::floor(std::min(cwnd_, 4294967295.0));
  return w < 1 ? 1 : static_cast<std::uint32_t>(w);
}

std::uint64_t DelayWindow::pacing_gap_ns() const {
  if (cwnd_ >= 1) return 0;
  // Swift paces on the RTT. A host kept off its CPU for milliseconds made
  // that a gap of seconds at the floor (5 ms / 0.001), and the transfer
  // stopped: no gap is longer than the floor's on an RTT at the largest
  // target. (A cap on the RTT itself, the same for every QP, spread the
  // shares of a 64-to-1 incast: Jain 0.17 against 0.61.)
  const double largest_target = static_cast<double>(p_->base_target_ns) +
                                hops_ * static_cast<double>(p_->per_hop_ns) + static_cast<double>(p_->fs_range_ns);
  const double gap = std::min(static_cast<double>(rtt_ns_) / cwnd_, largest_target / p_->min_cwnd);
  return static_cast<std::uint64_t>(std::llround(gap));
}

bool DelayWindow::can_decrease(std::uint64_t now_ns) const {
  // A clock that went backwards (a sample from before the last decrease)
  // does not open a new round trip.
  return !decreased_ || (now_ns >= t_last_decrease_ && now_ns - t_last_decrease_ >= rtt_ns_);
}

void DelayWindow::clamp() { cwnd_ = std::clamp(cwnd_, p_->min_cwnd, max_cwnd_); }

void DelayWindow::decrease(std::uint64_t now_ns, double factor) {
  cwnd_ *= factor;
  clamp();
  decreased_ = true;
  t_last_decrease_ = now_ns;
  round_least_ns_ = 0;  // the next sample opens a round (the samples before it were answered)
  ++decreases_;
}

void DelayWindow::on_ack(std::uint64_t now_ns, std::uint32_t packets, std::uint64_t rtt_ns) {
  const double target = target_ns();
  // A round that has lasted a round trip without a decrease starts over;
  // the round trip here is the larger of the latest and the smoothed one
  // (with a host that comes and goes, one timely sample must not make the
  // next round a few us long and a late one alone in it).
  const auto round_ns = std::max(rtt_ns_, static_cast<std::uint64_t>(srtt_ns_));
  if (round_least_ns_ != 0 && (now_ns < round_start_ns_ || now_ns - round_start_ns_ >= round_ns)) {
    round_least_ns_ = 0;
  }
  if (round_least_ns_ == 0) round_start_ns_ = now_ns;
  round_least_ns_ = round_least_ns_ == 0 ? rtt_ns : std::min(round_least_ns_, rtt_ns);
  rtt_ns_ = rtt_ns;
  srtt_ns_ = srtt_ns_ == 0 ? static_cast<double>(rtt_ns)
                           : srtt_ns_ + p_->srtt_weight * (static_cast<double>(rtt_ns) - srtt_ns_);
  retx_ = 0;
  const double d = static_cast<double>(rtt_ns);
  const double m = p_->round_least ? static_cast<double>(round_least_ns_) : d;
  if (d < target) {
    cwnd_ += cwnd_ >= 1 ? p_->ai * packets / cwnd_ : p_->ai * packets;
    clamp();
    ++increases_;
  } else if (m >= target && can_decrease(now_ns)) {
    // m >= target > 0 here unless the target itself is 0 (base_target_ns
    // = 0 from code, not from a file): no excess then, no cut.
    const double excess = m > 0 ? (m - target) / m : 0;
    decrease(now_ns, std::max(1 - p_->beta_md * excess, 1 - p_->max_mdf));
  } else {
    ++held_;
  }
}

void DelayWindow::on_timeout(std::uint64_t now_ns) {
  ++timeouts_;
  ++retx_;
  if (retx_ >= p_->retx_reset_threshold) {
    ++resets_;
    decrease(now_ns, 0);  // clamps to min_cwnd
  } else if (can_decrease(now_ns)) {
    decrease(now_ns, 1 - p_->max_mdf);
  }
}

void DelayWindow::on_loss(std::uint64_t now_ns) {
  ++losses_;
  retx_ = 0;
  if (can_decrease(now_ns)) decrease(now_ns, 1 - p_->max_mdf);
}

// --- Parameters --------------------------------------------------------------

namespace {

// One row per name in conf/delay.conf: the range a value must be in (lo and
// hi, each open or closed), what the message calls that range, and where the
// value goes. A new parameter is a row.
struct ParamRow {
  const char* name;
  double lo;
  bool lo_open;
  double hi;
  bool hi_open;
  bool integer;
  const char* allowed;
  void (*set)(DelayParams&, double);
};

std::uint64_t ns_from_us(double us) { return static_cast<std::uint64_t>(std::llround(us * 1000)); }

constexpr double kHuge = 1e9;

const ParamRow kParamRows[] = {
    {"base_target_us", 0, true, 1e6, false, false, "above 0, at most 1000000",
     [](DelayParams& p, double v) { p.base_target_ns = ns_from_us(v); }},
    {"per_hop_us", 0, false, 1e6, false, false, "0 to 1000000",
     [](DelayParams& p, double v) { p.per_hop_ns = ns_from_us(v); }},
    {"fs_range_us", 0, false, 1e6, false, false, "0 to 1000000",
     [](DelayParams& p, double v) { p.fs_range_ns = ns_from_us(v); }},
    {"fs_min_cwnd", 0, true, kHuge, false, false, "above 0 (and below fs_max_cwnd)",
     [](DelayParams& p, double v) { p.fs_min_cwnd = v; }},
    {"fs_max_cwnd", 0, true, kHuge, false, false, "above 0 (and above fs_min_cwnd)",
     [](DelayParams& p, double v) { p.fs_max_cwnd = v; }},
    {"ai", 0, true, kHuge, false, false, "above 0 (packets per round trip)",
     [](DelayParams& p, double v) { p.ai = v; }},
    {"beta_md", 0, true, 1, false, false, "above 0, at most 1",
     [](DelayParams& p, double v) { p.beta_md = v; }},
    {"max_mdf", 0, true, 1, true, false, "above 0, below 1",
     [](DelayParams& p, double v) { p.max_mdf = v; }},
    {"min_cwnd", 0, true, kHuge, false, false, "above 0 (and at most max_cwnd)",
     [](DelayParams& p, double v) { p.min_cwnd = v; }},
    {"max_cwnd", 0, false, kHuge, false, false, "0 (the path's BDP) or at least min_cwnd",
     [](DelayParams& p, double v) { p.max_cwnd = v; }},
    {"retx_reset_threshold", 1, false, 1000, false, true, "a whole number from 1 to 1000",
     [](DelayParams& p, double v) { p.retx_reset_threshold = static_cast<std::uint32_t>(v); }},
    {"line_rate_gbps", 0, true, 1e4, false, false, "above 0, at most 10000",
     [](DelayParams& p, double v) { p.line_rate_bps = v * 1e9; }},
    {"base_rtt_us", 0, true, 1e6, false, false, "above 0, at most 1000000",
     [](DelayParams& p, double v) { p.base_rtt_ns = ns_from_us(v); }},
    {"srtt_weight", 0, true, 1, false, false, "above 0, at most 1",
     [](DelayParams& p, double v) { p.srtt_weight = v; }},
    {"round_least", 0, false, 1, false, true, "0 (Swift: each ACK's RTT) or 1 (the round trip's least)",
     [](DelayParams& p, double v) { p.round_least = v != 0; }},
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string names() {
  std::string all;
  for (const ParamRow& row : kParamRows) all += (all.empty() ? "" : ", ") + std::string(row.name);
  return all;
}

bool in_range(const ParamRow& row, double v) {
  if (row.lo_open ? v <= row.lo : v < row.lo) return false;
  if (row.hi_open ? v >= row.hi : v > row.hi) return false;
  return !row.integer || v == std::floor(v);
}

}  // namespace

std::string parse_delay_params(const std::string& text, DelayParams& p) {
  std::istringstream in(text);
  int n = 0;
  // The lines that set the pairs checked together at the end (0: not set
  // here, the value in `p` from before).
  int fs_line = 0;
  int cwnd_line = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::string where = "line " + std::to_string(n) + ": ";
    const auto eq = line.find('=');
    if (eq == std::string::npos) return where + "expected 'name = value', got '" + line + "'";
    const std::string key = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    const ParamRow* row = nullptr;
    for (const ParamRow& r : kParamRows) {
      if (key == r.name) row = &r;
    }
    if (row == nullptr) return where + "unknown name '" + key + "' (known: " + names() + ")";
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v)) return where + key + " takes a number, not '" + value + "'";
    if (!in_range(*row, v)) return where + key + " is " + row->allowed + ", not '" + value + "'";
    row->set(p, v);
    if (key == "fs_min_cwnd" || key == "fs_max_cwnd") fs_line = n;
    if (key == "min_cwnd" || key == "max_cwnd") cwnd_line = n;
  }
  auto at = [](int line) { return line > 0 ? "line " + std::to_string(line) + ": " : std::string(); };
  if (p.fs_min_cwnd >= p.fs_max_cwnd) return at(fs_line) + "fs_min_cwnd must be below fs_max_cwnd";
  if (p.max_cwnd != 0 && p.min_cwnd > p.max_cwnd) return at(cwnd_line) + "min_cwnd must be at most max_cwnd (or max_cwnd 0)";
  return "";
}

}  // namespace uroce::cc
