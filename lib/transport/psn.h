// Packet sequence numbers: 24 bits that wrap (IBTA 9.7.1). Comparisons are
// by signed distance, valid while the two PSNs are within 2^23 of each other,
// which the transport's window guarantees.
#pragma once

#include <cstdint>

namespace uroce::transport {

inline constexpr std::uint32_t kPsnMask = 0xffffff;

constexpr std::uint32_t psn_add(std::uint32_t psn, std::int64_t n) {
  return static_cast<std::uint32_t>((static_cast<std::int64_t>(psn) + n) & kPsnMask);
}

// a - b as a signed 24-bit distance: > 0 when a is after b.
constexpr std::int32_t psn_diff(std::uint32_t a, std::uint32_t b) {
  return static_cast<std::int32_t>(((a - b) & kPsnMask) << 8) >> 8;
}

constexpr bool psn_before(std::uint32_t a, std::uint32_t b) { return psn_diff(a, b) < 0; }
constexpr bool psn_after(std::uint32_t a, std::uint32_t b) { return psn_diff(a, b) > 0; }

static_assert(psn_add(0xffffff, 1) == 0);
static_assert(psn_diff(0, 0xffffff) == 1);
static_assert(psn_diff(0xffffff, 0) == -1);
static_assert(psn_before(0xfffff0, 5));

}  // namespace uroce::transport
