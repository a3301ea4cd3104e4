// Starting DPDK's Environment Abstraction Layer from an app's command line,
// "prog [EAL args] -- [app args]" as DPDK's own apps take it, with errors a
// user can act on.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::dpdk {

struct SplitArgs {
  std::vector<std::string> eal;  // program name first, then the EAL arguments
  std::vector<std::string> app;  // program name first, then what follows "--"
};

// Splits at the first "--". Without one, everything is the app's and EAL gets
// only the program name.
SplitArgs split_args(int argc, const char* const* argv);

// Whether EAL will find the memory it asks for: "" if so, else a one-line
// message saying how to fix it. `meminfo` is /proc/meminfo's text.
std::string check_hugepages(const std::vector<std::string>& eal_args, std::string_view meminfo);

// Starts EAL (once per process). Returns "" on success, else a one-line
// message: no hugepages (with the command that reserves them, or --no-huge),
// no permission, EAL already started, or DPDK's own reason.
std::string eal_init(const std::vector<std::string>& eal_args);

// An EAL the application started itself (SPDK, VPP, OVS-DPDK; issue 27
// item 13, docs/embedding.md): uroce joins it instead of starting one, and
// never cleans it up.
//
// Whether EAL already runs in this process, started by someone else. A
// probe with no side effect: rte_eal_init fills the lcore count before it
// returns, and nothing else does.
bool eal_started_elsewhere();

// What of UROCE_EAL applies to an EAL that already runs: at most one
// --vdev (hot-plugged by hotplug_vdev). The options that set up the whole
// process (lcores, memory, file prefix, log level, ...) were the
// application's to choose: they are listed in `ignored`. Anything else
// (-a/--allow, -b/--block, a second --vdev, an unknown option) makes it
// return a one-line error naming it; "" otherwise.
struct JoinArgs {
  std::string vdev;                  // the --vdev's devargs ("net_memif0,role=client,..."), "" none
  std::vector<std::string> ignored;  // as given, each with its value
};
std::string parse_join_args(const std::vector<std::string>& eal_args, JoinArgs& out);

// Hot-plugs the virtual device `devargs` into the running EAL
// (rte_eal_hotplug_add on the vdev bus) and finds its ethdev port. "" or a
// line. `added` false: the application had probed a device of that name
// already, so it is not uroce's to remove.
std::string hotplug_vdev(const std::string& devargs, std::uint16_t& port_id, bool& added);
// Whether a vdev hotplug_vdev added may be removed again. Not a memif
// server (memif's default role): DPDK 22.11's memif, removing the last
// device of a listening socket, frees the socket and its interrupt handle
// but neither closes the listening fd nor unregisters its callback, so the
// application's interrupt thread would keep a dangling source (and a peer
// connecting to the name would run the callback on freed memory).
bool vdev_removable(const std::string& devargs);
// Removes a device hotplug_vdev added (its port already closed). "" or a line.
std::string unplug_vdev(const std::string& devargs);

// Releases EAL's resources at exit. Safe to call when eal_init failed.
// EAL's interrupt thread stays parked from then on (see eal.cc).
void eal_cleanup();

// The CPUs EAL gives its control threads (the process's CPUs outside the
// lcores' set, or all of them if the lcores take every one): where a
// thread of the program's own that must stay off the data path belongs
// (the metrics exporter). Without EAL running: this thread's CPUs.
std::vector<int> control_cpus();

// An eventfd whose readiness EAL's interrupt thread serves with
// `callback` (an EXT source: EAL never reads it, so it is called on every
// turn of the thread's loop while the counter is non-zero); -1, errno set,
// when EAL refuses it. Never unregistered.
int on_interrupt_thread_when_readable(void (*callback)(void*));

// Runs `fn` on EAL's interrupt thread, serialised with the PMDs' control
// handlers (memif serves its peer's messages there), and waits for it.
// Inline when no alarm can be set. Not from the interrupt thread itself.
void run_on_interrupt_thread(void (*fn)(void*), void* arg);

// Whether EAL runs on hugepages (not --no-huge), uroce's or the
// application's. The tools then take their
// memory regions from hugepages too, or fail with the command that reserves
// them; with --no-huge they use normal pages and say so once.
bool eal_uses_hugepages();
// The one-line warning for --no-huge ("" on hugepages), for `tool`.
std::string no_huge_warning(const char* tool);

}  // namespace uroce::dpdk
