#include "dpdk/eal.h"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "dpdk/rte.h"
#include "verbs/log.h"

namespace uroce::dpdk {
namespace {

bool eal_started = false;

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

bool eal_uses_hugepages() { return eal_started && rte_eal_has_hugepages() != 0; }

std::string no_huge_warning(const char* tool) {
  if (eal_uses_hugepages()) return "";
  return std::string(tool) +
         ": warning: --no-huge: memory regions use normal 4 KiB pages (more TLB misses; a physical NIC "
         "cannot DMA them)";
}

void eal_cleanup() {
  if (eal_started) rte_eal_cleanup();
  eal_started = false;
}

}  // namespace uroce::dpdk
