#include "wire/icrc.h"

#include <array>
#include <cstring>

namespace uroce::wire {
namespace {

// CRC state after the 8 bytes of 0xFF that replace the LRH (A17.3.3).
constexpr std::uint32_t kLrhSeed = [] {
  constexpr std::uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  return crc32_bitwise(0, ones, sizeof ones);
}();

// The bytes (offsets from the IP header) that the ICRC sees as all ones.
// IPv4: TOS, TTL, header checksum; UDP checksum; BTH byte 4.
constexpr std::uint8_t kMaskedV4[] = {1, 8, 10, 11, 20 + 6, 20 + 7, 28 + 4};
// IPv6: traffic class and flow label (with byte 0's low nibble), hop limit;
// UDP checksum; BTH byte 4.
constexpr std::uint8_t kMaskedV6[] = {1, 2, 3, 7, 40 + 6, 40 + 7, 48 + 4};

// What the ICRC ORs into the first bytes of a packet, as bytes: 0xff on
// each masked byte (0x0f on IPv6's byte 0, the traffic class's high
// nibble), zero elsewhere. As long as the longest packet icrc_of() copies
// whole, so a 16-byte window from any offset under it can be read.
constexpr std::size_t kWholeCopyMax = 128;
using OrBytes = std::array<std::uint8_t, kWholeCopyMax>;
constexpr OrBytes make_or_bytes(bool v6) {
  OrBytes b{};
  for (std::uint8_t off : v6 ? std::span<const std::uint8_t>(kMaskedV6) : std::span<const std::uint8_t>(kMaskedV4)) {
    b[off] = 0xff;
  }
  if (v6) b[0] = 0x0f;
  return b;
}
alignas(16) constexpr OrBytes kOrV4 = make_or_bytes(false);
alignas(16) constexpr OrBytes kOrV6 = make_or_bytes(true);

// 16 bytes in a vector register: unaligned loads and stores by memcpy,
// which compile to one movdqu each.
using V16 = std::uint8_t __attribute__((vector_size(16)));
inline V16 load16(const std::uint8_t* p) {
  V16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(std::uint8_t* p, V16 v) { std::memcpy(p, &v, sizeof v); }

}  // namespace

// The masked copy goes out in 16-byte stores, one for each of the CRC
// kernel's 16-byte loads, which then take their bytes from the store
// (all but the last load of a packet whose length is not a multiple of 16,
// which overlaps two stores).
std::uint32_t icrc_of(Crc32Fn crc32, std::span<const std::uint8_t> packet) {
  const std::uint8_t* p = packet.data();
  const std::size_t n = packet.size();
  if (n == 0) return crc32(kLrhSeed, p, 0);
  const std::uint8_t* ors = (p[0] >> 4) == 6 ? kOrV6.data() : kOrV4.data();
  alignas(16) std::uint8_t local[kWholeCopyMax];
  if (n < 16) [[unlikely]] {
    // Not a RoCE packet (under IP + UDP + BTH): masked byte by byte all
    // the same, for a caller that asks.
    for (std::size_t i = 0; i < n; ++i) local[i] = p[i] | ors[i];
    return crc32(kLrhSeed, local, n);
  }
  if (n <= kWholeCopyMax) {
    // All of it, in one CRC call: whole 16-byte blocks, then the last 16
    // bytes (overlapping the block before, with the same bytes).
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) store16(local + i, load16(p + i) | load16(ors + i));
    if (i < n) store16(local + n - 16, load16(p + n - 16) | load16(ors + n - 16));
    return crc32(kLrhSeed, local, n);
  }
  // The masked bytes all lie in the first 64 (IPv6's BTH byte 4 is the 53rd):
  // those from the copy, the rest where they are.
  constexpr std::size_t kHead = 64;
  static_assert(kIcrcMaskedBytesV6 <= kHead && kHead <= kWholeCopyMax);
  for (std::size_t i = 0; i < kHead; i += 16) store16(local + i, load16(p + i) | load16(ors + i));
  return crc32(crc32(kLrhSeed, local, kHead), p + kHead, n - kHead);
}

std::uint32_t icrc_compute(Crc32Fn crc32, std::span<const std::uint8_t> headers,
                           std::span<const std::span<const std::uint8_t>> payload) {
  std::uint32_t crc = icrc_of(crc32, headers);
  for (std::span<const std::uint8_t> piece : payload) crc = crc32(crc, piece.data(), piece.size());
  return crc;
}

}  // namespace uroce::wire
