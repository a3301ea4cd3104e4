// One connection to a DPDK process's telemetry socket (dpdk_telemetry.v2,
// SOCK_SEQPACKET): on connecting the server sends a greeting (version, pid,
// max_output_len), then answers each command with one JSON object whose one
// key is the command's name. The other end may be anything: every wait is
// bounded, every answer's size capped and its shape checked, and each
// failure is a Failure whose message is one line saying how to fix it.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>

#include "stat/json.h"

namespace uroce::statview {

// Why uroce-stat cannot go on: one line, for stderr (exit 1).
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Ctrl-C (or SIGTERM) arrived while waiting: the caller exits 0.
struct Interrupted {};

// Set by the signal handler main installs (async-signal-safe); waits give
// up when it is.
void request_stop();
bool stop_requested();

class TelemetrySocket {
 public:
  // How long one connection or answer may take, unless told (--timeout).
  static constexpr std::chrono::milliseconds kDefaultTimeout{2000};
  // The largest answer taken: DPDK 22.11 sends at most 16 KiB.
  static constexpr std::size_t kMaxAnswer = 64 * 1024;

  explicit TelemetrySocket(std::chrono::milliseconds timeout = kDefaultTimeout) : timeout_(timeout) {}
  ~TelemetrySocket();
  TelemetrySocket(const TelemetrySocket&) = delete;
  TelemetrySocket& operator=(const TelemetrySocket&) = delete;

  // Connects to the socket at `path` and reads its greeting and command
  // list; throws Failure if it is not DPDK telemetry or does not answer.
  void open(const std::string& path);
  // `command`'s answer (the value under the command's name; null when
  // the command failed or is unknown). Throws Failure.
  Json query(const std::string& command);
  // Whether the process registered `command` ("/uroce/qp_page").
  bool has_command(const std::string& command) const { return commands_.count(command) != 0; }

  const std::string& path() const { return path_; }
  long pid() const { return pid_; }
  const std::string& version() const { return version_; }

 private:
  // Waits for one message and returns it; `what` names it in errors.
  std::string receive(const std::string& what);
  [[noreturn]] void fail(const std::string& why) const;
  std::string timeout_text() const;  // "2 s"

  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  std::string path_;
  long pid_ = 0;
  std::string version_;
  std::set<std::string> commands_;
};

// The name of the process with id `pid` (/proc/PID/comm), "" if none.
std::string process_name(long pid);

}  // namespace uroce::statview
