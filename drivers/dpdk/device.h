// A device (uroce::Context) on a DPDK port: the port, its packet I/O on
// queue 0 owning an IPv4 address, the TSC clock, regions on hugepages when
// EAL runs on them, and the counters exposed to telemetry. What the tools
// open; EAL must be running.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "dpdk/port_io.h"
#include "uroce/verbs.h"

namespace uroce::dpdk {

struct Device {
  // nullptr and a one-line `error` if there is no such port or it cannot
  // start. `name` is the device's name in telemetry.
  static std::unique_ptr<Device> open(std::uint16_t port_id, const std::array<std::uint8_t, 4>& ip,
                                      const std::string& name, std::string& error);
  ~Device();

  std::unique_ptr<Port> port;
  std::unique_ptr<PortIo> io;
  TscClock clock;
  std::unique_ptr<Context> ctx;
};

// The uroce::PortConfig of a device on `io`: its MAC, GID, and region pages.
uroce::PortConfig device_config(PortIo& io, engine::Clock& clock);

}  // namespace uroce::dpdk
