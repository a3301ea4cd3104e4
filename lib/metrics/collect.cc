#include <utility>

#include "uroce/metrics.h"
#include "uroce/verbs.h"

namespace uroce::metrics {

void collect(const Context& ctx, DeviceSnapshot& out, std::size_t qps_per_call) {
  out.device = ctx.stats();
  out.qps.clear();
  if (qps_per_call == 0) qps_per_call = 1;
  for (std::uint32_t from = 0;;) {
    std::vector<QpStats> page = ctx.qp_stats_page(from, qps_per_call);
    for (QpStats& q : page) out.qps.push_back(std::move(q));
    if (page.size() < qps_per_call) break;
    from = out.qps.back().qp_num + 1;
    if (from == 0) break;  // the page ended at the largest QPN there is
  }
}

}  // namespace uroce::metrics
