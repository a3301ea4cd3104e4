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

namespace {

std::span<const std::uint8_t> masked_offsets(const std::uint8_t* p) {
  return (p[0] >> 4) == 6 ? std::span<const std::uint8_t>(kMaskedV6) : std::span<const std::uint8_t>(kMaskedV4);
}

}  // namespace

IcrcMask icrc_mask(std::span<std::uint8_t> packet) {
  std::uint8_t* p = packet.data();
  const std::span<const std::uint8_t> offsets = masked_offsets(p);
  IcrcMask m;
  m.saved[7] = p[0];
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    m.saved[i] = p[offsets[i]];
    p[offsets[i]] = 0xff;
  }
  if ((m.saved[7] >> 4) == 6) p[0] |= 0x0f;
  return m;
}

std::uint32_t icrc_masked(Crc32Fn crc32, std::span<const std::uint8_t> packet) {
  return crc32(kLrhSeed, packet.data(), packet.size());
}

void icrc_unmask(std::span<std::uint8_t> packet, const IcrcMask& mask) {
  std::uint8_t* p = packet.data();
  p[0] = mask.saved[7];  // first: it says which offsets were masked
  const std::span<const std::uint8_t> offsets = masked_offsets(p);
  for (std::size_t i = 0; i < offsets.size(); ++i) p[offsets[i]] = mask.saved[i];
}

std::uint32_t icrc_compute_in_place(Crc32Fn crc32, std::span<std::uint8_t> packet) {
  const IcrcMask m = icrc_mask(packet);
  const std::uint32_t crc = icrc_masked(crc32, packet);
  icrc_unmask(packet, m);
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
