// What the tests of uroce's librdmacm in one process share: the device on
// net_ring (frames to our own address come back in, so a client and a
// server of one process connect to each other through the CM), a deadline
// that fails a hung test instead of hanging the suite, ports apart from
// another copy's, IPv4 socket addresses, and the next CM event, copied.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

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

// A CM event as the tests look at it: copied, so the event can be
// acknowledged at once. `type` is -1 when none came.
struct CmEvent {
  int type = -1;
  int status = 0;
  rdma_cm_id* id = nullptr;
  rdma_conn_param conn{};  // RC/UC events (private_data cleared: see `data`)
  rdma_ud_param ud{};      // UD (SIDR) events, likewise
  std::string data;        // the private data, up to its first NUL
  // rdma_event_str's name of the type, or "no event".
  const char* name() const {
    return type < 0 ? "no event" : rdma_event_str(static_cast<rdma_cm_event_type>(type));
  }
};

// The next event on `ch` within `timeout_ms` (-1: as long as it takes),
// acknowledged.
inline CmEvent next_cm_event(rdma_event_channel* ch, int timeout_ms = 60000) {
  CmEvent g;
  pollfd p{ch->fd, POLLIN, 0};
  if (timeout_ms >= 0 && poll(&p, 1, timeout_ms) != 1) return g;
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e) != 0) return g;
  g.type = e->event;
  g.status = e->status;
  g.id = e->id;
  const bool ud = e->id != nullptr && e->id->ps == RDMA_PS_UDP;
  const void* data = ud ? e->param.ud.private_data : e->param.conn.private_data;
  const std::size_t len = ud ? e->param.ud.private_data_len : e->param.conn.private_data_len;
  if (data != nullptr) {
    const auto* c = static_cast<const char*>(data);
    g.data.assign(c, strnlen(c, len));
  }
  if (ud) {
    g.ud = e->param.ud;
    g.ud.private_data = nullptr;
  } else {
    g.conn = e->param.conn;
    g.conn.private_data = nullptr;
  }
  rdma_ack_cm_event(e);
  return g;
}

}  // namespace uroce::test
