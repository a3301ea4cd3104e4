#include "device/device.h"

#include <algorithm>

#include "device/telemetry.h"
#include "dpdk/eal.h"
#include "log/log.h"

namespace uroce::device {

uroce::PortConfig device_config(const std::vector<std::unique_ptr<dpdk::PortIo>>& queues, engine::Clock& clock) {
  uroce::PortConfig dev;
  for (const auto& q : queues) dev.queues.push_back(q.get());
  const dpdk::PortIo& io = *queues.at(0);
  dev.clock = &clock;
  std::copy(io.mac().begin(), io.mac().end(), dev.mac);
  dev.gid = io.gid();
  // The largest path MTU whose frames the port carries: payload plus
  // Ethernet, VLAN, IPv6, UDP, BTH, RETH and ICRC (98 bytes).
  dev.active_mtu = IBV_MTU_256;
  for (const auto& [mtu, bytes] : {std::pair{IBV_MTU_4096, 4096}, std::pair{IBV_MTU_2048, 2048},
                                  std::pair{IBV_MTU_1024, 1024}, std::pair{IBV_MTU_512, 512}}) {
    if (bytes + 98 <= io.port().max_frame()) {
      dev.active_mtu = mtu;
      break;
    }
  }
  dev.buffer_pages = dpdk::eal_uses_hugepages() ? uroce::PortConfig::Pages::kHuge : uroce::PortConfig::Pages::kNormal;
  return dev;
}

std::vector<std::unique_ptr<dpdk::PortIo>> open_queues(dpdk::Port& port, std::uint16_t n,
                                                       const std::array<std::uint8_t, 4>& ip) {
  std::vector<std::unique_ptr<dpdk::PortIo>> queues;
  queues.push_back(std::make_unique<dpdk::PortIo>(port, 0, ip));
  for (std::uint16_t q = 1; q < n; ++q) queues.push_back(std::make_unique<dpdk::PortIo>(*queues[0], q));
  return queues;
}

std::unique_ptr<Device> Device::open(std::uint16_t port_id, const std::array<std::uint8_t, 4>& ip,
                                     const std::string& name, std::string& error, const DeviceOptions& options) {
  const std::uint16_t queues = options.queues;
  const cc::DcqcnParams* dcqcn = options.dcqcn;
  const int pfc_priority = options.pfc_priority;
  if (dpdk::port_count() == 0) {
    error = "no DPDK port: give one before '--', e.g. --vdev=net_af_packet0,iface=eth1";
    logger().debug("{}", error);
    return nullptr;
  }
  auto d = std::make_unique<Device>();
  dpdk::PortConfig pc;
  pc.port_id = port_id;
  pc.queues = queues;
  pc.mbufs = 8191u * queues;
  // Room for a 4096-byte path MTU frame (af_packet needs framesz=8192 and
  // mbufs that hold a whole frame).
  pc.max_frame = 9018;
  pc.pfc_priority = pfc_priority;
  d->port = dpdk::Port::open(pc, error);
  if (!d->port) return nullptr;  // Port::open logged why
  d->queues = open_queues(*d->port, queues, ip);
  d->io = d->queues[0].get();
  uroce::PortConfig config = device_config(d->queues, d->clock);
  config.dcqcn = dcqcn;
  config.delay_cc = options.delay_cc;
  config.pfc_priority = pfc_priority;
  config.min_ack_timeout = options.min_ack_timeout;
  d->ctx = Context::open(config, error);
  if (!d->ctx) {
    logger().debug("device '{}': {}", name, error);
    return nullptr;
  }
  telemetry_expose(d->ctx.get(), name);
  logger().info("device '{}' on port {}: {}.{}.{}.{}, {} engine(s), active MTU {}, regions on {} pages, "
                "congestion control {}, PFC priority {}, local ACK timeout floor {}",
                name, port_id, ip[0], ip[1], ip[2], ip[3], queues, 128 << config.active_mtu,
                config.buffer_pages == uroce::PortConfig::Pages::kHuge ? "huge" : "normal",
                dcqcn != nullptr ? "dcqcn" : options.delay_cc != nullptr ? "delay" : "off", pfc_priority >= 0 ? std::to_string(pfc_priority) : "none",
                options.min_ack_timeout != 0 ? std::to_string(options.min_ack_timeout) : "none");
  return d;
}

Device::~Device() {
  if (ctx) telemetry_hide(ctx.get());
  ctx.reset();  // before the port it uses
}

}  // namespace uroce::device
