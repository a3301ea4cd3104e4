// A simulated Ethernet switch on the virtual clock: hosts attach to ports
// by links that carry the port's rate both ways (a host's frames leave its
// NIC one after another at that rate and reach the switch one delay later);
// a frame goes to the port of its destination MAC and waits in that port's
// egress queue, which drains at the port's rate. The queue marks ECN RED
// style, on the backlog a frame leaves behind as it departs (or the one it
// finds on arrival, EgressConfig::mark_on_dequeue): never below Kmin, with a probability
// rising linearly to Pmax at Kmax, always above Kmax (ECN-capable frames
// only); and a frame that does not fit in the buffer is dropped (tail drop).
// N senders into one receiver's port make its egress the bottleneck.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "sim/sim_link.h"

namespace uroce::sim {

struct EgressConfig {
  double gbps = 10;                       // drain rate
  std::uint64_t buffer_bytes = 1u << 20;  // tail drop beyond this backlog
  std::uint64_t kmin_bytes = 5'000;       // RED marking thresholds
  std::uint64_t kmax_bytes = 200'000;
  double pmax = 0.2;
  std::uint64_t delay_ns = 1'000;         // propagation to the host
  // RED on the backlog a frame leaves behind when it departs (feedback
  // without the queueing delay), or on the backlog it finds on arrival.
  bool mark_on_dequeue = true;
};

struct EgressStats {
  std::uint64_t enqueued = 0, dropped = 0, marked = 0, delivered = 0;
  std::uint64_t bytes_delivered = 0;
  std::uint64_t max_queue_bytes = 0;
};

class SimSwitch {
 public:
  SimSwitch(VirtualClock& clock, std::uint64_t seed);
  ~SimSwitch();

  // Attaches a host with `mac` and `gid`; returns its port's PacketIo (which
  // resolves any attached host's GID to its MAC). Frames to `mac` leave
  // through this port's egress.
  engine::PacketIo& add_port(const std::uint8_t mac[6], const ibv_gid& gid, const EgressConfig& egress);

  // A frame from port `from` (a copy) reaches the switch now.
  void forward(int from, std::vector<std::uint8_t> frame);

  // The backlog of port i's egress now, in bytes.
  std::uint64_t queue_bytes(int port);
  const EgressStats& stats(int port) const;
  // The next time a frame reaches a host or the switch; 0 if none is on
  // its way. (Frames due at the switch by now are queued first.)
  std::uint64_t next_delivery_ns();
  std::size_t ports() const { return ports_.size(); }

 private:
  class Port;
  void forward_at(int from, std::vector<std::uint8_t> frame, std::uint64_t at);
  // Queues every frame that has reached the switch by `now`.
  void arrive_until(std::uint64_t now);

  struct InFlight {
    std::uint64_t at;   // reaches the switch
    std::uint64_t seq;  // sending order, for ties
    int from;
    std::vector<std::uint8_t> frame;
    bool operator>(const InFlight& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  VirtualClock& clock_;
  std::mt19937_64 rng_;
  std::vector<InFlight> in_flight_;  // hosts to switch: a min-heap on (at, seq)
  std::uint64_t in_flight_seq_ = 0;
  std::vector<std::unique_ptr<Port>> ports_;
};

}  // namespace uroce::sim
