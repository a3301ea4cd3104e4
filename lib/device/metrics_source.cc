#include "device/metrics_source.h"

#include <string>
#include <utility>

#include "device/telemetry.h"
#include "uroce/verbs.h"

namespace uroce::device {

void collect_exposed(metrics::Snapshot& snapshot) {
  telemetry_visit([&snapshot](std::size_t index, const std::string&, Context& ctx) {
    metrics::DeviceSnapshot d;
    d.port = std::to_string(index);
    d.device = ctx.stats();
    for (std::uint32_t from = 0;;) {
      std::vector<QpStats> page = ctx.qp_stats_page(from, kQpsPerCall);
      for (QpStats& q : page) d.qps.push_back(std::move(q));
      if (page.size() < kQpsPerCall) break;
      from = d.qps.back().qp_num + 1;
      if (from == 0) break;  // the last QPN there is
    }
    snapshot.devices.push_back(std::move(d));
  });
}

}  // namespace uroce::device
