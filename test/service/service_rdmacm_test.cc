// rdma_cm through uroced (issue 27 item 2): stock rping and perftest -R with
// their QPs in the daemon, connected by the daemon's one communication
// manager (lib/service/daemon/cm_relay.h), on one daemon and across two
// joined by memif; and clients that try what the relay must refuse: a
// service ID someone holds, another process's QP, a connection that is not
// theirs, malformed requests, and a client killed mid-connection.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "service/client.h"
#include "service/protocol.h"
#include "support/command.h"
#include "support/free_port.h"
#include "support/uroce_ready.h"
#include "support/uroced.h"

namespace {

using namespace std::chrono_literals;
using uroce::test::Uroced;
using uroce::service::Client;
using uroce::service::Op;
using uroce::service::Reply;
using uroce::service::Request;
using uroce::test::Process;
using uroce::test::spawn;


class ServiceRdmaCm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pair_ = new uroce::test::MemifUrocedPair("svccm");
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
  static std::string dir_;
  static uroce::test::MemifUrocedPair* pair_;
  static Uroced* a_;
  static Uroced* b_;
};
std::string ServiceRdmaCm::dir_;
uroce::test::MemifUrocedPair* ServiceRdmaCm::pair_ = nullptr;
Uroced* ServiceRdmaCm::a_ = nullptr;
Uroced* ServiceRdmaCm::b_ = nullptr;

// A stock program under uroce-run against daemon `d`.
std::string run_on(const Uroced& d) { return std::string(UROCE_RUN) + " --service --socket " + d.socket + " "; }

std::string port() { return std::to_string(uroce::test::free_tcp_port()); }

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = 0; (at = text.find(what, at)) != std::string::npos; ++at) ++n;
  return n;
}

// Waits until the server `s` (started with `mark` in its environment) runs
// librdmacm's thread: its CM is open, and it listens a moment later (a REQ
// before that is sent again). Not a fixed delay, which a loaded machine
// can outlast.
void wait_cm(const std::string& mark, const Process& s) {
  const bool up = uroce::test::wait_uroce_thread(mark, {"uroce-cm"}, [&] { return kill(s.pid, 0) != 0; });
  EXPECT_TRUE(up) << "the server's rdma_cm never started:\n" << s.out();
}

// rping's server on `server`, its client on `client`, `n` pings verified
// (-V: the client checks each echo) and printed (-v).
void rping_pair(const Uroced& server, const Uroced& client, const std::string& log, int n = 10) {
  const std::string args = " -a 10.0.0.1 -p " + port() + " -C " + std::to_string(n) + " -v -V";
  const std::string mark = uroce::test::mark_env("svc-rdmacm");
  Process s = spawn("env " + mark + " " + run_on(server) + "timeout 60 rping -s" + args, log + "-s.log");
  wait_cm(mark, s);
  Process c = spawn(run_on(client) + "timeout 60 rping -c" + args, log + "-c.log");
  const int rc = c.wait(), rs = s.wait();
  EXPECT_EQ(rc, 0) << c.out();
  EXPECT_EQ(rs, 0) << s.out();
  EXPECT_EQ(count(c.out(), "ping data: rdma-ping-"), static_cast<std::size_t>(n)) << c.out();
  EXPECT_EQ(count(s.out(), "ping data: rdma-ping-"), static_cast<std::size_t>(n)) << s.out();
}

// One raw connection to a daemon, for the hostile cases.
struct Raw {
  std::unique_ptr<Client> client;
  std::string error;
  explicit Raw(const Uroced& d) { client = Client::connect(d.socket, error); }
  int call(Request& req, Reply& reply, std::vector<int>* fds = nullptr) {
    std::string why;
    const int e = client->call(req, reply, nullptr, 0, fds, why);
    message = why;
    return e;
  }
  int open() {
    Request req;
    req.op = Op::kCmOpen;
    Reply reply;
    std::vector<int> fds;
    const int e = call(req, reply, &fds);
    for (int fd : fds) close(fd);
    return e;
  }
  int listen(std::uint64_t service_id) {
    Request req;
    req.op = Op::kCmListen;
    req.cm_listen = uroce::service::CmListen{service_id, 8};
    Reply reply;
    return call(req, reply);
  }
  std::string message;
};

TEST_F(ServiceRdmaCm, StockRpingWithBothEndsOnOneDaemon) { rping_pair(*a_, *a_, dir_ + "/rping-one"); }

TEST_F(ServiceRdmaCm, StockRpingAcrossTwoDaemons) { rping_pair(*a_, *b_, dir_ + "/rping-two"); }

// perftest's -R: the connection by rdma_cm, then the test over it.
TEST_F(ServiceRdmaCm, StockPerftestWithRdmaCm) {
  struct Case {
    const Uroced* server;
    const Uroced* client;
    std::string args;
  };
  const Case cases[] = {{a_, b_, "ib_send_bw -d uroce0 -R -s 4096 -n 500"},
                        {a_, a_, "ib_write_bw -d uroce0 -R -s 4096 -n 500"}};
  for (const Case& k : cases) {
    std::string args;
    const uroce::test::PairEnds e = uroce::test::until_perftest_reports([&] {
      args = k.args + " -p " + port();
      const std::string mark = uroce::test::mark_env("svc-rdmacm");
      Process s = spawn("env " + mark + " " + run_on(*k.server) + "timeout 60 " + args, dir_ + "/perf-s.log");
      wait_cm(mark, s);
      Process c = spawn(run_on(*k.client) + "timeout 60 " + args + " 10.0.0.1", dir_ + "/perf-c.log");
      const int rc = c.wait(), rs = s.wait();
      return uroce::test::PairEnds{rc, rs, c.out(), s.out()};
    });
    EXPECT_EQ(e.client_status, 0) << args << "\n" << e.client_out;
    EXPECT_EQ(e.server_status, 0) << args << "\n" << e.server_out;
    // The result line: the size, the iterations.
    EXPECT_NE(e.client_out.find(" 4096       500"), std::string::npos) << e.client_out;
  }
}

// A service ID is one client's at a time; its listener goes with it.
TEST_F(ServiceRdmaCm, ASecondListenerOnATakenServiceIdGetsEaddrinuse) {
  const std::uint64_t service_id = 0x01064e21;  // rdma_cm's TCP port space, port 20001
  auto first = std::make_unique<Raw>(*a_);
  Raw second(*a_);
  ASSERT_TRUE(first->client) << first->error;
  ASSERT_TRUE(second.client) << second.error;
  // Nothing before cm_open.
  EXPECT_EQ(second.listen(service_id), EINVAL);
  EXPECT_NE(second.message.find("cm_open"), std::string::npos) << second.message;
  ASSERT_EQ(first->open(), 0) << first->message;
  ASSERT_EQ(second.open(), 0) << second.message;
  EXPECT_EQ(second.open(), EBUSY);
  ASSERT_EQ(first->listen(service_id), 0) << first->message;
  EXPECT_EQ(second.listen(service_id), EADDRINUSE);
  EXPECT_NE(second.message.find("listened on already"), std::string::npos) << second.message;
  // Unlistening what is not its own: refused.
  Request req;
  req.op = Op::kCmUnlisten;
  req.cm_listen = uroce::service::CmListen{service_id, 0};
  Reply reply;
  EXPECT_EQ(second.call(req, reply), ENOENT);
  // The first goes: its service ID is free again.
  first.reset();
  bool taken = false;
  for (int i = 0; i < 100 && !taken; ++i) {
    taken = second.listen(service_id) == 0;
    if (!taken) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(taken) << second.message;
}

// A client names only its own process's QPs and its own connections; a
// malformed request gets a clear error.
TEST_F(ServiceRdmaCm, AClientNamingAnothersQpOrConnectionIsRefused) {
  // Another process with a QP on the daemon: it says its QPN and waits.
  int to_parent[2];
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t other = fork();
  if (other == 0) {
    close(to_parent[0]);
    Raw r(*a_);
    Request req;
    Reply reply;
    req.op = Op::kAllocPd;
    if (r.call(req, reply) != 0) _exit(1);
    const std::uint32_t pd = reply.handle;
    req = Request{};
    req.op = Op::kCreateCq;
    req.create_cq = uroce::service::CreateCq{16};
    std::vector<int> fds;
    if (r.call(req, reply, &fds) != 0) _exit(2);
    const std::uint32_t cq = reply.handle;
    req = Request{};
    req.op = Op::kCreateQp;
    req.create_qp = uroce::service::CreateQp{pd, cq, cq, IBV_QPT_RC, 0, ibv_qp_cap{4, 4, 1, 1, 0}};
    if (r.call(req, reply, &fds) != 0) _exit(3);
    const std::uint32_t qpn = reply.create_qp.qpn;
    if (write(to_parent[1], &qpn, sizeof qpn) != sizeof qpn) _exit(4);
    pause();
    _exit(0);
  }
  close(to_parent[1]);
  std::uint32_t their_qpn = 0;
  ASSERT_EQ(read(to_parent[0], &their_qpn, sizeof their_qpn), static_cast<ssize_t>(sizeof their_qpn));
  close(to_parent[0]);
  Raw me(*a_);
  ASSERT_TRUE(me.client) << me.error;
  ASSERT_EQ(me.open(), 0) << me.message;
  Request req;
  req.op = Op::kCmConnect;
  req.cm_connect = uroce::service::CmConnect{};
  req.cm_connect.qpn = their_qpn;
  req.cm_connect.remote_gid.raw[10] = req.cm_connect.remote_gid.raw[11] = 0xff;
  req.cm_connect.remote_gid.raw[12] = 10;
  req.cm_connect.remote_gid.raw[15] = 2;
  req.cm_connect.service_id = 0x01064e22;
  req.cm_connect.mtu = IBV_MTU_1024;
  Reply reply;
  EXPECT_EQ(me.call(req, reply), EINVAL);
  EXPECT_NE(me.message.find("of this process"), std::string::npos) << me.message;
  // Malformed: more private data than a REQ carries, an MTU that is none.
  req.cm_connect.private_data_len = 200;
  EXPECT_EQ(me.call(req, reply), EINVAL);
  EXPECT_NE(me.message.find("private data"), std::string::npos) << me.message;
  req.cm_connect.private_data_len = 0;
  req.cm_connect.mtu = 9;
  EXPECT_EQ(me.call(req, reply), EINVAL);
  // Connections that are not its own: unknown.
  for (Op op : {Op::kCmDisconnect, Op::kCmReject, Op::kCmAccept}) {
    Request r;
    r.op = op;
    r.handle = 12345;
    if (op == Op::kCmReject) r.cm_reject = uroce::service::CmReject{12345, 0, {}};
    if (op == Op::kCmAccept) r.cm_accept = uroce::service::CmAccept{12345, their_qpn, 16, 16, 7, 0, {}};
    EXPECT_NE(me.call(r, reply), 0) << static_cast<int>(op);
  }
  // No event waits: ENOENT, not a hang.
  Request ev;
  ev.op = Op::kCmEvent;
  EXPECT_EQ(me.call(ev, reply), ENOENT);
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
}

// A listener's client that goes with a request unanswered: the request is
// refused at once (REJ), not left for the requester to time out.
TEST_F(ServiceRdmaCm, AListenerThatGoesRefusesItsWaitingRequests) {
  const std::string p = port();
  auto raw = std::make_unique<Raw>(*a_);
  ASSERT_TRUE(raw->client) << raw->error;
  ASSERT_EQ(raw->open(), 0) << raw->message;
  ASSERT_EQ(raw->listen(0x01060000u | static_cast<std::uint32_t>(std::stoul(p))), 0) << raw->message;
  Process c = spawn(run_on(*b_) + "timeout 60 rping -c -a 10.0.0.1 -p " + p + " -C 1", dir_ + "/refused-c.log");
  // The request arrives: an event waits for the listener's client, unanswered.
  bool requested = false;
  for (int i = 0; i < 500 && !requested; ++i) {
    Request req;
    req.op = Op::kCmEvent;
    Reply reply;
    requested = raw->call(req, reply) == 0 && reply.cm_event.type == 0;  // cm::EventType::kRequest
    if (!requested) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(requested) << c.out();
  raw.reset();
  const auto gone = std::chrono::steady_clock::now();
  const int rc = c.wait();
  EXPECT_NE(rc, 0) << c.out();
  EXPECT_NE(rc, 124) << "rping was never told: " << c.out();
  EXPECT_LT(std::chrono::steady_clock::now() - gone, 5s) << c.out();
  // IBTA's consumer reject (28), not a refusal of the service (8).
  EXPECT_NE(c.out().find("RDMA_CM_EVENT_REJECTED, error 28"), std::string::npos) << c.out();
}

// A client killed with a connection up: its peer learns (the daemon sends
// the DREQ), and the daemon serves the next pair as before.
TEST_F(ServiceRdmaCm, AClientKilledMidConnectionLeavesTheDaemonServing) {
  const std::string args = " -a 10.0.0.1 -p " + port() + " -v";
  const std::string mark = uroce::test::mark_env("svc-rdmacm");
  Process s = spawn("env " + mark + " " + run_on(*a_) + "timeout 60 rping -s -C 100000" + args, dir_ + "/victim-s.log");
  wait_cm(mark, s);
  // The client pings on until it is killed (SIGKILL: nothing of its own runs).
  Process c = spawn(run_on(*b_) + "timeout -s KILL 4 rping -c -C 100000" + args, dir_ + "/victim-c.log");
  c.wait();
  EXPECT_GT(count(c.out(), "ping data: rdma-ping-"), 0u) << c.out();
  // The server's rping sees the connection end well before its timeout.
  const auto killed = std::chrono::steady_clock::now();
  const int rs = s.wait();
  EXPECT_NE(rs, 124) << "the server never learned its peer went: " << s.out();
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 30s);
  rping_pair(*a_, *b_, dir_ + "/after-kill", 5);
}

// rdma_init_qp_attr and rdma_establish through the daemon (a QP the
// program moves itself): only on the client's own connections, only when
// the connection has the attributes or waits for the RTU; the daemon never
// moves such a QP.
TEST_F(ServiceRdmaCm, InitQpAttrAndEstablishOnlyOnTheClientsOwnConnections) {
  Raw me(*a_);
  Raw other(*a_);
  ASSERT_TRUE(me.client) << me.error;
  ASSERT_TRUE(other.client) << other.error;
  ASSERT_EQ(me.open(), 0) << me.message;
  ASSERT_EQ(other.open(), 0) << other.message;
  Request req;
  Reply reply;
  req.op = Op::kAllocPd;
  ASSERT_EQ(me.call(req, reply), 0) << me.message;
  const std::uint32_t pd = reply.handle;
  req = Request{};
  req.op = Op::kCreateCq;
  req.create_cq = uroce::service::CreateCq{16};
  std::vector<int> fds;
  ASSERT_EQ(me.call(req, reply, &fds), 0) << me.message;
  const std::uint32_t cq = reply.handle;
  req = Request{};
  req.op = Op::kCreateQp;
  req.create_qp = uroce::service::CreateQp{pd, cq, cq, IBV_QPT_RC, 0, ibv_qp_cap{4, 4, 1, 1, 0}};
  ASSERT_EQ(me.call(req, reply, &fds), 0) << me.message;
  for (int fd : fds) close(fd);
  const std::uint32_t qp = reply.handle;
  const std::uint32_t qpn = reply.create_qp.qpn;
  // A REQ to an address nobody answers: the connection waits (resends).
  req = Request{};
  req.op = Op::kCmConnect;
  req.cm_connect = uroce::service::CmConnect{};
  req.cm_connect.qpn = qpn;
  req.cm_connect.program_qp = 1;
  req.cm_connect.remote_gid.raw[10] = req.cm_connect.remote_gid.raw[11] = 0xff;
  req.cm_connect.remote_gid.raw[12] = 10;
  req.cm_connect.remote_gid.raw[15] = 9;
  req.cm_connect.service_id = 0x01064e23;
  req.cm_connect.mtu = IBV_MTU_1024;
  ASSERT_EQ(me.call(req, reply), 0) << me.message;
  const std::uint32_t comm_id = reply.handle;
  const auto init_qp_attr = [&](Raw& r, std::uint32_t id, std::uint32_t state) {
    Request q;
    q.op = Op::kCmInitQpAttr;
    q.cm_init_qp_attr = uroce::service::CmInitQpAttr{id, state};
    return r.call(q, reply);
  };
  const auto establish = [&](Raw& r, std::uint32_t id) {
    Request q;
    q.op = Op::kCmEstablish;
    q.handle = id;
    return r.call(q, reply);
  };
  ASSERT_EQ(init_qp_attr(me, comm_id, IBV_QPS_INIT), 0) << me.message;
  EXPECT_EQ(reply.cm_init_qp_attr.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(reply.cm_init_qp_attr.mask, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
  EXPECT_EQ(init_qp_attr(me, comm_id, IBV_QPS_RTR), EINVAL) << "no RTR before the REP";
  EXPECT_NE(me.message.find("REP"), std::string::npos) << me.message;
  EXPECT_EQ(init_qp_attr(me, comm_id, 99), EINVAL);
  EXPECT_EQ(establish(me, comm_id), EINVAL) << "no connect response to answer";
  // Another client's connection is unknown to it.
  EXPECT_EQ(init_qp_attr(other, comm_id, IBV_QPS_INIT), ENOENT);
  EXPECT_EQ(establish(other, comm_id), ENOENT);
  EXPECT_EQ(init_qp_attr(me, comm_id + 1, IBV_QPS_INIT), ENOENT);
  // The daemon did not move the program's QP.
  req = Request{};
  req.op = Op::kQueryQp;
  req.handle = qp;
  ASSERT_EQ(me.call(req, reply), 0) << me.message;
  EXPECT_EQ(reply.query_qp.attr.qp_state, IBV_QPS_RESET);
}

}  // namespace
