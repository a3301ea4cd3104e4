// The metrics exporter's source (include/uroce/metrics.h): every device
// exposed to DPDK telemetry, with the same index as /uroce/*,DEV as its
// `port` label, so a series and a uroce-stat row name a device alike.
#pragma once

#include "uroce/metrics.h"

namespace uroce::device {

// Makes `snapshot.devices` a DeviceSnapshot per exposed device
// (metrics::collect: its rows and every QP, a page per control call),
// written over what it held. For the exporter's thread; never on a worker
// or inside a control call.
void collect_exposed(metrics::Snapshot& snapshot);

}  // namespace uroce::device
