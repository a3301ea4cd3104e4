// Opening the device of a DPDK tool that runs on one port (uroce-pingpong,
// uroce-perf's two-process mode), with the messages a user reads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "device/device.h"

namespace uroce::app {

// The device on DPDK port `port_id` owning `ip`, named `tool` in telemetry;
// EAL must be running. Prints a warning to stderr when its regions sit on
// normal pages. nullptr, after printing "TOOL: why" to stderr, if the port
// is missing or cannot start. `dcqcn`: congestion control (nullptr: off);
// `delay_cc`: delay-based congestion control instead (nullptr: off).
// `pfc_priority`: the lossless priority (--pfc; -1 none), as
// device::Device::open takes it.
std::unique_ptr<device::Device> open_port_device(const char* tool, std::uint16_t port_id,
                                               const std::array<std::uint8_t, 4>& ip,
                                               const cc::DcqcnParams* dcqcn = nullptr, int pfc_priority = -1,
                                               const cc::DelayParams* delay_cc = nullptr);

}  // namespace uroce::app
