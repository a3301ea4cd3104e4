// A connection whose QP the program destroys with ibv_destroy_qp, not
// rdma_destroy_qp (perftest does, before rdma_destroy_id): the CM forgets
// the QP at once (ibv_destroy_qp's hook), so nothing later in the
// connection's life (the peer's DREQ, our DREQ's DREP or its resends, the
// ID's destruction) touches it, nor a new QP the allocator put at the same
// address. Before, the CM kept the pointer and moved whatever QP lived
// there to ERR. In this process on net_ring; run under AddressSanitizer by
// tools/asan.sh.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/rdmacm_rig.h"

namespace {

using uroce::test::CmEvent;
using uroce::test::next_cm_event;

using uroce::test::Deadline;
using uroce::test::next_port;
using uroce::test::sa;

void configure() { uroce::test::configure_net_ring("cmqpgone"); }

// A client and a server of this process, connected through the CM, on one
// channel.
struct Connection {
  rdma_event_channel* ch = nullptr;
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
  rdma_cm_id* server = nullptr;

  void open() {
    ch = rdma_create_event_channel();
    ASSERT_NE(ch, nullptr);
    ASSERT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in at = uroce::test::ipv4(next_port());
    ASSERT_EQ(rdma_bind_addr(listener, sa(&at)), 0);
    ASSERT_EQ(rdma_listen(listener, 4), 0);
    ASSERT_EQ(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP), 0);
    ASSERT_EQ(rdma_resolve_addr(client, nullptr, sa(&at), 1000), 0);
    ASSERT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_EQ(rdma_resolve_route(client, 1000), 0);
    ASSERT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ROUTE_RESOLVED);
    ibv_qp_init_attr attr = qp_attr();
    ASSERT_EQ(rdma_create_qp(client, nullptr, &attr), 0) << strerror(errno);
    rdma_conn_param param{};
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    ASSERT_EQ(rdma_connect(client, &param), 0);
    rdma_cm_event* e = nullptr;
    ASSERT_EQ(rdma_get_cm_event(ch, &e), 0);
    ASSERT_EQ(e->event, RDMA_CM_EVENT_CONNECT_REQUEST);
    server = e->id;
    rdma_ack_cm_event(e);
    attr = qp_attr();
    ASSERT_EQ(rdma_create_qp(server, nullptr, &attr), 0) << strerror(errno);
    ASSERT_EQ(rdma_accept(server, &param), 0);
    ASSERT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ESTABLISHED);
    ASSERT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ESTABLISHED);
  }

  static ibv_qp_init_attr qp_attr() {
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_RC;
    attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
    return attr;
  }

  // rdma_destroy_qp also for an ID whose QP went the verbs way: the CQs
  // rdma_create_qp made are its to destroy.
  void close() {
    for (rdma_cm_id* id : {client, server}) rdma_destroy_qp(id);
    EXPECT_EQ(rdma_destroy_id(client), 0);
    EXPECT_EQ(rdma_destroy_id(server), 0);
    EXPECT_EQ(rdma_destroy_id(listener), 0);
    rdma_destroy_event_channel(ch);
  }
};

// `id`'s QP destroyed the verbs way, and QPs like it made at once on the
// same PD and CQs: the allocator may put one where the old one was (its
// verbs struct, or uroce's QP behind it). The new QPs are the caller's.
constexpr int kReplacements = 32;
std::vector<ibv_qp*> destroy_and_replace(rdma_cm_id* id) {
  ibv_qp* old = id->qp;
  ibv_cq* send_cq = old->send_cq;
  ibv_cq* recv_cq = old->recv_cq;
  EXPECT_EQ(ibv_destroy_qp(old), 0);
  id->qp = nullptr;
  std::vector<ibv_qp*> fresh;
  for (int k = 0; k < kReplacements; ++k) {
    ibv_qp_init_attr attr = Connection::qp_attr();
    attr.send_cq = send_cq;
    attr.recv_cq = recv_cq;
    ibv_qp* qp = ibv_create_qp(id->pd, &attr);
    EXPECT_NE(qp, nullptr);
    if (qp != nullptr) fresh.push_back(qp);
  }
  return fresh;
}

ibv_qp_state state_of(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(qp, &a, IBV_QP_STATE, &init) != 0) return IBV_QPS_UNKNOWN;
  return a.qp_state;
}

// The peer's DREQ reaches a connection whose QP is gone: it is answered and
// reported, and the QP now at that address stays in RESET.
TEST(CmDestroyedQp, ThePeersDisconnectLeavesANewQpAtTheSameAddressAlone) {
  configure();
  Deadline deadline(30);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(c.open());
  const std::vector<ibv_qp*> fresh = destroy_and_replace(c.client);
  ASSERT_EQ(rdma_disconnect(c.server), 0);
  EXPECT_EQ(next_cm_event(c.ch).type, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(next_cm_event(c.ch).type, RDMA_CM_EVENT_DISCONNECTED);
  for (ibv_qp* qp : fresh) {
    EXPECT_EQ(state_of(qp), IBV_QPS_RESET) << "moved by a connection it never had";
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
  }
  EXPECT_EQ(state_of(c.server->qp), IBV_QPS_ERR) << "the server's own QP is still moved to ERR";
  c.close();
}

// Our own DREQ is out (the QP moved to ERR) when the QP goes: its DREP,
// and any resend, touch nothing.
TEST(CmDestroyedQp, OurDisconnectsAnswerLeavesANewQpAtTheSameAddressAlone) {
  configure();
  Deadline deadline(30);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(c.open());
  ASSERT_EQ(rdma_disconnect(c.client), 0);
  const std::vector<ibv_qp*> fresh = destroy_and_replace(c.client);
  EXPECT_EQ(next_cm_event(c.ch).type, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(next_cm_event(c.ch).type, RDMA_CM_EVENT_DISCONNECTED);
  for (ibv_qp* qp : fresh) {
    EXPECT_EQ(state_of(qp), IBV_QPS_RESET) << "moved by a connection it never had";
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
  }
  c.close();
}

// Both QPs destroyed the verbs way while connected, then both IDs: the
// destroyed client ID's DREQ goes out, the server's side takes it, and no
// QP is touched (AddressSanitizer's run would report a freed one).
TEST(CmDestroyedQp, BothQpsGoneBeforeTheIdsAreDestroyed) {
  configure();
  Deadline deadline(30);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(c.open());
  EXPECT_EQ(ibv_destroy_qp(c.client->qp), 0);
  c.client->qp = nullptr;
  EXPECT_EQ(ibv_destroy_qp(c.server->qp), 0);
  c.server->qp = nullptr;
  rdma_destroy_qp(c.client);  // the CQs rdma_create_qp made
  EXPECT_EQ(rdma_destroy_id(c.client), 0);
  EXPECT_EQ(next_cm_event(c.ch).type, RDMA_CM_EVENT_DISCONNECTED);  // the server's, from the client's DREQ
  rdma_destroy_qp(c.server);
  EXPECT_EQ(rdma_destroy_id(c.server), 0);
  EXPECT_EQ(rdma_destroy_id(c.listener), 0);
  rdma_destroy_event_channel(c.ch);
}

// After the disconnect is over: the QP destroyed the verbs way, then the ID.
TEST(CmDestroyedQp, AQpDestroyedAfterTheDisconnectThenItsId) {
  configure();
  Deadline deadline(30);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(c.open());
  ASSERT_EQ(rdma_disconnect(c.server), 0);
  EXPECT_EQ(next_cm_event(c.ch).type, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(next_cm_event(c.ch).type, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(ibv_destroy_qp(c.client->qp), 0);
  c.client->qp = nullptr;
  EXPECT_EQ(ibv_destroy_qp(c.server->qp), 0);
  c.server->qp = nullptr;
  c.close();
}

}  // namespace
