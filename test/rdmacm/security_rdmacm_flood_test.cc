// Issue 25, M6 through librdmacm.so.1 (ours, in this process, on net_ring:
// frames to our own address come back in). The "peer" is a UD QP of the
// same device sending CM MADs to our QP1, as any host on the link can. A
// server that reads its event channel only when it wants a connection:
//  - 70,000 events nobody reads never block the library (the channel's pipe
//    holds one wake-up byte, the events are in memory) and none is lost;
//  - a REQ flood with fresh comm IDs leaves at most the listen backlog of
//    requests, the program's own rdma_create_id/rdma_destroy_id stay fast,
//    unanswered requests expire (a taken one is reported UNREACHABLE, one
//    still queued goes with its event), and a legitimate REQ after the
//    flood reaches the program.
// One device per process (EAL), so the tests share it; each listens on its
// own port.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "wire/cm_mad.h"
#include "support/rdmacm_rig.h"

namespace {

using uroce::test::ipv4;

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kQkey = 0x80010000;
constexpr std::uint32_t kBacklog = 8;
const std::array<std::uint8_t, 4>& kOurIp = uroce::test::kRdmacmIp;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A hung library must fail the test, not hang it: after `limit` the
// process exits with a message.
struct Watchdog {
  Watchdog(const char* what, int limit_s) : thread_([this, what, limit_s] {
      const auto start = Clock::now();
      while (!done_.load()) {
        if (seconds_since(start) > limit_s) {
          std::fprintf(stderr, "FAILED: %s: still blocked after %d s (the library hangs)\n", what, limit_s);
          std::fflush(stderr);
          std::_Exit(1);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }) {}
  ~Watchdog() {
    done_.store(true);
    thread_.join();
  }
  std::atomic<bool> done_{false};
  std::thread thread_;
};

void configure() { uroce::test::configure_net_ring("cmflood"); }

// Every event queued on `ch` now (the channel made non-blocking).
std::vector<rdma_cm_event_type> take_all(rdma_event_channel* ch, std::vector<rdma_cm_id*>* requests = nullptr,
                                         std::vector<std::string>* data = nullptr) {
  const int flags = fcntl(ch->fd, F_GETFL);
  fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK);
  std::vector<rdma_cm_event_type> out;
  rdma_cm_event* e = nullptr;
  while (rdma_get_cm_event(ch, &e) == 0) {
    out.push_back(e->event);
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST && requests != nullptr) requests->push_back(e->id);
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST && data != nullptr) {
      const auto* p = static_cast<const char*>(e->param.conn.private_data);
      data->emplace_back(p != nullptr ? std::string(p, strnlen(p, e->param.conn.private_data_len)) : "");
    }
    rdma_ack_cm_event(e);
  }
  EXPECT_EQ(errno, EAGAIN);
  fcntl(ch->fd, F_SETFL, flags);
  return out;
}

std::size_t count(const std::vector<rdma_cm_event_type>& v, rdma_cm_event_type t) {
  std::size_t n = 0;
  for (auto e : v) n += e == t;
  return n;
}

// A host on the link that sends CM MADs to our QP1 from a UD QP.
struct Peer {
  explicit Peer(ibv_context* verbs) {
    pd = ibv_alloc_pd(verbs);
    cq = ibv_create_cq(verbs, 256, nullptr, nullptr, 0);
    buf.assign(64 * 256, 0);
    mr = pd != nullptr ? ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE) : nullptr;
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_UD;
    init.cap = ibv_qp_cap{64, 1, 1, 1, 0};
    qp = mr != nullptr && cq != nullptr ? ibv_create_qp(pd, &init) : nullptr;
    if (qp == nullptr) return;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) != 0 ||
        ibv_modify_qp(qp, &rtr, IBV_QP_STATE) != 0 || ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN) != 0) {
      qp = nullptr;
      return;
    }
    ibv_ah_attr ah_attr{};
    ah_attr.is_global = 1;
    ah_attr.port_num = 1;
    ah_attr.grh.sgid_index = 1;
    ah_attr.grh.hop_limit = 64;
    ah_attr.grh.dgid.raw[10] = ah_attr.grh.dgid.raw[11] = 0xff;
    std::memcpy(ah_attr.grh.dgid.raw + 12, kOurIp.data(), 4);
    ah = ibv_create_ah(pd, &ah_attr);
  }
  bool ok() const { return qp != nullptr && ah != nullptr; }

  // A REQ for `port` with comm ID `comm_id` and `text` after rdma_cm's header.
  bool send_req(std::uint16_t port, std::uint32_t comm_id, const std::string& text = "") {
    uroce::wire::CmMad m;
    m.header.attr_id = static_cast<std::uint16_t>(uroce::wire::CmAttr::kReq);
    m.header.tid = comm_id;
    m.req.local_comm_id = comm_id;
    m.req.service_id = uroce::wire::rdma_cm_service_id(uroce::wire::kRdmaPsTcp, port);
    m.req.local_qpn = 0x100;
    m.req.starting_psn = comm_id & 0xffffff;
    m.req.path_mtu = IBV_MTU_1024;
    m.req.remote_cm_response_timeout = 20;
    m.req.local_cm_response_timeout = 20;
    m.req.max_cm_retries = 15;
    m.req.responder_resources = 1;
    m.req.initiator_depth = 1;
    m.req.retry_count = 7;
    m.req.rnr_retry_count = 7;
    m.req.primary.remote_gid[10] = m.req.primary.remote_gid[11] = 0xff;
    std::copy(kOurIp.begin(), kOurIp.end(), m.req.primary.remote_gid.begin() + 12);
    m.req.primary.local_gid = m.req.primary.remote_gid;
    uroce::wire::RdmaCmHeader h;
    h.src_port = 40000;
    std::copy(kOurIp.begin(), kOurIp.end(), h.src_addr.begin() + 12);
    std::copy(kOurIp.begin(), kOurIp.end(), h.dst_addr.begin() + 12);
    uroce::wire::encode_rdma_cm_header(h, m.req.private_data);
    std::copy(text.begin(), text.end(), m.req.private_data.begin() + uroce::wire::kRdmaCmHeaderBytes);
    // Wait for a free send slot (completions of earlier ones).
    while (outstanding >= 48) {
      ibv_wc wc[16];
      const int n = ibv_poll_cq(cq, 16, wc);
      if (n < 0) return false;
      outstanding -= n;
      if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    std::uint8_t* slot = buf.data() + (next++ % 64) * 256;
    std::array<std::uint8_t, uroce::wire::kMadBytes> bytes{};
    if (!uroce::wire::encode_cm_mad(m, bytes)) return false;
    std::memcpy(slot, bytes.data(), bytes.size());
    ibv_sge sge{reinterpret_cast<std::uint64_t>(slot), 256, mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = 1;
    wr.wr.ud.remote_qkey = kQkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, &wr, &bad) != 0) return false;
    ++outstanding;
    return true;
  }

  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  ibv_qp* qp = nullptr;
  ibv_ah* ah = nullptr;
  std::vector<std::uint8_t> buf;
  std::uint32_t next = 0;
  int outstanding = 0;
};

TEST(SecurityRdmaCm, SeventyThousandUnreadEventsNeitherBlockNorGetLost) {
  configure();
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr) << std::strerror(errno);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst = ipv4(7480);
  constexpr int kEvents = 70000;
  {
    Watchdog w("70,000 rdma_resolve_addr without reading the channel", 120);
    for (int i = 0; i < kEvents; ++i) {
      ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0) << i;
    }
  }
  pollfd p{ch->fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 1) << "events are queued: the channel's fd polls readable";
  const auto got = take_all(ch);
  EXPECT_EQ(got.size(), std::size_t{kEvents}) << "events lost";
  EXPECT_EQ(count(got, RDMA_CM_EVENT_ADDR_RESOLVED), std::size_t{kEvents});
  p.revents = 0;
  EXPECT_EQ(poll(&p, 1, 0), 0) << "nothing queued: the fd must not poll readable";
  // And a blocking read still wakes for the next one.
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
  rdma_cm_event* e = nullptr;
  {
    Watchdog w("a blocking rdma_get_cm_event with an event queued", 30);
    ASSERT_EQ(rdma_get_cm_event(ch, &e), 0);
  }
  EXPECT_EQ(e->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  rdma_ack_cm_event(e);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
}

TEST(SecurityRdmaCm, ReqFloodStaysWithinTheBacklogExpiresAndALegitRequestGetsThrough) {
  configure();
  constexpr std::uint16_t kPort = 7481;
  rdma_event_channel* listen_ch = rdma_create_event_channel();
  rdma_event_channel* own_ch = rdma_create_event_channel();
  ASSERT_NE(listen_ch, nullptr);
  ASSERT_NE(own_ch, nullptr);
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(listen_ch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in at = ipv4(kPort);
  ASSERT_EQ(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&at)), 0);
  ASSERT_EQ(rdma_listen(listener, kBacklog), 0);
  Peer peer(listener->verbs);
  ASSERT_TRUE(peer.ok()) << "the flooding UD QP: " << std::strerror(errno);

  // The flood, while the program goes on with its own rdma_cm calls.
  std::atomic<bool> flooding{true};
  std::atomic<std::uint32_t> sent{0};
  std::thread flood([&] {
    for (std::uint32_t i = 0; i < 6000; ++i) {
      if (!peer.send_req(kPort, 0x50000000 + i)) break;
      sent.fetch_add(1);
      if (i % 32 == 31) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    flooding.store(false);
  });
  double worst = 0;
  int calls = 0;
  {
    Watchdog w("rdma_create_id/rdma_destroy_id during the flood", 120);
    while (flooding.load() || calls < 10) {
      const auto t = Clock::now();
      rdma_cm_id* mine = nullptr;
      const int made = rdma_create_id(own_ch, &mine, nullptr, RDMA_PS_TCP);
      EXPECT_EQ(made, 0);
      if (made == 0) {
        EXPECT_EQ(rdma_destroy_id(mine), 0);
      }
      worst = std::max(worst, seconds_since(t));
      ++calls;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  flood.join();
  std::printf("%u REQs sent; %d rdma_create_id+destroy_id pairs, longest %.3f s\n", sent.load(), calls, worst);
  EXPECT_GT(sent.load(), 1000u);
  EXPECT_LT(worst, 2.0) << "the program's own rdma_cm calls stall under the flood";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the last MADs in

  std::vector<rdma_cm_id*> taken;
  auto first = take_all(listen_ch, &taken);
  std::printf("requests the program got from the flood: %zu (backlog %u)\n", taken.size(), kBacklog);
  EXPECT_GT(taken.size(), 0u);
  EXPECT_LE(taken.size(), std::size_t{kBacklog}) << "requests beyond rdma_listen's backlog";
  // Two of them the program drops (rdma_destroy_id refuses them): their
  // places go to two more of the flood, which the program does not read.
  ASSERT_GE(taken.size(), 2u);
  rdma_destroy_id(taken[0]);
  rdma_destroy_id(taken[1]);
  for (std::uint32_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(peer.send_req(kPort, 0x60000000 + i));
    if (i % 16 == 15) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Nobody answers them: after the request lifetime (10 s; 13 s here, with
  // a margin) the ones the program took are UNREACHABLE, the unread ones
  // are gone with their events.
  std::this_thread::sleep_for(std::chrono::seconds(13));
  const auto later = take_all(listen_ch);
  EXPECT_EQ(count(later, RDMA_CM_EVENT_UNREACHABLE), taken.size() - 2) << "unanswered requests never expire";
  EXPECT_EQ(count(later, RDMA_CM_EVENT_CONNECT_REQUEST), 0u)
      << "requests the program never read outlived their lifetime (or got past the backlog)";

  // A legitimate request now reaches the program.
  ASSERT_TRUE(peer.send_req(kPort, 0x70000001, "legit"));
  std::vector<rdma_cm_id*> legit;
  std::vector<std::string> data;
  const auto legit_start = Clock::now();
  while (legit.empty() && seconds_since(legit_start) < 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    take_all(listen_ch, &legit, &data);
  }
  ASSERT_EQ(legit.size(), 1u) << "the legitimate request after the flood was lost";
  EXPECT_EQ(data[0], "legit");
  for (std::size_t i = 2; i < taken.size(); ++i) rdma_destroy_id(taken[i]);
  rdma_destroy_id(legit[0]);
  rdma_destroy_id(listener);
}

// A listener destroyed with connection requests still unread takes them
// with it: they are refused and the channel holds nothing that names the
// freed listener (read later, such an event's listen_id would point to
// freed memory). The channel goes on serving another listener.
TEST(SecurityRdmaCm, UnreadRequestsGoWithTheirDestroyedListener) {
  configure();
  constexpr std::uint16_t kPort = 7483;
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in at = ipv4(kPort);
  ASSERT_EQ(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&at)), 0);
  ASSERT_EQ(rdma_listen(listener, kBacklog), 0);
  Peer peer(listener->verbs);
  ASSERT_TRUE(peer.ok()) << "the UD QP sending REQs: " << std::strerror(errno);
  for (std::uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(peer.send_req(kPort, 0x60000000 + i));
  // The first request's wake-up, then time for the other two.
  pollfd p{ch->fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1) << "no connection request reached the listener";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(rdma_destroy_id(listener), 0);
  const auto left = take_all(ch);
  EXPECT_EQ(left.size(), 0u) << "events of a destroyed listener are still queued";

  // The channel still works: a new listener on it gets a new request.
  rdma_cm_id* again = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &again, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_bind_addr(again, reinterpret_cast<sockaddr*>(&at)), 0);
  ASSERT_EQ(rdma_listen(again, kBacklog), 0);
  ASSERT_TRUE(peer.send_req(kPort, 0x61000000));
  ASSERT_EQ(poll(&p, 1, 10000), 1) << "no connection request after the listener was made again";
  std::vector<rdma_cm_id*> taken;
  take_all(ch, &taken);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(rdma_destroy_id(taken[0]), 0);
  EXPECT_EQ(rdma_destroy_id(again), 0);
  rdma_destroy_event_channel(ch);
}

}  // namespace
