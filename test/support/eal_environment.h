// EAL for a DPDK test binary: started once before its first test (a
// GoogleTest environment), cleaned up after its last, with the arguments
// each binary needs. No hugepages, no shared config, no PCI: virtual
// devices only.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <rte_eal.h>

#include "dpdk/eal.h"
#include "support/crash_report.h"

namespace uroce::test {

struct EalArgs {
  // argv[0], and the start of the file prefix: the runtime folder (and
  // telemetry socket) is /var/run/dpdk/<name>-<pid>, so two copies of a
  // suite on one machine never share one.
  std::string name{};
  std::string memory_mb = "256";
  std::vector<std::string> vdevs{};  // "--vdev=" each
  std::string log_level = "lib.*:error";
};

class EalEnvironment : public ::testing::Environment {
 public:
  explicit EalEnvironment(EalArgs args) : args_(std::move(args)) {}

  void SetUp() override {
    report_crashes();
    std::vector<std::string> argv = {args_.name, "--no-huge", "--no-shconf", "--no-pci", "-l", "0",
                                     "-m", args_.memory_mb};
    argv.push_back("--file-prefix=" + args_.name + "-" + std::to_string(getpid()));
    argv.push_back("--log-level=" + args_.log_level);
    for (const std::string& v : args_.vdevs) argv.push_back("--vdev=" + v);
    error_ = dpdk::eal_init(argv);
    if (error_.empty()) runtime_dir_ = rte_eal_get_runtime_dir();
  }
  void TearDown() override {
    dpdk::eal_cleanup();
    // EAL leaves its runtime folder (and the telemetry sockets until exit):
    // named for the pid, one a run would pile up. Nobody else uses it.
    std::error_code ignored;
    if (!runtime_dir_.empty()) std::filesystem::remove_all(runtime_dir_, ignored);
  }

  // "" once EAL runs, else why it does not.
  static const std::string& error() { return error_; }
  // This process's DPDK telemetry socket.
  static std::string telemetry_socket() { return runtime_dir_ + "/dpdk_telemetry.v2"; }

 protected:
  static inline std::string error_;

 private:
  EalArgs args_;
  static inline std::string runtime_dir_;
};

}  // namespace uroce::test
