// The stack's counters at run time through DPDK telemetry
// (dpdk-telemetry.py, or any client of the telemetry socket):
//   /uroce/devices            the devices exposed, by index
//   /uroce/engine,DEV         a device's engine counters and drops by reason
//   /uroce/qps,DEV            its QP numbers
//   /uroce/qp,DEV,QPN         one QP's counters and state
// The counters are read while the worker updates them: each value is a
// snapshot, not a consistent set.
#pragma once

#include <string>

namespace uroce {
class Context;
}

namespace uroce::dpdk {

// Makes `ctx` visible to telemetry under `name` until telemetry_hide(ctx).
// Registers the commands on first use. EAL must be running.
void telemetry_expose(Context* ctx, const std::string& name);
void telemetry_hide(Context* ctx);

}  // namespace uroce::dpdk
