// librdmacm.so.1 (ours) where rdma-core's behaviour is the contract
// (issue 27): in this process on net_ring, where frames to our own address
// come back in, so a client and a server of one process connect to each
// other through the CM:
//  - a CONNECT_REQUEST and the active side's ESTABLISHED report
//    responder_resources and initiator_depth in the receiver's terms, as
//    Linux's CM does (item 14);
//  - an ID bound to the device has the device's default PD, and
//    rdma_create_qp without CQs makes them, each with a completion channel,
//    and rdma_destroy_qp destroys only what it made (item 6);
//  - an IPv4 address given as v4-mapped IPv6 is taken as IPv4 (item 12);
//  - synchronous IDs (no channel) and the endpoint helpers: each call
//    returns when its event is in, rdma_get_request hands over a request
//    with its QP made, data moves with rdma_verbs.h's helpers (item 4).
// Stock programs run in rdmacm_stock_test.cc, a process with no EAL of its
// own (this one's pollers would take the CPUs theirs need).
// One device per process (EAL), so the tests share it; each listens on a
// port of its own.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include "support/rdmacm_rig.h"

namespace {

using uroce::test::CmEvent;
using uroce::test::next_cm_event;

using uroce::test::Deadline;
using uroce::test::ipv4;
using uroce::test::next_port;
using uroce::test::sa;

const std::array<std::uint8_t, 4>& kOurIp = uroce::test::kRdmacmIp;

void configure() { uroce::test::configure_net_ring("rdmacmapi"); }

sockaddr_in6 mapped(std::uint16_t port) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr.s6_addr[10] = a.sin6_addr.s6_addr[11] = 0xff;
  std::memcpy(a.sin6_addr.s6_addr + 12, kOurIp.data(), 4);
  a.sin6_port = htons(port);
  return a;
}

// Item 14. The client asks to read 5 at once from the server (initiator
// depth) and to take 3 of its reads (responder resources); the server
// sees the request in its own terms: 5 reads to take, 3 to issue. Its
// accept takes 2 and issues 1; the client's ESTABLISHED says, in the
// client's terms, 1 to take and 2 to issue.
TEST(RdmaCmApi, RequestAndEstablishedReportResourcesInTheReceiversTerms) {
  configure();
  Deadline deadline(30);
  const std::uint16_t port = next_port();
  rdma_event_channel* server_ch = rdma_create_event_channel();
  rdma_event_channel* client_ch = rdma_create_event_channel();
  ASSERT_NE(server_ch, nullptr);
  ASSERT_NE(client_ch, nullptr);
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(server_ch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in at = ipv4(port);
  ASSERT_EQ(rdma_bind_addr(listener, sa(&at)), 0);
  ASSERT_EQ(rdma_listen(listener, 4), 0);

  rdma_cm_id* client = nullptr;
  ASSERT_EQ(rdma_create_id(client_ch, &client, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, sa(&at), 1000), 0);
  EXPECT_EQ(next_cm_event(client_ch).type, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(client, 1000), 0);
  EXPECT_EQ(next_cm_event(client_ch).type, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(client, nullptr, &attr), 0) << strerror(errno);
  rdma_conn_param param{};
  param.responder_resources = 3;
  param.initiator_depth = 5;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  param.private_data = "resources";
  param.private_data_len = 10;
  ASSERT_EQ(rdma_connect(client, &param), 0);

  const CmEvent request = next_cm_event(server_ch);
  ASSERT_EQ(request.type, RDMA_CM_EVENT_CONNECT_REQUEST);
  EXPECT_EQ(request.data, "resources");
  EXPECT_EQ(request.conn.responder_resources, 5) << "the requester's initiator depth: the reads we take";
  EXPECT_EQ(request.conn.initiator_depth, 3) << "the requester's responder resources: the reads we issue";
  EXPECT_EQ(request.conn.qp_num, client->qp->qp_num);
  ibv_qp_init_attr server_attr{};
  server_attr.qp_type = IBV_QPT_RC;
  server_attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(request.id, nullptr, &server_attr), 0) << strerror(errno);
  rdma_conn_param answer{};
  answer.responder_resources = 2;
  answer.initiator_depth = 1;
  answer.rnr_retry_count = 7;
  ASSERT_EQ(rdma_accept(request.id, &answer), 0);

  const CmEvent established = next_cm_event(client_ch);
  ASSERT_EQ(established.type, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(established.conn.responder_resources, 1) << "the server's initiator depth: the reads the client takes";
  EXPECT_EQ(established.conn.initiator_depth, 2) << "the server's responder resources: the reads the client issues";
  EXPECT_EQ(established.conn.qp_num, request.id->qp->qp_num);
  EXPECT_EQ(next_cm_event(server_ch).type, RDMA_CM_EVENT_ESTABLISHED);
  // And the QPs were set up so: each issues what the other takes.
  ibv_qp_attr q{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(client->qp, &q, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &qi), 0);
  EXPECT_EQ(q.max_rd_atomic, 2);
  EXPECT_EQ(q.max_dest_rd_atomic, 1);

  ASSERT_EQ(rdma_disconnect(client), 0);
  EXPECT_EQ(next_cm_event(client_ch).type, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(next_cm_event(server_ch).type, RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_qp(client);
  rdma_destroy_qp(request.id);
  EXPECT_EQ(rdma_destroy_id(client), 0);
  EXPECT_EQ(rdma_destroy_id(request.id), 0);
  EXPECT_EQ(rdma_destroy_id(listener), 0);
  rdma_destroy_event_channel(server_ch);
  rdma_destroy_event_channel(client_ch);
}

// Connects a client and a server of one channel, each ID given
// RDMA_OPTION_ID_ACK_TIMEOUT first when its option is >= 0, and returns
// both QPs' timeouts (client, server); everything is destroyed again.
std::pair<int, int> connected_qp_timeouts(int client_option, int server_option) {
  std::pair<int, int> timeouts{-1, -1};
  rdma_event_channel* ch = rdma_create_event_channel();
  EXPECT_NE(ch, nullptr);
  if (ch == nullptr) return timeouts;
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
  EXPECT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in at = ipv4(next_port());
  EXPECT_EQ(rdma_bind_addr(listener, sa(&at)), 0);
  EXPECT_EQ(rdma_listen(listener, 4), 0);
  EXPECT_EQ(rdma_resolve_addr(client, nullptr, sa(&at), 1000), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(rdma_resolve_route(client, 1000), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ROUTE_RESOLVED);
  auto set_option = [](rdma_cm_id* id, int option) {
    if (option < 0) return;
    std::uint8_t t = static_cast<std::uint8_t>(option);
    EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, 1), 0);
  };
  set_option(client, client_option);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  EXPECT_EQ(rdma_create_qp(client, nullptr, &attr), 0) << strerror(errno);
  rdma_conn_param param{};
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  EXPECT_EQ(rdma_connect(client, &param), 0);
  const CmEvent request = next_cm_event(ch);
  EXPECT_EQ(request.type, RDMA_CM_EVENT_CONNECT_REQUEST);
  if (request.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
    EXPECT_EQ(rdma_create_qp(request.id, nullptr, &attr), 0) << strerror(errno);
    set_option(request.id, server_option);
    EXPECT_EQ(rdma_accept(request.id, &param), 0);
    // Both ESTABLISHED events come to the one channel, in either order.
    EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ESTABLISHED);
    ibv_qp_attr q{};
    ibv_qp_init_attr qi{};
    if (ibv_query_qp(client->qp, &q, IBV_QP_TIMEOUT, &qi) == 0) timeouts.first = q.timeout;
    if (ibv_query_qp(request.id->qp, &q, IBV_QP_TIMEOUT, &qi) == 0) timeouts.second = q.timeout;
    EXPECT_EQ(rdma_disconnect(client), 0);
    EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_DISCONNECTED);
    EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_DISCONNECTED);
    rdma_destroy_qp(request.id);
    EXPECT_EQ(rdma_destroy_id(request.id), 0);
  }
  rdma_destroy_qp(client);
  EXPECT_EQ(rdma_destroy_id(client), 0);
  EXPECT_EQ(rdma_destroy_id(listener), 0);
  rdma_destroy_event_channel(ch);
  return timeouts;
}

// Without RDMA_OPTION_ID_ACK_TIMEOUT, both QPs get what Linux's rdma_cm gives
// a RoCE path: the REQ names 19 (4.096 us * 2^19, Soft-RoCE's REQs in the
// golden captures carry 0x13), the active QP takes it, the passive QP takes
// the REQ's. A server that sets the option still wins on its side.
TEST(RdmaCmApi, QpsTakeLinuxsRoceAckTimeoutAndThePassiveSideTheReqs) {
  configure();
  Deadline deadline(30);
  EXPECT_EQ(connected_qp_timeouts(-1, -1), std::make_pair(19, 19));
  EXPECT_EQ(connected_qp_timeouts(-1, 16), std::make_pair(19, 16));
}

// RDMA_OPTION_ID_ACK_TIMEOUT (rdma-core's test_rdmacm_async_traffic sets
// 21): each side's QP gets the timeout its ID was given, on connect and on
// accept; a value a QP cannot hold (over 31) or of the wrong size is refused.
TEST(RdmaCmApi, TheAckTimeoutOptionSetsEachSidesQpTimeout) {
  configure();
  Deadline deadline(30);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  std::uint8_t too_big = 32;
  EXPECT_NE(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &too_big, 1), 0);
  EXPECT_EQ(errno, EINVAL);
  int wrong_size = 21;
  EXPECT_NE(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &wrong_size, sizeof wrong_size), 0);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  EXPECT_EQ(connected_qp_timeouts(21, 18), std::make_pair(21, 18));
}

// A program that destroys its connected QP with ibv_destroy_qp (perftest
// does, before rdma_destroy_id) and then hears the peer disconnect: the CM
// moves the QP to ERR only if it still exists, and otherwise leaves it (it
// used to modify the freed QP; AddressSanitizer's run shows a use after free).
TEST(RdmaCmApi, AQpDestroyedWithIbvDestroyQpIsLeftAloneByALaterDisconnect) {
  configure();
  Deadline deadline(30);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in at = ipv4(next_port());
  ASSERT_EQ(rdma_bind_addr(listener, sa(&at)), 0);
  ASSERT_EQ(rdma_listen(listener, 4), 0);
  rdma_cm_id* client = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, sa(&at), 1000), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(client, 1000), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(client, nullptr, &attr), 0) << strerror(errno);
  rdma_conn_param param{};
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  ASSERT_EQ(rdma_connect(client, &param), 0);
  const CmEvent request = next_cm_event(ch);
  ASSERT_EQ(request.type, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_EQ(rdma_create_qp(request.id, nullptr, &attr), 0) << strerror(errno);
  ASSERT_EQ(rdma_accept(request.id, &param), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ESTABLISHED);
  // The client's QP goes the verbs way, its ID stays; then the server ends
  // the connection, and the client's DISCONNECTED still comes.
  ASSERT_EQ(ibv_destroy_qp(client->qp), 0);
  client->qp = nullptr;
  ASSERT_EQ(rdma_disconnect(request.id), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_DISCONNECTED);
  ibv_qp_attr q{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(request.id->qp, &q, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_ERR) << "the server's own QP is still moved to ERR";
  rdma_destroy_qp(request.id);
  EXPECT_EQ(rdma_destroy_id(client), 0);
  EXPECT_EQ(rdma_destroy_id(request.id), 0);
  EXPECT_EQ(rdma_destroy_id(listener), 0);
  rdma_destroy_event_channel(ch);
}

// Item 6.
TEST(RdmaCmApi, BoundIdsShareTheDefaultPdAndCreateQpMakesTheCqsItIsNotGiven) {
  configure();
  Deadline deadline(30);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* a = nullptr;
  rdma_cm_id* b = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &a, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_create_id(ch, &b, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(a->pd, nullptr) << "not bound to a device yet";
  sockaddr_in peer = ipv4(next_port());
  ASSERT_EQ(rdma_resolve_addr(a, nullptr, sa(&peer), 1000), 0);
  sockaddr_in local = ipv4(next_port());
  ASSERT_EQ(rdma_bind_addr(b, sa(&local)), 0);
  ASSERT_NE(a->pd, nullptr) << "rdma_resolve_addr binds the ID to the device: its default PD";
  EXPECT_EQ(a->pd, b->pd) << "one default PD per device";
  EXPECT_EQ(a->pd->context, a->verbs);

  // No PD, no CQs: the default PD and two CQs with completion channels,
  // sized from the capabilities, the ID their context.
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap = ibv_qp_cap{8, 16, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(a, nullptr, &attr), 0) << strerror(errno);
  ASSERT_NE(a->qp, nullptr);
  EXPECT_EQ(a->qp->pd, a->pd);
  ASSERT_NE(a->send_cq, nullptr);
  ASSERT_NE(a->recv_cq, nullptr);
  EXPECT_NE(a->send_cq, a->recv_cq);
  ASSERT_NE(a->send_cq_channel, nullptr);
  ASSERT_NE(a->recv_cq_channel, nullptr);
  EXPECT_EQ(a->recv_cq->channel, a->recv_cq_channel);
  EXPECT_EQ(a->recv_cq->cq_context, a);
  EXPECT_GE(a->send_cq->cqe, 8);
  EXPECT_GE(a->recv_cq->cqe, 16);
  EXPECT_EQ(attr.send_cq, a->send_cq) << "the attributes say what the QP was made with";
  EXPECT_EQ(a->qp->recv_cq, a->recv_cq);
  EXPECT_NE(rdma_create_qp(a, nullptr, &attr), 0) << "one QP per ID";
  // The recv CQ works with its channel: armed, it reports nothing yet.
  EXPECT_EQ(ibv_req_notify_cq(a->recv_cq, 0), 0);
  rdma_destroy_qp(a);
  EXPECT_EQ(a->qp, nullptr);
  EXPECT_EQ(a->send_cq, nullptr);
  EXPECT_EQ(a->recv_cq, nullptr);
  EXPECT_EQ(a->recv_cq_channel, nullptr);

  // The caller's own CQ: used, and left to the caller.
  ibv_cq* mine = ibv_create_cq(b->verbs, 8, nullptr, nullptr, 0);
  ASSERT_NE(mine, nullptr);
  ibv_qp_init_attr given{};
  given.qp_type = IBV_QPT_RC;
  given.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  given.send_cq = mine;
  ASSERT_EQ(rdma_create_qp(b, nullptr, &given), 0) << strerror(errno);
  EXPECT_EQ(b->qp->send_cq, mine);
  EXPECT_EQ(b->send_cq, nullptr) << "only CQs it made are the ID's";
  ASSERT_NE(b->recv_cq, nullptr);
  EXPECT_EQ(b->qp->recv_cq, b->recv_cq);
  rdma_destroy_qp(b);
  EXPECT_EQ(ibv_destroy_cq(mine), 0) << "rdma_destroy_qp destroyed the caller's CQ";

  EXPECT_EQ(rdma_destroy_id(a), 0);
  EXPECT_EQ(rdma_destroy_id(b), 0);
  // With the last ID the default PD goes; the next bound ID has one again.
  rdma_cm_id* c = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &c, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_resolve_addr(c, nullptr, sa(&peer), 1000), 0);
  ASSERT_NE(c->pd, nullptr);
  ibv_mr* mr = nullptr;
  std::array<char, 64> buf{};
  mr = ibv_reg_mr(c->pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  EXPECT_NE(mr, nullptr) << "the PD is alive";
  if (mr != nullptr) ibv_dereg_mr(mr);
  EXPECT_EQ(rdma_destroy_id(c), 0);
  rdma_destroy_event_channel(ch);
}

// Item 12: ::ffff:10.0.0.1 is 10.0.0.1.
TEST(RdmaCmApi, AnIpv4AddressGivenAsV4MappedIpv6IsTakenAsIpv4) {
  configure();
  Deadline deadline(30);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  const std::uint16_t port = next_port();
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in6 at6 = mapped(port);
  ASSERT_EQ(rdma_bind_addr(listener, sa(&at6)), 0) << strerror(errno);
  EXPECT_EQ(ntohs(rdma_get_src_port(listener)), port);
  EXPECT_EQ(listener->route.addr.src_addr.sa_family, AF_INET);
  ASSERT_EQ(rdma_listen(listener, 4), 0);

  rdma_cm_id* client = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, sa(&at6), 1000), 0) << strerror(errno);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ADDR_RESOLVED);
  const auto* dst = reinterpret_cast<const sockaddr_in*>(&client->route.addr.dst_addr);
  EXPECT_EQ(dst->sin_family, AF_INET);
  EXPECT_EQ(std::memcmp(&dst->sin_addr, kOurIp.data(), 4), 0);
  EXPECT_EQ(ntohs(dst->sin_port), port);
  // ... and a connection to it gets through.
  ASSERT_EQ(rdma_resolve_route(client, 1000), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(client, nullptr, &attr), 0);
  ASSERT_EQ(rdma_connect(client, nullptr), 0);
  const CmEvent request = next_cm_event(ch);
  ASSERT_EQ(request.type, RDMA_CM_EVENT_CONNECT_REQUEST);
  EXPECT_EQ(rdma_reject(request.id, nullptr, 0), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_REJECTED);
  rdma_destroy_qp(client);
  rdma_destroy_id(request.id);
  rdma_destroy_id(client);

  // A real IPv6 address is not one uroce's rdma_cm has.
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_addr.s6_addr[0] = 0x20;
  v6.sin6_addr.s6_addr[15] = 1;
  rdma_cm_id* other = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &other, nullptr, RDMA_PS_TCP), 0);
  EXPECT_NE(rdma_resolve_addr(other, nullptr, sa(&v6), 1000), 0);
  EXPECT_NE(rdma_bind_addr(other, sa(&v6)), 0);
  rdma_destroy_id(other);

  // rdma_getaddrinfo: the mapped literal comes back as IPv4.
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("::ffff:10.0.0.1", std::to_string(port).c_str(), nullptr, &res), 0);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET);
  EXPECT_EQ(res->ai_dst_addr->sa_family, AF_INET);
  const auto* got = reinterpret_cast<const sockaddr_in*>(res->ai_dst_addr);
  EXPECT_EQ(std::memcmp(&got->sin_addr, kOurIp.data(), 4), 0);
  EXPECT_EQ(ntohs(got->sin_port), port);
  rdma_freeaddrinfo(res);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(ch);
}

// Item 4: an ID with no channel is synchronous; each call returns once
// its event is in, kept in id->event.
// rdma_destroy_id returns only once every event reported for the ID has
// been acknowledged (rdma-core's rule, which rping's teardown relies on:
// its event thread handles the last event while main destroys the ID, then
// the channel). An event read and not yet acknowledged holds the destroy;
// the acknowledgement lets it through.
TEST(RdmaCmApi, DestroyingAnIdWaitsForItsEventsToBeAcknowledged) {
  configure();
  Deadline deadline(30);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in peer = ipv4(next_port());
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(&peer), 1000), 0);
  rdma_cm_event* e = nullptr;
  ASSERT_EQ(rdma_get_cm_event(ch, &e), 0);
  ASSERT_EQ(e->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    EXPECT_EQ(rdma_destroy_id(id), 0);
    destroyed.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(destroyed.load()) << "rdma_destroy_id returned with an event of the ID unacknowledged";
  EXPECT_EQ(rdma_ack_cm_event(e), 0);
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
  // An ID with every event acknowledged goes at once, and a read on a
  // channel already destroyed is refused, not left waiting.
  rdma_cm_id* other = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &other, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(rdma_destroy_id(other), 0);
  rdma_destroy_event_channel(ch);
}

TEST(RdmaCmApi, ASynchronousIdWaitsForEachEventAndARefusalIsItsError) {
  configure();
  Deadline deadline(30);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0) << strerror(errno);
  ASSERT_NE(id->channel, nullptr) << "a channel of its own";
  sockaddr_in nobody = ipv4(next_port());
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(&nobody), 1000), 0);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(id, 1000), 0);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(id, nullptr, &attr), 0);
  // Nobody listens there: the REQ is refused, and rdma_connect says so.
  EXPECT_EQ(rdma_connect(id, nullptr), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_REJECTED);
  // Its channel is its own: nothing else is queued there, and
  // rdma_get_request is for synchronous listeners only.
  rdma_cm_id* none = nullptr;
  rdma_cm_id* async = nullptr;
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_EQ(rdma_create_id(ch, &async, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(rdma_get_request(async, &none), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_destroy_id(async);
  rdma_destroy_event_channel(ch);
  rdma_destroy_ep(id);
}

// Item 4: rdma_migrate_id between the two kinds (libfabric makes its IDs
// synchronous, then moves them to its own channel): events go with the ID.
TEST(RdmaCmApi, MigratingAnIdMakesItAsynchronousOrSynchronous) {
  configure();
  Deadline deadline(30);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in peer = ipv4(next_port());
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(&peer), 1000), 0);
  ASSERT_NE(id->event, nullptr);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(rdma_migrate_id(id, ch), 0);
  EXPECT_EQ(id->channel, ch);
  EXPECT_EQ(id->event, nullptr) << "the synchronous call's event went with its channel";
  // Asynchronous now: the call returns at once, its event waits on `ch`.
  ASSERT_EQ(rdma_resolve_route(id, 1000), 0);
  EXPECT_EQ(id->event, nullptr);
  const CmEvent route = next_cm_event(ch);
  EXPECT_EQ(route.type, RDMA_CM_EVENT_ROUTE_RESOLVED);
  EXPECT_EQ(route.id, id);
  // An unread event moves with the ID to its new channel of its own.
  ASSERT_EQ(rdma_resolve_route(id, 1000), 0);
  ASSERT_EQ(rdma_migrate_id(id, nullptr), 0);
  EXPECT_NE(id->channel, ch);
  const CmEvent moved = next_cm_event(id->channel);
  EXPECT_EQ(moved.type, RDMA_CM_EVENT_ROUTE_RESOLVED);
  // Synchronous again: a call waits for its event.
  ASSERT_EQ(rdma_resolve_route(id, 1000), 0);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
  EXPECT_EQ(rdma_migrate_id(id, nullptr), -1) << "synchronous already";
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
}

// Item 4: rdma_server and rdma_client's shape (rdma-core's examples):
// endpoints from rdma_getaddrinfo, rdma_get_request, accept and connect
// without parameters, messages with rdma_verbs.h's helpers.
TEST(RdmaCmApi, SynchronousEndpointsConnectMoveAMessageEachWayAndDisconnect) {
  configure();
  Deadline deadline(30);
  const std::string port = std::to_string(next_port());
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* passive = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("10.0.0.1", port.c_str(), &hints, &passive), 0);
  ibv_qp_init_attr attr{};
  attr.cap = ibv_qp_cap{1, 1, 1, 1, 16};
  attr.sq_sig_all = 1;
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_ep(&listener, passive, nullptr, &attr), 0) << strerror(errno);
  rdma_freeaddrinfo(passive);
  EXPECT_EQ(listener->qp, nullptr) << "a listener has no QP: each request gets one";
  ASSERT_EQ(rdma_listen(listener, 0), 0);

  auto server = std::async(std::launch::async, [listener]() -> std::string {
    rdma_cm_id* id = nullptr;
    if (rdma_get_request(listener, &id) != 0) return std::string("rdma_get_request: ") + strerror(errno);
    if (id->qp == nullptr || id->event == nullptr || id->event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      return "the request came without its QP or its event";
    }
    std::array<char, 16> recv{};
    std::array<char, 16> send{};
    std::strcpy(send.data(), "from server");
    ibv_mr* rmr = rdma_reg_msgs(id, recv.data(), recv.size());
    ibv_mr* smr = rdma_reg_msgs(id, send.data(), send.size());
    if (rmr == nullptr || smr == nullptr) return "rdma_reg_msgs failed";
    if (rdma_post_recv(id, nullptr, recv.data(), recv.size(), rmr) != 0) return "rdma_post_recv failed";
    if (rdma_accept(id, nullptr) != 0) return std::string("rdma_accept: ") + strerror(errno);
    if (id->event == nullptr || id->event->event != RDMA_CM_EVENT_ESTABLISHED) return "accept returned before ESTABLISHED";
    ibv_wc wc{};
    if (rdma_get_recv_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) return "no receive completion";
    if (std::string(recv.data()) != "from client") return "received '" + std::string(recv.data()) + "'";
    if (rdma_post_send(id, nullptr, send.data(), send.size(), smr, 0) != 0) return "rdma_post_send failed";
    if (rdma_get_send_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) return "no send completion";
    if (rdma_disconnect(id) != 0) return std::string("rdma_disconnect: ") + strerror(errno);
    rdma_dereg_mr(rmr);
    rdma_dereg_mr(smr);
    rdma_destroy_ep(id);
    return "";
  });

  rdma_addrinfo* active = nullptr;
  rdma_addrinfo chints{};
  chints.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo("10.0.0.1", port.c_str(), &chints, &active), 0);
  // No inline data asked for, 16 bytes sent inline (rdma_xclient's way):
  // the QP has inline room for one SGE per send SGE, as Soft-RoCE's has.
  ibv_qp_init_attr cattr{};
  cattr.cap = ibv_qp_cap{1, 1, 1, 1, 0};
  cattr.sq_sig_all = 1;
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_ep(&id, active, nullptr, &cattr), 0) << strerror(errno);
  rdma_freeaddrinfo(active);
  ASSERT_NE(id->qp, nullptr);
  ASSERT_NE(id->pd, nullptr);
  std::array<char, 16> recv{};
  std::array<char, 16> send{};
  std::strcpy(send.data(), "from client");
  ibv_mr* rmr = rdma_reg_msgs(id, recv.data(), recv.size());
  ibv_mr* smr = rdma_reg_msgs(id, send.data(), send.size());
  ASSERT_NE(rmr, nullptr);
  ASSERT_NE(smr, nullptr);
  ASSERT_EQ(rdma_post_recv(id, nullptr, recv.data(), recv.size(), rmr), 0);
  ASSERT_EQ(rdma_connect(id, nullptr), 0) << strerror(errno);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ESTABLISHED) << "rdma_connect returns once connected";
  ASSERT_EQ(rdma_post_send(id, nullptr, send.data(), send.size(), nullptr, IBV_SEND_INLINE), 0) << strerror(errno);
  ibv_wc wc{};
  ASSERT_GT(rdma_get_send_comp(id, &wc), 0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_GT(rdma_get_recv_comp(id, &wc), 0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_STREQ(recv.data(), "from server");
  EXPECT_EQ(rdma_disconnect(id), 0) << strerror(errno);
  EXPECT_EQ(server.get(), "");
  rdma_dereg_mr(rmr);
  rdma_dereg_mr(smr);
  rdma_destroy_ep(id);
  rdma_destroy_ep(listener);
}

}  // namespace
