// Big-endian field types for wire headers.
//
// Every multi-byte wire field is stored as raw bytes in network order and
// converted only at the accessor, so header structs have alignment 1, no
// padding and no bitfields, and can be overlaid on (or memcpy'd from) any
// byte offset of a frame.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace uroce::wire {

template <std::size_t N, typename T>
struct BigEndian {
  static_assert(N <= sizeof(T));
  std::array<std::uint8_t, N> bytes{};

  constexpr T get() const {
    T v = 0;
    for (std::size_t i = 0; i < N; ++i) v = static_cast<T>((v << 8) | bytes[i]);
    return v;
  }
  constexpr void set(T v) {
    for (std::size_t i = N; i-- > 0;) {
      bytes[i] = static_cast<std::uint8_t>(v & 0xff);
      v = static_cast<T>(v >> 8);
    }
  }
  friend constexpr bool operator==(const BigEndian&, const BigEndian&) = default;
};

using Be16 = BigEndian<2, std::uint16_t>;
using Be24 = BigEndian<3, std::uint32_t>;  // QPNs, PSNs, MSNs
using Be32 = BigEndian<4, std::uint32_t>;
using Be64 = BigEndian<8, std::uint64_t>;

static_assert(sizeof(Be16) == 2 && alignof(Be16) == 1);
static_assert(sizeof(Be24) == 3 && alignof(Be24) == 1);
static_assert(sizeof(Be32) == 4 && alignof(Be32) == 1);
static_assert(sizeof(Be64) == 8 && alignof(Be64) == 1);

}  // namespace uroce::wire
