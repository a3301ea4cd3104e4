#include "device/leaf_spine_fabric.h"

#include "device/step.h"

namespace uroce::device {

LeafSpineFabric::LeafSpineFabric(std::uint64_t seed, const sim::LeafSpineConfig& config, const cc::DcqcnParams* dcqcn,
                                 const cc::DelayParams* delay_cc)
    : net(clock, seed, config) {
  for (int h = 0; h < net.hosts(); ++h) {
    PortConfig port;
    net.host_address(h, port.mac, port.gid);
    port.io = &net.port(h);
    port.clock = &clock;
    port.seed = seed * 1000 + static_cast<std::uint64_t>(h) + 1;
    port.seeded_qpns = true;  // a run repeats for its seed
    port.dcqcn = dcqcn;
    port.delay_cc = delay_cc;
    std::string error;
    hosts.push_back(Context::open(port, error));
    if (!hosts.back()) {
      if (error_.empty()) error_ = "leaf-spine host " + std::to_string(h) + ": " + error;
      continue;
    }
    devices_.push_back(hosts.back().get());
  }
}

bool LeafSpineFabric::step() { return step_devices(clock, devices_, net.next_delivery_ns()); }

}  // namespace uroce::device
