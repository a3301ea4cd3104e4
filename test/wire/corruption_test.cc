// Corruption of golden frames: any single byte changed in what the ICRC
// covers is caught (by the ICRC or a named parse reason); changes to the
// masked fields still verify; truncation at every length is reported.
#include <gtest/gtest.h>

#include <random>

#include "support/golden_data.h"
#include "support/test_seed.h"
#include "wire/frame.h"
#include "wire/icrc.h"

namespace uroce::test {
namespace {

using wire::ParsedFrame;
using wire::ParseStatus;

struct RoceFrame {
  std::vector<std::uint8_t> bytes;
  ParsedFrame parsed;  // of `bytes`
};

// The golden RoCEv2 frames of one capture, each parsed.
std::vector<RoceFrame> roce_frames(const std::string& file) {
  std::vector<RoceFrame> out;
  for (auto& f : load_golden(file)) {
    // Moving a vector keeps its buffer, so `parsed` stays valid in `out`.
    RoceFrame r{std::move(f.data), {}};
    if (wire::parse_frame(r.bytes, r.parsed) == ParseStatus::kOk) out.push_back(std::move(r));
  }
  return out;
}

// Offsets, from the IP header, of the bytes whose value the ICRC ignores.
bool is_masked(const ParsedFrame& p, std::size_t off_from_l3) {
  const std::size_t udp = p.udp_offset - p.l3_offset;
  const std::size_t bth = p.bth_offset - p.l3_offset;
  if (off_from_l3 == udp + 6 || off_from_l3 == udp + 7 || off_from_l3 == bth + 4) return true;
  if (p.ip_version == 6) return off_from_l3 >= 1 && off_from_l3 <= 3 ? true : off_from_l3 == 7;
  return off_from_l3 == 1 || off_from_l3 == 8 || off_from_l3 == 10 || off_from_l3 == 11;
}

class Corruption : public ::testing::TestWithParam<std::string> {};

TEST_P(Corruption, EveryCoveredByteChangeIsCaught) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const auto frames = roce_frames(GetParam());
  ASSERT_FALSE(frames.empty());
  std::size_t flips = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const RoceFrame& rf = frames[i];
    const ParsedFrame& p = rf.parsed;
    std::vector<std::uint8_t> f = rf.bytes;
    // Everything from the IP header to the end of the payload and pad, and
    // the ICRC itself.
    for (std::size_t at = p.l3_offset; at < p.l3_end; ++at) {
      if (is_masked(p, at - p.l3_offset)) continue;
      // IPv6 byte 0: the version nibble is covered, the traffic class nibble is not.
      const bool v6_first = p.ip_version == 6 && at == p.l3_offset;
      const std::uint8_t deltas[2] = {
          static_cast<std::uint8_t>(v6_first ? 0xf0 : 0xff),
          static_cast<std::uint8_t>(v6_first ? (1 + rng() % 15) << 4 : 1 + rng() % 255)};
      for (std::uint8_t d : deltas) {
        f[at] ^= d;
        ParsedFrame q;
        const ParseStatus s = wire::parse_frame(f, q);
        f[at] ^= d;
        ASSERT_NE(s, ParseStatus::kOk)
            << GetParam() << " frame #" << i << " byte " << at << " ^ 0x" << std::hex << int(d);
        ++flips;
      }
    }
  }
  EXPECT_GT(flips, frames.size() * 60);
}

TEST_P(Corruption, MaskedFieldChangesStillVerify) {
  const std::uint64_t seed = test_seed() + 7;
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const RoceFrame& rf : roce_frames(GetParam())) {
    const ParsedFrame& p = rf.parsed;
    for (std::size_t off = 0; off < p.bth_offset + 5u - p.l3_offset; ++off) {
      if (!is_masked(p, off)) continue;
      if (p.ip_version == 4 && (off == 10 || off == 11)) continue;  // the checksum itself, below
      std::vector<std::uint8_t> f = rf.bytes;
      f[p.l3_offset + off] ^= static_cast<std::uint8_t>(1 + rng() % 255);
      // The ICRC alone ignores the change...
      EXPECT_EQ(wire::icrc_compute(wire::crc32_default,
                                   std::span<const std::uint8_t>(f).subspan(
                                       p.l3_offset, p.icrc_offset - p.l3_offset)),
                p.icrc())
          << "offset " << off;
      // ...and so does the whole parse once a router has refreshed the IPv4
      // header checksum, as it must when it rewrites TTL or ECN.
      if (p.ip_version == 4) wire::ipv4_refresh_checksum(f.data() + p.l3_offset);
      ParsedFrame q;
      EXPECT_EQ(wire::parse_frame(f, q), ParseStatus::kOk) << "offset " << off;
    }
    // ECN set to CE by a congested switch (A17.9.1): still a valid packet.
    std::vector<std::uint8_t> ce = rf.bytes;
    if (p.ip_version == 4) {
      ce[p.l3_offset + 1] |= 0x03;
      wire::ipv4_refresh_checksum(ce.data() + p.l3_offset);
    } else {
      ce[p.l3_offset + 1] |= 0x30;
    }
    ParsedFrame q;
    ASSERT_EQ(wire::parse_frame(ce, q), ParseStatus::kOk);
    EXPECT_EQ(q.ecn(), 3);
  }
}

TEST_P(Corruption, TruncationAtEveryLengthIsReported) {
  for (const RoceFrame& rf : roce_frames(GetParam())) {
    for (std::size_t len = 0; len < rf.bytes.size(); ++len) {
      // A fresh copy of exactly `len` bytes, so a read past the end is a read
      // past the allocation (visible to ASan/valgrind).
      const std::vector<std::uint8_t> cut(rf.bytes.begin(), rf.bytes.begin() + static_cast<std::ptrdiff_t>(len));
      ParsedFrame q;
      const ParseStatus s = wire::parse_frame(cut, q);
      ASSERT_NE(s, ParseStatus::kOk) << "length " << len;
      ASSERT_FALSE(wire::is_not_roce(s)) << "length " << len << ": " << wire::parse_status_name(s);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RxePcaps, Corruption, ::testing::ValuesIn(golden_files()),
                         [](const auto& param_info) { return capture_test_name(param_info.param); });

}  // namespace
}  // namespace uroce::test
