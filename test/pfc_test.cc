// PFC: the MAC Control frame codec (802.3x PAUSE, 802.1Qbb PFC).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

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

}  // namespace
}  // namespace uroce
