// ICRC masking rules (IBTA A17.3.3) and one-pass computation over pieces.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "support/frame_helpers.h"
#include "support/test_seed.h"
#include "wire/icrc.h"

namespace uroce::test {
namespace {

using wire::ParsedFrame;

// The ICRC of a built frame two ways: its headers copied aside
// (icrc_compute) and the packet where it lies (icrc_of); they must agree.
std::uint32_t icrc_of(const std::vector<std::uint8_t>& frame) {
  ParsedFrame p;
  EXPECT_EQ(wire::parse_frame(frame, p, {.verify_icrc = false}), wire::ParseStatus::kOk);
  const std::uint32_t copied = wire::icrc_compute(wire::crc32_default, p.icrc_covered());
  EXPECT_EQ(wire::icrc_of(wire::crc32_default, p.icrc_covered()), copied);
  return copied;
}

// Offsets (from the IP header) of the bytes the ICRC must ignore.
std::set<std::size_t> masked_bytes(std::uint8_t ip_version) {
  if (ip_version == 6) return {0 /* low nibble only */, 1, 2, 3, 7, 40 + 6, 40 + 7, 48 + 4};
  return {1, 8, 10, 11, 20 + 6, 20 + 7, 28 + 4};
}

class IcrcMask : public ::testing::TestWithParam<int> {};

TEST_P(IcrcMask, OnlyTheMaskedFieldsAreIgnored) {
  const auto ipv = static_cast<std::uint8_t>(GetParam());
  // An ACK (all of it copied in one block under 128 bytes, its length not
  // a multiple of 16), an 8-byte WRITE, and one whose masked headers are
  // copied apart from the rest.
  for (std::size_t len : {std::size_t{0}, std::size_t{8}, std::size_t{100}}) {
    SCOPED_TRACE("payload " + std::to_string(len));
    std::vector<std::uint8_t> payload(len, 0x5a);
    const auto frame = build(make_spec(len == 0 ? 0x11 /* ACK */ : 0x0a /* WRITE Only */, ipv), payload);
    const std::uint32_t base = icrc_of(frame);
    const std::size_t l3 = sizeof(wire::EthHdr);
    const std::size_t masked_end = ipv == 6 ? wire::kIcrcMaskedBytesV6 : wire::kIcrcMaskedBytesV4;
    const auto masked = masked_bytes(ipv);
    for (std::size_t off = 0; off < masked_end; ++off) {
      for (std::uint8_t bit = 1; bit != 0; bit = static_cast<std::uint8_t>(bit << 1)) {
        // IPv6 byte 0: the version nibble is covered, the traffic class nibble is not.
        const bool ignored = masked.count(off) && !(ipv == 6 && off == 0 && bit >= 0x10);
        std::vector<std::uint8_t> f = frame;
        f[l3 + off] ^= bit;
        const auto covered = std::span<const std::uint8_t>(f).subspan(l3, f.size() - l3 - 4);
        const std::uint32_t got = wire::icrc_compute(wire::crc32_default, covered);
        EXPECT_EQ(wire::icrc_of(wire::crc32_default, covered), got) << "byte " << off << " bit " << int(bit);
        if (ignored) EXPECT_EQ(got, base) << "byte " << off << " bit " << int(bit);
        else EXPECT_NE(got, base) << "byte " << off << " bit " << int(bit);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IpVersions, IcrcMask, ::testing::Values(4, 6),
                         [](const auto& param_info) { return "IPv" + std::to_string(param_info.param); });

TEST(Icrc, StoredLeastSignificantByteFirst) {
  std::uint8_t b[4];
  wire::icrc_store(b, 0x11223344);
  EXPECT_EQ(b[0], 0x44);
  EXPECT_EQ(b[3], 0x11);
  EXPECT_EQ(wire::icrc_load(b), 0x11223344u);
}

TEST(Icrc, PiecesGiveTheSameResultAsContiguous) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 500; ++round) {
    std::vector<std::uint8_t> payload(rng() % 4097);
    for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
    const std::uint8_t op = payload.size() % 2 ? 0x04 : 0x0a;
    const auto frame = build(make_spec(op, round % 2 ? 6 : 4), payload);
    ParsedFrame p;
    ASSERT_EQ(wire::parse_frame(frame, p), wire::ParseStatus::kOk) << round;
    const auto all = std::span<const std::uint8_t>(frame);
    const auto headers = all.subspan(p.l3_offset, p.payload_offset - p.l3_offset);
    const auto body = all.subspan(p.payload_offset, p.icrc_offset - p.payload_offset);
    std::vector<std::span<const std::uint8_t>> pieces;
    std::size_t at = 0;
    while (at < body.size()) {
      const std::size_t n = std::min<std::size_t>(body.size() - at, rng() % 700);
      pieces.push_back(body.subspan(at, n));
      at += n;
    }
    for (const auto& impl : wire::crc32_impls()) {
      if (!impl.available()) continue;
      ASSERT_EQ(wire::icrc_compute(impl.fn, headers, pieces), p.icrc()) << impl.name << " round " << round;
    }
  }
}

// icrc_of() reads the packet where it lies, in 16-byte blocks of a masked
// copy: every length from the shortest packet through two blocks past the
// one-block limit (128 bytes), and longer ones, agree with the copying
// computation and with the ICRC build_frame() wrote; and it writes nothing.
TEST(Icrc, WhereItLiesEqualsCopyingAtEveryLength) {
  const std::uint64_t seed = test_seed() + 3;
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 600; ++round) {
    const std::size_t len = round < 200 ? static_cast<std::size_t>(round) : rng() % 4097;
    std::vector<std::uint8_t> payload(len);
    for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
    auto spec = make_spec(0x04, round % 2 ? 6 : 4);
    spec.tos = static_cast<std::uint8_t>(rng());
    spec.traffic_class = static_cast<std::uint8_t>(rng());
    spec.flow_label = static_cast<std::uint32_t>(rng()) & 0xfffff;
    spec.bth.fecn_becn = static_cast<std::uint8_t>(rng());
    spec.udp_checksum = static_cast<std::uint16_t>(rng());
    auto frame = build(spec, payload);
    const auto before = frame;
    ParsedFrame p;
    ASSERT_EQ(wire::parse_frame(frame, p), wire::ParseStatus::kOk) << round;
    const std::uint32_t copying = wire::icrc_compute(wire::crc32_default, p.icrc_covered());
    EXPECT_EQ(copying, p.icrc()) << round;
    EXPECT_EQ(wire::icrc_of(wire::crc32_default, p.icrc_covered()), copying) << "round " << round;
    ParsedFrame q;
    EXPECT_EQ(wire::parse_headers_of(frame, q), wire::ParseStatus::kOk) << round;
    EXPECT_EQ(wire::check_icrc(frame, q), wire::ParseStatus::kOk) << round;
    EXPECT_EQ(frame, before) << "round " << round;
    frame[frame.size() - 5] ^= 0x10;  // the last payload/pad byte
    EXPECT_EQ(wire::parse_frame(frame, q), wire::ParseStatus::kIcrcMismatch) << round;
    EXPECT_EQ(wire::check_icrc(frame, q), wire::ParseStatus::kIcrcMismatch) << round;
  }
}

}  // namespace
}  // namespace uroce::test
