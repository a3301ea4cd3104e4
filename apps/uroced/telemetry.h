// uroced's own DPDK telemetry: /uroced/clients lists the clients (beside
// the device's /uroce/* commands, lib/device/telemetry.h).
#pragma once

#include "service_daemon/server.h"

namespace uroce::daemon {

// Answers /uroced/clients from `server`'s published table until
// telemetry_hide_clients(). EAL must be running.
void telemetry_expose_clients(const Server* server);
void telemetry_hide_clients();

}  // namespace uroce::daemon
