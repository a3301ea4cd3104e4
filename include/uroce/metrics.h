// A Prometheus exporter for uroce's counters (the registry of uroce/stats.h),
// for uroced, uroce-perf and programs under uroce-run: /metrics in
// Prometheus's text exposition format, version 0.0.4, served by a thread of
// its own, off the data path.
//
// Names follow Prometheus's conventions: uroce_<scope>_<row>, scope engine,
// port or qp; a counter ends in _total, a gauge (Stat::kind == kGauge) does
// not; time rows are converted to seconds (busy_ns: uroce_engine_busy_seconds_total,
// cc_rtt_us: uroce_qp_cc_rtt_seconds). HELP is the row's description. Every
// series has a `port` label; a QP's also `qpn` and the labels its
// DeviceSnapshot::qp_labels gives it.
//
//   uroce_engine_<row>_total{port}        engine rows, summed over the device's engines
//   uroce_engine_dropped_packets_total{port,reason}  the drop_<reason> rows again, labelled
//   uroce_port_<row>_total{port}          port rows (the NIC's and the port queues')
//   uroce_port_qps{port,state}            QPs by state (RESET .. ERR, each one, zero or not)
//   uroce_port_qp_<row>_total{port}       every QP counter summed over the port's QPs,
//                                         destroyed ones included: monotonic (below)
//   uroce_port_qp_<row>{port}             QP gauges summed over the live QPs (cc_cwnd);
//                                         not the time gauges (a sum of round trips is no quantity)
//   uroce_port_qp_{send,recv}_wqes_outstanding{port}
//   uroce_qp_info{port,qpn,engine,type,state,peer_gid,peer_qpn} 1
//   uroce_qp_state{port,qpn} 0 RESET 1 INIT 2 RTR 3 RTS 4 SQD 5 SQE 6 ERR
//   uroce_qp_<row>_total, uroce_qp_<row>, uroce_qp_{send,recv}_wqes_outstanding
//   uroce_qp_cc_rate_bytes_per_second, uroce_qp_cc_target_rate_bytes_per_second
//                                         (bytes: Prometheus's base unit, not bits),
//   uroce_qp_dcqcn_alpha, uroce_qp_dcqcn_rate_cuts_total   (congestion control on)
//   uroce_metrics_*                       the exporter's own (scrapes, collection time, ...)
//
// Cardinality is bounded: a QP has series of its own only while it moves
// (a counter grew within Options::qp_idle), and at most Options::max_qps of
// them, the ones that moved the most bytes since the previous collection;
// the port aggregates cover every QP. The aggregates stay monotonic across
// QP destruction: each QP's last values are remembered, and when it goes
// they stay in its port's sums (a QPN seen again with a counter smaller than
// before is a new QP), so rate() never sees a false reset. What a QP counted
// between the last collection and its destruction is not seen.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "uroce/stats.h"

namespace uroce::metrics {

struct Label {
  std::string name;  // [a-zA-Z_][a-zA-Z0-9_]*; other characters become _
  std::string value;
};

// One device (one port) at one collection.
struct DeviceSnapshot {
  // The `port` label's value, "0". Unique within a Snapshot (a repeated
  // one is skipped: its series would collide).
  std::string port = "0";
  std::vector<Stat> device;  // Context::stats(): engine and port rows
  std::vector<QpStats> qps;  // every QP (Context::qp_stats_page, page after page)
  // Labels a QP's own series carry besides port and qpn (uroced: the
  // client's pid). A name the exporter uses itself (port, qpn, and the
  // info labels) is dropped.
  std::map<std::uint32_t, std::vector<Label>> qp_labels;
};

// A program's own value: uroced_clients.
struct Extra {
  // The family: values with the same name form one (HELP and TYPE from the
  // first). A counter's name gets _total if it lacks it. Should not start
  // with uroce_ (the exporter's names); one whose family already exists with
  // another type is dropped.
  std::string name;
  std::string help;
  StatKind type = StatKind::kGauge;
  std::vector<Label> labels;
  double value = 0;
};

struct Snapshot {
  std::vector<DeviceSnapshot> devices;
  std::vector<Extra> extra;
};

// Renders snapshots as exposition text, remembering between collections
// what the aggregates and the choice of QPs need. Not thread-safe: one
// collector calls it.
class Exposition {
 public:
  explicit Exposition(std::size_t max_qps = 100, std::chrono::seconds qp_idle = std::chrono::seconds(300));

  // The page for `snapshot`, collected at `now`. Families sorted by name,
  // HELP and TYPE before their samples, samples sorted by their labels
  // (numbers as numbers): the same snapshot renders the same text. The
  // first call sets the baseline: a QP moves only from the next one on
  // (so one present at start-up with old counts does not crowd out the
  // busy ones); a QP that appears later has moved if it counted anything.
  std::string render(const Snapshot& snapshot, std::chrono::steady_clock::time_point now);

  // Of the last render: QPs in the snapshot, and those with series of their own.
  std::size_t qps_seen() const { return qps_seen_; }
  std::size_t qps_shown() const { return qps_shown_; }

  ~Exposition();
  Exposition(const Exposition&) = delete;
  Exposition& operator=(const Exposition&) = delete;

 private:
  struct PortMemory;
  std::size_t max_qps_;
  std::chrono::seconds qp_idle_;
  bool baseline_taken_ = false;
  std::size_t qps_seen_ = 0;
  std::size_t qps_shown_ = 0;
  std::map<std::string, std::unique_ptr<PortMemory>> ports_;
};

struct Options {
  // ADDR:PORT, [IPv6]:PORT, or PORT alone (on 127.0.0.1); port 0 takes a
  // free one (Exporter::port()). 0.0.0.0:PORT or [::]:PORT to be reached
  // from other hosts: there is no authentication.
  std::string listen = "127.0.0.1:9464";
  std::size_t max_qps = 100;                              // QPs with series of their own
  std::chrono::seconds qp_idle = std::chrono::seconds(300);  // a QP still moves this long after counting
  // Scrapes closer together than this get the last page: collecting makes
  // control calls that hold the engines briefly, so a scraper at 1 kHz
  // costs at most 1 / min_interval collections a second.
  std::chrono::milliseconds min_interval = std::chrono::milliseconds(100);
  // And at most this share of the time is spent making pages: after a
  // collection and its rendering took t of the exporter thread's CPU time,
  // the next waits at least t / max_collect_share (10,000 QPs take milliseconds to copy, each
  // page's copy holding the engines, and tens of milliseconds to render,
  // whose memory traffic the engines' cores feel; at 1% a scraper at any
  // rate costs the traffic about 1%, the page it gets being older).
  // 0: min_interval alone.
  double max_collect_share = 0.01;
  // Connections open at once. One more evicts the one waiting longest for
  // its request to arrive, or is closed at once if none is waiting.
  std::size_t max_connections = 8;
  // A connection's whole request head must arrive within read_timeout, its
  // whole answer be taken within write_timeout: a slow-loris or a scraper
  // that never reads is dropped.
  std::chrono::milliseconds read_timeout = std::chrono::seconds(5);
  std::chrono::milliseconds write_timeout = std::chrono::seconds(10);
  // CPUs the thread may run on (empty: those of the thread calling start()).
  // Keep it off the engines' cores.
  std::vector<int> cpus;
};

// "" if `text` is a listen address (Options::listen), the socket address
// in `out` and its length in `len`; else one line saying what is wrong and
// what is expected. For flag parsers: check_listen_address.
std::string parse_listen_address(const std::string& text, sockaddr_storage& out, socklen_t& len);
std::string check_listen_address(const std::string& text);

// Fills `out` with `ctx`'s counters: its engine and port rows and every QP,
// read a page of `qps_per_call` QPs per read-only control call (10,000 QPs
// never hold the engines in one long call). `out.port` and `qp_labels` are
// left as they are; what `out.qps` held is written over, its memory kept.
// For a collect function; never on a worker or inside a control call.
void collect(const Context& ctx, DeviceSnapshot& out, std::size_t qps_per_call = 256);

// The HTTP server. One thread of its own, "uroce-metrics" (a poll() loop on
// non-blocking sockets), answers:
//   GET /metrics   the page (Content-Type: text/plain; version=0.0.4; charset=utf-8)
//   GET /          a paragraph saying what this is
//   HEAD of either, 404 other paths, 405 other methods, 431 a request head
//   over 8 KiB, 400 what is not HTTP; Connection: close after each answer.
// collect() is called on that thread only, when a scrape needs a new page
// (and once at start, the baseline of Exposition::render): it fills the
// Snapshot it is given, and may throw (the scrape answers 500 with the
// message). That is the previous collection's, `extra` and each device's
// `qp_labels` emptied: make `devices` the devices there are now, writing
// over what it holds (metrics::collect and lib/device's collect_exposed
// do, so their memory is reused), or clear it first. Signals are blocked on the thread. A forked child holds
// none of a running exporter's descriptors (a fork handler closes them, so
// the port is free once the parent lets it go), and its stop() leaves the
// parent's thread alone.
class Exporter {
 public:
  Exporter(Options options, std::function<void(Snapshot&)> collect);
  ~Exporter();  // stop()
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // Binds, listens and starts the thread. false with one line in `error`:
  // "metrics: cannot listen on 127.0.0.1:9464: Address already in use
  // (choose another with --metrics ADDR:PORT)".
  bool start(std::string& error);
  // Closes every connection and joins the thread; at once, whatever the
  // clients do (a collection in progress is finished first). Idempotent.
  void stop();
  // The port bound (Options::listen's, or the one port 0 got); 0 before start().
  std::uint16_t port() const { return port_; }

  // Since start(), for tests and the program's own log: collect() calls,
  // and connections closed by max_connections or a deadline.
  std::uint64_t collections() const;
  std::uint64_t connections_refused() const;
  std::uint64_t connections_timed_out() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::uint16_t port_ = 0;
};

}  // namespace uroce::metrics
