#include "fabric_run.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <vector>

#include "common/work_request.h"
#include "device/leaf_spine_fabric.h"
#include "verbs/connect.h"

namespace uroce::simapp {
namespace {

std::uint8_t pattern(std::size_t pair, std::uint64_t msg, std::size_t i) {
  return static_cast<std::uint8_t>(i * 31 + msg * 7 + pair * 101 + (i >> 12));
}

// One RC QP pair from host `src` to host `dst`, with `slots` transfers in
// flight at most, each into a slot of its own at the receiver.
struct Pair {
  int src = 0, dst = 0;
  QueuePair* qp = nullptr;
  QueuePair* rqp = nullptr;
  std::uint8_t* buf = nullptr;
  MemoryRegion* mr = nullptr;
  std::uint8_t* rbuf = nullptr;
  MemoryRegion* rmr = nullptr;
  std::uint64_t sent = 0;       // transfers posted
  std::uint32_t slots = 1;
  struct InFlight {
    std::uint64_t msg, posted_ns;
    std::uint32_t length;
  };
  std::deque<InFlight> in_flight;  // in posting order, as RC completes them
  bool busy() const { return !in_flight.empty(); }
  bool dead = false;            // a transfer failed: the QP is in ERR
};

struct Host {
  Context* ctx = nullptr;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
};

class FabricRun {
 public:
  FabricRun(const Scenario& sc, std::uint64_t seed, const cc::DcqcnParams* dcqcn, const cc::DelayParams* delay)
      : sc_(sc), fabric_(seed, config(sc), dcqcn, delay) {}

  // One line on stderr and false if a QP cannot be set up (the transport
  // refusing the scenario's options among them: refused() says so).
  bool set_up();
  void run(std::ofstream& csv);
  // Writes summary.json, prints the run's figures; returns them.
  RunResult write_summary(const std::string& out, std::uint64_t seed, bool dcqcn);
  bool refused() const { return refused_; }
  const std::string& failure() const { return failure_; }
  static sim::LeafSpineConfig config(const Scenario& sc);

 private:
  bool add_pair(int src, int dst);
  void post(std::size_t p, std::uint32_t length);
  void poll();
  void complete(std::size_t p, const ibv_wc& wc);
  // Posts what the pattern allows now.
  void feed(bool starting_allowed);
  bool idle() const;

  const Scenario& sc_;
  device::LeafSpineFabric fabric_;
  std::vector<Host> hosts_;
  std::vector<Pair> pairs_;
  std::vector<int> ring_;            // allreduce: hosts in ring order
  std::vector<std::uint64_t> step_;  // allreduce: per ring position, steps done
  std::uint64_t iterations_ = 0;     // alltoall rounds / allreduce iterations begun
  std::uint64_t t0_ = 0, last_done_ = 0;
  std::uint64_t delivered_ = 0, transfers_ = 0, failed_transfers_ = 0;
  std::uint64_t end_ns_ = 0;  // when the run ended
  std::vector<double> fct_us_;
  bool intact_ = true, ok_ = true, refused_ = false;
  std::string failure_;
};

sim::LeafSpineConfig FabricRun::config(const Scenario& sc) {
  sim::LeafSpineConfig c;
  c.egress = sc.bottleneck;
  c.egress.gbps = sc.gbps;
  if (sc.name == "loss") {
    // Pairs on one switch: two hops each way.
    c.spines = 0;
    c.leaves = 1;
    c.hosts_per_leaf = 2 * sc.flows;
    c.egress.delay_ns = static_cast<std::uint64_t>(sc.rtt_us * 1000 / 4);
  } else {
    c.spines = sc.spines;
    c.leaves = sc.leaves;
    c.hosts_per_leaf = sc.hosts_per_leaf;
    // Host to host across a spine: four hops each way.
    c.egress.delay_ns = static_cast<std::uint64_t>(sc.rtt_us * 1000 / 8);
  }
  return c;
}

bool FabricRun::set_up() {
  if (!fabric_.error().empty()) {
    failure_ = "set-up failed: " + fabric_.error();
    std::fprintf(stderr, "uroce-sim: %s\n", failure_.c_str());
    return false;
  }
  sim::LeafSpine& net = fabric_.net;
  for (int h = 0; h < net.hosts(); ++h) {
    Host x;
    x.ctx = fabric_.hosts[static_cast<std::size_t>(h)].get();
    x.pd = x.ctx->alloc_pd();
    x.cq = x.ctx->create_cq(4096);
    hosts_.push_back(x);
    net.set_host_rx_loss(h, sc_.loss);
  }
  if (sc_.name == "leafspine") {
    if (sc_.fail_link_us != 0) net.fail_link(0, 0, fabric_.clock.now_ns() + sc_.fail_link_us * 1000, sc_.reroute_us * 1000);
    if (sc_.slow_link_gbps > 0) net.set_link_gbps(0, sc_.spines - 1, sc_.slow_link_gbps);
  }
  const int n = net.hosts();
  bool ok = true;
  if (sc_.name == "loss") {
    for (int f = 0; f < sc_.flows && ok; ++f) ok = add_pair(2 * f, 2 * f + 1);
  } else if (sc_.pattern == "alltoall") {
    for (int a = 0; a < n && ok; ++a) {
      for (int b = 0; b < n && ok; ++b) {
        if (a != b) ok = add_pair(a, b);
      }
    }
  } else {
    // The ring visits the leaves in turn, so that neighbours sit on
    // different leaves (when there are several) and the ring crosses the
    // spines.
    for (int k = 0; k < n; ++k) ring_.push_back((k % sc_.leaves) * sc_.hosts_per_leaf + k / sc_.leaves);
    for (int k = 0; k < n && ok; ++k) ok = add_pair(ring_[static_cast<std::size_t>(k)], ring_[static_cast<std::size_t>((k + 1) % n)]);
    step_.assign(static_cast<std::size_t>(n), 0);
  }
  return ok;
}

bool FabricRun::add_pair(int src, int dst) {
  Pair x;
  x.src = src;
  x.dst = dst;
  const Host& from = hosts_[static_cast<std::size_t>(src)];
  const Host& to = hosts_[static_cast<std::size_t>(dst)];
  QpInitAttr init;
  init.cap = ibv_qp_cap{std::max<std::uint32_t>(16, sc_.outstanding), 4, 1, 1, 0};
  init.send_cq = init.recv_cq = from.cq;
  x.qp = from.pd->create_qp(init);
  init.send_cq = init.recv_cq = to.cq;
  x.rqp = to.pd->create_qp(init);
  x.slots = sc_.name == "loss" ? sc_.outstanding : 1;
  const std::uint64_t size = sc_.size * x.slots;
  x.buf = static_cast<std::uint8_t*>(from.ctx->alloc_buffer(size));
  x.rbuf = static_cast<std::uint8_t*>(to.ctx->alloc_buffer(size));
  x.mr = x.buf ? from.pd->reg_mr(x.buf, size, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  x.rmr = x.rbuf ? to.pd->reg_mr(x.rbuf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : nullptr;
  if (x.qp == nullptr || x.rqp == nullptr || x.mr == nullptr || x.rmr == nullptr) {
    failure_ = "set-up failed: " + from.ctx->last_error() + to.ctx->last_error();
    std::fprintf(stderr, "uroce-sim: %s\n", failure_.c_str());
    return false;
  }
  ConnectParams params;
  params.mtu = IBV_MTU_4096;
  params.traffic_class = static_cast<std::uint8_t>(sc_.dscp << 2);
  params.transport.selective_repeat = sc_.selective_repeat;
  params.transport.spray_paths = static_cast<std::uint8_t>(sc_.spray);
  params.transport.bdp_packets = sc_.bdp_packets;
  int err = connect_rc(x.qp, to.ctx->gid(), x.rqp->qp_num(), 0x100, 0x200, params);
  if (err == 0) err = connect_rc(x.rqp, from.ctx->gid(), x.qp->qp_num(), 0x200, 0x100, params);
  if (err != 0) {
    failure_ = std::string("the transport refuses transport = ") + transport_name(sc_) + ", spray = " +
               std::to_string(sc_.spray) + ", bdp = " + std::to_string(sc_.bdp_packets) + ": " + std::strerror(err);
    refused_ = true;
    std::fprintf(stderr, "uroce-sim: %s\n", failure_.c_str());
    return false;
  }
  pairs_.push_back(x);
  return true;
}

void FabricRun::post(std::size_t p, std::uint32_t length) {
  Pair& x = pairs_[p];
  const std::uint64_t m = x.sent;
  const std::uint64_t at = (m % x.slots) * sc_.size;
  for (std::uint32_t i = 0; i < length; ++i) x.buf[at + i] = pattern(p, m, i);
  ibv_sge sge = app::local_sge(x.buf + at, length, *x.mr);
  ibv_send_wr wr = app::rdma_wr(IBV_WR_RDMA_WRITE, m, sge, reinterpret_cast<std::uint64_t>(x.rbuf + at), x.rmr->rkey);
  ibv_send_wr* bad = nullptr;
  if (x.qp->post_send(&wr, &bad) != 0) {
    ok_ = false;
    failure_ = "post_send failed on pair " + std::to_string(p);
    return;
  }
  ++x.sent;
  x.in_flight.push_back(Pair::InFlight{m, fabric_.clock.now_ns(), length});
}

// A transfer completed at its sender: the receiver's memory must hold all
// of it (every byte, compared).
void FabricRun::complete(std::size_t p, const ibv_wc& wc) {
  Pair& x = pairs_[p];
  if (wc.status != IBV_WC_SUCCESS) {
    // A result of the scenario (a QP whose path failed gives up after
    // retry_cnt), not of the run: that pair sends no more.
    x.in_flight.clear();
    x.dead = true;
    ++failed_transfers_;
    if (failure_.empty()) failure_ = "pair " + std::to_string(p) + ": " + wc_status_str(wc.status);
    return;
  }
  const std::uint64_t now = fabric_.clock.now_ns();
  if (x.in_flight.empty()) return;  // not ours
  const Pair::InFlight t = x.in_flight.front();
  x.in_flight.pop_front();
  const std::uint64_t at = (t.msg % x.slots) * sc_.size;
  if (std::memcmp(x.buf + at, x.rbuf + at, t.length) != 0) {
    intact_ = false;
    failure_ = "pair " + std::to_string(p) + ": received data differs from what was sent";
  }
  fct_us_.push_back(static_cast<double>(now - t.posted_ns) / 1000);
  delivered_ += t.length;
  ++transfers_;
  last_done_ = now;
  if (!step_.empty()) {
    const auto k = static_cast<std::size_t>(std::find(ring_.begin(), ring_.end(), x.src) - ring_.begin());
    ++step_[k];
  }
}

void FabricRun::poll() {
  ibv_wc wc[32];
  for (std::size_t h = 0; h < hosts_.size(); ++h) {
    for (int k; (k = hosts_[h].cq->poll(32, wc)) > 0;) {
      for (int i = 0; i < k; ++i) {
        for (std::size_t p = 0; p < pairs_.size(); ++p) {
          if (pairs_[p].src == static_cast<int>(h) && pairs_[p].qp->qp_num() == wc[i].qp_num) complete(p, wc[i]);
        }
      }
    }
  }
}

bool FabricRun::idle() const {
  return std::none_of(pairs_.begin(), pairs_.end(), [](const Pair& x) { return x.busy(); });
}

void FabricRun::feed(bool starting_allowed) {
  const auto size = static_cast<std::uint32_t>(sc_.size);
  if (sc_.name == "loss") {
    for (std::size_t p = 0; p < pairs_.size(); ++p) {
      Pair& x = pairs_[p];
      while (x.in_flight.size() < x.slots && !x.dead && starting_allowed && ok_) post(p, size);
    }
  } else if (step_.empty()) {
    // All-to-all: a new round once every transfer of the last one is done.
    if (idle() && starting_allowed) {
      ++iterations_;
      for (std::size_t p = 0; p < pairs_.size(); ++p) {
        if (!pairs_[p].dead) post(p, size);
      }
    }
  } else {
    // Ring all-reduce: 2 (N - 1) steps of size / N each (reduce-scatter,
    // then all-gather); position k sends its step s once its own step s - 1
    // is done and its predecessor's step s - 1 has reached it.
    const std::size_t n = ring_.size();
    const std::uint64_t steps = 2 * (n - 1);
    const auto chunk = static_cast<std::uint32_t>((size + n - 1) / n);
    for (std::size_t k = 0; k < n; ++k) {
      Pair& x = pairs_[k];
      const std::uint64_t s = step_[k];
      if (x.busy() || x.dead) continue;
      const std::uint64_t prev = step_[(k + n - 1) % n];
      const bool new_iteration = s % steps == 0;
      if (new_iteration && !starting_allowed) continue;
      if (s > 0 && prev < s) continue;  // the predecessor's step s - 1 is not here yet
      if (new_iteration && s / steps + 1 > iterations_) iterations_ = s / steps + 1;
      post(k, chunk);
    }
  }
}

void FabricRun::run(std::ofstream& csv) {
  // Per sample: the payload the receivers placed in order (RC places in
  // order), as a rate and since the start; the bytes and number of
  // transfers completed since the start; packets lost and dropped on a
  // failed link since the start.
  csv << "t_us,goodput_bps,received_bytes,completed_bytes,transfers,lost,failed_drops\n";
  t0_ = fabric_.clock.now_ns();
  last_done_ = t0_;
  const std::uint64_t end = t0_ + sc_.duration_us * 1000;
  const std::uint64_t sample_ns = sc_.sample_us * 1000;
  std::uint64_t next_sample = t0_ + sample_ns, received_prev = 0;
  const std::uint64_t limit = end + 2'000'000'000ull;  // the last transfers: 2 s more at most
  sim::LeafSpine& net = fabric_.net;
  while (ok_) {
    const std::uint64_t now = fabric_.clock.now_ns();
    poll();
    feed(now < end);
    if (now >= end && idle()) break;
    if (now > limit) {
      ok_ = false;
      failure_ = "transfers did not finish within 2 s after duration_us";
      break;
    }
    if (!fabric_.step()) {
      poll();
      if (!idle()) {
        ok_ = false;
        failure_ = "the fabric went quiet with transfers unfinished";
      }
      break;
    }
    while (fabric_.clock.now_ns() >= next_sample) {
      std::uint64_t lost = 0;
      for (int h = 0; h < net.hosts(); ++h) lost += net.host_rx(h).lost;
      std::uint64_t received = 0;
      for (const Pair& x : pairs_) received += x.rqp->counter("rx_bytes");
      const double rate = static_cast<double>(received - received_prev) * 8 / (static_cast<double>(sample_ns) * 1e-9);
      csv << (next_sample - t0_) / 1000 << ',' << static_cast<std::uint64_t>(rate) << ',' << received << ','
          << delivered_ << ',' << transfers_ << ',' << lost << ',' << net.failed_drops() << '\n';
      received_prev = received;
      next_sample += sample_ns;
    }
  }
  end_ns_ = fabric_.clock.now_ns();
}

RunResult FabricRun::write_summary(const std::string& out, std::uint64_t seed, bool dcqcn) {
  sim::LeafSpine& net = fabric_.net;
  const double elapsed_s = static_cast<double>(last_done_ - t0_) * 1e-9;
  const double goodput = elapsed_s > 0 ? static_cast<double>(delivered_) * 8 / elapsed_s : 0;
  std::uint64_t lost = 0, retransmitted = 0;
  for (int h = 0; h < net.hosts(); ++h) lost += net.host_rx(h).lost;
  for (const Pair& x : pairs_) retransmitted += x.qp->counter("retransmitted_packets");
  const double p50 = percentile(fct_us_, 0.5), p99 = percentile(fct_us_, 0.99), pmax = percentile(fct_us_, 1.0);
  // Every byte of every transfer arrived and matched.
  const bool intact = intact_ && ok_ && transfers_ > 0 && failed_transfers_ == 0;
  char title[200];
  std::snprintf(title, sizeof title, "%s%s%s, %s, spray %d, loss %g, seed %llu", sc_.name.c_str(),
                sc_.name == "leafspine" ? " " : "", sc_.name == "leafspine" ? sc_.pattern.c_str() : "",
                transport_name(sc_), sc_.spray, sc_.loss, static_cast<unsigned long long>(seed));
  std::ofstream js(out + "/summary.json");
  js << "{\n  \"scenario\": \"" << sc_.name << "\",\n  \"title\": \"" << title << "\",\n  \"seed\": " << seed
     << ",\n  \"sample_us\": " << sc_.sample_us << ",\n  \"duration_us\": " << sc_.duration_us
     << ",\n  \"dcqcn\": " << (dcqcn ? "true" : "false") << ",\n  \"transport\": \""
     << (sc_.selective_repeat ? "sr" : "gbn") << "\",\n  \"spray\": " << sc_.spray << ",\n  \"bdp_packets\": " << sc_.bdp_packets
     << ",\n  \"gbps\": " << sc_.gbps << ",\n  \"rtt_us\": " << sc_.rtt_us << ",\n  \"size\": " << sc_.size << ",\n  \"outstanding\": " << (sc_.name == "loss" ? sc_.outstanding : 1u)
     << ",\n  \"loss\": " << sc_.loss << ",\n  \"hosts\": " << net.hosts() << ",\n  \"qps\": " << pairs_.size();
  if (sc_.name == "leafspine") {
    js << ",\n  \"pattern\": \"" << sc_.pattern << "\",\n  \"spines\": " << sc_.spines << ",\n  \"leaves\": " << sc_.leaves
       << ",\n  \"hosts_per_leaf\": " << sc_.hosts_per_leaf << ",\n  \"fail_link_us\": " << sc_.fail_link_us
       << ",\n  \"reroute_us\": " << sc_.reroute_us << ",\n  \"slow_link_gbps\": " << sc_.slow_link_gbps
       << ",\n  \"iterations\": " << iterations_;
  }
  js << ",\n  \"transfers\": " << transfers_ << ",\n  \"failed_transfers\": " << failed_transfers_ << ",\n  \"delivered_bytes\": " << delivered_
     << ",\n  \"goodput_bps\": " << static_cast<std::uint64_t>(goodput) << ",\n  \"fct_p50_us\": " << p50
     << ",\n  \"fct_p99_us\": " << p99 << ",\n  \"fct_max_us\": " << pmax << ",\n  \"lost_packets\": " << lost
     << ",\n  \"retransmitted_packets\": " << retransmitted << ",\n  \"failed_link_drops\": " << net.failed_drops()
     << ",\n  \"queue_drops\": " << net.tail_drops() << ",\n  \"marks\": " << net.marks();
  // Each spine link's utilisation each way over the run (bytes it carried
  // over what its rate could carry): how evenly ECMP spread the load.
  js << ",\n  \"spine_links\": [";
  double lo = 1e9, hi = 0;
  bool first = true;
  for (int l = 0; sc_.name == "leafspine" && l < sc_.leaves; ++l) {
    for (int s = 0; s < sc_.spines; ++s) {
      const sim::LinkStats& up = net.uplink(l, s);
      const sim::LinkStats& down = net.downlink(s, l);
      const double gbps = l == 0 && s == sc_.spines - 1 && sc_.slow_link_gbps > 0 ? sc_.slow_link_gbps : sc_.gbps;
      const double cap = static_cast<double>(end_ns_ - t0_) * 1e-9 * gbps * 1e9 / 8;
      const double u_up = cap > 0 ? static_cast<double>(up.bytes) / cap : 0;
      const double u_down = cap > 0 ? static_cast<double>(down.bytes) / cap : 0;
      lo = std::min({lo, u_up, u_down});
      hi = std::max({hi, u_up, u_down});
      js << (first ? "" : ",") << "\n    {\"leaf\": " << l << ", \"spine\": " << s << ", \"up_utilisation\": " << u_up
         << ", \"down_utilisation\": " << u_down << ", \"up_bytes\": " << up.bytes << ", \"down_bytes\": " << down.bytes
         << ", \"drops\": " << up.tail_dropped + down.tail_dropped << ", \"marks\": " << up.marked + down.marked
         << ", \"failed_drops\": " << up.failed_dropped + down.failed_dropped << "}";
      first = false;
    }
  }
  js << (first ? "]" : "\n  ]");
  if (!first) js << ",\n  \"spine_utilisation_min\": " << lo << ",\n  \"spine_utilisation_max\": " << hi;
  js << ",\n  \"data_intact\": " << (intact ? "true" : "false") << "\n}\n";

  std::printf("uroce-sim %s: %s, %d hosts, %zu QPs, %s, spray %d, loss %g, %llu us\n", sc_.name.c_str(),
              sc_.name == "leafspine" ? sc_.pattern.c_str() : "pairs", net.hosts(), pairs_.size(),
              sc_.selective_repeat ? "sr" : "gbn", sc_.spray, sc_.loss, static_cast<unsigned long long>(sc_.duration_us));
  std::printf("  goodput %.2f Gb/s, %llu transfers, FCT p50 %.0f us, p99 %.0f us, max %.0f us\n", goodput / 1e9,
              static_cast<unsigned long long>(transfers_), p50, p99, pmax);
  if (failed_transfers_ > 0) std::printf("  %llu transfers failed\n", static_cast<unsigned long long>(failed_transfers_));
  std::printf("  lost %llu packets, queue drops %llu, resent %llu, failed-link drops %llu",
              static_cast<unsigned long long>(lost), static_cast<unsigned long long>(net.tail_drops()),
              static_cast<unsigned long long>(retransmitted), static_cast<unsigned long long>(net.failed_drops()));
  if (!first) std::printf(", spine links %.2f to %.2f utilised", lo, hi);
  std::printf(", data %s\n", intact ? "intact" : "NOT intact");
  if (!intact) std::fprintf(stderr, "uroce-sim: %s\n", failure_.empty() ? "no transfer completed" : failure_.c_str());
  RunResult r;
  r.outcome = intact ? RunResult::Outcome::ok : RunResult::Outcome::failed;
  if (!intact) r.message = failure_.empty() ? "no transfer completed" : failure_;
  r.goodput_bps = goodput;
  r.fct_p50_us = p50;
  r.fct_p99_us = p99;
  r.fct_max_us = pmax;
  r.transfers = transfers_;
  r.retransmitted_packets = retransmitted;
  r.lost_packets = lost;
  r.queue_drops = net.tail_drops();
  r.data_intact = intact;
  return r;
}

}  // namespace

RunResult run_fabric(const Scenario& sc, std::uint64_t seed, const cc::DcqcnParams* dcqcn, const std::string& out,
                     const cc::DelayParams* delay) {
  RunResult r;
  if (const std::string bad = FabricRun::config(sc).check(); !bad.empty()) {
    std::fprintf(stderr, "uroce-sim: %s\n", bad.c_str());
    r.outcome = RunResult::Outcome::unusable;
    r.message = bad;
    return r;
  }
  auto run = std::make_unique<FabricRun>(sc, seed, dcqcn, delay);
  if (!run->set_up()) {
    r.outcome = run->refused() ? RunResult::Outcome::refused : RunResult::Outcome::failed;
    r.message = run->failure();
    return r;
  }
  std::ofstream csv(out + "/timeseries.csv");
  run->run(csv);
  return run->write_summary(out, seed, dcqcn != nullptr);
}

}  // namespace uroce::simapp
