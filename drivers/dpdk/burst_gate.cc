#include "dpdk/burst_gate.h"

#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "dpdk/eal.h"
#include "dpdk/rte.h"
#include "log/log.h"

namespace uroce::dpdk {
namespace {

struct Gate {
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<BurstSlot*> slots;
  bool tried = false;  // install() ran, or burst_gate_off() said not to
  bool works = false;  // and the callback is registered
  // Readable while slots are registered, so that EAL's interrupt thread
  // calls hold() on every turn of its loop; drained when the last goes.
  int fd = -1;
  bool hurry = false;
  std::atomic<std::uint64_t> windows{0};
};

// Never destroyed: the interrupt thread may be in hold() while the process
// exits.
Gate& gate() {
  static Gate* g = new Gate;
  return *g;
}

// EAL's interrupt thread, on every turn of its loop while slots exist.
// Entered, it is held; returning opens a window, which lasts until the
// next entry.
void hold(void*) {
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mutex);
  if (g.slots.empty()) {
    // Nobody polls a gated port: the thread goes free, and is not called
    // here again until a slot comes (BurstSlot writes the fd again).
    std::uint64_t n = 0;
    if (read(g.fd, &n, sizeof n) < 0) n = 0;
    return;
  }
  BurstSlot::window_open.store(false, std::memory_order_seq_cst);
  // Held a look at a time: out once asked, once a look saw no frame move,
  // or kBusyEvery at the latest.
  const auto frames = [&g] {
    std::uint64_t n = 0;
    for (const BurstSlot* s : g.slots) n += s->frames_moved();
    return n;
  };
  const auto until = std::chrono::steady_clock::now() + BurstSlot::kBusyEvery;
  for (std::uint64_t seen = frames();;) {
    if (g.wake.wait_for(lock, BurstSlot::kLook, [&g] { return g.hurry || g.slots.empty(); })) break;
    const std::uint64_t now = frames();
    if (now == seen || std::chrono::steady_clock::now() >= until) break;
    seen = now;
  }
  g.hurry = false;
  BurstSlot::window_open.store(true, std::memory_order_seq_cst);
  // Every poller's store of its mark is now visible, or it will see the
  // window open (the pollers' side has only a compiler barrier).
  if (BurstSlot::membarrier_orders) syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  for (const BurstSlot* s : g.slots) {
    while (s->busy()) sched_yield();  // a burst under way ends, perhaps on this core
  }
  g.windows.fetch_add(1, std::memory_order_relaxed);
}

// The callback on an eventfd of ours (mutex held). false, said once, when
// EAL refuses it.
bool install(Gate& g) {
  g.fd = on_interrupt_thread_when_readable(hold);
  if (g.fd < 0) {
    logger().warn("memif's connection teardown is not kept apart from the data path (EAL took no callback "
                  "of ours on its interrupt thread): a peer leaving while this process polls may crash it");
    return false;
  }
  BurstSlot::membarrier_orders = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  return true;
}

}  // namespace

BurstSlot::BurstSlot() {
  Gate& g = gate();
  std::lock_guard<std::mutex> lock(g.mutex);
  if (!g.tried) {
    g.tried = true;
    g.works = install(g);
  }
  if (!g.works) return;
  gated_ = true;
  g.slots.push_back(this);
  if (g.slots.size() == 1) {
    const std::uint64_t one = 1;
    if (write(g.fd, &one, sizeof one) != static_cast<ssize_t>(sizeof one)) {
      logger().warn("burst gate: cannot wake EAL's interrupt thread: {}", std::strerror(errno));
    }
  }
}

BurstSlot::~BurstSlot() {
  if (!gated_) return;
  Gate& g = gate();
  std::lock_guard<std::mutex> lock(g.mutex);
  std::erase(g.slots, this);
  if (g.slots.empty()) g.wake.notify_all();
}

void BurstSlot::wait_for_window_to_close() {
  const auto since = std::chrono::steady_clock::now();
  bool said = false;
  do {
    busy_.store(false, std::memory_order_release);
    while (window_open.load(std::memory_order_acquire)) {
      sched_yield();
      // A handler that takes this long is worth a word: the port's traffic
      // waits for it.
      if (!said && std::chrono::steady_clock::now() - since > std::chrono::seconds(1)) {
        said = true;
        logger().warn("a memif port's bursts have waited over a second for EAL's interrupt thread (busy in a "
                      "handler, or not running): its traffic is held meanwhile");
      }
    }
    mark_busy();
  } while (window_open.load(std::memory_order_seq_cst));
}

void burst_gate_off() {
  Gate& g = gate();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.tried = true;  // works stays false unless a slot installed it already
}

void hurry_burst_gate() {
  Gate& g = gate();
  std::lock_guard<std::mutex> lock(g.mutex);
  if (g.slots.empty()) return;
  g.hurry = true;
  g.wake.notify_all();
}

std::uint64_t burst_gate_windows() { return gate().windows.load(std::memory_order_relaxed); }

}  // namespace uroce::dpdk
