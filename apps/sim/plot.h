// uroce-sim's plot: the flows' rates above (0 to the link rate, each line
// the mean over 0.5 ms), the bottleneck queue below (with Kmax, and the
// buffer when it is in range), with PFC the share of the senders' time
// paused below that, time along the bottom; a title and a legend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uroce::simapp {

struct PlotSpec {
  std::string title;
  double gbps = 10;             // the link rate: the rate axis's top
  std::uint64_t sample_us = 50; // one sample per this many microseconds
  std::uint64_t kmax_bytes = 0;
  std::uint64_t buffer_bytes = 0;
  std::string last_flow_name;   // the last flow's name in the legend (empty: "flow N")
};

// `rates[f]` holds flow f's rate per sample (b/s); `queue` the backlog per
// sample (bytes); `paused` the share of the senders' time paused per
// sample (0-1; empty: no pause strip). False with `err` if the PNG cannot
// be written.
bool draw_plot(const PlotSpec& spec, const std::vector<const std::vector<double>*>& rates,
               const std::vector<double>& queue, const std::vector<double>& paused, const std::string& path,
               std::string& err);

}  // namespace uroce::simapp
