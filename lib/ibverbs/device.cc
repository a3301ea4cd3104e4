// Devices and contexts: ibv_get_device_list starts EAL and opens the one
// uroce device from the environment (once per process), ibv_open_device
// hands out a verbs_context laid out as the stock inline verbs expect
// (research note verbs-abi.md §2).
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cc/dcqcn.h"
#include "cc/delay.h"
#include "device/metrics_source.h"
#include "device/device.h"
#include "dpdk/burst_gate.h"
#include "dpdk/eal.h"
#include "ibverbs/fork_service.h"
#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

// What one process has: EAL runs at most once, and the device lives until
// the process exits. It is never freed: a program may call ibv_get_device_list
// again after ibv_free_device_list, and tearing DPDK down from a static
// destructor races EAL's own threads.
//
// In an application's own EAL (docs/embedding.md) the port behind the device
// is the application's EAL's: a vdev uroce hot-plugged is closed and removed
// with the last context (the application may shut EAL down after that), and
// hot-plugged again by the next ibv_open_device; one that cannot be removed
// (dpdk::vdev_removable) and a port the application named stay, stopped
// by no one but with no thread of uroce's on them.
struct Process {
  std::once_flag started;
  Device* device = nullptr;  // nullptr: not configured, or it failed (said once on stderr)
  std::vector<int> workers;  // their CPUs (UROCE_WORKERS)
  std::mutex mutex;          // guards open_contexts, the workers' running and the fields below
  int open_contexts = 0;
  bool joined = false;       // EAL is the application's
  std::string vdev;          // joined: the --vdev hot-plugged for the device; "" a port the application named
  // Joined: the device is taken down at the last close: a removable vdev
  // (dpdk::vdev_removable) uroce added, not one the application had probed.
  bool down_between = false;
  bool vdev_added = false;   // by uroce (so uroce removes it), while the device is up
  Config config;             // joined: what brings the device up again
  const cc::DcqcnParams* dcqcn = nullptr;  // Config::cc: at most one of these two
  const cc::DelayParams* delay = nullptr;
  Process* parent = nullptr;  // in a forked child: the parent's, kept as it was
  bool in_process = false;    // start() took the in-process path (EAL here or joined), whatever came of it
  // Serving forked children (fork_service.h): like a context, it keeps the
  // device up and its workers running, theirs running its hook.
  ForkService* service = nullptr;
  bool service_failed = false;  // said once; later forks do not try again (their children are refused)
  // UROCE_METRICS: the exporter, stopped at exit before anything it reads goes.
  metrics::Exporter* exporter = nullptr;
};

// In a forked child, a Process of its own (forget_parent): the parent's is
// left as it was, its mutex perhaps held by a thread the child does not have.
Process* g_process = nullptr;
// The child of a process whose device was in-process and which does not
// serve its children (UROCE_FORK_SERVE=off, or its service did not start):
// the port and its engines are the parent's, and this process has none
// (forget_parent).
bool g_in_process_child = false;

// The socket of the parent's ForkService, for a child to find: set in the
// parent before it forks (fork_prepare), read by the child's first call.
// Fixed storage: the child's fork handler may not allocate, and a copy in
// the heap could sit in pages the child does not own yet (memory.cc).
char g_service_socket[108] = "";

// Set by the child's fork handler, which only marks: it must not allocate,
// as memory.cc's handler may not have given the child its own copy of heap
// pages shared with uroced yet (a malloc there would write the parent's
// heap). The first call in the child starts afresh (forget_parent).
bool g_forked = false;
void fork_child() {
  g_forked = true;
  g_forked_child = true;
}
// process_generation(): 0 in a process that was not forked from one using
// uroce, one more in each child than in its parent (forget_parent).
std::uint32_t g_generation = 0;
void forget_parent();
void fork_prepare();

Process& process() {
  static const bool installed = [] {
    g_process = new Process;
    pthread_atfork(fork_prepare, nullptr, fork_child);
    return true;
  }();
  (void)installed;
  if (g_forked) {
    g_forked = false;
    forget_parent();
  }
  return *g_process;
}

// ENODEV for everything a forked child asks of its parent's in-process
// device when the parent does not serve it, said once (a kernel device the
// process cannot use has no node to open either).
int refuse_in_child() {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    std::fprintf(stderr,
                 "uroce: a forked child cannot use its parent's in-process device (one process owns the port): run "
                 "the program through uroced (uroce-run --service)\n");
  }
  errno = ENODEV;
  return ENODEV;
}

// In a forked child, at its first call: the parent's device, its contexts
// and every object on them are left alone (kept in the child: destroying
// them would stop the parent's engines or, attached, ask uroced to destroy
// the parent's objects), and ibverbs starts afresh: attached to uroced, the next ibv_get_device_list
// attaches this process on a connection of its own (lib/service/client.cc
// has closed the inherited one); in-process, the port and its engines
// stay the parent's, and the next ibv_get_device_list attaches this
// process to the parent's ForkService as to a uroced, or, if the parent
// does not serve, this process gets no device (refuse_in_child).
// UROCE_SERVICE names the parent's socket from here on, so that this
// process's own children, and programs it runs, attach there too.
void forget_parent() {
  Process* old = g_process;
  g_process = new Process;
  g_process->parent = old;
  ++g_generation;
  if (old->in_process) {
    if (g_service_socket[0] != '\0') {
      setenv("UROCE_SERVICE", g_service_socket, 1);
    } else {
      g_in_process_child = true;
    }
  }
  forget_watched_contexts_in_child();
}

// Process::mutex held, marked on the thread from before it asks for the lock
// until after it gives it back: the exit handler must not wait for a lock
// its own thread holds (exit() from a signal handler that interrupted
// ibv_open_device or ibv_close_device).
thread_local bool in_process_lock = false;
class ProcessLock {
 public:
  ProcessLock() {
    in_process_lock = true;
    process().mutex.lock();
  }
  ~ProcessLock() {
    process().mutex.unlock();
    in_process_lock = false;
  }
  ProcessLock(const ProcessLock&) = delete;
  ProcessLock& operator=(const ProcessLock&) = delete;
};

// A program that exits with contexts open: the workers stop before the
// libraries' destructors run. exit() may come from a signal handler that
// interrupted this thread inside a verb (qperf's does): then the locks are
// this thread's own and nobody would give them back, so nothing waits for
// them. Inside a control call the workers are held by it (parked between
// two polls, touching nothing) until the process ends; inside open/close
// the orderly stop is skipped. Another thread's verb ends, so its lock is
// waited for.
//
// A ForkService stops first (its socket removed, its children's QPs flushed
// while the workers still pump them), waiting a moment at most: its loop may
// be blocked on a control call this thread holds. It is not destroyed: that
// would take control calls too.
void stop_at_exit() {
  if (in_process_lock) return;
  ProcessLock lock;
  Process& p = process();
  // Its thread reads the device through telemetry: stopped first, and left
  // allocated (a late scrape's thread is joined here, not in a destructor).
  if (p.exporter != nullptr) p.exporter->stop();
  if (p.service != nullptr) {
    p.service->stop_at_exit(std::chrono::seconds(2));
    g_service_socket[0] = '\0';
  }
  // A program that exits with a context open (ibv_rc_pingpong after a
  // failed completion, say) has its counters printed here, as they would
  // have been at its last ibv_close_device: the failure is what they explain.
  if (p.device != nullptr && p.device->ctx != nullptr && p.open_contexts > 0 && p.service == nullptr) {
    print_counters_on_close(*p.device->ctx, "at exit, with a context still open");
  }
  // Returns at once inside a control call of this thread (lib/verbs). Only
  // the workers stop: nothing here touches EAL, which the application may
  // have cleaned up already.
  if (p.device != nullptr && p.device->ctx != nullptr) p.device->ctx->stop_workers();
}

const char* getenv_fn(const char* name) { return std::getenv(name); }

// A byte whose address no vendor library knows (Device::provider_ops).
const char kProviderOps = 0;

__be64 eui64_of(const std::uint8_t mac[6]) {
  std::uint8_t b[8] = {static_cast<std::uint8_t>(mac[0] ^ 2), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
  __be64 g;
  std::memcpy(&g, b, sizeof g);  // already in network order
  return g;
}

// Reads the parameter file `file` (named by the environment variable
// `var`, like conf/`example`) into `params` with `parse`; "" or why not.
// No file: `params` keeps its defaults.
template <typename Params>
std::string load_params(const std::string& file, const char* var, const char* example, Params& params,
                        std::string (*parse)(const std::string&, Params&)) {
  if (file.empty()) return "";
  std::ifstream in(file);
  if (!in) return "cannot read '" + file + "' (" + var + ": give a file like " + example + ", or unset it)";
  std::ostringstream text;
  text << in.rdbuf();
  if (std::string e = parse(text.str(), params); !e.empty()) return file + ": " + e;
  return "";
}

// UROCE_SERVICE: the device is uroced's, reached through its socket; no
// EAL and no port in this process.
Device* attach_service(const char* socket_path) {
  std::string error;
  std::unique_ptr<Context> ctx = Context::attach(socket_path, error);
  if (!ctx) {
    std::fprintf(stderr, "uroce libibverbs: UROCE_SERVICE=%s: %s\n", socket_path, error.c_str());
    return nullptr;
  }
  auto* d = new Device{};
  ibv_gid link_local{};
  ctx->query_gid(0, link_local);
  std::memcpy(&d->guid, link_local.raw + 8, sizeof d->guid);  // fe80::EUI-64, already in network order
  d->active_mtu = ctx->active_mtu();
  d->port = nullptr;
  d->ctx = ctx.release();
  return d;
}

void name_device(Device* d) {
  d->ibv.node_type = IBV_NODE_CA;
  d->ibv.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d->ibv.name, sizeof d->ibv.name, "%s", kDeviceName);
  std::snprintf(d->ibv.dev_name, sizeof d->ibv.dev_name, "u%s", kDeviceName);
  // No sysfs behind them (ibv_read_sysfs_file says ENOENT); they name what
  // rdma-core's would.
  std::snprintf(d->ibv.dev_path, sizeof d->ibv.dev_path, "/sys/class/infiniband_verbs/u%s", kDeviceName);
  std::snprintf(d->ibv.ibdev_path, sizeof d->ibv.ibdev_path, "/sys/class/infiniband/%s", kDeviceName);
  d->provider_ops = &kProviderOps;
}

// The port of an application's running EAL that UROCE_EAL (a --vdev to
// hot-plug) or UROCE_PORT_ID (a port it probed) names. "" or a line.
std::string join_port(const Config& config, std::uint16_t& port_id) {
  Process& p = process();
  dpdk::JoinArgs args;
  if (std::string e = dpdk::parse_join_args(config.eal, args); !e.empty()) return e;
  const bool named = std::getenv("UROCE_PORT_ID") != nullptr;
  if (!args.vdev.empty() && named) {
    return "the application runs EAL: give its port either as UROCE_EAL='--vdev=...' (hot-plugged) or as "
           "UROCE_PORT_ID (a port it probed), not both";
  }
  if (args.vdev.empty() && !named) {
    return "the application runs EAL: name uroce's port, UROCE_EAL='--vdev=net_memif0,...' (hot-plugged) or "
           "UROCE_PORT_ID=N (a port it probed and left unconfigured); see docs/embedding.md";
  }
  if (!args.ignored.empty()) {
    std::string line;
    for (const std::string& a : args.ignored) line += (line.empty() ? "" : " ") + a;
    std::fprintf(stderr, "uroce libibverbs: the application runs EAL: its own settings hold, not UROCE_EAL's '%s'\n",
                 line.c_str());
  }
  p.vdev = args.vdev;
  p.down_between = !p.vdev.empty() && dpdk::vdev_removable(p.vdev);
  port_id = config.port_id;
  return "";
}

void unplug(Process& p) {
  if (std::string e = dpdk::unplug_vdev(p.vdev); !e.empty()) std::fprintf(stderr, "uroce libibverbs: %s\n", e.c_str());
  p.vdev_added = false;
}

// Opens the uroce device on its port (hot-plugging the vdev first when
// joined with one) and fills d's port, context, GUID and MTU. "" or a line.
std::string bring_up(Device& d, std::uint16_t port_id) {
  Process& p = process();
  const Config& config = p.config;
  if (p.joined && !p.vdev.empty()) {
    if (std::string e = dpdk::hotplug_vdev(p.vdev, port_id, p.vdev_added); !e.empty()) return e;
  }
  std::string error;
  device::DeviceOptions options;
  options.queues = config.queues;
  options.dcqcn = p.dcqcn;
  options.delay_cc = p.delay;
  options.pfc_priority = config.pfc_priority;
  options.min_ack_timeout = config.min_ack_timeout;
  auto port = device::Device::open(port_id, config.ip, kDeviceName, error, options);
  if (!port) {
    if (p.vdev_added) unplug(p);
    return "no device on DPDK port " + std::to_string(port_id) +
           (p.vdev.empty() ? " (UROCE_PORT_ID): " : " (" + p.vdev + "): ") + error;
  }
  const uroce::PortConfig pc = device::device_config(port->queues, port->clock);
  d.guid = eui64_of(pc.mac);
  d.active_mtu = pc.active_mtu;
  d.ctx = port->ctx.get();
  d.port = port.release();
  // UROCE_PROGRESS=caller: the verbs calls run the engines (ops.cc), a
  // helper thread of low duty the rest (uroce::Context::Progress::kCaller).
  if (config.caller_progress) d.ctx->set_progress(uroce::Context::Progress::kCaller);
  return "";
}

// Joined with a removable hot-plugged vdev, after the last context (its workers
// stopped): closes the port and removes the vdev, so that the application
// may shut its EAL down. Process::mutex held.
void take_down(Device& d) {
  Process& p = process();
  delete d.port;  // the context, then the port: stopped and closed, its mbuf pool freed
  d.port = nullptr;
  d.ctx = nullptr;
  if (p.vdev_added) unplug(p);
}

// UROCE_METRICS: Prometheus's /metrics for this process's device, served
// by a thread of its own. A failure is said once; the program runs on.
void start_metrics(Process& p, const std::string& listen) {
  metrics::Options options;
  options.listen = listen;
  // Off the lcores: EAL pinned this thread (the program's) to one.
  options.cpus = dpdk::control_cpus();
  p.exporter = new metrics::Exporter(options, device::collect_exposed);
  if (std::string e; !p.exporter->start(e)) {
    std::fprintf(stderr, "uroce libibverbs: UROCE_METRICS: %s\n", e.c_str());
    delete p.exporter;
    p.exporter = nullptr;
  }
}

void start() {
  if (const char* service = std::getenv("UROCE_SERVICE"); service != nullptr && *service != '\0') {
    if (const char* m = std::getenv("UROCE_METRICS"); m != nullptr && *m != '\0' && std::string_view(m) != "off") {
      std::fprintf(stderr, "uroce libibverbs: UROCE_METRICS is ignored with UROCE_SERVICE: the device is uroced's, "
                           "and uroced serves its metrics (uroced --metrics ADDR:PORT)\n");
    }
    if (const char* m = std::getenv("UROCE_PROGRESS"); m != nullptr && std::string_view(m) == "caller") {
      std::fprintf(stderr, "uroce libibverbs: UROCE_PROGRESS=caller is ignored with UROCE_SERVICE: uroced's cores "
                           "run the engines\n");
    }
    if (Device* d = attach_service(service)) {
      name_device(d);
      process().device = d;
    }
    return;
  }
  Config config;
  std::string message;
  switch (read_config(getenv_fn, config, message)) {
    case ConfigStatus::kOk:
      process().in_process = true;
      break;
    case ConfigStatus::kUnset:
    case ConfigStatus::kInvalid:
      std::fprintf(stderr, "%s\n", message.c_str());
      return;
  }
  // The parameters live as long as the device: the whole process.
  const cc::DcqcnParams* dcqcn = nullptr;
  const cc::DelayParams* delay = nullptr;
  std::string bad_params;
  if (config.cc == "dcqcn") {
    static cc::DcqcnParams params;
    bad_params = load_params(config.dcqcn_file, "UROCE_DCQCN", "conf/dcqcn.conf", params, cc::parse_dcqcn_params);
    dcqcn = &params;
  } else if (config.cc == "delay") {
    static cc::DelayParams params;
    bad_params = load_params(config.delay_file, "UROCE_DELAY", "conf/delay.conf", params, cc::parse_delay_params);
    delay = &params;
  }
  if (!bad_params.empty()) {
    std::fprintf(stderr, "uroce libibverbs: %s\n", bad_params.c_str());
    return;
  }
  Process& p = process();
  p.joined = dpdk::eal_started_elsewhere();
  // The application cleans its EAL up itself: the interrupt thread must be
  // free then (dpdk/burst_gate.h).
  if (p.joined) dpdk::burst_gate_off();
  std::uint16_t port_id = config.port_id;
  if (p.joined) {
    if (std::string e = join_port(config, port_id); !e.empty()) {
      std::fprintf(stderr, "uroce libibverbs: %s\n", e.c_str());
      return;
    }
  } else if (std::string e = dpdk::eal_init(config.eal); !e.empty()) {
    std::fprintf(stderr, "uroce libibverbs: EAL did not start (UROCE_EAL='%s'): %s\n", std::getenv("UROCE_EAL"),
                 e.c_str());
    return;
  }
  auto* d = new Device{};
  name_device(d);
  p.config = config;
  p.dcqcn = dcqcn;
  p.delay = delay;
  if (std::string e = bring_up(*d, port_id); !e.empty()) {
    std::fprintf(stderr, "uroce libibverbs: %s\n", e.c_str());
    if (p.vdev_added) unplug(p);
    delete d;
    return;
  }
  // Verbs programs only post and poll: the engines run on threads of their
  // own while a context is open (ibv_open_device). This checks they can.
  if (d->ctx->start_workers(config.workers) != 0) {
    std::fprintf(stderr, "uroce libibverbs: workers did not start (UROCE_WORKERS): %s\n",
                 d->ctx->last_error().c_str());
    if (p.down_between && p.vdev_added) take_down(*d);
    return;
  }
  d->ctx->stop_workers();
  p.workers = config.workers;
  std::atexit(stop_at_exit);
  if (!config.metrics.empty()) start_metrics(p, config.metrics);
  // Joined with a removable vdev, the device stays up until the last
  // ibv_close_device takes it down (and the next ibv_open_device brings it
  // up again): a memif peer sees one connection, not a plug and unplug at
  // every ibv_get_device_list.
  p.device = d;
}

// The first context's: the device up (joined with a vdev: hot-plugged
// again) and its workers running. Process::mutex held. 0 or an errno.
int first_open(Device& d) {
  Process& p = process();
  if (d.ctx == nullptr) {
    if (std::string e = bring_up(d, p.config.port_id); !e.empty()) {
      std::fprintf(stderr, "uroce libibverbs: %s\n", e.c_str());
      return ENODEV;
    }
  }
  if (d.ctx->start_workers(p.workers) != 0) {
    std::fprintf(stderr, "uroce libibverbs: workers did not start: %s\n", d.ctx->last_error().c_str());
    if (p.down_between && p.vdev_added) take_down(d);
    return EAGAIN;
  }
  return 0;
}

// UROCE_FORK_SERVE=off: forked children are refused, as before there was a
// ForkService (for a program that forks for other reasons and wants no
// thread or socket of uroce's for it).
bool fork_serve_wanted() {
  const char* v = std::getenv("UROCE_FORK_SERVE");
  return v == nullptr || (std::strcmp(v, "off") != 0 && std::strcmp(v, "0") != 0);
}

// Starts serving forked children on the device: brought up again if it was
// taken down between contexts, the workers restarted with the service's hook
// (stopping and starting them again loses nothing: the QPs wait in the
// engines). Process::mutex held. Says why not on stderr.
void start_service(Process& p, Device& d) {
  if (d.ctx == nullptr) {
    if (std::string e = bring_up(d, p.config.port_id); !e.empty()) {
      std::fprintf(stderr, "uroce libibverbs: cannot serve forked children: %s\n", e.c_str());
      p.service_failed = true;
      return;
    }
  }
  std::string why;
  std::unique_ptr<ForkService> s = ForkService::start(*d.ctx, p.workers.size(), why);
  if (s && s->socket().size() >= sizeof g_service_socket) {
    why = "socket path " + s->socket() + " is too long (set TMPDIR to a shorter folder)";
    s.reset();
  }
  if (s) {
    d.ctx->stop_workers();
    if (d.ctx->start_workers(p.workers, s->hook()) == 0) {
      std::memcpy(g_service_socket, s->socket().c_str(), s->socket().size() + 1);
      p.service = s.release();
      return;
    }
    why = "workers did not start: " + d.ctx->last_error();
    s->stop();
    s.reset();
    if (p.open_contexts > 0 && d.ctx->start_workers(p.workers) != 0) {
      std::fprintf(stderr, "uroce libibverbs: workers did not start again: %s\n", d.ctx->last_error().c_str());
    }
  }
  std::fprintf(stderr, "uroce libibverbs: cannot serve forked children (they will get no device): %s\n",
               why.c_str());
  p.service_failed = true;
  if (p.open_contexts == 0 && p.down_between && p.vdev_added) take_down(d);
}

// Ends the service: its children's QPs flushed (workers still pumping),
// then the workers without its hook, then the server. Process::mutex held.
void stop_service(Process& p, Device& d) {
  p.service->stop();
  d.ctx->stop_workers();
  if (p.open_contexts > 0 && d.ctx->start_workers(p.workers) != 0) {
    std::fprintf(stderr, "uroce libibverbs: workers did not start again: %s\n", d.ctx->last_error().c_str());
  }
  delete p.service;
  p.service = nullptr;
  g_service_socket[0] = '\0';
  if (p.open_contexts == 0 && p.down_between && p.vdev_added) take_down(d);
}

// Before a fork: a process whose device is up in-process serves its
// children from the first fork on (lazily: one that never forks has no
// thread or socket for it). Started here, in the parent, so that the
// socket listens before the child runs; the child finds it in
// g_service_socket.
void fork_prepare() {
  // Not in a child that has not made its first call yet (its Process is
  // its parent's), nor while this thread holds the lock (never: no verb forks).
  if (g_process == nullptr || g_forked || g_in_process_child || in_process_lock) return;
  Process& p = *g_process;
  if (!p.in_process || p.device == nullptr || p.service != nullptr || p.service_failed || !fork_serve_wanted()) {
    return;
  }
  ProcessLock lock;
  if (p.device != nullptr && p.service == nullptr) start_service(p, *p.device);
}

Device* started_device() {
  Process& p = process();
  if (g_in_process_child) {
    refuse_in_child();
    return nullptr;
  }
  std::call_once(p.started, start);
  return p.device;
}

}  // namespace

bool in_forked_child_of_in_process() {
  process();
  return g_in_process_child;
}

std::uint32_t process_generation() {
  process();  // a child's first call counts it (forget_parent)
  return g_generation;
}

// In a forked child served by uroced or by its parent, the device of its
// parent (or of theirs) stands for this process's own: a context, device
// pointer or device list the program kept from before the fork reaches
// this process's attached device (started on first use), as a kernel
// device's does in a child. rdma-core's tests allocate device memory on
// the context the parent opened (test_device.DMTest.test_multi_process_alloc_dm).
Device* device_of(ibv_device* dev) {
  Process& p = process();
  if (g_in_process_child && dev != nullptr) {
    refuse_in_child();
    return nullptr;
  }
  if (dev != nullptr && p.device != nullptr && dev == &p.device->ibv) return p.device;
  // The ancestors' Process objects are as they were at the fork: nothing
  // in this process writes them.
  for (const Process* a = p.parent; dev != nullptr && a != nullptr; a = a->parent) {
    if (a->device != nullptr && dev == &a->device->ibv) {
      if (Device* d = started_device()) return d;
      break;
    }
  }
  errno = ENODEV;
  return nullptr;
}

Device* device_of(ibv_context* ctx) { return ctx == nullptr ? device_of(static_cast<ibv_device*>(nullptr)) : device_of(ctx->device); }

namespace {

// A context opened before the fork, at its first use in the child: it is
// made this process's own, as ibv_open_device would make it (one more open
// context, its events watched here), on `d`, this process's device. What
// the parent left in it is the parent's: its QPs, CQs and SRQs are not
// watched here, its pending events not delivered here, and its async_fd
// becomes a pipe of this process's at the same descriptor (the inherited
// one is the parent's pipe, shared with it by the fork), keeping the
// program's flags (O_NONBLOCK). Its mutex may have been held by a parent's
// thread at the fork: it is made anew. false (errno) if the device cannot
// start its workers or no pipe can be made.
bool adopt_inherited(Ctx* x, Device* d) {
  ibv_context& c = x->vctx.context;
  {
    ProcessLock lock;
    if (std::atomic_ref<Device*>(x->dev).load(std::memory_order_relaxed) == d) return true;  // another thread did
    Process& p = process();
    int async[2] = {-1, -1};
    if (pipe2(async, O_CLOEXEC) != 0) return false;
    const int flags = fcntl(c.async_fd, F_GETFL);
    if (dup3(async[0], c.async_fd, O_CLOEXEC) < 0) {
      const int e = errno;
      close(async[0]);
      close(async[1]);
      errno = e;
      return false;
    }
    close(async[0]);
    if (flags >= 0) fcntl(c.async_fd, F_SETFL, flags);
    close(x->async_write);
    x->async_write = async[1];
    fcntl(x->async_write, F_SETFL, O_NONBLOCK);
    if (p.open_contexts == 0 && p.service == nullptr) {
      if (const int err = first_open(*d); err != 0) {
        errno = err;
        return false;
      }
    }
    ++p.open_contexts;
    new (&x->mutex) std::mutex;
    x->qps.clear();
    x->cqs.clear();
    x->srqs.clear();
    x->events.clear();
    x->ctx = d->ctx;
    std::atomic_ref<Device*>(x->dev).store(d, std::memory_order_release);
  }
  watch_events(x);
  return true;
}

}  // namespace

Ctx* ctx_of(ibv_context* c) {
  Device* d = device_of(c);
  if (d == nullptr) return nullptr;
  // vctx is Ctx's first member.
  Ctx* x = reinterpret_cast<Ctx*>(reinterpret_cast<char*>(c) - offsetof(verbs_context, context));
  // Acquire: what adopt_inherited wrote (x->ctx) is seen with the device.
  if (std::atomic_ref<Device*>(x->dev).load(std::memory_order_acquire) != d && !adopt_inherited(x, d)) return nullptr;
  return x;
}

Ctx* ctx_of(ibv_context* c, const Born& object) {
  Ctx* x = ctx_of(c);
  if (x == nullptr) return nullptr;
  if (object.generation != g_generation) {
    errno = ENODEV;  // the parent's: its handle means nothing here
    return nullptr;
  }
  return x;
}

}  // namespace uroce::ibverbs

using uroce::ibverbs::Device;
using uroce::ibverbs::device_of;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  Device* d = uroce::ibverbs::started_device();
  auto** list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = d != nullptr ? &d->ibv : nullptr;
  if (num_devices != nullptr) *num_devices = d != nullptr ? 1 : 0;
  return list;
}

void ibv_free_device_list(ibv_device** list) { std::free(list); }

const char* ibv_get_device_name(ibv_device* device) {
  return device_of(device) != nullptr ? device->name : nullptr;
}

__be64 ibv_get_device_guid(ibv_device* device) {
  const Device* d = device_of(device);
  return d != nullptr ? d->guid : 0;
}

int ibv_get_device_index(ibv_device* device) { return device_of(device) != nullptr ? 0 : -1; }

ibv_context* ibv_open_device(ibv_device* device) {
  Device* d = device_of(device);
  if (d == nullptr) return nullptr;
  auto* x = uroce::ibverbs::allocate<uroce::ibverbs::Ctx>();
  if (x == nullptr) return nullptr;
  x->dev = d;
  ibv_context& c = x->vctx.context;
  c.device = device;
  uroce::ibverbs::fill_data_ops(c.ops);
  c.ops._compat_query_device = ibv_query_device;
  c.ops._compat_query_port = (ibv_query_port);
  // Real descriptors: async_fd is a pipe carrying ibv_async_event records
  // (UCX sets O_NONBLOCK on it and adds it to epoll); rdma-core closes
  // cmd_fd.
  int async[2] = {-1, -1};
  c.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (c.cmd_fd < 0 || pipe2(async, O_CLOEXEC) != 0) {
    const int e = errno;
    if (c.cmd_fd >= 0) close(c.cmd_fd);
    delete x;
    errno = e;
    return nullptr;
  }
  c.async_fd = async[0];
  x->async_write = async[1];
  fcntl(x->async_write, F_SETFL, O_NONBLOCK);  // never block the event monitor
  // One completion vector per CPU, as Soft-RoCE has: UCX and others pass a
  // CPU number as comp_vector. An event channel's events come from the
  // engine's thread whatever the vector (ibv_create_cq refuses one beyond).
  c.num_comp_vectors = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_CONF)));
  pthread_mutex_init(&c.mutex, nullptr);
  // verbs.h's verbs_get_ctx(): an extended context is marked by
  // abi_compat == UINTPTR_MAX, and sz bounds which ops the binary may read.
  c.abi_compat = reinterpret_cast<void*>(UINTPTR_MAX);
  x->vctx.sz = sizeof(verbs_context);
  x->vctx.query_port = uroce::ibverbs::query_port_op;
  x->vctx.query_device_ex = uroce::ibverbs::query_device_ex_op;
  x->vctx.query_rt_values = uroce::ibverbs::query_rt_values_op;
  x->vctx.create_cq_ex = uroce::ibverbs::create_cq_ex_op;
  x->vctx.create_qp_ex = uroce::ibverbs::create_qp_ex_op;
  // XRC's: refused with a line of ours (docs/ibverbs.md promises one).
  x->vctx.open_xrcd = uroce::ibverbs::open_xrcd_op;
  x->vctx.close_xrcd = uroce::ibverbs::close_xrcd_op;
  x->vctx.open_qp = uroce::ibverbs::open_qp_op;
  x->vctx.create_srq_ex = uroce::ibverbs::create_srq_ex_op;
  x->vctx.get_srq_num = uroce::ibverbs::get_srq_num_op;
  x->vctx.advise_mr = uroce::ibverbs::advise_mr_op;
  x->vctx.alloc_td = uroce::ibverbs::alloc_td_op;
  x->vctx.dealloc_td = uroce::ibverbs::dealloc_td_op;
  x->vctx.alloc_parent_domain = uroce::ibverbs::alloc_parent_domain_op;
  x->vctx.alloc_dm = uroce::ibverbs::alloc_dm_op;
  x->vctx.free_dm = uroce::ibverbs::free_dm_op;
  x->vctx.reg_dm_mr = uroce::ibverbs::reg_dm_mr_op;
  // Every other verbs_context op stays NULL: the inlines then fall back to
  // an exported call or return EOPNOTSUPP themselves.
  {
    // The engines run while a context is open, and stop with the last one:
    // a peer that quits afterwards (a memif server tearing its regions
    // down on EAL's interrupt thread) then finds no worker in its rings.
    uroce::ibverbs::Process& p = uroce::ibverbs::process();
    uroce::ibverbs::ProcessLock lock;
    int err = 0;
    // A ForkService keeps the workers running (with its hook) already.
    if (p.open_contexts == 0 && p.service == nullptr) err = uroce::ibverbs::first_open(*d);
    if (err != 0) {
      close(c.cmd_fd);
      close(c.async_fd);
      close(x->async_write);
      delete x;
      errno = err;
      return nullptr;
    }
    ++p.open_contexts;
    x->ctx = d->ctx;
    x->caller_progress = d->ctx->progress_mode() == uroce::Context::Progress::kCaller;
  }
  uroce::ibverbs::watch_events(x);
  return &c;
}

int ibv_close_device(ibv_context* context) {
  uroce::ibverbs::Ctx* x = uroce::ibverbs::ctx_of(context);
  if (x == nullptr) return -1;
  uroce::ibverbs::unwatch_events(x);
  {
    uroce::ibverbs::Process& p = uroce::ibverbs::process();
    uroce::ibverbs::ProcessLock lock;
    if (--p.open_contexts == 0) {
      uroce::ibverbs::print_counters_on_close(*x->ctx, "at the last ibv_close_device");
      if (p.service == nullptr) {
        x->ctx->stop_workers();
        if (p.down_between && p.vdev_added) uroce::ibverbs::take_down(*x->dev);
      } else if (!p.service->has_clients()) {
        // The program's last context, and no child attached: the service
        // ends (a later fork starts another). With children attached it
        // serves on, until a last close finds none or the program exits.
        uroce::ibverbs::stop_service(p, *x->dev);
      }
    }
  }
  close(context->cmd_fd);
  close(context->async_fd);
  close(x->async_write);
  pthread_mutex_destroy(&context->mutex);
  delete x;
  return 0;
}

}  // extern "C"
