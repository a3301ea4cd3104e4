// A simulated leaf-spine fabric on the virtual clock: `leaves` leaf
// switches with `hosts_per_leaf` hosts each, every leaf joined to every one
// of `spines` spine switches. Every link is two egress queues, one each way,
// draining at the link's rate (FIFO, tail drop beyond the buffer, RED/ECN
// marking as SimSwitch's egress, on the backlog a frame finds). A frame for
// a host on the same leaf goes straight down; otherwise the leaf picks an
// uplink by a hash of the frame's 5-tuple (IP source and destination,
// protocol, UDP source and destination port), so that one flow always takes
// one spine and a different UDP source port may take another (ECMP), and
// the spine sends it down to the destination's leaf.
//
// Impairments per link: a seeded random loss per frame (each direction), a
// time from which the link is down (every frame that would leave on it
// from then on is dropped and counted; ECMP goes on choosing it, as a
// switch's hash does until routing converges, and, if given, stops after
// a reroute time: from then on the leaves hash only over the spines with
// both links of the path up), and a slower rate.
//
// No PFC here (SimSwitch has it, for one switch): a full queue drops.
//
// Host h (from 0) is on leaf h / hosts_per_leaf, MAC 02:00:00:00:LL:HH and
// GID ::ffff:10.99.LL.HH, with LL = leaf + 1 and HH = h % hosts_per_leaf + 1.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "sim/sim_link.h"
#include "sim/sim_switch.h"

namespace uroce::sim {

struct LeafSpineConfig {
  int spines = 2;
  int leaves = 2;
  int hosts_per_leaf = 2;
  // Every queue (host links and spine links alike): rate, buffer, RED,
  // propagation delay.
  EgressConfig egress;
  double loss = 0;  // per frame on every link, each direction

  // Empty if LeafSpine can be built of this; else what is wrong.
  std::string check() const;
};

// What happened on one direction of one link.
struct LinkStats {
  std::uint64_t enqueued = 0, delivered = 0, bytes = 0;
  std::uint64_t tail_dropped = 0, lost = 0, failed_dropped = 0, marked = 0;
  std::uint64_t max_queue_bytes = 0;
};

// The 5-tuple ECMP hashes, from an Ethernet/IPv4 or IPv6/UDP frame (or with
// a VLAN tag; IPv6 addresses folded to 32 bits); false for a frame that is
// not IP.
struct FiveTuple {
  std::uint32_t src_ip = 0, dst_ip = 0;
  std::uint16_t src_port = 0, dst_port = 0;
  std::uint8_t protocol = 0;
};
bool parse_five_tuple(std::span<const std::uint8_t> frame, FiveTuple& t);
// ECMP's choice among `paths` for `t`, with a per-switch `salt` (a fabric
// whose switches all hashed alike would polarise: each leaf's choice would
// repeat at the next tier).
int ecmp_pick(const FiveTuple& t, std::uint64_t salt, int paths);

class LeafSpine {
 public:
  // `config` must pass its check() (else the fabric has one leaf of one
  // host and no spine).
  LeafSpine(VirtualClock& clock, std::uint64_t seed, const LeafSpineConfig& config);
  ~LeafSpine();

  int hosts() const { return config_.leaves * config_.hosts_per_leaf; }
  int leaf_of(int host) const { return host / config_.hosts_per_leaf; }
  void host_address(int host, std::uint8_t mac[6], ibv_gid& gid) const;
  // Host h's port: what its device sends and receives through.
  engine::PacketIo& port(int host);

  // The link between `leaf` and `spine` (both directions): down from `at_ns`
  // on, and out of the ECMP choice from `at_ns + reroute_ns` (0: never);
  // slower (`gbps`, above 0); lossy. False if there is no such link.
  bool fail_link(int leaf, int spine, std::uint64_t at_ns, std::uint64_t reroute_ns = 0);
  bool set_link_gbps(int leaf, int spine, double gbps);
  bool set_link_loss(int leaf, int spine, double loss);
  // Loss on the link from host h's leaf to host h (the last hop towards it).
  void set_host_rx_loss(int host, double loss);

  // Directions of the spine link: up (leaf to spine) and down (an existing
  // link).
  const LinkStats& uplink(int leaf, int spine) const;
  const LinkStats& downlink(int spine, int leaf) const;
  // The host's own link: from the host (to its leaf) and to it.
  const LinkStats& host_tx(int host) const;
  const LinkStats& host_rx(int host) const;
  // Frames the spine links dropped because they were down (both ways).
  std::uint64_t failed_drops() const;
  // Over every queue: frames tail-dropped, frames marked CE.
  std::uint64_t tail_drops() const;
  std::uint64_t marks() const;

  // The next time something happens on the fabric; 0 if nothing is on its
  // way.
  std::uint64_t next_delivery_ns();

 private:
  class HostPort;
  struct Queue;
  struct Event {
    std::uint64_t at;
    std::uint64_t seq;
    int node;  // where the frame arrives (hosts 0..H-1, leaves H.., spines H+L..); -1: a wake-up
    std::vector<std::uint8_t> frame;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  void advance(std::uint64_t now);
  void schedule(std::uint64_t at, int node, std::vector<std::uint8_t> frame);
  // `frame` joins queue `q` at `at`; it reaches the queue's far end later,
  // or is dropped (counted).
  bool send(Queue& q, std::vector<std::uint8_t> frame, std::uint64_t at);
  // A frame reaches switch `node` at `at`: it goes to the queue its
  // destination takes.
  void route(int node, std::vector<std::uint8_t> frame, std::uint64_t at);
  int host_of_mac(const std::uint8_t* mac) const;
  bool has_link(int leaf, int spine) const {
    return leaf >= 0 && leaf < config_.leaves && spine >= 0 && spine < config_.spines;
  }
  Queue& spine_link(int leaf, int spine, bool up) const;

  VirtualClock& clock_;
  LeafSpineConfig config_;
  std::uint64_t seed_;
  std::vector<std::unique_ptr<Queue>> queues_;
  // Index into queues_: per host [to leaf, from leaf]; per (leaf, spine)
  // [up, down].
  std::vector<std::unique_ptr<HostPort>> ports_;
  std::vector<Event> events_;  // a min-heap on (at, seq)
  std::uint64_t event_seq_ = 0;
};

}  // namespace uroce::sim
