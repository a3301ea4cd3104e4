// uroce-pingpong as a user runs it, server and client in two processes with
// a core each: over net_memif, and over a veth pair joining two network
// namespaces this test creates (net_af_packet, Ethernet MTU 9000, RoCE MTU
// up to 4096). Buffers validated; both must print ibv_rc_pingpong's lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "support/free_port.h"

namespace uroce::test {
namespace {

struct Proc {
  FILE* pipe = nullptr;
  std::string out;
  int status = -1;
  void start(const std::string& cmd) { pipe = popen((cmd + " 2>&1").c_str(), "r"); }
  void finish() {
    char buf[4096];
    for (std::size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
    const int st = pclose(pipe);
    status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  }
};

int sh(const std::string& cmd) {
  const int st = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

const std::string kPingpong = UROCE_PINGPONG_BIN;
const std::string kEal = "--no-huge --no-shconf --no-pci -m 512 --log-level=lib.*:error";

// The pairs' local ACK timeout: 4.096 us * 2^18, about 1.07 s, so with the 7
// retries a QP gives up after a peer silent for 8.6 s. The tests check
// what arrives, not how long a peer may stall: ibv_rc_pingpong's 67 ms
// (0.54 s with the retries) failed a pair under ASan on a loaded machine,
// where the receiving process was off its CPU for up to 1.8 s while no
// frame was lost.
const std::string kPairTimeout = " -u 18";

// A side channel's TCP port for one pair, as "-p N", and the EAL file
// prefix of one process: both unique, so no two pairs (of this suite or of
// another copy of it) meet.
struct PairIds {
  int tcp = free_tcp_port();
  std::string opt() const { return " -p " + std::to_string(tcp); }
  static std::string prefix(const std::string& who) {
    used().insert(who);
    return who + std::to_string(getpid());
  }
  // EAL leaves a runtime folder per prefix (/var/run/dpdk/<prefix>) even
  // with --no-shconf; the suite removes the ones it made when it ends.
  static std::set<std::string>& used() {
    static std::set<std::string> names;
    return names;
  }
};

class RemoveRuntimeFolders : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;
    for (const std::string& who : PairIds::used()) {
      std::filesystem::remove_all("/var/run/dpdk/" + who + std::to_string(getpid()), ignored);
    }
  }
};
const auto* const kRemoveRuntimeFolders = ::testing::AddGlobalTestEnvironment(new RemoveRuntimeFolders);

// Runs a server and a client on side channel `ids`, the client once the
// server listens (in network namespace `server_ns`, "" for this one);
// returns "" or what went wrong.
std::string run_pair(const std::string& server_cmd, const std::string& client_cmd, const PairIds& ids,
                     const std::string& server_ns = "", std::string* outputs = nullptr) {
  Proc server;
  server.start(server_cmd + ids.opt());
  const bool listened = wait_tcp_listening(ids.tcp, server_ns.empty() ? "" : "ip netns exec " + server_ns + " ");
  Proc client;
  client.start(client_cmd + ids.opt());
  client.finish();
  server.finish();
  std::string why = listened ? "" : "the server never listened on its TCP port; ";
  for (const Proc* p : {&server, &client}) {
    const char* who = p == &server ? "server" : "client";
    if (p->status != 0) why += std::string(who) + " exited " + std::to_string(p->status) + "; ";
    if (p->out.find(" iters in ") == std::string::npos || p->out.find(" Mbit/sec") == std::string::npos) {
      why += std::string(who) + " printed no result lines; ";
    }
    if (p->out.find("invalid data") != std::string::npos) why += std::string(who) + " found invalid data; ";
    if (p->out.find("remote address: LID 0x0000, QPN 0x") == std::string::npos) why += std::string(who) + " no remote address; ";
  }
  if (!why.empty()) why += "\nserver:\n" + server.out + "\nclient:\n" + client.out;
  if (outputs != nullptr) *outputs = server.out + client.out;
  return why;
}

struct Case {
  int size;
  int mtu;
};

class PingpongMemif : public ::testing::TestWithParam<Case> {};

// memif's buffers hold a whole frame (bsize=8192): with the default 2048,
// DPDK 22.11's memif re-delivered and truncated frames that span several
// buffers (seen with a 4096 MTU: millions of stale frames, counted and
// dropped by our parser, and the transfer never finished).
TEST_P(PingpongMemif, TwoProcessesValidateEachOthersBuffers) {
  const Case c = GetParam();
  const std::string sock = "/tmp/uroce-pp-" + std::to_string(getpid()) + "-" + std::to_string(c.size) + "-" +
                           std::to_string(c.mtu) + ".sock";
  const std::string opts = " -s " + std::to_string(c.size) + " -m " + std::to_string(c.mtu) + " -n 500 -c" + kPairTimeout;
  const std::string why = run_pair(
      kPingpong + " " + kEal + " -l 0 --file-prefix=" + PairIds::prefix("pps") +
          " --vdev=net_memif0,role=server,bsize=8192,socket=" + sock + " -- --ip 10.96.0.1/24" + opts,
      kPingpong + " " + kEal + " -l 1 --file-prefix=" + PairIds::prefix("ppc") +
          " --vdev=net_memif0,role=client,bsize=8192,socket=" + sock + " -- --ip 10.96.0.2/24" + opts + " 127.0.0.1",
      PairIds{});
  std::remove(sock.c_str());
  EXPECT_EQ(why, "");
}

// RoCEv2 over IPv6: GID index 0 (link-local from each port's MAC), the
// peer's Ethernet address found by neighbour discovery.
TEST(PingpongIpv6, GidIndexZeroOverMemif) {
  const std::string sock = "/tmp/uroce-pp6-" + std::to_string(getpid()) + ".sock";
  const std::string opts = " -g 0 -s 4096 -m 1024 -n 300 -c --counters" + kPairTimeout;
  std::string out;
  const std::string why = run_pair(
      kPingpong + " " + kEal + " -l 0 --file-prefix=" + PairIds::prefix("p6s") +
          " --vdev=net_memif0,role=server,bsize=8192,socket=" + sock +
          " -- --ip 10.96.1.1/24" + opts,
      kPingpong + " " + kEal + " -l 1 --file-prefix=" + PairIds::prefix("p6c") +
          " --vdev=net_memif0,role=client,bsize=8192,socket=" + sock + " -- --ip 10.96.1.2/24" + opts + " 127.0.0.1",
      PairIds{}, "", &out);
  std::remove(sock.c_str());
  EXPECT_EQ(why, "");
  // The QPN is unpredictable (security review L6): any 24-bit number.
  EXPECT_TRUE(std::regex_search(out, std::regex("remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x"))) << out;
  EXPECT_NE(out.find(", GID fe80::"), std::string::npos) << out;
  EXPECT_NE(out.find("nd_advertisements_learned 1"), std::string::npos) << out;
  EXPECT_NE(out.find("nd_solicitations_answered 1"), std::string::npos) << out;
}

// --offset: the server's buffer 4095 bytes into a page, the client's 100, so
// each message crosses page boundaries; the client marks the first byte of
// every 4096 of its buffer (ibv_rc_pingpong's check) and the server finds
// them at the same offsets in its own. The client's buffer is on ordinary
// pages (--normal-pages), the server's on the device's. Zero-copy frames carry the pieces.
TEST(PingpongOffset, BuffersInsideAPageOverMemif) {
  // 20000 bytes from offset 4095: the first piece of a page is 1 byte long.
  const std::string size = "20000";
  const std::string sock = "/tmp/uroce-ppo-" + std::to_string(getpid()) + ".sock";
  const std::string opts = " -s " + size + " -m 1024 -n 300 -c --counters" + kPairTimeout;
  std::string out;
  const std::string why = run_pair(
      kPingpong + " " + kEal + " -l 0 --file-prefix=" + PairIds::prefix("pos") +
          " --vdev=net_memif0,role=server,bsize=8192,socket=" + sock + " -- --ip 10.96.2.1/24 --offset 4095" + opts,
      kPingpong + " " + kEal + " -l 1 --file-prefix=" + PairIds::prefix("poc") +
          " --vdev=net_memif0,role=client,bsize=8192,socket=" + sock + " -- --ip 10.96.2.2/24 --offset 100 --normal-pages" + opts +
          " 127.0.0.1",
      PairIds{}, "", &out);
  std::remove(sock.c_str());
  EXPECT_EQ(why, "");
  EXPECT_NE(out.find("buffer: " + size + " bytes at offset 4095 of a page"), std::string::npos) << out;
  EXPECT_NE(out.find("buffer: " + size + " bytes at offset 100 of a page"), std::string::npos) << out;
  // The client's buffer on the process's own pages (--normal-pages), as a
  // stock program's: registered and sent from all the same.
  EXPECT_NE(out.find("buffer: " + size + " bytes on normal pages"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("port.tx_zero_copy_frames [1-9]"))) << out;
}

// --bdp (issue 30), given to both ends: each QP runs with the cap, read
// back from it, and the exchange is verified. Go-back-N stays the mode.
TEST(PingpongTransport, BdpFlagReachesBothQpsOverMemif) {
  const std::string sock = "/tmp/uroce-ppb-" + std::to_string(getpid()) + ".sock";
  const std::string opts = " -s 65536 -m 1024 -n 200 -c --bdp 16" + kPairTimeout;
  std::string out;
  const std::string why = run_pair(
      kPingpong + " " + kEal + " -l 0 --file-prefix=" + PairIds::prefix("pbs") +
          " --vdev=net_memif0,role=server,bsize=8192,socket=" + sock + " -- --ip 10.96.3.1/24" + opts,
      kPingpong + " " + kEal + " -l 1 --file-prefix=" + PairIds::prefix("pbc") +
          " --vdev=net_memif0,role=client,bsize=8192,socket=" + sock + " -- --ip 10.96.3.2/24" + opts + " 127.0.0.1",
      PairIds{}, "", &out);
  std::remove(sock.c_str());
  EXPECT_EQ(why, "");
  const std::string line = "transport: go-back-N, BDP 16 packets";
  const auto first = out.find(line);
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_NE(out.find(line, first + 1), std::string::npos) << "both ends: " << out;
}

// --sr --spray 4 (selective repeat over four UDP source ports) given to
// both ends: each QP runs the mode, read back from it, and the exchange of
// 64 KiB messages at MTU 1024 is verified.
TEST(PingpongTransport, SelectiveRepeatAndSprayOverMemif) {
  const std::string sock = "/tmp/uroce-pps-" + std::to_string(getpid()) + ".sock";
  const std::string opts = " -s 65536 -m 1024 -n 200 -c --sr --spray 4" + kPairTimeout;
  std::string out;
  const std::string why = run_pair(
      kPingpong + " " + kEal + " -l 0 --file-prefix=" + PairIds::prefix("pss") +
          " --vdev=net_memif0,role=server,bsize=8192,socket=" + sock + " -- --ip 10.96.4.1/24" + opts,
      kPingpong + " " + kEal + " -l 1 --file-prefix=" + PairIds::prefix("psc") +
          " --vdev=net_memif0,role=client,bsize=8192,socket=" + sock + " -- --ip 10.96.4.2/24" + opts + " 127.0.0.1",
      PairIds{}, "", &out);
  std::remove(sock.c_str());
  EXPECT_EQ(why, "");
  const std::string line = "transport: selective repeat, 4 paths";
  const auto first = out.find(line);
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_NE(out.find(line, first + 1), std::string::npos) << "both ends: " << out;
}

// Spraying without selective repeat: one line and exit 2 before any port
// is touched (sprayed packets arrive out of order; go-back-N would resend
// most of them).
TEST(PingpongTransport, SprayWithoutSrIsRefusedWithOneLine) {
  Proc p;
  p.start(kPingpong + " " + kEal + " --file-prefix=" + PairIds::prefix("psr") + " -- --ip 10.96.4.1/24 --spray 4");
  p.finish();
  EXPECT_EQ(p.status, 2) << p.out;
  EXPECT_EQ(std::count(p.out.begin(), p.out.end(), '\n'), 1) << p.out;
  EXPECT_NE(p.out.find("--spray needs --sr"), std::string::npos) << p.out;
}

INSTANTIATE_TEST_SUITE_P(Sizes, PingpongMemif,
                         ::testing::Values(Case{1, 1024}, Case{4096, 1024}, Case{65536, 4096}, Case{5000, 2048}),
                         [](const auto& param_info) {
                           return "s" + std::to_string(param_info.param.size) + "_m" + std::to_string(param_info.param.mtu);
                         });

// Two namespaces joined by a veth pair; the kernels carry the TCP exchange on
// 10.95.0.1 and .2, and the DPDK ports own 10.95.0.11 and .12 on the same
// links (af_packet sees every frame; the kernel ignores other addresses).
class PingpongVeth : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string id = std::to_string(getpid() % 100000);
    ns_a_ = "uroce-ppa-" + id;
    ns_b_ = "uroce-ppb-" + id;
    TearDown();
    ASSERT_EQ(sh("ip netns add " + ns_a_), 0) << "needs root and iproute2 (tools/setup.sh installs it)";
    ASSERT_EQ(sh("ip netns add " + ns_b_), 0);
    ASSERT_EQ(sh("ip -n " + ns_a_ + " link add ppveth0 mtu 9000 type veth peer name ppveth1 mtu 9000 netns " + ns_b_), 0);
    ASSERT_EQ(sh("ip -n " + ns_a_ + " addr add 10.95.0.1/24 dev ppveth0"), 0);
    ASSERT_EQ(sh("ip -n " + ns_b_ + " addr add 10.95.0.2/24 dev ppveth1"), 0);
    ASSERT_EQ(sh("ip -n " + ns_a_ + " link set ppveth0 up && ip -n " + ns_a_ + " link set lo up"), 0);
    ASSERT_EQ(sh("ip -n " + ns_b_ + " link set ppveth1 up && ip -n " + ns_b_ + " link set lo up"), 0);
  }
  void TearDown() override {
    sh("ip netns del " + ns_a_);
    sh("ip netns del " + ns_b_);
  }
  std::string port(const std::string& ifname, int core, const std::string& prefix) const {
    return kEal + " -l " + std::to_string(core) + " --file-prefix=" + PairIds::prefix(prefix) +
           " --vdev=net_af_packet0,iface=" + ifname + ",blocksz=16384,framesz=8192,framecnt=512";
  }
  std::string ns_a_;
  std::string ns_b_;
};

TEST_F(PingpongVeth, ServerAndClientOverAfPacketWithMtu4096) {
  for (const Case c : {Case{4096, 4096}, Case{65536, 4096}, Case{1, 1024}}) {
    const std::string opts = " -s " + std::to_string(c.size) + " -m " + std::to_string(c.mtu) + " -n 300 -c" + kPairTimeout;
    const std::string why =
        run_pair("ip netns exec " + ns_a_ + " " + kPingpong + " " + port("ppveth0", 0, "vs") + " -- --ip 10.95.0.11/24" + opts,
                 "ip netns exec " + ns_b_ + " " + kPingpong + " " + port("ppveth1", 1, "vc") + " -- --ip 10.95.0.12/24" + opts +
                     " 10.95.0.1",
                 PairIds{}, ns_a_);
    EXPECT_EQ(why, "") << "size " << c.size << " mtu " << c.mtu;
  }
}

// uroce-perf in two processes: every operation with its data verified on
// both sides, over memif and over the namespaced veth pair.
const std::string kPerf = UROCE_PERF_BIN;

// server_opts and client_opts: more options for one side only; `outputs`,
// if given, receives the server's output then the client's.
std::string run_perf_pair(const std::string& server_prefix, const std::string& client_prefix,
                          const std::string& server_port, const std::string& client_port, const std::string& server_ip,
                          const std::string& client_ip, const std::string& connect_to, const std::string& op,
                          const std::string& server_ns = "", const std::string& server_opts = "",
                          const std::string& client_opts = "", std::string* outputs = nullptr) {
  const bool atomic = op.rfind("atomic", 0) == 0, read = op.rfind("read", 0) == 0;
  const std::string opts = " " + op + (atomic ? " -n 3000" : " -s 20000 -n 2000") + " -m 4096 --verify --counters";
  const PairIds ids;
  Proc server;
  server.start(server_prefix + kPerf + " " + server_port + " -- --ip " + server_ip + opts + server_opts + ids.opt());
  const bool listened = wait_tcp_listening(ids.tcp, server_ns.empty() ? "" : "ip netns exec " + server_ns + " ");
  Proc client;
  client.start(client_prefix + kPerf + " " + client_port + " -- --ip " + client_ip + opts + client_opts + ids.opt() + " " +
               connect_to);
  client.finish();
  server.finish();
  std::string why = listened ? "" : "the server never listened on its TCP port; ";
  if (server.status != 0) why += "server exited " + std::to_string(server.status) + "; ";
  if (client.status != 0) why += "client exited " + std::to_string(client.status) + "; ";
  if (client.out.find("verification: PASSED (both sides)") == std::string::npos) why += "client: no PASSED; ";
  if (server.out.find("verification: PASSED") == std::string::npos) why += "server: no PASSED; ";
  // memif and af_packet take multi-segment frames: the side that sends the
  // data (client for WRITE/SEND, server for READ) sends it zero-copy.
  if (!atomic) {
    const std::string& sender = read ? server.out : client.out;
    const auto at = sender.find("port.tx_zero_copy_frames ");
    if (at == std::string::npos || sender.compare(at + 25, 2, "0 ") == 0) why += "no zero-copy frames; ";
  }
  if (!why.empty()) why += "\nserver:\n" + server.out + "\nclient:\n" + client.out;
  if (outputs != nullptr) *outputs = server.out + client.out;
  return why;
}

class PerfMemif : public ::testing::TestWithParam<std::string> {};

TEST_P(PerfMemif, EveryOperationVerifiedOnBothSides) {
  // The socket named after the case, within sun_path's 108 bytes.
  const std::string sock = "/tmp/uroce-perf-" + std::to_string(getpid()) + "-" +
                           std::to_string(std::hash<std::string>{}(GetParam()) % 1'000'000) + ".sock";
  const std::string vdev = ",bsize=8192,socket=" + sock;
  std::string out;
  const std::string why = run_perf_pair(
      "", "", kEal + " -l 0 --file-prefix=" + PairIds::prefix("pfs") + " --vdev=net_memif0,role=server" + vdev,
      kEal + " -l 1 --file-prefix=" + PairIds::prefix("pfc") + " --vdev=net_memif0,role=client" + vdev, "10.93.0.1/24", "10.93.0.2/24",
      "127.0.0.1", GetParam(), "", "", "", &out);
  std::remove(sock.c_str());
  EXPECT_EQ(why, "");
  // Under delay-based control the QPs measured round trips (the smoothed
  // RTT gauge is set from the first).
  if (GetParam().find("--cc delay") != std::string::npos) {
    EXPECT_TRUE(std::regex_search(out, std::regex("qp.cc_rtt_us [1-9]"))) << out;
  }
}

// And spread over 8 QP pairs (message slot s on QP s mod 8; the receives
// of each QP meet its SENDs in order), the SENDs paced by DCQCN; WRITEs
// over 4 under delay-based control (the floor for busy shared cores: the
// suite runs two tests at once on two cores).
INSTANTIATE_TEST_SUITE_P(Ops, PerfMemif,
                         ::testing::Values("write", "read", "send", "atomic", "write -q 8 -t 64",
                                           "send -q 8 -t 64 --dcqcn on",
                                           "write -q 4 -t 32 --cc delay --delay " UROCE_SOURCE_ROOT
                                           "/conf/delay-shared-cores.conf"));

// --cc delay: delay-based congestion control on both devices, every byte
// verified in process; --cc takes three names, and DCQCN only as dcqcn.
TEST(PerfCc, DelayBasedControlVerifiesAndTheFlagIsChecked) {
  for (const std::string op : {"write", "read", "send"}) {
    Proc p;
    p.start(kPerf + " --sim " + op + " --cc delay -q 4 -t 32 -s 65536 -n 200 --verify");
    p.finish();
    EXPECT_EQ(p.status, 0) << op << ": " << p.out;
    EXPECT_NE(p.out.find("verification: PASSED"), std::string::npos) << op << ": " << p.out;
  }
  Proc bad;
  bad.start(kPerf + " --sim write --cc vegas");
  bad.finish();
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.out.find("--cc takes dcqcn, delay or off, not 'vegas'"), std::string::npos) << bad.out;
  Proc both;
  both.start(kPerf + " --sim write --cc delay --dcqcn on");
  both.finish();
  EXPECT_EQ(both.status, 2);
  EXPECT_NE(both.out.find("DCQCN runs only with --cc dcqcn"), std::string::npos) << both.out;
}

// --offset: buffers that start inside a page on both sides, at different
// offsets, so every message's payload crosses page boundaries at places a
// page-aligned buffer would not (and the fetch-and-add counter must still
// be 8-byte aligned). Every byte verified; the sender's frames zero-copy.
TEST(PerfOffset, EveryOperationVerifiedWithBuffersInsideAPage) {
  for (const std::string op : {"write", "read", "send", "atomic"}) {
    const std::string sock = "/tmp/uroce-perfo-" + std::to_string(getpid()) + "-" + op + ".sock";
    const std::string vdev = ",bsize=8192,socket=" + sock;
    std::string out;
    const std::string why = run_perf_pair(
        "", "", kEal + " -l 0 --file-prefix=" + PairIds::prefix("pfos") + " --vdev=net_memif0,role=server" + vdev,
        kEal + " -l 1 --file-prefix=" + PairIds::prefix("pfoc") + " --vdev=net_memif0,role=client" + vdev, "10.93.1.1/24",
        "10.93.1.2/24", "127.0.0.1", op, "", " --offset 4095", " --offset 100", &out);
    std::remove(sock.c_str());
    EXPECT_EQ(why, "") << op;
    EXPECT_TRUE(std::regex_search(out, std::regex("buffer: [0-9]+ bytes at offset 4095 of a page"))) << out;
    EXPECT_TRUE(std::regex_search(out, std::regex("buffer: [0-9]+ bytes at offset 100 of a page"))) << out;
  }
}

// The in-process modes take --offset too: both devices' buffers start 4095
// bytes into a page (the atomic's target still 8-byte aligned), on the
// simulated link and on net_ring.
TEST(PerfOffset, InProcessModesVerifyEveryByte) {
  for (const std::string mode : {"--sim", "-- --ring"}) {
    for (const std::string op : {"write", "read", "send", "atomic"}) {
      Proc p;
      p.start(kPerf + " " + mode + " " + op + " --offset 4095 -s 5000 -n 300 --verify");
      p.finish();
      EXPECT_EQ(p.status, 0) << mode << " " << op << ": " << p.out;
      EXPECT_NE(p.out.find("verification: PASSED"), std::string::npos) << mode << " " << op << ": " << p.out;
    }
  }
}

// Over 1,000 QP pairs (an engine with more QPs than
// Engine::kPrefetchFromQps, so each burst's QPs are prefetched), each QP
// with one message in flight at a time (its ACKs never coalesce with
// another message's): every byte verified, READs and SENDs as well.
TEST(PerfManyQps, EveryOperationVerifiedOverAThousandQps) {
  for (const std::string mode : {"--sim", "-- --ring"}) {
    for (const std::string op : {"write", "read", "send"}) {
      Proc p;
      p.start(kPerf + " " + mode + " " + op + " -q 1000 -t 64 -s 5000 -n 20000 --verify");
      p.finish();
      EXPECT_EQ(p.status, 0) << mode << " " << op << ": " << p.out;
      EXPECT_NE(p.out.find("verification: PASSED"), std::string::npos) << mode << " " << op << ": " << p.out;
    }
  }
}

// uroce-perf --bdp and --sr: both devices' QPs run with them, read back
// from them, and every byte is verified; selective repeat also under 3%
// loss each way on the simulated link, where it resends far fewer packets
// than the go-back-N run beside it.
TEST(PerfTransport, BdpAndSelectiveRepeatReachTheQps) {
  for (const std::string mode : {"--sim", "-- --ring"}) {
    Proc p;
    p.start(kPerf + " " + mode + " write --bdp 8 -s 65536 -n 300 --verify");
    p.finish();
    EXPECT_EQ(p.status, 0) << mode << ": " << p.out;
    EXPECT_NE(p.out.find("transport: go-back-N, BDP 8 packets"), std::string::npos) << mode << ": " << p.out;
    EXPECT_NE(p.out.find("verification: PASSED"), std::string::npos) << mode << ": " << p.out;
  }
  std::uint64_t resent[2] = {0, 0};
  for (const std::string t : {"", " --sr --spray 4"}) {
    for (const std::string op : {"write", "read", "send", "atomic"}) {
      Proc p;
      p.start(kPerf + " --sim " + op + t + " --loss 0.03 --seed 7 -n 400 -m 1024 --verify");
      p.finish();
      EXPECT_EQ(p.status, 0) << op << t << ": " << p.out;
      EXPECT_NE(p.out.find("verification: PASSED"), std::string::npos) << op << t << ": " << p.out;
      if (!t.empty()) {
        EXPECT_NE(p.out.find("transport: selective repeat, 4 paths"), std::string::npos) << op << ": " << p.out;
      }
      // The row's last column: packets sent again.
      std::smatch m;
      if (op == "write" && std::regex_search(p.out, m, std::regex(R"(\n +65536 +400 +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9]+))"))) {
        resent[t.empty() ? 0 : 1] = std::stoull(m[1]);
      }
    }
  }
  EXPECT_GT(resent[1], 0u);
  EXPECT_LT(resent[1] * 10, resent[0]) << "selective repeat resends " << resent[1] << ", go-back-N " << resent[0];
}

TEST_F(PingpongVeth, PerfEveryOperationVerifiedOverAfPacket) {
  for (const std::string op : {"write", "read", "send", "atomic"}) {
    const std::string why = run_perf_pair("ip netns exec " + ns_a_ + " ", "ip netns exec " + ns_b_ + " ",
                                          port("ppveth0", 0, "pvs"), port("ppveth1", 1, "pvc"), "10.95.0.11/24",
                                          "10.95.0.12/24", "10.95.0.1", op, ns_a_);
    EXPECT_EQ(why, "") << op;
  }
}

TEST(PingpongUsage, BadArgumentsGiveAOneLineHint) {
  Proc p;
  p.start(kPingpong + " " + kEal + " -- -s 64");
  p.finish();
  EXPECT_EQ(p.status, 2);
  EXPECT_NE(p.out.find("--ip ADDR/PREFIX is required"), std::string::npos) << p.out;
  Proc q;
  q.start(kPingpong + " --ip 10.0.0.1/24");
  q.finish();
  EXPECT_EQ(q.status, 2);
  EXPECT_NE(q.out.find("no EAL arguments"), std::string::npos) << q.out;
  Proc r;
  r.start(kPingpong + " " + kEal + " -l 0 --file-prefix=" + PairIds::prefix("ppu") + " -- --ip 10.0.0.1/24 -m 1500");
  r.finish();
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("-m must be"), std::string::npos) << r.out;
  for (const std::string bad : {"0", "32"}) {
    Proc t;
    t.start(kPingpong + " " + kEal + " -l 0 --file-prefix=" + PairIds::prefix("ppu") + " -- --ip 10.0.0.1/24 -u " + bad);
    t.finish();
    EXPECT_EQ(t.status, 2) << "-u " << bad;
    EXPECT_NE(t.out.find("-u must be 1..31"), std::string::npos) << t.out;
  }
}

// --offset must name a byte of a page: one line giving the range, exit 2.
TEST(PingpongUsage, OffsetOutsideAPageIsRefused) {
  const std::string page = std::to_string(sysconf(_SC_PAGESIZE));
  const std::string range = "--offset: 0 to " + std::to_string(sysconf(_SC_PAGESIZE) - 1) + " (bytes into a " + page + "-byte page)";
  for (const std::string& bin : {kPingpong, kPerf}) {
    const std::string op = bin == kPerf ? " write" : "";
    for (const std::string& bad : std::initializer_list<std::string>{page, "-1", "12x", "99999999999"}) {
      Proc p;
      p.start(bin + " " + kEal + " -- --ip 10.0.0.1/24" + op + " --offset " + bad);
      p.finish();
      EXPECT_EQ(p.status, 2) << bin << " --offset " << bad << ": " << p.out;
      EXPECT_NE(p.out.find(range + ", not '" + bad + "'"), std::string::npos) << p.out;
      EXPECT_EQ(std::count(p.out.begin(), p.out.end(), '\n'), 1) << p.out;
    }
    Proc help;
    help.start(bin + " -- --help");
    help.finish();
    EXPECT_EQ(help.status, 0) << help.out;
    EXPECT_NE(help.out.find("--offset BYTES"), std::string::npos) << help.out;
  }
}

}  // namespace
}  // namespace uroce::test
