// Resolves a GID on a DPDK port queue the test thread owns: asks
// (PacketIo::resolve never waits), then polls the queue, which sends the
// request and takes the answer in, re-asking every 200 ms, for a second at
// most. What Context::resolve_gid and its waiters do, for tests that drive
// a PortIo without a Context.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

#include "dpdk/port_io.h"

namespace uroce::test {

inline bool resolve_on(dpdk::PortIo& io, const ibv_gid& gid, std::uint8_t mac[6]) {
  const auto start = std::chrono::steady_clock::now();
  auto asked = start - std::chrono::seconds(1);
  std::array<engine::RxFrame, 32> frames;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    const bool ask = now - asked >= std::chrono::milliseconds(200);
    if (ask) asked = now;
    if (io.resolve(gid, mac, ask) == PacketIo::Resolution::kKnown) return true;
    if (now - start > std::chrono::seconds(1)) {
      io.abandon(gid);
      return false;
    }
    io.rx_release(frames.data(), io.rx_burst(frames.data(), 32));
  }
}

}  // namespace uroce::test
