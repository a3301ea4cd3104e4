#include "sim/sim_fabric.h"

#include "engine/engine.h"

namespace uroce::sim {

SimFabric::SimFabric(std::uint64_t seed, const cc::DcqcnParams* dcqcn) : sw(clock, seed), dcqcn_(dcqcn) {}

Context& SimFabric::add_host(const EgressConfig& egress) {
  const auto i = static_cast<std::uint8_t>(hosts.size() + 1);
  const std::uint8_t mac[6] = {0x02, 0, 0, 0, 0x01, i};
  ibv_gid gid{};
  gid.raw[10] = gid.raw[11] = 0xff;
  gid.raw[12] = 10;
  gid.raw[13] = 98;
  gid.raw[14] = 1;
  gid.raw[15] = i;
  PortConfig port;
  port.io = &sw.add_port(mac, gid, egress);
  port.clock = &clock;
  std::copy(mac, mac + 6, port.mac);
  port.gid = gid;
  port.seed = i;
  port.dcqcn = dcqcn_;
  std::string error;
  hosts.push_back(Context::open(port, error));
  return *hosts.back();
}

bool SimFabric::step() {
  std::size_t moved = 0;
  for (auto& h : hosts) moved += h->progress();
  if (moved > 0) return true;
  std::uint64_t next = sw.next_delivery_ns();
  for (auto& h : hosts) {
    const std::uint64_t t = h->engine().next_timer_ns();
    if (t != 0 && (next == 0 || t < next)) next = t;
  }
  if (next == 0) return false;
  if (next <= clock.now_ns()) clock.advance(1);
  else clock.advance_to(next);
  return true;
}

}  // namespace uroce::sim
