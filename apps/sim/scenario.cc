#include "scenario.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>

#include "common/args.h"

namespace uroce::simapp {
namespace {

using app::usage_error;

Scenario builtin(const std::string& name, int flows) {
  Scenario s;
  s.name = name;
  s.bottleneck.gbps = 10;
  // RED: Kmin 5 KB, Kmax 200 KB as in the DCQCN paper's evaluation; Pmax
  // 20%: with 1% the queue rode at Kmax, where every packet is marked and
  // each flow gets one CNP per interval whatever its rate, so unequal flows
  // kept their ratio (fairness: 11 of 12 seeds within 10% of the fair
  // share; with 20%: 12 of 12, and the queue peaks at ~140 KB, not ~210).
  s.bottleneck.kmin_bytes = 5'000;
  s.bottleneck.kmax_bytes = 200'000;
  s.bottleneck.pmax = 0.2;
  if (name == "fairness") {
    s.flows = flows > 0 ? flows : 2;
    // DCQCN converges slowly (tens of ms at 10 Gb/s): the last half of 60 ms.
    s.duration_us = 60'000;
    // Kmax plus one bandwidth-delay product (10 Gb/s x ~10 us).
    s.bottleneck.buffer_bytes = 200'000 + 12'500;
  } else if (name == "incast") {
    s.flows = flows > 0 ? flows : 8;
    s.duration_us = 10'000;
    s.bottleneck.buffer_bytes = 4'000'000;
  } else if (name == "victim") {
    // An incast of `flows` (16) into the bottleneck, and flow 0's host also
    // sending to an idle port: with PFC alone the pauses the incast brings
    // stop that flow too (head-of-line blocking); DCQCN should spare it.
    s.flows = flows > 0 ? flows : 16;
    // 40 ms: a QP starts at an eighth of line rate (rp_start_rate_percent)
    // and the victim's, never marked, takes ~20 ms to climb to its due;
    // the last half then shows only what pauses take from it.
    s.duration_us = 40'000;
    s.bottleneck.buffer_bytes = 4'000'000;
    s.victim = true;
  } else if (name == "join-leave") {
    s.flows = flows > 0 ? flows : 3;
    // Phases of 50 ms (3 flows): a flow that joins at line rate with
    // alpha = 1 takes ~20 ms to reach its share at 10 Gb/s.
    s.duration_us = 300'000;
    // A flow joins at line rate: room for that burst above Kmax.
    s.bottleneck.buffer_bytes = 1'000'000;
  } else if (name == "loss") {
    // `flows` pairs of hosts on one switch, each with a lossy last hop.
    s.fabric = true;
    s.flows = flows > 0 ? flows : 2;
    s.duration_us = 5'000;
    s.size = 1u << 20;
    s.loss = 0.001;
    s.bottleneck.buffer_bytes = 1'000'000;
  } else if (name == "leafspine") {
    s.fabric = true;
    s.duration_us = 2'000;
    s.size = 256u << 10;
    s.bottleneck.buffer_bytes = 1'000'000;
  } else {
    usage_error("unknown scenario '" + name +
                "' (fairness, incast, join-leave, victim, loss, leafspine, or a file)");
  }
  return s;
}

void set_activity(Scenario& s) {
  s.active.clear();
  const auto n = static_cast<std::uint64_t>(s.flows);
  for (std::uint64_t i = 0; i < n; ++i) {
    if (s.name == "join-leave") {
      // Flow i joins at i * D / (2n) and leaves at D - i * D / (2n).
      const std::uint64_t step = s.duration_us / (2 * n);
      s.active.emplace_back(i * step, s.duration_us - i * step);
    } else {
      s.active.emplace_back(0, s.duration_us);
    }
  }
  if (s.victim) s.active.emplace_back(0, s.duration_us);
}

// `v` as a whole number from `lo` to `hi`; a usage error naming `k` otherwise.
int whole(const std::string& path, const std::string& k, const std::string& v, double x, double lo, double hi) {
  if (x < lo || x > hi || x != static_cast<double>(static_cast<std::int64_t>(x))) {
    usage_error(path + ": " + k + " takes a whole number from " + std::to_string(static_cast<std::int64_t>(lo)) + " to " +
                std::to_string(static_cast<std::int64_t>(hi)) + ", not '" + v + "'");
  }
  return static_cast<int>(x);
}

// A key of the fabric scenarios; false if `k` is none of them.
bool fabric_key(Scenario& s, const std::string& path, const std::string& k, const std::string& v, double x) {
  auto whole = [&](double lo, double hi) { return simapp::whole(path, k, v, x, lo, hi); };
  if (k == "rtt_us") s.rtt_us = x;
  else if (k == "outstanding") s.outstanding = static_cast<std::uint32_t>(whole(1, 256));
  else if (k == "size") s.size = static_cast<std::uint64_t>(whole(1, 64 << 20));
  else if (k == "spines") s.spines = whole(1, 64);
  else if (k == "leaves") s.leaves = whole(1, 64);
  else if (k == "hosts_per_leaf") s.hosts_per_leaf = whole(1, 64);
  else if (k == "fail_link_us") s.fail_link_us = static_cast<std::uint64_t>(x);
  else if (k == "reroute_us") s.reroute_us = static_cast<std::uint64_t>(x);
  else if (k == "slow_link_gbps") s.slow_link_gbps = x;
  else return false;
  return true;
}

std::string trim(const std::string& x) {
  const auto b = x.find_first_not_of(" \t\r");
  return b == std::string::npos ? std::string() : x.substr(b, x.find_last_not_of(" \t\r") - b + 1);
}

// `v` split at commas, each item trimmed; a usage error for an empty item
// or one given twice (each would be the same run, into the same directory).
std::vector<std::string> list(const std::string& path, const std::string& k, const std::string& v) {
  std::vector<std::string> items;
  std::string::size_type from = 0;
  for (;;) {
    const auto comma = v.find(',', from);
    const std::string item = trim(v.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (item.empty()) usage_error(path + ": " + k + ": an empty item in '" + v + "'");
    if (std::find(items.begin(), items.end(), item) != items.end()) {
      usage_error(path + ": " + k + " lists '" + item + "' twice");
    }
    items.push_back(item);
    if (comma == std::string::npos) return items;
    from = comma + 1;
  }
}

// `transport = gbn|sr[,...]`: the first is the scenario's, all of them
// the sweep's.
void transport_key(Scenario& s, const std::string& path, const std::string& v) {
  s.transports = list(path, "transport", v);
  for (const std::string& t : s.transports) {
    if (t != "gbn" && t != "sr") usage_error(path + ": transport takes gbn or sr (or a list of them), not '" + t + "'");
  }
  s.selective_repeat = s.transports.front() == "sr";
}

// `loss = P[,...]`: probabilities below 1; the first is the scenario's.
void loss_key(Scenario& s, const std::string& path, const std::string& v) {
  s.losses.clear();
  for (const std::string& item : list(path, "loss", v)) {
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    if (*end != '\0' || !(x >= 0 && x < 1)) {
      usage_error(path + ": loss takes a probability from 0 to below 1 (or a list of them), not '" + item + "'");
    }
    for (double y : s.losses) {
      if (y == x) usage_error(path + ": loss lists " + item + " twice");
    }
    s.losses.push_back(x);
  }
  s.loss = s.losses.front();
}

Scenario from_file(const std::string& path, int flows) {
  std::ifstream in(path);
  if (!in) usage_error("cannot read scenario file '" + path + "'");
  std::vector<std::pair<std::string, std::string>> kv;
  std::string base = "fairness";
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    line = line.substr(0, line.find('#'));
    const auto eq = line.find('=');
    if (trim(line).empty()) continue;
    if (eq == std::string::npos) usage_error(path + ":" + std::to_string(n) + ": expected 'name = value'");
    const std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (k == "base") base = v;
    else kv.emplace_back(k, v);
  }
  Scenario s = builtin(base, flows);
  for (const auto& [k, v] : kv) {
    // The keys that take words or lists.
    if ((k == "pattern" || k == "loss") && !s.fabric) usage_error(path + ": " + k + " is for base = loss or leafspine");
    if (k == "transport") {
      transport_key(s, path, v);
      continue;
    }
    if (k == "loss") {
      loss_key(s, path, v);
      continue;
    }
    if (k == "cc") {
      if (v != "dcqcn" && v != "delay" && v != "off") usage_error(path + ": cc takes dcqcn, delay or off, not '" + v + "'");
      s.cc = v;
      continue;
    }
    if (k == "dcqcn") {
      if (v.empty()) usage_error(path + ": dcqcn takes on, off or a file");
      s.dcqcn = v;
      continue;
    }
    if (k == "pattern") {
      if (v != "alltoall" && v != "allreduce") usage_error(path + ": pattern takes alltoall or allreduce, not '" + v + "'");
      s.pattern = v;
      continue;
    }
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || x < 0) usage_error(path + ": " + k + " takes a non-negative number, not '" + v + "'");
    if (k == "flows") s.flows = flows > 0 ? flows : static_cast<int>(x);
    else if (k == "duration_us") s.duration_us = static_cast<std::uint64_t>(x);
    else if (k == "sample_us") s.sample_us = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(x));
    else if (k == "gbps") s.gbps = s.bottleneck.gbps = x;
    else if (k == "buffer_kb") s.bottleneck.buffer_bytes = static_cast<std::uint64_t>(x * 1000);
    else if (k == "kmin_kb") s.bottleneck.kmin_bytes = static_cast<std::uint64_t>(x * 1000);
    else if (k == "kmax_kb") s.bottleneck.kmax_bytes = static_cast<std::uint64_t>(x * 1000);
    else if (k == "pmax") s.bottleneck.pmax = x;
    else if (k == "pfc") set_pfc(s, x != 0);
    else if (k == "pfc_xoff_kb") s.pfc.xoff_bytes = static_cast<std::uint64_t>(x * 1000);
    else if (k == "pfc_xon_kb") s.pfc.xon_bytes = static_cast<std::uint64_t>(x * 1000);
    else if (k == "pfc_headroom_kb") s.pfc.headroom_bytes = static_cast<std::uint64_t>(x * 1000);
    else if (k == "pfc_quanta") {
      if (x < 1 || x > 0xffff) usage_error(path + ": pfc_quanta takes 1 to 65535, not '" + v + "'");
      s.pfc.quanta = static_cast<std::uint16_t>(x);
    } else if (k == "dscp") {
      if (x > 63) usage_error(path + ": dscp takes 0 to 63, not '" + v + "'");
      s.dscp = static_cast<std::uint8_t>(x);
      set_pfc(s, s.pfc.enabled);
    } else if (k == "victim") s.victim = x != 0;
    else if (k == "spray") s.spray = whole(path, k, v, x, 1, 255);
    else if (k == "bdp") s.bdp_packets = static_cast<std::uint32_t>(whole(path, k, v, x, 0, 1 << 20));
    else if (!s.fabric || !fabric_key(s, path, k, v, x)) usage_error(path + ": unknown name '" + k + "'");
  }
  s.name = base;
  if (s.pfc.xon_bytes > s.pfc.xoff_bytes) usage_error(path + ": pfc_xon_kb must not exceed pfc_xoff_kb");
  return s;
}

}  // namespace

std::vector<Scenario> sweep_points(const Scenario& s) {
  Scenario one = s;
  one.transports.clear();
  one.losses.clear();
  if (!s.sweep()) return {one};
  const std::vector<std::string> transports = s.transports.empty() ? std::vector<std::string>{transport_name(s)} : s.transports;
  const std::vector<double> losses = s.losses.empty() ? std::vector<double>{s.loss} : s.losses;
  std::vector<Scenario> points;
  for (const std::string& t : transports) {
    for (double loss : losses) {
      one.selective_repeat = t == "sr";
      one.loss = loss;
      points.push_back(one);
    }
  }
  return points;
}

void set_pfc(Scenario& s, bool on) {
  s.pfc.enabled = on;
  s.pfc.lossless = static_cast<std::uint8_t>(1u << (s.dscp >> 3));
}

Scenario load_scenario(const std::string& name, int flows) {
  struct stat st{};
  Scenario s = stat(name.c_str(), &st) == 0 ? from_file(name, flows) : builtin(name, flows);
  set_activity(s);
  return s;
}

}  // namespace uroce::simapp
