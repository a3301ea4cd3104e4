// Message payloads for --verify: message i is a window of a pool of random
// bytes at an offset that depends on i, so consecutive messages in a slot
// differ and a byte that was not moved shows. Both ends of a two-process run
// build the same pool.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace uroce::perf {

class Pattern {
 public:
  explicit Pattern(std::uint32_t size) : size_(size), pool_(static_cast<std::size_t>(size) + (1u << 20)) {
    std::mt19937_64 rng(42);
    for (std::size_t i = 0; i + 8 <= pool_.size(); i += 8) {
      const std::uint64_t v = rng();
      std::memcpy(pool_.data() + i, &v, 8);
    }
  }
  const std::uint8_t* data(std::uint64_t msg) const { return pool_.data() + (msg * 4099 + 7) % (1u << 20); }
  void fill(std::uint8_t* p, std::uint64_t msg) const { std::memcpy(p, data(msg), size_); }
  bool matches(const std::uint8_t* p, std::uint64_t msg) const { return std::memcmp(p, data(msg), size_) == 0; }

 private:
  std::uint32_t size_;
  std::vector<std::uint8_t> pool_;
};

}  // namespace uroce::perf
