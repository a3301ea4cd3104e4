// A deterministic simulated Ethernet link between two ports, on a virtual
// clock. Each direction has its own seeded loss, duplication, corruption,
// reordering, propagation delay and bandwidth; a pcap tap records both
// directions. Frames are copied once, when they go onto the "wire".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <random>
#include <vector>

#include "engine/packet_io.h"
#include "pcap/pcap_file.h"

namespace uroce::sim {

class VirtualClock : public engine::Clock {
 public:
  std::uint64_t now_ns() override { return now_; }
  void advance_to(std::uint64_t t) {
    if (t > now_) now_ = t;
  }
  void advance(std::uint64_t ns) { now_ += ns; }

 private:
  std::uint64_t now_ = 1'000'000;  // not 0: 0 means "disarmed" for timers
};

struct Impairments {
  double loss = 0;        // probability a frame is dropped
  double duplicate = 0;   // ... delivered twice
  double corrupt = 0;     // ... has one byte changed
  double reorder = 0;     // ... is held back by reorder_ns
  std::uint64_t delay_ns = 2000;     // propagation delay
  std::uint64_t reorder_ns = 20000;  // extra delay of a reordered frame
  double gbps = 0;        // serialization rate; 0 = unlimited
  double ce_mark = 0;     // ... is marked CE, if it is ECN-capable (as a congested switch would)
};

struct DirectionStats {
  std::uint64_t sent = 0, lost = 0, duplicated = 0, corrupted = 0, reordered = 0, delivered = 0, ce_marked = 0;
  std::uint64_t bytes = 0;
};

class SimLink {
 public:
  // Side 0 and side 1 with their MAC addresses; `to1` impairs frames sent by
  // side 0, `to0` those sent by side 1.
  SimLink(VirtualClock& clock, std::uint64_t seed, const std::uint8_t mac0[6], const std::uint8_t mac1[6],
          Impairments to1 = {}, Impairments to0 = {});
  ~SimLink();

  engine::PacketIo& port(int side);
  void set_impairments(int from_side, const Impairments& imp);
  // Records every frame as it is sent, both directions, into `path`.
  bool tap(const std::string& path, std::string& error);
  void close_tap() { tap_.reset(); }
  // Calls `observer(from_side, frame)` for every frame sent (tests look at
  // what went on the wire).
  void observe(std::function<void(int, std::span<const std::uint8_t>)> observer) { observer_ = std::move(observer); }

  // Earliest delivery time of a frame in flight; 0 if none.
  std::uint64_t next_delivery_ns() const;
  const DirectionStats& stats(int from_side) const;

 private:
  class Port;
  struct InFlight {
    std::uint64_t at;
    std::uint64_t seq;
    std::vector<std::uint8_t>* frame;
    bool operator>(const InFlight& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  using Queue = std::priority_queue<InFlight, std::vector<InFlight>, std::greater<InFlight>>;

  void send(int from, const wire::TxFrame& f);
  std::vector<std::uint8_t>* take_buffer();

  VirtualClock& clock_;
  std::mt19937_64 rng_;
  std::unique_ptr<Port> ports_[2];
  Impairments imp_[2];
  DirectionStats stats_[2];
  Queue queue_[2];             // frames travelling towards side i
  std::uint64_t link_free_[2] = {0, 0};  // when the sender's serializer is idle again
  std::uint64_t seq_ = 0;
  std::vector<std::unique_ptr<std::vector<std::uint8_t>>> buffers_;
  std::vector<std::vector<std::uint8_t>*> free_;
  std::unique_ptr<pcap::Writer> tap_;
  std::function<void(int, std::span<const std::uint8_t>)> observer_;
};

// Sets ECN to CE (11) on a RoCEv2 frame that is ECN-capable, as a switch
// does under congestion (the ICRC masks the IP class, so it stays valid).
// False for other frames.
bool mark_ce(std::vector<std::uint8_t>& frame);

}  // namespace uroce::sim
