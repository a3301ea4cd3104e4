// Issue 27 with stock rdmacm-utils, unmodified, between two processes over
// memif under uroce-run (our libibverbs.so.1 and librdmacm.so.1):
//  - rdma_server and rdma_client, rdma_xserver and rdma_xclient: rdma-core's
//    synchronous endpoints (rdma_create_ep, rdma_get_request, blocking
//    connect and accept, rdma_verbs.h's helpers) (item 4);
//  - rping given the IPv4 address as v4-mapped IPv6 (item 12);
//  - udaddy: rdma_cm's UDP port space (SIDR, then UD datagrams).
// This process starts no EAL: its pollers would share the CPUs the two
// programs' need.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <ostream>
#include <string>
#include <thread>

#include "support/command.h"
#include "support/uroce_ready.h"

namespace {

using uroce::test::Outcome;

// This process's rdma_cm ports: per test, apart from another copy's.
int next_port() {
  static int port = 20000 + getpid() % 20000;
  return port++;
}

Outcome run(const std::string& command) {
  return uroce::test::run_command(uroce::test::kNoUroceEnv + "-u LD_LIBRARY_PATH timeout 60 " + command + " 2>&1");
}

// The server started first, the client once the server's device is up
// (its uroce workers run), each under uroce-run on one end of a memif pair.
struct Pair {
  Outcome server, client;
};
Pair run_pair(const std::string& server_cmd, const std::string& client_cmd) {
  char tmpl[] = "/tmp/uroce-rdmacm-api-XXXXXX";
  const char* made = mkdtemp(tmpl);
  const std::string dir = made != nullptr ? made : "/tmp";
  auto side = [&](bool server) {
    return std::string(UROCE_RUN) + " --no-huge --no-shconf --no-pci -m 256 --log-level=lib.eal:error -l " +
           (server ? "0" : "1") + " --vdev=net_memif0,role=" + (server ? "server" : "client") + ",socket=" + dir +
           "/memif.sock -- --ip 10.0.0." + (server ? "1" : "2") + "/24 ";
  };
  const std::string mark = uroce::test::mark_env("rdmacm-stock");
  auto server = std::async(std::launch::async, [&] { return run("env " + mark + " " + side(true) + server_cmd); });
  const bool up = uroce::test::wait_uroce_workers(
      mark, [&] { return server.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
  Pair p;
  p.client = run(side(false) + client_cmd);
  p.server = server.get();
  if (!up) p.server.out = "(the server's uroce device never came up)\n" + p.server.out;
  EXPECT_TRUE(up) << p.server.out;
  if (made != nullptr) std::system(("rm -rf '" + dir + "'").c_str());
  return p;
}

struct StockCase {
  const char* server;  // in /usr/bin, then its arguments before -p
  const char* client;
};

void PrintTo(const StockCase& c, std::ostream* os) { *os << c.server << " / " << c.client; }

class StockSync : public ::testing::TestWithParam<StockCase> {};

TEST_P(StockSync, PassOverMemif) {
  const StockCase& c = GetParam();
  const std::string server_name = std::string(c.server).substr(0, std::string(c.server).find(' '));
  for (const std::string& tool : {server_name, std::string(c.client)}) {
    if (access(("/usr/bin/" + tool).c_str(), X_OK) != 0) FAIL() << "no " << tool << ": tools/setup.sh installs rdmacm-utils";
  }
  const std::string port = std::to_string(next_port());
  const Pair p = run_pair(std::string("/usr/bin/") + c.server + " -p " + port,
                          std::string("/usr/bin/") + c.client + " -s 10.0.0.1 -p " + port);
  EXPECT_EQ(p.client.status, 0) << p.client.out;
  EXPECT_EQ(p.server.status, 0) << p.server.out;
  // Each prints "NAME: end 0" (some with their path) when every step passed.
  EXPECT_NE(p.client.out.find(std::string(c.client) + ": end 0"), std::string::npos) << p.client.out;
  EXPECT_NE(p.server.out.find(server_name + ": end 0"), std::string::npos) << p.server.out;
}

INSTANTIATE_TEST_SUITE_P(RdmacmUtils, StockSync,
                         ::testing::Values(StockCase{"rdma_server -s 10.0.0.1", "rdma_client"},
                                           StockCase{"rdma_xserver", "rdma_xclient"}),
                         [](const ::testing::TestParamInfo<StockCase>& p) { return std::string(p.param.client); });

// Item 12 with a stock program: rping given the IPv4 address as v4-mapped
// IPv6 (what getaddrinfo hands it for an IPv4 literal on some set-ups)
// binds, listens, connects and pings.
TEST(RdmacmUtils, RpingWithAV4MappedAddressPingsOverMemif) {
  if (access("/usr/bin/rping", X_OK) != 0) FAIL() << "no /usr/bin/rping: tools/setup.sh installs rdmacm-utils";
  const std::string args = " -a ::ffff:10.0.0.1 -p " + std::to_string(next_port()) + " -C 10 -v";
  const Pair p = run_pair("/usr/bin/rping -s" + args, "/usr/bin/rping -c" + args);
  EXPECT_EQ(p.server.status, 0) << p.server.out;
  EXPECT_EQ(p.client.status, 0) << p.client.out;
  std::size_t pings = 0;
  for (std::size_t at = 0; (at = p.client.out.find("ping data: rdma-ping-", at)) != std::string::npos; ++at) ++pings;
  EXPECT_EQ(pings, 10u) << p.client.out;
}

// rdma_cm's UDP port space with a stock program: udaddy (rdmacm-utils)
// resolves the server's UD QP by SIDR (its fixed port 7174), both ends send
// 10 datagrams each way to what the events said (the server answering
// through ibv_create_ah_from_wc), and each ends with "test complete".
TEST(RdmacmUtils, UdaddyResolvesAndExchangesDatagramsOverMemif) {
  if (access("/usr/bin/udaddy", X_OK) != 0) FAIL() << "no /usr/bin/udaddy: tools/setup.sh installs rdmacm-utils";
  const Pair p = run_pair("/usr/bin/udaddy -b 10.0.0.1 -C 10", "/usr/bin/udaddy -s 10.0.0.1 -C 10");
  EXPECT_EQ(p.server.status, 0) << p.server.out;
  EXPECT_EQ(p.client.status, 0) << p.client.out;
  EXPECT_NE(p.client.out.find("test complete"), std::string::npos) << p.client.out;
  EXPECT_NE(p.server.out.find("test complete"), std::string::npos) << p.server.out;
  EXPECT_EQ(p.client.out.find("error"), std::string::npos) << p.client.out;
}

}  // namespace
