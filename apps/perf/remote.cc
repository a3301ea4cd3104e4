#include "perf/remote.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/counters.h"
#include "common/oob.h"
#include "common/path_mtu.h"
#include "common/port_device.h"
#include "common/transport_flags.h"
#include "common/work_request.h"
#include "perf/exchange.h"
#include "perf/in_flight.h"
#include "perf/layout.h"
#include "perf/message.h"
#include "perf/pattern.h"
#include "perf/post_lists.h"
#include "perf/report.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"

namespace uroce::perf {
namespace {

using Clock = std::chrono::steady_clock;

// This process's end of the test: its device, buffer and QPs, the exchange
// with the peer, then the server's or the client's part.
class Endpoint {
 public:
  Endpoint(const Options& o, device::Device& device)
      : o_(o), ctx_(*device.ctx), io_(*device.io), layout_(o), pattern_(o.size), recv_busy_(o.depth),
        lists_(o.qps, o.post_list), idle_([this] { ctx_.progress(); }) {}

  bool set_up();
  // The TCP exchange and the QPs connected to the peer's: 0, or the exit status.
  int exchange();
  int serve();
  void part();
  int run_client();

 private:
  bool server() const { return o_.server.empty(); }
  std::uint8_t* slot(std::uint32_t s) const { return buf_ + layout_.slot_offset(s); }
  std::uint8_t* counter() const { return buf_ + layout_.counter_offset(reinterpret_cast<std::uint64_t>(buf_)); }
  QueuePair* qp_of_slot(std::uint64_t s) const { return qps_[s % o_.qps]; }
  std::uint64_t sum(const char* counter) const;
  void print_counters() { uroce::print_counters(ctx_, qps_[0]); }

  void prepare_buffer_and_qps();
  bool post_recv();
  Hello hello();
  bool same_test(const Hello& peer) const;
  bool connect_qps(const Hello& peer);
  void serve_completions();
  void empty_poll(int got);
  bool serve_verdict();
  bool post(std::uint64_t msg, InFlight& flight);
  // --post-list: QP `qp`'s gathered WRs in one post_send.
  auto post_list() {
    return [this](std::uint32_t qp, ibv_send_wr* first) {
      ibv_send_wr* bad = nullptr;
      return qps_[qp]->post_send(first, &bad) == 0;
    };
  }
  std::string transfer(InFlight& flight, double& seconds);
  void report_client(const InFlight& flight, double seconds);

  const Options& o_;
  Context& ctx_;
  dpdk::PortIo& io_;
  const BufferLayout layout_;
  const Pattern pattern_;
  ProtectionDomain* pd_ = nullptr;
  std::uint8_t* buf_ = nullptr;
  MemoryRegion* mr_ = nullptr;
  CompletionQueue* cq_ = nullptr;
  std::vector<QueuePair*> qps_;
  std::vector<std::uint32_t> psns_;  // each QP's first send PSN
  int fd_ = -1;                      // the TCP connection to the peer
  Hello peer_;
  // Server, SEND: a receive buffer (slot) is posted again once the message
  // it held has been checked: over several QPs, receives complete out of order.
  std::uint64_t recv_posted_ = 0;
  std::vector<bool> recv_busy_;
  std::uint64_t received_ = 0;
  std::uint64_t completed_ = 0;  // client: messages completed
  bool verified_ = true;
  std::uint32_t empty_polls_ = 0;  // CQ polls in a row that found nothing
  PostLists lists_;                 // --post-list
  const std::function<void()> idle_;  // keeps the port served while a side waits
};

std::uint64_t Endpoint::sum(const char* counter) const {
  std::uint64_t n = 0;
  for (QueuePair* q : qps_) n += q->counter(counter);
  return n;
}

bool Endpoint::set_up() {
  pd_ = ctx_.alloc_pd();
  buf_ = alloc_at_offset(ctx_, layout_.bytes, o_);
  mr_ = buf_ ? pd_->reg_mr(buf_, layout_.bytes, kAllAccess | (o_.odp ? IBV_ACCESS_ON_DEMAND : 0)) : nullptr;
  cq_ = ctx_.create_cq(cq_entries(o_));
  if (cq_ != nullptr) qps_ = create_message_qps(pd_, cq_, o_);
  if (mr_ == nullptr || cq_ == nullptr || qps_.size() != o_.qps) {
    std::fprintf(stderr, "uroce-perf: set-up failed: %s\n", ctx_.last_error().c_str());
    return false;
  }
  if (o_.offset != 0) {
    std::printf("buffer: %zu bytes at offset %ld of a page\n", layout_.bytes,
                static_cast<long>(reinterpret_cast<std::uintptr_t>(buf_) % sysconf(_SC_PAGESIZE)));
  }
  prepare_buffer_and_qps();
  return true;
}

// The READ sources, known to both sides (slot s holds pattern s), the
// counter at 0, the QPs in INIT, and the server's first SEND receives.
void Endpoint::prepare_buffer_and_qps() {
  if (server() && o_.op == Op::kRead) {
    for (std::uint32_t s = 0; s < o_.depth; ++s) pattern_.fill(slot(s), s);
  }
  const std::uint64_t atomic_start = 0;
  std::memcpy(counter(), &atomic_start, 8);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = kAllAccess;
  for (QueuePair* q : qps_) q->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (server() && o_.op == Op::kSend) {
    for (std::uint32_t i = 0; i < o_.depth; ++i) post_recv();
  }
}

// Posts the next receive unless its slot still holds an unchecked message.
bool Endpoint::post_recv() {
  const auto s = static_cast<std::uint32_t>(recv_posted_ % o_.depth);
  if (recv_busy_[s]) return true;
  recv_busy_[s] = true;
  ibv_sge sge = app::local_sge(slot(s), o_.size, *mr_);
  ibv_recv_wr wr = app::recv_wr(recv_posted_++, sge);
  ibv_recv_wr* bad = nullptr;
  // Each QP takes its messages in order, so receive k meets message k.
  return qp_of_slot(s)->post_recv(&wr, &bad) == 0;
}

Hello Endpoint::hello() {
  Hello mine;
  std::snprintf(mine.op, sizeof mine.op, "%s", op_name(o_.op));
  mine.size = o_.size;
  mine.iters = o_.iters;
  mine.depth = o_.depth;
  mine.mtu = o_.mtu;
  mine.qps = o_.qps;
  std::random_device rd;
  for (QueuePair* q : qps_) {
    mine.qpns.push_back(q->qp_num());
    mine.psns.push_back(static_cast<std::uint32_t>(rd()) & 0xffffff);
  }
  psns_ = mine.psns;
  mine.rkey = mr_->rkey;
  mine.vaddr = reinterpret_cast<std::uint64_t>(buf_);
  mine.gid = ctx_.gid();
  return mine;
}

bool Endpoint::same_test(const Hello& peer) const {
  return std::string(peer.op) == op_name(o_.op) && peer.size == o_.size && peer.iters == o_.iters &&
         peer.depth == o_.depth && peer.mtu == o_.mtu && peer.qps == o_.qps;
}

bool Endpoint::connect_qps(const Hello& peer) {
  ConnectParams cp;
  cp.mtu = app::mtu_enum(o_.mtu);
  cp.transport = o_.transport;
  for (std::uint32_t q = 0; q < o_.qps; ++q) {
    if (connect_rc(qps_[q], peer.gid, peer.qpns[q], psns_[q], peer.psns[q], cp) != 0) return false;
  }
  if (app::transport_asked(o_.transport)) {
    std::printf("transport: %s\n", app::describe_transport(qps_[0]->transport_options()).c_str());
  }
  return true;
}

// The server hears the client's Hello first and checks it runs the same
// test; the client connects its QPs once it has the server's answer.
int Endpoint::exchange() {
  std::string error;
  fd_ = server() ? oob::accept_one(o_.tcp_port, error, idle_) : oob::connect_to(o_.server, o_.tcp_port, error);
  if (fd_ < 0) {
    std::fprintf(stderr, "uroce-perf: %s\n", error.c_str());
    return 1;
  }
  const std::string out = encode_hello(hello());
  bool ok = true;
  if (server()) {
    ok = read_hello(fd_, o_.qps, peer_, idle_);
    if (ok && !same_test(peer_)) {
      std::fprintf(stderr,
                   "uroce-perf: the client runs %s -s %u -n %llu -t %u -m %u -q %u; start both sides with the same test\n",
                   peer_.op, peer_.size, static_cast<unsigned long long>(peer_.iters), peer_.depth, peer_.mtu, peer_.qps);
      close(fd_);
      return 2;
    }
    ok = ok && connect_qps(peer_) && oob::write_full(fd_, out.data(), out.size());
  } else {
    ok = oob::write_full(fd_, out.data(), out.size()) && read_hello(fd_, o_.qps, peer_, idle_) &&
         peer_.qps == o_.qps && connect_qps(peer_);
  }
  if (!ok) {
    const std::string why = ctx_.last_error();
    std::fprintf(stderr, "uroce-perf: the exchange with the peer failed: %s\n",
                 !why.empty() ? why.c_str()
                              : "the peer hung up (does it run the same test and uroce-perf version? see its output)");
    close(fd_);
    return 1;
  }
  return 0;
}

// With --workers, a thread that finds its CQ empty 256 times in a row
// offers its CPU, as lib/ibverbs's ibv_poll_cq does: where busy threads
// outnumber cores (two processes of a worker and a poller each on two
// cores), the worker it waits for would otherwise wait for its time slice.
// The two then compare as the same program (README, bench-abi).
void Endpoint::empty_poll(int got) {
  if (!o_.workers || got != 0) {
    empty_polls_ = 0;
  } else if (++empty_polls_ >= 256) {
    empty_polls_ = 0;
    sched_yield();
  }
}

// The server's engine run while it waits for the client's "done": SENDs
// received, checked, and their buffers posted again.
void Endpoint::serve_completions() {
  ctx_.progress();
  ibv_wc wc[32];
  int k;
  for (; (k = cq_->poll(32, wc)) > 0; empty_poll(k)) {
    for (int i = 0; i < k; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        std::fprintf(stderr, "uroce-perf: receive failed: %s\n", wc_status_str(wc[i].status));
        verified_ = false;
        continue;
      }
      const auto s = static_cast<std::uint32_t>(wc[i].wr_id % o_.depth);
      if (o_.verify && !pattern_.matches(slot(s), wc[i].wr_id)) verified_ = false;
      ++received_;
      recv_busy_[s] = false;
      while (!recv_busy_[recv_posted_ % o_.depth] && post_recv()) {
      }
    }
  }
  empty_poll(k);
}

// What the server can see once the client is done: each WRITE slot holds
// the last message written into it, the counter counts every fetch-and-add,
// and every SEND arrived.
bool Endpoint::serve_verdict() {
  bool verified = verified_;
  if (o_.verify && o_.op == Op::kWrite) {
    for (std::uint32_t s = 0; s < o_.depth && s < o_.iters; ++s) {
      const std::uint64_t last = (o_.iters - 1 - s) / o_.depth * o_.depth + s;
      if (!pattern_.matches(slot(s), last)) verified = false;
    }
  }
  if (o_.verify && o_.op == Op::kAtomic && load_u64(counter()) != o_.iters) verified = false;
  if (o_.op == Op::kSend && received_ != o_.iters) verified = false;
  return verified;
}

// After the verdict each side stops its engine (the worker too, with
// --workers), then parts (oob::part): no side closes its port while the
// other still polls.
void Endpoint::part() {
  ctx_.stop_workers();
  oob::part(fd_);
}

// The server serves: it keeps its engine running until the client says it
// is done, then tells the client its verdict.
int Endpoint::serve() {
  char done[8];
  const bool ok = oob::read_full(fd_, done, sizeof done, [this] { serve_completions(); });
  verified_ = serve_verdict();
  const char verdict = verified_ ? 'y' : 'n';
  oob::write_full(fd_, &verdict, 1);
  part();
  if (o_.counters) print_counters();
  const bool send = o_.op == Op::kSend;
  std::printf("uroce-perf server: %s test done%s%s\n", op_name(o_.op),
              send ? (", " + std::to_string(received_) + " messages received").c_str() : "",
              o_.verify ? (verified_ ? "; verification: PASSED" : "; verification: FAILED") : "");
  return ok && verified_ ? 0 : 1;
}

bool Endpoint::post(std::uint64_t msg, InFlight& flight) {
  const std::uint32_t s = flight.slot_of(msg);
  // --post-list: gathered for its QP, posted when the list is full (or by
  // flush_all once no more may be posted).
  const bool gathered = o_.post_list > 1;
  const auto qp = static_cast<std::uint32_t>(s % o_.qps);
  const std::size_t i = gathered ? lists_.add(qp) : 0;
  ibv_sge one_sge;
  ibv_send_wr one_wr;
  ibv_sge& sge = gathered ? lists_.sge(i) : one_sge;
  ibv_send_wr& wr = gathered ? lists_.wr(i) : one_wr;
  sge = app::local_sge(slot(s), o_.size, *mr_);
  wr = message_wr(o_.op, s, sge, peer_.vaddr + layout_.slot_offset(s),
                  peer_.vaddr + layout_.counter_offset(peer_.vaddr), peer_.rkey);
  if (o_.verify && source_is_local(o_.op)) pattern_.fill(slot(s), msg);
  flight.posted(msg);
  if (gathered) return !lists_.full(qp) || lists_.flush(qp, post_list());
  ibv_send_wr* bad = nullptr;
  return qps_[qp]->post_send(&wr, &bad) == 0;
}

// The client's test: "" or what failed; `seconds` of wall time.
std::string Endpoint::transfer(InFlight& flight, double& seconds) {
  const auto t0 = Clock::now();
  auto last_progress = t0;
  std::uint64_t next = 0;
  std::uint64_t empty_turns = 0;
  std::string failure;
  while (completed_ < o_.iters && failure.empty()) {
    while (next < o_.iters && flight.may_post(next, completed_)) {
      if (!post(next++, flight)) {
        failure = "post failed: " + ctx_.last_error();
        break;
      }
    }
    if (o_.post_list > 1 && failure.empty() && !lists_.flush_all(post_list())) {
      failure = "post failed: " + ctx_.last_error();
    }
    ctx_.progress();
    ibv_wc wc[32];
    const int k = cq_->poll(32, wc);
    empty_poll(k);
    // The clock read once every 4096 empty polls: read on each, it made
    // every turn of the latency loop longer by its cost.
    if (k == 0 && ++empty_turns % 4096 == 0 && Clock::now() - last_progress > std::chrono::seconds(20)) {
      failure = "no completion for 20 s";
    }
    if (k > 0) last_progress = Clock::now();  // once per poll: the clock costs as much as a message
    for (int i = 0; i < k; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        failure = std::string("completion error: ") + wc_status_str(wc[i].status);
        break;
      }
      const auto s = static_cast<std::uint32_t>(wc[i].wr_id);
      const std::uint64_t msg = flight.completed(s, last_progress);
      if (o_.verify && o_.op == Op::kRead && !pattern_.matches(slot(s), s)) verified_ = false;
      // Over several QPs the adds interleave in any order.
      if (o_.verify && o_.op == Op::kAtomic && o_.qps == 1 && !fetch_add_result_matches(slot(s), msg)) verified_ = false;
      ++completed_;
    }
  }
  seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return failure;
}

void Endpoint::report_client(const InFlight& flight, double seconds) {
  const LatencySummary lat = summarize_latency(flight.latency_us());
  const Rates r = rates(completed_, o_.size, seconds);
  std::printf("%10s %12s %14s %14s\n", "#bytes", "#iterations", "BW [Gb/s]", "MsgRate [Mpps]");
  std::printf("%10u %12llu %14.2f %14.3f\n", o_.size, static_cast<unsigned long long>(completed_), r.gbps, r.mpps);
  print_latency("post to completion", o_.lat, lat);
  std::printf("retransmitted %llu packets, %llu timeouts, %llu sequence NAKs, %llu RNR NAKs\n",
              static_cast<unsigned long long>(sum("retransmitted_packets")),
              static_cast<unsigned long long>(sum("timeouts")),
              static_cast<unsigned long long>(sum("nak_seq_received")),
              static_cast<unsigned long long>(sum("rnr_naks_received")));
  if (o_.verify) std::printf("verification: %s\n", verified_ ? "PASSED (both sides)" : "FAILED");
  if (o_.counters) print_counters();
  if (o_.json.empty()) return;
  JsonLine j = json_head(o_);
  j.number("qps", o_.qps).number("iterations", completed_).number("mtu", o_.mtu).number("tx_depth", o_.depth);
  j.number("bw_gbps", r.gbps).number("msg_rate_mpps", r.mpps).latency(lat);
  if (o_.verify) j.boolean("verified", verified_);
  j.write(o_.json);
}

// The client runs the test, tells the server it is done, hears the
// server's verdict on what it received, and reports.
int Endpoint::run_client() {
  InFlight flight(o_.depth, o_.lat);
  double seconds = 0;
  const std::string failure = transfer(flight, seconds);
  char verdict = 'n';
  const bool told = oob::write_full(fd_, "done\0\0\0", 8) && oob::read_full(fd_, &verdict, 1, idle_);
  part();
  if (!failure.empty()) {
    std::fprintf(stderr, "uroce-perf: %s\n", failure.c_str());
    if (o_.counters) print_counters();
    return 1;
  }
  if (!told) verdict = 'n';
  if (o_.verify && verdict != 'y') verified_ = false;
  report_client(flight, seconds);
  return o_.verify && !verified_ ? 1 : 0;
}

}  // namespace

int run_remote(const Options& o) {
  const std::unique_ptr<device::Device> device = app::open_port_device("uroce-perf", o.port_id, o.ip, o.dcqcn_params(), o.pfc_priority,
                                                                           o.delay_params());
  if (!device) return 1;
  // --workers: the engine on its own thread, this one posting and polling,
  // as a verbs program runs on lib/ibverbs.
  if (o.workers && device->ctx->start_worker(-1) != 0) {
    std::fprintf(stderr, "uroce-perf: the worker did not start: %s\n", device->ctx->last_error().c_str());
    return 1;
  }
  Endpoint side(o, *device);
  if (!side.set_up()) return 1;
  if (const int rc = side.exchange(); rc != 0) return rc;
  return o.server.empty() ? side.serve() : side.run_client();
}

}  // namespace uroce::perf
