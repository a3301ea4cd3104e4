// What the tests of uroce's librdmacm in one process share: the device on
// net_ring (frames to our own address come back in, so a client and a
// server of one process connect to each other through the CM), a deadline
// that fails a hung test instead of hanging the suite, ports apart from
// another copy's, and IPv4 socket addresses.
#pragma once

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>

namespace uroce::test {

inline constexpr std::array<std::uint8_t, 4> kRdmacmIp = {10, 0, 0, 1};

// Sets UROCE_EAL and UROCE_IP for this process's device, once, before the
// library's first call: net_ring, EAL file prefix `tag` and the pid.
inline void configure_net_ring(const std::string& tag) {
  static const bool once = [&tag] {
    const std::string eal = "--no-huge --no-shconf --no-pci -l 0 -m 256 --vdev=net_ring0 --file-prefix=" + tag +
                            std::to_string(getpid()) + " --log-level=lib.eal:error";
    setenv("UROCE_EAL", eal.c_str(), 1);
    setenv("UROCE_IP", "10.0.0.1/24", 1);
    return true;
  }();
  (void)once;
}

// A hung library must fail the test, not hang the suite: SIGALRM ends the
// process after `seconds`.
struct Deadline {
  explicit Deadline(unsigned seconds) { alarm(seconds); }
  ~Deadline() { alarm(0); }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
};

// This process's rdma_cm ports: one per test, apart from another copy's.
inline std::uint16_t next_port() {
  static std::uint16_t port = static_cast<std::uint16_t>(20000 + getpid() % 20000);
  return port++;
}

inline sockaddr_in ipv4(const std::array<std::uint8_t, 4>& ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  std::memcpy(&a.sin_addr, ip.data(), 4);
  a.sin_port = htons(port);
  return a;
}
// Our own address (kRdmacmIp), port `port`.
inline sockaddr_in ipv4(std::uint16_t port) { return ipv4(kRdmacmIp, port); }

inline sockaddr* sa(void* a) { return static_cast<sockaddr*>(a); }

}  // namespace uroce::test
