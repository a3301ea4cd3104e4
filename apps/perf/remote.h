// uroce-perf between two processes, each with its own DPDK port: a server
// that waits for a client, perftest-style (exchange.h: the TCP exchange
// carries the test, QPN and PSN of each QP, rkey, buffer address and GID of
// each side).
#pragma once

#include "perf/options.h"

namespace uroce::perf {

// Runs one side (the server when o.server is empty) on DPDK port
// o.port_id; EAL must be running. Returns the process exit status: 0 ok,
// 1 a set-up, transfer or verification failure, 2 the peer runs another test.
int run_remote(const Options& o);

}  // namespace uroce::perf
