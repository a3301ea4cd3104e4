// Header structs: sizes, byte order at the accessors, bit fields of the BTH
// and AETH, against hand-laid byte patterns.
#include <gtest/gtest.h>

#include <cstring>

#include "wire/headers.h"

namespace uroce::test {
namespace {

using namespace uroce::wire;

TEST(ByteOrder, FieldsAreBigEndianOnTheWire) {
  Be16 a;
  a.set(0x1234);
  EXPECT_EQ(a.bytes[0], 0x12);
  EXPECT_EQ(a.bytes[1], 0x34);
  Be24 b;
  b.set(0xabcdef);
  EXPECT_EQ(b.bytes[0], 0xab);
  EXPECT_EQ(b.bytes[2], 0xef);
  EXPECT_EQ(b.get(), 0xabcdefu);
  b.set(0x1abcdef);  // 24-bit field keeps the low 24 bits
  EXPECT_EQ(b.get(), 0xabcdefu);
  Be64 c;
  c.set(0x0102030405060708ull);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c.bytes[i], i + 1);
  EXPECT_EQ(c.get(), 0x0102030405060708ull);
}

TEST(Bth, AccessorsReadTheIbtaBitPositions) {
  // opcode 0x0a, SE=1 M=0 Pad=2 TVer=0, P_Key 0xffff, BECN, QP 0x000011,
  // AckReq, PSN 0x75b942.
  const std::uint8_t raw[12] = {0x0a, 0xa0, 0xff, 0xff, 0x40, 0x00, 0x00, 0x11,
                                0x80, 0x75, 0xb9, 0x42};
  Bth bth;
  std::memcpy(&bth, raw, sizeof raw);
  EXPECT_EQ(bth.opcode, 0x0a);
  EXPECT_TRUE(bth.se());
  EXPECT_FALSE(bth.mig_req());
  EXPECT_EQ(bth.pad_count(), 2);
  EXPECT_EQ(bth.tver(), 0);
  EXPECT_EQ(bth.pkey.get(), 0xffff);
  EXPECT_FALSE(bth.fecn());
  EXPECT_TRUE(bth.becn());
  EXPECT_EQ(bth.dest_qp.get(), 0x11u);
  EXPECT_TRUE(bth.ack_req());
  EXPECT_EQ(bth.psn.get(), 0x75b942u);

  Bth built{};
  built.opcode = 0x0a;
  built.set_flags(true, false, 2);
  built.pkey.set(0xffff);
  built.set_becn(true);
  built.dest_qp.set(0x11);
  built.set_ack_req(true);
  built.psn.set(0x75b942);
  EXPECT_EQ(std::memcmp(&built, raw, sizeof raw), 0);
  built.set_pad_count(1);
  EXPECT_EQ(built.pad_count(), 1);
  EXPECT_TRUE(built.se());
}

TEST(Aeth, SyndromeKindsAndValues) {
  EXPECT_EQ(aeth_kind(0x1f), AethKind::kAck);
  EXPECT_EQ(aeth_value(0x1f), kAethCreditsInvalid);
  EXPECT_EQ(aeth_kind(0x2c), AethKind::kRnrNak);  // RNR NAK, timer code 12
  EXPECT_EQ(aeth_value(0x2c), 12);
  EXPECT_EQ(aeth_kind(0x60), AethKind::kNak);  // NAK PSN sequence error
  EXPECT_EQ(aeth_value(0x60), 0);
  EXPECT_EQ(make_syndrome(AethKind::kNak, 2), 0x62);  // remote access error
  EXPECT_EQ(make_syndrome(AethKind::kNak, 3), 0x63);
  EXPECT_EQ(make_syndrome(AethKind::kRnrNak, 14), 0x2e);
  EXPECT_STREQ(nak_code_name(0), "PSN_SEQUENCE_ERROR");
  EXPECT_STREQ(nak_code_name(3), "REMOTE_OPERATIONAL_ERROR");
  EXPECT_STREQ(nak_code_name(9), "RESERVED");
}

TEST(IpHeaders, FieldAccessors) {
  const std::uint8_t v4[20] = {0x45, 0x8b, 0x00, 0x3c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11,
                               0x00, 0x00, 10, 99, 0, 2, 10, 99, 0, 3};
  Ipv4Hdr ip;
  std::memcpy(&ip, v4, sizeof ip);
  EXPECT_EQ(ip.version(), 4);
  EXPECT_EQ(ip.ihl(), 5);
  EXPECT_EQ(ip.dscp(), 0x22);
  EXPECT_EQ(ip.ecn(), 3);
  EXPECT_EQ(ip.total_length.get(), 60);
  EXPECT_FALSE(ip.more_fragments());
  EXPECT_EQ(ip.fragment_offset(), 0);

  const std::uint8_t v6[40] = {0x6b, 0x81, 0x23, 0x45, 0x00, 0x20, 17, 64};
  Ipv6Hdr ip6{};
  std::memcpy(&ip6, v6, sizeof v6);
  EXPECT_EQ(ip6.version(), 6);
  EXPECT_EQ(ip6.traffic_class(), 0xb8);
  EXPECT_EQ(ip6.ecn(), 0);
  EXPECT_EQ(ip6.flow_label(), 0x12345u);
  EXPECT_EQ(ip6.payload_length.get(), 32);

  VlanTag tag;
  tag.tci.set(0xa00a);
  EXPECT_EQ(tag.pcp(), 5);
  EXPECT_EQ(tag.vid(), 10);
}

}  // namespace
}  // namespace uroce::test
