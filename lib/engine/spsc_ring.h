// The handover's ring between two workers: lib/ring's, sized to a power of
// two (every slot in use).
#pragma once

#include <cstdint>

#include "ring/spsc_ring.h"

namespace uroce::engine {

template <typename T>
class SpscRing : public ring::SpscRing<T> {
 public:
  // Room for `capacity` entries rounded up to a power of two.
  explicit SpscRing(std::uint32_t capacity) : ring::SpscRing<T>(ring::pow2_at_least(capacity)) {}
};

}  // namespace uroce::engine
