// Frame parsing and building: every named rejection reason, built frames of
// every opcode round-tripping through the parser, and the builder's limits.
#include <gtest/gtest.h>

#include <random>

#include "support/frame_helpers.h"
#include "support/test_seed.h"
#include "wire/icrc.h"

namespace uroce::test {
namespace {

using wire::ParsedFrame;
using wire::ParseStatus;

constexpr std::size_t kL3 = 14;
constexpr std::size_t kUdp = kL3 + 20;
constexpr std::size_t kBth = kUdp + 8;

ParseStatus parse(const std::vector<std::uint8_t>& f) {
  ParsedFrame p;
  return wire::parse_frame(f, p);
}

void put16(std::vector<std::uint8_t>& f, std::size_t at, std::uint16_t v) {
  f[at] = static_cast<std::uint8_t>(v >> 8);
  f[at + 1] = static_cast<std::uint8_t>(v);
}
std::uint16_t get16(const std::vector<std::uint8_t>& f, std::size_t at) {
  return static_cast<std::uint16_t>(f[at] << 8 | f[at + 1]);
}

// After editing an IPv4 header: fix its checksum (and the ICRC, so that only
// the edit itself can be the reason for a rejection).
void reseal(std::vector<std::uint8_t>& f) {
  wire::ipv4_refresh_checksum(f.data() + kL3);
  if ((f[kL3] & 0x0f) == 5 && f.size() >= kBth + 16) {
    const std::size_t icrc_at = f.size() - 4;
    wire::icrc_store(f.data() + icrc_at,
                     wire::icrc_compute(wire::crc32_default,
                                        std::span<const std::uint8_t>(f).subspan(kL3, icrc_at - kL3)));
  }
}

// Grows or shrinks the packet by `delta` bytes just before the ICRC, fixing
// the IP and UDP lengths.
void resize_body(std::vector<std::uint8_t>& f, int delta) {
  const std::size_t icrc_at = f.size() - 4;
  std::vector<std::uint8_t> icrc(f.end() - 4, f.end());
  f.resize(icrc_at);
  f.resize(static_cast<std::size_t>(static_cast<int>(icrc_at) + delta), 0);
  f.insert(f.end(), icrc.begin(), icrc.end());
  put16(f, kL3 + 2, static_cast<std::uint16_t>(get16(f, kL3 + 2) + delta));
  put16(f, kUdp + 4, static_cast<std::uint16_t>(get16(f, kUdp + 4) + delta));
  reseal(f);
}

std::vector<std::uint8_t> send_only(std::size_t payload) {
  return build(make_spec(0x04), std::vector<std::uint8_t>(payload, 0xab));
}

TEST(Parse, ValidFrameFields) {
  auto spec = make_spec(0x0a);
  spec.reth.dma_length.set(100);
  spec.bth.set_ack_req(true);
  const auto f = build(spec, std::vector<std::uint8_t>(100, 7));
  ParsedFrame p;
  ASSERT_EQ(wire::parse_frame(f, p), ParseStatus::kOk);
  EXPECT_EQ(p.ip_version, 4);
  EXPECT_EQ(p.opcode, 0x0a);
  EXPECT_STREQ(p.info->name, "RC_RDMA_WRITE_ONLY");
  EXPECT_EQ(p.bth().dest_qp.get(), 0x11u);
  EXPECT_TRUE(p.bth().ack_req());
  EXPECT_EQ(p.reth().rkey.get(), 0x9aeu);
  EXPECT_EQ(p.reth().dma_length.get(), 100u);
  EXPECT_EQ(p.payload_length, 100);
  EXPECT_EQ(p.pad, 0);
  EXPECT_EQ(p.payload_offset, kBth + 28);
  EXPECT_EQ(p.payload()[99], 7);
  EXPECT_EQ(f.size(), kBth + 28 + 100 + 4);
}

TEST(Parse, PadCountIsDerivedAndZeroFilled) {
  const auto f = send_only(5);
  ParsedFrame p;
  ASSERT_EQ(wire::parse_frame(f, p), ParseStatus::kOk);
  EXPECT_EQ(p.pad, 3);
  EXPECT_EQ(p.payload_length, 5);
  EXPECT_EQ(p.bth().pad_count(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f[p.payload_offset + 5 + i], 0);
}

TEST(Parse, VlanTaggedAndIpv6Frames) {
  auto spec = make_spec(0x11, 6);
  spec.vlan_tci = 0x600a;
  const auto f = build(spec, {});
  ParsedFrame p;
  ASSERT_EQ(wire::parse_frame(f, p), ParseStatus::kOk);
  EXPECT_TRUE(p.has_vlan);
  EXPECT_EQ(p.vlan_tci, 0x600a);
  EXPECT_EQ(p.ip_version, 6);
  EXPECT_EQ(p.l3_offset, 18);
  EXPECT_EQ(p.aeth().syndrome, 0x1f);
}

TEST(Parse, EthernetPaddingAfterTheIpPacketIsIgnored) {
  auto f = build(make_spec(0x11), {});  // 62 bytes
  const std::size_t ip_end = f.size();
  f.resize(ip_end + 20, 0);  // padding or a trailer
  ParsedFrame p;
  ASSERT_EQ(wire::parse_frame(f, p), ParseStatus::kOk);
  EXPECT_EQ(p.l3_end, ip_end);
}

TEST(Parse, NotRoceTrafficIsSetAsideNotRejected) {
  auto arp = send_only(0);
  put16(arp, 12, wire::kEtherTypeArp);
  EXPECT_EQ(parse(arp), ParseStatus::kNotIp);
  auto tcp = send_only(0);
  tcp[kL3 + 9] = 6;
  reseal(tcp);
  EXPECT_EQ(parse(tcp), ParseStatus::kNotUdp);
  auto dns = send_only(0);
  put16(dns, kUdp + 2, 53);
  EXPECT_EQ(parse(dns), ParseStatus::kNotRoce);
  auto v6tcp = build(make_spec(0x04, 6), {});
  v6tcp[kL3 + 6] = 6;
  EXPECT_EQ(parse(v6tcp), ParseStatus::kNotUdp);
  for (auto s : {ParseStatus::kNotIp, ParseStatus::kNotUdp, ParseStatus::kNotRoce}) {
    EXPECT_TRUE(wire::is_not_roce(s));
  }
  EXPECT_FALSE(wire::is_not_roce(ParseStatus::kIcrcMismatch));
}

TEST(Parse, L2AndIpRejections) {
  const auto good = send_only(16);
  EXPECT_EQ(parse({good.begin(), good.begin() + 10}), ParseStatus::kTruncatedL2);
  auto vlan_cut = good;
  put16(vlan_cut, 12, wire::kEtherTypeVlan);
  vlan_cut.resize(16);
  EXPECT_EQ(parse(vlan_cut), ParseStatus::kTruncatedL2);
  EXPECT_EQ(parse({good.begin(), good.begin() + 30}), ParseStatus::kTruncatedIp);

  auto version = good;
  version[kL3] = 0x65;
  reseal(version);
  EXPECT_EQ(parse(version), ParseStatus::kIpVersion);

  auto ihl = good;
  ihl[kL3] = 0x44;
  EXPECT_EQ(parse(ihl), ParseStatus::kIpv4HeaderLength);

  auto checksum = good;
  checksum[kL3 + 4] ^= 0x01;  // IP id changed, checksum not
  EXPECT_EQ(parse(checksum), ParseStatus::kIpv4Checksum);

  auto too_long = good;
  put16(too_long, kL3 + 2, static_cast<std::uint16_t>(good.size()));
  reseal(too_long);
  EXPECT_EQ(parse(too_long), ParseStatus::kIpLength);

  auto fragment = good;
  put16(fragment, kL3 + 6, 0x2000);  // MF
  reseal(fragment);
  EXPECT_EQ(parse(fragment), ParseStatus::kIpFragment);
  put16(fragment, kL3 + 6, 0x0010);  // offset 128
  reseal(fragment);
  EXPECT_EQ(parse(fragment), ParseStatus::kIpFragment);

  // A real IPv4 header with 4 bytes of options (NOPs) in front of UDP/4791.
  auto options = good;
  options.insert(options.begin() + kUdp, {1, 1, 1, 1});
  options[kL3] = 0x46;
  put16(options, kL3 + 2, static_cast<std::uint16_t>(get16(options, kL3 + 2) + 4));
  reseal(options);
  EXPECT_EQ(parse(options), ParseStatus::kIpv4Options);

  auto v6 = build(make_spec(0x04, 6), std::vector<std::uint8_t>(8, 1));
  auto v6_long = v6;
  v6_long[kL3 + 5] += 1;
  EXPECT_EQ(parse(v6_long), ParseStatus::kIpLength);
  auto v6_version = v6;
  v6_version[kL3] = 0x4f;
  EXPECT_EQ(parse(v6_version), ParseStatus::kIpVersion);
}

TEST(Parse, UdpAndTransportRejections) {
  const auto good = send_only(16);

  auto udp_len = good;
  put16(udp_len, kUdp + 4, static_cast<std::uint16_t>(get16(udp_len, kUdp + 4) - 1));
  EXPECT_EQ(parse(udp_len), ParseStatus::kUdpLength);

  // UDP payload of a bare BTH without room for the ICRC.
  auto short_bth = send_only(0);
  resize_body(short_bth, -4);
  EXPECT_EQ(parse(short_bth), ParseStatus::kTruncatedBth);

  auto tver = good;
  tver[kBth + 1] |= 0x01;
  EXPECT_EQ(parse(tver), ParseStatus::kBadTver);

  for (int op : {0x15, 0x18, 0x1f, 0x40, 0x60, 0x80, 0xff}) {
    auto unknown = good;
    unknown[kBth] = static_cast<std::uint8_t>(op);
    EXPECT_EQ(parse(unknown), ParseStatus::kUnknownOpcode) << op;
  }

  auto headers = send_only(8);
  headers[kBth] = 0x13;  // CmpSwap needs 28 bytes of AtomicETH
  EXPECT_EQ(parse(headers), ParseStatus::kTruncatedHeaders);

  auto odd = send_only(4);
  resize_body(odd, -1);
  EXPECT_EQ(parse(odd), ParseStatus::kPadCount);
  auto pad_over = send_only(0);
  pad_over[kBth + 1] |= 0x30;  // pad 3 with no payload bytes
  EXPECT_EQ(parse(pad_over), ParseStatus::kPadCount);
}

TEST(Parse, PayloadLengthRules) {
  // A READ request carries no payload.
  auto read = build(make_spec(0x0a), std::vector<std::uint8_t>(4, 1));
  read[kBth] = 0x0c;
  EXPECT_EQ(parse(read), ParseStatus::kBadPayloadLength);
  // First and Middle packets of any length up to 4096 parse: whether they
  // carry exactly the path MTU is the responder's check (it NAKs them,
  // C9-92), not a reason to drop them here.
  auto spec = make_spec(0x01);
  EXPECT_EQ(parse(build(spec, std::vector<std::uint8_t>(1024))), ParseStatus::kOk);
  EXPECT_EQ(parse(build(spec, std::vector<std::uint8_t>(256))), ParseStatus::kOk);
  EXPECT_EQ(parse(build(spec, std::vector<std::uint8_t>(1000))), ParseStatus::kOk);
  EXPECT_EQ(parse(build(make_spec(0x06), std::vector<std::uint8_t>(100))), ParseStatus::kOk);
  // Nothing carries more than 4096 bytes.
  EXPECT_EQ(parse(send_only(4096)), ParseStatus::kOk);
  EXPECT_EQ(parse(send_only(4100)), ParseStatus::kBadPayloadLength);
  // ATOMIC WRITE carries 8 bytes; a CNP 16 reserved bytes.
  EXPECT_EQ(parse(build(make_spec(0x1d), std::vector<std::uint8_t>(8))), ParseStatus::kOk);
  EXPECT_EQ(parse(build(make_spec(0x1d), std::vector<std::uint8_t>(4))), ParseStatus::kBadPayloadLength);
  EXPECT_EQ(parse(build(make_spec(0x81), std::vector<std::uint8_t>(16))), ParseStatus::kOk);
  EXPECT_EQ(parse(build(make_spec(0x81), {})), ParseStatus::kBadPayloadLength);
}

TEST(Parse, IcrcMismatchStillReportsHeaders) {
  auto f = send_only(32);
  f[f.size() - 10] ^= 0x40;
  ParsedFrame p;
  ASSERT_EQ(wire::parse_frame(f, p), ParseStatus::kIcrcMismatch);
  EXPECT_EQ(p.opcode, 0x04);
  EXPECT_EQ(p.payload_length, 32);
  EXPECT_EQ(wire::parse_frame(f, p, {.verify_icrc = false}), ParseStatus::kOk);
}

TEST(Parse, EveryStatusHasANameAndDescription) {
  for (int i = 0; i < wire::kParseStatusCount; ++i) {
    const auto s = static_cast<ParseStatus>(i);
    EXPECT_STRNE(wire::parse_status_name(s), "invalid");
    EXPECT_GT(std::string(wire::parse_status_description(s)).size(), 10u);
  }
  EXPECT_STREQ(wire::parse_status_name(ParseStatus::kIcrcMismatch), "icrc_mismatch");
}

std::size_t random_payload_length(const wire::OpcodeInfo& info, std::mt19937_64& rng) {
  if (!info.has(wire::kHasPayload)) return 0;
  if (info.has(wire::kFixedPayload8)) return 8;
  if (info.has(wire::kFixedPayload16)) return 16;
  if (info.has_any(wire::kFirst | wire::kMiddle) && !info.has(wire::kLast)) return 256u << (rng() % 5);
  return rng() % 4097;
}

TEST(Build, EveryOpcodeRoundTripsWithRandomFields) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  auto rnd8 = [&] { return static_cast<std::uint8_t>(rng()); };
  std::vector<std::uint8_t> out(8192);
  std::vector<std::uint8_t> again(8192);
  int built = 0;
  for (int op = 0; op < 256; ++op) {
    const wire::OpcodeInfo& info = wire::opcode_info(static_cast<std::uint8_t>(op));
    if (!info.known()) continue;
    for (int variant = 0; variant < 8; ++variant) {
      wire::FrameSpec spec = make_spec(static_cast<std::uint8_t>(op), variant % 2 ? 6 : 4);
      if (variant & 2) spec.vlan_tci = static_cast<std::uint16_t>(rng());
      for (auto& b : spec.eth_src) b = rnd8();
      for (auto& b : spec.src4) b = rnd8();
      for (auto& b : spec.dst6) b = rnd8();
      spec.tos = rnd8();
      spec.ttl = rnd8();
      spec.ip_id = static_cast<std::uint16_t>(rng());
      spec.traffic_class = rnd8();
      spec.flow_label = static_cast<std::uint32_t>(rng()) & 0xfffff;
      spec.hop_limit = rnd8();
      spec.udp_src_port = static_cast<std::uint16_t>(rng());
      spec.udp_checksum = static_cast<std::uint16_t>(rng());
      spec.bth.set_flags(rng() & 1, rng() & 1, 0);
      spec.bth.pkey.set(static_cast<std::uint16_t>(rng()));
      spec.bth.fecn_becn = rnd8();
      spec.bth.dest_qp.set(static_cast<std::uint32_t>(rng()));
      spec.bth.set_ack_req(rng() & 1);
      spec.bth.psn.set(static_cast<std::uint32_t>(rng()));
      spec.reth.va.set(rng());
      spec.reth.dma_length.set(static_cast<std::uint32_t>(rng()));
      spec.atomic_eth.swap_add.set(rng());
      spec.atomic_eth.compare.set(rng());
      spec.aeth.syndrome = rnd8() & 0x7f;
      spec.atomic_ack_eth.orig_data.set(rng());
      spec.immdt.imm.set(static_cast<std::uint32_t>(rng()));
      spec.ieth.rkey.set(static_cast<std::uint32_t>(rng()));
      spec.deth.qkey.set(static_cast<std::uint32_t>(rng()));
      spec.deth.src_qp.set(static_cast<std::uint32_t>(rng()));
      spec.feth.bits.set(static_cast<std::uint32_t>(rng()));
      spec.xrceth.reserved = rnd8();
      spec.xrceth.srqn.set(static_cast<std::uint32_t>(rng()));
      spec.sreth.offset.set(static_cast<std::uint32_t>(rng()));
      spec.sreth.length.set(static_cast<std::uint32_t>(rng()));
      spec.sreth.recv_index.set(static_cast<std::uint32_t>(rng()));
      spec.sreth.flags = rnd8();
      spec.sreth.first_psn.set(static_cast<std::uint32_t>(rng()));
      spec.sacketh.expected.set(static_cast<std::uint32_t>(rng()));
      for (auto& b : spec.sacketh.bits) b = rnd8();
      std::vector<std::uint8_t> payload(random_payload_length(info, rng));
      for (auto& b : payload) b = rnd8();

      const std::size_t n = wire::build_frame(spec, payload, out);
      ASSERT_GT(n, 0u) << info.name;
      ParsedFrame p;
      ASSERT_EQ(wire::parse_frame(std::span(out.data(), n), p), ParseStatus::kOk)
          << info.name << " variant " << variant;
      EXPECT_EQ(p.payload_length, payload.size());
      EXPECT_EQ(p.bth().psn.get(), spec.bth.psn.get());
      EXPECT_EQ(p.bth().se(), spec.bth.se());
      const std::size_t m = wire::build_frame(wire::spec_from_parsed(p), p.payload(), again);
      ASSERT_EQ(m, n);
      ASSERT_TRUE(std::equal(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), again.begin()))
          << info.name << " variant " << variant;
      ++built;
    }
  }
  EXPECT_EQ(built, (40 + 25 + 24) * 8);  // RC, UC, UD, CNP; XRC; selective repeat
}

TEST(Build, RefusesUnknownOpcodesAndSmallBuffers) {
  std::vector<std::uint8_t> out(4096);
  EXPECT_EQ(wire::build_frame(make_spec(0x15), {}, out), 0u);
  const std::vector<std::uint8_t> payload(100);
  std::vector<std::uint8_t> small(100);
  EXPECT_EQ(wire::build_frame(make_spec(0x04), payload, small), 0u);
  std::vector<std::uint8_t> exact(14 + 20 + 8 + 12 + 100 + 4);
  EXPECT_EQ(wire::build_frame(make_spec(0x04), payload, exact), exact.size());
}

TEST(Build, CnpHasBecnAndSixteenReservedBytes) {
  auto spec = make_spec(0x81);
  spec.bth.set_becn(true);
  spec.bth.dest_qp.set(0x123);
  const auto f = build(spec, std::vector<std::uint8_t>(16, 0));
  ParsedFrame p;
  ASSERT_EQ(wire::parse_frame(f, p), ParseStatus::kOk);
  EXPECT_TRUE(p.bth().becn());
  EXPECT_EQ(p.payload_length, 16);
  EXPECT_EQ(f.size(), 14u + 20 + 8 + 12 + 16 + 4);
}

}  // namespace
}  // namespace uroce::test
