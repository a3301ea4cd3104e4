#include "device/metrics_source.h"

#include <string>
#include <utility>

#include "device/telemetry.h"

namespace uroce::device {

void collect_exposed(metrics::Snapshot& snapshot) {
  telemetry_visit([&snapshot](std::size_t index, const std::string&, Context& ctx) {
    metrics::DeviceSnapshot d;
    d.port = std::to_string(index);
    metrics::collect(ctx, d);
    snapshot.devices.push_back(std::move(d));
  });
}

}  // namespace uroce::device
