// uroce-run --netdev: the program (and its children) find uroce0's Linux
// interface where a kernel RDMA device shows its own, in sysfs, and nothing
// changes outside the program's process tree.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

// uroce-run ARGS, its stdout and stderr apart.
RunResult uroce_run(const std::string& args) {
  const std::string err_file = "/tmp/uroce-run-netdev-test-" + std::to_string(getpid());
  const std::string cmd = std::string(UROCE_RUN) + " " + args + " 2>" + err_file;
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_file);
  std::stringstream s;
  s << e.rdbuf();
  r.err = s.str();
  std::remove(err_file.c_str());
  return r;
}

bool exists(const char* path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

// What the child prints: the name rdma-core's tests take (the first entry of
// device/net/), the GID table's interface and type, and the interface's own
// sysfs read through the link.
constexpr const char* kProbe =
    "sh -c 'ls /sys/class/infiniband/uroce0/device/net/; "
    "cat /sys/class/infiniband/uroce0/ports/1/gid_attrs/ndevs/1 /sys/class/infiniband/uroce0/ports/1/gid_attrs/types/1; "
    "cat /sys/class/infiniband/uroce0/device/net/lo/ifindex; "
    "ls /sys/class/net/lo >/dev/null && echo net-class-kept; "
    "touch /sys/class/infiniband/x 2>/dev/null || echo read-only'";

class RunNetdev : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "a private mount namespace needs root";
  }
};

TEST_F(RunNetdev, ServiceModeShowsTheNamedInterfaceToTheProgramAndItsChildren) {
  const bool host_had = exists("/sys/class/infiniband/uroce0");
  // The socket is not touched: sh loads no libibverbs.
  const RunResult r = uroce_run("--service --socket /nonexistent --netdev lo " + std::string(kProbe));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "lo\nlo\nRoCE v2\n1\nnet-class-kept\nread-only\n");
  EXPECT_EQ(r.err, "");
  // The host's sysfs is as it was.
  EXPECT_EQ(exists("/sys/class/infiniband/uroce0"), host_had);
}

TEST_F(RunNetdev, InProcessShowsTheNamedInterfaceOnly) {
  const std::string port = "--no-pci --vdev=net_af_packet0,iface=lo,framesz=8192 -- --ip 10.0.0.1/24 ";
  const RunResult r = uroce_run(port + "--netdev lo " + kProbe);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "lo\nlo\nRoCE v2\n1\nnet-class-kept\nread-only\n");
  // Opt-in: without --netdev the program sees the host's /sys/class as it is.
  const RunResult off = uroce_run(port + "sh -c 'test -e /sys/class/infiniband/uroce0 && echo shown || echo absent'");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.out, "absent\n");
}

TEST_F(RunNetdev, AMemifPortTakesAnInterfaceHoldingItsAddress) {
  const RunResult named = uroce_run("--no-pci --vdev=net_memif0,role=server -- --ip 10.0.0.1/24 --netdev lo "
                                    "ls /sys/class/infiniband/uroce0/device/net");
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(named.out, "lo\n");
}

TEST_F(RunNetdev, AnUnknownInterfaceIsRefusedWithOneLine) {
  const RunResult r = uroce_run("--service --netdev uroce-no-such-if true");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "uroce-run: --netdev uroce-no-such-if: no such interface in this network namespace "
            "(/sys/class/net/uroce-no-such-if)\n");
  const RunResult bad = uroce_run("--service --netdev ../net true");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("no interface name"), std::string::npos) << bad.err;
}

TEST_F(RunNetdev, WithoutRootItSaysSoAndRunsNothing) {
  // setpriv (util-linux) drops to nobody before uroce-run starts.
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  if (std::system((as_nobody + "test -x " + UROCE_RUN + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "nobody cannot run " << UROCE_RUN << " here (or no setpriv)";
  const std::string cmd = as_nobody + UROCE_RUN +
                          " --service --netdev lo echo ran 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_EQ(out,
            "uroce-run: cannot show uroce0's interface in sysfs (a private mount namespace needs root): "
            "unshare: Operation not permitted\n");
}

}  // namespace
