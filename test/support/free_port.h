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

}  // namespace uroce::test
