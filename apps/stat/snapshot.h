// One read of everything uroce-stat shows: each uroce device's port and
// engine rows and every QP's page row, each stamped with the time its
// answer arrived (monotonic clock), so a rate divides by the time between
// the same two answers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stat/json.h"
#include "stat/telemetry_socket.h"

namespace uroce::statview {

// Row names, shared by every row of one shape: with 10,000 QPs, a copy of
// the page's 80 column names each was most of a snapshot.
using Names = std::shared_ptr<const std::vector<std::string>>;

// Named numbers in the order the answer gave them (names from telemetry).
struct Rows {
  Names names = std::make_shared<const std::vector<std::string>>();
  std::vector<std::uint64_t> values;
  double at = 0;  // seconds, monotonic clock

  std::size_t size() const { return values.size(); }
  const std::string& name(std::size_t i) const { return (*names)[i]; }
  std::optional<std::uint64_t> get(const std::string& name) const;
};

struct QpRow {
  std::uint32_t qpn = 0;
  Rows rows;          // every number the answer had: page columns, or /uroce/qp's
  std::string state;  // "RTS", ...
};

struct DeviceSnapshot {
  int index = 0;
  std::string name;
  Rows port;
  Rows engine;
  std::vector<QpRow> qps;  // ascending QPN
  std::size_t qps_total = 0;  // the device's QPs (more than qps when capped)
};

struct Snapshot {
  double at = 0;       // when the read began, monotonic seconds
  double wall = 0;     // the same instant, Unix time
  std::vector<DeviceSnapshot> devices;
  std::map<std::uint32_t, long> client_pid;  // uroced: QPN (of device 0) to its client's pid
};

// What the reader found the process to offer, learnt once per connection.
class SnapshotReader {
 public:
  // Throws Failure when the process is not a uroce process or has no device.
  explicit SnapshotReader(TelemetrySocket& sock);

  // Reads every device, or only device `only` (with `with_qps`, their QPs
  // too). Throws Failure.
  Snapshot read(bool with_qps, std::optional<std::uint32_t> only = std::nullopt);
  // The devices by index and name (/uroce/devices). Throws Failure when it
  // has none.
  std::vector<std::pair<int, std::string>> devices();
  // /uroce/qp,DEV,QPN: every field of one QP, or nullopt if it is gone.
  std::optional<Json> qp_detail(int device, std::uint32_t qpn);

  bool uroced() const { return uroced_; }
  bool paged() const { return paged_; }
  TelemetrySocket& socket() { return sock_; }

  // At most this many QPs a device are read a snapshot (QPNs are 24 bits).
  static constexpr std::size_t kMaxQps = 1u << 16;
  // Without /uroce/qp_page: one query a QP, for at most this many.
  static constexpr std::size_t kMaxUnpagedQps = 4096;
  // A snapshot that takes longer than this is given up on.
  static constexpr double kMaxSnapshotSeconds = 20;

 private:
  Rows counters(const std::string& command);
  void read_qps(DeviceSnapshot& d, double started);
  void read_qps_unpaged(DeviceSnapshot& d, double started);
  std::map<std::uint32_t, long> clients();
  Json timed_query(const std::string& command, double& at);

  TelemetrySocket& sock_;
  bool paged_ = false;
  bool uroced_ = false;
  Names columns_;  // /uroce/qp_columns
};

// Monotonic seconds now.
double now_seconds();

// "RTS" for ibv_qp_state 3, as the page's state column gives it.
std::string qp_state_name(std::uint64_t state);

}  // namespace uroce::statview
