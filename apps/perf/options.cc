#include "perf/options.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>

#include "common/args.h"
#include "common/path_mtu.h"
#include "common/text_file.h"
#include "common/transport_flags.h"
#include "uroce/metrics.h"
#include "uroce/verbs.h"

namespace uroce::perf {
namespace {

using app::usage_error;

constexpr const char* kUsage =
    "usage: uroce-perf --sim OP [options]\n"
    "       uroce-perf [EAL args] -- --ring OP [options]\n"
    "  --sim   both devices in this process over the simulated link (virtual time)\n"
    "  --ring  both devices in this process on two DPDK ports joined by net_ring;\n"
    "          without EAL args: --no-huge --no-shconf --no-pci -l 0 -m 512\n"
    "       uroce-perf [EAL args] -- --ip ADDR/PREFIX [--port-id N] [-p TCP] OP [options] [server]\n"
    "  two processes, perftest style: without a server name, wait for a client on\n"
    "  TCP port 18515; with one, run the test against it. Both sides take the same\n"
    "  OP and options; with --verify each checks what it can see.\n"
    "  OP: write | read | send | atomic (fetch-and-add)\n"
    "  -s, --size BYTES      message size (default 65536; atomics are 8)\n"
    "  -n, --iters N         messages (default 10000)\n"
    "  -t, --tx-depth N      messages in flight in bw mode (default 64)\n"
    "  -m, --mtu BYTES       path MTU: 256, 512, 1024, 2048, 4096 (default 4096)\n"
    "      --offset BYTES    each side's buffer starts BYTES into a page, 0 to page size - 1\n"
    "                        (default 0), so messages cross page boundaries\n"
    "      --lat             latency mode: one message at a time (default: bandwidth)\n"
    "      --loss RATE       loss probability on the simulated link, each way (default 0)\n"
    "      --seed N          seed of the simulated link (default 1)\n"
    "      --verify          check every byte and every atomic result\n"
    "      --odp             register both buffers on demand (IBV_ACCESS_ON_DEMAND): not\n"
    "                        pinned, reached through the kernel (docs/performance.md)\n"
    "      --json FILE       also write the results as JSON\n"
    "      --pcap FILE       record every frame on the simulated link (uroce-dump, tshark read it)\n"
    "      --counters        print the QP, engine and port counters on exit\n"
    "      --report-interval S  with --sim or --ring: every S seconds a line of JSON with that\n"
    "                        interval's figures: {\"interval\":{\"start_s\",\"end_s\" (CLOCK_MONOTONIC),\n"
    "                        \"messages\",\"bytes\",\"gbps\",\"msgs_per_s\"}} (messages completed)\n"
    "      --metrics ADDR:PORT  with --ring or --ip: Prometheus's /metrics on ADDR:PORT while it\n"
    "                        runs (docs/operating.md); uroce-stat reads the same counters\n"
    "      --dcqcn on|off|FILE  DCQCN congestion control: ECN marking, CNPs, paced QPs;\n"
    "                        on: conf/dcqcn.conf's defaults; FILE: that file's values (default off)\n"
    "      --cc dcqcn|delay|off  the congestion control: dcqcn (as --dcqcn on, or its FILE),\n"
    "                        delay (delay-based, conf/delay.conf's defaults) or off (default)\n"
    "      --delay FILE      delay-based congestion control with that file's values (conf/delay.conf)\n"
    "      --pfc PRIO        with --ring or --ip: the lossless 802.1p priority, 0-7 (default off):\n"
    "                        PFC enabled on the port where its driver can (else one warning), and\n"
    "                        data sent with DSCP PRIO*8 (README \"PFC and traffic classes\")\n"
    "  -q, --qps N           spread the messages over N QP pairs (default 1, at most 16384;\n"
    "                        --sim/--ring: message i goes to QP i mod N, so the messages in flight\n"
    "                        rotate over all N; --ip: message slot s goes to QP s mod N, so -t\n"
    "                        must be at least N, best a multiple of it)\n"
    "      --post-list N     post each QP's WRs N to an ibv_post_send call, chained (perftest's\n"
    "                        --post_list; default 1); the last list of a round may be shorter\n"
    "      --idle-qps N      with --sim or --ring: N more connected QP pairs that carry\n"
    "                        nothing (what the engine pays per poll for QPs it serves);\n"
    "                        their resident memory per QP is printed\n"
    "      --idle-depth N    send and receive queue depth of each idle QP (default 16)\n"
    "      --idle-rd-atomic N  READs/atomics each idle QP may have outstanding, each way\n"
    "                        (max_rd_atomic and max_dest_rd_atomic, 0-128; default 16)\n"
    "      --workers         with --ring: each device's engine on its own thread (CPUs 0, 1);\n"
    "                        this thread only posts and polls (wants a third core: with two,\n"
    "                        the three busy threads time-slice); with --ip: the device's\n"
    "                        engine on a thread of its own, not pinned (as uroce-run runs it),\n"
    "                        and this thread yields after 256 empty CQ polls, as\n"
    "                        lib/ibverbs's ibv_poll_cq does\n"
    "Exit status: 0 ok; 1 a transfer or verification failed; 2 bad usage.\n";

constexpr Op kOps[] = {Op::kWrite, Op::kRead, Op::kSend, Op::kAtomic};
constexpr std::uint32_t kMaxQp = DeviceLimits{}.max_qp;

// --dcqcn on|off|FILE: on and FILE set `dcqcn`; off leaves it as it is.
void dcqcn_option(const std::string& v, std::optional<cc::DcqcnParams>& dcqcn) {
  if (v == "off") return;
  cc::DcqcnParams params;
  if (v != "on") {
    std::string text;
    if (!app::read_text_file(v, text)) {
      usage_error("--dcqcn: cannot read '" + v + "' (give on, off, or a file like conf/dcqcn.conf)");
    }
    if (const std::string err = cc::parse_dcqcn_params(text, params); !err.empty()) {
      usage_error("--dcqcn " + v + ": " + err);
    }
  }
  dcqcn = params;
}

// --ip ADDR/PREFIX: the address (the prefix is not needed).
void ip_option(std::string v, Options& o) {
  v = v.substr(0, v.find('/'));
  if (inet_pton(AF_INET, v.c_str(), o.ip.data()) != 1) usage_error("--ip: '" + v + "' is not an IPv4 address");
  o.have_ip = true;
  o.fabric = o.fabric.empty() ? "port" : o.fabric;
}

// Every flag into `o`; the operation's name into `op`.
void read_flags(app::ArgReader& args, Options& o, std::string& op) {
  auto u32 = [&](const char* flag) { return static_cast<std::uint32_t>(args.number(flag)); };
  std::string cc_arg;  // --cc, taken once every flag is read (--dcqcn may come after it)
  std::string delay_file;  // --delay
  for (std::string a; args.next(a);) {
    if (a == "--sim") o.fabric = "sim";
    else if (a == "--ring") o.fabric = "ring";
    else if (a == "-s" || a == "--size") o.size = u32("-s");
    else if (a == "-n" || a == "--iters") o.iters = args.number("-n");
    else if (a == "-t" || a == "--tx-depth") o.depth = u32("-t");
    else if (a == "-m" || a == "--mtu") o.mtu = u32("-m");
    else if (a == "--offset") o.offset = app::parse_page_offset(args.value("--offset"), "--offset");
    else if (a == "--lat") o.lat = true;
    else if (a == "--bw") o.lat = false;
    else if (a == "--loss") o.loss = std::atof(args.value("--loss").c_str());
    else if (a == "--seed") o.seed = args.number("--seed");
    else if (a == "--verify") o.verify = true;
    else if (a == "--odp") o.odp = true;
    else if (a == "--json") o.json = args.value("--json");
    else if (a == "--pcap") o.pcap = args.value("--pcap");
    else if (a == "--counters") o.counters = true;
    else if (a == "--report-interval") {
      const std::string v = args.value("--report-interval");
      char* end = nullptr;
      o.report_interval = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.report_interval >= 0.01 && o.report_interval <= 3600)) {
        usage_error("--report-interval takes seconds, 0.01 to 3600, not '" + v + "'");
      }
    }
    else if (a == "--metrics") {
      o.metrics = args.value("--metrics");
      if (const std::string e = metrics::check_listen_address(o.metrics); !e.empty()) usage_error(e);
    }
    else if (a == "--dcqcn") dcqcn_option(args.value("--dcqcn"), o.dcqcn);
    else if (a == "--cc") cc_arg = args.value("--cc");
    else if (a == "--delay") delay_file = args.value("--delay");
    else if (a == "--pfc") o.pfc_priority = app::parse_pfc_priority(args.value("--pfc"), "--pfc");
    else if (a == "--workers") o.workers = true;
    else if (app::transport_flag(a, args, o.transport)) continue;
    else if (a == "-q" || a == "--qps") o.qps = u32("--qps");
    else if (a == "--post-list") o.post_list = u32("--post-list");
    else if (a == "--idle-qps") o.idle_qps = u32("--idle-qps");
    else if (a == "--idle-depth") o.idle_depth = u32("--idle-depth");
    else if (a == "--idle-rd-atomic") o.idle_rd_atomic = u32("--idle-rd-atomic");
    else if (a == "--ip") ip_option(args.value("--ip"), o);
    else if (a == "--port-id") o.port_id = static_cast<std::uint16_t>(args.number("--port-id"));
    else if (a == "-p" || a == "--port") o.tcp_port = static_cast<std::uint16_t>(args.number("-p"));
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::fputs("Transport options (issue 30), on every QP of both ends:\n", stdout);
      std::fputs(app::kTransportUsage, stdout);
      std::exit(0);
    } else if (!a.empty() && a[0] != '-' && op.empty()) op = a;
    else if (!a.empty() && a[0] != '-' && o.server.empty()) o.server = a;
    else usage_error("unknown argument '" + a + "'");
  }
  if (!cc_arg.empty()) {
    if (cc_arg != "dcqcn" && cc_arg != "delay" && cc_arg != "off") {
      usage_error("--cc takes dcqcn, delay or off, not '" + cc_arg + "'");
    }
    if (cc_arg == "dcqcn" && !o.dcqcn) o.dcqcn.emplace();
    if (cc_arg != "dcqcn" && o.dcqcn) usage_error("--dcqcn with --cc " + cc_arg + ": DCQCN runs only with --cc dcqcn");
    if (cc_arg == "delay") o.delay.emplace();
  }
  if (!delay_file.empty()) {
    if (!cc_arg.empty() && cc_arg != "delay") usage_error("--delay with --cc " + cc_arg + ": its values are for --cc delay");
    if (o.dcqcn) usage_error("--delay with --dcqcn: give one congestion control");
    std::string text;
    if (!app::read_text_file(delay_file, text)) {
      usage_error("--delay: cannot read '" + delay_file + "' (give a file like conf/delay.conf)");
    }
    cc::DelayParams params;
    if (const std::string err = cc::parse_delay_params(text, params); !err.empty()) {
      usage_error("--delay " + delay_file + ": " + err);
    }
    o.delay = params;
  }
}

// Which options go with which fabric, and the QP counts the device allows.
void check_fabric(const Options& o) {
  if (o.fabric.empty()) usage_error("no fabric given: pass --sim, -- --ring, or -- --ip ADDR/PREFIX after EAL arguments");
  if (!o.server.empty() && o.fabric != "port") usage_error("a server name goes with --ip (two processes)");
  if (o.workers && o.fabric != "ring" && o.fabric != "port") usage_error("--workers goes with --ring or --ip");
  if (o.idle_qps > 0 && o.fabric != "sim" && o.fabric != "ring") usage_error("--idle-qps goes with --sim or --ring");
  if (o.idle_rd_atomic > 128) usage_error("--idle-rd-atomic: 0 to 128 (the device's max_qp_rd_atom)");
  if (o.idle_depth == 0 || o.idle_depth > 16384) usage_error("--idle-depth: 1 to 16384 (the device's max_qp_wr)");
  if (o.qps == 0 || o.qps > kMaxQp) usage_error("--qps: 1 to 16384 (the device's max_qp)");
  if (o.post_list == 0 || o.post_list > 1024) usage_error("--post-list: 1 to 1024 WRs per post");
  if (o.post_list > 1 && o.lat) usage_error("--post-list with --lat: a latency test has one message in flight");
  if (o.qps + o.idle_qps > kMaxQp) usage_error("--qps plus --idle-qps: at most 16384 (the device's max_qp)");
  if (o.fabric == "port" && o.depth < o.qps) usage_error("-t (messages in flight) must be at least --qps with --ip");
  if (o.pfc_priority >= 0 && o.fabric == "sim") usage_error("--pfc sets up a DPDK port; use --ring or --ip");
  if (!o.pcap.empty() && o.fabric != "sim") usage_error("--pcap records the simulated link; use --sim");
  if (o.loss > 0 && o.fabric != "sim") usage_error("--loss applies to the simulated link; use --sim");
  app::check_transport_flags(o.transport);
}

// The operation and the test's figures.
void check_test(Options& o, const std::string& op) {
  bool known = false;
  for (const Op k : kOps) {
    if (op == op_name(k)) {
      o.op = k;
      known = true;
    }
  }
  if (!known) usage_error("OP must be write, read, send or atomic");
  if (o.op == Op::kAtomic) o.size = 8;
  if (o.size > (1u << 30)) usage_error("-s: at most 1 GiB");
  if (o.iters == 0) usage_error("-n must be at least 1");
  if (o.depth == 0 || o.depth > 16384) usage_error("-t must be 1..16384");
  if (!app::is_path_mtu(o.mtu)) usage_error("-m must be 256, 512, 1024, 2048 or 4096");
  if (o.loss < 0 || o.loss >= 1) usage_error("--loss must be in [0, 1)");
  if (o.lat) o.depth = 1;
  if (!o.metrics.empty() && o.fabric == "sim") {
    usage_error("--metrics needs --ring or --ip: the simulated link's devices have no telemetry");
  }
  if (o.report_interval > 0 && o.fabric == "port") usage_error("--report-interval is for --sim and --ring");
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kWrite: return "write";
    case Op::kRead: return "read";
    case Op::kSend: return "send";
    case Op::kAtomic: return "atomic";
  }
  return "?";
}

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  std::string op;
  app::ArgReader reader(args);
  read_flags(reader, o, op);
  check_fabric(o);
  check_test(o, op);
  return o;
}

}  // namespace uroce::perf
