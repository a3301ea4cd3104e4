// uroce-run: runs an unmodified verbs program on uroce. It puts uroce's
// libibverbs.so.1 first on the program's library path and hands it the port
// through the environment (UROCE_EAL, UROCE_IP, ...; lib/ibverbs/config.cc
// reads them), then executes the program in its own place. No DPDK runs in
// this process: the library starts EAL inside the program.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cc/choice.h"
#include "common/args.h"
#include "netdev.h"
#include "uroce/metrics.h"

namespace {

constexpr const char* kUsage =
    "usage: uroce-run [EAL args] -- --ip ADDR/PREFIX [--port-id N] [--queues N] [--workers CPUS]\n"
    "                 [--cc dcqcn|delay|off] [--dcqcn FILE] [--delay FILE] [--pfc PRIO] [--min-ack-timeout N]\n"
    "                 [--transport SPEC] [--metrics ADDR:PORT] [--progress workers|caller] [--netdev IF]\n"
    "                 [--lib DIR] PROGRAM [ARGS...]\n"
    "       uroce-run --service [--socket PATH] [--transport SPEC] [--netdev IF] [--lib DIR] PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM, an unmodified verbs program (ibv_rc_pingpong, ib_write_bw, ucx_perftest, ...),\n"
    "on uroce: it sees one RDMA device, uroce0, on the DPDK port the EAL args name, with\n"
    "RoCEv2 GIDs fe80:: (index 0) and ::ffff:ADDR (index 1, e.g. -g 1 or -x 1).\n"
    "\n"
    "  EAL args        DPDK's, as for uroce-perf: e.g. --no-huge --no-shconf --no-pci -l 0\n"
    "                  --vdev=net_af_packet0,iface=eth1,framesz=8192 (no argument may hold a blank)\n"
    "  --ip ADDR/LEN   the port's IPv4 address (its GID); required\n"
    "  --port-id N     the DPDK port (default 0)\n"
    "  --queues N      port queues, one engine each (default 1)\n"
    "  --workers CPUS  the CPU of each queue's worker thread, e.g. 2,3 (default: not pinned)\n"
    "  --cc dcqcn|delay|off  the congestion control of every QP (default off): dcqcn (ECN marks\n"
    "                  and CNPs; conf/dcqcn.conf's values, or --dcqcn's file), delay (each ACK's round\n"
    "                  trip, for switches that do not mark; conf/delay.conf's values, or --delay's)\n"
    "  --dcqcn FILE    DCQCN congestion control with these parameters (conf/dcqcn.conf)\n"
    "  --delay FILE    delay-based congestion control with these parameters (conf/delay.conf; set its\n"
    "                  line_rate_gbps and base_rtt_us to the port's and the path's)\n"
    "  --pfc PRIO      the lossless 802.1p priority, 0-7 (default off): PFC on the port where its\n"
    "                  driver can (else one warning), data sent with DSCP PRIO*8\n"
    "  --min-ack-timeout N  no QP waits less than 4.096 us * 2^N for an acknowledgement before it\n"
    "                  resends (default 0: the program's own timeout; the stock tools set 14, 67 ms,\n"
    "                  and give up after 7 retries): for a peer slower than the program expects\n"
    "  --transport SPEC  the transport options of every RC QP the program moves to RTR (issue 30):\n"
    "                  sr (selective repeat) or gbn, then ,spray=N (paths, needs sr) and ,bdp=N (packets\n"
    "                  in flight at most), e.g. gbn,bdp=64; for programs that exchange QP numbers\n"
    "                  themselves (perftest), given to both ends. Over rdma_cm, sr is offered by ECE\n"
    "                  and used only if the peer agrees. UROCE_COUNTERS=1 prints each QP's mode\n"
    "                  and counters as it is destroyed\n"
    "  --metrics ADDR:PORT  Prometheus's /metrics on ADDR:PORT (e.g. 127.0.0.1:9464) while PROGRAM\n"
    "                  runs: uroce0's port, engine and QP counters (docs/operating.md). A program that\n"
    "                  forks more uroce processes: the first binds it, the others say so once.\n"
    "                  With --service, uroced serves them (uroced --metrics)\n"
    "  --progress workers|caller  who runs the engines (default workers): workers, a thread per\n"
    "                  queue polling without pause beside the program's own (two busy threads: give\n"
    "                  the process two cores); caller, the program's own verbs calls (ibv_poll_cq,\n"
    "                  ibv_post_send, ibv_post_recv, ibv_get_cq_event) and a helper thread of low duty\n"
    "                  for the time it makes none: one core is enough (docs/performance.md, \"Progress\n"
    "                  in the caller\"). A program that spins on memory without verbs calls sees data\n"
    "                  there tens of us late, unless it polls a CQ between (ib_write_lat does)\n"
    "  --netdev IF     the Linux interface uroce0 stands for, shown to PROGRAM as a kernel RDMA\n"
    "                  device shows its own: /sys/class/infiniband/uroce0/device/net/IF and\n"
    "                  ports/1/gid_attrs/ndevs/{0,1}, for programs that look it up there (rdma-core's\n"
    "                  tests read IF's first address with `ip addr` and use it for rdma_cm, so IF\n"
    "                  should hold uroce's --ip too). PROGRAM runs in a private mount namespace with a\n"
    "                  read-only tmpfs over /sys/class (every real class bound back in); nothing\n"
    "                  changes outside its process tree. Needs root. For an af_packet port, its\n"
    "                  iface=; for memif, an interface holding the same address. Default: none\n"
    "  --lib DIR       where uroce's libibverbs.so.1 is (default: found beside this program)\n"
    "\n"
    "  --service       run PROGRAM against the uroced daemon instead (README \"Running as a\n"
    "                  service\"): no EAL args, no --ip; the daemon owns the port and its cores\n"
    "  --socket PATH   the daemon's socket (default /run/uroce/uroced.sock)\n"
    "\n"
    "It sets UROCE_EAL, UROCE_IP, UROCE_PORT_ID, UROCE_QUEUES, UROCE_WORKERS, UROCE_CC, UROCE_DCQCN,\n"
    "UROCE_DELAY, UROCE_PFC, UROCE_MIN_ACK_TIMEOUT, UROCE_TRANSPORT, UROCE_METRICS, UROCE_PROGRESS and prepends DIR to LD_LIBRARY_PATH\n"
    "(--service: UROCE_SERVICE=PATH instead of the port's);\n"
    "setting those by hand does the same.\n"
    "Example: uroce-run --no-huge --no-shconf --no-pci -l 0 --vdev=net_memif0,role=server \\\n"
    "           -- --ip 10.0.0.1/24 ibv_rc_pingpong -d uroce0 -g 1\n";

bool is_file(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

// The folder of uroce's libibverbs.so.1: the build tree's (apps/run/ ->
// lib/ibverbs/), else the installed one.
std::string find_library() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<std::size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    for (const std::string& c : {dir + "/../../lib/ibverbs", dir + "/../lib/uroce"}) {
      if (is_file(c + "/libibverbs.so.1")) return c;
    }
  }
  if (is_file(std::string(UROCE_LIBDIR) + "/libibverbs.so.1")) return UROCE_LIBDIR;
  return "";
}

struct Options {
  std::vector<std::string> eal;
  std::string ip, port_id, queues, workers, cc, dcqcn, delay, pfc, min_ack_timeout, transport, lib, metrics, progress;
  std::string netdev;  // --netdev: uroce0's Linux interface, shown in sysfs
  std::string service;  // --service: the daemon's socket
  std::vector<std::string> program;
};

// uroce-run --service [--socket PATH] [--lib DIR] PROGRAM [ARGS...]
Options parse_service(int argc, char** argv) {
  using uroce::app::usage_error;
  Options o;
  o.service = "/run/uroce/uroced.sock";
  int i = 2;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--socket" || a == "--lib" || a == "--netdev" || a == "--transport") {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      (a == "--socket" ? o.service : a == "--lib" ? o.lib : a == "--netdev" ? o.netdev : o.transport) = argv[++i];
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a.rfind("--", 0) == 0) {
      usage_error("unknown option " + a + " with --service (only --socket, --transport, --netdev and --lib; see --help)");
    } else {
      break;
    }
  }
  for (; i < argc; ++i) o.program.emplace_back(argv[i]);
  if (o.program.empty()) usage_error("no program to run: give it after the options, e.g. ibv_devinfo");
  return o;
}

Options parse(int argc, char** argv) {
  using uroce::app::usage_error;
  if (argc > 1 && std::strcmp(argv[1], "--service") == 0) return parse_service(argc, argv);
  Options o;
  int i = 1;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (std::strchr(argv[i], ' ') != nullptr) usage_error(std::string("EAL argument '") + argv[i] + "' holds a blank");
    o.eal.emplace_back(argv[i]);
  }
  if (i == argc) usage_error("no '--': give the EAL args, then '--', then --ip and the program");
  for (++i; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      into = argv[++i];
    };
    if (a == "--ip") value(o.ip);
    else if (a == "--port-id") value(o.port_id);
    else if (a == "--queues") value(o.queues);
    else if (a == "--workers") value(o.workers);
    else if (a == "--cc") value(o.cc);
    else if (a == "--dcqcn") value(o.dcqcn);
    else if (a == "--delay") value(o.delay);
    else if (a == "--pfc") {
      value(o.pfc);
      uroce::app::parse_pfc_priority(o.pfc, "--pfc");  // checked here, where the user typed it
    }
    else if (a == "--min-ack-timeout") {
      value(o.min_ack_timeout);
      char* end = nullptr;
      const unsigned long n = std::strtoul(o.min_ack_timeout.c_str(), &end, 10);
      if (o.min_ack_timeout.empty() || *end != '\0' || n > 31) {
        usage_error("--min-ack-timeout takes a timeout exponent, 0 (no floor) to 31 (4.096 us * 2^N), not '" +
                    o.min_ack_timeout + "'");
      }
    }
    else if (a == "--transport") value(o.transport);
    else if (a == "--metrics") {
      value(o.metrics);
      if (const std::string e = uroce::metrics::check_listen_address(o.metrics); !e.empty()) usage_error(e);
    }
    else if (a == "--progress") {
      value(o.progress);
      if (o.progress != "workers" && o.progress != "caller") {
        usage_error("--progress takes workers (a thread polls the engines) or caller (the program's verbs calls "
                    "do), not '" + o.progress + "'");
      }
    }
    else if (a == "--lib") value(o.lib);
    else if (a == "--netdev") value(o.netdev);
    else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a.rfind("--", 0) == 0) usage_error("unknown option " + a + " (before the program; see --help)");
    else break;
  }
  for (; i < argc; ++i) o.program.emplace_back(argv[i]);
  uroce::cc::Controller controller;  // checked here; the library decides again from what is set below
  if (std::string e = uroce::cc::resolve_controller(o.cc, !o.dcqcn.empty(), !o.delay.empty(),
                                                    {"--cc", "--dcqcn", "--delay"}, controller);
      !e.empty()) {
    usage_error(e);
  }
  if (o.ip.empty()) usage_error("--ip ADDR/PREFIX is required (the port's IPv4 address, e.g. --ip 10.0.0.1/24)");
  if (o.program.empty()) usage_error("no program to run: give it after the options, e.g. ibv_devinfo");
  if (o.eal.empty()) usage_error("no EAL args: give the port before '--', e.g. --vdev=net_af_packet0,iface=eth1");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "uroce-run: %s\n", e.what());
    return 2;
  }
  const std::string lib = o.lib.empty() ? find_library() : o.lib;
  if (lib.empty() || !is_file(lib + "/libibverbs.so.1")) {
    std::fprintf(stderr, "uroce-run: uroce's libibverbs.so.1 not found%s%s; build uroce (tools/setup.sh) or give --lib DIR\n",
                 lib.empty() ? "" : " in ", lib.c_str());
    return 2;
  }
  std::string eal;
  for (const std::string& a : o.eal) eal += (eal.empty() ? "" : " ") + a;
  if (!o.service.empty()) {
    setenv("UROCE_SERVICE", o.service.c_str(), 1);
    unsetenv("UROCE_EAL");
    unsetenv("UROCE_IP");
  } else {
    unsetenv("UROCE_SERVICE");
    setenv("UROCE_EAL", eal.c_str(), 1);
    setenv("UROCE_IP", o.ip.c_str(), 1);
  }
  // uroce0's interface in sysfs, when named: opt-in, since a visible
  // /sys/class/infiniband changes what some programs do (Open MPI's btl_openib
  // steps aside only when there is none) and the namespace needs root.
  if (!o.netdev.empty()) {
    if (std::string e = uroce::run::show_netdev("uroce0", o.netdev); !e.empty()) {
      std::fprintf(stderr, "uroce-run: %s\n", e.c_str());
      return 2;
    }
  }
  const std::pair<const char*, const std::string*> optional[] = {
      {"UROCE_PORT_ID", &o.port_id}, {"UROCE_QUEUES", &o.queues}, {"UROCE_WORKERS", &o.workers},
      {"UROCE_CC", &o.cc}, {"UROCE_DCQCN", &o.dcqcn}, {"UROCE_DELAY", &o.delay}, {"UROCE_PFC", &o.pfc},
      {"UROCE_MIN_ACK_TIMEOUT", &o.min_ack_timeout}, {"UROCE_TRANSPORT", &o.transport}, {"UROCE_METRICS", &o.metrics},
      {"UROCE_PROGRESS", &o.progress}};
  for (const auto& [name, value] : optional) {
    if (value->empty()) unsetenv(name);
    else setenv(name, value->c_str(), 1);
  }
  // Our librdmacm.so.1 too: beside libibverbs.so.1 when installed, in
  // lib/rdmacm/ of the build tree.
  std::string libs = lib;
  if (!is_file(lib + "/librdmacm.so.1") && is_file(lib + "/../rdmacm/librdmacm.so.1")) libs += ":" + lib + "/../rdmacm";
  const char* old = std::getenv("LD_LIBRARY_PATH");
  const std::string path = old != nullptr && *old != '\0' ? libs + ":" + old : libs;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  std::vector<char*> args;
  for (std::string& a : o.program) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "uroce-run: cannot run '%s': %s\n", args[0], std::strerror(errno));
  return 127;
}
