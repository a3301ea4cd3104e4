#include "stat/view.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace uroce::statview {
namespace {

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// The table's drops column: the rows whose names say they count frames or
// packets lost (drop_<reason>, <...>_dropped_<...>, a NIC's missed, errors
// and no_mbuf, a full handover ring).
bool is_drop(const std::string& name) {
  return starts_with(name, "drop_") || name.find("dropped") != std::string::npos || ends_with(name, "_missed") ||
         ends_with(name, "_errors") || ends_with(name, "_no_mbuf") || ends_with(name, "_full");
}

double or_zero(std::optional<double> v) { return v.value_or(0); }

// The sum of the rates of `names` that `rows` has; nullopt if it has none.
std::optional<double> sum_rates(const Rated& rows, std::initializer_list<const char*> names) {
  std::optional<double> sum;
  for (const char* n : names) {
    if (const std::optional<double> r = rows.rate(n)) sum = sum.value_or(0) + *r;
  }
  return sum;
}

std::optional<double> gbps(std::optional<double> bytes_per_s) {
  if (!bytes_per_s) return std::nullopt;
  return *bytes_per_s * 8 / 1e9;
}

// 12, 3.4, 12.3k, 4.56M: rates in a table cell.
std::string human(std::optional<double> v) {
  if (!v) return "-";
  const double x = *v;
  char buf[32];
  if (x < 0.005) return "0";
  if (x < 10) std::snprintf(buf, sizeof buf, "%.2f", x);
  else if (x < 1000) std::snprintf(buf, sizeof buf, "%.1f", x);
  else if (x < 1e6) std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else if (x < 1e9) std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2fG", x / 1e9);
  return buf;
}

// "43%", or "-" when unknown.
std::string percent(std::optional<double> fraction) {
  if (!fraction) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", *fraction * 100);
  return buf;
}

std::string fixed2(std::optional<double> v) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", *v);
  return buf;
}

// "name 1.2k, name 3" for the rows of `rows` that pass `keep` and moved.
template <typename Keep>
std::string moving(const Rated& rows, Keep keep, const char* strip = "") {
  std::string out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!keep(rows.name(i)) || or_zero(rows.rates[i]) <= 0) continue;
    std::string name = rows.name(i);
    if (starts_with(name, strip)) name.erase(0, std::char_traits<char>::length(strip));
    out += (out.empty() ? "" : ", ") + name + " " + human(rows.rates[i]);
  }
  return out.empty() ? "0" : out;
}

void counters_and_rates(JsonWriter& w, const Rated& rows) {
  w.open_object("counters");
  for (std::size_t i = 0; i < rows.size(); ++i) w.integer(rows.name(i), rows.values[i]);
  w.close_object().open_object("rates");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows.rates[i]) w.number(rows.name(i), *rows.rates[i]);
  }
  w.close_object();
}

template <typename Keep>
void rates_of(JsonWriter& w, const char* key, const Rated& rows, Keep keep, const char* strip = "") {
  w.open_object(key);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!keep(rows.name(i)) || !rows.rates[i]) continue;
    std::string name = rows.name(i);
    if (starts_with(name, strip)) name.erase(0, std::char_traits<char>::length(strip));
    w.number(name, *rows.rates[i]);
  }
  w.close_object();
}

void optional_number(JsonWriter& w, const char* key, std::optional<double> v) {
  v ? w.number(key, *v) : w.null(key);
}

bool is_nak(const std::string& name) { return starts_with(name, "nak_"); }

// Unix time to the millisecond, as JSON.
std::string unix_seconds(double t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", t);
  return buf;
}

}  // namespace

std::optional<std::uint64_t> Rated::value(const std::string& name) const {
  for (std::size_t i = 0; i < size(); ++i) {
    if ((*names)[i] == name) return values[i];
  }
  return std::nullopt;
}

std::optional<double> Rated::rate(const std::string& name) const {
  for (std::size_t i = 0; i < size(); ++i) {
    if ((*names)[i] == name) return rates[i];
  }
  return std::nullopt;
}

std::set<std::string>& gauges() {
  static std::set<std::string> names;
  return names;
}

void set_gauges(std::vector<std::string> names) { gauges() = std::set<std::string>(names.begin(), names.end()); }

bool is_attribute(const std::string& name) {
  static const std::set<std::string> kAttributes = {
      "qpn",  "engine", "state", "dest_qp_num", "send_outstanding", "recv_outstanding", "dcqcn_active",
      "dcqcn_rate_mbps", "dcqcn_target_mbps", "dcqcn_alpha_ppm", "queues", "engines"};
  return kAttributes.count(name) != 0 || gauges().count(name) != 0;
}

Rated rate_rows(const Rows* before, const Rows& after) {
  Rated r;
  r.names = after.names;
  r.values = after.values;
  r.rates.resize(after.size());
  if (before == nullptr) return r;
  const double dt = after.at - before->at;
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (is_attribute(after.name(i)) || dt <= 0) continue;
    // Mostly the same names both times (a page's shared columns): the same
    // place first.
    std::optional<std::uint64_t> was;
    if (before->names == after.names || (i < before->size() && before->name(i) == after.name(i))) {
      was = before->values[i];
    } else {
      was = before->get(after.name(i));
    }
    if (was && after.values[i] >= *was) r.rates[i] = static_cast<double>(after.values[i] - *was) / dt;
  }
  return r;
}

Report make_report(const Snapshot& a, const Snapshot& b, std::size_t top) {
  Report r;
  r.wall = b.wall;
  r.interval_s = b.at - a.at;
  r.monotonic_start_s = a.at;
  r.monotonic_end_s = b.at;
  std::vector<QpView> all;
  for (const DeviceSnapshot& d : b.devices) {
    const DeviceSnapshot* was = nullptr;
    for (const DeviceSnapshot& e : a.devices) {
      if (e.index == d.index && e.name == d.name) was = &e;
    }
    // The QPs first: a port without the NIC's byte counts shows their payload.
    double tx_payload = 0, rx_payload = 0;
    std::map<std::uint32_t, const QpRow*> before;
    if (was != nullptr) {
      for (const QpRow& q : was->qps) before[q.qpn] = &q;
    }
    for (const QpRow& q : d.qps) {
      QpView v;
      v.device = d.index;
      v.qpn = q.qpn;
      v.state = q.state;
      const auto it = before.find(q.qpn);
      v.rows = rate_rows(it == before.end() ? nullptr : &it->second->rows, q.rows);
      v.peer_qpn = v.rows.value("dest_qp_num");
      if (const auto pid = b.client_pid.find(q.qpn); d.index == 0 && pid != b.client_pid.end()) v.pid = pid->second;
      tx_payload += or_zero(v.rows.rate("tx_bytes"));
      rx_payload += or_zero(v.rows.rate("rx_bytes"));
      v.bytes_per_s = or_zero(v.rows.rate("tx_bytes")) + or_zero(v.rows.rate("rx_bytes"));
      v.packets_per_s = or_zero(v.rows.rate("tx_packets")) + or_zero(v.rows.rate("rx_packets"));
      all.push_back(std::move(v));
    }
    r.qps_total += d.qps_total;

    PortView p;
    p.device = d.index;
    p.name = d.name;
    p.port = rate_rows(was != nullptr ? &was->port : nullptr, d.port);
    p.engine = rate_rows(was != nullptr ? &was->engine : nullptr, d.engine);
    const bool link = p.port.value("link_rx_packets").has_value();
    p.rx_pps = link ? p.port.rate("link_rx_packets") : p.engine.rate("rx_frames");
    p.tx_pps = link ? p.port.rate("link_tx_packets") : p.engine.rate("tx_frames");
    // A NIC's own byte counts when it keeps them: net_ring counts packets
    // only, its byte counts stay 0 while frames pass.
    const auto counts_bytes = [&p](const char* packets, const char* bytes) {
      return or_zero(p.port.rate(packets)) == 0 || or_zero(p.port.rate(bytes)) > 0;
    };
    if (p.port.value("link_rx_bytes") && p.port.rate("link_rx_bytes") &&
        counts_bytes("link_rx_packets", "link_rx_bytes") && counts_bytes("link_tx_packets", "link_tx_bytes")) {
      p.gbps_source = "link";
      p.rx_gbps = gbps(p.port.rate("link_rx_bytes"));
      p.tx_gbps = gbps(p.port.rate("link_tx_bytes"));
    } else if (was != nullptr && !d.qps.empty()) {
      p.gbps_source = "qp_payload";
      p.rx_gbps = gbps(rx_payload);
      p.tx_gbps = gbps(tx_payload);
    }
    // PAUSE and PFC frames: the NIC's counts, else those that reached the
    // stack (a NIC's MAC normally takes them).
    p.pause_rx_per_s = p.port.value("link_rx_pause_frames") ? p.port.rate("link_rx_pause_frames")
                                                            : sum_rates(p.port, {"rx_pause", "rx_pfc"});
    p.pause_tx_per_s = p.port.rate("link_tx_pause_frames");
    if (const auto us = p.port.rate("link_rx_paused_us")) p.paused_fraction = *us / 1e6;
    p.engines = p.engine.value("engines").value_or(0);
    if (const auto busy = p.engine.rate("busy_ns"); busy && p.engines > 0) {
      p.busy_fraction = *busy / 1e9 / static_cast<double>(p.engines);
    }
    p.bursts_per_s = p.engine.rate("busy_polls");
    r.ports.push_back(std::move(p));
  }
  std::sort(all.begin(), all.end(), [](const QpView& x, const QpView& y) {
    if (x.bytes_per_s != y.bytes_per_s) return x.bytes_per_s > y.bytes_per_s;
    if (x.packets_per_s != y.packets_per_s) return x.packets_per_s > y.packets_per_s;
    return x.device != y.device ? x.device < y.device : x.qpn < y.qpn;
  });
  if (all.size() > top) all.resize(top);
  r.qps = std::move(all);
  return r;
}

std::string utc_time(double unix_seconds) {
  const auto secs = static_cast<time_t>(unix_seconds);
  tm t{};
  gmtime_r(&secs, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>((unix_seconds - static_cast<double>(secs)) * 1000));
  return buf;
}

std::string format_table(const Report& r) {
  std::string out;
  char line[1024];
  std::snprintf(line, sizeof line, "uroce-stat: %s pid %ld%s, %s, interval %.2f s, %s\n",
                r.process.empty() ? "?" : r.process.c_str(), r.pid, r.uroced ? " (uroced)" : "", r.socket.c_str(),
                r.interval_s, utc_time(r.wall).c_str());
  out += line;
  std::snprintf(line, sizeof line, "\n%-20s %9s %9s %8s %8s %8s %8s %6s %9s  %s\n", "PORT", "RX pkt/s", "TX pkt/s",
                "RX Gb/s", "TX Gb/s", "PAUSE rx", "PAUSE tx", "PAUSED", "HANDOVER", "DROPS/s");
  out += line;
  for (const PortView& p : r.ports) {
    const std::string name = std::to_string(p.device) + " " + p.name;
    std::string drops = moving(p.port, is_drop);
    const std::string engine_drops = moving(p.engine, is_drop);
    if (drops == "0") drops = engine_drops;
    else if (engine_drops != "0") drops += ", " + engine_drops;
    std::snprintf(line, sizeof line, "%-20.20s %9s %9s %8s %8s %8s %8s %6s %9s  %s\n", name.c_str(), human(p.rx_pps).c_str(),
                  human(p.tx_pps).c_str(), fixed2(p.rx_gbps).c_str(), fixed2(p.tx_gbps).c_str(),
                  human(p.pause_rx_per_s).c_str(), human(p.pause_tx_per_s).c_str(), percent(p.paused_fraction).c_str(),
                  human(p.engine.rate("rx_handed_over")).c_str(), drops.c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "\n%-20s %7s %6s %10s\n", "ENGINES", "COUNT", "BUSY", "BURSTS/s");
  out += line;
  for (const PortView& p : r.ports) {
    const std::string name = std::to_string(p.device) + " " + p.name;
    std::snprintf(line, sizeof line, "%-20.20s %7llu %6s %10s\n", name.c_str(), static_cast<unsigned long long>(p.engines),
                  percent(p.busy_fraction).c_str(), human(p.bursts_per_s).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "\nQPS: the %zu busiest of %zu\n", r.qps.size(), r.qps_total);
  out += line;
  std::snprintf(line, sizeof line, "%3s %8s %s%-5s %-22s %8s %7s %7s %8s %7s %6s %6s %6s %8s %5s %5s  %s\n", "DEV", "QPN",
                r.uroced ? "    PID " : "", "STATE", "PEER GID", "PEER QPN", "TX Gb/s", "RX Gb/s", "MSG/s", "RETX/s", "NAK/s",
                "RNR/s", "CNP/s", "CC Mb/s", "SQ", "RQ", "NAKS/s BY CODE");
  out += line;
  for (const QpView& q : r.qps) {
    std::string pid;
    if (r.uroced) {
      char b[16];
      if (q.pid) std::snprintf(b, sizeof b, "%7ld ", *q.pid);
      else std::snprintf(b, sizeof b, "%7s ", "-");
      pid = b;
    }
    const double naks = [&] {
      double s = 0;
      for (std::size_t i = 0; i < q.rows.size(); ++i) {
        if (is_nak(q.rows.name(i))) s += or_zero(q.rows.rates[i]);
      }
      return s;
    }();
    const std::optional<double> cnps = sum_rates(q.rows, {"cnps_received", "cnps_sent"});
    const std::uint64_t cc = q.rows.value("dcqcn_rate_mbps").value_or(0);
    const auto outstanding = [&](const char* n) {
      const auto v = q.rows.value(n);
      return v ? std::to_string(*v) : std::string("-");
    };
    const std::string peer_qpn = q.peer_qpn ? std::to_string(*q.peer_qpn) : "-";
    std::snprintf(line, sizeof line, "%3d %8u %s%-5s %-22.22s %8s %7s %7s %8s %7s %6s %6s %6s %8s %5s %5s  %s\n", q.device,
                  q.qpn, pid.c_str(), q.state.c_str(), q.peer_gid.empty() ? "-" : q.peer_gid.c_str(), peer_qpn.c_str(),
                  fixed2(gbps(q.rows.rate("tx_bytes"))).c_str(), fixed2(gbps(q.rows.rate("rx_bytes"))).c_str(),
                  human(q.rows.rate("completions")).c_str(), human(q.rows.rate("retransmitted_packets")).c_str(),
                  human(naks).c_str(), human(sum_rates(q.rows, {"rnr_naks_received", "rnr_naks_sent"})).c_str(),
                  human(cnps).c_str(), cc == 0 ? "-" : std::to_string(cc).c_str(), outstanding("send_outstanding").c_str(),
                  outstanding("recv_outstanding").c_str(), moving(q.rows, is_nak, "nak_").c_str());
    out += line;
  }
  return out;
}

std::string format_json(const Report& r) {
  JsonWriter w;
  w.open_object();
  w.text("time", utc_time(r.wall)).raw("unix_time", unix_seconds(r.wall)).number("interval_s", r.interval_s);
  w.number("monotonic_start_s", r.monotonic_start_s).number("monotonic_end_s", r.monotonic_end_s);
  w.open_object("target").text("socket", r.socket).integer("pid", static_cast<std::uint64_t>(r.pid));
  w.text("process", r.process).boolean("uroced", r.uroced).close_object();
  w.open_array("ports");
  for (const PortView& p : r.ports) {
    w.open_object().integer("device", static_cast<std::uint64_t>(p.device)).text("name", p.name);
    optional_number(w, "rx_pps", p.rx_pps);
    optional_number(w, "tx_pps", p.tx_pps);
    optional_number(w, "rx_gbps", p.rx_gbps);
    optional_number(w, "tx_gbps", p.tx_gbps);
    p.gbps_source.empty() ? w.null("gbps_source") : w.text("gbps_source", p.gbps_source);
    optional_number(w, "pause_rx_per_s", p.pause_rx_per_s);
    optional_number(w, "pause_tx_per_s", p.pause_tx_per_s);
    optional_number(w, "paused_fraction", p.paused_fraction);
    optional_number(w, "handed_over_per_s", p.engine.rate("rx_handed_over"));
    optional_number(w, "handed_in_per_s", p.engine.rate("rx_handed_in"));
    w.open_object("drops_per_s");
    for (const Rated* rows : {&p.port, &p.engine}) {
      for (std::size_t i = 0; i < rows->size(); ++i) {
        if (is_drop(rows->name(i)) && rows->rates[i]) w.number(rows->name(i), *rows->rates[i]);
      }
    }
    w.close_object();
    counters_and_rates(w, p.port);
    w.close_object();
  }
  w.close_array().open_array("engines");
  for (const PortView& p : r.ports) {
    w.open_object().integer("device", static_cast<std::uint64_t>(p.device)).text("name", p.name);
    w.integer("engines", p.engines);
    optional_number(w, "busy_fraction", p.busy_fraction);
    optional_number(w, "bursts_per_s", p.bursts_per_s);
    counters_and_rates(w, p.engine);
    w.close_object();
  }
  w.close_array().integer("qps_total", r.qps_total).open_array("qps");
  for (const QpView& q : r.qps) {
    w.open_object().integer("device", static_cast<std::uint64_t>(q.device)).integer("qpn", q.qpn);
    w.text("state", q.state);
    q.type.empty() ? w.null("type") : w.text("type", q.type);
    q.peer_gid.empty() ? w.null("peer_gid") : w.text("peer_gid", q.peer_gid);
    q.peer_qpn ? w.integer("peer_qpn", *q.peer_qpn) : w.null("peer_qpn");
    q.pid ? w.integer("pid", static_cast<std::uint64_t>(*q.pid)) : w.null("pid");
    optional_number(w, "tx_gbps", gbps(q.rows.rate("tx_bytes")));
    optional_number(w, "rx_gbps", gbps(q.rows.rate("rx_bytes")));
    optional_number(w, "msgs_per_s", q.rows.rate("completions"));
    optional_number(w, "retransmits_per_s", q.rows.rate("retransmitted_packets"));
    rates_of(w, "naks_per_s", q.rows, is_nak, "nak_");
    optional_number(w, "rnr_naks_per_s", sum_rates(q.rows, {"rnr_naks_received", "rnr_naks_sent"}));
    optional_number(w, "cnps_received_per_s", q.rows.rate("cnps_received"));
    optional_number(w, "cnps_sent_per_s", q.rows.rate("cnps_sent"));
    const auto attribute = [&](const char* key, const char* name) {
      const auto v = q.rows.value(name);
      v ? w.integer(key, *v) : w.null(key);
    };
    attribute("cc_rate_mbps", "dcqcn_rate_mbps");
    attribute("send_outstanding", "send_outstanding");
    attribute("recv_outstanding", "recv_outstanding");
    counters_and_rates(w, q.rows);
    w.close_object();
  }
  w.close_array().close_object();
  return w.str() + "\n";
}

namespace {

// The rate of numeric field `i` of `after` against `before` over `dt`.
std::optional<double> field_rate(const QpDetail& d, std::size_t i) {
  const std::string& name = d.after.keys[i];
  const Json& v = d.after.items[i];
  const Json* was = d.before.find(name);
  const double dt = d.at_b - d.at_a;
  if (is_attribute(name) || !v.integer || was == nullptr || !was->integer || *v.integer < *was->integer || dt <= 0) {
    return std::nullopt;
  }
  return static_cast<double>(*v.integer - *was->integer) / dt;
}

}  // namespace

std::string format_qp_table(const QpDetail& d) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "QP %u on device %d (%s), interval %.2f s, %s\n%-28s %22s %12s\n", d.qpn, d.device,
                d.device_name.c_str(), d.at_b - d.at_a, utc_time(d.wall).c_str(), "NAME", "VALUE", "PER SECOND");
  out += line;
  for (std::size_t i = 0; i < d.after.keys.size(); ++i) {
    const Json& v = d.after.items[i];
    std::string value = v.is_string() ? v.text : v.integer ? std::to_string(*v.integer) : json_number(v.number);
    const std::optional<double> rate = field_rate(d, i);
    std::snprintf(line, sizeof line, "%-28s %22s %12s\n", d.after.keys[i].c_str(), value.c_str(),
                  rate ? human(rate).c_str() : "");
    out += line;
  }
  return out;
}

std::string format_qp_json(const QpDetail& d) {
  JsonWriter w;
  w.open_object().text("time", utc_time(d.wall)).raw("unix_time", unix_seconds(d.wall)).number("interval_s", d.at_b - d.at_a);
  w.integer("device", static_cast<std::uint64_t>(d.device)).text("device_name", d.device_name).integer("qpn", d.qpn);
  w.open_object("attributes");
  for (std::size_t i = 0; i < d.after.keys.size(); ++i) {
    const Json& v = d.after.items[i];
    if (v.is_string()) w.text(d.after.keys[i], v.text);
    else if (is_attribute(d.after.keys[i]) && v.integer) w.integer(d.after.keys[i], *v.integer);
  }
  w.close_object().open_object("counters");
  for (std::size_t i = 0; i < d.after.keys.size(); ++i) {
    const Json& v = d.after.items[i];
    if (!is_attribute(d.after.keys[i]) && v.integer) w.integer(d.after.keys[i], *v.integer);
  }
  w.close_object().open_object("rates");
  for (std::size_t i = 0; i < d.after.keys.size(); ++i) {
    if (const std::optional<double> rate = field_rate(d, i)) w.number(d.after.keys[i], *rate);
  }
  w.close_object().close_object();
  return w.str() + "\n";
}

}  // namespace uroce::statview
