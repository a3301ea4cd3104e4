// uroce inside an application that runs DPDK itself (issue 27, item 13;
// docs/embedding.md): two own_eal_app processes, each calling rte_eal_init
// itself, run RC traffic over a memif pair through uroce's libibverbs.
// uroce joins their EAL, adds its port to it (a hot-plugged vdev, or a
// port the application probed), stops its threads and removes what it
// added at the last ibv_close_device, and leaves rte_eal_cleanup to the
// application.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>

#include "support/command.h"

namespace {

using uroce::test::Outcome;

// `env` (VAR=value ...) then own_eal_app `args`, with no uroce variable
// inherited; a minute at most.
Outcome run(const std::string& env, const std::string& args) {
  const std::string line = uroce::test::kNoUroceEnv + env + " timeout 60 " OWN_EAL_APP " " + args + " 2>&1";
  return uroce::test::run_command(line);
}

class Dir {
 public:
  Dir() {
    char tmpl[] = "/tmp/uroce-own-eal-XXXXXX";
    const char* d = mkdtemp(tmpl);
    path_ = d != nullptr ? d : "/tmp";
  }
  ~Dir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One memif end: 8 KiB buffers carry a 4096-byte path MTU frame whole.
std::string memif(const Dir& d, bool server) {
  return std::string("net_memif0,role=") + (server ? "server" : "client") + ",socket=" + d.path() +
         "/memif.sock,bsize=8192";
}
std::string ip(bool server) { return std::string(" UROCE_IP=10.0.0.") + (server ? "1" : "2") + "/24 "; }

struct Pair {
  Outcome server, client;
};

// The server first; the client once the server opened uroce0 (`ready`,
// the file it writes then: its memif port listens; a memif client with no
// server to connect to cannot start its port), or the server ended.
Pair run_pair(const std::string& ready, const std::string& server_env, const std::string& server_args,
              const std::string& client_env, const std::string& client_args) {
  auto server = std::async(std::launch::async, [&] { return run(server_env, server_args); });
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (access(ready.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < until &&
         server.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
  }
  Pair p;
  p.client = run(client_env, client_args);
  p.server = server.get();
  return p;
}

void expect_clean(const Outcome& o, const char* verified, const char* ports) {
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find(std::string("verified ") + verified + " bytes"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("uroce threads after close: 0"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(ports), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("reopened and closed"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("EAL cleaned up by the application"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("EAL was already started"), std::string::npos) << o.out;
}

// 512 KiB written and 64 KiB sent to the server; 128 KiB read and 64 KiB
// sent back to the client.
constexpr const char* kServerBytes = "589824";
constexpr const char* kClientBytes = "196608";

TEST(OwnEal, UroceEalNamingOnlyAVdevHotPlugsItAndRemovesItAtTheLastClose) {
  Dir d;
  const std::string dir = d.path();
  const Pair p = run_pair(dir + "/server-open", "UROCE_EAL='--vdev=" + memif(d, true) + "'" + ip(true), "server " + dir,
                          "UROCE_EAL='--vdev=" + memif(d, false) + "'" + ip(false), "client " + dir);
  // No port of the application's own. The memif client uroce hot-plugged
  // is gone after the close; the memif server stays (dpdk::vdev_removable:
  // DPDK 22.11's memif cannot remove a listening server cleanly).
  expect_clean(p.server, kServerBytes, "ports before uroce 0, after its close 1");
  expect_clean(p.client, kClientBytes, "ports before uroce 0, after its close 0");
}

TEST(OwnEal, UroceEalWithTheProcessWideOptionsOfUroceRunKeepsTheApplicationsAndSaysSo) {
  Dir d;
  const std::string dir = d.path();
  const std::string common = "--no-huge --no-shconf --no-pci -l 1 -m 64 --file-prefix=ignored --log-level=lib.eal:error";
  const Pair p = run_pair(dir + "/server-open", "UROCE_EAL='" + common + " --vdev=" + memif(d, true) + "'" + ip(true), "server " + dir,
                          "UROCE_EAL='" + common + " --vdev " + memif(d, false) + "'" + ip(false), "client " + dir);
  expect_clean(p.server, kServerBytes, "ports before uroce 0, after its close 1");
  expect_clean(p.client, kClientBytes, "ports before uroce 0, after its close 0");
  for (const Outcome* o : {&p.server, &p.client}) {
    EXPECT_NE(o->out.find("the application runs EAL: its own settings hold, not UROCE_EAL's '--no-huge --no-shconf "
                          "--no-pci -l 1 -m 64 --file-prefix=ignored --log-level=lib.eal:error'"),
              std::string::npos)
        << o->out;
  }
}

TEST(OwnEal, UrocePortIdTakesAPortTheApplicationProbed) {
  Dir d;
  const std::string dir = d.path();
  const Pair p = run_pair(dir + "/server-open", "UROCE_EAL='' UROCE_PORT_ID=0" + ip(true), "server " + dir + " " + memif(d, true),
                          "UROCE_EAL='' UROCE_PORT_ID=0" + ip(false), "client " + dir + " " + memif(d, false));
  // The port stays the application's: uroce leaves it in its EAL.
  expect_clean(p.server, kServerBytes, "ports before uroce 1, after its close 1");
  expect_clean(p.client, kClientBytes, "ports before uroce 1, after its close 1");
}

TEST(OwnEal, UroceEalThatCannotApplyToARunningEalIsOneLineAndNoDevice) {
  Dir d;
  const Outcome r = run("UROCE_EAL='-a 0000:3b:00.0 --vdev=" + memif(d, true) + "'" + ip(true), "server " + d.path());
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("uroce libibverbs: UROCE_EAL: '-a' cannot apply to the application's running EAL: give only "
                       "--vdev=DEVICE,ARGS"),
            std::string::npos)
      << r.out;
}

TEST(OwnEal, NoPortNamedIsOneLineAndNoDevice) {
  Dir d;
  const Outcome r = run("UROCE_EAL='--no-huge'" + ip(true), "server " + d.path());
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("uroce libibverbs: the application runs EAL: name uroce's port"), std::string::npos) << r.out;
}

TEST(OwnEal, AVdevAndAPortIdTogetherAreOneLineAndNoDevice) {
  Dir d;
  const Outcome r = run("UROCE_EAL='--vdev=" + memif(d, true) + "' UROCE_PORT_ID=0" + ip(true), "server " + d.path());
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("give its port either as UROCE_EAL='--vdev=...' (hot-plugged) or as UROCE_PORT_ID"),
            std::string::npos)
      << r.out;
}

}  // namespace
