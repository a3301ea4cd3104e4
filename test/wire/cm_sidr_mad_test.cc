// SIDR_REQ and SIDR_REP (lib/wire/cm_mad.h) against bytes laid out by hand
// from IBTA vol. 1 12.11 (tables 119 and 120; the Linux kernel's
// include/rdma/ibta_vol1_c12.h names the same offsets). No capture of SIDR
// exists among the golden files (Soft-RoCE's were taken with rping and
// perftest, RC only), so the layout is the spec's: each field is written at
// its offset here, decoded, checked, and encoded back to the same 256 bytes.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "wire/cm_mad.h"

namespace uroce::test {
namespace {

using Bytes = std::array<std::uint8_t, wire::kMadBytes>;

// The MAD header of a CM Send with `attr` and transaction ID 0x0102030405060708.
Bytes header(std::uint16_t attr) {
  Bytes m{};
  m[0] = 1;     // base version
  m[1] = 0x07;  // CM class
  m[2] = 2;     // class version
  m[3] = 0x03;  // Send
  for (int i = 0; i < 8; ++i) m[8 + i] = static_cast<std::uint8_t>(i + 1);
  m[16] = static_cast<std::uint8_t>(attr >> 8);
  m[17] = static_cast<std::uint8_t>(attr);
  return m;
}

void put_be(Bytes& m, std::size_t at, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) m[at + i] = static_cast<std::uint8_t>(v >> (8 * (n - 1 - i)));
}

TEST(CmSidrMad, SidrReqDecodesFromTheSpecsOffsetsAndEncodesBack) {
  Bytes m = header(0x0017);
  constexpr std::size_t a = wire::kMadHeaderBytes;  // the attribute starts at byte 24
  put_be(m, a + 0, 0xdeadbeef, 4);                  // RequestID
  put_be(m, a + 4, 0xffff, 2);                      // P_Key
  put_be(m, a + 8, 0x0000000001111c06ull, 8);       // ServiceID: rdma_cm, UDP, port 7174
  // rdma_cm's header (IPv4 10.0.0.1:40000 -> 10.0.0.2), then "hi", at byte 16.
  m[a + 16 + 1] = 0x40;
  put_be(m, a + 16 + 2, 40000, 2);
  put_be(m, a + 16 + 4 + 12, 0x0a000001, 4);
  put_be(m, a + 16 + 20 + 12, 0x0a000002, 4);
  m[a + 16 + 36] = 'h';
  m[a + 16 + 37] = 'i';
  m[wire::kMadBytes - 1] = 0x5a;                    // the last of the 216 bytes of private data

  wire::CmMad d;
  ASSERT_EQ(wire::decode_cm_mad(m, d), wire::MadStatus::kOk);
  EXPECT_EQ(d.attr(), wire::CmAttr::kSidrReq);
  EXPECT_EQ(d.header.tid, 0x0102030405060708ull);
  EXPECT_EQ(d.sidr_req.request_id, 0xdeadbeefu);
  EXPECT_EQ(d.sidr_req.pkey, 0xffff);
  EXPECT_EQ(d.sidr_req.service_id, 0x0000000001111c06ull);
  const auto svc = wire::rdma_cm_service(d.sidr_req.service_id);
  ASSERT_TRUE(svc.has_value());
  EXPECT_EQ(svc->ps, wire::kRdmaPsUdp);
  EXPECT_EQ(svc->port, 7174);
  const auto h = wire::decode_rdma_cm_header(d.sidr_req.private_data);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->src_port, 40000);
  EXPECT_EQ(h->src_addr[15], 1);
  EXPECT_EQ(h->dst_addr[15], 2);
  EXPECT_EQ(d.sidr_req.private_data[36], 'h');
  EXPECT_EQ(d.sidr_req.private_data[215], 0x5a);

  Bytes again{};
  ASSERT_TRUE(wire::encode_cm_mad(d, again));
  EXPECT_EQ(again, m);
}

TEST(CmSidrMad, SidrRepDecodesFromTheSpecsOffsetsAndEncodesBack) {
  Bytes m = header(0x0018);
  constexpr std::size_t a = wire::kMadHeaderBytes;
  put_be(m, a + 0, 0xdeadbeef, 4);             // RequestID: the REQ's
  m[a + 4] = 0;                                // Status: QP valid
  m[a + 5] = 0;                                // AdditionalInformationLength
  put_be(m, a + 8, 0x000123, 3);               // QPN (24 bits), byte 11 reserved
  put_be(m, a + 12, 0x0000000001111c06ull, 8); // ServiceID
  put_be(m, a + 20, wire::kRdmaUdpQkey, 4);    // Q_Key
  m[a + 96] = 'o';                             // PrivateData (136 bytes from 96)
  m[a + 97] = 'k';
  m[wire::kMadBytes - 1] = 0xa5;

  wire::CmMad d;
  ASSERT_EQ(wire::decode_cm_mad(m, d), wire::MadStatus::kOk);
  EXPECT_EQ(d.attr(), wire::CmAttr::kSidrRep);
  EXPECT_EQ(d.sidr_rep.request_id, 0xdeadbeefu);
  EXPECT_EQ(d.sidr_rep.status, static_cast<std::uint8_t>(wire::SidrStatus::kOk));
  EXPECT_EQ(d.sidr_rep.qpn, 0x123u);
  EXPECT_EQ(d.sidr_rep.service_id, 0x0000000001111c06ull);
  EXPECT_EQ(d.sidr_rep.qkey, 0x01234567u);
  EXPECT_EQ(d.sidr_rep.private_data[0], 'o');
  EXPECT_EQ(d.sidr_rep.private_data[135], 0xa5);
  Bytes again{};
  ASSERT_TRUE(wire::encode_cm_mad(d, again));
  EXPECT_EQ(again, m);

  // Status and QPN keep to their bytes: a refusal with every other bit set.
  wire::CmMad r;
  r.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kSidrRep);
  r.sidr_rep.status = static_cast<std::uint8_t>(wire::SidrStatus::kUnsupportedServiceId);
  r.sidr_rep.qpn = 0xffffff;
  r.sidr_rep.additional_info_length = 0xff;
  Bytes out{};
  ASSERT_TRUE(wire::encode_cm_mad(r, out));
  EXPECT_EQ(out[a + 4], 1);
  EXPECT_EQ(out[a + 5], 0xff);
  EXPECT_EQ(out[a + 6], 0);
  EXPECT_EQ(out[a + 7], 0);
  EXPECT_EQ(out[a + 8], 0xff);
  EXPECT_EQ(out[a + 10], 0xff);
  EXPECT_EQ(out[a + 11], 0) << "reserved after the QPN";
}

TEST(CmSidrMad, EveryByteOfASidrMadDecodesOrIsRefusedNeverReadPastTheEnd) {
  wire::CmMad d;
  Bytes m = header(0x0017);
  EXPECT_EQ(wire::decode_cm_mad(std::span(m.data(), 255), d), wire::MadStatus::kTooShort);
  for (std::uint32_t seed = 1; seed < 500; ++seed) {
    for (std::size_t i = wire::kMadHeaderBytes; i < m.size(); ++i) {
      m[i] = static_cast<std::uint8_t>((seed * 2654435761u) >> (i % 24));
    }
    m[17] = static_cast<std::uint8_t>(0x17 + seed % 2);
    ASSERT_EQ(wire::decode_cm_mad(m, d), wire::MadStatus::kOk) << seed;
    Bytes again{};
    ASSERT_TRUE(wire::encode_cm_mad(d, again));
    if (m[17] == 0x17) {
      // SIDR_REQ's bytes 6 and 7 are reserved: everything else comes back.
      m[wire::kMadHeaderBytes + 6] = m[wire::kMadHeaderBytes + 7] = 0;
    } else {
      m[wire::kMadHeaderBytes + 6] = m[wire::kMadHeaderBytes + 7] = m[wire::kMadHeaderBytes + 11] = 0;
    }
    EXPECT_EQ(again, m) << seed;
  }
}

}  // namespace
}  // namespace uroce::test
