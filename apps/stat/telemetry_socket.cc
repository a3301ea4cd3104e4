#include "stat/telemetry_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

namespace uroce::statview {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;

// Waits until `fd` has `events` or `deadline` passes: false on the
// deadline. A signal that asks to stop ends the wait with Interrupted.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
    if (stop_requested()) throw Interrupted{};
  }
}

}  // namespace

void request_stop() { g_stop = 1; }
bool stop_requested() { return g_stop != 0; }

TelemetrySocket::~TelemetrySocket() {
  if (fd_ >= 0) close(fd_);
}

void TelemetrySocket::fail(const std::string& why) const { throw Failure(path_ + ": " + why); }

std::string TelemetrySocket::timeout_text() const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(timeout_.count()) / 1000);
  return buf;
}

void TelemetrySocket::open(const std::string& path) {
  path_ = path;
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == EACCES) fail("permission denied: run as root or as the user that runs the process");
    fail(std::string("cannot reach it (") + std::strerror(errno) + "): is the process running? (uroce-stat --list)");
  }
  if (!S_ISSOCK(st.st_mode)) fail("not a socket: give a DPDK telemetry socket (dpdk_telemetry.v2) or uroced's socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) fail("the path is longer than a socket's path may be (107 bytes)");
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) fail(std::string("cannot make a socket: ") + std::strerror(errno));
  const auto deadline = Clock::now() + timeout_;
  if (connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    if (e == ECONNREFUSED) fail("nothing listens on it: the process that made it has ended (a stale socket; see uroce-stat --list)");
    if (e == EACCES || e == EPERM) fail("permission denied: run as root or as the user that runs the process");
    if (e == EPROTOTYPE) fail("not a DPDK telemetry socket (it is not SOCK_SEQPACKET)");
    if (e == EAGAIN) fail("the process accepts no connection now (its backlog is full): try again");
    if (e != EINPROGRESS) fail(std::string("cannot connect: ") + std::strerror(e));
    if (!wait_for(fd_, POLLOUT, deadline)) fail("the connection was not accepted within " + timeout_text());
  }

  Json greeting;
  const std::string text = receive("greeting");
  if (const std::string err = parse_json(text, greeting); !err.empty()) {
    fail("its greeting is not JSON (" + err + "): not a DPDK telemetry socket");
  }
  const Json* version = greeting.find("version");
  const Json* pid = greeting.find("pid");
  if (version == nullptr || !version->is_string() || pid == nullptr || !pid->integer ||
      !greeting.unsigned_member("max_output_len")) {
    fail("its greeting lacks DPDK telemetry's version, pid and max_output_len: not a DPDK telemetry socket");
  }
  version_ = version->text;
  pid_ = static_cast<long>(*pid->integer);
  // The command list tells a command that is missing from one that failed
  // (both answer null).
  const Json list = query("/");
  if (!list.is_array()) fail("its command list ('/') is not an array: not DPDK telemetry, or a broken one");
  for (const Json& c : list.items) {
    if (c.is_string()) commands_.insert(c.text);
  }
}

std::string TelemetrySocket::receive(const std::string& what) {
  if (!wait_for(fd_, POLLIN, Clock::now() + timeout_)) {
    fail("no " + what + " within " + timeout_text() +
         ": not DPDK telemetry, or the process is stuck (or too busy: --timeout gives it longer)");
  }
  std::vector<char> buf(kMaxAnswer + 1);
  const ssize_t n = recv(fd_, buf.data(), buf.size(), MSG_TRUNC);
  if (n < 0) fail(std::string("cannot read its ") + what + ": " + std::strerror(errno));
  if (n == 0) {
    fail(std::string("it closed the connection instead of its ") + what +
         ": the process ended, or it has 10 telemetry clients already");
  }
  if (static_cast<std::size_t>(n) > kMaxAnswer) {
    fail(std::string("its ") + what + " of " + std::to_string(n) + " bytes passes the " +
         std::to_string(kMaxAnswer / 1024) + " KiB limit: not DPDK telemetry as uroce-stat knows it");
  }
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

Json TelemetrySocket::query(const std::string& command) {
  if (send(fd_, command.data(), command.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(command.size())) {
    fail("cannot send to it (" + std::string(std::strerror(errno)) + "): the process has ended?");
  }
  const std::string text = receive("answer to " + command);
  Json answer;
  if (const std::string err = parse_json(text, answer); !err.empty()) {
    fail("its answer to " + command + " is not JSON (" + err + ")");
  }
  const std::string name = command.substr(0, command.find(','));
  if (!answer.is_object() || answer.keys.size() != 1 || answer.keys[0] != name) {
    fail("its answer to " + command + " is not one object named after the command: not DPDK telemetry");
  }
  return std::move(answer.items[0]);
}

std::string process_name(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace uroce::statview
