// The TX path's headers, built once per path and patched per packet, give
// the same bytes as build_frame() from the same fields: every opcode the RC
// transport sends, IPv4 and IPv6, tagged and untagged, payloads copied into
// the head or sent as pieces, IPv4 checksums written or left to the port,
// the ICRC computed at once or left for finish_icrc_tx() (the engine's
// bursts).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "support/test_seed.h"
#include "wire/frame.h"
#include "wire/icrc.h"
#include "wire/path_header.h"

namespace uroce::wire {
namespace {

constexpr Opcode kSent[] = {
    Opcode::kRcSendFirst,         Opcode::kRcSendMiddle,       Opcode::kRcSendLast,
    Opcode::kRcSendLastImm,       Opcode::kRcSendOnly,         Opcode::kRcSendOnlyImm,
    Opcode::kRcSendLastInv,       Opcode::kRcSendOnlyInv,      Opcode::kRcWriteFirst,
    Opcode::kRcWriteMiddle,       Opcode::kRcWriteLast,        Opcode::kRcWriteLastImm,
    Opcode::kRcWriteOnly,         Opcode::kRcWriteOnlyImm,     Opcode::kRcReadRequest,
    Opcode::kRcReadResponseFirst, Opcode::kRcReadResponseMiddle, Opcode::kRcReadResponseLast,
    Opcode::kRcReadResponseOnly,  Opcode::kRcAcknowledge,      Opcode::kRcAtomicAcknowledge,
    Opcode::kRcCompareSwap,       Opcode::kRcFetchAdd,         Opcode::kCnp,
};

template <typename T>
void randomize(T& h, std::mt19937_64& rng) {
  auto* p = reinterpret_cast<std::uint8_t*>(&h);
  for (std::size_t i = 0; i < sizeof h; ++i) p[i] = static_cast<std::uint8_t>(rng());
}

FrameSpec random_path(std::mt19937_64& rng) {
  FrameSpec s;
  randomize(s.eth_dst, rng);
  randomize(s.eth_src, rng);
  if (rng() % 2 != 0) s.vlan_tci = static_cast<std::uint16_t>(rng());
  s.ip_version = rng() % 2 != 0 ? 6 : 4;
  s.tos = static_cast<std::uint8_t>(rng());
  s.ip_id = static_cast<std::uint16_t>(rng());
  s.ttl = static_cast<std::uint8_t>(rng());
  randomize(s.src4, rng);
  randomize(s.dst4, rng);
  s.traffic_class = static_cast<std::uint8_t>(rng());
  s.flow_label = static_cast<std::uint32_t>(rng() & 0xfffff);
  s.hop_limit = static_cast<std::uint8_t>(rng());
  randomize(s.src6, rng);
  randomize(s.dst6, rng);
  s.udp_src_port = static_cast<std::uint16_t>(0xc000 | (rng() & 0x3fff));
  return s;
}

TEST(PathHeader, PacketsEqualBuildFrameOfTheSameFields) {
  const std::uint64_t seed = test::test_seed(0x9a7b);
  SCOPED_TRACE(test::seed_note(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> region(8192);
  for (auto& b : region) b = static_cast<std::uint8_t>(rng());
  std::array<std::uint8_t, 9216> head_memory;
  int deferred = 0;
  for (int round = 0; round < 4000; ++round) {
    FrameSpec spec = random_path(rng);
    const Opcode op = kSent[rng() % std::size(kSent)];
    const OpcodeInfo& info = opcode_info(op);
    TransportHeaders th;
    randomize(th.bth, rng);
    th.bth.opcode = static_cast<std::uint8_t>(op);
    th.bth.flags &= 0xf0;  // transport header version 0
    randomize(th.deth, rng);
    randomize(th.feth, rng);
    randomize(th.reth, rng);
    randomize(th.atomic_eth, rng);
    randomize(th.aeth, rng);
    randomize(th.atomic_ack_eth, rng);
    randomize(th.immdt, rng);
    randomize(th.ieth, rng);
    spec.bth = th.bth;
    spec.deth = th.deth;
    spec.feth = th.feth;
    spec.reth = th.reth;
    spec.atomic_eth = th.atomic_eth;
    spec.aeth = th.aeth;
    spec.atomic_ack_eth = th.atomic_ack_eth;
    spec.immdt = th.immdt;
    spec.ieth = th.ieth;

    // The payload: up to 4 KiB in one to three pieces of the region.
    const std::uint32_t len = info.has(kFixedPayload16) ? 16
                              : info.has(kHasPayload)   ? static_cast<std::uint32_t>(rng() % 4097)
                                                        : 0;
    const std::size_t at = rng() % (region.size() - len);
    TxFrame f;
    std::uint32_t cut1 = len == 0 ? 0 : static_cast<std::uint32_t>(rng() % (len + 1));
    std::uint32_t cut2 = len == 0 ? 0 : static_cast<std::uint32_t>(rng() % (len + 1));
    if (cut1 > cut2) std::swap(cut1, cut2);
    for (const auto& [from, to] : {std::pair{0u, cut1}, std::pair{cut1, cut2}, std::pair{cut2, len}}) {
      if (to > from) f.pieces[f.npieces++] = std::span<const std::uint8_t>(region.data() + at + from, to - from);
    }
    PacketOptions options;
    options.ipv4_checksum = rng() % 4 != 0;
    static constexpr std::uint32_t kLimits[] = {0, 511, 9000};
    options.copy_limit = kLimits[rng() % 3];
    f.head = TxHead{head_memory.data(), static_cast<std::uint16_t>(rng() % 2 != 0 ? 128 : head_memory.size()), nullptr};

    const PathHeader path = build_path_header(spec);
    ASSERT_TRUE(path.built());
    const bool defer = rng() % 2 != 0;
    options.defer_icrc = defer;
    ASSERT_TRUE(write_packet(path, th, len, f, options)) << "round " << round;
    if (defer) {
      finish_icrc_tx(f, crc32_default);
      ++deferred;
    }
    std::vector<std::uint8_t> got(f.frame_bytes());
    f.copy_to(got.data());

    std::vector<std::uint8_t> want(9300);
    const auto payload = std::span<const std::uint8_t>(region.data() + at, len);
    want.resize(build_frame(spec, payload, want));
    ASSERT_FALSE(want.empty());
    const std::size_t l3 = spec.vlan_tci ? 18 : 14;
    if (spec.ip_version == 4 && !options.ipv4_checksum) want[l3 + 10] = want[l3 + 11] = 0;
    ASSERT_EQ(got, want) << "round " << round << ": opcode " << static_cast<int>(op) << ", IPv"
                         << int{spec.ip_version} << ", payload " << len << ", copy limit " << options.copy_limit
                         << (defer ? ", ICRC deferred" : "");
    // Short payloads within the limit were copied; others left in place.
    const bool copied = len <= options.copy_limit && want.size() <= f.head.room;
    EXPECT_EQ(f.npieces == 0, copied || len == 0) << "round " << round;
    EXPECT_EQ(f.copied, copied ? len : 0u) << "round " << round;

    // And on their own: the ICRC and the IPv4 checksum verify.
    const std::size_t icrc_at = got.size() - kIcrcBytes;
    EXPECT_EQ(icrc_of(crc32_default, std::span<const std::uint8_t>(got.data() + l3, icrc_at - l3)),
              icrc_load(got.data() + icrc_at))
        << "round " << round;
    if (spec.ip_version == 4 && options.ipv4_checksum) {
      EXPECT_EQ(ipv4_header_checksum(got.data() + l3, 20), 0) << "round " << round;
    }
  }
  EXPECT_GT(deferred, 1000);
  EXPECT_LT(deferred, 3000);
}

TEST(PathHeader, KeepsTheAddressesItWasBuiltFrom) {
  FrameSpec v4;
  v4.src4 = {10, 0, 0, 1};
  v4.dst4 = {10, 0, 0, 2};
  const PathHeader p4 = build_path_header(v4);
  ASSERT_EQ(p4.ip_version, 4);
  EXPECT_TRUE(std::equal(p4.ip_src().begin(), p4.ip_src().end(), v4.src4.begin()));
  EXPECT_TRUE(std::equal(p4.ip_dst().begin(), p4.ip_dst().end(), v4.dst4.begin()));
  FrameSpec v6;
  v6.ip_version = 6;
  v6.vlan_tci = 7;
  v6.src6[0] = 0xfe;
  v6.dst6[15] = 9;
  const PathHeader p6 = build_path_header(v6);
  ASSERT_EQ(p6.ip_version, 6);
  EXPECT_EQ(p6.len, 14 + 4 + 40 + 8);
  EXPECT_TRUE(std::equal(p6.ip_src().begin(), p6.ip_src().end(), v6.src6.begin()));
  EXPECT_TRUE(std::equal(p6.ip_dst().begin(), p6.ip_dst().end(), v6.dst6.begin()));
}

TEST(PathHeader, RefusesWhatItCannotWrite) {
  FrameSpec spec;
  const PathHeader path = build_path_header(spec);
  std::array<std::uint8_t, 128> memory{};
  TxFrame f;
  TransportHeaders th;
  th.bth.opcode = 0x1f;  // reserved in the RC range
  f.head = TxHead{memory.data(), static_cast<std::uint16_t>(memory.size()), nullptr};
  EXPECT_FALSE(write_packet(path, th, 0, f, PacketOptions{}));
  th.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcSendOnly);
  f.head.room = 40;  // less than the headers
  EXPECT_FALSE(write_packet(path, th, 0, f, PacketOptions{}));
  f.head.room = static_cast<std::uint16_t>(memory.size());
  EXPECT_FALSE(write_packet(PathHeader{}, th, 0, f, PacketOptions{})) << "a path never built";
  EXPECT_TRUE(write_packet(path, th, 0, f, PacketOptions{}));
}

}  // namespace
}  // namespace uroce::wire
