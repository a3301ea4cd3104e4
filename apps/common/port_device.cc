#include "common/port_device.h"

#include <cstdio>
#include <string>

#include "dpdk/eal.h"

namespace uroce::app {

std::unique_ptr<device::Device> open_port_device(const char* tool, std::uint16_t port_id,
                                               const std::array<std::uint8_t, 4>& ip, const cc::DcqcnParams* dcqcn,
                                               int pfc_priority, const cc::DelayParams* delay_cc) {
  std::string error;
  device::DeviceOptions options;
  options.dcqcn = dcqcn;
  options.delay_cc = delay_cc;
  options.pfc_priority = pfc_priority;
  auto device = device::Device::open(port_id, ip, tool, error, options);
  if (!device) {
    std::fprintf(stderr, "%s: %s\n", tool, error.c_str());
    return nullptr;
  }
  if (const std::string w = dpdk::no_huge_warning(tool); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  return device;
}

}  // namespace uroce::app
