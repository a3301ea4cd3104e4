// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320): the CRC behind the
// RoCEv2 ICRC. Several implementations with one signature and zlib's
// chaining convention: crc32(crc32(0, a), b) == crc32(0, a || b), so a CRC
// runs across discontiguous pieces (headers in one buffer, payload in others).
//
// Pick one with crc32_select() at setup and call it through the pointer; the
// test runs the same vectors through every implementation against the
// bitwise reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace uroce::wire {

using Crc32Fn = std::uint32_t (*)(std::uint32_t crc, const std::uint8_t* data, std::size_t len);

struct Crc32Impl {
  const char* name;
  Crc32Fn fn;
  bool (*available)();  // does this CPU run it?
  const char* description;
};

// The bitwise reference: slow, obviously right, constexpr.
constexpr std::uint32_t crc32_bitwise(std::uint32_t crc, const std::uint8_t* data,
                                      std::size_t len) {
  crc = ~crc;
  for (std::size_t i = 0; i < len; ++i) {
    crc ^= data[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// ISA-L's CRC, its kernel chosen by CPU at run time: what parse and build use
// unless told otherwise.
std::uint32_t crc32_default(std::uint32_t crc, const std::uint8_t* data, std::size_t len);

// Portable table-driven slicing-by-8 (no SIMD): the fallback.
std::uint32_t crc32_slice8(std::uint32_t crc, const std::uint8_t* data, std::size_t len);

// Every implementation compiled in, reference first; check available().
std::span<const Crc32Impl> crc32_impls();

// The implementation called `name` ("isal", "slice8", ...) if it exists and
// this CPU runs it; nullptr otherwise. An empty name picks the fastest.
const Crc32Impl* crc32_select(std::string_view name = {});

}  // namespace uroce::wire
