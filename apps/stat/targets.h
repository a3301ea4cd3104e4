// Finding the process to watch: DPDK makes its telemetry socket in the
// runtime folder of the process's file prefix (/var/run/dpdk/PREFIX for
// root, $XDG_RUNTIME_DIR/dpdk/PREFIX or /tmp/dpdk/PREFIX for other users);
// uroced links `<its socket>.telemetry` to its own.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace uroce::statview {

// The folders DPDK makes runtime folders in, this user's first.
std::vector<std::string> runtime_roots();

// The telemetry socket of file prefix `prefix`; throws Failure (suggesting
// --list) when no runtime folder has one.
std::string socket_of_prefix(const std::string& prefix);

// The telemetry socket `path` names: uroced's service socket (its
// PATH.telemetry link), or a telemetry socket itself. Throws Failure.
std::string socket_of_path(const std::string& path);

// One telemetry socket found under the runtime folders, for --list.
struct Target {
  std::string prefix;
  std::string socket;
  bool running = false;  // something answered as DPDK telemetry
  std::string problem;   // when not running: why ("not running", ...)
  long pid = 0;
  std::string process;  // /proc/PID/comm
  int uroce_devices = -1;  // -1: no /uroce/devices command (not a uroce process)
  bool uroced = false;     // answers /uroced/clients
};

// Every telemetry socket under runtime_roots(), each one asked what it is
// (waiting at most `timeout` for each answer).
std::vector<Target> list_targets(std::chrono::milliseconds timeout);

// --list's table, or (json) one JSON object {"targets": [...]}.
std::string format_targets(const std::vector<Target>& targets, bool json);

}  // namespace uroce::statview
