// rdma_cm with a QP the program made itself (ibv_create_qp, no
// rdma_create_qp), as rdma-core's test_rdmacm_async_traffic_external_qp
// does (issue 27): the active side connects with conn_param->qp_num, gets
// RDMA_CM_EVENT_CONNECT_RESPONSE, moves its QP with rdma_init_qp_attr and
// sends the RTU with rdma_establish (no ESTABLISHED follows there); the
// passive side moves its QP with rdma_init_qp_attr before rdma_accept with
// qp_num, and gets ESTABLISHED on the RTU. The CM never moves either QP (a
// disconnect leaves them in RTS). The events name the peer's QP and the
// READ depths in the receiver's terms; the attributes pair each side's
// send PSN with the other's receive PSN; data moves both ways. ECE as
// rdma-core's test_rdmacm_async_traffic_external_qp does it: the client
// offers with rdma_set_local_ece, the server reads the offer
// (rdma_get_remote_ece), gives it to its QP (ibv_set_ece), answers with
// what the QP took (ibv_query_ece, rdma_set_local_ece), and the client reads
// that answer back; an offer under another vendor's id is answered with
// no option (plain RoCEv2).
//
// One process connects to itself (net_ring reflects frames to our own
// address), in-process and through one uroced; each case in a forked child
// that has not touched the device.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/rdmacm_rig.h"
#include "support/uroced.h"
#include "uroce/verbs.h"

namespace {

using uroce::test::CmEvent;
using uroce::test::next_cm_event;

using namespace std::chrono_literals;

const std::string kEal = "--no-huge --no-shconf --no-pci -l 0 -m 256 --vdev=net_ring0 --log-level=lib.eal:error";

// 0 or the line number of the first step that failed: a child's exit code.
#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "external_qp_test:%d: %s failed (errno %d)\n", __LINE__, #cond, errno); \
      return __LINE__ % 250 + 1;                                                                 \
    }                                                                                            \
  } while (0)

// Whether an event comes on `ch` within `ms`.
bool event_within(rdma_event_channel* ch, int ms) {
  pollfd p{ch->fd, POLLIN, 0};
  return poll(&p, 1, ms) == 1;
}

ibv_qp* own_qp(rdma_cm_id* id, ibv_cq* cq) {
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(id->pd, &ia);
  if (qp == nullptr) return nullptr;
  // As pyverbs' QP(pd, init_attr, QPAttr()) does: INIT with its defaults
  // first, so rdma_init_qp_attr's INIT is an INIT -> INIT move.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    ibv_destroy_qp(qp);
    return nullptr;
  }
  return qp;
}

// INIT, RTR and RTS with rdma_init_qp_attr's attributes, as the program's
// own moves; the RTR and RTS attributes kept in `rtr` and `rts`.
int move_to_rts(rdma_cm_id* id, ibv_qp* qp, ibv_qp_attr& rtr, ibv_qp_attr& rts) {
  for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    ibv_qp_attr a{};
    a.qp_state = s;
    int mask = 0;
    CHECK(rdma_init_qp_attr(id, &a, &mask) == 0);
    CHECK(a.qp_state == s && (mask & IBV_QP_STATE));
    CHECK(ibv_modify_qp(qp, &a, mask) == 0);
    if (s == IBV_QPS_RTR) {
      CHECK((mask & (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MTU)) ==
            (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MTU));
      rtr = a;
    }
    if (s == IBV_QPS_RTS) {
      CHECK((mask & (IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT)) ==
            (IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT));
      rts = a;
    }
  }
  CHECK(qp->state == IBV_QPS_RTS);
  return 0;
}

bool poll_one(ibv_cq* cq, ibv_wc& wc) {
  for (const auto end = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < end;) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return false;
    if (n == 1) return true;
    usleep(100);
  }
  return false;
}

// A SEND of `text` from `from` to `to` (whose CQ is `to_cq`): it arrives.
int send_one(ibv_qp* from, ibv_cq* from_cq, ibv_qp* to, ibv_cq* to_cq, ibv_mr* mr, char* out, char* in,
             const char* text) {
  std::memset(in, 0, 64);
  std::snprintf(out, 64, "%s", text);
  ibv_sge rs{reinterpret_cast<std::uintptr_t>(in), 64, mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 2;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  CHECK(ibv_post_recv(to, &rwr, &bad_r) == 0);
  ibv_sge ss{reinterpret_cast<std::uintptr_t>(out), 64, mr->lkey};
  ibv_send_wr swr{};
  swr.wr_id = 1;
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad_s = nullptr;
  CHECK(ibv_post_send(from, &swr, &bad_s) == 0);
  ibv_wc wc{};
  CHECK(poll_one(from_cq, wc) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 1);
  CHECK(poll_one(to_cq, wc) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 2);
  CHECK(std::strcmp(in, text) == 0);
  return 0;
}

// Mellanox's PCI vendor id: an offer no uroce option bit means anything to.
constexpr std::uint32_t kOtherVendor = 0x15b3;

// The whole exchange, this process connecting to itself, the client's ECE
// offered under `offer_vendor` (uroce's: 0). 0 or a step's line.
int external_qp_connection(std::uint32_t offer_vendor) {
  rdma_event_channel* lch = rdma_create_event_channel();
  rdma_event_channel* cch = rdma_create_event_channel();
  CHECK(lch != nullptr && cch != nullptr);
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
  CHECK(rdma_create_id(lch, &listener, nullptr, RDMA_PS_TCP) == 0);
  CHECK(rdma_create_id(cch, &client, nullptr, RDMA_PS_TCP) == 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "10.0.0.1", &addr.sin_addr);
  CHECK(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)) == 0);
  CHECK(rdma_listen(listener, 4) == 0);
  addr.sin_port = rdma_get_src_port(listener);
  CHECK(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) == 0);
  CHECK(next_cm_event(cch, 20000).type == RDMA_CM_EVENT_ADDR_RESOLVED);
  CHECK(rdma_resolve_route(client, 2000) == 0);
  CHECK(next_cm_event(cch, 20000).type == RDMA_CM_EVENT_ROUTE_RESOLVED);
  CHECK(client->pd != nullptr && client->verbs != nullptr);
  ibv_device_attr dev{};
  CHECK(ibv_query_device(client->verbs, &dev) == 0);
  const std::uint32_t ours = dev.vendor_id;
  if (offer_vendor == 0) offer_vendor = ours;
  // What the server's QP takes of an offer of selective repeat: the bit
  // under our vendor id if this build runs it; under another's, nothing.
  const std::uint32_t agreed =
      offer_vendor == ours && uroce::QueuePair::transport_capabilities().selective_repeat ? uroce::kEceSelectiveRepeat
                                                                                           : 0;
  // ECE before a connection: nothing from the peer; no vendor, no offer.
  ibv_ece ece{};
  CHECK(rdma_get_remote_ece(client, &ece) == 0 && ece.vendor_id == 0 && ece.options == 0);
  ece = {0, uroce::kEceSelectiveRepeat, 0};
  errno = 0;
  CHECK(rdma_set_local_ece(client, &ece) == -1 && errno == EINVAL);
  ece = {offer_vendor, uroce::kEceSelectiveRepeat, 1};
  errno = 0;
  CHECK(rdma_set_local_ece(client, &ece) == -1 && errno == EINVAL);
  ece.comp_mask = 0;
  CHECK(rdma_set_local_ece(client, &ece) == 0);

  // Before a connection: INIT's attributes only.
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_RTR;
  errno = 0;
  CHECK(rdma_init_qp_attr(client, &a, &mask) == -1 && errno == EINVAL);
  a.qp_state = IBV_QPS_INIT;
  CHECK(rdma_init_qp_attr(client, &a, &mask) == 0);
  CHECK(mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) && a.port_num == 1);

  ibv_cq* ccq = ibv_create_cq(client->verbs, 16, nullptr, nullptr, 0);
  CHECK(ccq != nullptr);
  ibv_qp* cqp = own_qp(client, ccq);
  CHECK(cqp != nullptr);
  // No QP and no qp_num: refused with a line.
  rdma_conn_param cp{};
  errno = 0;
  CHECK(rdma_connect(client, &cp) == -1 && errno == EINVAL);
  // The client issues 5 reads at once and takes 3.
  cp.qp_num = cqp->qp_num;
  cp.initiator_depth = 5;
  cp.responder_resources = 3;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  CHECK(rdma_connect(client, &cp) == 0);
  // Still no RTR before the REP.
  a = {};
  a.qp_state = IBV_QPS_RTR;
  CHECK(rdma_init_qp_attr(client, &a, &mask) == -1 && errno == EINVAL);

  // The server: the request names the client's QP, the depths in its own
  // terms (5 to take, 3 to issue); its own QP moves before it accepts.
  const CmEvent req = next_cm_event(lch, 20000);
  CHECK(req.type == RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id* server = req.id;
  CHECK(server->qp == nullptr);
  CHECK(req.conn.qp_num == cqp->qp_num);
  CHECK(req.conn.responder_resources == 5 && req.conn.initiator_depth == 3);
  ibv_cq* scq = ibv_create_cq(server->verbs, 16, nullptr, nullptr, 0);
  CHECK(scq != nullptr);
  ibv_qp* sqp = own_qp(server, scq);
  CHECK(sqp != nullptr);
  // The client's offer, as it went in the REQ; what the server's QP takes of it.
  ece = {};
  CHECK(rdma_get_remote_ece(server, &ece) == 0);
  CHECK(ece.vendor_id == offer_vendor && ece.options == uroce::kEceSelectiveRepeat && ece.comp_mask == 0);
  CHECK(ibv_set_ece(sqp, &ece) == 0);
  ece = {};
  CHECK(ibv_query_ece(sqp, &ece) == 0);
  CHECK(ece.vendor_id == ours && ece.options == agreed);
  ibv_qp_attr s_rtr{}, s_rts{};
  if (const int e = move_to_rts(server, sqp, s_rtr, s_rts); e != 0) return e;
  // Answered under the offer's vendor id, as rdma-core's librdmacm echoes it.
  ece.vendor_id = offer_vendor;
  CHECK(rdma_set_local_ece(server, &ece) == 0);
  // Past INIT a QP's ECE is settled.
  errno = 0;
  CHECK(ibv_set_ece(sqp, &ece) == EINVAL);
  CHECK(s_rtr.dest_qp_num == cqp->qp_num);
  CHECK(s_rtr.max_dest_rd_atomic == 5 && s_rts.max_rd_atomic == 3);
  // It takes 2 and issues 1.
  rdma_conn_param sp{};
  sp.qp_num = sqp->qp_num;
  sp.responder_resources = 2;
  sp.initiator_depth = 1;
  sp.rnr_retry_count = 7;
  CHECK(rdma_accept(server, &sp) == 0);

  // The client: CONNECT_RESPONSE (not ESTABLISHED), naming the server's QP,
  // the depths in the client's terms (1 to take, 2 to issue).
  const CmEvent rep = next_cm_event(cch, 20000);
  CHECK(rep.type == RDMA_CM_EVENT_CONNECT_RESPONSE && rep.status == 0);
  CHECK(rep.conn.qp_num == sqp->qp_num);
  CHECK(rep.conn.responder_resources == 1 && rep.conn.initiator_depth == 2);
  // The server's answer, read back from the REP.
  ece = {};
  CHECK(rdma_get_remote_ece(client, &ece) == 0);
  CHECK(ece.vendor_id == offer_vendor && ece.options == agreed);
  CHECK(ibv_set_ece(cqp, &ece) == 0);
  ece = {};
  CHECK(ibv_query_ece(cqp, &ece) == 0 && ece.vendor_id == ours && ece.options == agreed);
  ibv_qp_attr c_rtr{}, c_rts{};
  if (const int e = move_to_rts(client, cqp, c_rtr, c_rts); e != 0) return e;
  CHECK(c_rtr.dest_qp_num == sqp->qp_num);
  CHECK(c_rtr.max_dest_rd_atomic == 1 && c_rts.max_rd_atomic == 2);
  // Each side sends from the PSN the other receives from.
  CHECK(c_rts.sq_psn == s_rtr.rq_psn && s_rts.sq_psn == c_rtr.rq_psn);
  CHECK(c_rtr.path_mtu == s_rtr.path_mtu);
  CHECK(rdma_establish(client) == 0);
  // The RTU: ESTABLISHED on the server; nothing more on the client.
  CHECK(next_cm_event(lch, 20000).type == RDMA_CM_EVENT_ESTABLISHED);
  CHECK(!event_within(cch, 500));
  // Once is enough.
  errno = 0;
  CHECK(rdma_establish(client) == -1 && errno == EINVAL);

  void* buf = nullptr;
  CHECK(posix_memalign(&buf, 4096, 8192) == 0);
  std::memset(buf, 0, 8192);
  ibv_mr* mr = ibv_reg_mr(client->pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr != nullptr);
  char* one = static_cast<char*>(buf);
  char* two = one + 4096;
  if (const int e = send_one(cqp, ccq, sqp, scq, mr, one, two, "client to server"); e != 0) return e;
  if (const int e = send_one(sqp, scq, cqp, ccq, mr, two, one, "server to client"); e != 0) return e;

  // A disconnect ends the connection; the QPs are the program's: still RTS.
  CHECK(rdma_disconnect(client) == 0);
  CHECK(next_cm_event(lch, 20000).type == RDMA_CM_EVENT_DISCONNECTED);
  CHECK(next_cm_event(cch, 20000).type == RDMA_CM_EVENT_DISCONNECTED);
  ibv_qp_init_attr init{};
  a = {};
  CHECK(ibv_query_qp(cqp, &a, IBV_QP_STATE, &init) == 0 && a.qp_state == IBV_QPS_RTS);
  CHECK(ibv_query_qp(sqp, &a, IBV_QP_STATE, &init) == 0 && a.qp_state == IBV_QPS_RTS);

  CHECK(ibv_dereg_mr(mr) == 0);
  free(buf);
  CHECK(ibv_destroy_qp(cqp) == 0 && ibv_destroy_qp(sqp) == 0);
  CHECK(ibv_destroy_cq(ccq) == 0 && ibv_destroy_cq(scq) == 0);
  CHECK(rdma_destroy_id(server) == 0 && rdma_destroy_id(client) == 0 && rdma_destroy_id(listener) == 0);
  rdma_destroy_event_channel(lch);
  rdma_destroy_event_channel(cch);
  return 0;
}

TEST(ExternalQp, InProcessTheProgramMovesItsOwnQps) {
  const int rc = uroce::test::run_in_child(
      [] {
        const std::string eal = kEal + " --file-prefix=uroce-extqp-" + std::to_string(getpid());
        setenv("UROCE_EAL", eal.c_str(), 1);
        setenv("UROCE_IP", "10.0.0.1/24", 1);
        unsetenv("UROCE_SERVICE");
        return external_qp_connection(0);
      },
      90s);
  EXPECT_EQ(rc, 0) << "the child's stderr says which step failed";
}

TEST(ExternalQp, InProcessAnotherVendorsEceOfferAgreesToNothing) {
  const int rc = uroce::test::run_in_child(
      [] {
        const std::string eal = kEal + " --file-prefix=uroce-extqp-" + std::to_string(getpid());
        setenv("UROCE_EAL", eal.c_str(), 1);
        setenv("UROCE_IP", "10.0.0.1/24", 1);
        unsetenv("UROCE_SERVICE");
        return external_qp_connection(kOtherVendor);
      },
      90s);
  EXPECT_EQ(rc, 0) << "the child's stderr says which step failed";
}

TEST(ExternalQp, ThroughUrocedTheProgramMovesItsOwnQps) {
  uroce::test::TempDir dir("/tmp/uroce-extqp-");
  uroce::test::Uroced d({.eal = kEal,
                         .prefix = "uroce-extqp-d-" + std::to_string(getpid()),
                         .ip = "10.0.0.1/24",
                         .socket = dir.dir + "/uroced.sock",
                         .log = dir.dir + "/uroced.log"});
  ASSERT_EQ(d.error, "");
  const std::string socket = d.socket;
  const int rc = uroce::test::run_in_child(
      [&socket] {
        setenv("UROCE_SERVICE", socket.c_str(), 1);
        unsetenv("UROCE_EAL");
        return external_qp_connection(0);
      },
      90s);
  EXPECT_EQ(rc, 0) << d.out();
}

}  // namespace
