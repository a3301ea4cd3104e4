// A client of a DPDK process's telemetry socket (dpdk_telemetry.v2 in its
// runtime folder): one command, its JSON answer.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace uroce::test {

// The answer to `command` on the telemetry socket at `path`, or a line
// saying why there is none.
inline std::string telemetry_query(const std::string& path, const std::string& command) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) close(fd);
    return "cannot connect to " + path;
  }
  std::vector<char> buf(65536);
  std::string answer = "no answer";
  // The greeting first (version, pid, max_output_len), then the answer.
  if (read(fd, buf.data(), buf.size()) > 0 &&
      write(fd, command.data(), command.size()) == static_cast<ssize_t>(command.size())) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n > 0) answer.assign(buf.data(), static_cast<std::size_t>(n));
  }
  close(fd);
  return answer;
}

// The number after "name": in a telemetry answer, or -1 if it has none.
inline long telemetry_number(const std::string& json, const std::string& name) {
  const auto at = json.find("\"" + name + "\":");
  return at == std::string::npos ? -1L : std::atol(json.c_str() + at + name.size() + 3);
}

}  // namespace uroce::test
