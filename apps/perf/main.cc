// uroce-perf: a perftest-like benchmark. With --sim, both ends run in this
// process on one core, joined by the simulated link on virtual time: the
// figures are the stack's own CPU cost, not a network's. With --ring, on two
// DPDK ports joined by net_ring; with --ip, in two processes (remote.cc).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/path_mtu.h"
#include "common/transport_flags.h"
#include "common/work_request.h"
#include "device/metrics_source.h"
#include "device/ring_pair.h"
#include "device/sim_pair.h"
#include "dpdk/eal.h"
#include "perf/in_flight.h"
#include "perf/layout.h"
#include "perf/message.h"
#include "perf/options.h"
#include "perf/pattern.h"
#include "perf/post_lists.h"
#include "perf/remote.h"
#include "perf/report.h"
#include "uroce/version.h"
#include "wire/frame.h"
#include "wire/icrc.h"

namespace {

using namespace uroce;
using perf::Op;
using perf::Options;
using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// This process's resident memory, bytes (0 if /proc cannot tell).
std::uint64_t resident_bytes() {
  unsigned long long pages = 0;
  unsigned long long resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%llu %llu", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

// Page faults of this process so far (minor and major): a timed run that
// takes some is paying for memory touched for the first time.
std::uint64_t page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_minflt + u.ru_majflt);
}

// The work no RoCE stack can skip, per 4 KiB packet of payload: the ICRC
// when sending and when receiving, and the copy into the target; plus the
// simulated wire's copy, which every packet here also pays. GB/s of payload.
// `footprint` is the bytes of source and of target the loop walks through,
// 4 KiB at a time: 4096 keeps both hot in L1 (the report's baseline); a
// run's own footprint (every message in flight has its slot) shows what the
// caches alone allow at that size.
double bare_icrc_and_copy_gbps(double seconds_budget, std::size_t footprint = 4096) {
  constexpr std::size_t kPacket = 4096;
  footprint = std::max(kPacket, footprint / kPacket * kPacket);
  wire::FrameSpec spec;
  spec.bth.opcode = 0x07;  // RC WRITE Middle: BTH only, 4096 bytes of payload
  std::vector<std::uint8_t> payload(footprint, 0x5a);
  std::vector<std::uint8_t> frame(kPacket + 128);
  std::vector<std::uint8_t> on_wire(frame.size());
  std::vector<std::uint8_t> target(footprint, 0x01);
  const std::size_t n = wire::build_frame(spec, std::span(payload).first(kPacket), frame);
  const std::size_t l3 = 14;
  std::uint64_t packets = 0;
  std::uint32_t sink = 0;
  std::size_t at = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 256; ++i) {
      const std::span<const std::uint8_t> pieces[] = {std::span(payload).subspan(at, kPacket)};
      sink ^= wire::icrc_compute(wire::crc32_default, std::span<const std::uint8_t>(frame).subspan(l3, 54 - l3), pieces);
      std::memcpy(on_wire.data(), frame.data(), 54);
      std::memcpy(on_wire.data() + 54, payload.data() + at, kPacket);
      std::memcpy(on_wire.data() + 54 + kPacket, frame.data() + 54 + kPacket, n - 54 - kPacket);  // the ICRC
      sink ^= wire::icrc_of(wire::crc32_default, std::span<const std::uint8_t>(on_wire).subspan(l3, n - l3 - 4));
      std::memcpy(target.data() + at, on_wire.data() + 54, kPacket);
      at = at + kPacket == footprint ? 0 : at + kPacket;
    }
    packets += 256;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds_budget);
  if (sink == 0x12345678) std::puts("");  // keep the work
  return static_cast<double>(packets) * kPacket / elapsed / 1e9;
}

struct Result {
  double seconds = 0;
  double cpu = 0;
  double virtual_seconds = 0;
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  std::uint64_t packets = 0;  // all frames both engines sent
  std::uint64_t data_packets = 0;
  std::vector<double> latency_us;
  bool ok = true;
  bool verified = true;
  std::string error;
  std::uint64_t retransmitted = 0;
  std::uint64_t timeouts = 0;
  double verify_seconds = 0;  // --verify's fills and compares, left out of seconds and cpu
  std::uint64_t page_faults = 0;  // taken during the timed run
  double idle_qp_bytes = 0;  // resident memory each idle QP added (both sides' QPs counted)
};

Result failed(std::string error) {
  Result r;
  r.ok = false;
  r.error = std::move(error);
  return r;
}

// One device's resources: side a posts the messages, side b serves them.
struct Side {
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  std::vector<QueuePair*> qps;
  std::uint8_t* buf = nullptr;
  MemoryRegion* mr = nullptr;

  std::uint8_t* slot(const perf::BufferLayout& layout, std::uint32_t s) const { return buf + layout.slot_offset(s); }
  std::uint64_t vaddr() const { return reinterpret_cast<std::uint64_t>(buf); }
};

// The PD, CQ, message QPs and registered buffer of one side; false if one
// cannot be had (the device's last_error() says why).
bool set_up_side(Context& ctx, const Options& o, const perf::BufferLayout& layout, Side& side) {
  side.pd = ctx.alloc_pd();
  side.cq = ctx.create_cq(perf::cq_entries(o));
  side.qps = perf::create_message_qps(side.pd, side.cq, o);
  side.buf = perf::alloc_at_offset(ctx, layout.bytes, o);
  if (side.qps.size() != o.qps || side.buf == nullptr) return false;
  side.mr = side.pd->reg_mr(side.buf, layout.bytes, perf::kAllAccess | (o.odp ? IBV_ACCESS_ON_DEMAND : 0));
  return side.mr != nullptr;
}

// --idle-qps: connected pairs that carry nothing.
template <typename Fabric>
bool add_idle_qps(const Options& o, Fabric& net, const Side& a, const Side& b, ConnectParams params) {
  params.max_rd_atomic = static_cast<std::uint8_t>(o.idle_rd_atomic);
  for (std::uint32_t i = 0; i < o.idle_qps; ++i) {
    QpInitAttr idle;
    idle.cap = ibv_qp_cap{o.idle_depth, o.idle_depth, 1, 1, 0};
    idle.send_cq = idle.recv_cq = a.cq;
    QueuePair* ia = a.pd->create_qp(idle);
    idle.send_cq = idle.recv_cq = b.cq;
    QueuePair* ib = b.pd->create_qp(idle);
    if (ia == nullptr || ib == nullptr || net.connect(ia, ib, params) != 0) return false;
  }
  return true;
}

// The test on both devices of `net`, from this thread: post while slots are
// free, step the fabric, poll both CQs, until every message has completed.
template <typename Fabric>
class Transfer {
 public:
  Transfer(const Options& o, Fabric& net, const Side& a, const Side& b)
      : o_(o), net_(net), a_(a), b_(b), layout_(o), pattern_(o.size), flight_(o.depth, o.lat),
        lists_(o.qps, o.post_list) {}

  Result run() {
    const std::uint64_t faults0 = page_faults();
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    const std::uint64_t v0 = net_.clock.now_ns();
    last_progress_ = t0;
    interval_start_ = t0;
    while (done_ < o_.iters || (send() && recv_done_ < o_.iters)) {
      if (o_.report_interval > 0) report_interval(false);
      while (next_ < o_.iters && flight_.may_post(next_, done_)) {
        if (!post(next_++)) return failed("post failed: " + errors());
      }
      if (o_.post_list > 1 && !lists_.flush_all(post_list())) return failed("post failed: " + errors());
      if (!net_.step()) return failed("the link went idle with work outstanding");
      if (stalled()) return failed("no completion for 20 s: the transfer is stuck (see the QP counters)");
      if (!poll_requests() || (send() && !poll_receives())) return failed(error_);
    }
    if (o_.report_interval > 0) report_interval(true);
    Result r;
    // --verify's own work (pattern fills, compares) is timed apart and left
    // out, so a verified run's figures are the transfer's.
    r.verify_seconds = std::chrono::duration<double>(verify_time_).count();
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count() - r.verify_seconds;
    r.cpu = cpu_seconds() - cpu0 - r.verify_seconds;
    r.page_faults = page_faults() - faults0;
    r.virtual_seconds = static_cast<double>(net_.clock.now_ns() - v0) / 1e9;
    collect(r);
    return r;
  }

 private:
  bool send() const { return o_.op == Op::kSend; }
  std::string errors() const { return net_.a->last_error() + net_.b->last_error(); }

  // Message i goes to QP pair i mod N: the messages in flight rotate over
  // every QP, whatever the depth (each QP visit may find its state cold).
  std::uint32_t qp_of(std::uint64_t msg) const { return static_cast<std::uint32_t>(msg % o_.qps); }

  bool post_recv(std::uint32_t s, std::uint64_t msg) {
    ibv_sge sge = app::local_sge(b_.slot(layout_, s), o_.size, *b_.mr);
    ibv_recv_wr wr = app::recv_wr(s, sge);
    ibv_recv_wr* bad = nullptr;
    return b_.qps[qp_of(msg)]->post_recv(&wr, &bad) == 0;
  }

  // --post-list: QP `qp`'s gathered WRs in one post_send.
  auto post_list() {
    return [this](std::uint32_t qp, ibv_send_wr* first) {
      ibv_send_wr* bad = nullptr;
      return a_.qps[qp]->post_send(first, &bad) == 0;
    };
  }

  bool post(std::uint64_t msg) {
    const std::uint32_t s = flight_.slot_of(msg);
    const std::uint32_t qp = qp_of(msg);
    const auto remote_slot = reinterpret_cast<std::uint64_t>(b_.slot(layout_, s));
    const auto remote_counter = reinterpret_cast<std::uint64_t>(b_.buf + layout_.counter_offset(b_.vaddr()));
    // --post-list: gathered for its QP, posted when the list is full (or
    // by flush_all once no more may be posted).
    const bool gathered = o_.post_list > 1;
    const std::size_t i = gathered ? lists_.add(qp) : 0;
    ibv_sge one_sge;
    ibv_send_wr one_wr;
    ibv_sge& sge = gathered ? lists_.sge(i) : one_sge;
    ibv_send_wr& wr = gathered ? lists_.wr(i) : one_wr;
    sge = app::local_sge(a_.slot(layout_, s), o_.size, *a_.mr);
    wr = perf::message_wr(o_.op, s, sge, remote_slot, remote_counter, b_.mr->rkey);
    if (o_.verify) {
      const auto v0 = Clock::now();
      if (perf::source_is_local(o_.op)) pattern_.fill(a_.slot(layout_, s), msg);
      if (o_.op == Op::kRead) pattern_.fill(b_.slot(layout_, s), msg);
      verify_time_ += Clock::now() - v0;
    }
    if (send() && !post_recv(s, msg)) return false;
    flight_.posted(msg);
    if (gathered) return !lists_.full(qp) || lists_.flush(qp, post_list());
    ibv_send_wr* bad = nullptr;
    return a_.qps[qp]->post_send(&wr, &bad) == 0;
  }

  // --report-interval: once an interval has passed (or at the end, the
  // part of one left), its figures as a line of JSON. Times are
  // CLOCK_MONOTONIC seconds (steady_clock's), so another program's reads
  // (uroce-stat's) can be set beside them.
  void report_interval(bool last) {
    const auto now = Clock::now();
    const double span = std::chrono::duration<double>(now - interval_start_).count();
    if (span < o_.report_interval && !last) return;
    const std::uint64_t messages = done_ - interval_done_;
    const double bytes = static_cast<double>(messages) * o_.size;
    auto at = [](Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); };
    std::printf("{\"interval\":{\"start_s\":%.6f,\"end_s\":%.6f,\"messages\":%llu,\"bytes\":%.0f,"
                "\"gbps\":%.4f,\"msgs_per_s\":%.1f}}\n",
                at(interval_start_), at(now), static_cast<unsigned long long>(messages), bytes,
                span > 0 ? bytes * 8 / span / 1e9 : 0.0, span > 0 ? static_cast<double>(messages) / span : 0.0);
    std::fflush(stdout);
    interval_start_ = now;
    interval_done_ = done_;
  }

  // Nothing completed for 20 s.
  bool stalled() {
    if (done_ + recv_done_ != last_done_) {
      last_done_ = done_ + recv_done_;
      last_progress_ = Clock::now();
      return false;
    }
    return Clock::now() - last_progress_ > std::chrono::seconds(20);
  }

  // --verify of the message in slot `s`. The source slot still holds the
  // message: it is reused only after this completion.
  void check(std::uint32_t s, std::uint64_t msg) {
    const auto v0 = Clock::now();
    compare(s, msg);
    verify_time_ += Clock::now() - v0;
  }

  void compare(std::uint32_t s, std::uint64_t msg) {
    if (o_.op == Op::kAtomic) {
      // The final value is checked for any number of QPs, in collect().
      if (o_.qps == 1 && !perf::fetch_add_result_matches(a_.slot(layout_, s), msg)) verified_ = false;
      return;
    }
    if (std::memcmp(a_.slot(layout_, s), b_.slot(layout_, s), o_.size) != 0) verified_ = false;
  }

  bool poll_requests() {
    ibv_wc wc[64];
    for (int k; (k = a_.cq->poll(64, wc)) > 0;) {
      const auto now = Clock::now();
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) {
          error_ = std::string("completion error: ") + wc_status_str(wc[i].status);
          return false;
        }
        const auto s = static_cast<std::uint32_t>(wc[i].wr_id);
        const std::uint64_t msg = flight_.completed(s, now);
        if (o_.verify && !send()) check(s, msg);
        ++done_;
      }
    }
    return true;
  }

  // SEND: the responder's receives, each checked against its source slot.
  bool poll_receives() {
    ibv_wc wc[64];
    for (int k; (k = b_.cq->poll(64, wc)) > 0;) {
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != o_.size) {
          error_ = std::string("receive completion error: ") + wc_status_str(wc[i].status);
          return false;
        }
        if (o_.verify) check(static_cast<std::uint32_t>(wc[i].wr_id), 0);
        ++recv_done_;
      }
    }
    return true;
  }

  // The counts of the finished run, and the final value of the counter.
  void collect(Result& r) const {
    r.messages = done_;
    r.bytes = done_ * o_.size;
    r.packets = net_.frames_sent();
    for (std::uint32_t q = 0; q < o_.qps; ++q) {
      r.data_packets += a_.qps[q]->counter("tx_packets") + b_.qps[q]->counter("read_responses_sent");
      r.retransmitted += a_.qps[q]->counter("retransmitted_packets");
      r.timeouts += a_.qps[q]->counter("timeouts");
    }
    r.latency_us = flight_.latency_us();
    r.verified = verified_;
    if (o_.op == Op::kAtomic && o_.verify && perf::load_u64(b_.buf + layout_.counter_offset(b_.vaddr())) != o_.iters) {
      r.verified = false;
    }
  }

  const Options& o_;
  Fabric& net_;
  const Side& a_;
  const Side& b_;
  const perf::BufferLayout layout_;
  const perf::Pattern pattern_;
  perf::InFlight flight_;
  perf::PostLists lists_;  // --post-list
  std::uint64_t next_ = 0;
  Clock::time_point interval_start_;  // --report-interval: the current interval's start
  std::uint64_t interval_done_ = 0;   // done_ at that start
  std::uint64_t done_ = 0;       // requests completed
  std::uint64_t recv_done_ = 0;  // SEND: receives completed
  std::uint64_t last_done_ = 0;
  Clock::time_point last_progress_;
  bool verified_ = true;
  Clock::duration verify_time_{};
  std::string error_;
};

// Sets up both devices of `net`, connects the message QPs (and the idle
// ones), and runs the test.
template <typename Fabric>
Result run(const Options& o, Fabric& net) {
  const perf::BufferLayout layout(o);
  Side a;
  Side b;
  const bool set_up = set_up_side(*net.a, o, layout, a);
  if (!set_up_side(*net.b, o, layout, b) || !set_up) {
    return failed("set-up failed: " + net.a->last_error() + net.b->last_error());
  }
  ConnectParams params;
  params.mtu = app::mtu_enum(o.mtu);
  params.transport = o.transport;
  for (std::uint32_t q = 0; q < o.qps; ++q) {
    if (net.connect(a.qps[q], b.qps[q], params) != 0) {
      return failed("connect failed: " + net.a->last_error() + net.b->last_error());
    }
  }
  if (app::transport_asked(o.transport)) {
    std::printf("transport: %s\n", app::describe_transport(a.qps[0]->transport_options()).c_str());
  }
  const std::uint64_t rss0 = resident_bytes();
  if (!add_idle_qps(o, net, a, b, params)) {
    return failed("idle QP set-up failed: " + net.a->last_error() + net.b->last_error());
  }
  const std::uint64_t idle_bytes = resident_bytes() - rss0;
  Result r = Transfer<Fabric>(o, net, a, b).run();
  r.idle_qp_bytes = o.idle_qps > 0 ? static_cast<double>(idle_bytes) / (2.0 * o.idle_qps) : 0;
  return r;
}

Result run_sim(const Options& o) {
  sim::Impairments imp;
  imp.loss = o.loss;
  device::SimPair net(o.seed, imp, imp, o.dcqcn_params(), 0, o.delay_params());
  if (std::string error; !o.pcap.empty() && !net.link.tap(o.pcap, error)) return failed(error);
  return run(o, net);
}

// --ring: EAL (on defaults without EAL arguments), the two ports, and with
// --workers an engine thread for each device. nullptr and `rc` on failure.
std::unique_ptr<device::RingPair> start_ring(const Options& o, std::vector<std::string> eal, int& rc) {
  if (eal.size() == 1) {
    for (const char* a : {"--no-huge", "--no-shconf", "--no-pci", "-l", "0", "-m", "512", "--log-level=lib.*:error"}) {
      eal.emplace_back(a);
    }
  }
  if (const std::string err = dpdk::eal_init(eal); !err.empty()) {
    std::fprintf(stderr, "uroce-perf: %s\n", err.c_str());
    rc = 2;
    return nullptr;
  }
  if (const std::string w = dpdk::no_huge_warning("uroce-perf"); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  rc = 1;
  std::string err;
  auto ring = device::RingPair::create("uroce_perf", err, 1, o.dcqcn_params(), o.pfc_priority, o.delay_params());
  if (!ring) {
    std::fprintf(stderr, "uroce-perf: %s\n", err.c_str());
    return nullptr;
  }
  if (o.workers && (ring->a->start_worker(0) != 0 || ring->b->start_worker(1) != 0)) {
    std::fprintf(stderr, "uroce-perf: %s\n", ring->a->last_error().c_str());
    return nullptr;
  }
  return ring;
}

// --metrics: the exporter, on the CPUs EAL leaves for control threads (off
// the lcore this thread polls the engines on: a collection's rendering
// there would be taken from the traffic). EAL runs. nullptr and `rc` on
// failure.
std::unique_ptr<metrics::Exporter> start_metrics(const Options& o, int& rc) {
  metrics::Options mo;
  mo.listen = o.metrics;
  mo.cpus = dpdk::control_cpus();
  auto exporter = std::make_unique<metrics::Exporter>(mo, device::collect_exposed);
  if (std::string e; !exporter->start(e)) {
    std::fprintf(stderr, "uroce-perf: %s\n", e.c_str());
    rc = 2;
    return nullptr;
  }
  std::printf("uroce-perf: metrics at http://%s/metrics (port %u)\n", o.metrics.c_str(), exporter->port());
  std::fflush(stdout);
  return exporter;
}

// --ip: one side of a two-process test, on the port EAL brings up.
int run_two_processes(const Options& o, const std::vector<std::string>& eal) {
  if (eal.size() == 1) {
    std::fprintf(stderr, "uroce-perf: no EAL arguments: name the port before '--' (see --help)\n");
    return 2;
  }
  if (const std::string err = dpdk::eal_init(eal); !err.empty()) {
    std::fprintf(stderr, "uroce-perf: %s\n", err.c_str());
    return 2;
  }
  std::printf("uroce-perf %s %s %s: %s\n", kVersion, o.server.empty() ? "server" : "client", perf::op_name(o.op),
              perf::test_text(o).c_str());
  std::fflush(stdout);
  int rc = 0;
  std::unique_ptr<metrics::Exporter> exporter;
  if (!o.metrics.empty() && !(exporter = start_metrics(o, rc))) return rc;
  rc = perf::run_remote(o);
  exporter.reset();
  dpdk::eal_cleanup();
  return rc;
}

void print_test(const Options& o) {
  std::printf("uroce-perf %s --%s %s: %s, tx depth %u, loss %g, seed %llu\n", kVersion, o.fabric.c_str(),
              perf::op_name(o.op), perf::test_text(o).c_str(), o.depth, o.loss, static_cast<unsigned long long>(o.seed));
  std::puts(o.fabric == "sim"
                ? "Both ends run in this process on one core over the simulated link: CPU figures are the stack's."
                : o.workers ? "Two DPDK ports joined by net_ring; each device's engine on its own core, this thread posts and polls."
                            : "Both ends run in this process on one core, on two DPDK ports joined by net_ring.");
}

// The figures of a run, printed and in the JSON.
struct Figures {
  perf::Rates rates;
  double ns_per_packet = 0;
  perf::LatencySummary latency;
  double bare = 0;  // GB/s through only the ICRC and the copies, on buffers hot in L1
  std::size_t footprint = 0;  // bytes of each side's buffer the run's messages walk through
  double bare_at_footprint = 0;  // the same work walking through that many bytes
  double payload_gbytes_per_cpu_s = 0;
};

Figures figures(const Options& o, const Result& r) {
  Figures f;
  f.rates = perf::rates(r.messages, o.size, r.seconds);
  f.ns_per_packet = r.cpu * 1e9 / static_cast<double>(std::max<std::uint64_t>(r.data_packets, 1));
  f.latency = perf::summarize_latency(r.latency_us);
  f.bare = bare_icrc_and_copy_gbps(0.2);
  f.footprint = perf::BufferLayout(o).slot * std::min<std::uint64_t>(o.depth, std::max<std::uint64_t>(r.messages, 1));
  // Under two packets the loop walks the L1 baseline's 4 KiB: not timed again.
  f.bare_at_footprint = f.footprint < 2 * 4096 ? f.bare : bare_icrc_and_copy_gbps(0.2, f.footprint);
  f.payload_gbytes_per_cpu_s = static_cast<double>(r.bytes) / r.cpu / 1e9;
  return f;
}

void print_result(const Options& o, const Result& r, const Figures& f) {
  std::printf("%10s %12s %14s %14s %16s %14s\n", "#bytes", "#iterations", "BW [Gb/s]", "MsgRate [Mpps]",
              "CPU ns/packet", "retransmitted");
  std::printf("%10u %12llu %14.2f %14.3f %16.1f %14llu\n", o.size, static_cast<unsigned long long>(r.messages),
              f.rates.gbps, f.rates.mpps, f.ns_per_packet, static_cast<unsigned long long>(r.retransmitted));
  std::printf("data packets %llu, frames on the link %llu, timeouts %llu, virtual time %.6f s, wall %.3f s, CPU %.3f s\n",
              static_cast<unsigned long long>(r.data_packets), static_cast<unsigned long long>(r.packets),
              static_cast<unsigned long long>(r.timeouts), r.virtual_seconds, r.seconds, r.cpu);
  perf::print_latency("wall clock, both ends on one core", o.lat, f.latency);
  std::printf("bare ICRC (TX and RX) + copies, 4 KiB packets: %.2f GB/s; this run: %.2f GB/s of payload per CPU second; "
              "ratio %.3f\n",
              f.bare, f.payload_gbytes_per_cpu_s, f.payload_gbytes_per_cpu_s / f.bare);
  std::printf("the same bare work through this run's footprint (%zu KiB of source and of target): %.2f GB/s; ratio %.3f\n",
              f.footprint / 1024, f.bare_at_footprint, f.payload_gbytes_per_cpu_s / f.bare_at_footprint);
  std::printf("page faults during the timed run: %llu\n", static_cast<unsigned long long>(r.page_faults));
  if (o.idle_qps > 0) {
    std::printf("idle QPs: %u pairs (%u QPs), %.0f bytes resident each (%u send + %u receive WQEs, "
                "max_dest_rd_atomic %u)\n",
                o.idle_qps, 2 * o.idle_qps, r.idle_qp_bytes, o.idle_depth, o.idle_depth, o.idle_rd_atomic);
  }
  if (o.verify) {
    std::printf("verification: %s; its fills and compares (%.3f s) are not in the figures\n",
                r.verified ? "PASSED (every byte and atomic result)" : "FAILED", r.verify_seconds);
  }
}

bool write_json(const Options& o, const Result& r, const Figures& f) {
  perf::JsonLine j = perf::json_head(o);
  j.number("iterations", r.messages).number("mtu", o.mtu).number("tx_depth", o.depth).number("loss", o.loss);
  j.number("seed", o.seed).number("bw_gbps", f.rates.gbps).number("msg_rate_mpps", f.rates.mpps);
  j.number("cpu_ns_per_packet", f.ns_per_packet).number("data_packets", r.data_packets);
  j.number("retransmitted", r.retransmitted).number("timeouts", r.timeouts).number("wall_s", r.seconds);
  j.number("cpu_s", r.cpu).number("virtual_s", r.virtual_seconds).number("bare_icrc_copy_gbytes_s", f.bare);
  j.number("ratio_to_bare", f.payload_gbytes_per_cpu_s / f.bare).latency(f.latency);
  j.number("footprint_bytes", f.footprint).number("bare_at_footprint_gbytes_s", f.bare_at_footprint);
  j.number("ratio_to_bare_at_footprint", f.payload_gbytes_per_cpu_s / f.bare_at_footprint);
  j.number("page_faults", r.page_faults).number("odp", o.odp ? 1 : 0).number("qps", o.qps).number("idle_qps", o.idle_qps);
  if (o.idle_qps > 0) {
    j.number("idle_depth", o.idle_depth).number("idle_rd_atomic", o.idle_rd_atomic).number("idle_qp_bytes", r.idle_qp_bytes);
  }
  if (o.verify) j.boolean("verified", r.verified).number("verify_s", r.verify_seconds);
  return j.write(o.json);
}

}  // namespace

int main(int argc, char** argv) {
  const dpdk::SplitArgs args = dpdk::split_args(argc, argv);
  Options o;
  try {
    o = perf::parse_options(args.app);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uroce-perf: %s (see uroce-perf --help)\n", e.what());
    return 2;
  }
  if (o.fabric == "port") return run_two_processes(o, args.eal);
  std::unique_ptr<device::RingPair> ring;
  if (int rc = 0; o.fabric == "ring" && !(ring = start_ring(o, args.eal, rc))) return rc;
  // After the devices, destroyed before them (it reads them through telemetry).
  std::unique_ptr<metrics::Exporter> exporter;
  if (int rc = 0; !o.metrics.empty() && !(exporter = start_metrics(o, rc))) return rc;
  print_test(o);
  const Result r = ring ? run(o, *ring) : run_sim(o);
  if (!r.ok) {
    std::fprintf(stderr, "uroce-perf: %s\n", r.error.c_str());
    return 1;
  }
  const Figures f = figures(o, r);
  print_result(o, r, f);
  if (!o.json.empty() && !write_json(o, r, f)) {
    std::fprintf(stderr, "uroce-perf: cannot write %s\n", o.json.c_str());
    return 1;
  }
  return o.verify && !r.verified ? 1 : 0;
}
