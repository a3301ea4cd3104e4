// Big-endian field types for wire headers.
//
// Every multi-byte wire field is stored as raw bytes in network order and
// converted only at the accessor, so header structs have alignment 1, no
// padding and no bitfields, and can be overlaid on (or memcpy'd from) any
// byte offset of a frame.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace uroce::wire {

template <std::size_t N, typename T>
struct BigEndian {
  static_assert(N <= sizeof(T));
  std::array<std::uint8_t, N> bytes{};

  constexpr T get() const {
    if (!std::is_constant_evaluated() && std::endian::native == std::endian::little) return load();
    T v = 0;
    for (std::size_t i = 0; i < N; ++i) v = static_cast<T>((v << 8) | bytes[i]);
    return v;
  }
  constexpr void set(T v) {
    if (!std::is_constant_evaluated() && std::endian::native == std::endian::little) return store(v);
    for (std::size_t i = N; i-- > 0;) {
      bytes[i] = static_cast<std::uint8_t>(v & 0xff);
      v = static_cast<T>(v >> 8);
    }
  }
  friend constexpr bool operator==(const BigEndian&, const BigEndian&) = default;

 private:
  // At run time on a little-endian host: one load or store and a byte swap.
  // The byte loops above are what GCC sees of a header built in a local;
  // it packs their bytes in registers with shifts and copies the header
  // with a wide load that waits for the narrow stores (store forwarding
  // fails), several ns a packet.
  using Word = std::conditional_t<(N > 4), std::uint64_t, std::conditional_t<(N > 2), std::uint32_t, std::uint16_t>>;
  static Word swap(Word w) {
    if constexpr (sizeof(Word) == 8) return __builtin_bswap64(w);
    else if constexpr (sizeof(Word) == 4) return __builtin_bswap32(w);
    else return __builtin_bswap16(w);
  }
  T load() const {
    Word w = 0;  // network order, in the word's last N bytes
    std::memcpy(reinterpret_cast<std::uint8_t*>(&w) + (sizeof(Word) - N), bytes.data(), N);
    return static_cast<T>(swap(w));
  }
  void store(T v) {
    const Word w = swap(static_cast<Word>(static_cast<Word>(v) << (8 * (sizeof(Word) - N))));
    std::memcpy(bytes.data(), &w, N);
  }
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
