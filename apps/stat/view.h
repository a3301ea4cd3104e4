// What uroce-stat shows from two snapshots: the rates (differences over the
// time between the same two answers), the columns chosen from the counters'
// names, and the two ways to print them (a table, or one JSON object).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stat/json.h"
#include "stat/snapshot.h"

namespace uroce::statview {

// A set of rows with each one's rate: nullopt when there is no earlier
// read of it, when it went down (a gauge, or a QPN used again), or when it
// is an attribute (a QP's state, engine, peer, ...) rather than a counter.
struct Rated {
  Names names;  // the rows' (shared)
  std::vector<std::uint64_t> values;
  std::vector<std::optional<double>> rates;

  std::size_t size() const { return values.size(); }
  const std::string& name(std::size_t i) const { return (*names)[i]; }

  std::optional<std::uint64_t> value(const std::string& name) const;
  std::optional<double> rate(const std::string& name) const;
};
Rated rate_rows(const Rows* before, const Rows& after);

// Whether `name` is an attribute telemetry reports beside the counters
// (state, peer, outstanding WQEs, DCQCN's rate now): no rate is made of it.
bool is_attribute(const std::string& name);
// The process's gauges (/uroce/gauges): values now, shown without a rate.
void set_gauges(std::vector<std::string> names);

struct PortView {
  int device = 0;
  std::string name;
  Rated port;
  Rated engine;
  std::optional<double> rx_pps, tx_pps, rx_gbps, tx_gbps;
  std::string gbps_source;  // "link" (the NIC's byte counts) or "qp_payload" (the QPs' payload bytes)
  std::optional<double> pause_rx_per_s, pause_tx_per_s;
  // The share of the time the link partner's PAUSE/PFC frames held our
  // sending (link_rx_paused_us), where the NIC counts it.
  std::optional<double> paused_fraction;
  std::uint64_t engines = 0;
  std::optional<double> busy_fraction, bursts_per_s;
};

struct QpView {
  int device = 0;
  std::uint32_t qpn = 0;
  std::string state;
  std::string type;      // from /uroce/qp, for the QPs shown
  std::string peer_gid;  // likewise
  std::optional<std::uint64_t> peer_qpn;
  std::optional<long> pid;  // uroced: the client's
  Rated rows;
  double bytes_per_s = 0;  // tx and rx payload: the ranking
  double packets_per_s = 0;
};

struct Report {
  double wall = 0;  // the second read's time, Unix seconds
  double interval_s = 0;
  double monotonic_start_s = 0, monotonic_end_s = 0;  // the two reads began (CLOCK_MONOTONIC)
  std::string socket;
  long pid = 0;
  std::string process;
  bool uroced = false;
  std::vector<PortView> ports;
  std::vector<QpView> qps;  // the busiest, at most --top
  std::size_t qps_total = 0;
};

// The report from snapshots `a` then `b`, the QPs cut to the `top` busiest
// (their type and peer still to be filled in by the caller).
Report make_report(const Snapshot& a, const Snapshot& b, std::size_t top);

std::string format_table(const Report& r);
std::string format_json(const Report& r);

// --qp N: every field of one QP's /uroce/qp answer, read at `at_a` and `at_b`.
struct QpDetail {
  int device = 0;
  std::string device_name;
  std::uint32_t qpn = 0;
  Json before, after;
  double at_a = 0, at_b = 0, wall = 0;
};
std::string format_qp_table(const QpDetail& d);
std::string format_qp_json(const QpDetail& d);

// "2024-05-01T12:00:00.123Z"
std::string utc_time(double unix_seconds);

}  // namespace uroce::statview
