#include "plot/axis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace uroce::plotapp {
namespace {

std::string format(const char* fmt, double v) {
  char b[32];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// 12500 as "12.5K", 2e6 as "2M"; below 10000 as it is ("5000", "0.25").
std::string short_number(double v) {
  const double a = std::fabs(v);
  if (a >= 1e12) return format("%gT", v / 1e12);
  if (a >= 1e9) return format("%gG", v / 1e9);
  if (a >= 1e6) return format("%gM", v / 1e6);
  if (a >= 1e4) return format("%gK", v / 1e3);
  return format("%g", v);
}

// 2^e counted in K = 1024, as sizes are: 64, 1K, 64K, 1M.
std::string power_of_two_label(int e) {
  if (e < 0) return format("%g", std::ldexp(1.0, e));
  static const char* const kSuffix[] = {"", "K", "M", "G", "T", "P"};
  const int unit = std::min(e / 10, 5);
  return format("%.0f", std::ldexp(1.0, e - unit * 10)) + kSuffix[unit];
}

}  // namespace

Axis Axis::fit(double lo, double hi, bool log, bool from_zero, bool powers_of_two, int length, int label_gap) {
  Axis a;
  a.log_ = log;
  const int max_labels = std::clamp(length / std::max(label_gap, 1) + 1, 2, 10);
  if (log) {
    a.log_ticks(lo, hi, max_labels, powers_of_two);
  } else {
    if (from_zero) {
      lo = std::min(lo, 0.0);
      hi = std::max(hi, 0.0);
    }
    a.linear_ticks(lo, hi, max_labels);
  }
  return a;
}

double Axis::fraction(double v) const {
  const double p = log_ ? std::log10(v) : v;
  return (p - lo_) / (hi_ - lo_);
}

void Axis::linear_ticks(double lo, double hi, int max_labels) {
  if (hi - lo <= 1e-12 * std::max(std::fabs(lo), std::fabs(hi))) {
    // One value: an axis around it.
    const double pad = lo == 0 ? 1 : std::fabs(lo) / 2;
    lo -= pad;
    hi += pad;
  }
  // The smallest step of 1, 2 or 5 times a power of ten that needs no more
  // than max_labels ticks once the ends are rounded out to it.
  double step = std::pow(10, std::floor(std::log10((hi - lo) / max_labels)));
  for (int i = 0;; i = (i + 1) % 3) {
    const double s = step * (i == 0 ? 1 : i == 1 ? 2 : 5);
    if (std::ceil(hi / s - 1e-9) - std::floor(lo / s + 1e-9) + 1 <= max_labels || s > (hi - lo) * 2) {
      step = s;
      break;
    }
    if (i == 2) step *= 10;
  }
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  lo_ = first * step;
  hi_ = last * step;
  // Labels in the unit of the largest end, with the decimals the step needs.
  const double top = std::max(std::fabs(lo_), std::fabs(hi_));
  const double unit = top >= 1e9 ? 1e9 : top >= 1e6 ? 1e6 : top >= 1e4 ? 1e3 : 1;
  const char* suffix = unit == 1e9 ? "G" : unit == 1e6 ? "M" : unit == 1e3 ? "K" : "";
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step / unit) + 1e-9)));
  for (double i = first; i <= last + 0.5; ++i) {
    const double v = i * step;
    char b[48];
    std::snprintf(b, sizeof b, "%.*f%s", decimals, std::fabs(v) < step / 2 ? 0.0 : v / unit, v == 0 ? "" : suffix);
    ticks_.push_back({v, b});
  }
}

void Axis::log_ticks(double lo, double hi, int max_labels, bool powers_of_two) {
  const double base = powers_of_two ? 2 : 10;
  const int e_lo = static_cast<int>(std::floor(std::log(lo) / std::log(base) + 1e-9));
  int e_hi = static_cast<int>(std::ceil(std::log(hi) / std::log(base) - 1e-9));
  if (e_hi == e_lo) ++e_hi;
  lo_ = e_lo * std::log10(base);
  hi_ = e_hi * std::log10(base);
  // Every k-th power gets a label, k the smallest that fits; the others
  // stay as minor ticks.
  auto labelled = [](int e, int k) { return ((e % k) + k) % k == 0; };
  int k = 1;
  for (int c : {1, 2, 3, 5, 10, 20, 50, 100}) {
    k = c;
    int n = 0;
    for (int e = e_lo; e <= e_hi; ++e) n += labelled(e, k);
    if (n <= max_labels) break;
  }
  const int spans = e_hi - e_lo;
  for (int e = e_lo; e <= e_hi; ++e) {
    const bool major = labelled(e, k);
    if (powers_of_two) {
      if (major || spans <= 64) ticks_.push_back({std::ldexp(1.0, e), major ? power_of_two_label(e) : ""});
      continue;
    }
    const double v = std::pow(10.0, e);
    if (major || spans <= 12) ticks_.push_back({v, major ? short_number(v) : ""});
    if (e == e_hi || spans > 12) continue;
    // 2..9 times the decade as minor ticks; within two decades 2 and 5
    // get labels too, else such an axis would read "1, 10, 100" only.
    for (int m = 2; m <= 9; ++m) {
      const bool label = spans <= 2 && k == 1 && (m == 2 || m == 5) && 3 * spans + 1 <= max_labels;
      ticks_.push_back({m * v, label ? short_number(m * v) : ""});
    }
  }
}

}  // namespace uroce::plotapp
