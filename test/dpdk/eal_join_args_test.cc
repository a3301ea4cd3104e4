// What of UROCE_EAL applies to an application's running EAL
// (dpdk::parse_join_args; issue 27, item 13; docs/embedding.md): one
// --vdev in either form, the process-wide options set aside, and anything
// else refused with one line naming it. No EAL needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dpdk/eal.h"

namespace {

using uroce::dpdk::JoinArgs;
using uroce::dpdk::parse_join_args;
using uroce::dpdk::vdev_removable;

std::vector<std::string> args(std::vector<std::string> rest) {
  rest.insert(rest.begin(), "uroce-ibverbs");
  return rest;
}

TEST(EalJoinArgs, TakesOneVdevInEitherForm) {
  JoinArgs j;
  EXPECT_EQ(parse_join_args(args({"--vdev=net_memif0,role=client,bsize=8192"}), j), "");
  EXPECT_EQ(j.vdev, "net_memif0,role=client,bsize=8192");
  EXPECT_TRUE(j.ignored.empty());
  EXPECT_EQ(parse_join_args(args({"--vdev", "net_af_packet0,iface=eth1"}), j), "");
  EXPECT_EQ(j.vdev, "net_af_packet0,iface=eth1");
}

TEST(EalJoinArgs, SetsAsideTheProcessWideOptionsWithTheirValues) {
  JoinArgs j;
  EXPECT_EQ(parse_join_args(args({"--no-huge", "--no-shconf", "--no-pci", "-l", "0", "-m256", "--file-prefix=x",
                                  "--log-level", "lib.eal:error", "--vdev=net_ring0"}),
                            j),
            "");
  EXPECT_EQ(j.vdev, "net_ring0");
  const std::vector<std::string> want = {"--no-huge", "--no-shconf", "--no-pci", "-l 0", "-m256", "--file-prefix=x",
                                         "--log-level lib.eal:error"};
  EXPECT_EQ(j.ignored, want);
}

TEST(EalJoinArgs, NothingIsNoError) {
  JoinArgs j;
  EXPECT_EQ(parse_join_args(args({}), j), "");
  EXPECT_EQ(j.vdev, "");
}

TEST(EalJoinArgs, RefusesWhatCannotApplyToARunningEalInOneLine) {
  JoinArgs j;
  for (const auto& bad : std::vector<std::vector<std::string>>{{"-a", "0000:3b:00.0"},
                                                               {"--allow=0000:3b:00.0"},
                                                               {"-b", "0000:3b:00.0"},
                                                               {"--vdev=net_ring0", "--vdev=net_ring1"},
                                                               {"--vdev"},
                                                               {"-l"},
                                                               {"--no-huge=yes"},
                                                               {"--bogus"}}) {
    const std::string e = parse_join_args(args(bad), j);
    EXPECT_EQ(e.rfind("UROCE_EAL: ", 0), 0u) << bad[0] << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_NE(parse_join_args(args({"-a", "0000:3b:00.0"}), j).find("'-a' cannot apply to the application's running EAL"),
            std::string::npos);
  EXPECT_NE(parse_join_args(args({"--vdev=net_ring0", "--vdev=net_ring1"}), j).find("one --vdev only"),
            std::string::npos);
}

// DPDK 22.11's memif leaves a removed server's listener registered: such a
// vdev stays plugged; the rest are removed at the last close.
TEST(EalJoinArgs, AMemifServerIsNeverRemoved) {
  EXPECT_FALSE(vdev_removable("net_memif0,role=server,socket=/tmp/s"));
  EXPECT_FALSE(vdev_removable("net_memif0,socket=/tmp/s"));  // server is memif's default role
  EXPECT_TRUE(vdev_removable("net_memif0,role=client,socket=/tmp/s"));
  EXPECT_TRUE(vdev_removable("net_af_packet0,iface=eth1"));
  EXPECT_TRUE(vdev_removable("net_ring0"));
}

}  // namespace
