// The RNR NAK timer field (IBTA 9.7.5.2.8, table 45): a 5-bit code for the
// minimum time the requester waits before retrying after an RNR NAK. The same
// encoding is ibv_qp_attr.min_rnr_timer.
#pragma once

#include <cstdint>

namespace uroce::transport {

// Microseconds for each code; code 0 is the longest, 655.36 ms.
inline constexpr std::uint32_t kRnrTimerUs[32] = {
    655360, 10,    20,    30,    40,    60,    80,     120,    160,    240,   320,
    480,    640,   960,   1280,  1920,  2560,  3840,   5120,   7680,   10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

constexpr std::uint64_t rnr_timer_ns(std::uint8_t code) {
  return static_cast<std::uint64_t>(kRnrTimerUs[code & 0x1f]) * 1000;
}

// The smallest code whose time is at least `us` (31 if none is).
constexpr std::uint8_t rnr_code_for_us(std::uint32_t us) {
  std::uint8_t best = 0;  // 655.36 ms, the longest
  std::uint32_t best_us = kRnrTimerUs[0];
  for (std::uint8_t c = 1; c < 32; ++c) {
    if (kRnrTimerUs[c] >= us && kRnrTimerUs[c] < best_us) {
      best = c;
      best_us = kRnrTimerUs[c];
    }
  }
  return best;
}

static_assert(rnr_timer_ns(12) == 640'000);
static_assert(rnr_code_for_us(640) == 12);

}  // namespace uroce::transport
