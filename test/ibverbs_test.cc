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
#include <cstdio>
#include <string>

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
  const std::string line = "env -u UROCE_EAL -u UROCE_IP -u UROCE_PORT_ID LD_LIBRARY_PATH=" UROCE_IBVERBS_DIR " " +
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

}  // namespace
