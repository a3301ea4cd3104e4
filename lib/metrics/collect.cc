#include <utility>

#include "uroce/metrics.h"
#include "uroce/verbs.h"

namespace uroce::metrics {

void collect(const Context& ctx, DeviceSnapshot& out, std::size_t qps_per_call) {
  out.device = ctx.stats();
  if (qps_per_call == 0) qps_per_call = 1;
  // Over what `out` held: its QPs' rows are reused, not made again.
  std::size_t n = 0;
  for (std::uint32_t from = 0;;) {
    const std::size_t got = ctx.qp_stats_page(from, qps_per_call, out.qps, n);
    n += got;
    if (got < qps_per_call) break;
    from = out.qps[n - 1].qp_num + 1;
    if (from == 0) break;  // the page ended at the largest QPN there is
  }
  out.qps.resize(n);
}

}  // namespace uroce::metrics
