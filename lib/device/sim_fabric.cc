#include "device/sim_fabric.h"

#include "device/step.h"

namespace uroce::device {

SimFabric::SimFabric(std::uint64_t seed, const cc::DcqcnParams* dcqcn, const cc::DelayParams* delay_cc)
    : sw(clock, seed), dcqcn_(dcqcn), delay_cc_(delay_cc) {}

Context& SimFabric::add_host(const sim::EgressConfig& egress) {
  // Host n (from 1): 10.98.1.n up to 255, then 10.98.2.0 and on (a
  // scenario file may ask for more hosts than one octet numbers).
  const std::size_t n = hosts.size() + 1;
  const auto hi = static_cast<std::uint8_t>(1 + n / 256);
  const auto lo = static_cast<std::uint8_t>(n % 256);
  const std::uint8_t mac[6] = {0x02, 0, 0, 0, hi, lo};
  const ibv_gid gid = ipv4_gid({10, 98, hi, lo});
  PortConfig port;
  port.io = &sw.add_port(mac, gid, egress);
  port.clock = &clock;
  std::copy(mac, mac + 6, port.mac);
  port.gid = gid;
  port.seed = n;
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
