// One axis of a chart: the range it shows, where a value falls on it, and
// its ticks and their labels.
#pragma once

#include <string>
#include <vector>

namespace uroce::plotapp {

struct Tick {
  double value;
  std::string label;  // empty for a minor tick (grid line only)
};

class Axis {
 public:
  // An axis showing `lo`..`hi` (the data's extremes, both > 0 when `log`)
  // with labels at least `label_gap` pixels apart along `length` pixels.
  // A linear axis grows to the next round steps, down to 0 when `from_zero`
  // and the data are all positive. A log axis grows to whole decades, or to
  // powers of two when `powers_of_two` (message sizes, QP counts), whose
  // labels then count in K = 1024.
  static Axis fit(double lo, double hi, bool log, bool from_zero, bool powers_of_two, int length, int label_gap);

  // Where `v` falls: 0 at the low end, 1 at the high end.
  double fraction(double v) const;
  const std::vector<Tick>& ticks() const { return ticks_; }

 private:
  void linear_ticks(double lo, double hi, int max_labels);
  void log_ticks(double lo, double hi, int max_labels, bool powers_of_two);

  bool log_ = false;
  double lo_ = 0, hi_ = 1;  // the ends, as log10 on a log axis
  std::vector<Tick> ticks_;
};

}  // namespace uroce::plotapp
