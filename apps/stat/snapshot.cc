#include "stat/snapshot.h"

#include "stat/view.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>

namespace uroce::statview {
namespace {

// `text` as a whole decimal number below 2^32, or nullopt.
std::optional<std::uint32_t> parse_u32(const std::string& text) {
  if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (v > 0xffffffffull) return std::nullopt;
  return static_cast<std::uint32_t>(v);
}

// The numbers of a telemetry dict (other values are left out).
Rows rows_of(const Json& dict, double at) {
  Rows r;
  r.at = at;
  auto names = std::make_shared<std::vector<std::string>>();
  for (std::size_t i = 0; i < dict.keys.size(); ++i) {
    if (dict.items[i].integer) {
      names->push_back(dict.keys[i]);
      r.values.push_back(*dict.items[i].integer);
    }
  }
  r.names = std::move(names);
  return r;
}

}  // namespace

double now_seconds() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

std::string qp_state_name(std::uint64_t state) {
  static const char* const kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return state < std::size(kNames) ? kNames[state] : "?" + std::to_string(state);
}

std::optional<std::uint64_t> Rows::get(const std::string& name) const {
  for (std::size_t i = 0; i < size(); ++i) {
    if ((*names)[i] == name) return values[i];
  }
  return std::nullopt;
}

SnapshotReader::SnapshotReader(TelemetrySocket& sock) : sock_(sock) {
  if (!sock.has_command("/uroce/devices") || !sock.has_command("/uroce/port") || !sock.has_command("/uroce/engine") ||
      !sock.has_command("/uroce/qp")) {
    const std::string name = process_name(sock.pid());
    throw Failure(sock.path() + ": the process (pid " + std::to_string(sock.pid()) + ", " + (name.empty() ? "?" : name) +
                  ") runs DPDK but no uroce stack: give a uroce program's or uroced's prefix (uroce-stat --list)");
  }
  uroced_ = sock.has_command("/uroced/clients");
  if (sock.has_command("/uroce/gauges")) {
    std::vector<std::string> names;
    for (const Json& g : sock.query("/uroce/gauges").items) {
      if (g.is_string()) names.push_back(g.text);
    }
    set_gauges(std::move(names));
  }
  paged_ = sock.has_command("/uroce/qp_page") && sock.has_command("/uroce/qp_columns");
  if (paged_) {
    const Json cols = sock.query("/uroce/qp_columns");
    auto columns = std::make_shared<std::vector<std::string>>();
    for (const Json& c : cols.items) {
      if (!c.is_string()) break;
      columns->push_back(c.text);
    }
    if (!cols.is_array() || columns->size() != cols.items.size() || columns->empty() || (*columns)[0] != "qpn") {
      throw Failure(sock.path() + ": /uroce/qp_columns is not a list of column names starting with qpn");
    }
    columns_ = std::move(columns);
  }
}

// The time the answer arrived: a process that keeps the query waiting (its
// engines busy, or itself off the CPU) copies its counters at the end of
// the wait, just before it answers.
Json SnapshotReader::timed_query(const std::string& command, double& at) {
  Json answer = sock_.query(command);
  at = now_seconds();
  return answer;
}

Rows SnapshotReader::counters(const std::string& command) {
  double at = 0;
  const Json answer = timed_query(command, at);
  if (answer.type == Json::Type::kNull) return Rows{};  // the device went between the list and now
  if (!answer.is_object()) throw Failure(sock_.path() + ": the answer to " + command + " is not a dict of counters");
  return rows_of(answer, at);
}

std::vector<std::pair<int, std::string>> SnapshotReader::devices() {
  const Json devices = sock_.query("/uroce/devices");
  if (!devices.is_object()) throw Failure(sock_.path() + ": /uroce/devices is not a dict of device names");
  if (devices.keys.empty()) {
    throw Failure(sock_.path() + ": the process (pid " + std::to_string(sock_.pid()) +
                  ") has no uroce device open now: watch it once it has opened one");
  }
  std::vector<std::pair<int, std::string>> out;
  for (std::size_t i = 0; i < devices.keys.size() && i < 64; ++i) {
    const std::optional<std::uint32_t> index = parse_u32(devices.keys[i]);
    if (!index || *index > 1023 || !devices.items[i].is_string()) {
      throw Failure(sock_.path() + ": /uroce/devices names a device oddly");
    }
    out.emplace_back(static_cast<int>(*index), devices.items[i].text);
  }
  return out;
}

Snapshot SnapshotReader::read(bool with_qps, std::optional<std::uint32_t> only) {
  Snapshot s;
  s.at = now_seconds();
  timespec wall{};
  clock_gettime(CLOCK_REALTIME, &wall);
  s.wall = static_cast<double>(wall.tv_sec) + static_cast<double>(wall.tv_nsec) / 1e9;
  for (const auto& [index, name] : devices()) {
    if (only && static_cast<std::uint32_t>(index) != *only) continue;
    DeviceSnapshot d;
    d.index = index;
    d.name = name;
    const std::string dev = std::to_string(index);
    d.port = counters("/uroce/port," + dev);
    d.engine = counters("/uroce/engine," + dev);
    if (d.port.size() == 0 && d.engine.size() == 0) continue;  // closed meanwhile
    if (with_qps) paged_ ? read_qps(d, s.at) : read_qps_unpaged(d, s.at);
    s.devices.push_back(std::move(d));
  }
  if (only && s.devices.empty()) {
    throw Failure(sock_.path() + ": the process has no device " + std::to_string(*only) + " (drop --device to see them all)");
  }
  if (with_qps && uroced_) s.client_pid = clients();
  return s;
}

void SnapshotReader::read_qps(DeviceSnapshot& d, double started) {
  std::uint64_t from = 0;
  for (;;) {
    if (now_seconds() - started > kMaxSnapshotSeconds) {
      throw Failure(sock_.path() + ": reading the QPs took over " + std::to_string(static_cast<int>(kMaxSnapshotSeconds)) + " s: the process is too slow to answer");
    }
    const std::string command = "/uroce/qp_page," + std::to_string(d.index) + "," + std::to_string(from);
    double at = 0;
    const Json page = timed_query(command, at);
    if (page.type == Json::Type::kNull) return;  // the device closed
    const std::optional<std::uint64_t> next = page.unsigned_member("next");
    if (!page.is_object() || !next) throw Failure(sock_.path() + ": the answer to " + command + " has no 'next'");
    std::uint64_t last = 0;
    for (std::size_t i = 0; i < page.keys.size(); ++i) {
      if (page.keys[i] == "next") continue;
      const std::optional<std::uint32_t> qpn =
          page.keys[i].rfind("qp_", 0) == 0 ? parse_u32(page.keys[i].substr(3)) : std::nullopt;
      const Json& row = page.items[i];
      if (!qpn || *qpn < from || !row.is_array() || row.items.size() != columns_->size()) {
        throw Failure(sock_.path() + ": the answer to " + command + " has a row that is not a QP's " +
                      std::to_string(columns_->size()) + " columns");
      }
      QpRow q;
      q.qpn = *qpn;
      q.rows.at = at;
      q.rows.names = columns_;
      for (const Json& v : row.items) {
        if (!v.integer) throw Failure(sock_.path() + ": the answer to " + command + " has a value that is not a counter");
        q.rows.values.push_back(*v.integer);
      }
      const std::optional<std::uint64_t> state = q.rows.get("state");
      q.state = state ? qp_state_name(*state) : "?";
      last = std::max<std::uint64_t>(last, *qpn);
      if (d.qps.size() < kMaxQps) d.qps.push_back(std::move(q));
      ++d.qps_total;
    }
    if (*next == 0) return;
    // Each page must move on, or a broken process would page forever.
    if (*next <= from || *next <= last) throw Failure(sock_.path() + ": /uroce/qp_page's 'next' does not move forward");
    from = *next;
  }
}

void SnapshotReader::read_qps_unpaged(DeviceSnapshot& d, double started) {
  const std::string dev = std::to_string(d.index);
  const Json list = sock_.query("/uroce/qps," + dev);
  if (list.type == Json::Type::kNull) return;
  if (!list.is_array()) throw Failure(sock_.path() + ": /uroce/qps is not a list of QP numbers");
  d.qps_total = list.items.size();
  for (const Json& n : list.items) {
    if (!n.integer || *n.integer > 0xffffff) throw Failure(sock_.path() + ": /uroce/qps lists something that is not a QPN");
    if (d.qps.size() >= kMaxUnpagedQps) break;
    if (now_seconds() - started > kMaxSnapshotSeconds) {
      throw Failure(sock_.path() + ": reading the QPs took over " + std::to_string(static_cast<int>(kMaxSnapshotSeconds)) + " s: the process is too slow to answer");
    }
    const std::string command = "/uroce/qp," + dev + "," + std::to_string(*n.integer);
    double at = 0;
    const Json qp = timed_query(command, at);
    if (qp.type == Json::Type::kNull) continue;  // gone meanwhile
    if (!qp.is_object()) throw Failure(sock_.path() + ": the answer to " + command + " is not a dict");
    QpRow q;
    q.qpn = static_cast<std::uint32_t>(*n.integer);
    q.rows = rows_of(qp, at);
    const Json* state = qp.find("state");
    q.state = state != nullptr && state->is_string() ? state->text : "?";
    d.qps.push_back(std::move(q));
  }
  std::sort(d.qps.begin(), d.qps.end(), [](const QpRow& a, const QpRow& b) { return a.qpn < b.qpn; });
}

std::optional<Json> SnapshotReader::qp_detail(int device, std::uint32_t qpn) {
  Json qp = sock_.query("/uroce/qp," + std::to_string(device) + "," + std::to_string(qpn));
  if (qp.type == Json::Type::kNull) return std::nullopt;
  if (!qp.is_object()) throw Failure(sock_.path() + ": the answer to /uroce/qp is not a dict");
  return qp;
}

// /uroced/clients: client_N -> ["pid P", ..., "qpns 17 18"].
std::map<std::uint32_t, long> SnapshotReader::clients() {
  std::map<std::uint32_t, long> out;
  const Json table = sock_.query("/uroced/clients");
  if (!table.is_object()) return out;
  for (const Json& client : table.items) {
    long pid = 0;
    std::vector<std::uint32_t> qpns;
    for (const Json& field : client.items) {
      if (!field.is_string()) continue;
      const std::string& f = field.text;
      if (f.rfind("pid ", 0) == 0) pid = std::atol(f.c_str() + 4);
      if (f.rfind("qpns", 0) != 0) continue;
      for (std::size_t at = 4; at < f.size();) {
        const std::size_t end = std::min(f.find(' ', at + 1), f.size());
        if (const auto q = parse_u32(f.substr(at + 1, end - at - 1))) qpns.push_back(*q);
        at = end;
      }
    }
    for (const std::uint32_t q : qpns) out[q] = pid;
  }
  return out;
}

}  // namespace uroce::statview
