// Stock ucx_perftest (Debian's ucx-utils) through uroced (docs/service.md,
// issue 27): both ends under uroce-run --service, the server on daemon a
// and the client on a (its loopback) or on b, the two daemons joined by a
// memif pair. UCT over rc_verbs (which takes an SRQ) and ud_verbs (address
// handles made from GRH attributes), and UCP's tag and put tests over
// rc_verbs with ud_verbs for wire-up, and over ud_verbs alone; one case
// waits on completion channels (-E sleep). Each must exit 0 with a "Final:"
// line of every iteration asked for and non-zero figures, on the
// transport named.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>

#include "support/free_port.h"
#include "support/uroced.h"

namespace {

using namespace std::chrono_literals;
using uroce::test::Uroced;
using uroce::test::Process;
using uroce::test::spawn;

// UCX uses a verbs device only if /dev/infiniband/<dev_name> is a character
// device (it stats it); uroce opens nothing there, so a null device serves.
const std::string kNode = "/dev/infiniband/uuroce0";


class Ucx : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    struct stat st{};
    if (stat(kNode.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) {
      made_node_ = std::system(("mkdir -p /dev/infiniband && mknod " + kNode + " c 1 3").c_str()) == 0;
    }
    pair_ = new uroce::test::MemifUrocedPair("svcucx");
    dir_ = pair_->dir.dir;
    a_ = &pair_->a;
    b_ = &pair_->b;
  }
  static void TearDownTestSuite() {
    delete pair_;
    if (made_node_) std::system(("rm -f " + kNode + "; rmdir /dev/infiniband 2>/dev/null").c_str());
  }
  void SetUp() override {
    ASSERT_EQ(pair_->error, "");
    struct stat st{};
    ASSERT_TRUE(stat(kNode.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) << kNode << " (root needed to make it)";
  }
  static Uroced& other() { return GetParam() ? *b_ : *a_; }
  static std::string dir_;
  static uroce::test::MemifUrocedPair* pair_;
  static Uroced* a_;
  static Uroced* b_;
  static bool made_node_;
};
std::string Ucx::dir_;
uroce::test::MemifUrocedPair* Ucx::pair_ = nullptr;
Uroced* Ucx::a_ = nullptr;
Uroced* Ucx::b_ = nullptr;
bool Ucx::made_node_ = false;

struct Case {
  std::string env;         // UCX_TLS for UCP tests ("" for UCT: -x names the transport)
  std::string server;      // the server's arguments beside -p
  std::string client;      // the client's, beside the server's
  int iters;
  std::string transport;   // what carries the test, as UCX names it
};

TEST_P(Ucx, StockPerftestCompletesWithItsFigures) {
  if (access("/usr/bin/ucx_perftest", X_OK) != 0) {
    FAIL() << "no /usr/bin/ucx_perftest: tools/setup.sh installs it (apt-get install ucx-utils)";
  }
  const Case cases[] = {
      {"", "-d uroce0:1 -x rc_verbs", "-t am_lat -s 8", 1000, "rc_verbs"},
      {"", "-d uroce0:1 -x rc_verbs", "-t put_bw -D zcopy -s 65536", 500, "rc_verbs"},
      {"", "-d uroce0:1 -x ud_verbs", "-t am_lat -s 8", 1000, "ud_verbs"},
      {"", "-d uroce0:1 -x ud_verbs", "-t am_bw -D bcopy -s 1024", 1000, "ud_verbs"},
      {"rc_verbs,ud_verbs", "", "-t tag_lat -s 8", 1000, "tag(rc_verbs/uroce0:1)"},
      {"rc_verbs,ud_verbs", "", "-t tag_lat -s 8 -E sleep", 500, "tag(rc_verbs/uroce0:1)"},
      {"rc_verbs,ud_verbs", "", "-t tag_bw -s 1048576", 50, "tag(rc_verbs/uroce0:1)"},
      {"rc_verbs,ud_verbs", "", "-t ucp_put_bw -s 65536", 500, "rc_verbs/uroce0:1"},
      {"ud_verbs", "", "-t tag_lat -s 8", 1000, "tag(ud_verbs/uroce0:1)"},
      {"ud_verbs", "", "-t tag_bw -s 65536", 200, "tag(ud_verbs/uroce0:1)"},
  };
  for (const Case& k : cases) {
    const int port = uroce::test::free_tcp_port();
    // UCX_LOG_LEVEL=info makes UCP name the transport of each lane.
    const std::string env = "env UCX_NET_DEVICES=uroce0:1 UCX_LOG_LEVEL=info" +
                            (k.env.empty() ? "" : " UCX_TLS=" + k.env) + " ";
    const std::string run = env + UROCE_RUN + " --service --socket ";
    const std::string what = (k.env.empty() ? k.server : "UCX_TLS=" + k.env) + " " + k.client;
    Process s = spawn(run + a_->socket + " timeout 60 ucx_perftest -p " + std::to_string(port) + " " + k.server,
                      dir_ + "/ucx-s.log");
    ASSERT_TRUE(uroce::test::wait_tcp_listening(port)) << what << "\n" << s.out();
    Process c = spawn(run + other().socket + " timeout 60 ucx_perftest 127.0.0.1 -p " + std::to_string(port) + " " +
                          k.server + " " + k.client + " -n " + std::to_string(k.iters),
                      dir_ + "/ucx-c.log");
    const int rc = c.wait(), rs = s.wait();
    const std::string out = c.out();
    EXPECT_EQ(rc, 0) << what << "\n" << out;
    EXPECT_EQ(rs, 0) << what << "\n" << s.out();
    // Final: iterations, latency (50th percentile, average, overall),
    // bandwidth (average, overall), message rate (average, overall).
    std::smatch m;
    const std::string num = "\\s+([0-9.]+)";
    ASSERT_TRUE(std::regex_search(out, m, std::regex("Final:\\s+(\\d+)" + num + num + num + num + num + num + num)))
        << what << "\n" << out;
    EXPECT_EQ(std::stoi(m[1]), k.iters) << what;
    EXPECT_GT(std::stod(m[3]), 0.0) << what << ": average latency";
    // A latency run's bandwidth is its 8-byte messages per second, printed
    // in MB/s with two decimals: 0.00 once a loaded host slows it to
    // about a millisecond a message. Its message rate says it moved; bandwidth runs
    // must show bandwidth.
    if (what.find("_lat") == std::string::npos) {
      EXPECT_GT(std::stod(m[5]), 0.0) << what << ": average bandwidth";
    }
    EXPECT_GT(std::stod(m[7]), 0.0) << what << ": average message rate";
    if (!k.env.empty()) {
      EXPECT_NE(out.find(k.transport), std::string::npos) << what << ": not on " << k.transport;
    }
    std::printf("    %s %s: %s\n", GetParam() ? "two daemons" : "one daemon", what.c_str(), m[0].str().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Service, Ucx, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "TwoDaemons" : "OneDaemon"; });

}  // namespace
