#include "wire/crc32.h"

#include <array>
#include <bit>
#include <cstring>

#include <isa-l/crc.h>

// ISA-L exports its per-ISA CRC kernels; crc32_gzip_refl() dispatches among
// them by CPU at run time. We name them too, so the test can run each one
// this CPU supports against the reference, not only the one picked here.
extern "C" {
std::uint32_t crc32_gzip_refl_by8(std::uint32_t, const unsigned char*, std::uint64_t);
std::uint32_t crc32_gzip_refl_by8_02(std::uint32_t, const unsigned char*, std::uint64_t);
std::uint32_t crc32_gzip_refl_by16_10(std::uint32_t, const unsigned char*, std::uint64_t);
}

namespace uroce::wire {
namespace {

using Table = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Table make_slice8_table() {
  Table t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    t[0][i] = c;
  }
  for (std::uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
  return t;
}

constexpr Table kSlice8 = make_slice8_table();

std::uint32_t crc32_reference(std::uint32_t crc, const std::uint8_t* data, std::size_t len) {
  return crc32_bitwise(crc, data, len);
}

// ISA-L's AVX and AVX-512 kernels return without VZEROUPPER, leaving the
// upper halves of the vector registers dirty. The next legacy-SSE instruction
// in our code (any compiler-generated struct copy) then pays a state
// transition: measured here, it made header building cost ~150 ns per frame.
// So every AVX kernel call is followed by a VZEROUPPER.
__attribute__((target("avx"))) void clear_upper_state() { __builtin_ia32_vzeroupper(); }

bool cpu_has_avx() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx");
}
const bool kHasAvx = cpu_has_avx();

// ISA-L declares its table kernel with a non-const buffer; it only reads it.
std::uint32_t isal_base(std::uint32_t crc, const std::uint8_t* data, std::size_t len) {
  return crc32_gzip_refl_base(crc, const_cast<std::uint8_t*>(data), len);
}

template <auto Kernel, bool kUsesAvx>
std::uint32_t isal_call(std::uint32_t crc, const std::uint8_t* data, std::size_t len) {
  const std::uint32_t r = Kernel(crc, data, len);
  if (kUsesAvx) clear_upper_state();
  return r;
}

bool always() { return true; }
bool has_pclmul() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}
bool has_avx_pclmul() { return has_pclmul() && __builtin_cpu_supports("avx"); }
bool has_avx512_vpclmul() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq");
}

// Reference first, then roughly slowest to fastest; the dispatching ISA-L
// entry point last, as crc32_select("") returns it.
constexpr Crc32Impl kImpls[] = {
    {"bitwise", crc32_reference, always, "bit-at-a-time reference"},
    {"slice8", crc32_slice8, always, "portable slicing-by-8 tables"},
    {"isal-base", isal_base, always, "ISA-L table kernel"},
    {"isal-sse", isal_call<crc32_gzip_refl_by8, false>, has_pclmul, "ISA-L PCLMULQDQ folding"},
    {"isal-avx", isal_call<crc32_gzip_refl_by8_02, true>, has_avx_pclmul,
     "ISA-L PCLMULQDQ folding, VEX"},
    {"isal-avx512", isal_call<crc32_gzip_refl_by16_10, true>, has_avx512_vpclmul,
     "ISA-L VPCLMULQDQ folding, AVX-512"},
    {"isal", crc32_default, always, "ISA-L, kernel chosen by CPU at run time"},
};

}  // namespace

std::uint32_t crc32_slice8(std::uint32_t crc, const std::uint8_t* data, std::size_t len) {
  crc = ~crc;
  while (len >= 8) {
    std::uint32_t lo;
    std::uint32_t hi;
    std::memcpy(&lo, data, 4);
    std::memcpy(&hi, data + 4, 4);
    if constexpr (std::endian::native == std::endian::big) {
      lo = __builtin_bswap32(lo);
      hi = __builtin_bswap32(hi);
    }
    lo ^= crc;
    crc = kSlice8[7][lo & 0xff] ^ kSlice8[6][(lo >> 8) & 0xff] ^ kSlice8[5][(lo >> 16) & 0xff] ^
          kSlice8[4][lo >> 24] ^ kSlice8[3][hi & 0xff] ^ kSlice8[2][(hi >> 8) & 0xff] ^
          kSlice8[1][(hi >> 16) & 0xff] ^ kSlice8[0][hi >> 24];
    data += 8;
    len -= 8;
  }
  while (len-- > 0) crc = (crc >> 8) ^ kSlice8[0][(crc ^ *data++) & 0xff];
  return ~crc;
}

std::uint32_t crc32_default(std::uint32_t crc, const std::uint8_t* data, std::size_t len) {
  const std::uint32_t r = crc32_gzip_refl(crc, data, len);
  if (kHasAvx) clear_upper_state();
  return r;
}

std::span<const Crc32Impl> crc32_impls() { return kImpls; }

const Crc32Impl* crc32_select(std::string_view name) {
  if (name.empty()) {
    // The dispatching ISA-L entry point: it picks the widest kernel itself.
    return &kImpls[std::size(kImpls) - 1];
  }
  for (const Crc32Impl& impl : kImpls) {
    if (name == impl.name) return impl.available() ? &impl : nullptr;
  }
  return nullptr;
}

}  // namespace uroce::wire
