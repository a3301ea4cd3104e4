#include "common/oob.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace uroce::oob {
namespace {

// With an idle callback the wait spins (a poll-mode stack runs its engine in
// `idle` and must not sleep between runs), looking at the socket only every
// so many runs: a server that serves a transfer while it waits for the
// client's "done" spent ~40% of its core in poll() when it looked each time.
// Without a callback it sleeps in poll().
bool wait_readable(int fd, const std::function<void()>& idle) {
  constexpr int kIdleRunsPerLook = 256;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, idle ? 0 : 100);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
    for (int i = 0; idle && i < kIdleRunsPerLook; ++i) idle();
  }
}

}  // namespace

int connect_to(const std::string& host, std::uint16_t port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    error = "cannot resolve " + host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) error = "couldn't connect to " + host + ":" + std::to_string(port) + " (is the server running?)";
  return fd;
}

int accept_one(std::uint16_t port, std::string& error, const std::function<void()>& idle) {
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(ls, 1) != 0) {
    error = "couldn't listen on TCP port " + std::to_string(port) + ": " + std::strerror(errno);
    close(ls);
    return -1;
  }
  const int fd = wait_readable(ls, idle) ? accept(ls, nullptr, nullptr) : -1;
  close(ls);
  if (fd < 0) error = std::string("accept failed: ") + std::strerror(errno);
  return fd;
}

bool read_full(int fd, char* buf, std::size_t n, const std::function<void()>& idle) {
  std::size_t got = 0;
  while (got < n) {
    if (!wait_readable(fd, idle)) return false;
    const ssize_t r = read(fd, buf + got, n - got);
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

bool part(int fd) {
  (void)send(fd, "bye", 4, MSG_NOSIGNAL);
  char bye[4];
  const bool heard = read_full(fd, bye, sizeof bye, nullptr);
  close(fd);
  return heard;
}

bool write_full(int fd, const char* buf, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = write(fd, buf + done, n - done);
    if (r <= 0) return false;
    done += static_cast<std::size_t>(r);
  }
  return true;
}

std::string gid_to_hex(const ibv_gid& gid) {
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", gid.raw[i]);
  return hex;
}

bool gid_from_hex(const char* hex, ibv_gid& gid) {
  for (int i = 0; i < 16; ++i) {
    unsigned byte = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &byte) != 1) return false;
    gid.raw[i] = static_cast<std::uint8_t>(byte);
  }
  return true;
}

}  // namespace uroce::oob
