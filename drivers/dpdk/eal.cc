#include "dpdk/eal.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "dpdk/burst_gate.h"
#include "dpdk/rte.h"
#include "log/log.h"

#include <rte_dev.h>  // rte_eal_hotplug_add/remove

namespace uroce::dpdk {
namespace {

bool eal_started = false;  // by uroce (eal_init)
bool eal_joined = false;   // the application's, found by eal_started_elsewhere

bool has_arg(const std::vector<std::string>& args, std::string_view name) {
  for (const auto& a : args) {
    if (a == name || a.rfind(std::string(name) + "=", 0) == 0) return true;
  }
  return false;
}

std::string read_meminfo() {
  std::ifstream in("/proc/meminfo");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

SplitArgs split_args(int argc, const char* const* argv) {
  SplitArgs out;
  const std::string prog = argc > 0 ? argv[0] : "uroce";
  out.eal.push_back(prog);
  out.app.push_back(prog);
  int dashes = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      dashes = i;
      break;
    }
  }
  for (int i = 1; i < argc; ++i) {
    if (dashes < 0 || i > dashes) out.app.emplace_back(argv[i]);
    else if (i < dashes) out.eal.emplace_back(argv[i]);
  }
  return out;
}

std::string check_hugepages(const std::vector<std::string>& eal_args, std::string_view meminfo) {
  if (has_arg(eal_args, "--no-huge")) return "";
  // HugePages_Total counts pages of the default size; other sizes (1G) show
  // up only in sysfs, so only a zero here with no other hint is an error.
  const auto at = meminfo.find("HugePages_Total:");
  if (at == std::string_view::npos) return "";
  std::istringstream line(std::string(meminfo.substr(at + 16, 32)));
  long total = 0;
  line >> total;
  if (total > 0) return "";
  std::ifstream giant("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages");
  long gigantic = 0;
  if (giant >> gigantic; gigantic > 0) return "";
  return "no hugepages reserved: run 'dpdk-hugepages.py --setup 2G' (package dpdk) as root, "
         "or pass --no-huge to run on normal pages";
}

namespace {

std::string start_eal(const std::vector<std::string>& eal_args) {
  if (eal_started) return "EAL is already running in this process";
  if (std::string hint = check_hugepages(eal_args, read_meminfo()); !hint.empty()) return hint;
  std::vector<std::string> copy = eal_args;  // rte_eal_init may permute argv
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (rte_eal_init(static_cast<int>(copy.size()), argv.data()) < 0) {
    const int err = rte_errno;
    switch (err) {
      case EACCES: return "EAL: permission denied; run as root";
      case EALREADY: return "EAL was already started in this process";
      case ENOMEM:
        return "EAL: not enough memory; reserve hugepages ('dpdk-hugepages.py --setup 2G'), "
               "or pass --no-huge with -m MB";
      default: return std::string("EAL failed to start: ") + rte_strerror(err) +
                      " (check the EAL arguments before '--')";
    }
  }
  eal_started = true;
  return "";
}

}  // namespace

std::string eal_init(const std::vector<std::string>& eal_args) {
  std::string line;
  for (const auto& a : eal_args) line += (line.empty() ? "" : " ") + a;
  logger().debug("EAL arguments: {}", line);
  std::string error = start_eal(eal_args);
  if (!error.empty()) {
    logger().debug("{}", error);
    return error;
  }
  logger().info("EAL started: {} lcore(s), main lcore {}, {}", rte_lcore_count(), rte_get_main_lcore(),
                rte_eal_has_hugepages() ? "hugepages" : "normal pages (--no-huge)");
  return "";
}

bool eal_uses_hugepages() { return (eal_started || eal_joined) && rte_eal_has_hugepages() != 0; }

bool eal_started_elsewhere() {
  if (eal_started) return false;
  if (rte_lcore_count() == 0) return false;
  if (!eal_joined) {
    logger().info("EAL already runs in this process (the application's): joining it, {} lcore(s), main lcore {}, {}",
                  rte_lcore_count(), rte_get_main_lcore(),
                  rte_eal_has_hugepages() ? "hugepages" : "normal pages (--no-huge)");
  }
  eal_joined = true;
  return true;
}

namespace {

// Options that set up the whole process: when the application started
// EAL they were its own to choose, and uroce can change none of them.
// (name, whether it takes a value)
constexpr std::pair<std::string_view, bool> kProcessWide[] = {
    {"-l", true},           {"-c", true},           {"--lcores", true},     {"--main-lcore", true},
    {"-n", true},           {"-m", true},           {"--socket-mem", true}, {"--socket-limit", true},
    {"--file-prefix", true}, {"--log-level", true}, {"--proc-type", true},  {"--iova-mode", true},
    {"--huge-dir", true},   {"--base-virtaddr", true},
    {"--no-huge", false},   {"--no-shconf", false}, {"--no-pci", false},    {"--in-memory", false},
    {"--no-telemetry", false}, {"--legacy-mem", false}, {"--single-file-segments", false}, {"--no-hpet", false},
};

}  // namespace

std::string parse_join_args(const std::vector<std::string>& eal_args, JoinArgs& out) {
  out = JoinArgs{};
  // eal_args[0] is the program name.
  for (std::size_t i = 1; i < eal_args.size(); ++i) {
    const std::string& a = eal_args[i];
    // "--opt=value", "--opt value", "-l0", "-l 0".
    std::string name = a;
    std::string value;
    bool has_value = false;
    if (a.rfind("--", 0) == 0) {
      if (const auto eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        has_value = true;
      }
    } else if (a.size() > 2 && a[0] == '-') {
      name = a.substr(0, 2);
      value = a.substr(2);
      has_value = true;
    }
    auto take_value = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= eal_args.size()) return false;
      value = eal_args[++i];
      return true;
    };
    if (name == "--vdev") {
      if (!take_value() || value.empty()) return "UROCE_EAL: --vdev without a device (e.g. --vdev=net_memif0,role=client)";
      if (!out.vdev.empty()) {
        return "UROCE_EAL: one --vdev only when the application runs EAL (uroce hot-plugs one port): '" + value + "'";
      }
      out.vdev = value;
      continue;
    }
    bool known = false;
    for (const auto& [option, with_value] : kProcessWide) {
      if (name != option) continue;
      known = true;
      if (with_value && !take_value()) return "UROCE_EAL: " + name + " without its value";
      if (!with_value && has_value) known = false;  // "-l..." forms only for those taking a value
      break;
    }
    if (!known) {
      return "UROCE_EAL: '" + a + "' cannot apply to the application's running EAL: give only --vdev=DEVICE,ARGS "
             "(uroce hot-plugs it) or set UROCE_PORT_ID to a port the application probed (docs/embedding.md)";
    }
    out.ignored.push_back(a + (has_value || value.empty() ? "" : " " + value));
  }
  return "";
}

namespace {

std::string vdev_name(const std::string& devargs) { return devargs.substr(0, devargs.find(',')); }

}  // namespace

std::string hotplug_vdev(const std::string& devargs, std::uint16_t& port_id, bool& added) {
  const std::string name = vdev_name(devargs);
  const std::string args = devargs.size() > name.size() ? devargs.substr(name.size() + 1) : "";
  added = false;
  if (name.empty()) return "UROCE_EAL: --vdev=" + devargs + ": no device name";
  const int rc = rte_eal_hotplug_add("vdev", name.c_str(), args.c_str());
  if (rc == 0) {
    added = true;
  } else if (rc != -EEXIST) {
    return "cannot hot-plug --vdev=" + devargs + " into the application's EAL: " + rte_strerror(-rc) +
           " (is the driver linked into the application, and the name new?)";
  }
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id) != 0) {
    if (added) rte_eal_hotplug_remove("vdev", name.c_str());
    added = false;
    return "--vdev=" + devargs + " made no ethdev port named '" + name + "'";
  }
  logger().info("port {} ({}): {} the application's EAL", port_id, name,
                added ? "hot-plugged into" : "already probed by");
  return "";
}

bool vdev_removable(const std::string& devargs) {
  if (devargs.rfind("net_memif", 0) != 0) return true;
  return devargs.find(",role=client") != std::string::npos;
}

std::string unplug_vdev(const std::string& devargs) {
  const std::string name = vdev_name(devargs);
  if (const int rc = rte_eal_hotplug_remove("vdev", name.c_str()); rc != 0) {
    return "cannot remove " + name + " from the application's EAL: " + std::string(rte_strerror(-rc));
  }
  logger().info("{} removed from the application's EAL", name);
  return "";
}

std::string no_huge_warning(const char* tool) {
  if (eal_uses_hugepages()) return "";
  return std::string(tool) +
         ": warning: --no-huge: memory regions use normal 4 KiB pages (more TLB misses; a physical NIC "
         "reaches them only through an IOMMU: vfio-pci, IOVA as VA)";
}

namespace {

struct OnInterruptThread {
  void (*fn)(void*);
  void* arg;
  // Hand-over to the interrupt thread and back, as acquire/release pairs
  // (the alarm's own hand-over goes through EAL, which ThreadSanitizer does
  // not see).
  std::atomic<bool> handed{false};
  std::atomic<bool> done{false};
};

std::atomic<bool> interrupt_thread_parked{false};

// DPDK 22.11's memif, closing the last device on a listening socket, frees
// the socket without unregistering its listener: the listener's interrupt
// source stays in EAL's list with its handle in EAL memory. rte_eal_cleanup
// then unregisters the alarm source, which wakes the interrupt thread to
// walk that list again, and unmaps EAL memory right after: a walk still
// under way faults (a SIGSEGV in rte_intr_fd_get at exit, about one exit in
// a hundred of a memif server on a loaded machine; every one under strace).
// So the thread is first parked in a callback of its own, on an eventfd, and
// stays there until the process exits: it walks nothing any more. (Parked in
// an alarm callback instead, the cleanup would wait forever for the alarm
// source it unregisters to go idle.)
bool park_interrupt_thread() {
  const int fd = on_interrupt_thread_when_readable([](void*) {
    interrupt_thread_parked.store(true, std::memory_order_release);
    for (;;) pause();
  });
  if (fd < 0) return false;
  const std::uint64_t one = 1;
  if (write(fd, &one, sizeof one) != static_cast<ssize_t>(sizeof one)) return false;
  hurry_burst_gate();  // a thread held there reaches this callback in its next window
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!interrupt_thread_parked.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

}  // namespace

int on_interrupt_thread_when_readable(void (*callback)(void*)) {
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return -1;
  rte_intr_handle* handle = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
  if (handle == nullptr || rte_intr_fd_set(handle, fd) != 0 || rte_intr_type_set(handle, RTE_INTR_HANDLE_EXT) != 0 ||
      rte_intr_callback_register(handle, callback, nullptr) != 0) {
    if (handle != nullptr) rte_intr_instance_free(handle);
    close(fd);
    return -1;
  }
  return fd;
}

void run_on_interrupt_thread(void (*fn)(void*), void* arg) {
  OnInterruptThread call{fn, arg};
  auto run = [](void* p) {
    auto* c = static_cast<OnInterruptThread*>(p);
    while (!c->handed.load(std::memory_order_acquire)) {
    }
    c->fn(c->arg);
    c->done.store(true, std::memory_order_release);
  };
  call.handed.store(true, std::memory_order_release);
  if (interrupt_thread_parked.load(std::memory_order_acquire) || rte_eal_alarm_set(1, run, &call) != 0) {
    fn(arg);
    return;
  }
  hurry_burst_gate();
  while (!call.done.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void eal_cleanup() {
  if (!eal_started) return;
  eal_started = false;
  // An interrupt thread that cannot be parked may still be walking: EAL's
  // memory is then left to the process's exit rather than unmapped under it.
  if (!park_interrupt_thread()) {
    logger().warn("EAL's interrupt thread did not answer within 10 s: EAL left to the process's exit, not cleaned up");
    return;
  }
  rte_eal_cleanup();
}

std::vector<int> control_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  auto read_own = [](void* arg) -> void* {
    sched_getaffinity(0, sizeof(cpu_set_t), static_cast<cpu_set_t*>(arg));
    return nullptr;
  };
  pthread_t t{};
  // A control thread made the way EAL makes its own takes their CPUs.
  if (!eal_started || rte_ctrl_thread_create(&t, "uroce-cpus", nullptr, read_own, &set) != 0) {
    sched_getaffinity(0, sizeof set, &set);
  } else {
    pthread_join(t, nullptr);
  }
  std::vector<int> out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

}  // namespace uroce::dpdk
