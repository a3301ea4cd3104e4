// A bounded single-producer single-consumer ring, lock-free: one thread
// pushes, one thread pops. Capacity is a power of two.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace uroce::engine {

template <typename T>
class SpscRing {
 public:
  explicit SpscRing(std::uint32_t capacity) {
    std::uint32_t c = 1;
    while (c < capacity) c *= 2;
    slots_.resize(c);
    mask_ = c - 1;
  }

  // False when full.
  bool push(const T& v) {
    const std::uint32_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_cache_ > mask_) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (head - tail_cache_ > mask_) return false;
    }
    slots_[head & mask_] = v;
    head_.store(head + 1, std::memory_order_release);
    return true;
  }

  // Up to `max` entries into `out`; how many.
  std::uint32_t pop(T* out, std::uint32_t max) {
    const std::uint32_t tail = tail_.load(std::memory_order_relaxed);
    std::uint32_t avail = head_cache_ - tail;
    if (avail == 0) {
      head_cache_ = head_.load(std::memory_order_acquire);
      avail = head_cache_ - tail;
    }
    const std::uint32_t n = avail < max ? avail : max;
    for (std::uint32_t i = 0; i < n; ++i) out[i] = slots_[(tail + i) & mask_];
    tail_.store(tail + n, std::memory_order_release);
    return n;
  }

  std::uint32_t capacity() const { return mask_ + 1; }

 private:
  std::vector<T> slots_;
  std::uint32_t mask_ = 0;
  // Producer's and consumer's indexes on lines of their own, each with the
  // side's cached copy of the other index.
  alignas(64) std::atomic<std::uint32_t> head_{0};
  std::uint32_t tail_cache_ = 0;  // producer's view of tail_
  alignas(64) std::atomic<std::uint32_t> tail_{0};
  std::uint32_t head_cache_ = 0;  // consumer's view of head_
};

}  // namespace uroce::engine
