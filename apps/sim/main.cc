// uroce-sim: congestion scenarios on the simulated switch, on virtual time.
// Senders WRITE continuously through one bottleneck port into one receiver;
// every sample period the flows' delivery rates, the bottleneck's queue,
// marks and drops go to timeseries.csv; summary.json holds the figures the
// scenario is judged by; plot.png draws rates and the queue over time.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cc/dcqcn.h"
#include "common/args.h"
#include "common/text_file.h"
#include "common/work_request.h"
#include "sim/plot.h"
#include "sim/scenario.h"
#include "sim/sim_fabric.h"
#include "verbs/connect.h"

namespace {

using namespace uroce;
using app::usage_error;
using simapp::Scenario;

constexpr const char* kUsage =
    "usage: uroce-sim SCENARIO [--flows N] [--seed S] [--dcqcn on|off|FILE] --out DIR\n"
    "  SCENARIO: fairness (flows start together, default 2), incast (N-to-1, default 8),\n"
    "            join-leave (flows join and leave one by one, default 3), or a file of\n"
    "            'name = value' lines: base (one of the three), flows, duration_us,\n"
    "            sample_us, gbps, buffer_kb, kmin_kb, kmax_kb, pmax\n"
    "  --dcqcn   on (default: conf/dcqcn.conf's values, line rate = the link's), off, or a file\n"
    "  --out     directory for timeseries.csv, summary.json and plot.png\n"
    "Exit status: 0 ok; 1 the run failed (data not intact, a transfer error); 2 bad usage.\n";

// What the command line asks for.
struct Run {
  Scenario sc;
  std::string out;
  std::uint64_t seed = 1;
  std::optional<cc::DcqcnParams> dcqcn;  // nullopt: off
};

// --dcqcn on|off|FILE: conf/dcqcn.conf's defaults, or a file's values over
// them, at the scenario's line rate.
std::optional<cc::DcqcnParams> dcqcn_option(const std::string& arg, const Scenario& sc) {
  if (arg == "off") return std::nullopt;
  cc::DcqcnParams dcqcn;
  if (arg != "on") {
    std::string text;
    if (!app::read_text_file(arg, text)) usage_error("--dcqcn: cannot read '" + arg + "'");
    if (const std::string err = cc::parse_dcqcn_params(text, dcqcn); !err.empty()) usage_error("--dcqcn: " + err);
  }
  dcqcn.line_rate_bps = sc.gbps * 1e9;
  return dcqcn;
}

// Throws std::invalid_argument on bad usage; prints the usage and exits 0
// on -h or --help.
Run parse_command_line(int argc, char** argv) {
  std::string name;
  int flows = 0;
  std::string dcqcn_arg = "on";
  Run run;
  app::ArgReader args(std::vector<std::string>(argv, argv + argc));
  for (std::string a; args.next(a);) {
    if (a == "--flows") flows = std::atoi(args.value("--flows").c_str());
    else if (a == "--seed") run.seed = std::strtoull(args.value("--seed").c_str(), nullptr, 0);
    else if (a == "--out") run.out = args.value("--out");
    else if (a == "--dcqcn") dcqcn_arg = args.value("--dcqcn");
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!a.empty() && a[0] != '-' && name.empty()) name = a;
    else usage_error("unknown argument '" + a + "'");
  }
  if (name.empty()) usage_error("no scenario given");
  if (run.out.empty()) usage_error("no --out DIR given");
  if (flows < 0 || flows > 64) usage_error("--flows takes 1 to 64");
  run.sc = simapp::load_scenario(name, flows);
  run.dcqcn = dcqcn_option(dcqcn_arg, run.sc);
  if (mkdir(run.out.c_str(), 0755) != 0 && errno != EEXIST) {
    usage_error("cannot create --out " + run.out + ": " + std::strerror(errno));
  }
  return run;
}

constexpr std::uint32_t kMsg = 65536;
constexpr std::uint32_t kSlots = 16;

std::uint8_t pattern(std::size_t flow, std::uint64_t msg, std::size_t i) {
  return static_cast<std::uint8_t>(i * 31 + msg * 7 + flow * 101);
}

struct Flow {
  Context* host = nullptr;
  QueuePair* qp = nullptr;
  QueuePair* rqp = nullptr;
  CompletionQueue* cq = nullptr;
  std::uint8_t* buf = nullptr;  // kSlots source slots
  MemoryRegion* mr = nullptr;
  std::uint64_t posted = 0, completed = 0;
  std::uint64_t delivered_prev = 0;
  std::vector<double> rate;  // per sample, b/s
  std::uint64_t delivered_last_half = 0;
};

// The bottleneck's figures over the run, sampled every sample_us.
struct Samples {
  std::vector<double> queue;  // per sample, bytes
  std::uint64_t busy_delivered_bytes = 0, busy_samples = 0;
  std::uint64_t max_queue_last_half = 0;  // the standing queue, after the start-up burst
};

// The scenario on the simulated switch: the receiver on the bottleneck
// port, each sender on a port of its own with one QP connected to one of
// the receiver's.
class ScenarioRun {
 public:
  explicit ScenarioRun(const Run& run) : run_(run), sc_(run.sc), fabric_(run.seed, run.dcqcn ? &*run.dcqcn : nullptr) {}

  bool set_up();
  void run(std::ofstream& csv);
  void drain();
  bool data_intact();

  bool ok() const { return ok_; }
  const std::string& failure() const { return failure_; }
  const std::vector<Flow>& flows() const { return flows_; }
  const Samples& samples() const { return samples_; }
  const sim::EgressStats& bottleneck() { return fabric_.sw.stats(0); }

 private:
  bool add_flow(Flow& x, const sim::EgressConfig& edge);
  void keep_sending(std::size_t f, std::uint64_t now_us);
  void poll(std::size_t f);
  void sample(std::uint64_t t_us, std::ofstream& csv);

  const Run& run_;
  const Scenario& sc_;
  sim::SimFabric fabric_;
  Context* rx_ = nullptr;
  ProtectionDomain* rpd_ = nullptr;
  CompletionQueue* rcq_ = nullptr;
  std::uint8_t* rbuf_ = nullptr;  // kSlots target slots per flow
  MemoryRegion* rmr_ = nullptr;
  std::vector<Flow> flows_;
  Samples samples_;
  bool ok_ = true;
  std::string failure_;
};

bool ScenarioRun::set_up() {
  rx_ = &fabric_.add_host(sc_.bottleneck);
  sim::EgressConfig edge;
  edge.gbps = sc_.gbps;
  edge.buffer_bytes = 64u << 20;
  rpd_ = rx_->alloc_pd();
  rcq_ = rx_->create_cq(4096);
  const std::size_t rbytes = static_cast<std::size_t>(sc_.flows) * kSlots * kMsg;
  rbuf_ = static_cast<std::uint8_t*>(rx_->alloc_buffer(rbytes));
  rmr_ = rpd_->reg_mr(rbuf_, rbytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  flows_.resize(static_cast<std::size_t>(sc_.flows));
  for (Flow& x : flows_) {
    if (!add_flow(x, edge)) {
      std::fprintf(stderr, "uroce-sim: set-up failed: %s%s\n", x.host->last_error().c_str(), rx_->last_error().c_str());
      return false;
    }
  }
  return true;
}

bool ScenarioRun::add_flow(Flow& x, const sim::EgressConfig& edge) {
  x.host = &fabric_.add_host(edge);
  ProtectionDomain* pd = x.host->alloc_pd();
  x.cq = x.host->create_cq(4096);
  QpInitAttr init;
  init.cap = ibv_qp_cap{64, 4, 1, 1, 0};
  init.send_cq = init.recv_cq = x.cq;
  x.qp = pd->create_qp(init);
  init.send_cq = init.recv_cq = rcq_;
  x.rqp = rpd_->create_qp(init);
  x.buf = static_cast<std::uint8_t*>(x.host->alloc_buffer(kSlots * kMsg));
  x.mr = pd->reg_mr(x.buf, kSlots * kMsg, IBV_ACCESS_LOCAL_WRITE);
  ConnectParams params;
  params.mtu = IBV_MTU_4096;
  return x.qp != nullptr && x.rqp != nullptr && x.mr != nullptr && rmr_ != nullptr &&
         connect_rc(x.qp, rx_->gid(), x.rqp->qp_num(), 0x100, 0x200, params) == 0 &&
         connect_rc(x.rqp, x.host->gid(), x.qp->qp_num(), 0x200, 0x100, params) == 0;
}

// Keeps kSlots messages in flight while the flow is on.
void ScenarioRun::keep_sending(std::size_t f, std::uint64_t now_us) {
  Flow& x = flows_[f];
  const bool on = now_us >= sc_.active[f].first && now_us < sc_.active[f].second;
  while (on && x.posted - x.completed < kSlots) {
    const std::uint64_t m = x.posted;
    const auto slot = static_cast<std::uint32_t>(m % kSlots);
    std::uint8_t* src = x.buf + slot * kMsg;
    for (std::uint32_t i = 0; i < kMsg; ++i) src[i] = pattern(f, m, i);
    ibv_sge sge = app::local_sge(src, kMsg, *x.mr);
    ibv_send_wr wr = app::rdma_wr(IBV_WR_RDMA_WRITE, m, sge,
                                  reinterpret_cast<std::uint64_t>(rbuf_ + (f * kSlots + slot) * kMsg), rmr_->rkey);
    ibv_send_wr* bad = nullptr;
    if (x.qp->post_send(&wr, &bad) != 0) break;
    ++x.posted;
  }
}

void ScenarioRun::poll(std::size_t f) {
  Flow& x = flows_[f];
  ibv_wc wc[32];
  for (int k; (k = x.cq->poll(32, wc)) > 0;) {
    for (int i = 0; i < k; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        ok_ = false;
        failure_ = std::string("flow ") + std::to_string(f) + ": " + wc_status_str(wc[i].status);
      }
    }
    x.completed += static_cast<std::uint64_t>(k);
  }
}

// One row per flow at t_us: its rate over the sample, and the bottleneck's
// queue, marks and drops.
void ScenarioRun::sample(std::uint64_t t_us, std::ofstream& csv) {
  const sim::EgressStats& st = fabric_.sw.stats(0);
  const std::uint64_t q = fabric_.sw.queue_bytes(0);
  const bool last_half = t_us > sc_.duration_us / 2;
  samples_.queue.push_back(static_cast<double>(q));
  if (last_half) samples_.max_queue_last_half = std::max(samples_.max_queue_last_half, q);
  std::uint64_t sample_bytes = 0;
  const double sample_s = static_cast<double>(sc_.sample_us) * 1e-6;
  for (std::size_t f = 0; f < flows_.size(); ++f) {
    Flow& x = flows_[f];
    const std::uint64_t d = x.rqp->counter("rx_bytes");
    const double r = static_cast<double>(d - x.delivered_prev) * 8 / sample_s;
    sample_bytes += d - x.delivered_prev;
    x.delivered_prev = d;
    x.rate.push_back(r);
    if (last_half) x.delivered_last_half += static_cast<std::uint64_t>(r * static_cast<double>(sc_.sample_us) * 1e-6 / 8);
    csv << t_us << ',' << f << ',' << static_cast<std::uint64_t>(r) << ',' << d << ',' << q << ',' << st.marked << ','
        << st.dropped << '\n';
  }
  bool any_on = false;
  for (const auto& [start, stop] : sc_.active) any_on = any_on || (t_us > start && t_us <= stop);
  // Utilisation over the last half (as Jain's index), while a flow sends.
  if (any_on && last_half) {
    samples_.busy_delivered_bytes += sample_bytes;
    ++samples_.busy_samples;
  }
}

void ScenarioRun::run(std::ofstream& csv) {
  csv << "t_us,flow,rate_bps,delivered_bytes,queue_bytes,marks,drops\n";
  const std::uint64_t t0 = fabric_.clock.now_ns();
  std::uint64_t next_sample = t0 + sc_.sample_us * 1000;
  const std::uint64_t end = t0 + sc_.duration_us * 1000;
  while (fabric_.clock.now_ns() < end && ok_) {
    const std::uint64_t now_us = (fabric_.clock.now_ns() - t0) / 1000;
    for (std::size_t f = 0; f < flows_.size(); ++f) {
      keep_sending(f, now_us);
      poll(f);
    }
    if (!fabric_.step()) break;
    while (fabric_.clock.now_ns() >= next_sample && next_sample <= end) {
      sample((next_sample - t0) / 1000, csv);
      next_sample += sc_.sample_us * 1000;
    }
  }
}

// Lets the last messages complete.
void ScenarioRun::drain() {
  fabric_.run_until(
      [&] {
        ibv_wc wc[32];
        bool all = true;
        for (Flow& x : flows_) {
          for (int k; (k = x.cq->poll(32, wc)) > 0;) x.completed += static_cast<std::uint64_t>(k);
          all = all && x.completed >= x.posted;
        }
        return all;
      },
      1'000'000'000ull);
}

// Every flow finished, and its last slots hold what it sent last.
bool ScenarioRun::data_intact() {
  bool intact = true;
  for (std::size_t f = 0; f < flows_.size(); ++f) {
    const Flow& x = flows_[f];
    if (x.completed < x.posted) {
      intact = false;
      failure_ = "flow " + std::to_string(f) + " did not finish";
    }
    for (std::uint64_t m = x.posted > kSlots ? x.posted - kSlots : 0; m < x.posted; ++m) {
      const std::uint8_t* dst = rbuf_ + (f * kSlots + m % kSlots) * kMsg;
      for (std::uint32_t i = 0; i < kMsg; i += 97) intact = intact && dst[i] == pattern(f, m, i);
    }
  }
  if (!intact && failure_.empty()) failure_ = "received data differs from what was sent";
  return intact;
}

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

// What summary.json, the plot and the printout report.
struct Results {
  std::vector<double> tput;  // per flow, b/s over the last half
  double jain = 0;
  double utilisation = 0;
  std::vector<Phase> phases;
  sim::EgressStats bottleneck;
  std::uint64_t max_queue_last_half = 0;
  bool intact = false;
};

// Summary over the last half: throughputs, Jain's index, utilisation.
void summarize_last_half(const Scenario& sc, const std::vector<Flow>& fl, const Samples& samples, Results& r) {
  const double half_s = static_cast<double>(sc.duration_us) / 2 * 1e-6;
  for (const Flow& x : fl) r.tput.push_back(static_cast<double>(x.delivered_last_half) * 8 / half_s);
  double sum = 0, sq = 0;
  std::size_t on_last_half = 0;
  for (std::size_t f = 0; f < fl.size(); ++f) {
    if (sc.active[f].second <= sc.duration_us / 2) continue;
    sum += r.tput[f];
    sq += r.tput[f] * r.tput[f];
    ++on_last_half;
  }
  r.jain = sq > 0 ? sum * sum / (static_cast<double>(on_last_half) * sq) : 0;
  r.utilisation = samples.busy_samples > 0
                      ? static_cast<double>(samples.busy_delivered_bytes) * 8 /
                            (static_cast<double>(samples.busy_samples * sc.sample_us) * 1e-6) / (sc.gbps * 1e9)
                      : 0;
  r.max_queue_last_half = samples.max_queue_last_half;
}

// The phase from events[e] to events[e + 1]; false if no flow sends all of
// it or it is too short to judge.
bool judge_phase(const Scenario& sc, const std::vector<Flow>& fl, std::uint64_t from, std::uint64_t to, Phase& ph) {
  ph.from_us = from + (to - from) / 2;
  ph.to_us = to;
  std::vector<double> mean;
  for (std::size_t f = 0; f < fl.size(); ++f) {
    if (sc.active[f].first > from || sc.active[f].second < ph.to_us) continue;
    double sum_rate = 0;
    std::size_t n = 0;
    // Sample i covers ((i) * sample_us, (i + 1) * sample_us].
    for (std::size_t i = ph.from_us / sc.sample_us; i < ph.to_us / sc.sample_us && i < fl[f].rate.size(); ++i, ++n) {
      sum_rate += fl[f].rate[i];
    }
    if (n > 0) mean.push_back(sum_rate / static_cast<double>(n));
  }
  if (mean.empty() || ph.to_us - ph.from_us < 2 * sc.sample_us) return false;
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
  return true;
}

std::vector<Phase> judge_phases(const Scenario& sc, const std::vector<Flow>& fl) {
  std::vector<std::uint64_t> events = {0, sc.duration_us};
  for (const auto& [start, stop] : sc.active) {
    events.push_back(start);
    events.push_back(stop);
  }
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());
  std::vector<Phase> phases;
  for (std::size_t e = 0; e + 1 < events.size(); ++e) {
    if (Phase ph; judge_phase(sc, fl, events[e], events[e + 1], ph)) phases.push_back(ph);
  }
  return phases;
}

void write_summary(const Run& run, const Results& r) {
  const Scenario& sc = run.sc;
  const sim::EgressStats& st = r.bottleneck;
  std::ofstream js(run.out + "/summary.json");
  js << "{\n  \"scenario\": \"" << sc.name << "\",\n  \"flows\": " << sc.flows << ",\n  \"seed\": " << run.seed
     << ",\n  \"dcqcn\": " << (run.dcqcn ? "true" : "false") << ",\n  \"duration_us\": " << sc.duration_us
     << ",\n  \"bottleneck_gbps\": " << sc.bottleneck.gbps << ",\n  \"buffer_bytes\": " << sc.bottleneck.buffer_bytes
     << ",\n  \"throughput_last_half_bps\": [";
  for (std::size_t f = 0; f < r.tput.size(); ++f) js << (f ? ", " : "") << static_cast<std::uint64_t>(r.tput[f]);
  js << "],\n  \"jain_last_half\": " << r.jain << ",\n  \"utilisation\": " << r.utilisation
     << ",\n  \"max_queue_bytes\": " << st.max_queue_bytes << ",\n  \"max_queue_last_half_bytes\": " << r.max_queue_last_half
     << ",\n  \"marks\": " << st.marked << ",\n  \"drops\": " << st.dropped << ",\n  \"phases\": [";
  for (std::size_t i = 0; i < r.phases.size(); ++i) {
    const Phase& ph = r.phases[i];
    js << (i ? "," : "") << "\n    {\"from_us\": " << ph.from_us << ", \"to_us\": " << ph.to_us << ", \"flows\": " << ph.flows
       << ", \"jain\": " << ph.jain << ", \"utilisation\": " << ph.utilisation << ", \"worst_deviation\": " << ph.worst_deviation << "}";
  }
  js << "\n  ],\n  \"data_intact\": " << (r.intact ? "true" : "false") << "\n}\n";
}

void draw(const Run& run, const std::vector<Flow>& fl, const Samples& samples) {
  const Scenario& sc = run.sc;
  std::vector<const std::vector<double>*> rates;
  for (const Flow& x : fl) rates.push_back(&x.rate);
  char title[160];
  std::snprintf(title, sizeof title, "%s, %d flows, DCQCN %s, seed %llu", sc.name.c_str(), sc.flows,
                run.dcqcn ? "on" : "off", static_cast<unsigned long long>(run.seed));
  simapp::PlotSpec spec{title, sc.gbps, sc.sample_us, sc.bottleneck.kmax_bytes, sc.bottleneck.buffer_bytes};
  if (std::string err; !simapp::draw_plot(spec, rates, samples.queue, run.out + "/plot.png", err)) {
    std::fprintf(stderr, "uroce-sim: %s\n", err.c_str());
  }
}

void print_report(const Run& run, const Results& r) {
  const Scenario& sc = run.sc;
  const sim::EgressStats& st = r.bottleneck;
  std::printf("uroce-sim %s: %d flows, DCQCN %s, %llu us\n", sc.name.c_str(), sc.flows, run.dcqcn ? "on" : "off",
              static_cast<unsigned long long>(sc.duration_us));
  for (std::size_t f = 0; f < r.tput.size(); ++f) std::printf("  flow %zu: %.2f Gb/s over the last half\n", f, r.tput[f] / 1e9);
  std::printf("  per phase (last half): flows, worst deviation from the fair share, Jain, utilisation:");
  for (const Phase& ph : r.phases) {
    std::printf(" [%zu %.0f%% %.3f %.2f]", ph.flows, ph.worst_deviation * 100, ph.jain, ph.utilisation);
  }
  std::printf("\n  Jain %.3f, utilisation %.2f, max queue %llu B, marks %llu, drops %llu, data %s\n", r.jain, r.utilisation,
              static_cast<unsigned long long>(st.max_queue_bytes), static_cast<unsigned long long>(st.marked),
              static_cast<unsigned long long>(st.dropped), r.intact ? "intact" : "NOT intact");
}

}  // namespace

int main(int argc, char** argv) {
  Run run;
  try {
    run = parse_command_line(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "uroce-sim: %s (see uroce-sim --help)\n", e.what());
    return 2;
  }
  ScenarioRun sim(run);
  if (!sim.set_up()) return 1;
  std::ofstream csv(run.out + "/timeseries.csv");
  sim.run(csv);
  // Let the last messages complete, then check the data of each flow's
  // last slots.
  sim.drain();
  Results r;
  r.intact = sim.data_intact();
  summarize_last_half(run.sc, sim.flows(), sim.samples(), r);
  r.phases = judge_phases(run.sc, sim.flows());
  r.bottleneck = sim.bottleneck();
  write_summary(run, r);
  draw(run, sim.flows(), sim.samples());
  print_report(run, r);
  if (!sim.ok() || !r.intact) {
    std::fprintf(stderr, "uroce-sim: %s\n", sim.failure().c_str());
    return 1;
  }
  return 0;
}
