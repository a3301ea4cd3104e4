// Frames that arrive on one worker's queue for a QP that another worker
// serves (the peer picks the UDP source port, and with it the queue the
// NIC's RSS picks) go to that worker through a lock-free single-producer
// single-consumer ring per ordered pair of workers. Which worker serves a
// QPN is set on the control path while every worker is held; workers only
// read it.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine/packet_io.h"
#include "engine/qpn_map.h"
#include "engine/spsc_ring.h"

namespace uroce::engine {

class Handover {
 public:
  explicit Handover(std::uint32_t workers, std::uint32_t ring_capacity = 1024) : workers_(workers) {
    for (std::uint32_t i = 0; i < workers * workers; ++i) {
      rings_.push_back(std::make_unique<SpscRing<RxFrame>>(ring_capacity));
    }
  }

  std::uint32_t workers() const { return workers_; }

  // Control path (every worker held): QPN -> the worker that serves it.
  void set_owners(const std::vector<std::pair<std::uint32_t, std::uint32_t>>& qpn_worker) {
    owners_.rebuild(qpn_worker);
  }
  // The worker serving `qpn`, or nullptr.
  const std::uint32_t* owner(std::uint32_t qpn) const { return owners_.find(qpn); }

  // Worker `from` passes a frame (and its buffer) to worker `to`. False when
  // that ring is full.
  bool push(std::uint32_t from, std::uint32_t to, const RxFrame& f) { return ring(from, to).push(f); }

  // Worker `to` takes up to `max` frames passed to it, from every source.
  std::uint16_t pop(std::uint32_t to, RxFrame* out, std::uint16_t max) {
    std::uint32_t n = 0;
    for (std::uint32_t from = 0; from < workers_ && n < max; ++from) {
      if (from != to) n += ring(from, to).pop(out + n, max - n);
    }
    return static_cast<std::uint16_t>(n);
  }

 private:
  SpscRing<RxFrame>& ring(std::uint32_t from, std::uint32_t to) { return *rings_[to * workers_ + from]; }

  std::uint32_t workers_;
  std::vector<std::unique_ptr<SpscRing<RxFrame>>> rings_;
  QpnMap<std::uint32_t> owners_;
};

}  // namespace uroce::engine
