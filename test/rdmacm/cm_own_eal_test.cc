// rdma_cm in an application that runs DPDK itself, as SPDK does (issue 27,
// item 13; docs/embedding.md): the application calls rte_eal_init, uroce
// joins its EAL and hot-plugs net_ring0 (UROCE_EAL naming only the vdev),
// the process connects to itself through the CM. With its IDs and channel
// destroyed, librdmacm has let go of everything: no uroce-cm or
// uroce-worker thread is left, its context's close (the last) took the
// vdev out of the application's EAL, a second round of rdma_cm works, and
// the application's own rte_eal_cleanup returns 0. One test: EAL starts
// once in a process.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "dpdk/rte.h"
#include "self_connection.h"

namespace {

using namespace uroce::test;

TEST(CmOwnEal, RdmaCmLetsGoOfTheDeviceBeforeTheApplicationCleansUpEal) {
  alarm(120);  // a hang fails the test
  setenv("UROCE_EAL", "--vdev=net_ring0", 1);
  setenv("UROCE_IP", "10.0.0.1/24", 1);
  unsetenv("UROCE_PORT_ID");
  unsetenv("UROCE_SERVICE");
  const std::string prefix = "cm-own-eal-" + std::to_string(getpid());
  std::vector<std::string> args = {"cm_own_eal", "--no-huge", "--no-shconf", "--no-pci", "-l", "0", "-m", "256",
                                   "--file-prefix=" + prefix, "--log-level=lib.eal:error"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ASSERT_GE(rte_eal_init(static_cast<int>(args.size()), argv.data()), 0);
  const std::uint16_t ports_before = rte_eth_dev_count_avail();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ASSERT_NO_FATAL_FAILURE(connect_to_ourselves());
    EXPECT_EQ(threads_named("uroce-cm"), 0) << all_threads();
    EXPECT_EQ(threads_named("uroce-worker"), 0) << all_threads();
    EXPECT_EQ(rte_eth_dev_count_avail(), ports_before) << "uroce's vdev is still in the application's EAL";
  }
  const std::string runtime = rte_eal_get_runtime_dir();
  EXPECT_EQ(rte_eal_cleanup(), 0);
  std::error_code ignored;
  std::filesystem::remove_all(runtime, ignored);  // as an application would
  alarm(0);
}

}  // namespace
