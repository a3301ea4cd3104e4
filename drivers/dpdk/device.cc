#include "dpdk/device.h"

#include <algorithm>

#include "dpdk/eal.h"
#include "dpdk/telemetry.h"

namespace uroce::dpdk {

uroce::PortConfig device_config(PortIo& io, engine::Clock& clock) {
  uroce::PortConfig dev;
  dev.io = &io;
  dev.clock = &clock;
  std::copy(io.mac().begin(), io.mac().end(), dev.mac);
  dev.gid = io.gid();
  dev.buffer_pages = eal_uses_hugepages() ? uroce::PortConfig::Pages::kHuge : uroce::PortConfig::Pages::kNormal;
  return dev;
}

std::unique_ptr<Device> Device::open(std::uint16_t port_id, const std::array<std::uint8_t, 4>& ip,
                                     const std::string& name, std::string& error) {
  if (port_count() == 0) {
    error = "no DPDK port: give one before '--', e.g. --vdev=net_af_packet0,iface=eth1";
    return nullptr;
  }
  auto d = std::make_unique<Device>();
  PortConfig pc;
  pc.port_id = port_id;
  pc.mbufs = 8191;
  // Room for a 4096-byte path MTU frame (af_packet needs framesz=8192 and
  // mbufs that hold a whole frame).
  pc.max_frame = 9018;
  d->port = Port::open(pc, error);
  if (!d->port) return nullptr;
  d->io = std::make_unique<PortIo>(*d->port, 0, ip);
  d->ctx = Context::open(device_config(*d->io, d->clock), error);
  if (!d->ctx) return nullptr;
  telemetry_expose(d->ctx.get(), name);
  return d;
}

Device::~Device() {
  if (ctx) telemetry_hide(ctx.get());
  ctx.reset();  // before the port it uses
}

}  // namespace uroce::dpdk
