#include "wire/icrc.h"

#include <algorithm>
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

}  // namespace

std::uint32_t icrc_compute_in_place(Crc32Fn crc32, std::span<std::uint8_t> packet) {
  std::uint8_t* p = packet.data();
  const bool v6 = (p[0] >> 4) == 6;
  const std::span<const std::uint8_t> offsets = v6 ? std::span<const std::uint8_t>(kMaskedV6)
                                                   : std::span<const std::uint8_t>(kMaskedV4);
  std::array<std::uint8_t, 8> saved;
  saved[7] = p[0];
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    saved[i] = p[offsets[i]];
    p[offsets[i]] = 0xff;
  }
  if (v6) p[0] |= 0x0f;
  const std::uint32_t crc = crc32(kLrhSeed, p, packet.size());
  for (std::size_t i = 0; i < offsets.size(); ++i) p[offsets[i]] = saved[i];
  p[0] = saved[7];
  return crc;
}

std::uint32_t icrc_compute(Crc32Fn crc32, std::span<const std::uint8_t> headers,
                           std::span<const std::span<const std::uint8_t>> payload) {
  const bool v6 = !headers.empty() && (headers[0] >> 4) == 6;
  const std::size_t n = std::min(v6 ? kIcrcMaskedBytesV6 : kIcrcMaskedBytesV4, headers.size());
  std::array<std::uint8_t, kIcrcMaskedBytesV6> masked;
  std::memcpy(masked.data(), headers.data(), n);
  for (std::uint8_t off : v6 ? std::span<const std::uint8_t>(kMaskedV6) : std::span<const std::uint8_t>(kMaskedV4)) {
    if (off < n) masked[off] = 0xff;
  }
  if (v6 && n > 0) masked[0] |= 0x0f;  // traffic class, high nibble

  std::uint32_t crc = crc32(kLrhSeed, masked.data(), n);
  if (headers.size() > n) crc = crc32(crc, headers.data() + n, headers.size() - n);
  for (std::span<const std::uint8_t> piece : payload) crc = crc32(crc, piece.data(), piece.size());
  return crc;
}

}  // namespace uroce::wire
