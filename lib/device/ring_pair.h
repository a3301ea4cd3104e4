// Two devices on two DPDK ports joined back to back by net_ring, in one
// process, stepped from one thread: real ethdev bursts and mbufs, no NIC, no
// hugepages. EAL must be running.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpdk/port_io.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"

namespace uroce::device {

class RingPair {
 public:
  // nullptr and `error` if the ports or devices cannot be set up. With
  // `queues` queue pairs per port (one engine each), queue i of one port
  // sends to queue i of the other.
  // `dcqcn`: congestion control on both devices (nullptr: off); not owned.
  // `pfc_priority`: both devices' lossless priority (-1 none), as
  // Device::open takes it (net_ring has no PFC: one warning per port).
  // `delay_cc`: delay-based congestion control instead of dcqcn (nullptr: off).
  static std::unique_ptr<RingPair> create(const std::string& name, std::string& error, std::uint16_t queues = 1,
                                          const cc::DcqcnParams* dcqcn = nullptr, int pfc_priority = -1,
                                          const cc::DelayParams* delay_cc = nullptr);
  ~RingPair();

  int connect(QueuePair* qa, QueuePair* qb, const ConnectParams& p = {});
  // Both engines poll once. True (real time always moves on).
  bool step();
  template <typename Done>
  bool run_until(Done done, std::uint64_t limit_ns = 10'000'000'000ull) {
    const auto start = std::chrono::steady_clock::now();
    while (!done()) {
      if (static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
              std::chrono::steady_clock::now() - start).count()) > limit_ns) {
        return false;
      }
      step();
    }
    return true;
  }
  std::uint64_t frames_sent() const;

  std::unique_ptr<dpdk::Port> port_a;
  std::unique_ptr<dpdk::Port> port_b;
  std::vector<std::unique_ptr<dpdk::PortIo>> queues_a;
  std::vector<std::unique_ptr<dpdk::PortIo>> queues_b;
  dpdk::PortIo* io_a = nullptr;  // queue 0 of each
  dpdk::PortIo* io_b = nullptr;
  dpdk::TscClock clock;
  std::unique_ptr<Context> a;
  std::unique_ptr<Context> b;

 private:
  RingPair() = default;
};

}  // namespace uroce::device
