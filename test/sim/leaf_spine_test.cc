// The simulated leaf-spine fabric: ECMP by the 5-tuple at the leaves'
// uplinks, a spine link failing at a given time, seeded loss per link, and
// RC traffic across it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "device/leaf_spine_fabric.h"
#include "support/test_seed.h"
#include "verbs/connect.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

// A 1 KiB RoCEv2 frame from host `src` to host `dst` of `net`, leaving
// with UDP source port `sport`.
std::vector<std::uint8_t> frame(sim::LeafSpine& net, int src, int dst, std::uint16_t sport) {
  wire::FrameSpec s;
  ibv_gid gs, gd;
  net.host_address(src, s.eth_src.data(), gs);
  net.host_address(dst, s.eth_dst.data(), gd);
  std::memcpy(s.src4.data(), gs.raw + 12, 4);
  std::memcpy(s.dst4.data(), gd.raw + 12, 4);
  s.udp_src_port = sport;
  s.udp_dst_port = 4791;
  s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcWriteMiddle);
  s.bth.pkey.set(0xffff);
  s.bth.dest_qp.set(0x11);
  std::vector<std::uint8_t> payload(1024, 0x5a);
  std::vector<std::uint8_t> out(2048);
  out.resize(wire::build_frame(s, payload, out));
  return out;
}

// Sends `f` from host `src` as its NIC would (true if the NIC took it).
bool send(sim::LeafSpine& net, int src, const std::vector<std::uint8_t>& f) {
  wire::TxFrame tx;
  tx.npieces = 1;
  tx.pieces[0] = std::span<const std::uint8_t>(f);
  return net.port(src).tx_burst(&tx, 1) == 1;
}

// Runs the fabric until nothing is on its way; returns the frames host
// `dst` received.
std::size_t drain(sim::VirtualClock& clock, sim::LeafSpine& net, int dst) {
  std::size_t got = 0;
  for (;;) {
    engine::RxFrame rx[32];
    const std::uint16_t n = net.port(dst).rx_burst(rx, 32);
    got += n;
    net.port(dst).rx_release(rx, n);
    const std::uint64_t next = net.next_delivery_ns();
    if (next == 0 && n == 0) return got;
    if (next != 0) clock.advance_to(next);
  }
}

// Which spine a frame from leaf 0's host 0 to leaf 1's host with `sport`
// took (the uplink whose count grew).
int spine_taken(sim::VirtualClock& clock, sim::LeafSpine& net, int spines, std::uint16_t sport) {
  std::vector<std::uint64_t> before;
  for (int s = 0; s < spines; ++s) before.push_back(net.uplink(0, s).enqueued);
  EXPECT_TRUE(send(net, 0, frame(net, 0, 2, sport)));
  EXPECT_EQ(drain(clock, net, 2), 1u);
  int taken = -1;
  for (int s = 0; s < spines; ++s) {
    if (net.uplink(0, s).enqueued == before[static_cast<std::size_t>(s)] + 1) {
      EXPECT_EQ(taken, -1) << "two uplinks took one frame";
      taken = s;
    }
  }
  return taken;
}

sim::LeafSpineConfig two_by_two(int spines) {
  sim::LeafSpineConfig c;
  c.spines = spines;
  c.leaves = 2;
  c.hosts_per_leaf = 2;
  return c;
}

TEST(LeafSpine, EcmpSpreadsUdpSourcePortsOverSpinesAndKeepsEachOnOne) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  sim::VirtualClock clock;
  sim::LeafSpine net(clock, seed, two_by_two(4));
  std::set<int> used;
  std::vector<int> first;
  for (std::uint16_t p = 0; p < 32; ++p) {
    const int s = spine_taken(clock, net, 4, static_cast<std::uint16_t>(0xc000 + p));
    ASSERT_GE(s, 0);
    first.push_back(s);
    used.insert(s);
  }
  // 32 ports over 4 spines: every spine gets some (a uniform hash misses
  // one with probability 4 * (3/4)^32 ~ 1e-4; deterministic for the seed).
  EXPECT_EQ(used.size(), 4u);
  // The same 5-tuple always takes the same spine.
  for (std::uint16_t p = 0; p < 32; ++p) {
    EXPECT_EQ(spine_taken(clock, net, 4, static_cast<std::uint16_t>(0xc000 + p)), first[p]) << "port " << p;
  }
  // The same leaf: no spine at all.
  ASSERT_TRUE(send(net, 0, frame(net, 0, 1, 0xc000)));
  EXPECT_EQ(drain(clock, net, 1), 1u);
  std::uint64_t up = 0;
  for (int s = 0; s < 4; ++s) up += net.uplink(0, s).enqueued;
  EXPECT_EQ(up, 64u);
}

TEST(LeafSpine, FiveTupleOfAFrame) {
  sim::VirtualClock clock;
  sim::LeafSpine net(clock, 1, two_by_two(2));
  const std::vector<std::uint8_t> f = frame(net, 1, 3, 0xc123);
  sim::FiveTuple t;
  ASSERT_TRUE(sim::parse_five_tuple(f, t));
  EXPECT_EQ(t.src_ip, 0x0a630102u);  // 10.99.1.2
  EXPECT_EQ(t.dst_ip, 0x0a630202u);  // 10.99.2.2
  EXPECT_EQ(t.src_port, 0xc123);
  EXPECT_EQ(t.dst_port, 4791);
  EXPECT_EQ(t.protocol, 17);
  // IPv6: the same ports, the addresses folded.
  wire::FrameSpec v6;
  v6.ip_version = 6;
  v6.src6[15] = 1;
  v6.dst6[15] = 2;
  v6.udp_src_port = 0xc456;
  v6.udp_dst_port = 4791;
  v6.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcWriteMiddle);
  std::vector<std::uint8_t> payload(64, 1), out(512);
  out.resize(wire::build_frame(v6, payload, out));
  ASSERT_TRUE(sim::parse_five_tuple(out, t));
  EXPECT_EQ(t.src_ip, 1u);
  EXPECT_EQ(t.dst_ip, 2u);
  EXPECT_EQ(t.src_port, 0xc456);
  EXPECT_EQ(t.protocol, 17);
  std::vector<std::uint8_t> arp(f.begin(), f.begin() + 42);
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_FALSE(sim::parse_five_tuple(arp, t));
}

TEST(LeafSpine, AFailedSpineLinkDropsWhatLeavesOnItFromThenOnAndCountsIt) {
  sim::VirtualClock clock;
  sim::LeafSpine net(clock, 7, two_by_two(2));
  // A port whose flow takes spine 0, and one whose flow takes spine 1.
  std::uint16_t on[2] = {0, 0};
  for (std::uint16_t p = 0xc000; on[0] == 0 || on[1] == 0; ++p) {
    const int s = spine_taken(clock, net, 2, p);
    ASSERT_GE(s, 0);
    if (on[s] == 0) on[s] = p;
  }
  const std::uint64_t fail_at = clock.now_ns() + 10'000;
  net.fail_link(0, 0, fail_at);
  // Before the failure: delivered.
  ASSERT_TRUE(send(net, 0, frame(net, 0, 2, on[0])));
  EXPECT_EQ(drain(clock, net, 2), 1u);
  EXPECT_EQ(net.failed_drops(), 0u);
  clock.advance_to(fail_at);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(send(net, 0, frame(net, 0, 2, on[0])));
    EXPECT_EQ(drain(clock, net, 2), 0u);
  }
  EXPECT_EQ(net.uplink(0, 0).failed_dropped, 5u);
  EXPECT_EQ(net.failed_drops(), 5u);
  // ECMP does not notice (no routing here): the flow keeps its spine. The
  // other spine still carries its flow.
  ASSERT_TRUE(send(net, 0, frame(net, 0, 2, on[1])));
  EXPECT_EQ(drain(clock, net, 2), 1u);
  EXPECT_EQ(net.failed_drops(), 5u);
}

TEST(LeafSpine, AFailedLinkLeavesTheEcmpChoiceAfterTheRerouteTime) {
  sim::VirtualClock clock;
  sim::LeafSpine net(clock, 7, two_by_two(2));
  std::uint16_t sport = 0;
  for (std::uint16_t p = 0xc000; sport == 0; ++p) {
    if (spine_taken(clock, net, 2, p) == 0) sport = p;
  }
  const std::uint64_t fail_at = clock.now_ns() + 10'000;
  net.fail_link(0, 0, fail_at, 500'000);
  clock.advance_to(fail_at + 1'000);
  ASSERT_TRUE(send(net, 0, frame(net, 0, 2, sport)));
  EXPECT_EQ(drain(clock, net, 2), 0u) << "not rerouted yet";
  EXPECT_EQ(net.failed_drops(), 1u);
  clock.advance_to(fail_at + 500'000);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(spine_taken(clock, net, 2, sport), 1) << "the only spine left";
  // Nor does leaf 1 send towards leaf 0 through spine 0 any more.
  for (std::uint16_t p = 0xc000; p < 0xc010; ++p) {
    ASSERT_TRUE(send(net, 2, frame(net, 2, 0, p)));
    EXPECT_EQ(drain(clock, net, 0), 1u);
  }
  EXPECT_EQ(net.uplink(1, 0).enqueued + net.uplink(1, 0).failed_dropped, 0u);
  EXPECT_EQ(net.failed_drops(), 1u);
}

TEST(LeafSpine, ASlowLinkTakesLongerPerFrame) {
  sim::VirtualClock clock;
  sim::LeafSpine net(clock, 7, two_by_two(2));
  std::uint16_t on[2] = {0, 0};
  for (std::uint16_t p = 0xc000; on[0] == 0 || on[1] == 0; ++p) {
    const int s = spine_taken(clock, net, 2, p);
    ASSERT_GE(s, 0);
    if (on[s] == 0) on[s] = p;
  }
  net.set_link_gbps(0, 1, 1);  // a tenth of the others
  std::uint64_t took[2];
  for (int s = 0; s < 2; ++s) {
    const std::uint64_t t0 = clock.now_ns();
    ASSERT_TRUE(send(net, 0, frame(net, 0, 2, on[s])));
    EXPECT_EQ(drain(clock, net, 2), 1u);
    took[s] = clock.now_ns() - t0;
  }
  // Four hops of ~0.85 us at 10 Gb/s, one of them ~8.5 us at 1 Gb/s (virtual
  // time: the same every run).
  EXPECT_GT(took[1], took[0] + 7'000) << took[0] << " vs " << took[1];
}

// Which of `n` frames a lossy link lost, for a seed.
std::vector<bool> losses(std::uint64_t seed, double loss, int n) {
  sim::VirtualClock clock;
  sim::LeafSpine net(clock, seed, two_by_two(1));
  net.set_host_rx_loss(1, loss);
  std::vector<bool> lost;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t before = net.host_rx(1).lost;
    EXPECT_TRUE(send(net, 0, frame(net, 0, 1, 0xc000)));
    drain(clock, net, 1);
    lost.push_back(net.host_rx(1).lost != before);
  }
  return lost;
}

TEST(LeafSpine, LossIsSeededAndDeterministicForTheSeed) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  const std::vector<bool> a = losses(seed, 0.1, 2000), b = losses(seed, 0.1, 2000), c = losses(seed + 1, 0.1, 2000);
  EXPECT_EQ(a, b) << "the same seed loses the same frames";
  EXPECT_NE(a, c) << "another seed, other frames";
  const auto n = std::count(a.begin(), a.end(), true);
  // 10% of 2000 (binomial: sd ~13; 100 to 300 is over 7 sd either way).
  EXPECT_GT(n, 100);
  EXPECT_LT(n, 300);
  const std::vector<bool> none = losses(seed, 0, 200);
  EXPECT_EQ(std::count(none.begin(), none.end(), true), 0);
}

// RC WRITEs between hosts on different leaves: every byte arrives, through
// loss on the last hop (go-back-N resends). Not a timed test: virtual time.
TEST(LeafSpine, RcWritesAcrossTheSpinesThroughLoss) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  sim::LeafSpineConfig c = two_by_two(2);
  device::LeafSpineFabric fabric(seed, c, nullptr);
  fabric.net.set_host_rx_loss(3, 0.03);
  Context& a = *fabric.hosts[0];
  Context& b = *fabric.hosts[3];
  ProtectionDomain* pa = a.alloc_pd();
  ProtectionDomain* pb = b.alloc_pd();
  CompletionQueue* ca = a.create_cq(64);
  CompletionQueue* cb = b.create_cq(64);
  QpInitAttr init;
  init.cap = ibv_qp_cap{16, 4, 1, 1, 0};
  init.send_cq = init.recv_cq = ca;
  QueuePair* qa = pa->create_qp(init);
  init.send_cq = init.recv_cq = cb;
  QueuePair* qb = pb->create_qp(init);
  constexpr std::uint32_t kSize = 1u << 20;
  auto* src = static_cast<std::uint8_t*>(a.alloc_buffer(kSize));
  auto* dst = static_cast<std::uint8_t*>(b.alloc_buffer(kSize));
  for (std::uint32_t i = 0; i < kSize; ++i) src[i] = static_cast<std::uint8_t>(i * 13 + (i >> 9));
  MemoryRegion* ma = pa->reg_mr(src, kSize, IBV_ACCESS_LOCAL_WRITE);
  MemoryRegion* mb = pb->reg_mr(dst, kSize, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ConnectParams p;
  p.mtu = IBV_MTU_4096;
  ASSERT_EQ(connect_rc(qa, b.gid(), qb->qp_num(), 0x100, 0x200, p), 0);
  ASSERT_EQ(connect_rc(qb, a.gid(), qa->qp_num(), 0x200, 0x100, p), 0);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(src), kSize, ma->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(dst);
  wr.wr.rdma.rkey = mb->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(qa->post_send(&wr, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(fabric.run_until([&] { return ca->poll(1, &wc) == 1; }, 10'000'000'000ull));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(src, dst, kSize), 0);
  EXPECT_GT(fabric.net.host_rx(3).lost, 0u) << "3% of 256 packets";
  EXPECT_GT(qa->counter("retransmitted_packets"), 0u);
}

}  // namespace
}  // namespace uroce::test
