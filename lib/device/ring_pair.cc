#include "device/ring_pair.h"

#include "device/device.h"
#include "device/telemetry.h"
#include "log/log.h"
#include "uroce/stats.h"

namespace uroce::device {

std::unique_ptr<RingPair> RingPair::create(const std::string& name, std::string& error, std::uint16_t queues,
                                           const cc::DcqcnParams* dcqcn, int pfc_priority,
                                           const cc::DelayParams* delay_cc) {
  std::uint16_t ida = 0;
  std::uint16_t idb = 0;
  if (!dpdk::create_ring_pair(name.c_str(), ida, idb, error, queues)) {
    logger().debug("ring pair '{}': {}", name, error);
    return nullptr;
  }
  auto pair = std::unique_ptr<RingPair>(new RingPair());
  // Frames up to a 9000-byte MTU; RoCE uses up to 4096 bytes of payload.
  dpdk::PortConfig cfg;
  cfg.mbufs = 4095u * queues;
  cfg.queues = queues;
  cfg.max_frame = 9018;
  cfg.pfc_priority = pfc_priority;
  cfg.port_id = ida;
  pair->port_a = dpdk::Port::open(cfg, error);
  if (!pair->port_a) return nullptr;
  cfg.port_id = idb;
  pair->port_b = dpdk::Port::open(cfg, error);
  if (!pair->port_b) return nullptr;
  pair->queues_a = open_queues(*pair->port_a, queues, {10, 98, 0, 1});
  pair->queues_b = open_queues(*pair->port_b, queues, {10, 98, 0, 2});
  pair->io_a = pair->queues_a[0].get();
  pair->io_b = pair->queues_b[0].get();
  // Both ends are in this thread: neither could answer the other's ARP while
  // the other waits, so they know each other from the start.
  pair->io_a->add_neighbor({10, 98, 0, 2}, pair->io_b->mac());
  pair->io_b->add_neighbor({10, 98, 0, 1}, pair->io_a->mac());
  uroce::PortConfig ca = device_config(pair->queues_a, pair->clock);
  uroce::PortConfig cb = device_config(pair->queues_b, pair->clock);
  ca.dcqcn = cb.dcqcn = dcqcn;
  ca.delay_cc = cb.delay_cc = delay_cc;
  ca.pfc_priority = cb.pfc_priority = pfc_priority;
  pair->a = Context::open(ca, error);
  pair->b = Context::open(cb, error);
  if (!pair->a || !pair->b) {
    logger().debug("ring pair '{}': {}", name, error);
    return nullptr;
  }
  telemetry_expose(pair->a.get(), name + "-a");
  telemetry_expose(pair->b.get(), name + "-b");
  logger().info("ring pair '{}': ports {} and {}, {} engine(s) each, active MTU {}", name,
                ida, idb, queues, 128 << ca.active_mtu);
  return pair;
}

RingPair::~RingPair() {
  telemetry_hide(a.get());
  telemetry_hide(b.get());
  a.reset();  // contexts before the ports they use
  b.reset();
}

int RingPair::connect(QueuePair* qa, QueuePair* qb, const ConnectParams& p) {
  if (int rc = connect_rc(qa, b->gid(), qb->qp_num(), p.psn_a, p.psn_b, p)) return rc;
  return connect_rc(qb, a->gid(), qa->qp_num(), p.psn_b, p.psn_a, p);
}

bool RingPair::step() {
  a->progress();
  b->progress();
  return true;
}

std::uint64_t RingPair::frames_sent() const {
  std::uint64_t n = 0;
  for (Context* ctx : {a.get(), b.get()}) {
    const std::vector<Stat> stats = ctx->stats();
    if (const Stat* s = find_stat(stats, StatScope::kEngine, "tx_frames")) n += s->value;
  }
  return n;
}

}  // namespace uroce::device
