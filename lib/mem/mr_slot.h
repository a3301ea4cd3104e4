// What mr_table.cc and mr_window.cc share to let engines change a window's
// binding while others check rkeys against it (the head of mr_table.h):
// atomic loads and stores of a slot's fields through std::atomic_ref, and
// the writer's hold on a slot's sequence counter. Not part of MrTable's
// interface.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "mem/mr_table.h"

namespace uroce::mem {

// A window's fields are stored with release and loaded with acquire: the
// seqlock without fences (which ThreadSanitizer does not model): a store
// stays behind the writer's odd count, and a reader's second look at the
// count stays behind its loads (read_window). On x86 both are the plain
// moves they were.
template <typename T>
inline T load(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_acquire);
}
template <typename T>
inline void store(T& field, T value) {
  std::atomic_ref<T>(field).store(value, std::memory_order_release);
}

// Spins while another thread holds what the caller waits for; gives the CPU
// up now and then (two engines may share a core on a loaded host).
inline void spin_wait(unsigned& spins) {
  if (++spins % 64 == 0) std::this_thread::yield();
}

// The writer's side: the counter goes from even to odd (one writer at a
// time: a second waits for even), the fields are stored (release: each
// stays behind the odd value, so a reader that saw one sees the counter
// changed when it looks again, read_window), and it goes to the next even
// value.
class MrTable::SlotWriter {
 public:
  SlotWriter(const MrTable& table, std::uint32_t slot) : seq_(table.seq_[slot]) {
    std::uint32_t s = seq_.load(std::memory_order_relaxed);
    unsigned spins = 0;
    while ((s & 1) != 0 || !seq_.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      spin_wait(spins);
      s = seq_.load(std::memory_order_relaxed);
    }
    odd_ = s + 1;
  }
  ~SlotWriter() { seq_.store(odd_ + 1, std::memory_order_release); }
  SlotWriter(const SlotWriter&) = delete;
  SlotWriter& operator=(const SlotWriter&) = delete;

 private:
  std::atomic<std::uint32_t>& seq_;
  std::uint32_t odd_ = 0;
};

}  // namespace uroce::mem
