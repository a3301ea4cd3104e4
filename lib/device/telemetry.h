// The stack's counters at run time through DPDK telemetry
// (dpdk-telemetry.py, or any client of the telemetry socket):
//   /uroce/devices            the devices exposed, by index
//   /uroce/engine,DEV         a device's engine counters and drops by reason
//                             (drop_icrc_mismatch, ...), summed over its
//                             engines ("engines": how many)
//   /uroce/port,DEV           its port counters (tx_zero_copy_frames,
//                             arp_requests_answered, ...), summed over its
//                             port queues ("queues": how many)
//   /uroce/qps,DEV            its QP numbers
//   /uroce/qp,DEV,QPN         one QP's counters and state, type, peer, outstanding WQEs
//   /uroce/qp_columns         the columns of a /uroce/qp_page row
//   /uroce/qp_page,DEV,FROM   the QPs numbered FROM or more, a row of numbers each, as
//                             many as fit one answer; "next": FROM of the next page
//   /uroce/gauges             the rows that are values now, not counts (cc_cwnd)
// Every counter of a list is reported, zero or not, under the name the
// stats registry gives it (uroce/stats.h, Context::stats()). Each answer is
// copied in one read-only control call (the engines held between two polls
// for the copy, a few microseconds), so its values are a consistent set;
// the handlers never touch a QP while an engine runs.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace uroce {
class Context;
}

namespace uroce::device {

// Makes `ctx` visible to telemetry under `name` until telemetry_hide(ctx).
// Registers the commands on first use. EAL must be running.
void telemetry_expose(Context* ctx, const std::string& name);
// Returns once no handler uses `ctx`: call it before `ctx` goes, and never
// from inside one of its control calls (a handler waiting for that call
// would never let go).
void telemetry_hide(Context* ctx);

// Calls `visit` with each exposed device: its telemetry index (the DEV of
// /uroce/*,DEV), its name and its context, under the lock that
// telemetry_hide() takes, so no device goes while it is visited. For a
// reader on a thread of its own (the metrics exporter); `visit` may make
// read-only control calls, but not expose or hide a device.
void telemetry_visit(const std::function<void(std::size_t index, const std::string& name, Context& ctx)>& visit);

}  // namespace uroce::device
