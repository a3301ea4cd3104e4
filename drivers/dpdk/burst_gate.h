// Keeping EAL's interrupt thread off a port's rings while a poll-mode thread
// is inside a burst on them.
//
// DPDK 22.11's memif serves its peer's control messages on EAL's interrupt
// thread. When the peer goes (it exits, crashes or stops its port),
// memif_disconnect runs there and unmaps the shared rings and buffers at
// once, with no word to the threads in rte_eth_rx_burst or rte_eth_tx_burst
// on them. Its "connected" flag, which a burst checks on entry, is cleared a
// few system calls earlier: a burst preempted past that check (a loaded
// machine, two busy threads on one core) wakes up writing into unmapped
// memory (a SIGSEGV in a helper thread at exit when both ends of a link
// close at once, issue 33), or, once the range is mapped again for
// something else, into that.
//
// The gate makes the two take turns. While a port that needs it is open,
// the interrupt thread is held in a callback of ours and let out in
// windows (at once when asked, see hurry()): a window opens only once no
// gated burst is under way, and a burst that comes while it is open waits
// until the thread is held again. The PMDs' handlers and EAL's alarms then
// run in windows only. While frames move, a window opens once every
// kBusyEvery at most: a window costs the bursts more than its few
// microseconds when the released thread loses its CPU to a busy poller
// (two processes on two cores: each one's interrupt thread runs on the
// other's core), and every window did halve uroce-perf's 64 KiB rate
// between two processes when they came each millisecond. When no frame
// moved for kLook, a window opens then: a connection's handshake, with no
// traffic yet, goes at a message per kLook. (Each look wakes the thread,
// on another process's core: a look a millisecond cost 5% of the 8-byte
// message rate between two processes, one every 5 ms nothing measurable.)
//
// A burst pays a store to its own slot and a load of a flag the interrupt
// thread writes once a window; membarrier(2) on the window's side orders
// them (a locked exchange per burst where the kernel has no membarrier).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace uroce::dpdk {

// One poller's mark: set while it is inside a burst. One per queue (a
// queue is polled by one thread at a time); registered while it lives.
class BurstSlot {
 public:
  BurstSlot();  // registers it, and holds the interrupt thread from then on
  ~BurstSlot();
  BurstSlot(const BurstSlot&) = delete;
  BurstSlot& operator=(const BurstSlot&) = delete;

  // Whether the gate works (false: its callback could not be registered,
  // said once in the log; bursts then go ungated, as before the gate).
  bool gated() const { return gated_; }

  // Around each burst, by the queue's owner: enter() returns once the
  // interrupt thread is held; until leave(), no window opens.
  void enter() {
    mark_busy();
    if (window_open.load(std::memory_order_seq_cst)) [[unlikely]] wait_for_window_to_close();
  }
  void leave() { busy_.store(false, std::memory_order_release); }
  // Frames the burst just ended moved (by the queue's owner).
  void moved(std::uint32_t frames) {
    if (frames != 0) moved_.store(moved_.load(std::memory_order_relaxed) + frames, std::memory_order_relaxed);
  }
  std::uint64_t frames_moved() const { return moved_.load(std::memory_order_relaxed); }

  bool busy() const { return busy_.load(std::memory_order_acquire); }

  // The interrupt thread runs handlers: set from the moment it leaves our
  // callback until it is back in it.
  static inline std::atomic<bool> window_open{true};
  // The window's side orders with membarrier: the poller's side needs only
  // to keep the compiler from reordering.
  static inline bool membarrier_orders = false;

  static constexpr std::chrono::microseconds kLook{5000};
  static constexpr std::chrono::milliseconds kBusyEvery{100};

 private:
  // The mark, ordered before the load of window_open that follows: by
  // membarrier on the other side (here only the compiler is held back),
  // or by a locked exchange. (Not a thread fence: ThreadSanitizer, which
  // builds this for the thread-safety tests, refuses those.)
  void mark_busy() {
    if (membarrier_orders) {
      busy_.store(true, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      busy_.exchange(true, std::memory_order_seq_cst);
    }
  }
  void wait_for_window_to_close();

  std::atomic<bool> busy_{false};
  std::atomic<std::uint64_t> moved_{0};
  bool gated_ = false;
};

// A burst's scope: enter() and leave() of `slot`, or nothing for nullptr.
class InBurst {
 public:
  explicit InBurst(BurstSlot* slot) : slot_(slot) {
    if (slot_ != nullptr) slot_->enter();
  }
  ~InBurst() {
    if (slot_ != nullptr) slot_->leave();
  }
  InBurst(const InBurst&) = delete;
  InBurst& operator=(const InBurst&) = delete;

 private:
  BurstSlot* slot_;
};

// Opens a window now rather than at the end of the period: for a caller
// about to wait on the interrupt thread (an alarm it set, a callback it
// registered). No-op when no slot holds the thread.
void hurry_burst_gate();

// Leaves EAL's interrupt thread free for good: slots made from now on go
// ungated. For an EAL the application started: it calls rte_eal_cleanup
// itself, which unmaps EAL's memory right after waking the thread to walk
// its interrupt sources again; a thread held here would walk them late,
// in unmapped memory.
void burst_gate_off();

// Windows opened since the process started (for tests).
std::uint64_t burst_gate_windows();

}  // namespace uroce::dpdk
