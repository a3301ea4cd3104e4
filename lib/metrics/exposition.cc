// Snapshots as Prometheus text (exposition format 0.0.4), and what is
// remembered between collections: each QP's last counters (for the port
// sums, which must never go down) and when it last moved (for the choice of
// QPs that get series of their own). See include/uroce/metrics.h.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "uroce/metrics.h"

namespace uroce::metrics {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::array<const char*, 7> kStateNames = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};

const char* state_name(ibv_qp_state s) {
  const auto i = static_cast<std::size_t>(s);
  return i < kStateNames.size() ? kStateNames[i] : "UNKNOWN";
}

const char* qp_type_name(ibv_qp_type t) {
  switch (t) {
    case IBV_QPT_RC: return "rc";
    case IBV_QPT_UC: return "uc";
    case IBV_QPT_UD: return "ud";
    case IBV_QPT_XRC_SEND: return "xrc_send";
    case IBV_QPT_XRC_RECV: return "xrc_recv";
    case IBV_QPT_RAW_PACKET: return "raw_packet";
    default: return "other";
  }
}

// "::ffff:10.0.0.2"; "" for the zero GID (no peer: UD, or before RTR).
std::string gid_text(const ibv_gid& gid) {
  static constexpr std::uint8_t kZero[16] = {};
  if (std::memcmp(gid.raw, kZero, sizeof(kZero)) == 0) return "";
  char buf[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, gid.raw, buf, sizeof(buf)) == nullptr) return "";
  return buf;
}

// A metric or label name: [a-zA-Z_][a-zA-Z0-9_]*, other characters made _.
std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 1);
  for (const char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || (out[0] >= '0' && out[0] <= '9')) out.insert(out.begin(), '_');
  return out;
}

// A row's name in a family name, and the factor to its base unit: Prometheus
// counts time in seconds ("busy_ns" is "busy_seconds", times 1e-9).
struct RowName {
  std::string base;
  double scale = 1;
  bool time = false;
};

RowName row_name(std::string_view name) {
  struct Unit {
    std::string_view suffix;
    double scale;
  };
  static constexpr Unit kTimeUnits[] = {{"_ns", 1e-9}, {"_us", 1e-6}, {"_ms", 1e-3}};
  for (const Unit& u : kTimeUnits) {
    if (name.size() > u.suffix.size() && name.substr(name.size() - u.suffix.size()) == u.suffix) {
      return {sanitize(name.substr(0, name.size() - u.suffix.size())) + "_seconds", u.scale, true};
    }
  }
  return {sanitize(name), 1, false};
}

// What HELP says after a row's description when the unit was converted.
std::string help_of(std::string_view description, const RowName& n, std::string_view tail = "") {
  std::string help(description);
  if (n.time) help += "; in seconds here";
  help += tail;
  return help;
}

void append_escaped(std::string& out, std::string_view s, bool quote) {
  for (const char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out.push_back(c);
    }
  }
}

std::string format_value(std::uint64_t v) { return std::to_string(v); }

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Whole numbers as integers (no exponent up to 2^53, where doubles are exact).
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    return std::to_string(static_cast<long long>(v));
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Label values compared as numbers when both are (qpn 9 before 10), else as text.
int compare_values(std::string_view a, std::string_view b) {
  if (all_digits(a) && all_digits(b)) {
    const auto trim = [](std::string_view s) {
      const auto nz = s.find_first_not_of('0');
      return nz == std::string_view::npos ? std::string_view("0") : s.substr(nz);
    };
    a = trim(a);
    b = trim(b);
    if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  }
  const int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

int compare_labels(const std::vector<Label>& a, const std::vector<Label>& b) {
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (const int c = a[i].name.compare(b[i].name); c != 0) return c < 0 ? -1 : 1;
    if (const int c = compare_values(a[i].value, b[i].value); c != 0) return c;
  }
  return a.size() == b.size() ? 0 : (a.size() < b.size() ? -1 : 1);
}

// The page being built: families by name, each with its samples.
class Page {
 public:
  // Adds one sample; dropped if the family exists with another type.
  void add(const std::string& name, const std::string& help, StatKind type, std::vector<Label> labels,
           std::string value) {
    auto [it, inserted] = families_.try_emplace(name);
    Family& f = it->second;
    if (inserted) {
      f.help = help;
      f.type = type;
    } else if (f.type != type) {
      return;
    }
    f.samples.push_back({std::move(labels), std::move(value)});
  }

  std::string text() {
    std::string out;
    for (auto& [name, f] : families_) {
      out += "# HELP ";
      out += name;
      out += ' ';
      append_escaped(out, f.help, false);
      out += "\n# TYPE ";
      out += name;
      out += f.type == StatKind::kCounter ? " counter\n" : " gauge\n";
      std::stable_sort(f.samples.begin(), f.samples.end(),
                       [](const Sample& a, const Sample& b) { return compare_labels(a.labels, b.labels) < 0; });
      const std::vector<Label>* previous = nullptr;
      for (const Sample& s : f.samples) {
        // Two samples with the same labels would make the page invalid: the first stays.
        if (previous != nullptr && compare_labels(*previous, s.labels) == 0) continue;
        previous = &s.labels;
        out += name;
        if (!s.labels.empty()) {
          out += '{';
          for (std::size_t i = 0; i < s.labels.size(); ++i) {
            if (i > 0) out += ',';
            out += s.labels[i].name;
            out += "=\"";
            append_escaped(out, s.labels[i].value, true);
            out += '"';
          }
          out += '}';
        }
        out += ' ';
        out += s.value;
        out += '\n';
      }
    }
    return out;
  }

 private:
  struct Sample {
    std::vector<Label> labels;
    std::string value;
  };
  struct Family {
    std::string help;
    StatKind type = StatKind::kGauge;
    std::vector<Sample> samples;
  };
  std::map<std::string, Family> families_;
};

// The labels uroce_qp_info adds, and those every QP series starts with: a
// QP label of the program's with one of these names is dropped.
constexpr std::string_view kOwnQpLabels[] = {"port", "qpn", "engine", "type", "state", "peer_gid", "peer_qpn"};

std::vector<Label> qp_series_labels(const DeviceSnapshot& dev, std::uint32_t qpn) {
  std::vector<Label> labels = {{"port", dev.port}, {"qpn", std::to_string(qpn)}};
  const auto it = dev.qp_labels.find(qpn);
  if (it == dev.qp_labels.end()) return labels;
  for (const Label& l : it->second) {
    std::string name = sanitize(l.name);
    const bool own = std::find(std::begin(kOwnQpLabels), std::end(kOwnQpLabels), name) != std::end(kOwnQpLabels);
    // Names starting with __ are Prometheus's own.
    const bool reserved = name.rfind("__", 0) == 0;
    const bool repeated = std::any_of(labels.begin(), labels.end(), [&](const Label& x) { return x.name == name; });
    if (!own && !reserved && !repeated) labels.push_back({std::move(name), l.value});
  }
  return labels;
}

}  // namespace

// One port's memory between collections.
struct Exposition::PortMemory {
  struct Row {
    std::string name;
    std::string description;
    StatKind kind = StatKind::kCounter;
  };
  struct Qp {
    std::vector<std::uint64_t> last;  // by row index
    Clock::time_point moved_at;
    bool moved = false;  // moved_at is set
    std::uint64_t generation = 0;
  };

  // Every QP row the registry has (zero before any QP: the sums start at
  // 0, so the first QP's counts are an increase), then any others the
  // snapshots bring.
  PortMemory() {
    for (const Stat& s : qp_stat_rows()) row_of(s);
  }

  // The index of row `s`; `hint` is where it usually is (every QP carries
  // the registry's rows in the registry's order), checked before the map.
  std::size_t row_of(const Stat& s, std::size_t hint = SIZE_MAX) {
    if (hint < rows.size() && rows[hint].name == s.name) return hint;
    auto [it, inserted] = index.try_emplace(s.name, rows.size());
    if (inserted) {
      rows.push_back({s.name, s.description, s.kind});
      retired.push_back(0);
    }
    return it->second;
  }

  void retire(const Qp& q) {
    for (std::size_t i = 0; i < q.last.size(); ++i) {
      if (rows[i].kind == StatKind::kCounter) retired[i] += q.last[i];
    }
  }

  std::vector<Row> rows;
  std::unordered_map<std::string, std::size_t> index;
  std::vector<std::uint64_t> retired;  // the counts of QPs gone
  std::unordered_map<std::uint32_t, Qp> qps;
  std::uint64_t generation = 0;
};

Exposition::Exposition(std::size_t max_qps, std::chrono::seconds qp_idle) : max_qps_(max_qps), qp_idle_(qp_idle) {}

Exposition::~Exposition() = default;

std::string Exposition::render(const Snapshot& snapshot, Clock::time_point now) {
  Page page;
  struct Candidate {
    const DeviceSnapshot* dev;
    const QpStats* qp;
    std::uint64_t bytes;    // moved since the previous collection
    std::uint64_t packets;  // the same, to break ties
    Clock::time_point moved_at;
  };
  std::vector<Candidate> candidates;
  std::set<std::string> ports_done;
  qps_seen_ = 0;

  for (const DeviceSnapshot& dev : snapshot.devices) {
    if (!ports_done.insert(dev.port).second) continue;
    const std::vector<Label> port_labels = {{"port", dev.port}};

    for (const Stat& s : dev.device) {
      if (s.scope == StatScope::kQp) continue;  // not a device row; the QPs have their own
      const RowName n = row_name(s.name);
      const bool counter = s.kind == StatKind::kCounter;
      const bool engine = s.scope == StatScope::kEngine;
      page.add(std::string(engine ? "uroce_engine_" : "uroce_port_") + n.base + (counter ? "_total" : ""),
               help_of(s.description, n, engine ? " (the device's engines together)" : ""), s.kind, port_labels,
               n.scale == 1 ? format_value(s.value) : format_value(static_cast<double>(s.value) * n.scale));
      // The drops by parse reason once more as one family with a reason
      // label: PromQL can sum or rank them (rate() of several families
      // at once loses their names, and refuses the clash).
      if (engine && counter && std::string_view(s.name).starts_with("drop_")) {
        page.add("uroce_engine_dropped_packets_total",
                 "malformed RoCEv2 packets dropped, by reason (the rows uroce_engine_drop_<reason>_total, "
                 "labelled)",
                 StatKind::kCounter, {{"port", dev.port}, {"reason", std::string(s.name + 5)}}, format_value(s.value));
      }
    }

    auto& slot = ports_[dev.port];
    if (!slot) slot = std::make_unique<PortMemory>();
    PortMemory& pm = *slot;
    const std::uint64_t generation = ++pm.generation;
    std::array<std::uint64_t, kStateNames.size() + 1> by_state{};
    std::uint64_t send_outstanding = 0;
    std::uint64_t recv_outstanding = 0;
    std::vector<std::uint64_t> values;

    for (const QpStats& qp : dev.qps) {
      values.assign(pm.rows.size(), 0);
      for (std::size_t j = 0; j < qp.counters.size(); ++j) {
        const std::size_t i = pm.row_of(qp.counters[j], j);
        if (i >= values.size()) values.resize(pm.rows.size(), 0);
        values[i] = qp.counters[j].value;
      }
      auto [it, fresh] = pm.qps.try_emplace(qp.qp_num);
      PortMemory::Qp& m = it->second;
      if (!fresh && m.generation == generation) continue;  // the same QPN twice in one snapshot
      ++qps_seen_;
      m.last.resize(values.size(), 0);
      // A counter that went down: the QPN was destroyed and made again.
      bool reused = false;
      for (std::size_t i = 0; i < values.size() && !fresh && !reused; ++i) {
        reused = pm.rows[i].kind == StatKind::kCounter && values[i] < m.last[i];
      }
      if (reused) {
        pm.retire(m);
        m = PortMemory::Qp{};
        fresh = true;
      }
      bool moved = false;
      std::uint64_t bytes = 0;
      std::uint64_t packets = 0;
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (pm.rows[i].kind != StatKind::kCounter) continue;
        const std::uint64_t d = fresh ? values[i] : values[i] - m.last[i];
        moved = moved || d > 0;
        const std::string& name = pm.rows[i].name;
        if (name == "tx_bytes" || name == "rx_bytes") bytes += d;
        if (name == "tx_packets" || name == "rx_packets") packets += d;
      }
      // At the first collection nothing has a past: what a QP counted
      // before it is not movement.
      if (moved && (baseline_taken_ || !fresh)) {
        m.moved = true;
        m.moved_at = now;
      } else {
        bytes = packets = 0;
      }
      m.last = values;
      m.generation = generation;

      by_state[std::min<std::size_t>(static_cast<std::size_t>(qp.state), kStateNames.size())]++;
      send_outstanding += qp.send_outstanding;
      recv_outstanding += qp.recv_outstanding;
      if (m.moved && now - m.moved_at <= qp_idle_) candidates.push_back({&dev, &qp, bytes, packets, m.moved_at});
    }

    // QPs gone since the previous collection: their counts stay in the sums.
    for (auto it = pm.qps.begin(); it != pm.qps.end();) {
      if (it->second.generation == generation) {
        ++it;
        continue;
      }
      pm.retire(it->second);
      it = pm.qps.erase(it);
    }

    for (std::size_t s = 0; s < kStateNames.size(); ++s) {
      page.add("uroce_port_qps", "QPs by state", StatKind::kGauge, {{"port", dev.port}, {"state", kStateNames[s]}},
               format_value(by_state[s]));
    }
    page.add("uroce_port_qp_send_wqes_outstanding", "send WQEs posted and not yet completed, over the port's QPs",
             StatKind::kGauge, port_labels, format_value(send_outstanding));
    page.add("uroce_port_qp_recv_wqes_outstanding",
             "receive WQEs posted and not yet consumed, over the port's QPs (own receive queues)", StatKind::kGauge,
             port_labels, format_value(recv_outstanding));
    std::vector<std::uint64_t> sums = pm.retired;
    for (auto& [qpn, q] : pm.qps) {
      for (std::size_t i = 0; i < q.last.size(); ++i) sums[i] += q.last[i];
    }
    for (std::size_t i = 0; i < pm.rows.size(); ++i) {
      const auto& row = pm.rows[i];
      const RowName n = row_name(row.name);
      if (row.kind == StatKind::kGauge && n.time) continue;  // a sum of times now is no quantity
      const bool counter = row.kind == StatKind::kCounter;
      page.add("uroce_port_qp_" + n.base + (counter ? "_total" : ""),
               help_of(row.description, n,
                       counter ? " (summed over the port's QPs, destroyed ones included)"
                               : " (summed over the port's QPs)"),
               row.kind, port_labels,
               n.scale == 1 ? format_value(sums[i]) : format_value(static_cast<double>(sums[i]) * n.scale));
    }
  }
  baseline_taken_ = true;

  // The busiest first; equals by packets, then the latest to move, then by number.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.packets != b.packets) return a.packets > b.packets;
    if (a.moved_at != b.moved_at) return a.moved_at > b.moved_at;
    if (const int c = compare_values(a.dev->port, b.dev->port); c != 0) return c < 0;
    return a.qp->qp_num < b.qp->qp_num;
  });
  if (candidates.size() > max_qps_) candidates.resize(max_qps_);
  qps_shown_ = candidates.size();

  for (const Candidate& c : candidates) {
    const QpStats& qp = *c.qp;
    const std::vector<Label> labels = qp_series_labels(*c.dev, qp.qp_num);
    std::vector<Label> info = labels;
    info.push_back({"engine", std::to_string(qp.engine)});
    info.push_back({"type", qp_type_name(qp.qp_type)});
    info.push_back({"state", state_name(qp.state)});
    info.push_back({"peer_gid", gid_text(qp.dest_gid)});
    info.push_back({"peer_qpn", std::to_string(qp.dest_qp_num)});
    page.add("uroce_qp_info", "a QP with series of its own: its engine, type, state and peer", StatKind::kGauge,
             std::move(info), "1");
    page.add("uroce_qp_state", "the QP's state: 0 RESET, 1 INIT, 2 RTR, 3 RTS, 4 SQD, 5 SQE, 6 ERR",
             StatKind::kGauge, labels, format_value(static_cast<std::uint64_t>(qp.state)));
    page.add("uroce_qp_send_wqes_outstanding", "send WQEs posted and not yet completed", StatKind::kGauge, labels,
             format_value(std::uint64_t{qp.send_outstanding}));
    page.add("uroce_qp_recv_wqes_outstanding", "receive WQEs posted and not yet consumed (own receive queue)",
             StatKind::kGauge, labels, format_value(std::uint64_t{qp.recv_outstanding}));
    for (const Stat& s : qp.counters) {
      const RowName n = row_name(s.name);
      const bool counter = s.kind == StatKind::kCounter;
      page.add("uroce_qp_" + n.base + (counter ? "_total" : ""), help_of(s.description, n), s.kind, labels,
               n.scale == 1 ? format_value(s.value) : format_value(static_cast<double>(s.value) * n.scale));
    }
    if (qp.congestion.enabled) {
      // Bytes, not bits: Prometheus's base unit (promtool refuses _bits).
      page.add("uroce_qp_cc_rate_bytes_per_second", "DCQCN: the QP's current rate (Rc), bytes a second",
               StatKind::kGauge, labels, format_value(qp.congestion.rate_bps / 8));
      page.add("uroce_qp_cc_target_rate_bytes_per_second", "DCQCN: the QP's target rate (Rt), bytes a second",
               StatKind::kGauge, labels, format_value(qp.congestion.target_bps / 8));
      page.add("uroce_qp_dcqcn_alpha", "DCQCN: alpha, the congestion estimate (0 to 1)", StatKind::kGauge, labels,
               format_value(qp.congestion.alpha));
      page.add("uroce_qp_dcqcn_rate_cuts_total", "DCQCN: CNPs that cut the QP's rate", StatKind::kCounter, labels,
               format_value(qp.congestion.cnps));
    }
  }
  page.add("uroce_metrics_qps_hidden",
           "QPs with no series of their own on this page (idle, or past the most shown); the port sums count them",
           StatKind::kGauge, {}, format_value(static_cast<std::uint64_t>(qps_seen_ - qps_shown_)));

  for (const Extra& e : snapshot.extra) {
    std::string name = sanitize(e.name);
    if (e.type == StatKind::kCounter && (name.size() < 6 || name.substr(name.size() - 6) != "_total")) name += "_total";
    std::vector<Label> labels;
    for (const Label& l : e.labels) labels.push_back({sanitize(l.name), l.value});
    page.add(name, e.help, e.type, std::move(labels), format_value(e.value));
  }
  return page.text();
}

}  // namespace uroce::metrics
