#include "device/metrics_source.h"

#include <string>
#include <utility>

#include "device/telemetry.h"

namespace uroce::device {

void collect_exposed(metrics::Snapshot& snapshot) {
  // Over the devices the last collection left (the exporter hands its
  // snapshot back): their QPs' memory is reused.
  std::size_t n = 0;
  telemetry_visit([&snapshot, &n](std::size_t index, const std::string&, Context& ctx) {
    if (snapshot.devices.size() <= n) snapshot.devices.emplace_back();
    metrics::DeviceSnapshot& d = snapshot.devices[n++];
    d.port = std::to_string(index);
    d.qp_labels.clear();
    metrics::collect(ctx, d);
  });
  snapshot.devices.resize(n);
}

}  // namespace uroce::device
