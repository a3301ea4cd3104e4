// uroced's own DPDK telemetry: /uroced/clients lists the clients (beside
// the device's /uroce/* commands, lib/device/telemetry.h).
#pragma once

#include <string>

#include "service_daemon/server.h"

namespace uroce::daemon {

// Answers /uroced/clients from `server`'s published table until
// telemetry_hide_clients(). EAL must be running.
void telemetry_expose_clients(const Server* server);
void telemetry_hide_clients();

// Points `<socket>.telemetry` at this process's DPDK telemetry socket, so
// that uroce-stat --socket SOCKET finds the daemon's counters from the
// path its clients know; telemetry_unlink() removes it. Nothing when EAL
// runs without telemetry. A failure is logged, not fatal.
void telemetry_link(const std::string& socket);
void telemetry_unlink(const std::string& socket);

}  // namespace uroce::daemon
