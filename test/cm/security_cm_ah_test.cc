// Security review H5 and M5 (issue 25), as a peer on the link acts: CM
// MADs to QP1 need no secret, so anyone can send DREQs, REQs and REPs from
// any source address. The CM answers those for connections it does not
// know (DREP, REJ); before the fix each answer made an address handle,
// resolved inside a control call (every worker parked for a second when
// nobody answered the ARP) and cached forever (after 32,767 sources the
// CM answered no new peer).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "cm/manager.h"
#include "dpdk/port.h"
#include "dpdk/port_io.h"
#include "support/eal_environment.h"
#include "support/scripted_port.h"
#include "verbs/internal.h"
#include "sim/sim_link.h"
#include "wire/cm_mad.h"
#include "wire/frame.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

using Clock = std::chrono::steady_clock;
using Frame = std::vector<std::uint8_t>;

wire::CmMad dreq(std::uint32_t i) {
  wire::CmMad m;
  m.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kDreq);
  m.header.tid = i;
  m.dreq.local_comm_id = 0x10000 + i;
  m.dreq.remote_comm_id = 0x20000 + i;  // no connection of ours
  return m;
}

// A MAD to QP1 of 10.x.0.1 from `src` (an IPv4 address) and `src_mac`.
Frame mad_frame(const wire::CmMad& mad, const wire::Ipv4Addr& src, const wire::Ipv4Addr& dst,
                const wire::MacAddr& dst_mac = {}, const wire::MacAddr& src_mac = {0x02, 0, 0, 0, 0, 0x66}) {
  std::array<std::uint8_t, wire::kMadBytes> bytes{};
  EXPECT_TRUE(wire::encode_cm_mad(mad, bytes));
  wire::FrameSpec s;
  s.eth_dst = dst_mac;
  s.eth_src = src_mac;
  s.src4 = src;
  s.dst4 = dst;
  s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kUdSendOnly);
  s.bth.pkey.set(0xffff);
  s.bth.dest_qp.set(wire::kGsiQpn);
  s.deth.qkey.set(wire::kGsiQkey);
  s.deth.src_qp.set(wire::kGsiQpn);
  Frame f(512);
  f.resize(wire::build_frame(s, std::span(bytes.data(), bytes.size()), f));
  return f;
}

// --- M5 and the reply rate, on a scripted port ------------------------------------

// Resolves 10.1.x.y at once and never answers for 10.2.x.y (pending
// forever), as a link where one host answers ARP for any address and the
// other sources are spoofed.
class SpoofedLinkPort : public ScriptedPort {
 public:
  Resolution resolve(const ibv_gid& gid, std::uint8_t mac[6], bool) override {
    if (gid.raw[13] == 2) return Resolution::kPending;
    std::memcpy(mac, gid.raw + 10, 6);
    return Resolution::kKnown;
  }
};

struct CmOnScriptedPort {
  CmOnScriptedPort() {
    port.keep_sent = true;
    PortConfig cfg;
    cfg.io = &port;
    cfg.clock = &clock;
    cfg.gid = ipv4_gid({10, 0, 0, 1});
    ctx = Context::open(cfg, error);
    if (!ctx) return;
    m = cm::Manager::open(*ctx, error);
  }
  // DREQ from `src` in, the manager's answers out; `advance_ns` of virtual
  // time first (the reply rate's clock).
  void feed(const wire::Ipv4Addr& src, std::uint32_t i, std::uint64_t advance_ns) {
    clock.advance(advance_ns);
    port.inbox.push_back(mad_frame(dreq(i), src, {10, 0, 0, 1}));
    ctx->progress();
    m->poll(events);
    ctx->progress();
  }
  // DREPs sent since the last call, to `to` (any when null).
  std::size_t dreps(const wire::Ipv4Addr* to = nullptr) {
    std::size_t n = 0;
    for (const auto& f : port.sent) {
      wire::ParsedFrame p;
      if (wire::parse_frame(f, p) != wire::ParseStatus::kOk || p.bth().dest_qp.get() != wire::kGsiQpn) continue;
      wire::CmMad d;
      if (wire::decode_cm_mad(p.payload(), d) != wire::MadStatus::kOk || d.attr() != wire::CmAttr::kDrep) continue;
      if (to == nullptr || p.ipv4().dst == *to) ++n;
    }
    port.sent.clear();
    return n;
  }
  sim::VirtualClock clock;
  SpoofedLinkPort port;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<cm::Manager> m;
  std::vector<cm::Event> events;
  std::string error;
};

wire::Ipv4Addr source(std::uint8_t net, std::uint32_t i) {
  return {10, net, static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i)};
}

// M5: DREQs from 40,000 distinct resolvable sources (past the 32,767
// address handles a process has) and then a new peer: the CM still answers
// it, and holds at most 1,024 handles.
TEST(SecurityCmAh, AfterFortyThousandSpoofedSourcesANewPeerIsStillAnswered) {
  CmOnScriptedPort p;
  ASSERT_NE(p.m, nullptr) << p.error;
  constexpr std::uint32_t kSources = 40'000;
  std::size_t answered = 0;
  for (std::uint32_t i = 0; i < kSources; ++i) {
    // 10.1.0.0 + i spans 10.1.x.y and 10.(1 + carry).x.y: keep to net 1 by
    // wrapping the low 16 bits, and use net 3 past 65,536.
    p.feed(source(1, i), i, 20'000'000);  // 50 a second: under the reply rate
    answered += p.dreps();
  }
  EXPECT_EQ(answered, kSources) << "every spoofed source answered (the rate allows 50/s)";
  EXPECT_LE(p.m->address_handles(), 1024u);
  EXPECT_GE(p.m->counters().ahs_evicted, kSources - 1024);
  const wire::Ipv4Addr fresh{10, 4, 0, 4};
  p.feed(fresh, 99, 20'000'000);
  EXPECT_EQ(p.dreps(&fresh), 1u) << "a new peer after the flood got no answer";
  EXPECT_LE(p.m->address_handles(), 1024u);
}

// H5: DREQs from sources nobody answers for are not answered at all while
// they resolve (held, bounded, dropped when the resolution gives up), and a
// burst of them is rate-limited; none of it waits.
TEST(SecurityCmAh, UnresolvableSourcesAreHeldBoundedAndRateLimited) {
  CmOnScriptedPort p;
  ASSERT_NE(p.m, nullptr) << p.error;
  const auto start = Clock::now();
  for (std::uint32_t i = 0; i < 1000; ++i) p.feed(source(2, i), i, 0);  // a burst: no time passes
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  std::printf("1000 DREQs from unresolvable sources taken in %.0f ms\n", ms);
  EXPECT_EQ(p.dreps(), 0u);
  const cm::Counters& c = p.m->counters();
  EXPECT_LE(c.mads_queued_unresolved, 64u) << "the burst allowance bounds the replies attempted";
  EXPECT_GE(c.unsolicited_replies_limited, 900u);
  EXPECT_LE(c.mads_queued_unresolved + c.mads_dropped_queue_full, 64u);
  EXPECT_EQ(p.m->address_handles(), 0u) << "no handle for an address nobody answered";
  // The CM waits on 16 peers at most: the resolver has room for the
  // program's own resolutions.
  EXPECT_LE(internal::resolve_counter(*p.ctx, "resolve_started"), 16u);
  EXPECT_EQ(p.ctx->resolve_gid(ipv4_gid({10, 2, 9, 9})), Reach::kPending);
  EXPECT_EQ(internal::resolve_counter(*p.ctx, "resolve_busy"), 0u);
  // Well under a second for all 1,000: each used to cost a second.
  EXPECT_LT(ms, 20'000.0);
}

// --- H5 on a DPDK port with a worker ---------------------------------------------

// Device A on net_ring port a, its engine on a worker, with a CM on QP1 and
// two QPs of its own connected to each other; port b, driven here, sends
// A's RoCE frames back to it (the loopback's wire) and injects the spoofed
// MADs.
TEST(SecurityCmAh, SpoofedDreqsFromUnresolvableSourcesDoNotStallTheDataPath) {
  ASSERT_EQ(EalEnvironment::error(), "");
  std::uint16_t a_id = 0, b_id = 0;
  std::string error;
  ASSERT_TRUE(dpdk::create_ring_pair("seccm_h5", a_id, b_id, error)) << error;
  auto pa = dpdk::Port::open({.port_id = a_id}, error);
  ASSERT_NE(pa, nullptr) << error;
  auto pb = dpdk::Port::open({.port_id = b_id}, error);
  ASSERT_NE(pb, nullptr) << error;
  const wire::Ipv4Addr ours{10, 99, 0, 1};
  dpdk::PortIo io(*pa, 0, ours);
  dpdk::TscClock clock;
  PortConfig cfg;
  cfg.io = &io;
  cfg.clock = &clock;
  cfg.gid = ipv4_gid(ours);
  std::memcpy(cfg.mac, io.mac().data(), 6);
  auto ctx = Context::open(cfg, error);
  ASSERT_NE(ctx, nullptr) << error;
  ASSERT_EQ(ctx->start_workers({-1}), 0);
  auto m = cm::Manager::open(*ctx, error);
  ASSERT_NE(m, nullptr) << error;

  // Two QPs of A connected to each other over the wire (port b sends the
  // frames back).
  ProtectionDomain* pd = ctx->alloc_pd();
  CompletionQueue* cq = ctx->create_cq(256);
  QpInitAttr init;
  init.cap = ibv_qp_cap{64, 64, 1, 1, 0};
  init.send_cq = init.recv_cq = cq;
  QueuePair* q1 = pd->create_qp(init);
  QueuePair* q2 = pd->create_qp(init);
  constexpr std::size_t kBytes = 1 << 20;
  auto* buf = static_cast<std::uint8_t*>(ctx->alloc_buffer(kBytes));
  MemoryRegion* mr = pd->reg_mr(buf, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(q1 && q2 && mr);

  std::atomic<bool> stop{false};
  std::mutex inject_mutex;
  std::vector<Frame> to_inject;
  std::thread wire_thread([&] {
    std::vector<Frame> in;
    while (!stop.load()) {
      in.clear();
      pb->receive_copies(0, in, 32);
      // RoCE (IPv4) frames go back to A; its ARP requests go nowhere.
      std::vector<Frame> back;
      for (auto& f : in) {
        if (f.size() > 14 && f[12] == 0x08 && f[13] == 0x00) back.push_back(std::move(f));
      }
      {
        std::lock_guard<std::mutex> lock(inject_mutex);
        for (auto& f : to_inject) back.push_back(std::move(f));
        to_inject.clear();
      }
      if (!back.empty()) pb->send_copies(0, back);
    }
  });
  auto connect = [&](QueuePair* q, QueuePair* peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (q->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) return false;
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTR;
    r.path_mtu = IBV_MTU_1024;
    r.dest_qp_num = peer->qp_num();
    r.max_dest_rd_atomic = 1;
    r.min_rnr_timer = 12;
    r.ah_attr.is_global = 1;
    r.ah_attr.port_num = 1;
    r.ah_attr.grh.dgid = ipv4_gid(ours);  // our own address: our own MAC
    r.ah_attr.grh.sgid_index = 1;
    r.ah_attr.grh.hop_limit = 64;
    if (q->modify(r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
      return false;
    }
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.timeout = 14;
    s.retry_cnt = 7;
    s.rnr_retry = 7;
    s.max_rd_atomic = 1;
    return q->modify(s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_MAX_QP_RD_ATOMIC) == 0;
  };
  ASSERT_TRUE(connect(q1, q2) && connect(q2, q1)) << ctx->last_error();

  // The data path: one WRITE at a time from q1 to q2, each completion's time.
  std::mutex done_mutex;
  std::vector<Clock::time_point> done;
  std::atomic<bool> traffic_failed{false};
  std::thread traffic([&] {
    ibv_wc wc[4];
    while (!stop.load()) {
      if (post_rdma(q1, IBV_WR_RDMA_WRITE, buf, 64, mr->lkey, buf + kBytes / 2, mr->rkey) != 0) break;
      const auto deadline = Clock::now() + std::chrono::seconds(30);
      int got = 0;
      while (got == 0 && Clock::now() < deadline && !stop.load()) got = cq->poll(4, wc);
      if (got == 0 && stop.load()) break;
      if (got <= 0 || wc[0].status != IBV_WC_SUCCESS) {
        traffic_failed.store(true);
        break;
      }
      std::lock_guard<std::mutex> lock(done_mutex);
      done.push_back(Clock::now());
    }
  });

  // The attack: 20 DREQs from as many unresolvable sources at once, then 2 s
  // of this thread running the CM as a program's CM thread does. Each used
  // to hold the workers for a second, one after the other.
  std::vector<cm::Event> events;
  const auto poll_for = [&](std::chrono::milliseconds d) {
    const auto until = Clock::now() + d;
    while (Clock::now() < until) {
      m->poll(events);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  poll_for(std::chrono::milliseconds(300));
  const auto attack_start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(inject_mutex);
    for (std::uint32_t i = 0; i < 20; ++i) {
      to_inject.push_back(mad_frame(dreq(i), {10, 99, 1, static_cast<std::uint8_t>(i)}, ours, io.mac()));
    }
  }
  poll_for(std::chrono::milliseconds(2000));
  const auto attack_end = attack_start + std::chrono::seconds(2);
  poll_for(std::chrono::milliseconds(1500));  // the last resolutions give up
  stop.store(true);
  traffic.join();
  wire_thread.join();
  ASSERT_FALSE(traffic_failed.load()) << "a WRITE failed";

  std::vector<Clock::time_point> in_attack;
  {
    std::lock_guard<std::mutex> lock(done_mutex);
    for (auto t : done) {
      if (t >= attack_start && t <= attack_end) in_attack.push_back(t);
    }
  }
  double longest_gap_ms = in_attack.empty() ? 1e9 : 0;
  for (std::size_t k = 1; k < in_attack.size(); ++k) {
    longest_gap_ms =
        std::max(longest_gap_ms, std::chrono::duration<double, std::milli>(in_attack[k] - in_attack[k - 1]).count());
  }
  const cm::Counters& c = m->counters();
  std::printf("during 2 s of spoofed DREQs: %zu WRITEs completed, longest gap %.0f ms; MADs in %lu, held %lu, "
              "dropped unreachable %lu, unresolved %lu\n",
              in_attack.size(), longest_gap_ms, static_cast<unsigned long>(c.mads_received),
              static_cast<unsigned long>(c.mads_queued_unresolved),
              static_cast<unsigned long>(c.mads_dropped_unreachable),
              static_cast<unsigned long>(c.mads_dropped_unresolved));
  EXPECT_GE(c.mads_received, 15u) << "the spoofed DREQs did not arrive";
  // The DREQs used to hold the workers for the whole two seconds: a WRITE or
  // two, a gap of a second or more.
  EXPECT_GE(in_attack.size(), 20u);
  EXPECT_LT(longest_gap_ms, 900.0);
  EXPECT_GE(c.mads_dropped_unreachable + c.mads_dropped_unresolved, 10u) << "unresolvable sources not given up";
  EXPECT_EQ(m->address_handles(), 0u);
  m.reset();
  ctx->stop_workers();
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new uroce::test::EalEnvironment({.name = "uroce-seccm", .memory_mb = "512"}));
  return RUN_ALL_TESTS();
}
