// uroced: the uroce service. Starts DPDK on the configured port, runs one
// engine per worker core, owns the address (ARP, neighbour discovery), and
// serves local RDMA programs over a UNIX socket (server.h), their queues in
// shared memory (pump.h). README "Running as a service".
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cc/choice.h"
#include "cc/dcqcn.h"
#include "cc/delay.h"
#include "device/device.h"
#include "device/metrics_source.h"
#include "telemetry.h"
#include "config.h"
#include "dpdk/eal.h"
#include "service_daemon/server.h"
#include "service/client.h"
#include "uroce/metrics.h"

namespace {

using uroce::daemon::Config;

int die(const std::string& why, int code = 1) {
  std::fprintf(stderr, "uroced: %s\n", why.c_str());
  return code;
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// --stats: what the daemon at config.socket says of itself and its clients.
int print_stats(const Config& config) {
  std::string error;
  auto client = uroce::service::Client::connect(config.socket, error);
  if (!client) return die(error);
  uroce::service::Request req;
  req.op = uroce::service::Op::kStats;
  uroce::service::Reply reply;
  std::string why;
  if (client->call(req, reply, nullptr, 0, nullptr, why) != 0) return die(why);
  const uroce::service::StatsReply& s = reply.stats;
  // This query is a client too (the last one listed, with nothing). The
  // daemon tells root of every client, anyone else of their own uid's.
  if (geteuid() != 0) std::printf("(the clients of uid %u only: run as root for all)\n", geteuid());
  std::printf("clients %u  pds %u  mrs %u  cqs %u  qps %u  srqs %u  ahs %u  mapped %llu bytes\n", s.clients, s.pds,
              s.mrs, s.cqs, s.qps, s.srqs, s.ahs, static_cast<unsigned long long>(s.mapped_bytes));
  for (std::uint32_t i = 0; i < s.listed; ++i) {
    const auto& c = s.client[i];
    std::printf("client %u  pid %d  uid %u  pds %u  mrs %u  cqs %u  qps %u  srqs %u  ahs %u  mapped %llu", c.id, c.pid,
                c.uid, c.pds, c.mrs, c.cqs, c.qps, s.client_srqs[i], s.client_ahs[i],
                static_cast<unsigned long long>(c.mapped_bytes));
    for (std::uint32_t j = 0; j < std::min<std::uint32_t>(c.qps, 4); ++j) std::printf("%s%#x", j ? "," : "  qpn ", c.qpn[j]);
    std::printf("\n");
  }
  return 0;
}

// Reads the parameter file `file` (the configuration's `key`, a file like
// `example`) into `params` with `parse`: "" or why not. No file: `params`
// keeps its defaults.
template <typename Params>
std::string load_params(const std::string& key, const std::string& file, const char* example, Params& params,
                        std::string (*parse)(const std::string&, Params&)) {
  if (file.empty()) return "";
  std::ifstream in(file);
  if (!in) return key + ": cannot read '" + file + "' (give a file like " + example + ", or unset it)";
  std::ostringstream text;
  text << in.rdbuf();
  if (std::string e = parse(text.str(), params); !e.empty()) return file + ": " + e;
  return "";
}

// "" if every CPU of `cpus` is one this process may run on.
std::string check_cpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)) {
      return "worker CPU " + std::to_string(cpu) +
             " is not available to uroced (not online, or outside its affinity: the unit's CPUAffinity, taskset)";
    }
  }
  return "";
}

// What the exporter reads: the device, each QP labelled with its client's
// pid, and the clients. On the exporter's thread.
void collect(const uroce::daemon::Server& server, uroce::metrics::Snapshot& snapshot) {
  uroce::device::collect_exposed(snapshot);
  const std::vector<uroce::daemon::Server::ClientRow> clients = server.client_table();
  for (uroce::metrics::DeviceSnapshot& d : snapshot.devices) {
    for (const auto& c : clients) {
      for (std::uint32_t qpn : c.qpns) d.qp_labels[qpn].push_back({"client_pid", std::to_string(c.pid)});
    }
  }
  snapshot.extra.push_back({"uroced_clients", "programs attached to uroced now", uroce::StatKind::kGauge, {},
                            static_cast<double>(clients.size())});
}

// The exporter's CPUs: those uroced may use but its workers', so a scrape
// never takes an engine's core.
std::vector<int> cpus_off_workers(const std::vector<int>& workers) {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  std::vector<int> out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set) && std::find(workers.begin(), workers.end(), cpu) == workers.end()) out.push_back(cpu);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  bool help = false;
  if (std::string e = uroce::daemon::parse_args(argc, argv, config, help); !e.empty()) return die(e, 2);
  if (help) {
    std::fputs(uroce::daemon::kUsage, stdout);
    return 0;
  }
  if (config.stats) return print_stats(config);
  if (!spdlog::get("uroced")) spdlog::set_default_logger(spdlog::stderr_color_mt("uroced"));
  if (auto level = spdlog::level::from_str(config.log_level); level != spdlog::level::off || config.log_level == "off") {
    spdlog::set_level(level);
  }
  if (!config.ip_set) return die("no address: set ip in the configuration file or give --ip ADDR/LEN", 2);
  if (!config.workers.empty() && config.workers.size() != config.queues) {
    return die("give one worker CPU per queue: " + std::to_string(config.queues) + " queue(s), " +
                   std::to_string(config.workers.size()) + " CPU(s) in workers",
               2);
  }
  if (std::string e = check_cpus(config.workers); !e.empty()) return die(e, 2);
  uroce::cc::Controller controller = uroce::cc::Controller::kOff;
  if (std::string e = uroce::cc::resolve_controller(config.cc, !config.dcqcn.empty(), !config.delay.empty(),
                                                    {"cc", "dcqcn", "delay"}, controller);
      !e.empty()) {
    return die(e, 2);
  }
  std::optional<uroce::cc::DcqcnParams> dcqcn;
  std::optional<uroce::cc::DelayParams> delay;
  std::string bad_params;
  if (controller == uroce::cc::Controller::kDcqcn) {
    bad_params = load_params("dcqcn", config.dcqcn, "conf/dcqcn.conf", dcqcn.emplace(), uroce::cc::parse_dcqcn_params);
  } else if (controller == uroce::cc::Controller::kDelay) {
    bad_params = load_params("delay", config.delay, "conf/delay.conf", delay.emplace(), uroce::cc::parse_delay_params);
  }
  if (!bad_params.empty()) return die(bad_params, 2);
  std::vector<std::string> eal = {"uroced"};
  for (std::string& w : words(config.eal)) eal.push_back(std::move(w));
  const bool no_huge = std::find(eal.begin(), eal.end(), "--no-huge") != eal.end();
  if (config.hugepages == "off" && !no_huge) eal.push_back("--no-huge");
  if (config.hugepages == "on" && no_huge) return die("hugepages = on, but the EAL arguments say --no-huge", 2);

  // SIGTERM and SIGINT go to the control loop's signalfd: blocked in every
  // thread, which inherits this mask (EAL's and the workers').
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  if (std::string e = uroce::dpdk::eal_init(eal); !e.empty()) return die(e);
  std::string error;
  uroce::device::DeviceOptions options;
  options.queues = config.queues;
  options.dcqcn = dcqcn ? &*dcqcn : nullptr;
  options.delay_cc = delay ? &*delay : nullptr;
  options.pfc_priority = config.pfc_priority;
  options.min_ack_timeout = config.min_ack_timeout;
  auto device = uroce::device::Device::open(config.port_id, config.ip, "uroced", error, options);
  if (!device) return die("port " + std::to_string(config.port_id) + ": " + error);
  uroce::Context& ctx = *device->ctx;
  uroce::daemon::Server server(ctx, config.queues, uroce::daemon::server_config(config));
  // Before anything runs that a failure here would leave behind; it sees
  // the device once telemetry exposes it.
  std::unique_ptr<uroce::metrics::Exporter> exporter;
  if (!config.metrics.empty()) {
    uroce::metrics::Options mo;
    mo.listen = config.metrics;
    mo.max_qps = config.metrics_max_qps;
    mo.cpus = cpus_off_workers(config.workers);  // empty (every CPU a worker's): the caller's
    exporter = std::make_unique<uroce::metrics::Exporter>(
        mo, [&server](uroce::metrics::Snapshot& s) { collect(server, s); });
    if (std::string e; !exporter->start(e)) return die(e, 2);
    spdlog::info("uroced: Prometheus metrics at http://{}/metrics (port {})", config.metrics, exporter->port());
  }
  if (std::string e = server.listen(); !e.empty()) return die(e);
  std::vector<int> cpus = config.workers;
  if (cpus.empty()) cpus.assign(config.queues, -1);
  if (ctx.start_workers(cpus, uroce::Context::WorkerHook{&uroce::daemon::Server::pump_completions, &server,
                                                               &uroce::daemon::Server::pump_requests}) != 0) {
    return die("workers did not start: " + ctx.last_error());
  }
  // Device::open exposed the device as "uroced" (index 0); exposing it
  // again listed it twice, and the metrics counted it twice.
  uroce::daemon::telemetry_expose_clients(&server);
  uroce::daemon::telemetry_link(config.socket);
  spdlog::info("uroced: serving {} on port {} ({} queue(s)), congestion control {}{}; clients attach at {}", config.eal,
               config.port_id, config.queues, uroce::cc::controller_name(controller),
               config.min_ack_timeout != 0 ? ", local ACK timeout floor " + std::to_string(config.min_ack_timeout)
                                           : std::string(),
               config.socket);
  // A line for whoever waits for us (tests, scripts): the socket is ready.
  std::printf("uroced: ready on %s\n", config.socket.c_str());
  std::fflush(stdout);
  const int rc = server.run();
  exporter.reset();  // before the device goes: it reads it
  uroce::daemon::telemetry_unlink(config.socket);
  uroce::daemon::telemetry_hide_clients();
  ctx.stop_workers();
  spdlog::info("uroced: stopped");
  return rc;
}
