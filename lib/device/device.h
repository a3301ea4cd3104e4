// A device (uroce::Context) on a DPDK port: the port, its packet I/O on one
// queue per engine owning an IPv4 address, the TSC clock, regions on
// hugepages when EAL runs on them, and the counters exposed to telemetry.
// What the tools open; EAL must be running.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpdk/port_io.h"
#include "uroce/verbs.h"

namespace uroce::device {

// How a device is set up beyond its port and address.
struct DeviceOptions {
  std::uint16_t queues = 1;  // port queues, one engine each
  // Congestion control (nullptr: off); not owned.
  const cc::DcqcnParams* dcqcn = nullptr;
  // Delay-based congestion control instead (nullptr: off); not owned.
  const cc::DelayParams* delay_cc = nullptr;
  // The lossless 802.1p priority (0-7; -1 none): PFC enabled on the port
  // for it where the driver can (one warning where it cannot), and the
  // device's default traffic class (uroce::PortConfig).
  int pfc_priority = -1;
  // A floor under every QP's local ACK timeout (uroce::PortConfig; 0 none).
  std::uint8_t min_ack_timeout = 0;
};

struct Device {
  // nullptr and a one-line `error` if there is no such port or it cannot
  // start (or has fewer than options.queues queue pairs). `name` is the
  // device's name in telemetry. One engine per queue.
  static std::unique_ptr<Device> open(std::uint16_t port_id, const std::array<std::uint8_t, 4>& ip,
                                      const std::string& name, std::string& error,
                                      const DeviceOptions& options = {});
  ~Device();

  std::unique_ptr<dpdk::Port> port;
  std::vector<std::unique_ptr<dpdk::PortIo>> queues;
  dpdk::PortIo* io = nullptr;  // queue 0: ARP, neighbour discovery, memory registration
  dpdk::TscClock clock;
  std::unique_ptr<Context> ctx;
};

// The uroce::PortConfig of a device on these queues of one port: its MAC,
// GID, and region pages.
uroce::PortConfig device_config(const std::vector<std::unique_ptr<dpdk::PortIo>>& queues, engine::Clock& clock);

// Queues 0..n-1 of `port`, owning `ip`, sharing one neighbour table.
std::vector<std::unique_ptr<dpdk::PortIo>> open_queues(dpdk::Port& port, std::uint16_t n,
                                                       const std::array<std::uint8_t, 4>& ip);

}  // namespace uroce::device
