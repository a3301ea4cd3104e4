// Issue 27 with libfabric's verbs provider (Debian 12's libfabric 1.17,
// unmodified) and rdmacm-utils on our libibverbs.so.1 and librdmacm.so.1,
// between two network namespaces over a veth pair (af_packet ports, 8 KiB
// frames), each program under uroce-run:
//  - fi_info -p verbs lists verbs;ofi_rxm (and verbs' MSG endpoints);
//  - fi_pingpong over verbs MSG endpoints and over verbs;ofi_rxm RDM, every
//    size's row with all messages sent and acknowledged;
//  - rdma_server/rdma_client, rdma_xserver/rdma_xclient (synchronous IDs);
//  - cmtime's client with a figure for every step.
// uroce's address is the kernel interface's own (item 10, docs/rdma_cm.md):
// libfabric looks for a kernel interface carrying the device's address,
// and fi_pingpong's TCP side channel and its rdma_cm peer share one address.
// This process starts no EAL: its pollers would share the CPUs the two
// programs need.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/veth_namespaces.h"
#include "support/command.h"
#include "support/free_port.h"

namespace {

using uroce::test::Outcome;

Outcome run(const std::string& command) {
  return uroce::test::run_command(uroce::test::kNoUroceEnv + "-u LD_LIBRARY_PATH -u FI_PROVIDER " + command + " 2>&1");
}

bool have(const char* path) { return access(path, X_OK) == 0; }

// Two namespaces and the veth between them, for the whole binary. The
// kernel and uroce share each side's address (10.94.0.1 and .2).
struct Namespaces {
  static const uroce::test::VethNamespaces& get() {
    static const uroce::test::VethNamespaces n("fab", "fabveth", "10.94.0");
    return n;
  }
};

// The command prefix for one side: its namespace, uroce-run on its end of
// the veth, its own CPU, the kernel interface's address.
std::string side(bool server) {
  const auto& n = Namespaces::get();
  return "ip netns exec " + (server ? n.a : n.b) + " " + UROCE_RUN +
         " --no-huge --no-shconf --no-pci -m 256 --log-level=lib.eal:error -l " + (server ? "0" : "1") +
         " --vdev=net_af_packet0,iface=fabveth" + (server ? "0" : "1") +
         ",blocksz=16384,framesz=8192,framecnt=512 -- --ip 10.94.0." + (server ? "1" : "2") + "/24 ";
}

// Whether a socket of the server's namespace listens on TCP `port`.
bool listening(int port) { return uroce::test::tcp_port_listening(port, "ip netns exec " + Namespaces::get().a + " "); }

// Whether a process of the server's namespace has opened its af_packet
// port (a row in /proc/net/packet): uroce is up there. The program listens
// at once after (an rdma_cm listener, which nothing outside the process
// sees); a REQ that comes before the listen is refused and sent again for
// half a second (docs/rdma_cm.md).
bool port_open() {
  const Outcome t = run("ip netns exec " + Namespaces::get().a + " cat /proc/net/packet");
  return t.status == 0 && t.out.find('\n') != std::string::npos && t.out.find('\n') + 1 < t.out.size();
}

// Waits (up to 40 s) until `ready` or the server is done.
template <typename Ready>
void wait_for(std::future<Outcome>& server, Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (!ready() && std::chrono::steady_clock::now() < deadline &&
         server.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
  }
}

struct Pair {
  Outcome server, client;
};

// The server, then the client once the server listens on TCP `tcp_port`
// (its side channel), or with 0, once its port is open.
Pair run_pair(const std::string& server_cmd, const std::string& client_cmd, int tcp_port) {
  auto server = std::async(std::launch::async, [&] { return run("timeout 60 " + side(true) + server_cmd); });
  if (tcp_port == 0) {
    wait_for(server, port_open);
  } else {
    wait_for(server, [tcp_port] { return listening(tcp_port); });
  }
  Pair p;
  p.client = run("timeout 60 " + side(false) + client_cmd);
  p.server = server.get();
  return p;
}

// In fi_info's listing, `name`'s value in the first entry that starts with
// `entry` ("" if none).
std::string field_after(const std::string& out, const std::string& entry, const std::string& name) {
  const std::size_t at = out.find(entry);
  if (at == std::string::npos) return "";
  const std::size_t f = out.find("    " + name + ": ", at);
  if (f == std::string::npos || f > out.find("provider: ", at + entry.size())) return "";
  const std::size_t v = f + name.size() + 6;
  return out.substr(v, out.find('\n', v) - v);
}

TEST(Fabric, FiInfoListsVerbsWithOfiRxm) {
  ASSERT_TRUE(have("/usr/bin/fi_info")) << "no fi_info: tools/setup.sh installs libfabric-bin";
  ASSERT_EQ(Namespaces::get().error(), "");
  const Outcome r = run("timeout 60 " + side(true) + "/usr/bin/fi_info -p verbs");
  EXPECT_EQ(r.status, 0) << r.out;
  // libfabric found uroce0 behind the kernel interface's address: its MSG
  // endpoints, and ofi_rxm's RDM endpoints layered on them.
  EXPECT_EQ(field_after(r.out, "provider: verbs;ofi_rxm\n", "domain"), "uroce0") << r.out;
  EXPECT_EQ(field_after(r.out, "provider: verbs;ofi_rxm\n", "type"), "FI_EP_RDM") << r.out;
  EXPECT_EQ(field_after(r.out, "provider: verbs\n", "domain"), "uroce0") << r.out;
  EXPECT_EQ(field_after(r.out, "provider: verbs\n", "type"), "FI_EP_MSG") << r.out;
}

// fi_pingpong's rows: "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec".
struct Row {
  std::string size;
  long sent = 0, acked = 0;
  double mb_per_s = 0;
};
std::vector<Row> rows(const std::string& out) {
  std::vector<Row> r;
  static const std::regex row(R"(^(\d+[km]?)\s+(\d+)\s+=(\d+)\s+\S+\s+[\d.]+s\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s*$)");
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, row)) r.push_back({m[1], std::stol(m[2]), std::stol(m[3]), std::stod(m[4])});
  }
  return r;
}

struct PingpongCase {
  const char* name;
  const char* provider;
  const char* endpoint;
};

void PrintTo(const PingpongCase& c, std::ostream* os) { *os << c.provider << " " << c.endpoint; }

class FiPingpong : public ::testing::TestWithParam<PingpongCase> {};

// Every size from 64 bytes to 1 MiB (fi_pingpong's default list), 100
// round trips each: all sent, all acknowledged, on both ends.
TEST_P(FiPingpong, EverySizePassesBetweenNamespaces) {
  const PingpongCase& c = GetParam();
  ASSERT_TRUE(have("/usr/bin/fi_pingpong")) << "no fi_pingpong: tools/setup.sh installs libfabric-bin";
  ASSERT_EQ(Namespaces::get().error(), "");
  static int port = 47000 + getpid() % 1000;
  const int p = port++;
  const std::string args =
      std::string("/usr/bin/fi_pingpong -p '") + c.provider + "' -e " + c.endpoint + " -I 100 -B " +
      std::to_string(p) + " -P " + std::to_string(p);
  const Pair r = run_pair(args, args + " 10.94.0.1", p);
  EXPECT_EQ(r.server.status, 0) << r.server.out;
  EXPECT_EQ(r.client.status, 0) << r.client.out;
  for (const Outcome* o : {&r.server, &r.client}) {
    const std::vector<Row> got = rows(o->out);
    EXPECT_EQ(got.size(), 6u) << "64, 256, 1k, 4k, 64k and 1m:\n" << o->out;
    for (const Row& row : got) {
      EXPECT_EQ(row.sent, 100) << row.size;
      EXPECT_EQ(row.acked, 100) << row.size;
      EXPECT_GT(row.mb_per_s, 0.0) << row.size;
    }
  }
  const std::vector<Row> got = rows(r.client.out);
  if (!got.empty()) std::printf("%s: %s %.1f MB/s\n", c.name, got.back().size.c_str(), got.back().mb_per_s);
}

INSTANTIATE_TEST_SUITE_P(Fabric, FiPingpong,
                         ::testing::Values(PingpongCase{"msg", "verbs", "msg"},
                                           PingpongCase{"rdm", "verbs;ofi_rxm", "rdm"}),
                         [](const ::testing::TestParamInfo<PingpongCase>& p) { return std::string(p.param.name); });

struct SyncCase {
  const char* server;  // in /usr/bin, then its arguments before -p
  const char* client;
};

void PrintTo(const SyncCase& c, std::ostream* os) { *os << c.server << " / " << c.client; }

class FabricSync : public ::testing::TestWithParam<SyncCase> {};

// rdmacm-utils' synchronous endpoints between the namespaces: each prints
// "NAME: end 0" when every step passed.
TEST_P(FabricSync, PassBetweenNamespaces) {
  const SyncCase& c = GetParam();
  const std::string server_name = std::string(c.server).substr(0, std::string(c.server).find(' '));
  for (const std::string& tool : {server_name, std::string(c.client)}) {
    ASSERT_TRUE(have(("/usr/bin/" + tool).c_str())) << "no " << tool << ": tools/setup.sh installs rdmacm-utils";
  }
  ASSERT_EQ(Namespaces::get().error(), "");
  static int port = 7400;
  const std::string p = std::to_string(port++);
  const Pair r = run_pair(std::string("/usr/bin/") + c.server + " -p " + p,
                          std::string("/usr/bin/") + c.client + " -s 10.94.0.1 -p " + p, 0);
  EXPECT_EQ(r.client.status, 0) << r.client.out;
  EXPECT_EQ(r.server.status, 0) << r.server.out;
  EXPECT_NE(r.client.out.find(std::string(c.client) + ": end 0"), std::string::npos) << r.client.out;
  EXPECT_NE(r.server.out.find(server_name + ": end 0"), std::string::npos) << r.server.out;
}

INSTANTIATE_TEST_SUITE_P(Fabric, FabricSync,
                         ::testing::Values(SyncCase{"rdma_server -s 10.94.0.1", "rdma_client"},
                                           SyncCase{"rdma_xserver", "rdma_xclient"}),
                         [](const ::testing::TestParamInfo<SyncCase>& p) { return std::string(p.param.client); });

// cmtime: 20 connections timed step by step. Its server (rdma-core v44)
// never exits, so it is stopped once the client is done; the client must
// exit 0 with a figure for each step, connect and disconnect taking real
// time (a round trip of MADs each).
TEST(Fabric, CmtimeTimesEveryStep) {
  ASSERT_TRUE(have("/usr/bin/cmtime")) << "no cmtime: tools/setup.sh installs rdmacm-utils";
  ASSERT_EQ(Namespaces::get().error(), "");
  char tmpl[] = "/tmp/uroce-cmtime-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  ASSERT_NE(dir, nullptr);
  const std::string pidfile = std::string(dir) + "/pid";
  // The server's pid (sh execs ip, which execs uroce-run, which execs cmtime).
  auto server = std::async(std::launch::async, [&] {
    return run("sh -c 'echo $$ > " + pidfile + "; exec " + side(true) + "/usr/bin/cmtime -b 10.94.0.1 -p 7390 -c 20'");
  });
  wait_for(server, port_open);
  const Outcome client = run("timeout 60 " + side(false) + "/usr/bin/cmtime -s 10.94.0.1 -p 7390 -c 20");
  int pid = 0;
  std::ifstream(pidfile) >> pid;
  if (pid > 0) kill(pid, SIGTERM);
  const Outcome srv = server.get();
  std::system(("rm -rf '" + std::string(dir) + "'").c_str());
  EXPECT_EQ(client.status, 0) << client.out;
  EXPECT_EQ(client.out.find("failed"), std::string::npos) << client.out;
  EXPECT_EQ(srv.out.find("failed"), std::string::npos) << srv.out;
  // "step total ms max ms min us us / conn", one row per step.
  static const std::regex row(R"(^([a-z ]+\S?)\s*:\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$)");
  std::istringstream in(client.out);
  int steps = 0;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    ++steps;
    const std::string step = m[1];
    if (step.rfind("connect", 0) == 0 || step.rfind("disconnect", 0) == 0) {
      EXPECT_GT(std::stod(m[5]), 0.0) << line;
      EXPECT_GT(std::stod(m[2]), 0.0) << line;
    }
  }
  EXPECT_EQ(steps, 7) << "create id, resolve addr, resolve route, create qp, connect, disconnect, destroy:\n"
                      << client.out;
  const std::size_t table = client.out.find("step");
  if (table != std::string::npos) std::printf("%s\n", client.out.substr(table).c_str());
}

}  // namespace
