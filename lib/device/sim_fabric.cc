#include "device/sim_fabric.h"

#include "device/step.h"

namespace uroce::device {

SimFabric::SimFabric(std::uint64_t seed, const cc::DcqcnParams* dcqcn, const cc::DelayParams* delay_cc)
    : sw(clock, seed), dcqcn_(dcqcn), delay_cc_(delay_cc) {}

Context& SimFabric::add_host(const sim::EgressConfig& egress) {
  const auto i = static_cast<std::uint8_t>(hosts.size() + 1);
  const std::uint8_t mac[6] = {0x02, 0, 0, 0, 0x01, i};
  const ibv_gid gid = ipv4_gid({10, 98, 1, i});
  PortConfig port;
  port.io = &sw.add_port(mac, gid, egress);
  port.clock = &clock;
  std::copy(mac, mac + 6, port.mac);
  port.gid = gid;
  port.seed = i;
  port.dcqcn = dcqcn_;
  port.delay_cc = delay_cc_;
  std::string error;
  hosts.push_back(Context::open(port, error));
  devices_.push_back(hosts.back().get());
  return *hosts.back();
}

bool SimFabric::step() {
  return step_devices(clock, devices_, sw.next_delivery_ns());
}

}  // namespace uroce::device
