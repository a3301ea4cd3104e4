// Loopback (lib/engine/loopback.h): frames to the device's own GIDs come
// back through its receive path and never reach the port; everything else
// passes through. First the queue alone over a scripted port, then QPs of
// one device talking to each other over a port that never delivers a frame.
#include "engine/loopback.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "support/frame_helpers.h"
#include "support/work_requests.h"
#include "uroce/stats.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"
#include "wire/frame.h"
#include "wire/headers.h"

namespace uroce {
namespace {

using engine::LoopbackPort;
using engine::LoopbackQueue;

constexpr std::uint8_t kMac[6] = {0x02, 0, 0, 0, 0, 0x0a};
const ibv_gid kGid = ipv4_gid({10, 0, 0, 1});

// A port that records what it is sent, takes at most `take` frames per
// burst, and hands out queued frames on receive.
class ScriptedPort : public PacketIo {
 public:
  std::uint16_t rx_burst(RxFrame* frames, std::uint16_t max) override {
    std::uint16_t n = 0;
    while (n < max && !rx.empty()) {
      held.push_back(rx.front());
      rx.pop_front();
      frames[n] = RxFrame{held.back().data(), static_cast<std::uint16_t>(held.back().size()), &held.back(), 0, {}};
      ++n;
    }
    return n;
  }
  void rx_release(RxFrame* frames, std::uint16_t n) override {
    for (std::uint16_t i = 0; i < n; ++i) released.push_back(frames[i].cookie);
  }
  std::uint16_t tx_burst(const TxFrame* frames, std::uint16_t n) override {
    ++tx_calls;
    const std::uint16_t took = std::min(n, take);
    for (std::uint16_t i = 0; i < took; ++i) {
      std::vector<std::uint8_t> f(frames[i].frame_bytes());
      frames[i].copy_to(f.data());
      sent.push_back(f);
    }
    return took;
  }
  bool provides_tx_heads() const override { return heads; }
  void tx_heads_return(const TxHead* h, std::uint16_t n) override {
    for (std::uint16_t i = 0; i < n; ++i) returned_heads.push_back(h[i].cookie);
  }
  Resolution resolve(const ibv_gid&, std::uint8_t mac[6], bool) override {
    ++resolves;
    std::memset(mac, 0xee, 6);
    return Resolution::kPending;
  }
  bool ipv4_checksum_offload() const override { return offload; }
  void visit_counters(void (*visit)(void*, const char*, const char*, std::uint64_t), void* arg) const override {
    visit(arg, "port_counter", "the port's own", 7);
  }

  std::deque<std::vector<std::uint8_t>> rx;
  std::deque<std::vector<std::uint8_t>> held;
  std::vector<void*> released;
  std::vector<std::vector<std::uint8_t>> sent;
  std::vector<void*> returned_heads;
  std::uint16_t take = 32;
  int tx_calls = 0;
  int resolves = 0;
  bool heads = false;
  bool offload = false;
};

// A frame from 10.0.0.1 to `dst` (IPv4) or fe80:: addresses (IPv6), as the
// engine hands it over: the whole frame in its head.
struct Built {
  std::vector<std::uint8_t> bytes;
  TxFrame frame;
};

Built build_to(const wire::Ipv4Addr& dst, std::uint32_t psn, bool ipv4_checksum = true) {
  wire::FrameSpec s = test::make_spec(static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly));
  s.src4 = {10, 0, 0, 1};
  s.dst4 = dst;
  s.bth.psn.set(psn);
  Built b;
  b.bytes = test::build(s, std::vector<std::uint8_t>(100, static_cast<std::uint8_t>(psn)));
  if (!ipv4_checksum) b.bytes[14 + 10] = b.bytes[14 + 11] = 0;
  b.frame.head = TxHead{b.bytes.data(), static_cast<std::uint16_t>(b.bytes.size()), &b};
  b.frame.head_len = static_cast<std::uint16_t>(b.bytes.size());
  b.frame.l3_offset = 14;
  return b;
}

Built build_to_link_local(const std::uint8_t mac[6]) {
  wire::FrameSpec s = test::make_spec(static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly), 6);
  s.dst6 = wire::ipv6_link_local(mac);
  Built b;
  b.bytes = test::build(s, std::vector<std::uint8_t>(64, 0x5a));
  b.frame.head = TxHead{b.bytes.data(), static_cast<std::uint16_t>(b.bytes.size()), &b};
  b.frame.head_len = static_cast<std::uint16_t>(b.bytes.size());
  b.frame.l3_offset = 14;
  return b;
}

std::map<std::string, std::uint64_t> counters(const PacketIo& io) {
  std::map<std::string, std::uint64_t> m;
  io.visit_counters([](void* arg, const char* name, const char*, std::uint64_t v) {
    (*static_cast<std::map<std::string, std::uint64_t>*>(arg))[name] = v;
  }, &m);
  return m;
}

TEST(Loopback, AFrameToAnOwnGidComesBackWholeAndNeverReachesThePort) {
  ScriptedPort port;
  LoopbackPort lp({&port}, kMac, kGid);
  LoopbackQueue& q = lp.queue(0);
  Built own = build_to({10, 0, 0, 1}, 1);
  ASSERT_EQ(q.tx_burst(&own.frame, 1), 1);
  EXPECT_TRUE(port.sent.empty());
  EXPECT_EQ(port.tx_calls, 0);
  RxFrame rx[4];
  ASSERT_EQ(q.rx_burst(rx, 4), 1);
  ASSERT_EQ(rx[0].frame_bytes(), own.bytes.size());
  EXPECT_EQ(std::memcmp(rx[0].data, own.bytes.data(), own.bytes.size()), 0);
  wire::ParsedFrame parsed;
  EXPECT_EQ(wire::parse_frame({rx[0].data, rx[0].len}, parsed), wire::ParseStatus::kOk);
  q.rx_release(rx, 1);
  EXPECT_TRUE(port.released.empty());  // the loop's buffer, not the port's
  const auto c = counters(q);
  EXPECT_EQ(c.at("loopback_frames"), 1u);
  EXPECT_EQ(c.at("loopback_bytes"), own.bytes.size());
  EXPECT_EQ(c.at("port_counter"), 7u);
  EXPECT_EQ(q.rx_burst(rx, 4), 0);
}

TEST(Loopback, TheLinkLocalGidFromTheMacIsOwnToo) {
  ScriptedPort port;
  LoopbackPort lp({&port}, kMac, kGid);
  Built own = build_to_link_local(kMac);
  const std::uint8_t other_mac[6] = {0x02, 0, 0, 0, 0, 0x0b};
  Built other = build_to_link_local(other_mac);
  TxFrame burst[2] = {own.frame, other.frame};
  ASSERT_EQ(lp.queue(0).tx_burst(burst, 2), 2);
  ASSERT_EQ(port.sent.size(), 1u);
  EXPECT_EQ(port.sent[0], other.bytes);
  RxFrame rx[2];
  ASSERT_EQ(lp.queue(0).rx_burst(rx, 2), 1);
  EXPECT_EQ(std::memcmp(rx[0].data, own.bytes.data(), own.bytes.size()), 0);
  lp.queue(0).rx_release(rx, 1);
}

TEST(Loopback, OwnGidsResolveToOwnMacWithoutAskingThePort) {
  ScriptedPort port;
  LoopbackPort lp({&port}, kMac, kGid);
  std::uint8_t mac[6] = {};
  EXPECT_EQ(lp.queue(0).resolve(kGid, mac, true), PacketIo::Resolution::kKnown);
  EXPECT_EQ(std::memcmp(mac, kMac, 6), 0);
  ibv_gid ll{};
  const wire::Ipv6Addr a = wire::ipv6_link_local(kMac);
  std::memcpy(ll.raw, a.data(), 16);
  std::memset(mac, 0, 6);
  EXPECT_EQ(lp.queue(0).resolve(ll, mac, true), PacketIo::Resolution::kKnown);
  EXPECT_EQ(std::memcmp(mac, kMac, 6), 0);
  EXPECT_EQ(port.resolves, 0);
  EXPECT_EQ(lp.queue(0).resolve(ipv4_gid({10, 0, 0, 2}), mac, true), PacketIo::Resolution::kPending);
  EXPECT_EQ(port.resolves, 1);
}

// The port takes a prefix of a burst; so does the loop, frames in order.
TEST(Loopback, AMixedBurstKeepsItsOrderAndThePortsPrefixRule) {
  ScriptedPort port;
  LoopbackPort lp({&port}, kMac, kGid);
  LoopbackQueue& q = lp.queue(0);
  Built a = build_to({10, 0, 0, 2}, 1), b = build_to({10, 0, 0, 1}, 2), c = build_to({10, 0, 0, 2}, 3),
        d = build_to({10, 0, 0, 1}, 4);
  TxFrame burst[4] = {a.frame, b.frame, c.frame, d.frame};
  port.take = 0;  // the port is full: nothing before the first own frame leaves
  EXPECT_EQ(q.tx_burst(burst, 4), 0);
  RxFrame rx[4];
  EXPECT_EQ(q.rx_burst(rx, 4), 0);  // b was not looped either
  port.take = 32;
  ASSERT_EQ(q.tx_burst(burst, 4), 4);
  ASSERT_EQ(port.sent.size(), 2u);
  EXPECT_EQ(port.sent[0], a.bytes);
  EXPECT_EQ(port.sent[1], c.bytes);
  ASSERT_EQ(q.rx_burst(rx, 4), 2);
  EXPECT_EQ(std::memcmp(rx[0].data, b.bytes.data(), b.bytes.size()), 0);
  EXPECT_EQ(std::memcmp(rx[1].data, d.bytes.data(), d.bytes.size()), 0);
  q.rx_release(rx, 2);
  // The port takes one of the two after b: the burst ends there.
  port.sent.clear();
  port.take = 1;
  TxFrame burst2[4] = {b.frame, a.frame, c.frame, d.frame};
  EXPECT_EQ(q.tx_burst(burst2, 4), 2);
  EXPECT_EQ(port.sent.size(), 1u);
  ASSERT_EQ(q.rx_burst(rx, 4), 1);
  q.rx_release(rx, 1);
}

// Received frames of the port and of the loop, released together, go back
// to their owners.
TEST(Loopback, ReleasesGoToTheirOwners) {
  ScriptedPort port;
  LoopbackPort lp({&port}, kMac, kGid);
  LoopbackQueue& q = lp.queue(0);
  Built own = build_to({10, 0, 0, 1}, 1);
  ASSERT_EQ(q.tx_burst(&own.frame, 1), 1);
  port.rx.push_back(build_to({10, 0, 0, 1}, 9).bytes);
  port.rx.push_back(build_to({10, 0, 0, 1}, 10).bytes);
  RxFrame rx[4];
  ASSERT_EQ(q.rx_burst(rx, 4), 3);
  std::swap(rx[0], rx[1]);  // port, loop, port
  q.rx_release(rx, 3);
  ASSERT_EQ(port.released.size(), 2u);
  EXPECT_EQ(port.released[0], rx[0].cookie);
  EXPECT_EQ(port.released[1], rx[2].cookie);
}

// Every buffer in use: the frame waits (counted), as on a full port, and
// goes once one is released.
TEST(Loopback, WhenEveryBufferIsInUseTheFrameWaits) {
  ScriptedPort port;
  LoopbackPort lp({&port}, kMac, kGid);
  LoopbackQueue& q = lp.queue(0);
  Built own = build_to({10, 0, 0, 1}, 1);
  std::vector<RxFrame> held;
  for (std::uint32_t i = 0; i < LoopbackPort::kSlotsPerQueue; ++i) {
    ASSERT_EQ(q.tx_burst(&own.frame, 1), 1) << i;
    RxFrame rx;
    ASSERT_EQ(q.rx_burst(&rx, 1), 1);
    held.push_back(rx);
  }
  EXPECT_EQ(q.tx_burst(&own.frame, 1), 0);
  EXPECT_EQ(counters(q).at("loopback_held_back"), 1u);
  q.rx_release(held.data(), 1);
  EXPECT_EQ(q.tx_burst(&own.frame, 1), 1);
  q.rx_release(held.data() + 1, static_cast<std::uint16_t>(held.size() - 1));
  RxFrame rx;
  ASSERT_EQ(q.rx_burst(&rx, 1), 1);
  q.rx_release(&rx, 1);
  EXPECT_TRUE(port.sent.empty());
}

// A port whose buffers hold the heads gets a looped frame's head back; one
// that fills IPv4 checksums left it 0, which the loop fills.
TEST(Loopback, PortHeadsGoBackAndTheIpv4ChecksumIsFilled) {
  ScriptedPort port;
  port.heads = true;
  port.offload = true;
  LoopbackPort lp({&port}, kMac, kGid);
  LoopbackQueue& q = lp.queue(0);
  Built full = build_to({10, 0, 0, 1}, 1);
  Built own = build_to({10, 0, 0, 1}, 1, false);
  ASSERT_NE(own.bytes, full.bytes);
  ASSERT_EQ(q.tx_burst(&own.frame, 1), 1);
  ASSERT_EQ(port.returned_heads.size(), 1u);
  EXPECT_EQ(port.returned_heads[0], &own);
  RxFrame rx;
  ASSERT_EQ(q.rx_burst(&rx, 1), 1);
  EXPECT_EQ(std::memcmp(rx.data, full.bytes.data(), full.bytes.size()), 0);
  q.rx_release(&rx, 1);
}

// Two queues of one port: a frame looped on one and released by the other
// (handed to the worker serving its QP) frees its buffer.
TEST(Loopback, AFrameReleasedThroughAnotherQueueFreesItsBuffer) {
  ScriptedPort p0, p1;
  LoopbackPort lp({&p0, &p1}, kMac, kGid);
  Built own = build_to({10, 0, 0, 1}, 1);
  for (std::uint32_t i = 0; i < 2 * LoopbackPort::kSlotsPerQueue; ++i) {
    ASSERT_EQ(lp.queue(0).tx_burst(&own.frame, 1), 1) << i;
    RxFrame rx;
    ASSERT_EQ(lp.queue(0).rx_burst(&rx, 1), 1);
    lp.queue(1).rx_release(&rx, 1);
  }
  EXPECT_TRUE(p0.released.empty());
  EXPECT_TRUE(p1.released.empty());
}


// --- QPs of one device over a port that delivers nothing -------------------

// A port with no peer (memif with nobody on the other end, a veth whose
// other end is down): it takes every frame and delivers none; nothing it
// is asked to resolve is ever known.
class DeadPort final : public PacketIo {
 public:
  std::uint16_t rx_burst(RxFrame*, std::uint16_t) override { return 0; }
  void rx_release(RxFrame*, std::uint16_t) override {}
  std::uint16_t tx_burst(const TxFrame*, std::uint16_t n) override {
    sent += n;
    return n;
  }
  Resolution resolve(const ibv_gid&, std::uint8_t*, bool) override { return Resolution::kPending; }
  std::uint64_t sent = 0;
};

class ManualClock final : public Clock {
 public:
  std::uint64_t now_ns() override { return now_ += 1000; }

 private:
  std::uint64_t now_ = 1'000'000;
};

// One device, two QPs of `type` on it, connected to each other through GID
// `sgid_index` (UD: made ready, with an address handle to its own GID).
struct OneDevice {
  static constexpr std::size_t kBytes = 1 << 16;
  static constexpr std::uint32_t kQkey = 0x11111111;

  OneDevice(ibv_qp_type type, std::uint8_t sgid_index) { set_up(type, sgid_index); }

  void set_up(ibv_qp_type type, std::uint8_t sgid_index) {
    PortConfig cfg;
    cfg.io = &port;
    cfg.clock = &clock;
    std::memcpy(cfg.mac, kMac, 6);
    cfg.gid = kGid;
    cfg.buffer_pages = PortConfig::Pages::kNormal;
    std::string error;
    ctx = Context::open(cfg, error);
    if (!ctx) {
      ADD_FAILURE() << error;
      return;
    }
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(256);
    QpInitAttr init;
    init.qp_type = type;
    init.send_cq = init.recv_cq = cq;
    init.cap = ibv_qp_cap{32, 32, 2, 2, 0};
    a = pd->create_qp(init);
    b = pd->create_qp(init);
    buf = static_cast<std::uint8_t*>(ctx->alloc_buffer(kBytes));
    mr = pd->reg_mr(buf, kBytes,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_NE(mr, nullptr);
    ibv_gid own{};
    ASSERT_EQ(ctx->query_gid(sgid_index, own), 0);
    if (type == IBV_QPT_UD) {
      ASSERT_EQ(ready_ud(a, kQkey, 0x10), 0);
      ASSERT_EQ(ready_ud(b, kQkey, 0x20), 0);
      ibv_ah_attr ah{};
      ah.is_global = 1;
      ah.port_num = 1;
      ah.grh.sgid_index = sgid_index;
      ah.grh.hop_limit = 64;
      ah.grh.dgid = own;
      to_self = pd->create_ah(ah);
      ASSERT_NE(to_self, nullptr) << ctx->last_error();
    } else {
      ConnectParams p;
      p.sgid_index = sgid_index;
      ASSERT_EQ(connect_rc(a, own, b->qp_num(), p.psn_a, p.psn_b, p), 0) << ctx->last_error();
      ASSERT_EQ(connect_rc(b, own, a->qp_num(), p.psn_b, p.psn_a, p), 0) << ctx->last_error();
    }
    ready = true;
  }

  std::vector<ibv_wc> wait(std::size_t n) {
    std::vector<ibv_wc> out;
    for (int round = 0; round < 200'000 && out.size() < n; ++round) {
      ctx->progress();
      ibv_wc wc[8];
      for (int k; (k = cq->poll(8, wc)) > 0;) out.insert(out.end(), wc, wc + k);
    }
    return out;
  }
  std::uint64_t port_stat(const char* name) const {
    const std::vector<Stat> all = ctx->stats();
    const Stat* s = find_stat(all, StatScope::kPort, name);
    return s == nullptr ? ~0ull : s->value;
  }

  DeadPort port;
  ManualClock clock;
  std::unique_ptr<Context> ctx;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  QueuePair* a = nullptr;
  QueuePair* b = nullptr;
  AddressHandle* to_self = nullptr;
  std::uint8_t* buf = nullptr;
  MemoryRegion* mr = nullptr;
  bool ready = false;
};

void fill(std::uint8_t* p, std::size_t n, std::uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(seed + i * 7);
}

class LoopbackDevice : public ::testing::TestWithParam<std::uint8_t> {};

// RC: SEND with immediate, WRITE, READ and both atomics between two QPs of
// one device, every byte checked; not one frame reaches the port.
TEST_P(LoopbackDevice, RcRunsEveryVerbBetweenTwoQpsOfOneDevice) {
  OneDevice d(IBV_QPT_RC, GetParam());
  ASSERT_TRUE(d.ready);
  std::uint8_t* src = d.buf;
  std::uint8_t* dst = d.buf + 16384;
  fill(src, 8192, 3);
  ASSERT_EQ(test::post_recv_one(d.b, dst, 8192, d.mr->lkey, 1), 0);
  ASSERT_EQ(test::post_send_one(d.a, IBV_WR_SEND_WITH_IMM, src, 8192, d.mr->lkey, 2, htonl(0x1234)), 0);
  std::vector<ibv_wc> wc = d.wait(2);
  ASSERT_EQ(wc.size(), 2u);
  for (const ibv_wc& w : wc) EXPECT_EQ(w.status, IBV_WC_SUCCESS) << w.wr_id;
  EXPECT_EQ(std::memcmp(src, dst, 8192), 0);

  fill(src, 8192, 9);
  ASSERT_EQ(test::post_rdma(d.a, IBV_WR_RDMA_WRITE, src, 8192, d.mr->lkey, dst, d.mr->rkey, 3), 0);
  wc = d.wait(1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(src, dst, 8192), 0);

  std::uint8_t* back = d.buf + 32768;
  ASSERT_EQ(test::post_rdma(d.b, IBV_WR_RDMA_READ, back, 8192, d.mr->lkey, src, d.mr->rkey, 4), 0);
  wc = d.wait(1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(src, back, 8192), 0);

  auto* counter = reinterpret_cast<std::uint64_t*>(d.buf + 49152);
  auto* old = reinterpret_cast<std::uint64_t*>(d.buf + 49160);
  *counter = 40;
  ibv_sge asge{reinterpret_cast<std::uint64_t>(old), 8, d.mr->lkey};
  ibv_send_wr aw{};
  aw.wr_id = 5;
  aw.sg_list = &asge;
  aw.num_sge = 1;
  aw.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  aw.send_flags = IBV_SEND_SIGNALED;
  aw.wr.atomic.remote_addr = reinterpret_cast<std::uint64_t>(counter);
  aw.wr.atomic.rkey = d.mr->rkey;
  aw.wr.atomic.compare_add = 2;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(d.a->post_send(&aw, &bad), 0);
  wc = d.wait(1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(*old, 40u);
  EXPECT_EQ(*counter, 42u);
  aw.wr_id = 6;
  aw.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  aw.wr.atomic.compare_add = 42;
  aw.wr.atomic.swap = 7;
  ASSERT_EQ(d.a->post_send(&aw, &bad), 0);
  wc = d.wait(1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(*counter, 7u);

  EXPECT_EQ(d.port.sent, 0u) << "a frame to the device itself reached the port";
  EXPECT_GT(d.port_stat("loopback_frames"), 10u);
  EXPECT_EQ(d.a->counter("retransmitted_packets"), 0u);
}

// UC: SEND and WRITE.
TEST_P(LoopbackDevice, UcSendsAndWritesBetweenTwoQpsOfOneDevice) {
  OneDevice d(IBV_QPT_UC, GetParam());
  ASSERT_TRUE(d.ready);
  std::uint8_t* src = d.buf;
  std::uint8_t* dst = d.buf + 16384;
  fill(src, 4000, 5);
  ASSERT_EQ(test::post_recv_one(d.b, dst, 4000, d.mr->lkey, 1), 0);
  ASSERT_EQ(test::post_send_one(d.a, IBV_WR_SEND, src, 4000, d.mr->lkey, 2), 0);
  std::vector<ibv_wc> wc = d.wait(2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(std::memcmp(src, dst, 4000), 0);
  fill(src, 4000, 6);
  ASSERT_EQ(test::post_rdma(d.a, IBV_WR_RDMA_WRITE, src, 4000, d.mr->lkey, dst, d.mr->rkey, 3), 0);
  wc = d.wait(1);
  ASSERT_EQ(wc.size(), 1u);
  for (int i = 0; i < 1000; ++i) d.ctx->progress();  // the WRITE's packets may trail its completion
  EXPECT_EQ(std::memcmp(src, dst, 4000), 0);
  EXPECT_EQ(d.port.sent, 0u);
}

// UD: a datagram to the device's own GID arrives behind its GRH, naming
// its sender.
TEST_P(LoopbackDevice, UdDatagramsToTheDevicesOwnGid) {
  OneDevice d(IBV_QPT_UD, GetParam());
  ASSERT_TRUE(d.ready);
  std::uint8_t* src = d.buf;
  std::uint8_t* dst = d.buf + 16384;
  fill(src, 512, 8);
  ASSERT_EQ(test::post_recv_one(d.b, dst, 40 + 512, d.mr->lkey, 1), 0);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(src), 512, d.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = d.to_self->ibv();
  wr.wr.ud.remote_qpn = d.b->qp_num();
  wr.wr.ud.remote_qkey = OneDevice::kQkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(d.a->post_send(&wr, &bad), 0);
  std::vector<ibv_wc> wc = d.wait(2);
  ASSERT_EQ(wc.size(), 2u);
  for (const ibv_wc& w : wc) {
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    if (w.wr_id == 1) {
      EXPECT_EQ(w.byte_len, 40u + 512u);
      EXPECT_EQ(w.src_qp, d.a->qp_num());
      EXPECT_TRUE(w.wc_flags & IBV_WC_GRH);
    }
  }
  EXPECT_EQ(std::memcmp(src, dst + 40, 512), 0);
  EXPECT_EQ(d.port.sent, 0u);
}

INSTANTIATE_TEST_SUITE_P(Gids, LoopbackDevice, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<std::uint8_t>& p) {
                           return p.param == 0 ? std::string("link_local") : std::string("ipv4");
                         });

}  // namespace
}  // namespace uroce
