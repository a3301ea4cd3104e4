// DPDK under the sandbox's constraints (no hugepages, no PCI, no shared
// config): EAL starts, a net_ring port loops frames built by lib/wire back
// to us unchanged, and EAL start-up errors tell the user what to do.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "dpdk/eal.h"
#include "dpdk/port.h"
#include "support/eal_environment.h"
#include "support/frame_helpers.h"
#include "support/test_seed.h"

namespace uroce::test {
namespace {

TEST(Eal, StartsWithoutHugepagesAndFindsTheVdev) {
  ASSERT_EQ(EalEnvironment::error(), "");
  EXPECT_EQ(dpdk::port_count(), 1);
  EXPECT_EQ(dpdk::eal_init({"again", "--no-huge"}), "EAL is already running in this process");
}

TEST(Eal, SplitsArgumentsAtTheDoubleDash) {
  const char* argv[] = {"uroce-perf", "--no-huge", "-l", "0-1", "--", "--ip", "10.0.0.1/24", "server"};
  const auto s = dpdk::split_args(8, argv);
  EXPECT_EQ(s.eal, (std::vector<std::string>{"uroce-perf", "--no-huge", "-l", "0-1"}));
  EXPECT_EQ(s.app, (std::vector<std::string>{"uroce-perf", "--ip", "10.0.0.1/24", "server"}));
  const char* plain[] = {"uroce-perf", "-s", "64"};
  const auto p = dpdk::split_args(3, plain);
  EXPECT_EQ(p.eal, (std::vector<std::string>{"uroce-perf"}));
  EXPECT_EQ(p.app, (std::vector<std::string>{"uroce-perf", "-s", "64"}));
}

TEST(Eal, MissingHugepagesGiveTheCommandThatFixesIt) {
  const std::string none = "MemTotal: 1 kB\nHugePages_Total:       0\nHugePages_Free: 0\n";
  const std::string some = "HugePages_Total:    1024\n";
  const std::string hint = dpdk::check_hugepages({"x"}, none);
  // Unless this machine has 1 GiB pages reserved, which the check honours.
  std::ifstream giant("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages");
  long gigantic = 0;
  giant >> gigantic;
  if (gigantic == 0) {
    EXPECT_NE(hint.find("dpdk-hugepages.py --setup"), std::string::npos) << hint;
    EXPECT_NE(hint.find("--no-huge"), std::string::npos) << hint;
  }
  EXPECT_EQ(dpdk::check_hugepages({"x"}, some), "");
  EXPECT_EQ(dpdk::check_hugepages({"x", "--no-huge"}, none), "");
}

TEST(Port, UnknownPortIsAClearError) {
  std::string error;
  EXPECT_EQ(dpdk::Port::open({.name = "net_nothing9"}, error), nullptr);
  EXPECT_NE(error.find("no DPDK port named 'net_nothing9'"), std::string::npos) << error;
  EXPECT_EQ(dpdk::Port::open({.port_id = 7}, error), nullptr);
  EXPECT_NE(error.find("no DPDK port 7"), std::string::npos) << error;
}

TEST(Port, NetRingLoopsBuiltFramesBackByteForByte) {
  ASSERT_EQ(EalEnvironment::error(), "");
  std::string error;
  auto port = dpdk::Port::open({.name = "net_ring0", .max_frame = 9018}, error);
  ASSERT_NE(port, nullptr) << error;

  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::uint8_t>> sent;
  for (const int opcode : {0x04, 0x06, 0x0a, 0x0c, 0x10, 0x11, 0x12, 0x13, 0x64, 0x81}) {
    const auto op = static_cast<std::uint8_t>(opcode);
    const wire::OpcodeInfo& info = wire::opcode_info(op);
    std::size_t len = 0;
    if (info.has(wire::kHasPayload)) len = info.has(wire::kFixedPayload16) ? 16 : info.has(wire::kFirst) && !info.has(wire::kLast) ? 4096 : rng() % 4097;
    std::vector<std::uint8_t> payload(len);
    for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
    sent.push_back(build(make_spec(op, rng() % 2 ? 6 : 4), payload));
  }
  ASSERT_EQ(port->send_copies(0, sent), sent.size());
  std::vector<std::vector<std::uint8_t>> received;
  port->receive_copies(0, received, 64);
  ASSERT_EQ(received.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(received[i], sent[i]) << "frame " << i;
    wire::ParsedFrame p;
    EXPECT_EQ(wire::parse_frame(received[i], p), wire::ParseStatus::kOk) << "frame " << i;
  }
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // net_ring0 with no arguments uses one ring per queue for both RX and TX:
  // what a port sends, it receives.
  ::testing::AddGlobalTestEnvironment(
      new uroce::test::EalEnvironment({.name = "uroce-test", .vdevs = {"net_ring0"}, .log_level = "lib.eal:error"}));
  return RUN_ALL_TESTS();
}
