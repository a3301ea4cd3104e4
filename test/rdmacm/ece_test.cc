// ECE and the transport options of issue 30 through our libibverbs and
// librdmacm, in process and through uroced:
//  - ibv_query_ece and ibv_set_ece: uroce's vendor id, the options this
//    build runs (kEceSelectiveRepeat only if the transport runs it), none
//    under another vendor's id or on a QP other than RC, EINVAL for a
//    comp_mask or past INIT;
//  - two uroce ends over rdma_cm (rdma_create_qp, the CM moves the QPs):
//    ECE in the REQ and REP, each QP's ECE afterwards what both agreed;
//  - rdma_reject_ece: the client sees REJECTED with IBTA's reason 35;
//  - UROCE_TRANSPORT (uroce-run --transport): bdp=N reaches every RC QP
//    rdma_cm makes (read back from the QP); sr is refused with one line
//    until the transport runs it; a malformed value is refused.
// Each case in a forked child that has not touched the device; the process
// connects to itself (net_ring reflects frames to our own address).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "ibverbs/internal.h"
#include "support/rdmacm_rig.h"
#include "support/uroced.h"
#include "uroce/verbs.h"

namespace {

using uroce::test::CmEvent;
using uroce::test::next_cm_event;

using namespace std::chrono_literals;

const std::string kEal = "--no-huge --no-shconf --no-pci -l 0 -m 256 --vdev=net_ring0 --log-level=lib.eal:error";

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "ece_test:%d: %s failed (errno %d)\n", __LINE__, #cond, errno); \
      return __LINE__ % 250 + 1;                                                            \
    }                                                                                       \
  } while (0)

std::uint32_t supported() {
  return uroce::QueuePair::transport_capabilities().selective_repeat ? uroce::kEceSelectiveRepeat : 0;
}

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq, ibv_qp_type type) {
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = type;
  ia.cap = {4, 4, 1, 1, 0};
  return ibv_create_qp(pd, &ia);
}

// Moves `qp` (in INIT) to RTR, connected to itself: where ECE's agreement
// is applied. 0, or the failing line.
int to_rtr_self(ibv_context* ctx, ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = qp->qp_num;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  CHECK(ibv_query_gid(ctx, 1, 1, &a.ah_attr.grh.dgid) == 0);
  CHECK(ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
  return 0;
}

// ibv_query_ece and ibv_set_ece on QPs of the device.
int ece_values() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  CHECK(list != nullptr && n == 1);
  ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx != nullptr);
  ibv_device_attr dev{};
  CHECK(ibv_query_device(ctx, &dev) == 0);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  CHECK(pd != nullptr && cq != nullptr);
  ibv_qp* qp = make_qp(pd, cq, IBV_QPT_RC);
  ibv_qp* ud = make_qp(pd, cq, IBV_QPT_UD);
  CHECK(qp != nullptr && ud != nullptr);

  // A new QP offers nothing (no UROCE_TRANSPORT), under uroce's vendor id.
  ibv_ece ece{1, 1, 1};
  CHECK(ibv_query_ece(qp, &ece) == 0);
  CHECK(ece.vendor_id == dev.vendor_id && ece.options == 0 && ece.comp_mask == 0);
  CHECK(ibv_query_ece(qp, nullptr) == EINVAL);
  CHECK(ibv_set_ece(qp, nullptr) == EINVAL);
  ece = {dev.vendor_id, uroce::kEceSelectiveRepeat, 1};
  CHECK(ibv_set_ece(qp, &ece) == EINVAL);
  // Every bit asked: what this build runs is kept.
  ece = {dev.vendor_id, 0xffffffff, 0};
  CHECK(ibv_set_ece(qp, &ece) == 0);
  ece = {};
  CHECK(ibv_query_ece(qp, &ece) == 0 && ece.vendor_id == dev.vendor_id && ece.options == supported());
  // Another vendor's options mean nothing here.
  ece = {0x15b3, uroce::kEceSelectiveRepeat, 0};
  CHECK(ibv_set_ece(qp, &ece) == 0);
  ece = {};
  CHECK(ibv_query_ece(qp, &ece) == 0 && ece.vendor_id == dev.vendor_id && ece.options == 0);
  // A UD QP's transport has no options.
  ece = {dev.vendor_id, uroce::kEceSelectiveRepeat, 0};
  CHECK(ibv_set_ece(ud, &ece) == 0);
  CHECK(ibv_query_ece(ud, &ece) == 0 && ece.options == 0);

  // Settled at RTR: refused after.
  ece = {dev.vendor_id, uroce::kEceSelectiveRepeat, 0};
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  CHECK(ibv_set_ece(qp, &ece) == 0);
  if (const int e = to_rtr_self(ctx, qp); e != 0) return e;
  CHECK(ibv_set_ece(qp, &ece) == EINVAL);
  CHECK(ibv_query_ece(qp, &ece) == 0 && ece.options == supported());

  CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_qp(ud) == 0);
  CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
  return 0;
}

// A listener and a client ID with its route resolved, on one process.
struct Pair {
  rdma_event_channel* lch = nullptr;
  rdma_event_channel* cch = nullptr;
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
};

int resolve(Pair& p) {
  p.lch = rdma_create_event_channel();
  p.cch = rdma_create_event_channel();
  CHECK(p.lch != nullptr && p.cch != nullptr);
  CHECK(rdma_create_id(p.lch, &p.listener, nullptr, RDMA_PS_TCP) == 0);
  CHECK(rdma_create_id(p.cch, &p.client, nullptr, RDMA_PS_TCP) == 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "10.0.0.1", &addr.sin_addr);
  CHECK(rdma_bind_addr(p.listener, reinterpret_cast<sockaddr*>(&addr)) == 0);
  CHECK(rdma_listen(p.listener, 4) == 0);
  addr.sin_port = rdma_get_src_port(p.listener);
  CHECK(rdma_resolve_addr(p.client, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) == 0);
  CHECK(next_cm_event(p.cch, 20000).type == RDMA_CM_EVENT_ADDR_RESOLVED);
  CHECK(rdma_resolve_route(p.client, 2000) == 0);
  CHECK(next_cm_event(p.cch, 20000).type == RDMA_CM_EVENT_ROUTE_RESOLVED);
  return 0;
}

ibv_qp_init_attr rc_attr() {
  ibv_qp_init_attr ia{};
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  return ia;
}

// How the QP under `qp` runs (the transport options uroce's QP reports).
uroce::TransportOptions options_of(ibv_qp* qp) { return uroce::ibverbs::qp_of(qp)->qp->transport_options(); }

// UROCE_TRANSPORT=sr and an RC QP on an SRQ: selective repeat does not run
// there, so the QP offers nothing in ECE and moves to RTR in go-back-N
// (rdma_create_qp and ibv_modify_qp do not fail for it).
int srq_qp_runs_go_back_n() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  CHECK(list != nullptr && n == 1);
  ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx != nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  ibv_srq* srq = pd != nullptr ? ibv_create_srq(pd, &sa) : nullptr;
  CHECK(cq != nullptr && srq != nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.srq = srq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 0, 1, 0, 0};
  ibv_qp* qp = ibv_create_qp(pd, &ia);
  CHECK(qp != nullptr);
  ibv_ece ece{};
  CHECK(ibv_query_ece(qp, &ece) == 0 && ece.options == 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  if (const int e = to_rtr_self(ctx, qp); e != 0) return e;
  CHECK(!options_of(qp).selective_repeat);
  CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_srq(srq) == 0 && ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
  return 0;
}

// rdma_create_qp on both sides, the CM moves them; each QP's ECE afterwards
// is what both agreed, and UROCE_TRANSPORT's bdp=`bdp` reached both.
int cm_connection(std::uint32_t bdp) {
  Pair p;
  if (const int e = resolve(p); e != 0) return e;
  ibv_device_attr dev{};
  CHECK(ibv_query_device(p.client->verbs, &dev) == 0);
  ibv_qp_init_attr ia = rc_attr();
  CHECK(rdma_create_qp(p.client, nullptr, &ia) == 0);
  // A QP of rdma_create_qp's carries its own ECE: the ID's calls refuse.
  ibv_ece ece{dev.vendor_id, 0, 0};
  errno = 0;
  CHECK(rdma_set_local_ece(p.client, &ece) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(rdma_get_remote_ece(p.client, &ece) == -1 && errno == EINVAL);
  // The client offers selective repeat.
  ece = {dev.vendor_id, uroce::kEceSelectiveRepeat, 0};
  CHECK(ibv_set_ece(p.client->qp, &ece) == 0);
  rdma_conn_param cp{};
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  CHECK(rdma_connect(p.client, &cp) == 0);
  const CmEvent req = next_cm_event(p.lch, 20000);
  CHECK(req.type == RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* server = req.id;
  // Before its QP: the offer as it came.
  ece = {};
  CHECK(rdma_get_remote_ece(server, &ece) == 0);
  CHECK(ece.vendor_id == dev.vendor_id && ece.options == supported());
  ia = rc_attr();
  CHECK(rdma_create_qp(server, nullptr, &ia) == 0);
  // The server offers it too.
  ece = {dev.vendor_id, uroce::kEceSelectiveRepeat, 0};
  CHECK(ibv_set_ece(server->qp, &ece) == 0);
  CHECK(rdma_accept(server, &cp) == 0);
  CHECK(next_cm_event(p.cch, 20000).type == RDMA_CM_EVENT_ESTABLISHED);
  CHECK(next_cm_event(p.lch, 20000).type == RDMA_CM_EVENT_ESTABLISHED);
  for (ibv_qp* qp : {p.client->qp, server->qp}) {
    ece = {};
    CHECK(ibv_query_ece(qp, &ece) == 0 && ece.vendor_id == dev.vendor_id && ece.options == supported());
    const uroce::TransportOptions t = options_of(qp);
    CHECK(t.bdp_packets == bdp);
    CHECK(t.selective_repeat == (supported() != 0));
  }
  CHECK(rdma_disconnect(p.client) == 0);
  CHECK(next_cm_event(p.lch, 20000).type == RDMA_CM_EVENT_DISCONNECTED);
  CHECK(next_cm_event(p.cch, 20000).type == RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_qp(server);
  rdma_destroy_qp(p.client);
  CHECK(rdma_destroy_id(server) == 0 && rdma_destroy_id(p.client) == 0 && rdma_destroy_id(p.listener) == 0);
  rdma_destroy_event_channel(p.lch);
  rdma_destroy_event_channel(p.cch);
  return 0;
}

// The server refuses the request's ECE: the client's REJECTED carries 35.
int reject_ece() {
  Pair p;
  if (const int e = resolve(p); e != 0) return e;
  ibv_qp_init_attr ia = rc_attr();
  CHECK(rdma_create_qp(p.client, nullptr, &ia) == 0);
  rdma_conn_param cp{};
  CHECK(rdma_connect(p.client, &cp) == 0);
  const CmEvent req = next_cm_event(p.lch, 20000);
  CHECK(req.type == RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(rdma_reject_ece(req.id, nullptr, 0) == 0);
  const CmEvent rej = next_cm_event(p.cch, 20000);
  CHECK(rej.type == RDMA_CM_EVENT_REJECTED && rej.status == 35);
  // Answered once: a second refusal has no request to answer.
  errno = 0;
  CHECK(rdma_reject_ece(req.id, nullptr, 0) == -1);
  CHECK(rdma_destroy_id(req.id) == 0);
  rdma_destroy_qp(p.client);
  CHECK(rdma_destroy_id(p.client) == 0 && rdma_destroy_id(p.listener) == 0);
  rdma_destroy_event_channel(p.lch);
  rdma_destroy_event_channel(p.cch);
  return 0;
}

// UROCE_TRANSPORT's value is refused: rdma_create_qp fails (EINVAL).
int transport_refused() {
  Pair p;
  if (const int e = resolve(p); e != 0) return e;
  ibv_qp_init_attr ia = rc_attr();
  errno = 0;
  CHECK(rdma_create_qp(p.client, nullptr, &ia) == -1 && errno == EINVAL);
  CHECK(p.client->qp == nullptr);
  CHECK(rdma_destroy_id(p.client) == 0 && rdma_destroy_id(p.listener) == 0);
  rdma_destroy_event_channel(p.lch);
  rdma_destroy_event_channel(p.cch);
  return 0;
}

int in_process(const std::function<int()>& body, const std::string& transport = "") {
  return uroce::test::run_in_child(
      [&] {
        const std::string eal = kEal + " --file-prefix=uroce-ece-" + std::to_string(getpid());
        setenv("UROCE_EAL", eal.c_str(), 1);
        setenv("UROCE_IP", "10.0.0.1/24", 1);
        unsetenv("UROCE_SERVICE");
        if (transport.empty()) unsetenv("UROCE_TRANSPORT");
        else setenv("UROCE_TRANSPORT", transport.c_str(), 1);
        return body();
      },
      90s);
}

class ThroughUroced : public ::testing::Test {
 protected:
  int run(const std::function<int()>& body, const std::string& transport = "") {
    const std::string socket = d_.socket;
    return uroce::test::run_in_child(
        [&] {
          setenv("UROCE_SERVICE", socket.c_str(), 1);
          unsetenv("UROCE_EAL");
          if (transport.empty()) unsetenv("UROCE_TRANSPORT");
          else setenv("UROCE_TRANSPORT", transport.c_str(), 1);
          return body();
        },
        90s);
  }
  uroce::test::TempDir dir_{"/tmp/uroce-ece-"};
  uroce::test::Uroced d_{{.eal = kEal,
                          .prefix = "uroce-ece-d-" + std::to_string(getpid()),
                          .ip = "10.0.0.1/24",
                          .socket = dir_.dir + "/uroced.sock",
                          .log = dir_.dir + "/uroced.log"}};
};

TEST(Ece, InProcessIbvSetAndQueryEce) { EXPECT_EQ(in_process(ece_values), 0) << "the child's stderr says which step"; }

TEST(Ece, InProcessTwoUroceEndsAgreeOverRdmaCm) {
  EXPECT_EQ(in_process([] { return cm_connection(0); }), 0) << "the child's stderr says which step";
}

TEST(Ece, InProcessBdpFromTheEnvironmentReachesRdmaCmQps) {
  EXPECT_EQ(in_process([] { return cm_connection(32); }, "gbn,bdp=32"), 0) << "the child's stderr says which step";
}

TEST(Ece, InProcessAnSrqQpAskedForSelectiveRepeatRunsGoBackN) {
  EXPECT_EQ(in_process(srq_qp_runs_go_back_n, "sr"), 0) << "the child's stderr says which step";
}

TEST(Ece, InProcessRejectEceSaysVendorOptionNotSupported) {
  EXPECT_EQ(in_process(reject_ece), 0) << "the child's stderr says which step";
}

TEST(Ece, InProcessAMalformedTransportIsRefused) {
  EXPECT_EQ(in_process(transport_refused, "sr,bdp=x"), 0) << "the child's stderr says which step";
  EXPECT_EQ(in_process(transport_refused, "spray=4"), 0) << "spraying without selective repeat";
}

// Asking for selective repeat never runs go-back-N in silence: until the
// transport runs it, the QP is refused; once it does, the QP runs it.
TEST(Ece, InProcessSelectiveRepeatFromTheEnvironmentIsHadOrRefused) {
  if (uroce::QueuePair::transport_capabilities().selective_repeat) {
    EXPECT_EQ(in_process([] { return cm_connection(0); }, "sr"), 0);
  } else {
    EXPECT_EQ(in_process(transport_refused, "sr"), 0);
  }
}

TEST_F(ThroughUroced, IbvSetAndQueryEce) {
  ASSERT_EQ(d_.error, "");
  EXPECT_EQ(run(ece_values), 0) << d_.out();
}

TEST_F(ThroughUroced, TwoUroceEndsAgreeOverRdmaCm) {
  ASSERT_EQ(d_.error, "");
  EXPECT_EQ(run([] { return cm_connection(0); }), 0) << d_.out();
}

TEST_F(ThroughUroced, BdpFromTheEnvironmentReachesRdmaCmQps) {
  ASSERT_EQ(d_.error, "");
  EXPECT_EQ(run([] { return cm_connection(48); }, "bdp=48"), 0) << d_.out();
}

TEST_F(ThroughUroced, RejectEceSaysVendorOptionNotSupported) {
  ASSERT_EQ(d_.error, "");
  EXPECT_EQ(run(reject_ece), 0) << d_.out();
}

}  // namespace
