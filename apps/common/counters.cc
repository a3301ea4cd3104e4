#include "common/counters.h"

#include <cstdio>

#include "dpdk/port_io.h"
#include "engine/engine.h"
#include "transport/counters.h"
#include "uroce/verbs.h"
#include "wire/parse_status.h"

namespace uroce {

void print_counters(Context& ctx, QueuePair* qp, const dpdk::PortIoCounters* port) {
  std::printf("counters (non-zero):\n");
  for (std::size_t i = 0; qp != nullptr && i < transport::kQpCounterCount; ++i) {
    const auto c = static_cast<transport::QpCounter>(i);
    if (const std::uint64_t v = qp->counter(transport::qp_counter_name(c))) {
      std::printf("  qp.%-28s %12llu  %s\n", transport::qp_counter_name(c), static_cast<unsigned long long>(v),
                  transport::qp_counter_description(c));
    }
  }
  if (qp != nullptr) {
    if (const QueuePair::CongestionState cs = qp->congestion(); cs.enabled) {
      std::printf("  qp.dcqcn rate %.3f Gb/s, target %.3f Gb/s, alpha %.4f, %llu CNPs\n", cs.rate_bps / 1e9,
                  cs.target_bps / 1e9, cs.alpha, static_cast<unsigned long long>(cs.cnps));
    }
  }
  // Engine counters summed over the device's engines.
  for (int i = 0; i < static_cast<int>(engine::EngineCounter::kCount); ++i) {
    const auto c = static_cast<engine::EngineCounter>(i);
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < ctx.engine_count(); ++k) v += ctx.engine(k).counter(c);
    if (v != 0) {
      std::printf("  engine.%-24s %12llu\n", engine::engine_counter_name(c), static_cast<unsigned long long>(v));
    }
  }
  for (int i = 0; i < wire::kParseStatusCount; ++i) {
    const auto s = static_cast<wire::ParseStatus>(i);
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < ctx.engine_count(); ++k) v += ctx.engine(k).parse_drops(s);
    if (v != 0) {
      std::printf("  engine.drop_%-19s %12llu  %s\n", wire::parse_status_name(s), static_cast<unsigned long long>(v),
                  wire::parse_status_description(s));
    }
  }
  if (port == nullptr) return;
  const dpdk::PortIoCounters& pc = *port;
  std::printf("  port.tx_zero_copy_frames %llu (%llu bytes), tx_copied_bytes %llu, tx_dropped_no_mbuf %llu\n",
              static_cast<unsigned long long>(pc.tx_zero_copy_frames), static_cast<unsigned long long>(pc.tx_zero_copy_bytes),
              static_cast<unsigned long long>(pc.tx_copied_bytes), static_cast<unsigned long long>(pc.tx_dropped_no_mbuf));
  std::printf("  port.regions_registered %llu, regions_dma_mapped %llu, regions_dma_unneeded %llu, regions_register_failed %llu\n",
              static_cast<unsigned long long>(pc.regions_registered), static_cast<unsigned long long>(pc.regions_dma_mapped),
              static_cast<unsigned long long>(pc.regions_dma_unneeded),
              static_cast<unsigned long long>(pc.regions_register_failed));
  std::printf("  port.nd_solicitations_answered %llu, nd_advertisements_learned %llu\n",
              static_cast<unsigned long long>(pc.nd_solicitations_answered),
              static_cast<unsigned long long>(pc.nd_advertisements_learned));
  std::printf("  port.neighbors_refused %llu, neighbors_evicted %llu, neighbors_wanted_evicted %llu\n",
              static_cast<unsigned long long>(pc.neighbors_refused),
              static_cast<unsigned long long>(pc.neighbors_evicted),
              static_cast<unsigned long long>(pc.neighbors_wanted_evicted));
  std::printf("  port.arp_requests_answered %llu, arp_replies_learned %llu, rx_other %llu, rx_linearized %llu\n",
              static_cast<unsigned long long>(pc.arp_requests_answered),
              static_cast<unsigned long long>(pc.arp_replies_learned), static_cast<unsigned long long>(pc.rx_other),
              static_cast<unsigned long long>(pc.rx_linearized));
}

}  // namespace uroce
