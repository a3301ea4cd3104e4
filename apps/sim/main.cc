// uroce-sim: congestion scenarios on the simulated switch, on virtual time.
// Senders WRITE continuously through one bottleneck port into one receiver
// (and in the victim scenario one of them also to a port of its own);
// every sample period the flows' delivery rates, the bottleneck's queue,
// marks and drops, and with PFC the pauses each sender took, go to
// timeseries.csv; summary.json holds the figures the scenario is judged by
// and what a plot of the run needs (tools/plot.py sim DIR draws rates, the
// queue and pauses over time from the two).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cc/dcqcn.h"
#include "cc/delay.h"
#include "common/args.h"
#include "common/text_file.h"
#include "common/work_request.h"
#include "device/sim_fabric.h"
#include "verbs/connect.h"

#include "fabric_run.h"
#include "scenario.h"
#include "sweep.h"

namespace {

using namespace uroce;
using app::usage_error;
using simapp::Scenario;

constexpr const char* kUsage =
    "usage: uroce-sim SCENARIO [--flows N] [--seed S] [--cc dcqcn|delay|off] [--dcqcn on|off|FILE]\n"
    "                [--delay FILE] [--pfc on|off] --out DIR\n"
    "  SCENARIO: fairness (flows start together, default 2), incast (N-to-1, default 8),\n"
    "            join-leave (flows join and leave one by one, default 3), victim (an\n"
    "            N-to-1 incast, default 16, plus a flow from flow 0's host to an idle port),\n"
    "            or a file of 'name = value' lines: base (one of the four), flows,\n"
    "            duration_us, sample_us, gbps, buffer_kb, kmin_kb, kmax_kb, pmax, dscp,\n"
    "            pfc (0|1), pfc_xoff_kb, pfc_xon_kb, pfc_headroom_kb, pfc_quanta, victim (0|1),\n"
    "            dcqcn (on|off|FILE, as --dcqcn), cc (dcqcn|delay|off, as --cc), transport (gbn|sr),\n"
    "            spray, bdp\n"
    "  On a fabric: loss (N pairs of hosts, default 2, a lossy last hop), leafspine (a\n"
    "            collective on a leaf-spine fabric); their files also take rtt_us, size, loss,\n"
    "            (loss) outstanding, (leafspine) spines, leaves, hosts_per_leaf,\n"
    "            pattern (alltoall|allreduce), fail_link_us, reroute_us, slow_link_gbps\n"
    "            (docs/congestion.md)\n"
    "  Sweeps: transport (and on a fabric loss) may list values, e.g. 'transport = gbn,sr' and\n"
    "            'loss = 0,0.001,0.01': one run per combination, each into DIR/TRANSPORT[-lossP],\n"
    "            and the table of them in DIR/sweep.csv and DIR/sweep.json\n"
    "  --cc      the congestion control: dcqcn (default; its values from --dcqcn), delay\n"
    "            (conf/delay.conf's values, or --delay FILE's; line rate = the link's), or off;\n"
    "            over the file's cc\n"
    "  --dcqcn   on (default: conf/dcqcn.conf's values, line rate = the link's), off, or a file;\n"
    "            over the scenario file's dcqcn\n"
    "  --pfc     PFC on the switch for the data's priority (DSCP 26: priority 3); default off\n"
    "  --out     directory for timeseries.csv and summary.json (tools/plot.py sim DIR plots them)\n"
    "Exit status: 0 ok; 1 the run failed (data not intact, a transfer error, the transport\n"
    "            refused the scenario's options; a sweep: any of its runs); 2 bad usage.\n";

// What the command line asks for.
struct Run {
  Scenario sc;
  std::string out;
  std::uint64_t seed = 1;
  std::optional<cc::DcqcnParams> dcqcn;  // nullopt: off
  std::optional<cc::DelayParams> delay;  // cc = delay; nullopt: off (never with dcqcn)
  // The congestion control by name: "dcqcn", "delay" or "off".
  const char* cc_name() const { return dcqcn ? "dcqcn" : delay ? "delay" : "off"; }
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
  std::string dcqcn_arg;  // empty: the file's, or on
  std::string cc_arg;     // empty: the file's, or dcqcn
  std::string delay_arg;  // --delay FILE
  std::string pfc_arg;
  Run run;
  app::ArgReader args(std::vector<std::string>(argv, argv + argc));
  for (std::string a; args.next(a);) {
    if (a == "--flows") flows = std::atoi(args.value("--flows").c_str());
    else if (a == "--seed") run.seed = std::strtoull(args.value("--seed").c_str(), nullptr, 0);
    else if (a == "--out") run.out = args.value("--out");
    else if (a == "--dcqcn") dcqcn_arg = args.value("--dcqcn");
    else if (a == "--cc") cc_arg = args.value("--cc");
    else if (a == "--delay") delay_arg = args.value("--delay");
    else if (a == "--pfc") pfc_arg = args.value("--pfc");
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!a.empty() && a[0] != '-' && name.empty()) name = a;
    else usage_error("unknown argument '" + a + "'");
  }
  if (name.empty()) usage_error("no scenario given");
  if (run.out.empty()) usage_error("no --out DIR given");
  if (flows < 0 || flows > 64) usage_error("--flows takes 1 to 64");
  if (!pfc_arg.empty() && pfc_arg != "on" && pfc_arg != "off") usage_error("--pfc takes on or off, not '" + pfc_arg + "'");
  run.sc = simapp::load_scenario(name, flows);
  if (!pfc_arg.empty()) simapp::set_pfc(run.sc, pfc_arg == "on");
  if (!cc_arg.empty() && cc_arg != "dcqcn" && cc_arg != "delay" && cc_arg != "off") {
    usage_error("--cc takes dcqcn, delay or off, not '" + cc_arg + "'");
  }
  if (cc_arg.empty()) cc_arg = run.sc.cc.empty() ? "dcqcn" : run.sc.cc;
  if (cc_arg != "dcqcn" && !dcqcn_arg.empty() && dcqcn_arg != "off") {
    usage_error("--dcqcn " + dcqcn_arg + " with cc = " + cc_arg + ": DCQCN runs only with cc = dcqcn");
  }
  if (dcqcn_arg.empty()) dcqcn_arg = run.sc.dcqcn.empty() ? "on" : run.sc.dcqcn;
  if (cc_arg == "dcqcn") run.dcqcn = dcqcn_option(dcqcn_arg, run.sc);
  if (!delay_arg.empty() && cc_arg != "delay") {
    usage_error("--delay " + delay_arg + " with cc = " + cc_arg + ": its values are for cc = delay");
  }
  if (cc_arg == "delay") {
    // conf/delay.conf's defaults (or --delay's file) at the scenario's line rate.
    run.delay.emplace();
    if (!delay_arg.empty()) {
      std::string text;
      if (!app::read_text_file(delay_arg, text)) usage_error("--delay: cannot read '" + delay_arg + "'");
      if (const std::string err = cc::parse_delay_params(text, *run.delay); !err.empty()) {
        usage_error("--delay " + delay_arg + ": " + err);
      }
    }
    run.delay->line_rate_bps = run.sc.gbps * 1e9;
  }
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

// A host on the switch: host i is on port i; host 0 is the bottleneck's.
struct Host {
  Context* ctx = nullptr;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
};

struct Flow {
  std::size_t src = 0, dst = 0;  // hosts
  QueuePair* qp = nullptr;
  QueuePair* rqp = nullptr;
  std::uint8_t* buf = nullptr;  // kSlots source slots
  MemoryRegion* mr = nullptr;
  std::uint8_t* rbuf = nullptr;  // kSlots target slots at dst
  MemoryRegion* rmr = nullptr;
  std::uint64_t posted = 0, completed = 0;
  std::deque<std::uint64_t> posted_ns;  // of the messages in flight, in posting order
  std::uint64_t delivered_prev = 0;
  std::vector<double> rate;  // per sample, b/s
  std::uint64_t delivered_last_half = 0;
};

// Every message's flow completion time (post to completion) and the
// payload of the completed ones, each compared with what was sent.
struct Completions {
  std::vector<double> fct_us;
  std::uint64_t bytes = 0;
  std::uint64_t last_ns = 0;  // the last completion
  bool intact = true;
};

// The bottleneck's figures over the run, sampled every sample_us.
struct Samples {
  std::uint64_t busy_delivered_bytes = 0, busy_samples = 0;
  std::uint64_t max_queue_last_half = 0;  // the standing queue, after the start-up burst
};

// The scenario on the simulated switch: the receiver on the bottleneck
// port, each sender on a port of its own with one QP connected to one of
// the receiver's (the victim flow: from flow 0's host to a host of its own).
class ScenarioRun {
 public:
  explicit ScenarioRun(const Run& run) : run_(run), sc_(run.sc), fabric_(run.seed, run.dcqcn ? &*run.dcqcn : nullptr, run.delay ? &*run.delay : nullptr) {
    fabric_.sw.set_pfc(sc_.pfc);
  }

  bool set_up();
  void run(std::ofstream& csv);
  void drain();
  bool data_intact();

  bool ok() const { return ok_; }
  bool refused() const { return refused_; }
  const std::string& failure() const { return failure_; }
  const Completions& completions() const { return done_; }
  std::uint64_t start_ns() const { return t0_; }
  const std::vector<Flow>& flows() const { return flows_; }
  const Samples& samples() const { return samples_; }
  const sim::EgressStats& bottleneck() { return fabric_.sw.stats(0); }
  sim::SimSwitch& sw() { return fabric_.sw; }
  std::size_t hosts() const { return hosts_.size(); }
  // Senders: the hosts of flows 0 to N-1.
  std::size_t senders() const { return static_cast<std::size_t>(sc_.flows); }

 private:
  Host add_host(const sim::EgressConfig& egress);
  bool add_flow(Flow& x);
  void keep_sending(std::size_t f, std::uint64_t now_us);
  void poll(std::size_t h);
  std::size_t flow_of(std::size_t h, std::uint32_t qpn) const;
  void sample(std::uint64_t t_us, std::ofstream& csv);

  const Run& run_;
  const Scenario& sc_;
  device::SimFabric fabric_;
  std::vector<Host> hosts_;
  std::vector<Flow> flows_;
  Samples samples_;
  Completions done_;
  std::uint64_t t0_ = 0;
  bool ok_ = true, refused_ = false;
  std::string failure_;
};

Host ScenarioRun::add_host(const sim::EgressConfig& egress) {
  Host h;
  h.ctx = &fabric_.add_host(egress);
  h.pd = h.ctx->alloc_pd();
  h.cq = h.ctx->create_cq(4096);
  return h;
}

bool ScenarioRun::set_up() {
  hosts_.push_back(add_host(sc_.bottleneck));
  sim::EgressConfig edge;
  edge.gbps = sc_.gbps;
  edge.buffer_bytes = 64u << 20;
  // Incast flow f from host f + 1 to host 0; the victim from host 1 to the
  // last host.
  for (int f = 0; f < sc_.flows; ++f) hosts_.push_back(add_host(edge));
  if (sc_.victim) hosts_.push_back(add_host(edge));
  flows_.resize(static_cast<std::size_t>(sc_.flows) + (sc_.victim ? 1 : 0));
  for (std::size_t f = 0; f < flows_.size(); ++f) {
    Flow& x = flows_[f];
    const bool victim = f == static_cast<std::size_t>(sc_.flows);
    x.src = victim ? 1 : f + 1;
    x.dst = victim ? hosts_.size() - 1 : 0;
    if (!add_flow(x)) {
      if (!refused_) failure_ = "set-up failed: " + hosts_[x.src].ctx->last_error() + hosts_[x.dst].ctx->last_error();
      std::fprintf(stderr, "uroce-sim: %s\n", failure_.c_str());
      return false;
    }
  }
  return true;
}

bool ScenarioRun::add_flow(Flow& x) {
  const Host& from = hosts_[x.src];
  const Host& to = hosts_[x.dst];
  QpInitAttr init;
  init.cap = ibv_qp_cap{64, 4, 1, 1, 0};
  init.send_cq = init.recv_cq = from.cq;
  x.qp = from.pd->create_qp(init);
  init.send_cq = init.recv_cq = to.cq;
  x.rqp = to.pd->create_qp(init);
  x.buf = static_cast<std::uint8_t*>(from.ctx->alloc_buffer(kSlots * kMsg));
  x.mr = from.pd->reg_mr(x.buf, kSlots * kMsg, IBV_ACCESS_LOCAL_WRITE);
  x.rbuf = static_cast<std::uint8_t*>(to.ctx->alloc_buffer(kSlots * kMsg));
  x.rmr = to.pd->reg_mr(x.rbuf, kSlots * kMsg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ConnectParams params;
  params.mtu = IBV_MTU_4096;
  params.traffic_class = static_cast<std::uint8_t>(sc_.dscp << 2);
  params.transport.selective_repeat = sc_.selective_repeat;
  params.transport.spray_paths = static_cast<std::uint8_t>(sc_.spray);
  params.transport.bdp_packets = sc_.bdp_packets;
  if (x.qp == nullptr || x.rqp == nullptr || x.mr == nullptr || x.rmr == nullptr) return false;
  int err = connect_rc(x.qp, to.ctx->gid(), x.rqp->qp_num(), 0x100, 0x200, params);
  if (err == 0) err = connect_rc(x.rqp, from.ctx->gid(), x.qp->qp_num(), 0x200, 0x100, params);
  if (err != 0 && (sc_.selective_repeat || sc_.spray != 1 || sc_.bdp_packets != 0)) {
    // As the fabric scenarios say it (fabric_run.cc).
    refused_ = true;
    failure_ = std::string("the transport refuses transport = ") + simapp::transport_name(sc_) + ", spray = " +
               std::to_string(sc_.spray) + ", bdp = " + std::to_string(sc_.bdp_packets) + ": " + std::strerror(err);
  }
  return err == 0;
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
    ibv_send_wr wr = app::rdma_wr(IBV_WR_RDMA_WRITE, m, sge, reinterpret_cast<std::uint64_t>(x.rbuf + slot * kMsg),
                                  x.rmr->rkey);
    ibv_send_wr* bad = nullptr;
    if (x.qp->post_send(&wr, &bad) != 0) break;
    ++x.posted;
    x.posted_ns.push_back(fabric_.clock.now_ns());
  }
}

// Completions of host h's QPs, counted to their flows.
void ScenarioRun::poll(std::size_t h) {
  ibv_wc wc[32];
  for (int k; (k = hosts_[h].cq->poll(32, wc)) > 0;) {
    for (int i = 0; i < k; ++i) {
      const std::size_t f = flow_of(h, wc[i].qp_num);
      if (wc[i].status != IBV_WC_SUCCESS) {
        ok_ = false;
        failure_ = std::string("flow ") + std::to_string(f) + ": " + wc_status_str(wc[i].status);
      }
      if (f >= flows_.size()) continue;
      Flow& x = flows_[f];
      ++x.completed;
      if (wc[i].status != IBV_WC_SUCCESS || x.posted_ns.empty()) continue;
      // RC completes in posting order: this is the oldest message in
      // flight, and its slot is not reused before this completion; all of
      // it must be at the receiver.
      const std::uint64_t now = fabric_.clock.now_ns();
      done_.fct_us.push_back(static_cast<double>(now - x.posted_ns.front()) / 1000);
      x.posted_ns.pop_front();
      const std::size_t at = (wc[i].wr_id % kSlots) * kMsg;
      if (std::memcmp(x.buf + at, x.rbuf + at, kMsg) != 0) {
        done_.intact = false;
        failure_ = "flow " + std::to_string(f) + ": received data differs from what was sent";
      }
      done_.bytes += kMsg;
      done_.last_ns = now;
    }
  }
}

std::size_t ScenarioRun::flow_of(std::size_t h, std::uint32_t qpn) const {
  for (std::size_t f = 0; f < flows_.size(); ++f) {
    if (flows_[f].src == h && flows_[f].qp->qp_num() == qpn) return f;
  }
  return flows_.size();
}

// One row per flow at t_us: its rate over the sample, the bottleneck's
// queue, marks and drops, and the PFC pauses its sender took (XOFF frames
// and paused time, since the start).
void ScenarioRun::sample(std::uint64_t t_us, std::ofstream& csv) {
  sim::SimSwitch& sw = fabric_.sw;
  const sim::EgressStats& st = sw.stats(0);
  const std::uint64_t q = sw.queue_bytes(0);
  const bool last_half = t_us > sc_.duration_us / 2;
  if (last_half) samples_.max_queue_last_half = std::max(samples_.max_queue_last_half, q);
  std::uint64_t sample_bytes = 0;
  const double sample_s = static_cast<double>(sc_.sample_us) * 1e-6;
  for (std::size_t f = 0; f < flows_.size(); ++f) {
    Flow& x = flows_[f];
    const std::uint64_t d = x.rqp->counter("rx_bytes");
    const double r = static_cast<double>(d - x.delivered_prev) * 8 / sample_s;
    if (x.dst == 0) sample_bytes += d - x.delivered_prev;
    x.delivered_prev = d;
    x.rate.push_back(r);
    if (last_half) x.delivered_last_half += static_cast<std::uint64_t>(r * static_cast<double>(sc_.sample_us) * 1e-6 / 8);
    const int port = static_cast<int>(x.src);
    csv << t_us << ',' << f << ',' << static_cast<std::uint64_t>(r) << ',' << d << ',' << q << ',' << st.marked << ','
        << st.dropped << ',' << sw.pfc_stats(port).xoff_sent << ',' << sw.paused_ns(port) / 1000 << '\n';
  }
  bool any_on = false;
  for (const auto& [start, stop] : sc_.active) any_on = any_on || (t_us > start && t_us <= stop);
  // Utilisation of the bottleneck over the last half (as Jain's index),
  // while a flow sends.
  if (any_on && last_half) {
    samples_.busy_delivered_bytes += sample_bytes;
    ++samples_.busy_samples;
  }
}

void ScenarioRun::run(std::ofstream& csv) {
  csv << "t_us,flow,rate_bps,delivered_bytes,queue_bytes,marks,drops,pauses,paused_us\n";
  const std::uint64_t t0 = fabric_.clock.now_ns();
  t0_ = t0;
  std::uint64_t next_sample = t0 + sc_.sample_us * 1000;
  const std::uint64_t end = t0 + sc_.duration_us * 1000;
  while (fabric_.clock.now_ns() < end && ok_) {
    const std::uint64_t now_us = (fabric_.clock.now_ns() - t0) / 1000;
    for (std::size_t f = 0; f < flows_.size(); ++f) keep_sending(f, now_us);
    for (std::size_t h = 1; h <= senders(); ++h) poll(h);
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
        bool all = true;
        for (std::size_t h = 1; h <= senders(); ++h) poll(h);
        for (const Flow& x : flows_) all = all && x.completed >= x.posted;
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
      const std::uint8_t* dst = x.rbuf + (m % kSlots) * kMsg;
      for (std::uint32_t i = 0; i < kMsg; i += 97) intact = intact && dst[i] == pattern(f, m, i);
    }
  }
  intact = intact && done_.intact;
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

// What summary.json and the printout report.
struct Results {
  std::vector<double> tput;  // per flow, b/s over the last half
  double jain = 0;
  double utilisation = 0;
  std::vector<Phase> phases;
  sim::EgressStats bottleneck;
  std::uint64_t max_queue_last_half = 0;
  bool intact = false;
  // PFC, per sender (flow f's host): XOFF frames it was sent, time paused.
  std::vector<std::uint64_t> pauses, paused_us;
  std::uint64_t pauses_total = 0, headroom_drops = 0, max_ingress_bytes = 0, headroom_bytes = 0;
  double victim_bps = -1;  // the victim flow's rate over the last half; -1: none
  std::vector<std::size_t> sender;  // per flow, its sending host
  // Over the whole run, as the fabric scenarios': payload of completed
  // messages per second from the start to the last completion, each
  // message's completion time, packets the senders resent.
  double goodput_bps = 0;
  double fct_p50_us = 0, fct_p99_us = 0, fct_max_us = 0;
  std::uint64_t transfers = 0, retransmitted = 0;
};

void summarize_completions(ScenarioRun& run, Results& r) {
  const Completions& c = run.completions();
  const double elapsed_s = c.last_ns > run.start_ns() ? static_cast<double>(c.last_ns - run.start_ns()) * 1e-9 : 0;
  r.goodput_bps = elapsed_s > 0 ? static_cast<double>(c.bytes) * 8 / elapsed_s : 0;
  r.fct_p50_us = simapp::percentile(c.fct_us, 0.5);
  r.fct_p99_us = simapp::percentile(c.fct_us, 0.99);
  r.fct_max_us = simapp::percentile(c.fct_us, 1.0);
  r.transfers = c.fct_us.size();
  for (const Flow& x : run.flows()) r.retransmitted += x.qp->counter("retransmitted_packets");
}

// Summary over the last half: throughputs, Jain's index, utilisation.
void summarize_last_half(const Scenario& sc, const std::vector<Flow>& fl, const Samples& samples, Results& r) {
  const double half_s = static_cast<double>(sc.duration_us) / 2 * 1e-6;
  for (const Flow& x : fl) r.tput.push_back(static_cast<double>(x.delivered_last_half) * 8 / half_s);
  double sum = 0, sq = 0;
  std::size_t on_last_half = 0;
  for (std::size_t f = 0; f < fl.size(); ++f) {
    if (sc.active[f].second <= sc.duration_us / 2 || fl[f].dst != 0) continue;
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
  if (sc.victim) r.victim_bps = r.tput.back();
}

void summarize_pfc(ScenarioRun& run, Results& r) {
  sim::SimSwitch& sw = run.sw();
  for (std::size_t h = 1; h <= run.senders(); ++h) {
    const sim::PfcStats& p = sw.pfc_stats(static_cast<int>(h));
    r.pauses.push_back(p.xoff_sent);
    r.paused_us.push_back(sw.paused_ns(static_cast<int>(h)) / 1000);
    r.pauses_total += p.xoff_sent;
    r.headroom_drops += p.headroom_drops;
    r.max_ingress_bytes = std::max(r.max_ingress_bytes, p.max_ingress_bytes);
  }
  r.headroom_bytes = sw.pfc_headroom(1);  // the senders' links are all alike
}

// The phase from events[e] to events[e + 1]; false if no flow sends all of
// it or it is too short to judge.
bool judge_phase(const Scenario& sc, const std::vector<Flow>& fl, std::uint64_t from, std::uint64_t to, Phase& ph) {
  ph.from_us = from + (to - from) / 2;
  ph.to_us = to;
  std::vector<double> mean;
  for (std::size_t f = 0; f < fl.size(); ++f) {
    if (sc.active[f].first > from || sc.active[f].second < ph.to_us || fl[f].dst != 0) continue;
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
  char title[160];
  std::snprintf(title, sizeof title, "%s, %d flows, %s%s%s, seed %llu", sc.name.c_str(), sc.flows,
                run.dcqcn ? "DCQCN on" : run.delay ? "delay-based cc" : "DCQCN off", sc.pfc.enabled ? ", PFC on" : "", sc.selective_repeat ? ", sr" : "",
                static_cast<unsigned long long>(run.seed));
  // What a plot needs beyond the figures: its title, the sample period (the
  // CSV's rows), Kmax, the victim flow's name, each flow's sending host (the
  // share of the senders' time paused counts each host once).
  js << "{\n  \"scenario\": \"" << sc.name << "\",\n  \"title\": \"" << title << "\",\n  \"flows\": " << sc.flows
     << ",\n  \"seed\": " << run.seed << ",\n  \"sample_us\": " << sc.sample_us
     << ",\n  \"kmax_bytes\": " << sc.bottleneck.kmax_bytes << ",\n  \"last_flow_name\": \"" << (sc.victim ? "victim" : "")
     << "\",\n  \"flow_sender\": [";
  for (std::size_t f = 0; f < r.sender.size(); ++f) js << (f ? ", " : "") << r.sender[f];
  js << "]"
     << ",\n  \"dcqcn\": " << (run.dcqcn ? "true" : "false") << ",\n  \"cc\": \"" << run.cc_name()
     << "\",\n  \"duration_us\": " << sc.duration_us
     << ",\n  \"bottleneck_gbps\": " << sc.bottleneck.gbps << ",\n  \"buffer_bytes\": " << sc.bottleneck.buffer_bytes
     << ",\n  \"throughput_last_half_bps\": [";
  for (std::size_t f = 0; f < r.tput.size(); ++f) js << (f ? ", " : "") << static_cast<std::uint64_t>(r.tput[f]);
  js << "],\n  \"jain_last_half\": " << r.jain << ",\n  \"utilisation\": " << r.utilisation
     << ",\n  \"max_queue_bytes\": " << st.max_queue_bytes << ",\n  \"max_queue_last_half_bytes\": " << r.max_queue_last_half
     << ",\n  \"marks\": " << st.marked << ",\n  \"drops\": " << st.dropped;
  // The transport and what it made of the run (the fabric scenarios' names).
  js << ",\n  \"transport\": \"" << simapp::transport_name(sc) << "\",\n  \"spray\": " << sc.spray
     << ",\n  \"bdp_packets\": " << sc.bdp_packets << ",\n  \"goodput_bps\": " << static_cast<std::uint64_t>(r.goodput_bps)
     << ",\n  \"transfers\": " << r.transfers << ",\n  \"fct_p50_us\": " << r.fct_p50_us << ",\n  \"fct_p99_us\": "
     << r.fct_p99_us << ",\n  \"fct_max_us\": " << r.fct_max_us << ",\n  \"retransmitted_packets\": " << r.retransmitted;
  // PFC: the switch's thresholds, and per sender (flow f's host) the XOFF
  // frames it was sent and the time it was paused, over the run.
  js << ",\n  \"pfc\": " << (sc.pfc.enabled ? "true" : "false") << ",\n  \"pfc_xoff_bytes\": " << sc.pfc.xoff_bytes
     << ",\n  \"pfc_xon_bytes\": " << sc.pfc.xon_bytes << ",\n  \"pfc_headroom_bytes\": " << r.headroom_bytes
     << ",\n  \"pauses\": " << r.pauses_total << ",\n  \"headroom_drops\": " << r.headroom_drops
     << ",\n  \"max_ingress_bytes\": " << r.max_ingress_bytes << ",\n  \"pauses_per_sender\": [";
  for (std::size_t h = 0; h < r.pauses.size(); ++h) js << (h ? ", " : "") << r.pauses[h];
  js << "],\n  \"paused_us_per_sender\": [";
  for (std::size_t h = 0; h < r.paused_us.size(); ++h) js << (h ? ", " : "") << r.paused_us[h];
  js << "]";
  if (sc.victim) js << ",\n  \"victim_last_half_bps\": " << static_cast<std::uint64_t>(r.victim_bps);
  js << ",\n  \"phases\": [";
  for (std::size_t i = 0; i < r.phases.size(); ++i) {
    const Phase& ph = r.phases[i];
    js << (i ? "," : "") << "\n    {\"from_us\": " << ph.from_us << ", \"to_us\": " << ph.to_us << ", \"flows\": " << ph.flows
       << ", \"jain\": " << ph.jain << ", \"utilisation\": " << ph.utilisation << ", \"worst_deviation\": " << ph.worst_deviation << "}";
  }
  js << "\n  ],\n  \"data_intact\": " << (r.intact ? "true" : "false") << "\n}\n";
}

void print_report(const Run& run, const Results& r) {
  const Scenario& sc = run.sc;
  const sim::EgressStats& st = r.bottleneck;
  std::printf("uroce-sim %s: %d flows, cc %s, PFC %s, %s, %llu us\n", sc.name.c_str(), sc.flows, run.cc_name(),
              sc.pfc.enabled ? "on" : "off", simapp::transport_name(sc), static_cast<unsigned long long>(sc.duration_us));
  // Every flow up to 16; beyond, the first 8 and the last.
  for (std::size_t f = 0; f < r.tput.size(); ++f) {
    if (r.tput.size() > 16 && f >= 8 && f + 1 < r.tput.size()) {
      if (f == 8) std::printf("  ...\n");
      continue;
    }
    std::printf("  flow %zu: %.2f Gb/s over the last half\n", f, r.tput[f] / 1e9);
  }
  std::printf("  per phase (last half): flows, worst deviation from the fair share, Jain, utilisation:");
  for (const Phase& ph : r.phases) {
    std::printf(" [%zu %.0f%% %.3f %.2f]", ph.flows, ph.worst_deviation * 100, ph.jain, ph.utilisation);
  }
  std::printf("\n  Jain %.3f, utilisation %.2f, max queue %llu B, marks %llu, drops %llu, data %s\n", r.jain, r.utilisation,
              static_cast<unsigned long long>(st.max_queue_bytes), static_cast<unsigned long long>(st.marked),
              static_cast<unsigned long long>(st.dropped), r.intact ? "intact" : "NOT intact");
  if (sc.pfc.enabled) {
    std::uint64_t most = 0;
    for (std::uint64_t us : r.paused_us) most = std::max(most, us);
    std::printf("  PFC: %llu pauses sent, senders paused up to %.2f ms, headroom drops %llu, largest ingress count %llu B\n",
                static_cast<unsigned long long>(r.pauses_total), static_cast<double>(most) / 1000,
                static_cast<unsigned long long>(r.headroom_drops), static_cast<unsigned long long>(r.max_ingress_bytes));
  }
  if (sc.victim) std::printf("  victim flow: %.2f Gb/s over the last half\n", r.victim_bps / 1e9);
  std::printf("  goodput %.2f Gb/s, %llu messages, FCT p50 %.0f us, p99 %.0f us, max %.0f us, resent %llu\n",
              r.goodput_bps / 1e9, static_cast<unsigned long long>(r.transfers), r.fct_p50_us, r.fct_p99_us, r.fct_max_us,
              static_cast<unsigned long long>(r.retransmitted));
}

// A scenario on the switch: runs it, writes its files, prints its report.
simapp::RunResult run_switch(const Run& run) {
  simapp::RunResult out;
  ScenarioRun sim(run);
  if (!sim.set_up()) {
    out.outcome = sim.refused() ? simapp::RunResult::Outcome::refused : simapp::RunResult::Outcome::failed;
    out.message = sim.failure();
    return out;
  }
  std::ofstream csv(run.out + "/timeseries.csv");
  sim.run(csv);
  Results r;
  summarize_pfc(sim, r);
  // Let the last messages complete, then check the data of each flow's
  // last slots (and each message was compared as it completed).
  sim.drain();
  r.intact = sim.data_intact();
  summarize_last_half(run.sc, sim.flows(), sim.samples(), r);
  summarize_completions(sim, r);
  r.phases = judge_phases(run.sc, sim.flows());
  r.bottleneck = sim.bottleneck();
  for (const Flow& x : sim.flows()) r.sender.push_back(x.src);
  write_summary(run, r);
  print_report(run, r);
  const bool ok = sim.ok() && r.intact;
  if (!ok) std::fprintf(stderr, "uroce-sim: %s\n", sim.failure().c_str());
  out.outcome = ok ? simapp::RunResult::Outcome::ok : simapp::RunResult::Outcome::failed;
  if (!ok) out.message = sim.failure();
  out.goodput_bps = r.goodput_bps;
  out.fct_p50_us = r.fct_p50_us;
  out.fct_p99_us = r.fct_p99_us;
  out.fct_max_us = r.fct_max_us;
  out.transfers = r.transfers;
  out.retransmitted_packets = r.retransmitted;
  out.queue_drops = r.bottleneck.dropped;
  out.data_intact = r.intact;
  return out;
}

// One point of the scenario, on the fabric or on the switch.
simapp::RunResult run_point(const Run& run) {
  if (run.sc.fabric) {
    return simapp::run_fabric(run.sc, run.seed, run.dcqcn ? &*run.dcqcn : nullptr, run.out,
                              run.delay ? &*run.delay : nullptr);
  }
  return run_switch(run);
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
  if (!run.sc.sweep()) return run_point(run).exit_status();
  return simapp::run_sweep(run.sc, run.seed, run.dcqcn.has_value(), run.out,
                           [&run](const Scenario& point, const std::string& dir) {
                             Run one = run;
                             one.sc = point;
                             one.out = dir;
                             return run_point(one);
                           });
}
