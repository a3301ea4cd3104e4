// The stack's counters, read by name: one registry over the lists that
// declare them once (name and description each), for telemetry, the tools'
// --counters and any embedder.
//
//   scope    declared in                                   read through
//   qp       UROCE_QP_COUNTER_LIST (lib/transport/counters.h) QueuePair::stats(), Context::qp_stats()
//   engine   UROCE_ENGINE_COUNTER_LIST (lib/engine/engine.h),  Context::stats(), Context::engine_stats()
//            and a drop_<reason> row per UROCE_PARSE_STATUS_LIST reason that is a malformed RoCEv2
//            frame (lib/wire/parse_status.h: drop_icrc_mismatch, ...)
//   port     the port's own list (a DPDK port's: UROCE_PORT_COUNTER_LIST, drivers/dpdk/port_io.h, and
//            the NIC's UROCE_LINK_COUNTER_LIST, drivers/dpdk/port.h), read through
//            PacketIo::visit_counters() (include/uroce/port.h); none on the simulated link
//
// Every row of a list is reported, zero or not, in list order; a name is
// unique within its scope. Names and descriptions are static strings.
// A row only grows (a counter) unless its description says "(a gauge": a
// value now, such as cc_cwnd; Stat::kind tells which, for exporters.
// Rows ending in _ns or _us count time in that unit.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "uroce/verbs.h"

namespace uroce {

enum class StatScope : std::uint8_t { kQp, kEngine, kPort };
enum class StatKind : std::uint8_t { kCounter, kGauge };

// "qp", "engine" or "port".
const char* stat_scope_name(StatScope scope);

struct Stat {
  StatScope scope = StatScope::kQp;
  const char* name = "";         // snake_case: "tx_packets", "drop_icrc_mismatch"
  const char* description = "";  // one line, for people
  std::uint64_t value = 0;
  StatKind kind = StatKind::kCounter;
};

// One QP as Context::qp_stats() finds it by number.
struct QpStats {
  std::uint32_t qp_num = 0;
  std::size_t engine = 0;  // the engine (port queue, worker) that serves it
  ibv_qp_state state = IBV_QPS_RESET;
  std::uint32_t dest_qp_num = 0;
  ibv_qp_type qp_type = IBV_QPT_RC;
  ibv_gid dest_gid{};                  // the peer's (RC, UC from RTR on); zero for UD
  std::uint32_t send_outstanding = 0;  // send WQEs posted and not yet completed
  std::uint32_t recv_outstanding = 0;  // receive WQEs posted and not yet consumed (own RQ)
  QueuePair::CongestionState congestion;  // as QueuePair::congestion()
  std::vector<Stat> counters;             // scope kQp
};

// Every QP counter row (scope kQp) in list order, each 0: the names and
// descriptions a QP's QpStats::counters carries, without a QP.
std::vector<Stat> qp_stat_rows();

// The row called `name` in `stats` (scope and name both match), or nullptr.
const Stat* find_stat(const std::vector<Stat>& stats, StatScope scope, const char* name);
// Not on a temporary (find_stat(ctx.stats(), ...)): the row would die with it.
const Stat* find_stat(std::vector<Stat>&& stats, StatScope scope, const char* name) = delete;

}  // namespace uroce
