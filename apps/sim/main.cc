// uroce-sim: congestion scenarios on the simulated switch, on virtual time.
// Senders WRITE continuously through one bottleneck port into one receiver;
// every sample period the flows' delivery rates, the bottleneck's queue,
// marks and drops go to timeseries.csv; summary.json holds the figures the
// scenario is judged by; plot.png draws rates and the queue over time.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cc/dcqcn.h"
#include "sim/plot.h"
#include "sim/sim_fabric.h"
#include "verbs/connect.h"

namespace {

using namespace uroce;

constexpr const char* kUsage =
    "usage: uroce-sim SCENARIO [--flows N] [--seed S] [--dcqcn on|off|FILE] --out DIR\n"
    "  SCENARIO: fairness (flows start together, default 2), incast (N-to-1, default 8),\n"
    "            join-leave (flows join and leave one by one, default 3), or a file of\n"
    "            'name = value' lines: base (one of the three), flows, duration_us,\n"
    "            sample_us, gbps, buffer_kb, kmin_kb, kmax_kb, pmax\n"
    "  --dcqcn   on (default: conf/dcqcn.conf's values, line rate = the link's), off, or a file\n"
    "  --out     directory for timeseries.csv, summary.json and plot.png\n"
    "Exit status: 0 ok; 1 the run failed (data not intact, a transfer error); 2 bad usage.\n";

struct Scenario {
  std::string name;
  int flows = 2;
  double gbps = 10;
  std::uint64_t duration_us = 20'000;
  std::uint64_t sample_us = 50;
  sim::EgressConfig bottleneck;
  // Per flow: when it starts and stops sending (us).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> active;
};

[[noreturn]] void usage_error(const std::string& m) { throw std::invalid_argument(m); }

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
  } else if (name == "join-leave") {
    s.flows = flows > 0 ? flows : 3;
    // Phases of 50 ms (3 flows): a flow that joins at line rate with
    // alpha = 1 takes ~20 ms to reach its share at 10 Gb/s.
    s.duration_us = 300'000;
    // A flow joins at line rate: room for that burst above Kmax.
    s.bottleneck.buffer_bytes = 1'000'000;
  } else {
    usage_error("unknown scenario '" + name + "' (fairness, incast, join-leave, or a file)");
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
    auto trim = [](const std::string& x) {
      const auto b = x.find_first_not_of(" \t\r");
      return b == std::string::npos ? std::string() : x.substr(b, x.find_last_not_of(" \t\r") - b + 1);
    };
    if (trim(line).empty()) continue;
    if (eq == std::string::npos) usage_error(path + ":" + std::to_string(n) + ": expected 'name = value'");
    const std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (k == "base") base = v;
    else kv.emplace_back(k, v);
  }
  Scenario s = builtin(base, flows);
  for (const auto& [k, v] : kv) {
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
    else usage_error(path + ": unknown name '" + k + "'");
  }
  s.name = base;
  return s;
}

struct Flow {
  Context* host = nullptr;
  QueuePair* qp = nullptr;
  QueuePair* rqp = nullptr;
  CompletionQueue* cq = nullptr;
  std::uint8_t* buf = nullptr;   // 16 source slots
  MemoryRegion* mr = nullptr;
  std::uint64_t posted = 0, completed = 0;
  std::uint64_t delivered_prev = 0;
  std::vector<double> rate;  // per sample, b/s
  std::uint64_t delivered_last_half = 0;
};

constexpr std::uint32_t kMsg = 65536;
constexpr std::uint32_t kSlots = 16;

std::uint8_t pattern(std::size_t flow, std::uint64_t msg, std::size_t i) {
  return static_cast<std::uint8_t>(i * 31 + msg * 7 + flow * 101);
}

}  // namespace

int main(int argc, char** argv) {
  std::string name, out;
  int flows = 0;
  std::uint64_t seed = 1;
  std::optional<cc::DcqcnParams> dcqcn = cc::DcqcnParams{};
  std::string dcqcn_arg = "on";
  Scenario sc;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&](const char* flag) -> std::string {
        if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
        return argv[++i];
      };
      if (a == "--flows") flows = std::atoi(value("--flows").c_str());
      else if (a == "--seed") seed = std::strtoull(value("--seed").c_str(), nullptr, 0);
      else if (a == "--out") out = value("--out");
      else if (a == "--dcqcn") dcqcn_arg = value("--dcqcn");
      else if (a == "-h" || a == "--help") {
        std::fputs(kUsage, stdout);
        return 0;
      } else if (!a.empty() && a[0] != '-' && name.empty()) name = a;
      else usage_error("unknown argument '" + a + "'");
    }
    if (name.empty()) usage_error("no scenario given");
    if (out.empty()) usage_error("no --out DIR given");
    if (flows < 0 || flows > 64) usage_error("--flows takes 1 to 64");
    struct stat st{};
    sc = stat(name.c_str(), &st) == 0 ? from_file(name, flows) : builtin(name, flows);
    set_activity(sc);
    if (dcqcn_arg == "off") {
      dcqcn.reset();
    } else if (dcqcn_arg != "on") {
      std::ifstream in(dcqcn_arg);
      if (!in) usage_error("--dcqcn: cannot read '" + dcqcn_arg + "'");
      std::stringstream text;
      text << in.rdbuf();
      if (const std::string err = cc::parse_dcqcn_params(text.str(), *dcqcn); !err.empty()) usage_error("--dcqcn: " + err);
    }
    if (dcqcn) dcqcn->line_rate_bps = sc.gbps * 1e9;
    if (mkdir(out.c_str(), 0755) != 0 && errno != EEXIST) usage_error("cannot create --out " + out + ": " + std::strerror(errno));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "uroce-sim: %s (see uroce-sim --help)\n", e.what());
    return 2;
  }

  // The receiver on the bottleneck port; senders on ports of their own.
  sim::SimFabric fabric(seed, dcqcn ? &*dcqcn : nullptr);
  Context& rx = fabric.add_host(sc.bottleneck);
  sim::EgressConfig edge;
  edge.gbps = sc.gbps;
  edge.buffer_bytes = 64u << 20;
  ProtectionDomain* rpd = rx.alloc_pd();
  CompletionQueue* rcq = rx.create_cq(4096);
  const std::size_t rbytes = static_cast<std::size_t>(sc.flows) * kSlots * kMsg;
  auto* rbuf = static_cast<std::uint8_t*>(rx.alloc_buffer(rbytes));
  MemoryRegion* rmr = rpd->reg_mr(rbuf, rbytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  std::vector<Flow> fl(static_cast<std::size_t>(sc.flows));
  ConnectParams params;
  params.mtu = IBV_MTU_4096;
  for (std::size_t f = 0; f < fl.size(); ++f) {
    Flow& x = fl[f];
    x.host = &fabric.add_host(edge);
    ProtectionDomain* pd = x.host->alloc_pd();
    x.cq = x.host->create_cq(4096);
    QpInitAttr init;
    init.cap = ibv_qp_cap{64, 4, 1, 1, 0};
    init.send_cq = init.recv_cq = x.cq;
    x.qp = pd->create_qp(init);
    init.send_cq = init.recv_cq = rcq;
    x.rqp = rpd->create_qp(init);
    x.buf = static_cast<std::uint8_t*>(x.host->alloc_buffer(kSlots * kMsg));
    x.mr = pd->reg_mr(x.buf, kSlots * kMsg, IBV_ACCESS_LOCAL_WRITE);
    if (x.qp == nullptr || x.rqp == nullptr || x.mr == nullptr || rmr == nullptr ||
        connect_rc(x.qp, rx.gid(), x.rqp->qp_num(), 0x100, 0x200, params) != 0 ||
        connect_rc(x.rqp, x.host->gid(), x.qp->qp_num(), 0x200, 0x100, params) != 0) {
      std::fprintf(stderr, "uroce-sim: set-up failed: %s%s\n", x.host->last_error().c_str(), rx.last_error().c_str());
      return 1;
    }
  }

  std::ofstream csv(out + "/timeseries.csv");
  csv << "t_us,flow,rate_bps,delivered_bytes,queue_bytes,marks,drops\n";
  const std::uint64_t t0 = fabric.clock.now_ns();
  bool ok = true;
  std::string failure;
  std::vector<double> queue_series;
  std::uint64_t next_sample = t0 + sc.sample_us * 1000;
  const std::uint64_t end = t0 + sc.duration_us * 1000;
  std::uint64_t busy_delivered_bytes = 0, busy_samples = 0;
  std::uint64_t max_queue_last_half = 0;  // the standing queue, after the start-up burst
  while (fabric.clock.now_ns() < end && ok) {
    const std::uint64_t now_us = (fabric.clock.now_ns() - t0) / 1000;
    for (std::size_t f = 0; f < fl.size(); ++f) {
      Flow& x = fl[f];
      // Keep 16 messages in flight while the flow is on.
      const bool on = now_us >= sc.active[f].first && now_us < sc.active[f].second;
      while (on && x.posted - x.completed < kSlots) {
        const std::uint64_t m = x.posted;
        const std::uint32_t slot = static_cast<std::uint32_t>(m % kSlots);
        std::uint8_t* src = x.buf + slot * kMsg;
        for (std::uint32_t i = 0; i < kMsg; ++i) src[i] = pattern(f, m, i);
        ibv_sge sge{reinterpret_cast<std::uint64_t>(src), kMsg, x.mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = m;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(rbuf + (f * kSlots + slot) * kMsg);
        wr.wr.rdma.rkey = rmr->rkey;
        ibv_send_wr* bad = nullptr;
        if (x.qp->post_send(&wr, &bad) != 0) break;
        ++x.posted;
      }
      ibv_wc wc[32];
      for (int k; (k = x.cq->poll(32, wc)) > 0;) {
        for (int i = 0; i < k; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS) {
            ok = false;
            failure = std::string("flow ") + std::to_string(f) + ": " + wc_status_str(wc[i].status);
          }
        }
        x.completed += static_cast<std::uint64_t>(k);
      }
    }
    if (!fabric.step()) break;
    while (fabric.clock.now_ns() >= next_sample && next_sample <= end) {
      const std::uint64_t t_us = (next_sample - t0) / 1000;
      const sim::EgressStats& st = fabric.sw.stats(0);
      const std::uint64_t q = fabric.sw.queue_bytes(0);
      queue_series.push_back(static_cast<double>(q));
      if (t_us > sc.duration_us / 2) max_queue_last_half = std::max(max_queue_last_half, q);
      std::uint64_t sample_bytes = 0;
      for (std::size_t f = 0; f < fl.size(); ++f) {
        Flow& x = fl[f];
        const std::uint64_t d = x.rqp->counter("rx_bytes");
        const double r = static_cast<double>(d - x.delivered_prev) * 8 / (static_cast<double>(sc.sample_us) * 1e-6);
        sample_bytes += d - x.delivered_prev;
        x.delivered_prev = d;
        x.rate.push_back(r);
        if (t_us > sc.duration_us / 2) x.delivered_last_half += static_cast<std::uint64_t>(r * static_cast<double>(sc.sample_us) * 1e-6 / 8);
        csv << t_us << ',' << f << ',' << static_cast<std::uint64_t>(r) << ',' << d << ',' << q << ',' << st.marked
            << ',' << st.dropped << '\n';
      }
      bool any_on = false;
      for (std::size_t f = 0; f < fl.size(); ++f) any_on = any_on || (t_us > sc.active[f].first && t_us <= sc.active[f].second);
      // Utilisation over the last half (as Jain's index), while a flow sends.
      if (any_on && t_us > sc.duration_us / 2) {
        busy_delivered_bytes += sample_bytes;
        ++busy_samples;
      }
      next_sample += sc.sample_us * 1000;
    }
  }
  // Let the last messages complete, then check the data of each flow's
  // last slots.
  fabric.run_until(
      [&] {
        ibv_wc wc[32];
        bool all = true;
        for (Flow& x : fl) {
          for (int k; (k = x.cq->poll(32, wc)) > 0;) x.completed += static_cast<std::uint64_t>(k);
          all = all && x.completed >= x.posted;
        }
        return all;
      },
      1'000'000'000ull);
  bool intact = true;
  for (std::size_t f = 0; f < fl.size(); ++f) {
    const Flow& x = fl[f];
    if (x.completed < x.posted) {
      intact = false;
      failure = "flow " + std::to_string(f) + " did not finish";
    }
    for (std::uint64_t m = x.posted > kSlots ? x.posted - kSlots : 0; m < x.posted; ++m) {
      const std::uint8_t* dst = rbuf + (f * kSlots + m % kSlots) * kMsg;
      for (std::uint32_t i = 0; i < kMsg; i += 97) intact = intact && dst[i] == pattern(f, m, i);
    }
  }
  if (!intact && failure.empty()) failure = "received data differs from what was sent";

  // Summary over the last half: throughputs, Jain's index, utilisation.
  const sim::EgressStats& st = fabric.sw.stats(0);
  const double half_s = static_cast<double>(sc.duration_us) / 2 * 1e-6;
  std::vector<double> tput;
  for (const Flow& x : fl) tput.push_back(static_cast<double>(x.delivered_last_half) * 8 / half_s);
  double sum = 0, sq = 0;
  std::size_t on_last_half = 0;
  for (std::size_t f = 0; f < fl.size(); ++f) {
    if (sc.active[f].second <= sc.duration_us / 2) continue;
    sum += tput[f];
    sq += tput[f] * tput[f];
    ++on_last_half;
  }
  const double jain = sq > 0 ? sum * sum / (static_cast<double>(on_last_half) * sq) : 0;
  const double utilisation = busy_samples > 0 ? static_cast<double>(busy_delivered_bytes) * 8 /
                                                    (static_cast<double>(busy_samples * sc.sample_us) * 1e-6) / (sc.gbps * 1e9)
                                              : 0;
  // Convergence after every change: between two consecutive joins or
  // leaves, over the last half of that phase (as the fairness run's last
  // half), the flows that send the whole phase: Jain's index, the share of
  // the link they fill, and the worst deviation of a flow's mean rate from
  // the fair share of what they delivered together (utilisation says how
  // full the link was; this says how evenly it was shared).
  struct Phase {
    std::uint64_t from_us = 0, to_us = 0;
    std::size_t flows = 0;
    double jain = 0, utilisation = 0, worst_deviation = 0;
  };
  std::vector<std::uint64_t> events = {0, sc.duration_us};
  for (const auto& [start, stop] : sc.active) {
    events.push_back(start);
    events.push_back(stop);
  }
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());
  std::vector<Phase> phases;
  for (std::size_t e = 0; e + 1 < events.size(); ++e) {
    Phase ph;
    ph.from_us = events[e] + (events[e + 1] - events[e]) / 2;
    ph.to_us = events[e + 1];
    std::vector<double> mean;
    for (std::size_t f = 0; f < fl.size(); ++f) {
      if (sc.active[f].first > events[e] || sc.active[f].second < ph.to_us) continue;
      double sum_rate = 0;
      std::size_t n = 0;
      // Sample i covers ((i) * sample_us, (i + 1) * sample_us].
      for (std::size_t i = ph.from_us / sc.sample_us; i < ph.to_us / sc.sample_us && i < fl[f].rate.size(); ++i, ++n) sum_rate += fl[f].rate[i];
      if (n > 0) mean.push_back(sum_rate / static_cast<double>(n));
    }
    if (mean.empty() || ph.to_us - ph.from_us < 2 * sc.sample_us) continue;
    ph.flows = mean.size();
    double total = 0, squares = 0;
    for (double m : mean) {
      total += m;
      squares += m * m;
    }
    const double fair = total / static_cast<double>(mean.size());
    for (double m : mean) ph.worst_deviation = std::max(ph.worst_deviation, fair > 0 ? std::abs(m - fair) / fair : 1.0);
    ph.jain = squares > 0 ? total * total / (static_cast<double>(mean.size()) * squares) : 0;
    ph.utilisation = total / (sc.gbps * 1e9);
    phases.push_back(ph);
  }

  std::ofstream js(out + "/summary.json");
  js << "{\n  \"scenario\": \"" << sc.name << "\",\n  \"flows\": " << sc.flows << ",\n  \"seed\": " << seed
     << ",\n  \"dcqcn\": " << (dcqcn ? "true" : "false") << ",\n  \"duration_us\": " << sc.duration_us
     << ",\n  \"bottleneck_gbps\": " << sc.bottleneck.gbps << ",\n  \"buffer_bytes\": " << sc.bottleneck.buffer_bytes
     << ",\n  \"throughput_last_half_bps\": [";
  for (std::size_t f = 0; f < tput.size(); ++f) js << (f ? ", " : "") << static_cast<std::uint64_t>(tput[f]);
  js << "],\n  \"jain_last_half\": " << jain << ",\n  \"utilisation\": " << utilisation
     << ",\n  \"max_queue_bytes\": " << st.max_queue_bytes << ",\n  \"max_queue_last_half_bytes\": " << max_queue_last_half << ",\n  \"marks\": " << st.marked
     << ",\n  \"drops\": " << st.dropped << ",\n  \"phases\": [";
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const Phase& ph = phases[i];
    js << (i ? "," : "") << "\n    {\"from_us\": " << ph.from_us << ", \"to_us\": " << ph.to_us << ", \"flows\": " << ph.flows
       << ", \"jain\": " << ph.jain << ", \"utilisation\": " << ph.utilisation << ", \"worst_deviation\": " << ph.worst_deviation << "}";
  }
  js << "\n  ],\n  \"data_intact\": " << (intact ? "true" : "false") << "\n}\n";

  std::vector<const std::vector<double>*> rates;
  for (const Flow& x : fl) rates.push_back(&x.rate);
  char title[160];
  std::snprintf(title, sizeof title, "%s, %d flows, DCQCN %s, seed %llu", sc.name.c_str(), sc.flows, dcqcn ? "on" : "off",
                static_cast<unsigned long long>(seed));
  simapp::PlotSpec spec{title, sc.gbps, sc.sample_us, sc.bottleneck.kmax_bytes, sc.bottleneck.buffer_bytes};
  if (std::string err; !simapp::draw_plot(spec, rates, queue_series, out + "/plot.png", err)) {
    std::fprintf(stderr, "uroce-sim: %s\n", err.c_str());
  }

  std::printf("uroce-sim %s: %d flows, DCQCN %s, %llu us\n", sc.name.c_str(), sc.flows, dcqcn ? "on" : "off",
              static_cast<unsigned long long>(sc.duration_us));
  for (std::size_t f = 0; f < tput.size(); ++f) std::printf("  flow %zu: %.2f Gb/s over the last half\n", f, tput[f] / 1e9);
  std::printf("  per phase (last half): flows, worst deviation from the fair share, Jain, utilisation:");
  for (const Phase& ph : phases) std::printf(" [%zu %.0f%% %.3f %.2f]", ph.flows, ph.worst_deviation * 100, ph.jain, ph.utilisation);
  std::printf("\n  Jain %.3f, utilisation %.2f, max queue %llu B, marks %llu, drops %llu, data %s\n", jain, utilisation,
              static_cast<unsigned long long>(st.max_queue_bytes), static_cast<unsigned long long>(st.marked),
              static_cast<unsigned long long>(st.dropped), intact ? "intact" : "NOT intact");
  if (!ok || !intact) {
    std::fprintf(stderr, "uroce-sim: %s\n", failure.c_str());
    return 1;
  }
  return 0;
}
