// Golden tests: every frame of every Soft-RoCE capture parses, verifies its
// ICRC, matches the README's per-opcode tables, and rebuilds byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <tuple>

#include "dump/frame_printer.h"
#include "support/golden_data.h"
#include "support/test_seed.h"
#include "wire/frame.h"
#include "wire/icrc.h"

namespace uroce::test {
namespace {

using wire::ParseStatus;

class GoldenCapture : public ::testing::TestWithParam<std::string> {};

TEST(GoldenData, EveryCaptureHasAReadmeSection) {
  const auto files = golden_files();
  ASSERT_EQ(files.size(), 14u) << "the Soft-RoCE README lists 14 captures";
  const auto expectations = golden_expectations();
  for (const auto& f : files) {
    ASSERT_TRUE(expectations.count(f)) << f << " has no section in the README";
    EXPECT_TRUE(expectations.at(f).unknown_rows.empty())
        << f << ": README row not understood: " << expectations.at(f).unknown_rows.front();
    EXPECT_GT(expectations.at(f).roce_frames, 0u) << f;
  }
}

TEST(GoldenData, BundledCopiesEqualTheSharedCaptures) {
  // The captures are copied byte for byte into test/data so the suite runs
  // without ../shared; where ../shared is present (CI has it), they must not drift.
  // Not the README: test/data's is the repository's own description of the
  // files (no paths outside the repository); its facts are checked below
  // (TotalsMatchTheReadme) against the captures themselves.
  const std::filesystem::path shared =
      std::filesystem::path(UROCE_SOURCE_ROOT) / ".." / "shared" / "testdata" / "rxe-pcaps";
  if (!std::filesystem::exists(shared)) GTEST_SKIP() << shared << " not present";
  std::size_t compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(shared)) {
    if (entry.path().filename() == "README.md") continue;
    const auto ours = std::filesystem::path(golden_dir()) / entry.path().filename();
    ASSERT_TRUE(std::filesystem::exists(ours)) << ours << " missing from test/data";
    std::ifstream a(entry.path(), std::ios::binary);
    std::ifstream b(ours, std::ios::binary);
    const std::string sa((std::istreambuf_iterator<char>(a)), {});
    const std::string sb((std::istreambuf_iterator<char>(b)), {});
    EXPECT_TRUE(sa == sb) << ours << " differs from " << entry.path();
    ++compared;
  }
  EXPECT_GE(compared, 16u);  // 14 captures, VERSIONS.txt, program-output.txt
}

TEST(GoldenData, TotalsMatchTheReadme) {
  // "all 1,303 RoCEv2 packets in the 14 files match, 0 mismatches"
  std::size_t roce = 0;
  std::size_t ok = 0;
  std::size_t ipv6 = 0;
  for (const auto& file : golden_files()) {
    for (const auto& frame : load_golden(file)) {
      wire::ParsedFrame p;
      const ParseStatus s = wire::parse_frame(frame.data, p);
      if (wire::is_not_roce(s)) continue;
      ++roce;
      ok += s == ParseStatus::kOk;
      ipv6 += p.ip_version == 6;
    }
  }
  EXPECT_EQ(roce, 1303u);
  EXPECT_EQ(ok, 1303u);
  EXPECT_EQ(ipv6, 50u);
}

TEST_P(GoldenCapture, EveryRoceFrameParsesAndVerifies) {
  const auto frames = load_golden(GetParam());
  ASSERT_FALSE(frames.empty());
  std::size_t index = 0;
  for (const auto& frame : frames) {
    ++index;
    wire::ParsedFrame p;
    const ParseStatus s = wire::parse_frame(frame.data, p);
    // Every UDP/4791 frame is RoCEv2; everything else is the TCP exchange.
    if (wire::is_not_roce(s)) {
      EXPECT_NE(s, ParseStatus::kNotIp) << "frame " << index << ": the captures hold only IP";
      continue;
    }
    ASSERT_EQ(s, ParseStatus::kOk) << "frame " << index << ": " << wire::parse_status_name(s);
    EXPECT_EQ(p.l3_end, frame.data.size()) << "frame " << index << ": no trailer expected";
    // The burst path (received mbufs: headers, then ICRC) agrees.
    wire::ParsedFrame q;
    EXPECT_EQ(wire::parse_headers_of(frame.data, q), ParseStatus::kOk) << "frame " << index;
    EXPECT_EQ(wire::check_icrc(frame.data, q), ParseStatus::kOk) << "frame " << index;
    // The ICRC must not depend on which CRC implementation computes it.
    for (const auto& impl : wire::crc32_impls()) {
      if (!impl.available()) continue;
      EXPECT_EQ(wire::icrc_compute(impl.fn, p.icrc_covered()), p.icrc())
          << "frame " << index << " with " << impl.name;
    }
  }
}

TEST_P(GoldenCapture, CountsEqualTheReadmeTables) {
  const auto expectations = golden_expectations();
  ASSERT_TRUE(expectations.count(GetParam()));
  const GoldenExpectation& want = expectations.at(GetParam());

  GoldenExpectation got;
  // "retransmitted": a request/response PSN already seen on the same flow
  // (source address, destination QP, transport); ACKs and UD do not count.
  std::set<std::tuple<wire::Ipv6Addr, std::uint32_t, int, std::uint32_t>> seen;
  const auto frames = load_golden(GetParam());
  got.frames = frames.size();
  std::size_t index = 0;
  for (const auto& frame : frames) {
    const dump::FrameReport r = dump::analyse(++index, frame, 0);
    if (!r.is_roce()) continue;
    ++got.roce_frames;
    (r.status == ParseStatus::kOk ? got.icrc_ok : got.icrc_bad)++;
    ASSERT_TRUE(r.headers_valid());
    const wire::ParsedFrame& p = r.parsed;
    const wire::Bth bth = p.bth();
    ++got.opcodes[bth.opcode];
    if (p.has(wire::ExtHdr::kAeth)) {
      const std::uint8_t syn = p.aeth().syndrome;
      switch (wire::aeth_kind(syn)) {
        case wire::AethKind::kAck: ++got.aeth["ACK"]; break;
        case wire::AethKind::kRnrNak: ++got.aeth["RNR_NAK"]; break;
        case wire::AethKind::kNak:
          ++got.aeth[std::string("NAK_") + wire::nak_code_name(wire::aeth_value(syn))];
          break;
        case wire::AethKind::kReserved: ++got.aeth["RESERVED"]; break;
      }
    }
    if (const std::string cm = dump::cm_mad_name(r); !cm.empty()) ++got.cm_mads[cm];
    if (p.ip_version == 6 && p.udp().checksum.get() == 0) ++got.ipv6_zero_udp_checksum;
    const bool counted = !p.info->has_any(wire::kAck | wire::kAtomicAck) &&
                         p.info->transport != wire::Transport::kUd;
    if (counted) {
      wire::Ipv6Addr src{};
      if (p.ip_version == 6) src = p.ipv6().src;
      else {
        const wire::Ipv4Hdr ip = p.ipv4();
        std::copy(ip.src.begin(), ip.src.end(), src.begin());
      }
      const auto key = std::make_tuple(src, bth.dest_qp.get(), static_cast<int>(p.info->transport),
                                       bth.psn.get());
      if (!seen.insert(key).second) ++got.retransmitted;
    }
  }
  EXPECT_EQ(got.frames, want.frames);
  EXPECT_EQ(got.roce_frames, want.roce_frames);
  EXPECT_EQ(got.icrc_ok, want.icrc_ok);
  EXPECT_EQ(got.icrc_bad, want.icrc_bad);
  EXPECT_EQ(got.opcodes, want.opcodes);
  EXPECT_EQ(got.aeth, want.aeth);
  EXPECT_EQ(got.cm_mads, want.cm_mads);
  EXPECT_EQ(got.retransmitted, want.retransmitted);
  EXPECT_EQ(got.ipv6_zero_udp_checksum, want.ipv6_zero_udp_checksum);
}

TEST_P(GoldenCapture, RebuildFromParsedFieldsIsByteIdentical) {
  const auto frames = load_golden(GetParam());
  std::array<std::uint8_t, 16384> out;
  std::size_t index = 0;
  std::size_t rebuilt = 0;
  for (const auto& frame : frames) {
    ++index;
    wire::ParsedFrame p;
    if (wire::parse_frame(frame.data, p) != ParseStatus::kOk) continue;
    const wire::FrameSpec spec = wire::spec_from_parsed(p);
    const std::size_t n = wire::build_frame(spec, p.payload(), out);
    ASSERT_EQ(n, p.l3_end) << "frame " << index;
    ASSERT_TRUE(std::equal(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n),
                           frame.data.begin()))
        << "frame " << index << " differs after rebuild";
    // The header-only builder (zero-copy TX) plus a separately computed ICRC
    // over discontiguous payload pieces gives the same frame.
    std::array<std::uint8_t, 256> hdr;
    const wire::HeaderLayout layout = wire::build_headers(spec, p.payload_length, hdr);
    ASSERT_EQ(layout.header_bytes, p.payload_offset);
    ASSERT_TRUE(std::equal(hdr.begin(), hdr.begin() + static_cast<std::ptrdiff_t>(layout.header_bytes),
                           frame.data.begin()));
    const auto payload = p.payload();
    const std::uint8_t zeros[3] = {};
    const std::size_t half = payload.size() / 3;
    const std::span<const std::uint8_t> pieces[] = {payload.first(half), payload.subspan(half),
                                                    std::span<const std::uint8_t>(zeros, layout.pad)};
    const auto l3 = std::span<const std::uint8_t>(hdr).subspan(layout.l3_offset,
                                                                layout.header_bytes - layout.l3_offset);
    EXPECT_EQ(wire::icrc_compute(wire::crc32_default, l3, pieces), p.icrc()) << "frame " << index;
    ++rebuilt;
  }
  EXPECT_GT(rebuilt, 0u);
}

TEST_P(GoldenCapture, ScatteredFramesParseAsContiguousOnes) {
  // A frame in 2-4 segments, split at seeded random points (inside headers
  // and the ICRC too), parses to the same fields and payload as in one
  // piece; one flipped covered byte fails its ICRC.
  const std::uint64_t seed = test_seed() ^ std::hash<std::string>{}(GetParam());
  std::mt19937_64 rng(seed);
  std::size_t index = 0;
  std::size_t scattered = 0;
  for (const auto& frame : load_golden(GetParam())) {
    ++index;
    std::vector<std::uint8_t> whole = frame.data;
    wire::ParsedFrame a;
    const ParseStatus sa = wire::parse_frame(whole, a);
    if (wire::is_not_roce(sa) || whole.size() < 4) continue;
    for (int round = 0; round < 8; ++round) {
      const int nsegs = 2 + static_cast<int>(rng() % 3);
      std::vector<std::size_t> cuts;
      for (int k = 1; k < nsegs; ++k) cuts.push_back(1 + rng() % (whole.size() - 1));
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      std::vector<std::span<const std::uint8_t>> segs;
      std::size_t at = 0;
      for (const std::size_t c : cuts) {
        segs.emplace_back(whole.data() + at, c - at);
        at = c;
      }
      segs.emplace_back(whole.data() + at, whole.size() - at);
      std::array<std::uint8_t, wire::kHeadCopyBytes> head;
      wire::ParsedFrame b;
      const std::string where = "frame " + std::to_string(index) + " in " + std::to_string(segs.size()) +
                                " segments, " + seed_note(seed);
      ASSERT_EQ(wire::parse_frame_scattered(segs, head, b), sa) << where;
      if (sa != ParseStatus::kOk) continue;
      ++scattered;
      EXPECT_EQ(b.opcode, a.opcode) << where;
      EXPECT_EQ(b.payload_offset, a.payload_offset) << where;
      EXPECT_EQ(b.payload_length, a.payload_length) << where;
      EXPECT_EQ(b.bth().psn.get(), a.bth().psn.get()) << where;
      std::vector<std::uint8_t> payload(b.payload_length);
      b.visit_payload([&](const std::uint8_t* d, std::size_t n, std::size_t off) {
        ASSERT_LE(off + n, payload.size()) << where;
        std::memcpy(payload.data() + off, d, n);
      });
      const auto expect = a.payload();
      EXPECT_TRUE(std::equal(payload.begin(), payload.end(), expect.begin(), expect.end())) << where;
      // The BTH's PSN (covered, never masked) flipped where it lies.
      std::vector<std::uint8_t> bad = whole;
      bad[a.bth_offset + 11] ^= 0x01;
      std::vector<std::span<const std::uint8_t>> bad_segs;
      for (const auto& sg : segs) bad_segs.emplace_back(bad.data() + (sg.data() - whole.data()), sg.size());
      EXPECT_EQ(wire::parse_frame_scattered(bad_segs, head, b), ParseStatus::kIcrcMismatch) << where;
    }
  }
  EXPECT_GT(scattered, 0u) << "no frame of " << GetParam() << " was parsed in segments";
}

INSTANTIATE_TEST_SUITE_P(RxePcaps, GoldenCapture, ::testing::ValuesIn(golden_files()),
                         [](const auto& param_info) { return capture_test_name(param_info.param); });

}  // namespace
}  // namespace uroce::test
