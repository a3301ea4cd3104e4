// rdma_cm's UDP port space (RDMA_PS_UDP) through our librdmacm.so.1: Service
// ID Resolution (IBTA 12.11, SIDR_REQ -> SIDR_REP) finds the peer's UD QP and
// Q_Key, and datagrams then go both ways to what the events said, as
// rdma-core's test_rdmacm_async_udp_traffic and udaddy do:
//  - rdma_connect of a UD ID: CONNECT_REQUEST with param.ud (the private
//    data), rdma_accept of the request's UD QP, ESTABLISHED on the active
//    side with the QP's number, RDMA_UDP_QKEY and an AH to the peer;
//  - a SEND to that AH, QPN and Q_Key arrives with its data, and the answer
//    goes back through ibv_create_ah_from_wc of the datagram received;
//  - rdma_reject answers SIDR_REP "rejected" (UNREACHABLE, status 2, its
//    private data); nobody listening answers "service ID not supported"
//    (UNREACHABLE, status 1).
// In this process on net_ring (frames to our own address come back, so one
// process is both ends), and through uroced: the same scenario in a child
// run under `uroce-run --service` against a daemon on net_ring.
// Stock udaddy between two processes: rdmacm_stock_test.cc.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "support/rdmacm_rig.h"
#include "support/uroced.h"

namespace {

using uroce::test::CmEvent;
using uroce::test::next_cm_event;

const std::array<std::uint8_t, 4> kOurIp = {10, 0, 0, 1};
constexpr std::uint32_t kUdpQkey = 0x01234567;  // rdma-core's RDMA_UDP_QKEY
constexpr std::size_t kGrh = 40;
constexpr std::size_t kMsg = 64;

sockaddr_in address(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  std::memcpy(&a.sin_addr, kOurIp.data(), 4);
  a.sin_port = htons(port);
  return a;
}
sockaddr* sa(void* a) { return static_cast<sockaddr*>(a); }

// The scenario's failures, one line each; empty when all went as it should.
struct Check {
  std::string failures;
  bool operator()(bool ok, const std::string& what) {
    if (!ok) failures += what + "\n";
    return ok;
  }
};

// A UD ID's QP with the library's default CQs, and a registered buffer
// (GRH room, then the message) on a page of its own: through uroced a
// registered region's pages move onto a shared file, and a stack page
// (this thread's frames, written during the move) must not be one.
struct UdEnd {
  static constexpr std::size_t kBytes = kGrh + kMsg;
  rdma_cm_id* id = nullptr;
  char* buf = static_cast<char*>(std::aligned_alloc(4096, 4096));
  ibv_mr* mr = nullptr;
  UdEnd() = default;
  UdEnd(const UdEnd&) = delete;
  UdEnd& operator=(const UdEnd&) = delete;
  ~UdEnd() { std::free(buf); }
  bool make(rdma_cm_id* of) {
    std::memset(buf, 0, 4096);
    id = of;
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_UD;
    attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
    if (rdma_create_qp(id, nullptr, &attr) != 0) return false;
    mr = ibv_reg_mr(id->pd, buf, kBytes, IBV_ACCESS_LOCAL_WRITE);
    return mr != nullptr;
  }
  bool post_recv() {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(buf), static_cast<std::uint32_t>(kBytes), mr->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(id->qp, &wr, &bad) == 0;
  }
  bool send(ibv_ah* ah, std::uint32_t qpn, std::uint32_t qkey, const std::string& text) {
    std::memset(buf + kGrh, 0, kMsg);
    std::memcpy(buf + kGrh, text.data(), text.size());
    ibv_sge sge{reinterpret_cast<std::uint64_t>(buf + kGrh), static_cast<std::uint32_t>(kMsg), mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = qpn;
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(id->qp, &wr, &bad) == 0;
  }
  // One completion of `cq` within 10 s.
  static bool poll(ibv_cq* cq, ibv_wc& wc) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      if (const int n = ibv_poll_cq(cq, 1, &wc); n != 0) return n == 1 && wc.status == IBV_WC_SUCCESS;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
  }
  std::string text() const { return std::string(buf + kGrh, strnlen(buf + kGrh, kMsg)); }
  void close() {
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (id != nullptr && id->qp != nullptr) rdma_destroy_qp(id);
  }
};

// A client UD ID on `ch` resolved to our address and `port`, its QP made.
rdma_cm_id* resolved_client(rdma_event_channel* ch, std::uint16_t port, UdEnd* end, Check& check) {
  rdma_cm_id* id = nullptr;
  if (!check(rdma_create_id(ch, &id, nullptr, RDMA_PS_UDP) == 0, "rdma_create_id(RDMA_PS_UDP)")) return nullptr;
  check(id->qp_type == IBV_QPT_UD, "a UDP ID's qp_type is UD");
  sockaddr_in at = address(port);
  check(rdma_resolve_addr(id, nullptr, sa(&at), 1000) == 0, "rdma_resolve_addr");
  check(next_cm_event(ch).type == RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED");
  check(rdma_resolve_route(id, 1000) == 0, "rdma_resolve_route");
  check(next_cm_event(ch).type == RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED");
  if (end != nullptr) check(end->make(id), std::string("the client's UD QP: ") + strerror(errno));
  return id;
}

// The whole scenario in this process's device (in-process or uroced's).
std::string sidr_scenario(std::uint16_t port) {
  Check check;
  rdma_event_channel* server_ch = rdma_create_event_channel();
  rdma_event_channel* client_ch = rdma_create_event_channel();
  if (!check(server_ch != nullptr && client_ch != nullptr, "event channels")) return check.failures;
  rdma_cm_id* listener = nullptr;
  check(rdma_create_id(server_ch, &listener, nullptr, RDMA_PS_UDP) == 0, "the listener's ID");
  sockaddr_in at = address(port);
  check(rdma_bind_addr(listener, sa(&at)) == 0, "rdma_bind_addr");
  check(rdma_listen(listener, 4) == 0, "rdma_listen");

  // SIDR: the request's private data arrives; the answer names the QP.
  UdEnd client;
  rdma_cm_id* client_id = resolved_client(client_ch, port, &client, check);
  if (!check(client_id != nullptr && client.mr != nullptr, "the client")) return check.failures;
  const char hello[] = "hello sidr";
  rdma_conn_param cp{};
  cp.private_data = hello;
  cp.private_data_len = sizeof hello;
  check(rdma_connect(client_id, &cp) == 0, std::string("rdma_connect: ") + strerror(errno));
  CmEvent req = next_cm_event(server_ch);
  if (!check(req.type == RDMA_CM_EVENT_CONNECT_REQUEST, std::string("CONNECT_REQUEST, got ") + req.name())) {
    return check.failures;
  }
  check(req.data == hello, "the request's private data: '" + req.data + "'");
  check(req.id->qp_type == IBV_QPT_UD, "the request's ID is UD");
  UdEnd server;
  check(server.make(req.id), std::string("the server's UD QP: ") + strerror(errno));
  const char welcome[] = "welcome";
  rdma_conn_param ap{};
  ap.private_data = welcome;
  ap.private_data_len = sizeof welcome;
  check(rdma_accept(req.id, &ap) == 0, std::string("rdma_accept: ") + strerror(errno));
  CmEvent est = next_cm_event(client_ch);
  if (!check(est.type == RDMA_CM_EVENT_ESTABLISHED, std::string("ESTABLISHED, got ") + est.name() +
                                                         " status " + std::to_string(est.status))) {
    return check.failures;
  }
  check(est.ud.qp_num == server.id->qp->qp_num, "ESTABLISHED names the server's QP");
  check(est.ud.qkey == kUdpQkey, "ESTABLISHED's Q_Key is RDMA_UDP_QKEY");
  check(est.data == welcome, "the answer's private data: '" + est.data + "'");
  check(est.ud.ah_attr.is_global == 1 && std::memcmp(est.ud.ah_attr.grh.dgid.raw + 12, kOurIp.data(), 4) == 0,
        "the AH attributes lead to the server's address");

  // Datagrams both ways: to the event's AH, QPN and Q_Key; back through
  // the AH made from the datagram received.
  check(server.post_recv(), "server post_recv");
  ibv_ah* to_server = ibv_create_ah(client.id->pd, &est.ud.ah_attr);
  check(to_server != nullptr, "ibv_create_ah(event's ah_attr)");
  check(client.send(to_server, est.ud.qp_num, est.ud.qkey, "ping from the client"), "client send");
  ibv_wc wc{};
  check(UdEnd::poll(client.id->send_cq, wc), "the client's send completes");
  ibv_wc in{};
  if (check(UdEnd::poll(server.id->recv_cq, in), "the server receives the datagram")) {
    check(server.text() == "ping from the client", "the server's data: '" + server.text() + "'");
    check(in.src_qp == client.id->qp->qp_num && (in.wc_flags & IBV_WC_GRH), "from the client's QP, with a GRH");
    ibv_ah* back = ibv_create_ah_from_wc(server.id->pd, &in, reinterpret_cast<ibv_grh*>(server.buf), 1);
    check(back != nullptr, "ibv_create_ah_from_wc");
    check(client.post_recv(), "client post_recv");
    check(server.send(back, in.src_qp, kUdpQkey, "pong from the server"), "server send");
    check(UdEnd::poll(server.id->send_cq, wc), "the server's send completes");
    if (check(UdEnd::poll(client.id->recv_cq, in), "the client receives the answer")) {
      check(client.text() == "pong from the server", "the client's data: '" + client.text() + "'");
    }
    if (back != nullptr) ibv_destroy_ah(back);
  }
  if (to_server != nullptr) ibv_destroy_ah(to_server);

  // A request the server refuses: SIDR_REP "rejected" with its private data.
  rdma_cm_id* refused = resolved_client(client_ch, port, nullptr, check);
  check(rdma_connect(refused, nullptr) == 0, "the second rdma_connect");
  CmEvent req2 = next_cm_event(server_ch);
  if (check(req2.type == RDMA_CM_EVENT_CONNECT_REQUEST, "the second CONNECT_REQUEST")) {
    const char no[] = "not now";
    check(rdma_reject(req2.id, no, sizeof no) == 0, "rdma_reject");
    CmEvent r = next_cm_event(client_ch);
    check(r.type == RDMA_CM_EVENT_UNREACHABLE && r.status == 2,
          std::string("a refused SIDR: UNREACHABLE status 2, got ") + r.name() + " " +
              std::to_string(r.status));
    check(r.data == no, "the refusal's private data: '" + r.data + "'");
    rdma_destroy_id(req2.id);
  }
  rdma_destroy_id(refused);

  // More private data than a SIDR_REQ carries after rdma_cm's header
  // (216 - 36 bytes): refused at the call.
  rdma_cm_id* big = resolved_client(client_ch, port, nullptr, check);
  std::array<char, 181> lots{};
  rdma_conn_param bp{};
  bp.private_data = lots.data();
  bp.private_data_len = static_cast<std::uint8_t>(lots.size());
  check(rdma_connect(big, &bp) != 0 && errno == EINVAL, "181 bytes of private data: EINVAL");
  // A UD QP on an RC (TCP port space) ID is not what the ID connects.
  rdma_cm_id* rc = nullptr;
  check(rdma_create_id(client_ch, &rc, nullptr, RDMA_PS_TCP) == 0 && rc->qp_type == IBV_QPT_RC, "an RC ID");
  ibv_qp_init_attr ud_attr{};
  ud_attr.qp_type = IBV_QPT_UD;
  ud_attr.cap = ibv_qp_cap{1, 1, 1, 1, 0};
  check(rc != nullptr && rdma_create_qp(rc, big->pd, &ud_attr) != 0, "a UD QP on an RC ID is refused");
  rdma_destroy_id(rc);
  rdma_destroy_id(big);

  // Nobody listens on port + 1: "service ID not supported" (after the
  // library's retries of a listener that may be a moment late).
  rdma_cm_id* lost = resolved_client(client_ch, static_cast<std::uint16_t>(port + 1), nullptr, check);
  check(rdma_connect(lost, nullptr) == 0, "rdma_connect to nobody");
  CmEvent u = next_cm_event(client_ch);
  check(u.type == RDMA_CM_EVENT_UNREACHABLE && u.status == 1,
        std::string("no listener: UNREACHABLE status 1, got ") + u.name() + " " + std::to_string(u.status));
  rdma_destroy_id(lost);

  client.close();
  server.close();
  rdma_destroy_id(req.id);
  rdma_destroy_id(client_id);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(client_ch);
  rdma_destroy_event_channel(server_ch);
  return check.failures;
}

std::uint16_t scenario_port() { return static_cast<std::uint16_t>(21000 + getpid() % 20000); }

TEST(Sidr, InProcessResolvesAndCarriesDatagramsBothWaysRejectsAndAnswersNoService) {
  const std::string eal = "--no-huge --no-shconf --no-pci -l 0 -m 256 --vdev=net_ring0 --file-prefix=sidr" +
                          std::to_string(getpid()) + " --log-level=lib.eal:error";
  setenv("UROCE_EAL", eal.c_str(), 1);
  setenv("UROCE_IP", "10.0.0.1/24", 1);
  alarm(60);  // a hung library fails the test, not the suite
  const std::string failures = sidr_scenario(scenario_port());
  alarm(0);
  EXPECT_TRUE(failures.empty()) << failures;
}

// The same scenario in a child whose device and CM are uroced's: the
// requests, answers and events go through the daemon's CM relay.
TEST(Sidr, ThroughUrocedTheSameScenarioPasses) {
  uroce::test::TempDir dir("/tmp/uroce-sidr-");
  uroce::test::Uroced daemon(uroce::test::ring_uroced("sidr", dir.dir));
  ASSERT_TRUE(daemon.error.empty()) << daemon.error;
  // This binary again, as the child; none of this process's in-process
  // settings (UROCE_EAL) go with it.
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  uroce::test::Process child =
      uroce::test::spawn("env -u UROCE_EAL -u UROCE_IP " + std::string(UROCE_RUN) + " --service --socket " +
                             daemon.socket + " " + self + " --child " + std::to_string(scenario_port() + 2),
                         dir.dir + "/child.log");
  const int rc = child.wait(std::chrono::seconds(90));
  EXPECT_EQ(rc, 0) << child.out() << "\nuroced:\n" << daemon.out();
}

}  // namespace

int main(int argc, char** argv) {
  // The child of ThroughUroced: the scenario alone, its failures on stderr.
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) {
    alarm(60);
    const std::string failures = sidr_scenario(static_cast<std::uint16_t>(std::atoi(argv[2])));
    std::fputs(failures.c_str(), stderr);
    return failures.empty() ? 0 : 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
