// A TCP port nobody listens on now, for a pair of programs' side channel
// (ibv_rc_pingpong -p, perftest -p, rping -p): the kernel picks it, so two
// copies of the suite, or a program of someone else's, never collide with a
// fixed number. The port is free when this returns; the pair binds it a
// moment later (the kernel hands out ephemeral ports in turn, not at once
// again).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace uroce::test {

inline int free_tcp_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// A TCP port on loopback held listening by this test, so that a program
// told to listen there finds it in use; freed when it goes. port 0 if none
// could be had.
struct TakenTcpPort {
  TakenTcpPort() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd, 1) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
  }
  ~TakenTcpPort() {
    if (fd >= 0) close(fd);
  }
  TakenTcpPort(const TakenTcpPort&) = delete;
  TakenTcpPort& operator=(const TakenTcpPort&) = delete;
  int fd = -1;
  int port = 0;
};

// Whether a socket listens on TCP `port` in the network namespace that
// `prefix` runs commands in ("" for this one, "ip netns exec NS " for
// another): /proc/net/tcp and tcp6, where state 0A is LISTEN.
inline bool tcp_port_listening(int port, const std::string& prefix = "") {
  char hex[8];
  std::snprintf(hex, sizeof hex, ":%04X", port);
  std::string table;
  if (FILE* p = popen((prefix + "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null").c_str(), "r")) {
    std::array<char, 4096> buf;
    for (std::size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) table.append(buf.data(), n);
    pclose(p);
  }
  // A row: "sl local_address rem_address st ...", local "ADDR:PORT".
  for (std::size_t at = 0; (at = table.find(std::string(hex) + " ", at)) != std::string::npos; ++at) {
    const std::size_t st = table.find(' ', table.find(' ', at + 1) + 1);
    if (st != std::string::npos && table.compare(st + 1, 2, "0A") == 0) return true;
  }
  return false;
}

// Waits until a server listens on `port` (see above), up to `limit`: a
// client started then finds it, however slowly the machine started it.
// False if it never did.
inline bool wait_tcp_listening(int port, const std::string& prefix = "",
                               std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!tcp_port_listening(port, prefix)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace uroce::test
