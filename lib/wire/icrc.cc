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

}  // namespace

std::uint32_t icrc_compute(Crc32Fn crc32, std::span<const std::uint8_t> headers,
                           std::span<const std::span<const std::uint8_t>> payload) {
  const bool v6 = !headers.empty() && (headers[0] >> 4) == 6;
  const std::size_t masked_len = v6 ? kIcrcMaskedBytesV6 : kIcrcMaskedBytesV4;
  const std::size_t n = std::min(masked_len, headers.size());

  std::array<std::uint8_t, kIcrcMaskedBytesV6> masked;
  std::memcpy(masked.data(), headers.data(), n);
  std::size_t udp = 0;
  if (v6) {
    masked[0] |= 0x0f;  // traffic class (high nibble) ...
    masked[1] = 0xff;   // ... traffic class (low nibble) and flow label
    masked[2] = 0xff;
    masked[3] = 0xff;
    masked[7] = 0xff;  // hop limit
    udp = 40;
  } else {
    masked[1] = 0xff;   // TOS (DSCP and ECN)
    masked[8] = 0xff;   // TTL
    masked[10] = 0xff;  // header checksum
    masked[11] = 0xff;
    udp = 20;
  }
  if (n >= udp + 8) {
    masked[udp + 6] = 0xff;  // UDP checksum
    masked[udp + 7] = 0xff;
  }
  if (n >= udp + 8 + 5) masked[udp + 8 + 4] = 0xff;  // BTH resv8a (FECN, BECN, resv6)

  std::uint32_t crc = crc32(kLrhSeed, masked.data(), n);
  if (headers.size() > n) crc = crc32(crc, headers.data() + n, headers.size() - n);
  for (std::span<const std::uint8_t> piece : payload) crc = crc32(crc, piece.data(), piece.size());
  return crc;
}

}  // namespace uroce::wire
