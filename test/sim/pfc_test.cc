// PFC: the MAC Control frame codec (802.3x PAUSE, 802.1Qbb PFC), and the
// simulated switch's pause and resume rules, timed by hand.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "sim/sim_switch.h"
#include "wire/pfc.h"

namespace uroce {
namespace {

using wire::MacControl;
using wire::PauseRequest;

const wire::MacAddr kSrc = {0x02, 0, 0, 0, 0, 0x11};

TEST(PfcFrame, APfcFrameIsSixtyBytesToTheReservedAddressAndReadsBack) {
  PauseRequest req;
  req.enabled = 0x09;  // priorities 0 and 3
  req.quanta[0] = 0x1234;
  req.quanta[3] = 0xffff;
  req.quanta[5] = 77;  // not enabled: sent as 0
  std::array<std::uint8_t, 64> buf{};
  ASSERT_EQ(wire::build_mac_control(kSrc, req, buf), 60u);
  // 01:80:c2:00:00:01, the source, 0x8808, opcode 0x0101, vector 0x0009,
  // then eight times, then zero padding to 60 bytes.
  const std::vector<std::uint8_t> head = {0x01, 0x80, 0xc2, 0, 0, 1, 0x02, 0, 0, 0, 0, 0x11, 0x88, 0x08,
                                          0x01, 0x01, 0x00, 0x09, 0x12, 0x34, 0, 0, 0, 0, 0xff, 0xff};
  EXPECT_EQ(std::vector<std::uint8_t>(buf.begin(), buf.begin() + 26), head);
  for (std::size_t i = 26; i < 60; ++i) EXPECT_EQ(buf[i], 0) << i;

  PauseRequest got;
  ASSERT_EQ(wire::parse_mac_control(std::span(buf.data(), 60), got), MacControl::kPfc);
  EXPECT_TRUE(got.pfc);
  EXPECT_EQ(got.enabled, 0x09);
  EXPECT_EQ(got.quanta[0], 0x1234);
  EXPECT_EQ(got.quanta[3], 0xffff);
  EXPECT_EQ(got.quanta[5], 0);
}

TEST(PfcFrame, An8023xPauseEnablesEveryPriorityWithItsOneTime) {
  PauseRequest req;
  req.pfc = false;
  req.quanta[0] = 500;
  std::array<std::uint8_t, 60> buf{};
  ASSERT_EQ(wire::build_mac_control(kSrc, req, buf), 60u);
  EXPECT_EQ(buf[14], 0x00);
  EXPECT_EQ(buf[15], 0x01);  // opcode 0x0001
  EXPECT_EQ(buf[16], 0x01);
  EXPECT_EQ(buf[17], 0xf4);  // 500
  PauseRequest got;
  ASSERT_EQ(wire::parse_mac_control(buf, got), MacControl::kPause);
  EXPECT_FALSE(got.pfc);
  EXPECT_EQ(got.enabled, 0xff);
  for (std::uint16_t q : got.quanta) EXPECT_EQ(q, 500);
}

TEST(PfcFrame, OtherFramesShortFramesAndOtherOpcodesAreTold) {
  std::array<std::uint8_t, 60> buf{};
  PauseRequest req;
  ASSERT_EQ(wire::build_mac_control(kSrc, req, buf), 60u);
  PauseRequest got;
  // Cut inside the PFC payload: malformed, never read past the end.
  EXPECT_EQ(wire::parse_mac_control(std::span(buf.data(), 14 + 19), got), MacControl::kMalformed);
  EXPECT_EQ(wire::parse_mac_control(std::span(buf.data(), 15), got), MacControl::kMalformed);
  EXPECT_EQ(wire::parse_mac_control(std::span(buf.data(), 13), got), MacControl::kNone);
  buf[15] = 0x02;  // opcode 0x0102: not PAUSE, not PFC
  EXPECT_EQ(wire::parse_mac_control(buf, got), MacControl::kOther);
  buf[12] = 0x08;
  buf[13] = 0x00;  // IPv4
  EXPECT_EQ(wire::parse_mac_control(buf, got), MacControl::kNone);
  std::array<std::uint8_t, 10> tiny{};
  EXPECT_EQ(wire::build_mac_control(kSrc, req, tiny), 0u);
}

TEST(PfcFrame, AQuantumIs512BitTimes) {
  // 0xffff quanta at 10 Gb/s: 65535 * 512 / 10 = 3,355,392 ns.
  EXPECT_EQ(wire::pause_quanta_ns(0xffff, 10), 3'355'392u);
  // One quantum at 100 Gb/s: 5.12 ns, rounded up to 6.
  EXPECT_EQ(wire::pause_quanta_ns(1, 100), 6u);
  EXPECT_EQ(wire::pause_quanta_ns(0, 25), 0u);
}

// --- the simulated switch ---------------------------------------------------
//
// Host A (port 0, 10 Gb/s) sends 976-byte frames (1,000 bytes on the wire:
// 800 ns each) in DSCP 26, priority 3, to host B (port 1), whose egress
// drains at 3 Gb/s (2,666 ns a frame); links delay 1,000 ns. Frame k leaves
// A at T0 + 800k and reaches the switch at T0 + 1,800 + 800k; frame i leaves
// B's egress at T0 + 1,800 + 2,666(i + 1). XOFF is 5 frames (4,880 bytes),
// XON 2 (1,952). B's egress holds 100 KB of lossy frames.

constexpr std::uint8_t kMacA[6] = {0x02, 0, 0, 0, 0, 0x0a};
constexpr std::uint8_t kMacB[6] = {0x02, 0, 0, 0, 0, 0x0b};
constexpr std::uint8_t kMacC[6] = {0x02, 0, 0, 0, 0, 0x0c};
constexpr std::size_t kFrame = 976;

std::vector<std::uint8_t> ipv4_frame(const std::uint8_t dst[6], std::uint8_t dscp, std::uint32_t seq) {
  std::vector<std::uint8_t> f(kFrame, 0);
  std::memcpy(f.data(), dst, 6);
  std::memcpy(f.data() + 6, kMacA, 6);
  f[12] = 0x08;  // IPv4
  f[14] = 0x45;
  f[15] = static_cast<std::uint8_t>(dscp << 2);
  std::memcpy(f.data() + 40, &seq, 4);
  return f;
}

struct Bed {
  sim::VirtualClock clock;
  sim::SimSwitch sw{clock, 1};
  engine::PacketIo* a = nullptr;
  engine::PacketIo* b = nullptr;
  engine::PacketIo* c = nullptr;
  std::uint64_t t0 = 0;
  struct Sent {
    std::uint64_t at;
    int port;
    std::uint8_t enabled;
    std::uint16_t quanta;
  };
  std::vector<Sent> pfc;
  std::vector<std::vector<std::uint8_t>> frames;  // kept alive while the NIC takes them

  explicit Bed(sim::PfcConfig pfc_config, double b_gbps = 3) {
    sw.set_pfc(pfc_config);
    sim::EgressConfig edge;
    edge.gbps = 10;
    edge.delay_ns = 1'000;
    edge.buffer_bytes = 1u << 20;
    edge.nic_frames = 512;  // A's NIC takes every frame at once
    a = &sw.add_port(kMacA, ibv_gid{}, edge);
    sim::EgressConfig slow = edge;
    slow.gbps = b_gbps;
    slow.buffer_bytes = 100'000;  // for lossy frames; lossless ones are bounded at their ingress
    b = &sw.add_port(kMacB, ibv_gid{}, slow);
    c = &sw.add_port(kMacC, ibv_gid{}, edge);
    sw.observe_pfc([this](std::uint64_t at, int port, const wire::PauseRequest& r) {
      pfc.push_back(Sent{at - t0, port, r.enabled, r.quanta[3]});
    });
    t0 = clock.now_ns();
  }
  // A hands `n` frames of `dscp` to its NIC now.
  void send(const std::uint8_t dst[6], std::uint8_t dscp, std::uint32_t n) {
    std::vector<wire::TxFrame> tx(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      frames.push_back(ipv4_frame(dst, dscp, static_cast<std::uint32_t>(frames.size())));
      tx[i].head.data = frames.back().data();
      tx[i].head_len = static_cast<std::uint16_t>(kFrame);
    }
    ASSERT_EQ(a->tx_burst(tx.data(), static_cast<std::uint16_t>(n)), n);
  }
  // Runs the switch to T0 + t.
  void at(std::uint64_t t) {
    clock.advance_to(t0 + t);
    sw.next_delivery_ns();
  }
  std::size_t received(engine::PacketIo* io) {
    engine::RxFrame rx[32];
    std::size_t n = 0;
    for (std::uint16_t k; (k = io->rx_burst(rx, 32)) > 0; n += k) io->rx_release(rx, k);
    return n;
  }
};

sim::PfcConfig pfc_config() {
  sim::PfcConfig p;
  p.enabled = true;
  p.lossless = 1u << 3;
  p.xoff_bytes = 5 * kFrame;
  p.xon_bytes = 2 * kFrame;
  return p;
}

TEST(SimPfc, TheHeadroomCoversTwoDelaysAPfcFrameAndTwoFrames) {
  // 10 Gb/s, 1 us each way: 2,000 ns + 67 ns (a 60-byte frame's 84 bytes
  // on the wire) at 1.25 bytes/ns = 2,583 bytes, plus two 4,224-byte frames.
  EXPECT_EQ(sim::pfc_headroom_bytes(sim::PfcConfig{}, 10, 1'000), 2'583u + 2 * 4'224u);
}

TEST(SimPfc, XoffPausesTheUpstreamHostAndXonResumesItAtTheTimesWorkedOutByHand) {
  Bed bed(pfc_config());
  bed.send(kMacB, 26, 40);
  // Frame 6 arrives at 6,600 with frames 0-6 in, none out (frame 0 leaves
  // at 4,466, frame 1 at 7,132): 6 frames, past XOFF (5): a PFC frame for
  // priority 3 with the longest pause.
  bed.at(6'599);
  EXPECT_TRUE(bed.pfc.empty());
  bed.at(6'600);
  ASSERT_EQ(bed.pfc.size(), 1u);
  EXPECT_EQ(bed.pfc[0].at, 6'600u);
  EXPECT_EQ(bed.pfc[0].port, 0);
  EXPECT_EQ(bed.pfc[0].enabled, 1u << 3);
  EXPECT_EQ(bed.pfc[0].quanta, 0xffff);
  // It reaches A 67 + 1,000 ns later, while frame 9 (started at 7,200) is
  // on the wire: A finishes it and sends nothing more. 30 of 40 wait.
  bed.at(7'666);
  EXPECT_EQ(bed.sw.pfc_stats(0).received, 0u);
  bed.at(7'667);
  EXPECT_EQ(bed.sw.pfc_stats(0).received, 1u);
  bed.at(20'000);
  EXPECT_EQ(bed.sw.nic_frames(0), 30u);
  // 10 frames in; frame 7 leaves at 1,800 + 8 x 2,666 = 23,128, leaving 2:
  // down to XON, a PFC frame with pause time 0.
  bed.at(23'127);
  EXPECT_EQ(bed.pfc.size(), 1u);
  bed.at(23'128);
  ASSERT_EQ(bed.pfc.size(), 2u);
  EXPECT_EQ(bed.pfc[1].at, 23'128u);
  EXPECT_EQ(bed.pfc[1].quanta, 0);
  // A resumes when it arrives, at 24,195: paused 24,195 - 7,667 ns.
  bed.at(24'194);
  EXPECT_EQ(bed.sw.nic_frames(0), 30u);
  bed.at(24'195);
  EXPECT_EQ(bed.sw.nic_frames(0), 29u);
  EXPECT_EQ(bed.sw.paused_ns(0), 16'528u);
  bed.at(24'500);
  EXPECT_EQ(bed.sw.paused_ns(0), 16'528u);
  // Most of the count: frames 7-9 arrived after XOFF (7,400, 8,200, 9,000)
  // with only frames 0-1 out: 8 frames, well inside the headroom.
  EXPECT_EQ(bed.sw.pfc_stats(0).max_ingress_bytes, 8 * kFrame);
  // Everything arrives in the end, nothing dropped, every XOFF undone.
  bed.at(1'000'000);
  EXPECT_EQ(bed.received(bed.b), 40u);
  EXPECT_EQ(bed.sw.stats(1).dropped, 0u);
  EXPECT_EQ(bed.sw.pfc_stats(0).headroom_drops, 0u);
  EXPECT_EQ(bed.sw.pfc_stats(0).xoff_sent, bed.sw.pfc_stats(0).xon_sent);
  EXPECT_EQ(bed.sw.pfc_stats(0).received, bed.sw.pfc_stats(0).xoff_sent + bed.sw.pfc_stats(0).xon_sent);
  EXPECT_GE(bed.sw.pfc_stats(0).xoff_sent, 2u) << "40 frames at 10 Gb/s into 3 Gb/s pause A more than once";
}

TEST(SimPfc, AnXoffThatStillHoldsIsRepeatedAtHalfItsPauseTime) {
  sim::PfcConfig p = pfc_config();
  p.quanta = 250;  // 250 x 512 bits at 10 Gb/s = 12,800 ns
  Bed bed(p);
  bed.send(kMacB, 26, 40);
  bed.at(23'128);
  // XOFF at 6,600, again at 13,000 and 19,400, XON at 23,128.
  ASSERT_EQ(bed.pfc.size(), 4u);
  const std::uint64_t at[] = {6'600, 13'000, 19'400, 23'128};
  const std::uint16_t quanta[] = {250, 250, 250, 0};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(bed.pfc[i].at, at[i]) << i;
    EXPECT_EQ(bed.pfc[i].quanta, quanta[i]) << i;
  }
  // Alone, the first pause would have ended at 7,667 + 12,800 = 20,467;
  // the repeats keep A quiet until the XON reaches it at 24,195.
  bed.at(24'194);
  EXPECT_EQ(bed.sw.nic_frames(0), 30u);
  bed.at(24'195);
  EXPECT_EQ(bed.sw.nic_frames(0), 29u);
  EXPECT_EQ(bed.sw.paused_ns(0), 16'528u);
}

TEST(SimPfc, AFramePastXoffPlusHeadroomIsDroppedAndCounted) {
  sim::PfcConfig p = pfc_config();
  p.headroom_bytes = 2 * kFrame;  // too small for a 1 us link
  Bed bed(p);
  bed.send(kMacB, 26, 40);
  // At frame 9's arrival (9,000) frames 0-8 are in and 0-1 out: 7 frames
  // (6,832 bytes = XOFF + headroom); one more does not fit.
  bed.at(8'999);
  EXPECT_EQ(bed.sw.pfc_stats(0).headroom_drops, 0u);
  bed.at(9'000);
  EXPECT_EQ(bed.sw.pfc_stats(0).headroom_drops, 1u);
  EXPECT_EQ(bed.sw.stats(1).dropped, 1u);
  EXPECT_EQ(bed.sw.pfc_stats(0).max_ingress_bytes, 7 * kFrame);
}

TEST(SimPfc, ALossyPriorityIsNeverPausedAndIsTailDropped) {
  sim::PfcConfig p = pfc_config();
  Bed bed(p);
  bed.send(kMacB, 0, 400);  // priority 0: lossy
  bed.at(10'000'000);
  EXPECT_TRUE(bed.pfc.empty());
  EXPECT_EQ(bed.sw.paused_ns(0), 0u);
  // 400 frames at 10 Gb/s into 3: the 100 KB buffer overflows.
  EXPECT_GT(bed.sw.stats(1).dropped, 0u);
  EXPECT_EQ(bed.received(bed.b) + bed.sw.stats(1).dropped, 400u);
}

TEST(SimPfc, APausedPriorityHoldsOnlyItsOwnFrames) {
  Bed bed(pfc_config());
  bed.send(kMacB, 26, 40);  // priority 3, into the slow port
  bed.send(kMacC, 0, 20);   // priority 0, to C at full rate, queued behind them
  bed.at(200'000);
  // A is paused on priority 3 meanwhile, yet all of priority 0 went out.
  EXPECT_GE(bed.sw.pfc_stats(0).received, 1u);
  EXPECT_EQ(bed.received(bed.c), 20u);
  bed.at(1'000'000);
  EXPECT_EQ(bed.received(bed.b), 40u);
  EXPECT_EQ(bed.sw.stats(1).dropped + bed.sw.stats(2).dropped, 0u);
}

TEST(SimPfc, WithPfcOffNothingIsPaused) {
  sim::PfcConfig p = pfc_config();
  p.enabled = false;
  Bed bed(p);
  bed.send(kMacB, 26, 400);
  bed.at(10'000'000);
  EXPECT_TRUE(bed.pfc.empty());
  EXPECT_EQ(bed.sw.pfc_stats(0).received, 0u);
  EXPECT_GT(bed.sw.stats(1).dropped, 0u);
}

}  // namespace
}  // namespace uroce
