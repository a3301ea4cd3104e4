// lib/ibverbs, our libibverbs.so.1, under programs built for rdma-core's:
// a C client compiled against the stock <infiniband/verbs.h>
// (ibverbs_client.c) and Debian's own ibv_devinfo and ibv_devices, run with
// LD_LIBRARY_PATH at our library and the device named by the environment
// (EAL on --no-huge, net_ring). Each runs in a process of its own: EAL
// starts once per process.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>

namespace {

const std::string kEal = "--no-huge --no-shconf --no-pci -l 0 -m 256 --vdev=net_ring0 --log-level=lib.eal:error";
const std::string kConfigured = "UROCE_EAL='" + kEal + "' UROCE_IP=10.0.0.1/24 ";

struct Outcome {
  int status = -1;  // exit code; -1 if it did not exit normally
  std::string out;  // stdout and stderr
};

// Runs `command` under sh with no uroce variable inherited, then `env`
// (VAR=value ...) and LD_LIBRARY_PATH at our library.
Outcome run(const std::string& env, const std::string& command) {
  const std::string line = "env -u UROCE_EAL -u UROCE_IP -u UROCE_PORT_ID -u UROCE_QUEUES -u UROCE_WORKERS "
                           "-u UROCE_DCQCN LD_LIBRARY_PATH=" UROCE_IBVERBS_DIR " " +
                           env + "timeout 120 " + command + " 2>&1";
  Outcome r;
  FILE* p = popen(line.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool have(const char* tool) { return access(tool, X_OK) == 0; }

TEST(Ibverbs, CClientWithoutConfigurationSeesNoDeviceAndOneHint) {
  const Outcome r = run("", UROCE_IBVERBS_CLIENT " unconfigured");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;
  // One line saying what to set, however often the list is asked for.
  const auto hint = r.out.find("set UROCE_EAL");
  EXPECT_NE(hint, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("set UROCE_EAL", hint + 1), std::string::npos) << r.out;
}

TEST(Ibverbs, CClientOpensAndQueriesTheDevice) {
  const Outcome r = run(kConfigured, UROCE_IBVERBS_CLIENT " configured");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;
}

TEST(Ibverbs, CClientWithABadAddressSaysWhy) {
  const Outcome r = run("UROCE_EAL='" + kEal + "' UROCE_IP=10.0.0 ", UROCE_IBVERBS_CLIENT " unconfigured");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("UROCE_IP must be an IPv4 address"), std::string::npos) << r.out;
}

TEST(Ibverbs, StockIbvDevinfoPrintsTheDevice) {
  if (!have("/usr/bin/ibv_devinfo")) FAIL() << "no /usr/bin/ibv_devinfo: tools/setup.sh installs it (apt-get install ibverbs-utils)";
  const Outcome r = run(kConfigured, "/usr/bin/ibv_devinfo -v");
  EXPECT_EQ(r.status, 0) << r.out;
  for (const char* s : {"hca_id:\turoce0", "transport:\t\t\tInfiniBand (0)", "phys_port_cnt:\t\t\t1",
                        "max_qp_rd_atom:\t\t\t16", "state:\t\t\tPORT_ACTIVE (4)", "link_layer:\t\tEthernet",
                        "gid_tbl_len:\t\t2", "phys_state:\t\tLINK_UP (5)", "GID[  0]:\t\tfe80::",
                        "GID[  1]:\t\t::ffff:10.0.0.1, RoCE v2"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << "no '" << s << "' in:\n" << r.out;
  }
}

TEST(Ibverbs, StockIbvDevicesListsTheDevice) {
  if (!have("/usr/bin/ibv_devices")) FAIL() << "no /usr/bin/ibv_devices: tools/setup.sh installs it (apt-get install ibverbs-utils)";
  const Outcome r = run(kConfigured, "/usr/bin/ibv_devices");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("    uroce0          \t"), std::string::npos) << r.out;
}

TEST(Ibverbs, StockIbvDevinfoWithoutConfigurationDoesNotCrash) {
  if (!have("/usr/bin/ibv_devinfo")) FAIL() << "no /usr/bin/ibv_devinfo: tools/setup.sh installs it (apt-get install ibverbs-utils)";
  const Outcome r = run("", "/usr/bin/ibv_devinfo");
  EXPECT_NE(r.status, -1) << r.out;  // it exited; no signal
  EXPECT_NE(r.out.find("No IB devices found"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("set UROCE_EAL"), std::string::npos) << r.out;
}

// --- RC traffic: the C program over net_ring (one process, two QPs on one
// device) and over memif (two processes); stock ibv_rc_pingpong over memif.

// Two processes on a memif pair: the server (10.0.0.1, memif server) starts
// first; the client (10.0.0.2) `delay` later.
struct Pair {
  Outcome server, client;
};
class MemifPair {
 public:
  MemifPair() {
    char tmpl[] = "/tmp/uroce-ibverbs-XXXXXX";
    const char* d = mkdtemp(tmpl);
    dir_ = d != nullptr ? d : "/tmp";
  }
  ~MemifPair() { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  const std::string& dir() const { return dir_; }
  // UROCE_* for one side, on its own CPU.
  std::string env(bool server) const {
    return "UROCE_EAL='--no-huge --no-shconf --no-pci -m 256 --log-level=lib.eal:error -l " +
           std::string(server ? "0" : "1") + " --vdev=net_memif0,role=" + (server ? "server" : "client") +
           ",socket=" + dir_ + "/memif.sock' UROCE_IP=10.0.0." + (server ? "1" : "2") + "/24 ";
  }
  Pair run(const std::string& server_cmd, const std::string& client_cmd,
           std::chrono::milliseconds delay = std::chrono::milliseconds(1500)) const {
    auto server = std::async(std::launch::async, [&] { return ::run(env(true), server_cmd); });
    std::this_thread::sleep_for(delay);
    Pair p;
    p.client = ::run(env(false), client_cmd);
    p.server = server.get();
    return p;
  }

 private:
  std::string dir_;
};

TEST(Ibverbs, CRcLoopbackOverNetRingRunsEveryVerb) {
  const Outcome r = run(kConfigured, UROCE_IBVERBS_RC " loopback");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;
}

TEST(Ibverbs, CRcTwoProcessesOverMemifMoveVerifiedData) {
  MemifPair m;
  const Pair p = m.run(std::string(UROCE_IBVERBS_RC " memif server ") + m.dir(),
                       std::string(UROCE_IBVERBS_RC " memif client ") + m.dir(), std::chrono::milliseconds(200));
  EXPECT_EQ(p.server.status, 0) << p.server.out;
  EXPECT_EQ(p.client.status, 0) << p.client.out;
  EXPECT_NE(p.server.out.find("all checks passed"), std::string::npos) << p.server.out;
  EXPECT_NE(p.client.out.find("all checks passed"), std::string::npos) << p.client.out;
}

// Debian's ibv_rc_pingpong on both ends, unmodified: `args` on each, the
// client connecting to the server's TCP port on 127.0.0.1.
class StockRcPingpong : public ::testing::TestWithParam<const char*> {};

TEST_P(StockRcPingpong, CompletesOverMemif) {
  if (!have("/usr/bin/ibv_rc_pingpong")) FAIL() << "no /usr/bin/ibv_rc_pingpong: tools/setup.sh installs it (apt-get install ibverbs-utils)";
  static int port = 18700;
  const std::string cmd = "/usr/bin/ibv_rc_pingpong -d uroce0 -g 1 -p " + std::to_string(port++) + " " + GetParam();
  MemifPair m;
  const Pair p = m.run(cmd, cmd + " 127.0.0.1");
  EXPECT_EQ(p.server.status, 0) << p.server.out;
  EXPECT_EQ(p.client.status, 0) << p.client.out;
  // Its report: "N iters in S seconds = U usec/iter", on both ends.
  for (const Outcome* o : {&p.server, &p.client}) {
    EXPECT_NE(o->out.find("iters in"), std::string::npos) << o->out;
    EXPECT_EQ(o->out.find("Failed status"), std::string::npos) << o->out;
  }
  const std::size_t at = p.client.out.find("iters in");
  if (at != std::string::npos) {
    const std::size_t start = p.client.out.rfind('\n', at);
    std::printf("ibv_rc_pingpong %s:%s\n", GetParam(),
                p.client.out.substr(start == std::string::npos ? 0 : start + 1, p.client.out.find('\n', at) - start - 1).c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Ibverbs, StockRcPingpong,
                         ::testing::Values("-n 500", "-e -n 500", "-s 1 -n 500 -c", "-s 4096 -n 300 -c",
                                           "-s 65536 -n 100 -c", "-e -s 65536 -n 100 -c"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           std::string name;
                           for (const char* c = param.param; *c != '\0'; ++c) {
                             if ((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')) name += *c;
                             else if (*c == ' ') name += '_';
                           }
                           return name;
                         });

}  // namespace
