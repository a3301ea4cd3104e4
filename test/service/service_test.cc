// uroced and its clients (README "Running as a service"): two daemons joined
// by a memif pair (no hugepages), each serving clients in processes of their
// own; the C verbs program of ibverbs_test (every verb, data verified) and
// stock rdma-core and perftest binaries through the daemons; a client killed
// mid-transfer; a client that sends garbage, names another's handles or
// passes its limits; registered memory moved onto shared files; SIGTERM.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "service/client.h"
#include "service/protocol.h"
#include "uroce/stats.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"
#include "verbs/internal.h"
#include "support/command.h"
#include "support/free_port.h"
#include "support/telemetry_client.h"
#include "support/service_clients.h"
#include "support/uroced.h"
#include "support/work_requests.h"

namespace {

using namespace std::chrono_literals;
using uroce::test::Uroced;

using uroce::test::Process;
using uroce::test::read_text_file;
using uroce::test::spawn;

std::string env_lib() { return "env -u UROCE_EAL -u UROCE_IP LD_LIBRARY_PATH=" UROCE_IBVERBS_DIR " "; }

// What daemon `d` says of itself (one client more: the asking one).
uroce::service::StatsReply stats(const Uroced& d) {
  std::string e;
  auto c = uroce::service::Client::connect(d.socket, e);
  uroce::service::StatsReply s{};
  if (!c) return s;
  uroce::service::Request req;
  req.op = uroce::service::Op::kStats;
  uroce::service::Reply reply;
  if (c->call(req, reply, nullptr, 0, nullptr, e) == 0) s = reply.stats;
  return s;
}

// Two daemons joined by memif, for the whole suite (a memif peer that goes
// away and comes back is a DPDK corner of its own; see README).
class Service : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pair_ = new uroce::test::MemifUrocedPair("svc");
    dir_ = pair_->dir.dir;
    a_ = &pair_->a;
    b_ = &pair_->b;
  }
  static void TearDownTestSuite() {
    delete pair_;
  }
  void SetUp() override {
    ASSERT_EQ(pair_->error, "");
  }
  // ibverbs_rc's two sides, one on each daemon, exchanging through `tag`'s folder.
  static std::pair<Process, Process> verbs_pair(const std::string& tag) {
    const std::string d = dir_ + "/" + tag;
    std::system(("mkdir -p '" + d + "'").c_str());
    Process s = spawn(env_lib() + "UROCE_SERVICE=" + a_->socket + " timeout 90 " UROCE_IBVERBS_RC " memif server " + d,
                      d + "/server.log");
    std::this_thread::sleep_for(200ms);
    Process c = spawn(env_lib() + "UROCE_SERVICE=" + b_->socket + " timeout 90 " UROCE_IBVERBS_RC " memif client " + d,
                      d + "/client.log");
    return {s, c};
  }
  static std::string dir_;
  static uroce::test::MemifUrocedPair* pair_;
  static Uroced* a_;
  static Uroced* b_;
};
std::string Service::dir_;
uroce::test::MemifUrocedPair* Service::pair_ = nullptr;
Uroced* Service::a_ = nullptr;
Uroced* Service::b_ = nullptr;

// A free TCP port for a stock pair's side channel, as text.
std::string port() { return std::to_string(uroce::test::free_tcp_port()); }

void expect_passed(Process& p) {
  const int rc = p.wait();
  const std::string out = p.out();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
}

TEST_F(Service, TwoClientsEachWithAPeerRunEveryVerbWithDataVerified) {
  auto [s1, c1] = verbs_pair("one");
  auto [s2, c2] = verbs_pair("two");
  expect_passed(s1);
  expect_passed(c1);
  expect_passed(s2);
  expect_passed(c2);
}

// The daemon's loopback_frames (DPDK telemetry /uroce/port,0).
std::uint64_t looped(const Uroced& d) {
  const std::string port = uroce::test::telemetry_query(d.telemetry, "/uroce/port,0");
  const std::size_t at = port.find("\"loopback_frames\":");
  return at == std::string::npos ? 0 : std::stoull(port.substr(at + 18));
}

// The single-host service case (conf/uroced.conf): two programs on one
// daemon, each QP's peer on the same device. Their frames loop inside the
// daemon (engine/loopback.h); none needs the memif link.
TEST_F(Service, TwoProgramsOnOneDaemonTalkThroughItsLoopback) {
  const std::string d = dir_ + "/one-daemon";
  std::system(("mkdir -p '" + d + "'").c_str());
  const std::uint64_t looped_before = looped(*a_);
  Process s = spawn(env_lib() + "UROCE_SERVICE=" + a_->socket + " timeout 90 " UROCE_IBVERBS_RC " memif server " + d,
                    d + "/server.log");
  Process c = spawn(env_lib() + "UROCE_SERVICE=" + a_->socket + " timeout 90 " UROCE_IBVERBS_RC " memif client " + d,
                    d + "/client.log");
  expect_passed(s);
  expect_passed(c);
  EXPECT_GT(looped(*a_), looped_before + 100);
}

// Stock ibv_rc_pingpong with both ends on one daemon, over GID 1 and GID 0:
// the device reaches itself through its loopback, as an RNIC would.
TEST_F(Service, StockPingpongWithBothEndsOnOneDaemon) {
  for (const char* gid : {"1", "0"}) {
    const std::string tcp = port();
    const std::string args = "ibv_rc_pingpong -d uroce0 -g " + std::string(gid) + " -p " + tcp + " -n 300";
    Process s = spawn(std::string(UROCE_RUN) + " --service --socket " + a_->socket + " timeout 60 " + args,
                      dir_ + "/self-s.log");
    uroce::test::wait_tcp_listening(std::stoi(tcp));
    Process c = spawn(std::string(UROCE_RUN) + " --service --socket " + a_->socket + " timeout 60 " + args +
                          " 127.0.0.1",
                      dir_ + "/self-c.log");
    const int rc = c.wait(), rs = s.wait();
    EXPECT_EQ(rc, 0) << args << "\n" << c.out();
    EXPECT_EQ(rs, 0) << args << "\n" << s.out();
    EXPECT_NE(c.out().find("iters in"), std::string::npos) << c.out();
  }
}

TEST_F(Service, StockRcPingpongAndWriteBwRunThroughTheDaemons) {
  struct Case {
    std::string args;  // without -p
    std::string marker;
  };
  const Case cases[] = {{"ibv_rc_pingpong -d uroce0 -g 1 -n 500", "iters in"},
                        {"ibv_rc_pingpong -d uroce0 -g 1 -n 200 -e -s 65536", "iters in"},
                        // Completion timestamps, the daemons' clock in the CQ rings' slots.
                        {"ibv_rc_pingpong -d uroce0 -g 1 -n 200 --ts", "Average receive completion clock cycles"},
                        {"ib_write_bw -d uroce0 -x 1 -s 65536 -n 2000 --report_gbits", "65536"}};
  for (const Case& k : cases) {
    std::string args;
    const uroce::test::PairEnds e = uroce::test::until_perftest_reports([&] {
      const std::string tcp = port();
      args = k.args + " -p " + tcp;
      Process s = spawn(std::string(UROCE_RUN) + " --service --socket " + a_->socket + " timeout 60 " + args,
                        dir_ + "/stock-s.log");
      uroce::test::wait_tcp_listening(std::stoi(tcp));
      Process c = spawn(std::string(UROCE_RUN) + " --service --socket " + b_->socket + " timeout 60 " + args +
                            " 127.0.0.1",
                        dir_ + "/stock-c.log");
      const int rc = c.wait(), rs = s.wait();
      return uroce::test::PairEnds{rc, rs, c.out(), s.out()};
    });
    EXPECT_EQ(e.client_status, 0) << args << "\n" << e.client_out;
    EXPECT_EQ(e.server_status, 0) << args << "\n" << e.server_out;
    EXPECT_NE(e.client_out.find(k.marker), std::string::npos) << e.client_out;
  }
}

// On-demand paging through the daemons: the regions stay in each client's
// memory, unshared, and the daemons reach them through the kernel on the
// clients' pids (explicit, implicit, with prefetch).
TEST_F(Service, StockRcPingpongWithOnDemandPagingThroughTheDaemons) {
  for (const char* odp : {"-o -n 200", "-O -s 65536 -n 100", "-o -P -e -n 200"}) {
    const std::string tcp = port();
    const std::string args = "ibv_rc_pingpong -d uroce0 -g 1 " + std::string(odp) + " -p " + tcp;
    Process s = spawn(std::string(UROCE_RUN) + " --service --socket " + a_->socket + " timeout 60 " + args,
                      dir_ + "/odp-s.log");
    uroce::test::wait_tcp_listening(std::stoi(tcp));
    Process c = spawn(std::string(UROCE_RUN) + " --service --socket " + b_->socket + " timeout 60 " + args +
                          " 127.0.0.1",
                      dir_ + "/odp-c.log");
    const int rc = c.wait(), rs = s.wait();
    EXPECT_EQ(rc, 0) << args << "\n" << c.out();
    EXPECT_EQ(rs, 0) << args << "\n" << s.out();
    EXPECT_NE(c.out().find("iters in"), std::string::npos) << c.out();
  }
}

TEST_F(Service, AClientKilledMidTransferHarmsNobody) {
  const uroce::service::StatsReply before = stats(*a_);
  // The victim: ib_write_bw for 6 s between the daemons, killed after 2 s.
  const std::string victim_port = port();
  Process vs = spawn(std::string(UROCE_RUN) + " --service --socket " + a_->socket +
                         " ib_write_bw -d uroce0 -x 1 -p " + victim_port + " -s 65536 -D 6",
                     dir_ + "/victim-s.log");
  uroce::test::wait_tcp_listening(std::stoi(victim_port));
  Process vc = spawn(std::string(UROCE_RUN) + " --service --socket " + b_->socket +
                         " ib_write_bw -d uroce0 -x 1 -p " + victim_port + " -s 65536 -D 6 127.0.0.1",
                     dir_ + "/victim-c.log");
  std::this_thread::sleep_for(1500ms);
  // The survivors: client pairs one after another, every byte verified,
  // from before the kill until well after it.
  std::atomic<bool> killed{false};
  std::atomic<int> rounds_after_kill{0};
  std::vector<std::string> failures;
  std::thread survivors([&] {
    for (int round = 0; round < 40 && rounds_after_kill < 3; ++round) {
      const bool after = killed.load();
      auto [s, c] = verbs_pair("survivor" + std::to_string(round));
      const int rs = s.wait(), rc = c.wait();
      if (rs != 0 || rc != 0) failures.push_back(s.out() + c.out());
      if (after) ++rounds_after_kill;
    }
  });
  // Survivor pairs come and go: look until one holds its QP beside the victim's.
  uroce::service::StatsReply during{};
  for (auto end = std::chrono::steady_clock::now() + 5s; during.qps < 2 && std::chrono::steady_clock::now() < end;) {
    std::this_thread::sleep_for(20ms);
    during = stats(*a_);
  }
  EXPECT_GE(during.qps, 2u) << "victim and a survivor both hold QPs on daemon a";
  kill(vs.pid, SIGKILL);
  killed = true;
  EXPECT_EQ(vs.wait(), -SIGKILL);
  survivors.join();
  EXPECT_GE(rounds_after_kill.load(), 3);
  EXPECT_TRUE(failures.empty()) << failures.front();
  vc.wait(60s);  // its peer is gone: it ends in retry errors, or with its duration
  // Everything the victim had is back: the daemon's counts are as before.
  uroce::service::StatsReply after{};
  for (int i = 0; i < 100; ++i) {
    after = stats(*a_);
    if (after.qps == before.qps && after.mrs == before.mrs) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(after.clients, before.clients);
  EXPECT_EQ(after.qps, before.qps);
  EXPECT_EQ(after.cqs, before.cqs);
  EXPECT_EQ(after.mrs, before.mrs);
  EXPECT_EQ(after.pds, before.pds);
  EXPECT_EQ(after.mapped_bytes, before.mapped_bytes);
  // And new clients attach and work.
  auto [s2, c2] = verbs_pair("after-kill");
  expect_passed(s2);
  expect_passed(c2);
}

// A raw connection to the daemon's socket.
int raw_connect(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

uroce::service::Reply exchange(int fd, const void* msg, std::size_t len) {
  uroce::service::Reply reply;
  reply.error = -1;
  if (send(fd, msg, len, MSG_NOSIGNAL) != static_cast<ssize_t>(len)) return reply;
  if (recv(fd, &reply, sizeof reply, 0) != static_cast<ssize_t>(sizeof reply)) reply.error = -2;
  return reply;
}

TEST_F(Service, GarbageOnTheControlSocketGetsAClearErrorAndTheDaemonServesOn) {
  const int fd = raw_connect(a_->socket);
  ASSERT_GE(fd, 0);
  const char garbage[] = "\x01\x02garbage";
  uroce::service::Reply r = exchange(fd, garbage, sizeof garbage);
  EXPECT_EQ(r.error, EPROTO);
  EXPECT_NE(std::string(r.message).find("malformed request"), std::string::npos) << r.message;
  uroce::service::Request bad;
  std::memset(static_cast<void*>(&bad), 0xa5, sizeof bad);
  r = exchange(fd, &bad, sizeof bad);
  EXPECT_EQ(r.error, EINVAL);
  EXPECT_NE(std::string(r.message).find("unknown request"), std::string::npos) << r.message;
  // A create_qp naming handles that were never made.
  uroce::service::Request qp;
  qp.op = uroce::service::Op::kCreateQp;
  qp.create_qp.pd = 77;
  r = exchange(fd, &qp, sizeof qp);
  EXPECT_EQ(r.error, EINVAL);
  close(fd);
  // The daemon still serves: a full client pair works.
  auto [s, c] = verbs_pair("after-garbage");
  expect_passed(s);
  expect_passed(c);
}

TEST_F(Service, AClientCannotNameAnotherClientsObjects) {
  std::string error;
  auto a = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(a) << error;
  auto b = uroce::service::Client::connect(a_->socket, error);
  ASSERT_TRUE(b) << error;
  uroce::ProtectionDomain* pd = a->alloc_pd();
  ASSERT_NE(pd, nullptr);
  uroce::CompletionQueue* cq = a->create_cq(16);
  ASSERT_NE(cq, nullptr);
  std::vector<char> buf(8192);  // on the heap, as stock programs' buffers
  uroce::MemoryRegion* mr = pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << a->last_error();
  // b names a's objects by a's handles: unknown to the daemon in b's table.
  uroce::service::Request req;
  uroce::service::Reply reply;
  std::string why;
  req.op = uroce::service::Op::kDeallocPd;
  req.handle = pd->handle();
  EXPECT_EQ(b->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  EXPECT_NE(why.find("no PD"), std::string::npos) << why;
  for (std::uint32_t h = 1; h < 8; ++h) {  // every small handle: a's PD, CQ and MR among them
    req.op = uroce::service::Op::kDeregMr;
    req.handle = h;
    EXPECT_EQ(b->call(req, reply, nullptr, 0, nullptr, why), EINVAL) << h;
    req.op = uroce::service::Op::kDestroyCq;
    EXPECT_EQ(b->call(req, reply, nullptr, 0, nullptr, why), EINVAL) << h;
  }
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kCreateQp;
  req.create_qp.pd = pd->handle();
  req.create_qp.send_cq = req.create_qp.recv_cq = 2;
  req.create_qp.cap.max_send_wr = req.create_qp.cap.max_recv_wr = 4;
  req.create_qp.cap.max_send_sge = req.create_qp.cap.max_recv_sge = 1;
  EXPECT_EQ(b->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  EXPECT_NE(why.find("not this client's"), std::string::npos) << why;
  // a's objects are untouched: a can still use and free them.
  uroce::QpInitAttr attr;
  attr.send_cq = attr.recv_cq = cq;
  attr.cap = {4, 4, 1, 1, 0};
  uroce::QueuePair* q = pd->create_qp(attr);
  ASSERT_NE(q, nullptr) << a->last_error();
  EXPECT_EQ(pd->destroy_qp(q), 0);
  EXPECT_EQ(pd->dereg_mr(mr), 0) << a->last_error();
  EXPECT_EQ(a->destroy_cq(cq), 0) << a->last_error();
  EXPECT_EQ(a->dealloc_pd(pd), 0) << a->last_error();
}

// Memory windows and ATOMIC WRITE through the daemon: two clients of one
// daemon (its loopback), B binding a type 2 window over its region, A
// writing 8 bytes atomically through it; then what a hostile B may not do:
// free A's window by A's handle, or bind A's window by its key from B's QP
// (the engine checks the window's PD against the QP's: a bind error).
TEST_F(Service, WindowsAndAtomicWriteWorkAndStayTheirClients) {
  std::string error;
  auto a = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(a) << error;
  auto b = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(b) << error;
  struct Side {
    uroce::ProtectionDomain* pd;
    uroce::CompletionQueue* cq;
    uroce::QueuePair* qp;
    uroce::MemoryRegion* mr;
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(8192);
  };
  auto make = [](uroce::Context& c, Side& s, int access) {
    s.pd = c.alloc_pd();
    s.cq = c.create_cq(16);
    ASSERT_TRUE(s.pd != nullptr && s.cq != nullptr) << c.last_error();
    uroce::QpInitAttr attr;
    attr.send_cq = attr.recv_cq = s.cq;
    attr.cap = {8, 8, 1, 1, 0};
    s.qp = s.pd->create_qp(attr);
    s.mr = s.pd->reg_mr(s.buf.data(), s.buf.size(), access);
    ASSERT_TRUE(s.qp != nullptr && s.mr != nullptr) << c.last_error();
  };
  Side sa, sb;
  make(*a, sa, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  make(*b, sb, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  if (HasFatalFailure()) return;
  uroce::ConnectParams params;
  EXPECT_EQ(uroce::connect_rc(sa.qp, a->gid(), sb.qp->qp_num(), params.psn_a, params.psn_b, params), 0)
      << a->last_error();
  EXPECT_EQ(uroce::connect_rc(sb.qp, b->gid(), sa.qp->qp_num(), params.psn_b, params.psn_a, params), 0)
      << b->last_error();
  auto one = [](uroce::CompletionQueue* cq) {
    ibv_wc wc{};
    for (int i = 0; i < 20000 && cq->poll(1, &wc) == 0; ++i) std::this_thread::sleep_for(500us);
    return wc;
  };
  uroce::MemoryWindow* mw = sb.pd->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr) << b->last_error();
  ibv_mr region{};
  region.lkey = sb.mr->lkey;
  const std::uint32_t rkey = (mw->rkey() & ~0xffu) | ((mw->rkey() + 1) & 0xffu);
  ibv_send_wr bind{};
  bind.wr_id = 1;
  bind.opcode = IBV_WR_BIND_MW;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_mw.mw = mw->ibv();
  bind.bind_mw.rkey = rkey;
  bind.bind_mw.bind_info = ibv_mw_bind_info{&region, reinterpret_cast<std::uint64_t>(sb.buf.data() + 4096), 64,
                                            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED};
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(sb.qp->post_send(&bind, &bad), 0);
  ibv_wc wc = one(sb.cq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << uroce::wc_status_str(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  const std::uint64_t value = 0x0807060504030201ull;
  ibv_send_wr aw{};
  ibv_sge sge{reinterpret_cast<std::uint64_t>(&value), 8, 0};
  aw.wr_id = 2;
  aw.sg_list = &sge;
  aw.num_sge = 1;
  aw.opcode = IBV_WR_ATOMIC_WRITE;
  aw.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  aw.wr.rdma.remote_addr = 16;  // zero-based: 16 bytes into the window
  aw.wr.rdma.rkey = rkey;
  ASSERT_EQ(sa.qp->post_send(&aw, &bad), 0);
  wc = one(sa.cq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << uroce::wc_status_str(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(std::memcmp(sb.buf.data() + 4096 + 16, &value, 8), 0);

  // A's own window: B can neither free it by handle nor bind it by key.
  uroce::MemoryWindow* theirs = sa.pd->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(theirs, nullptr) << a->last_error();
  auto raw = uroce::service::Client::connect(a_->socket, error);
  ASSERT_TRUE(raw) << error;
  uroce::service::Request req;
  uroce::service::Reply reply;
  std::string why;
  req.op = uroce::service::Op::kDeallocMw;
  req.handle = theirs->handle();
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  bind.bind_mw.mw = theirs->ibv();
  bind.bind_mw.rkey = (theirs->rkey() & ~0xffu) | ((theirs->rkey() + 1) & 0xffu);
  ASSERT_EQ(sb.qp->post_send(&bind, &bad), 0);
  wc = one(sb.cq);
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR) << uroce::wc_status_str(wc.status);
  EXPECT_EQ(sb.pd->dereg_mr(sb.mr), EBUSY) << "its own window is still bound to it";
  EXPECT_EQ(sb.pd->dealloc_mw(mw), 0) << b->last_error();
  EXPECT_EQ(sa.pd->dealloc_mw(theirs), 0) << a->last_error();
  EXPECT_EQ(sb.pd->destroy_qp(sb.qp), 0);
  EXPECT_EQ(sb.pd->dereg_mr(sb.mr), 0) << b->last_error();
}

// A registered region lives on a shared memory file at the same addresses:
// its bytes and those around it in its pages are kept; a second region in
// the same pages shares the file; one overlapping part of them is refused.
TEST_F(Service, RegisteredMemoryKeepsItsBytesAndMovesWithWholePages) {
  std::string error;
  auto ctx = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(ctx) << error;
  const long page = sysconf(_SC_PAGESIZE);
  auto* block = static_cast<std::uint8_t*>(mmap(nullptr, 8 * page, PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(block, MAP_FAILED);
  for (long i = 0; i < 8 * page; ++i) block[i] = static_cast<std::uint8_t>(i * 7 + 3);
  uroce::ProtectionDomain* pd = ctx->alloc_pd();
  ASSERT_NE(pd, nullptr);
  // [page + 100, 3 pages + 50): three pages move, partly covered at both ends.
  uroce::MemoryRegion* mr = pd->reg_mr(block + page + 100, 2 * page - 50, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ctx->last_error();
  for (long i = 0; i < 8 * page; ++i) {
    ASSERT_EQ(block[i], static_cast<std::uint8_t>(i * 7 + 3)) << "byte " << i << " changed by the move";
  }
  EXPECT_NE(read_text_file("/proc/self/maps").find("uroce-mr"), std::string::npos) << "no shared file over the region";
  const std::uint64_t mapped = stats(*a_).mapped_bytes;
  uroce::MemoryRegion* inner = pd->reg_mr(block + page + 4000, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(inner, nullptr) << ctx->last_error();
  EXPECT_EQ(stats(*a_).mapped_bytes, mapped) << "a region inside the same pages shares their file";
  // Over the last of those pages and beyond: that page stays on its file,
  // the page after it moves onto a new one; the region is both side by side.
  uroce::MemoryRegion* beyond = pd->reg_mr(block + 3 * page, 2 * page, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(beyond, nullptr) << ctx->last_error();
  EXPECT_EQ(stats(*a_).mapped_bytes, mapped + page) << "only the page not on a file yet is moved";
  for (long i = 0; i < 8 * page; ++i) {
    ASSERT_EQ(block[i], static_cast<std::uint8_t>(i * 7 + 3)) << "byte " << i << " changed by the second move";
  }
  EXPECT_EQ(pd->dereg_mr(beyond), 0);
  // A file mapping is not moved.
  char tmpl[] = "/tmp/uroce-service-file-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_EQ(ftruncate(fd, page), 0);
  void* file = mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  EXPECT_EQ(pd->reg_mr(file, 64, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_NE(ctx->last_error().find("not private anonymous memory"), std::string::npos) << ctx->last_error();
  munmap(file, static_cast<std::size_t>(page));
  close(fd);
  unlink(tmpl);
  // fork: a child gets a copy of the moved pages, as of private memory (and
  // as the kernel gives a child a copy of pinned pages): its writes stay its own.
  const pid_t child = fork();
  if (child == 0) {
    const bool sees = block[page + 200] == static_cast<std::uint8_t>((page + 200) * 7 + 3);
    block[page + 200] = 0x5a;
    _exit(sees && block[page + 200] == 0x5a ? 0 : 1);
  }
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the child saw the parent's bytes and wrote its copy";
  EXPECT_EQ(block[page + 200], static_cast<std::uint8_t>((page + 200) * 7 + 3)) << "a child's write reached the parent";
  EXPECT_EQ(pd->dereg_mr(inner), 0);
  EXPECT_EQ(pd->dereg_mr(mr), 0);
  EXPECT_EQ(block[page + 100], static_cast<std::uint8_t>((page + 100) * 7 + 3)) << "dereg keeps the contents";
  // Freed and registered again over part of those pages and beyond (a heap
  // reusing memory): the pages on files stay there, the others move, bytes kept.
  uroce::MemoryRegion* again = pd->reg_mr(block + 3 * page, 3 * page, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(again, nullptr) << ctx->last_error();
  for (long i = 0; i < 8 * page; ++i) {
    ASSERT_EQ(block[i], static_cast<std::uint8_t>(i * 7 + 3)) << "byte " << i << " changed by the third move";
  }
  EXPECT_EQ(pd->dereg_mr(again), 0);
  EXPECT_EQ(ctx->dealloc_pd(pd), 0);
}

TEST_F(Service, WithForkSafetyAChildDoesNotGetRegisteredPages) {
  // RDMAV_FORK_SAFE as rdma-core reads it: MADV_DONTFORK on registered
  // pages, so the child faults on them instead of sharing them.
  const pid_t child = fork();
  if (child == 0) {
    setenv("RDMAV_FORK_SAFE", "1", 1);
    std::string error;
    auto ctx = uroce::Context::attach(a_->socket, error);
    if (!ctx) _exit(3);
    const long page = sysconf(_SC_PAGESIZE);
    auto* block = static_cast<volatile std::uint8_t*>(
        mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    block[0] = 1;
    uroce::ProtectionDomain* pd = ctx->alloc_pd();
    if (pd == nullptr || pd->reg_mr(const_cast<std::uint8_t*>(block), 64, IBV_ACCESS_LOCAL_WRITE) == nullptr) _exit(4);
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      signal(SIGSEGV, SIG_DFL);
      block[0] = 2;  // not mapped in this process
      _exit(0);
    }
    int st = 0;
    waitpid(grandchild, &st, 0);
    _exit(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV ? 0 : 5);
  }
  int st = 0;
  waitpid(child, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "3: no attach, 4: no region, 5: the grandchild had the pages";
}

// uroced's clients in DPDK telemetry (/uroced/clients): each client's pid,
// objects and QP numbers, whose counters /uroce/qp gives.
TEST_F(Service, TelemetryListsTheClientsAndTheirQps) {
  std::string error;
  auto ctx = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(ctx) << error;
  uroce::ProtectionDomain* pd = ctx->alloc_pd();
  uroce::CompletionQueue* cq = ctx->create_cq(8);
  ASSERT_TRUE(pd && cq);
  uroce::QpInitAttr attr;
  attr.send_cq = attr.recv_cq = cq;
  attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  uroce::QueuePair* qp = pd->create_qp(attr);
  ASSERT_NE(qp, nullptr) << ctx->last_error();
  const std::string clients = uroce::test::telemetry_query(a_->telemetry, "/uroced/clients");
  EXPECT_NE(clients.find("\"pid " + std::to_string(getpid()) + "\""), std::string::npos) << clients;
  EXPECT_NE(clients.find("\"qpns " + std::to_string(qp->qp_num()) + "\""), std::string::npos) << clients;
  EXPECT_NE(clients.find("\"qps 1\""), std::string::npos) << clients;
  const std::string counters = uroce::test::telemetry_query(a_->telemetry, "/uroce/qp,0," + std::to_string(qp->qp_num()));
  EXPECT_NE(counters.find("\"state\":\"RESET\""), std::string::npos) << counters;
  EXPECT_NE(counters.find("\"tx_packets\":0"), std::string::npos) << counters;
  EXPECT_EQ(pd->destroy_qp(qp), 0);
  EXPECT_EQ(ctx->destroy_cq(cq), 0);
  EXPECT_EQ(ctx->dealloc_pd(pd), 0);
}

// An attached context answers the stack's own questions from its backend
// (the daemon's engines are not in this process): a clock that advances
// (the CM's timers read it; it was the in-process port's, absent here), no
// engines, no engine counters, every GID resolved by the daemon.
TEST_F(Service, AnAttachedContextAnswersFromItsBackend) {
  std::string error;
  auto ctx = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(ctx) << error;
  ASSERT_TRUE(ctx->attached());
  const std::uint64_t t0 = uroce::internal::now_ns(*ctx);
  std::this_thread::sleep_for(2ms);
  EXPECT_GE(uroce::internal::now_ns(*ctx) - t0, 2'000'000u);
  EXPECT_EQ(uroce::internal::engine_count(*ctx), 0u);
  EXPECT_THROW(uroce::internal::engine_of(*ctx, 0), std::out_of_range);
  EXPECT_TRUE(ctx->stats().empty());
  EXPECT_TRUE(ctx->qp_nums().empty());
  EXPECT_EQ(uroce::internal::lookup_gid(*ctx, ctx->gid()), uroce::Reach::kKnown);
  EXPECT_EQ(uroce::internal::resolve_counter(*ctx, "resolve_started"), 0u);
}

// A QP taken to RESET and connected again through the daemon starts on
// empty queues on both sides: the next SEND is the only one the daemon
// takes, and its bytes arrive (two QPs of one daemon, through its loopback).
TEST_F(Service, AQpResetThroughTheDaemonStartsOnEmptyQueues) {
  std::string error;
  auto ctx = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(ctx) << error;
  uroce::ProtectionDomain* pd = ctx->alloc_pd();
  uroce::CompletionQueue* cq = ctx->create_cq(64);
  ASSERT_TRUE(pd && cq);
  uroce::QpInitAttr init;
  init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
  init.send_cq = init.recv_cq = cq;
  uroce::QueuePair* qa = pd->create_qp(init);
  uroce::QueuePair* qb = pd->create_qp(init);
  ASSERT_TRUE(qa && qb) << ctx->last_error();
  auto* buf = static_cast<std::uint8_t*>(ctx->alloc_buffer(1 << 16));
  uroce::MemoryRegion* mr = pd->reg_mr(buf, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(buf && mr) << ctx->last_error();
  const ibv_gid own = ctx->gid();
  auto connect = [&] {
    uroce::ConnectParams p;
    ASSERT_EQ(uroce::connect_rc(qa, own, qb->qp_num(), p.psn_a, p.psn_b, p), 0) << ctx->last_error();
    ASSERT_EQ(uroce::connect_rc(qb, own, qa->qp_num(), p.psn_b, p.psn_a, p), 0) << ctx->last_error();
  };
  auto poll = [&](std::size_t n) {
    std::vector<ibv_wc> out;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc[8];
      const int k = cq->poll(8, wc);
      out.insert(out.end(), wc, wc + std::max(k, 0));
    }
    std::this_thread::sleep_for(50ms);  // and nothing more arrives
    ibv_wc wc[8];
    for (int k; (k = cq->poll(8, wc)) > 0;) out.insert(out.end(), wc, wc + k);
    return out;
  };
  auto send = [&](std::uint8_t fill, std::uint64_t id) {
    std::memset(buf, fill, 256);
    ASSERT_EQ(uroce::test::post_recv_one(qb, buf + 4096, 256, mr->lkey, id + 1), 0);
    ASSERT_EQ(uroce::test::post_send_one(qa, IBV_WR_SEND, buf, 256, mr->lkey, id), 0) << ctx->last_error();
  };
  connect();
  for (std::uint64_t i = 0; i < 5; ++i) {
    send(static_cast<std::uint8_t>(i), 100 + 2 * i);
    ASSERT_EQ(poll(2).size(), 2u) << "send " << i;
  }
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(qa->modify(reset, IBV_QP_STATE), 0) << ctx->last_error();
  ASSERT_EQ(qb->modify(reset, IBV_QP_STATE), 0) << ctx->last_error();
  connect();
  send(0xab, 7);
  const std::vector<ibv_wc> wc = poll(2);
  ASSERT_EQ(wc.size(), 2u) << "stale work requests ran after the RESET";
  for (const ibv_wc& w : wc) {
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(w.wr_id == 7 || w.wr_id == 8) << w.wr_id;
  }
  for (int i = 0; i < 256; ++i) ASSERT_EQ(buf[4096 + i], 0xab) << i;
}

// ibv_rereg_mr, ibv_resize_cq and completion timestamps through the daemon:
// a new translation on heap memory is moved onto a memory file and mapped
// by the daemon under the same keys (the old addresses refused); a CQ
// resized keeps what waits, in order, in its new shared ring and refuses a
// size below what waits or will complete; completions carry the daemon's
// clock, which query_clock reads.
TEST_F(Service, ReregResizeAndTimestampsWorkThroughTheDaemon) {
  std::string error;
  auto ctx = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(ctx) << error;
  uroce::ProtectionDomain* pd = ctx->alloc_pd();
  uroce::CompletionQueue* cq = ctx->create_cq(uroce::CqAttr{64, nullptr, nullptr, true});
  ASSERT_TRUE(pd && cq) << ctx->last_error();
  uroce::QpInitAttr init;
  init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
  init.send_cq = init.recv_cq = cq;
  uroce::QueuePair* qa = pd->create_qp(init);
  uroce::QueuePair* qb = pd->create_qp(init);
  ASSERT_TRUE(qa && qb) << ctx->last_error();
  constexpr std::size_t kBytes = 1 << 16;
  auto* src = static_cast<std::uint8_t*>(aligned_alloc(4096, kBytes));
  auto* old_dst = static_cast<std::uint8_t*>(aligned_alloc(4096, kBytes));
  auto* new_dst = static_cast<std::uint8_t*>(aligned_alloc(4096, kBytes));
  std::memset(old_dst, 0, kBytes);
  std::memset(new_dst, 0, kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 3);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  uroce::MemoryRegion* ms = pd->reg_mr(src, kBytes, access);
  uroce::MemoryRegion* md = pd->reg_mr(old_dst, kBytes, access);
  ASSERT_TRUE(ms && md) << ctx->last_error();
  uroce::ConnectParams p;
  ASSERT_EQ(uroce::connect_rc(qa, ctx->gid(), qb->qp_num(), p.psn_a, p.psn_b, p), 0) << ctx->last_error();
  ASSERT_EQ(uroce::connect_rc(qb, ctx->gid(), qa->qp_num(), p.psn_b, p.psn_a, p), 0) << ctx->last_error();
  auto poll = [&](std::size_t n, std::vector<std::uint64_t>* stamps = nullptr) {
    std::vector<ibv_wc> out;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc[8];
      std::uint64_t ts[8];
      const int k = cq->poll(8, wc, ts);
      out.insert(out.end(), wc, wc + std::max(k, 0));
      if (stamps != nullptr) stamps->insert(stamps->end(), ts, ts + std::max(k, 0));
    }
    return out;
  };

  // Timestamps: the daemon's clock, between two reads of it.
  uroce::ClockValues before, after;
  ASSERT_EQ(ctx->query_clock(before), 0) << ctx->last_error();
  for (std::uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(uroce::test::post_recv_one(qb, old_dst, 64, md->lkey, 100 + i), 0);
    ASSERT_EQ(uroce::test::post_send_one(qa, IBV_WR_SEND, src, 64, ms->lkey, i), 0) << ctx->last_error();
  }
  std::vector<std::uint64_t> stamps;
  ASSERT_EQ(poll(6, &stamps).size(), 6u);
  ASSERT_EQ(ctx->query_clock(after), 0);
  for (const std::uint64_t ts : stamps) {
    EXPECT_GE(ts, before.raw_ns);
    EXPECT_LE(ts, after.raw_ns);
  }

  // Resize: four sends posted count at once (waiting or still to come).
  for (std::uint64_t i = 0; i < 4; ++i) {
    ASSERT_EQ(uroce::test::post_recv_one(qb, old_dst, 64, md->lkey, 200 + i), 0);
    ASSERT_EQ(uroce::test::post_send_one(qa, IBV_WR_SEND, src, 64, ms->lkey, 10 + i), 0);
  }
  EXPECT_EQ(cq->resize(3), EINVAL) << ctx->last_error();
  {
    // No address space for a larger ring: refused before the daemon hears
    // of it (it fills the new ring only, once it answers), and the CQ goes
    // on in its ring. The limit leaves 8 MiB for everything else.
    rlimit saved{};
    ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0;
    statm >> pages;
    ASSERT_GT(pages, 0u);
    rlimit tight = saved;
    tight.rlim_cur = pages * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)) + (8u << 20);
    ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
    const int e = cq->resize(1 << 19);  // a ring of 32 MiB and more
    ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
    EXPECT_EQ(e, ENOMEM) << ctx->last_error();
    EXPECT_NE(ctx->last_error().find("address space"), std::string::npos) << ctx->last_error();
  }
  ASSERT_EQ(cq->resize(16), 0) << ctx->last_error();
  EXPECT_EQ(cq->capacity(), 16);
  const std::vector<ibv_wc> wc = poll(8);
  ASSERT_EQ(wc.size(), 8u);
  std::vector<std::uint64_t> sends, recvs;
  for (const ibv_wc& w : wc) {
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    (w.opcode == IBV_WC_RECV ? recvs : sends).push_back(w.wr_id);
  }
  EXPECT_EQ(sends, (std::vector<std::uint64_t>{10, 11, 12, 13}));
  EXPECT_EQ(recvs, (std::vector<std::uint64_t>{200, 201, 202, 203}));

  // Rereg: the destination moves to new heap memory under the same keys.
  const std::uint32_t rkey = md->rkey;
  uroce::ReregAttr change{IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, new_dst, kBytes,
                          reinterpret_cast<std::uintptr_t>(new_dst)};
  ASSERT_EQ(pd->rereg_mr(md, change), 0) << ctx->last_error();
  EXPECT_EQ(md->rkey, rkey);
  EXPECT_EQ(md->addr, new_dst);
  ASSERT_EQ(uroce::test::post_rdma(qa, IBV_WR_RDMA_WRITE, src, kBytes, ms->lkey, new_dst, rkey, 30), 0);
  auto done = poll(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(new_dst, src, kBytes), 0);
  std::memset(old_dst, 0, 64);
  ASSERT_EQ(uroce::test::post_rdma(qa, IBV_WR_RDMA_WRITE, src, 64, ms->lkey, old_dst, rkey, 31), 0);
  done = poll(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_REM_ACCESS_ERR);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(old_dst[i], 0) << i;
  // Bad flags: refused by this side before the daemon is asked.
  EXPECT_EQ(pd->rereg_mr(md, uroce::ReregAttr{0}), EINVAL);
  pd->destroy_qp(qa);
  pd->destroy_qp(qb);
  pd->dereg_mr(ms);
  pd->dereg_mr(md);
  free(src);
  free(old_dst);
  free(new_dst);
}

// A daemon of its own with small limits, and what SIGTERM does.
// Heap memory as stock programs register it (malloc, memalign), between a
// client of daemon a and one of daemon b in this process: an RDMA WRITE
// from one heap buffer into another must carry the bytes each side's
// program sees, through every way a heap reuses pages.
class ServiceHeap : public Service, protected uroce::test::ConnectedClients {
 protected:
  void SetUp() override {
    Service::SetUp();
    ASSERT_EQ(set_up(*a_, *b_), "");
  }
  void TearDown() override { tear_down(); }
};

// Buffers at the top of the heap, freed (the heap shrinks: malloc_trim
// gives the pages back) and allocated again at the same addresses (new
// pages): the second WRITE must see the new pages, not the old files.
TEST_F(ServiceHeap, HeapPagesGivenBackAndTakenAgainAreRegisteredAfresh) {
  for (int round = 0; round < 4; ++round) {
    auto* src = static_cast<std::uint8_t*>(std::malloc(100 * 1024));
    auto* dst = static_cast<std::uint8_t*>(std::malloc(100 * 1024));
    ASSERT_TRUE(src && dst);
    EXPECT_EQ(carry(src, dst, 100 * 1024, static_cast<std::uint8_t>(round + 1), false), "") << "round " << round;
    std::free(dst);
    std::free(src);
    malloc_trim(0);
  }
}

// Two live regions whose buffers share a page (neighbours on the heap):
// each is registered, as verbs allows for any memory.
TEST_F(ServiceHeap, RegionsSharingAPageWithALiveRegionAreRegistered) {
  const long page = sysconf(_SC_PAGESIZE);
  auto* block = static_cast<std::uint8_t*>(mmap(nullptr, 16 * page, PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(block, MAP_FAILED);
  // [0, 1.5 pages) live, then [1.5, 3.5) over its last page and beyond,
  // then [3, 6) over the second's last page; a destination in [8, 16).
  uroce::MemoryRegion* first = pda->reg_mr(block, page + page / 2, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(first, nullptr) << ca->last_error();
  std::uint8_t* dst = block + 8 * page;
  EXPECT_EQ(carry(block + page + page / 2, dst, 2 * page, 7, false), "");
  uroce::MemoryRegion* second = pda->reg_mr(block + page + page / 2, 2 * page, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(second, nullptr) << ca->last_error();
  EXPECT_EQ(carry(block + 3 * page, dst, 3 * page, 9, false), "");
  // The first region still reads what the program writes.
  EXPECT_EQ(carry(block, dst, page + page / 2, 11, false), "");
  EXPECT_EQ(pda->dereg_mr(second), 0);
  EXPECT_EQ(pda->dereg_mr(first), 0);
  munmap(block, 16 * page);
}

// Pages that were moved, then unmapped by the program and mapped anew at
// the same address (an allocator recycling address space): the new pages
// are what a new region holds, not the old file.
TEST_F(ServiceHeap, PagesMappedAnewAtTheSameAddressAreRegisteredAfresh) {
  const long page = sysconf(_SC_PAGESIZE);
  const std::size_t bytes = 4 * static_cast<std::size_t>(page);
  auto* dst = static_cast<std::uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* src = static_cast<std::uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(dst, MAP_FAILED);
  ASSERT_NE(src, MAP_FAILED);
  EXPECT_EQ(carry(src, dst, bytes, 21, false), "");
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(munmap(src, bytes), 0);
    ASSERT_EQ(mmap(src, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), src);
    EXPECT_EQ(carry(src, dst, bytes, static_cast<std::uint8_t>(22 + round), false), "") << "round " << round;
  }
  munmap(src, bytes);
  munmap(dst, bytes);
}

// A program that registered heap memory forks; the child allocates, frees
// and writes all over its heap. The parent's heap and registered bytes are
// its own: the child had a copy (a shared heap page would let the child's
// malloc corrupt the parent's).
TEST_F(ServiceHeap, AForkedChildsMallocLeavesTheParentsHeapAlone) {
  std::vector<std::uint8_t> src(3 * 4096 + 100), dst(3 * 4096 + 100);
  EXPECT_EQ(carry(src.data(), dst.data(), src.size(), 31, false), "");
  const std::vector<std::uint8_t> kept(src.begin(), src.end());
  uroce::MemoryRegion* held = pda->reg_mr(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(held, nullptr) << ca->last_error();
  const pid_t child = fork();
  if (child == 0) {
    std::vector<void*> blocks;
    for (int i = 0; i < 20000; ++i) {
      blocks.push_back(std::malloc(static_cast<std::size_t>(16 + (i * 37) % 3000)));
      if (i % 3 == 0) {
        std::free(blocks[static_cast<std::size_t>(i) / 2]);
        blocks[static_cast<std::size_t>(i) / 2] = nullptr;
      }
    }
    for (void* b : blocks) std::free(b);
    std::memset(src.data(), 0xee, src.size());
    malloc_trim(0);
    _exit(0);
  }
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ(src, kept) << "the child's writes reached the parent";
  for (int i = 0; i < 20000; ++i) std::free(std::malloc(static_cast<std::size_t>(16 + (i * 53) % 5000)));
  malloc_trim(0);
  EXPECT_EQ(pda->dereg_mr(held), 0);
  EXPECT_EQ(carry(src.data(), dst.data(), src.size(), 32, false), "") << "after the fork";
}

// The library's own buffers (Context::alloc_buffer) are memory files from
// the start, passed as they are: of hugepages when some are free (the test
// reserves four, when the machine lets it), else of normal pages. A region
// in the middle of one is placed exactly either way.
TEST_F(ServiceHeap, ALibraryBufferIsPassedAsItIsOnHugepagesWhenFree) {
  const std::string knob = "/proc/sys/vm/nr_hugepages";
  const long reserved = std::atol(read_text_file(knob).c_str());
  const bool more = std::system(("echo " + std::to_string(reserved + 4) + " > " + knob + " 2>/dev/null").c_str()) == 0 &&
                    std::atol(read_text_file(knob).c_str()) >= reserved + 4;
  const std::size_t bytes = 4u << 20;
  auto* buf = static_cast<std::uint8_t*>(cb->alloc_buffer(bytes));
  ASSERT_NE(buf, nullptr) << cb->last_error();
  std::memset(buf, 0, bytes);
  // Its mapping's page size, from smaps.
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_buf = false;
  long page_kb = 0;
  while (std::getline(smaps, line)) {
    if (std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') != std::string::npos) {
      in_buf = std::stoull(line.substr(0, line.find('-')), nullptr, 16) == reinterpret_cast<std::uintptr_t>(buf);
    } else if (in_buf && line.rfind("KernelPageSize:", 0) == 0) {
      page_kb = std::atol(line.c_str() + 15);
    }
  }
  if (more) {
    EXPECT_EQ(page_kb, 2048) << "hugepages were free, the buffer is not on them";
  }
  std::vector<std::uint8_t> src(64 * 1024 + 100);
  EXPECT_EQ(carry(src.data(), buf + (1u << 20) + 100, src.size(), 41, false), "") << "pages of " << page_kb << " KiB";
  cb->free_buffer(buf);
  if (more) {
    EXPECT_EQ(std::system(("echo " + std::to_string(reserved) + " > " + knob).c_str()), 0);
  }
  std::printf("  the buffer was on %ld KiB pages\n", page_kb);
}

TEST(ServiceLimits, PerClientLimitsGiveAClearErrorAndSigtermEndsCleanly) {
  const uroce::test::TempDir tmp("/tmp/uroce-service-limits-");
  const std::string& dir = tmp.dir;
  {
    Uroced d(uroce::test::memif_uroced("svc", dir, "limits", true, 1,
                                       "--max-qps 1 --max-mrs 1 --max-cqs 2 --min-ack-timeout 16 --cc delay"));
    ASSERT_EQ(d.error, "");
    std::string error;
    auto ctx = uroce::Context::attach(d.socket, error);
    ASSERT_TRUE(ctx) << error;
    uroce::ProtectionDomain* pd = ctx->alloc_pd();
    ASSERT_NE(pd, nullptr);
    uroce::CompletionQueue* cq = ctx->create_cq(8);
    ASSERT_NE(cq, nullptr);
    ASSERT_NE(ctx->create_cq(8), nullptr);
    EXPECT_EQ(ctx->create_cq(8), nullptr);
    EXPECT_NE(ctx->last_error().find("max_cqs"), std::string::npos) << ctx->last_error();
    uroce::QpInitAttr attr;
    attr.send_cq = attr.recv_cq = cq;
    attr.cap = {4, 4, 1, 1, 0};
    uroce::QueuePair* q = pd->create_qp(attr);
    ASSERT_NE(q, nullptr) << ctx->last_error();
    EXPECT_EQ(pd->create_qp(attr), nullptr);
    EXPECT_NE(ctx->last_error().find("max_qps"), std::string::npos) << ctx->last_error();
    attr.qp_type = IBV_QPT_UD;
    EXPECT_EQ(pd->create_qp(attr), nullptr);
    std::vector<char> buf(4 * 4096);  // on the heap
    ASSERT_NE(pd->reg_mr(buf.data(), 4096, IBV_ACCESS_LOCAL_WRITE), nullptr) << ctx->last_error();
    EXPECT_EQ(pd->reg_mr(buf.data() + 8192, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_NE(ctx->last_error().find("max_mrs"), std::string::npos) << ctx->last_error();
    // SIGTERM: the QP goes to error, the client is told (its next call
    // fails with a clear message), the daemon exits 0.
    const std::string sock = d.socket;
    EXPECT_EQ(d.stop(), 0) << d.out();
    EXPECT_NE(d.out().find("local ACK timeout floor 16"), std::string::npos) << d.out();
    EXPECT_NE(d.out().find("congestion control delay,"), std::string::npos) << d.out();
    EXPECT_EQ(ctx->create_cq(8), nullptr);
    EXPECT_NE(ctx->last_error().find("uroced"), std::string::npos) << ctx->last_error();
    EXPECT_NE(access(sock.c_str(), F_OK), 0) << "the socket file is removed";
  }
}

// --cc (the key cc) names the controller; a contradiction, a bad name or
// a missing file stops uroced before it takes the port, with one line.
TEST(ServiceLimits, ACongestionControlThatCannotRunIsRefusedInOneLine) {
  const struct {
    std::string flags, says;
  } bad[] = {
      {"--cc swift", "uroced: cc: 'swift': give dcqcn, delay or off"},
      {"--cc delay --dcqcn " UROCE_SOURCE_ROOT "/conf/dcqcn.conf",
       "uroced: dcqcn with cc delay: DCQCN's parameters are for cc dcqcn; drop one of them"},
      {"--dcqcn " UROCE_SOURCE_ROOT "/conf/dcqcn.conf --delay " UROCE_SOURCE_ROOT "/conf/delay.conf",
       "uroced: dcqcn and delay name two congestion controls; keep one, or say which with cc"},
      {"--cc delay --delay /nonexistent",
       "uroced: delay: cannot read '/nonexistent' (give a file like conf/delay.conf, or unset it)"},
  };
  for (const auto& b : bad) {
    const uroce::test::Outcome r = uroce::test::run_command(std::string(UROCED) + " --ip 10.0.0.1/24 " + b.flags + " 2>&1");
    EXPECT_EQ(r.status, 2) << b.flags << ": " << r.out;
    EXPECT_EQ(r.out, b.says + "\n") << b.flags;
  }
}

TEST(ServiceLimits, NoDaemonGivesOneLineSayingWhatToDo) {
  std::string error;
  auto ctx = uroce::Context::attach("/tmp/uroce-no-such-daemon.sock", error);
  EXPECT_FALSE(ctx);
  EXPECT_NE(error.find("start the daemon"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

}  // namespace
