// Starting DPDK's Environment Abstraction Layer from an app's command line,
// "prog [EAL args] -- [app args]" as DPDK's own apps take it, with errors a
// user can act on.
#pragma once

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

// Releases EAL's resources at exit. Safe to call when eal_init failed.
// EAL's interrupt thread stays parked from then on (see eal.cc).
void eal_cleanup();

// Runs `fn` on EAL's interrupt thread, serialised with the PMDs' control
// handlers (memif serves its peer's messages there), and waits for it.
// Inline when no alarm can be set. Not from the interrupt thread itself.
void run_on_interrupt_thread(void (*fn)(void*), void* arg);

// Whether EAL runs on hugepages (not --no-huge). The tools then take their
// memory regions from hugepages too, or fail with the command that reserves
// them; with --no-huge they use normal pages and say so once.
bool eal_uses_hugepages();
// The one-line warning for --no-huge ("" on hugepages), for `tool`.
std::string no_huge_warning(const char* tool);

}  // namespace uroce::dpdk
