// The metrics exporter's source (include/uroce/metrics.h): every device
// exposed to DPDK telemetry, with the same index as /uroce/*,DEV as its
// `port` label, so a series and a uroce-stat row name a device alike.
#pragma once

#include "uroce/metrics.h"

namespace uroce::device {

// Appends a DeviceSnapshot per exposed device to `snapshot`: its stats()
// and every QP, a page of kQpsPerCall QPs per read-only control call, so
// 10,000 QPs never hold the engines in one long call. For the exporter's
// thread; never on a worker or inside a control call.
void collect_exposed(metrics::Snapshot& snapshot);

inline constexpr std::size_t kQpsPerCall = 256;

}  // namespace uroce::device
