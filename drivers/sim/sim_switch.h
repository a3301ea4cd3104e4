// A simulated Ethernet switch on the virtual clock: hosts attach to ports
// by links that carry the port's rate both ways (a host's NIC sends its
// frames one after another at that rate and they reach the switch one delay
// later); a frame goes to the port of its destination MAC and waits in that
// port's egress queue, which drains at the port's rate. The queue marks ECN
// RED style, on the backlog a frame leaves behind as it departs (or the one
// it finds on arrival, EgressConfig::mark_on_dequeue): never below Kmin,
// with a probability rising linearly to Pmax at Kmax, always above Kmax
// (ECN-capable frames only); and a frame that does not fit in the buffer is
// dropped (tail drop). N senders into one receiver's port make its egress
// the bottleneck.
//
// With PFC (IEEE 802.1Qbb) on, the switch also counts, per ingress port and
// priority, the bytes that came in there and have not left yet. A lossless
// priority's count passing XOFF sends the upstream host a PFC frame that
// pauses that priority for `quanta` (512 bit times each), repeated at half
// that while the count stays above XON; falling to XON sends one with pause
// time 0, which resumes it. The host's NIC finishes the frame on the wire
// and sends nothing more of that priority meanwhile (its other priorities
// go on). Lossless frames are never tail-dropped at the egress: the
// headroom above XOFF absorbs what is already on its way when the pause
// goes out, and only a frame past XOFF + headroom is dropped (a headroom
// too small for the link, counted). A frame's priority is its VLAN PCP, or
// else its DSCP's top three bits (the common DSCP-to-priority map).
//
// Events (frames reaching the switch, leaving an egress, a NIC free to
// send, PFC frames reaching a host, pause refreshes) are kept in one queue
// on the virtual clock and run in time order whenever a host polls or the
// fabric asks for the next delivery.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "sim/sim_link.h"
#include "wire/pfc.h"

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
  // Frames the host's NIC holds before it refuses more. An RNIC's rate
  // limiter sits before a shallow queue; a deep one would hold, while the
  // port is paused, frames sent at a rate DCQCN has since cut (with 512,
  // 64-to-1 with PFC ran paused all along at 1.6 MB of queue).
  std::size_t nic_frames = 16;
};

// PFC on every ingress port (the thresholds are per port and priority).
struct PfcConfig {
  bool enabled = false;
  std::uint8_t lossless = 1u << 3;   // priorities paused, never dropped (bit i: priority i)
  // Per ingress port and priority. XOFF well above what each ingress holds
  // when the egress marks, so that ECN and DCQCN act first and PFC is the
  // last resort (the order DCQCN is designed for): in the victim scenario
  // (16 flows, Kmax 200 KB, 40 ms, DCQCN on) 20 KB paused senders for
  // 14-17 ms and left the victim 3.0-5.8 Gb/s over seeds 1-3; 40 KB paused
  // nobody and left it 9.1-9.2 of its 9.4.
  std::uint64_t xoff_bytes = 40'000;
  std::uint64_t xon_bytes = 20'000;
  // 0: enough for the link (pfc_headroom_bytes()).
  std::uint64_t headroom_bytes = 0;
  std::uint16_t quanta = 0xffff;    // pause time of an XOFF
  std::uint32_t max_frame_bytes = 4224;  // the largest frame on the links (4 KiB MTU), for the headroom
};

// What can still reach the switch from a host once a lossless count passes
// XOFF: everything on the link and in the host's NIC until the PFC frame
// gets there (two link delays and the PFC frame's wire time at the link's
// rate), the frame the host is sending then, and the one that passed XOFF.
std::uint64_t pfc_headroom_bytes(const PfcConfig& pfc, double gbps, std::uint64_t delay_ns);

// PFC as seen on one port: by the switch on its ingress, and by the host's
// NIC on the other end of its link.
struct PfcStats {
  std::uint64_t xoff_sent = 0;        // PFC frames pausing a priority (refreshes included)
  std::uint64_t xon_sent = 0;         // PFC frames resuming it (pause time 0)
  std::uint64_t received = 0;         // PFC frames the host's NIC took
  std::uint64_t headroom_drops = 0;   // lossless frames past XOFF + headroom
  std::uint64_t max_ingress_bytes = 0;  // the largest count of a lossless priority
};

struct EgressStats {
  std::uint64_t enqueued = 0, dropped = 0, marked = 0, delivered = 0;
  std::uint64_t bytes_delivered = 0;
  std::uint64_t max_queue_bytes = 0;
};

// A PFC frame the switch sent: to the host on `port`, when it left.
using PfcObserver = std::function<void(std::uint64_t at_ns, int port, const wire::PauseRequest&)>;

class SimSwitch {
 public:
  SimSwitch(VirtualClock& clock, std::uint64_t seed);
  ~SimSwitch();

  // PFC on every port (before the first add_port).
  void set_pfc(const PfcConfig& pfc) { pfc_ = pfc; }
  const PfcConfig& pfc() const { return pfc_; }
  // Called for every PFC frame the switch sends (tests).
  void observe_pfc(PfcObserver observer) { pfc_observer_ = std::move(observer); }

  // Attaches a host with `mac` and `gid`; returns its port's PacketIo (which
  // resolves any attached host's GID to its MAC). Frames to `mac` leave
  // through this port's egress.
  engine::PacketIo& add_port(const std::uint8_t mac[6], const ibv_gid& gid, const EgressConfig& egress);

  // A frame from port `from` (a copy) reaches the switch now, as if it had
  // come in on that port.
  void forward(int from, std::vector<std::uint8_t> frame);

  // The backlog of port i's egress now, in bytes.
  std::uint64_t queue_bytes(int port);
  const EgressStats& stats(int port) const;
  const PfcStats& pfc_stats(int port) const;
  // The PFC headroom of ingress `port` (PfcConfig::headroom_bytes, or
  // pfc_headroom_bytes() of its link).
  std::uint64_t pfc_headroom(int port) const;
  // How long the host on `port` has had a priority paused until now (the
  // sum over priorities), in ns.
  std::uint64_t paused_ns(int port);
  // Frames in the host's NIC, not yet on the wire.
  std::size_t nic_frames(int port) const;
  // The next time a frame reaches a host or the switch; 0 if none is on
  // its way. (Frames due at the switch by now are queued first.)
  std::uint64_t next_delivery_ns();
  std::size_t ports() const { return ports_.size(); }

 private:
  class Port;
  enum class EventKind : std::uint8_t {
    kArrive,    // a frame reaches the switch from `port`
    kDepart,    // a lossless frame from ingress `port` left its egress: `bytes` fewer
    kNicFree,   // the NIC of `port` may send (stale unless `at` is its wake time)
    kPfcAt,     // a PFC frame reaches the NIC of `port`
    kRefresh,   // time to repeat the XOFF of (`port`, `prio`) if it still holds
  };
  struct Event {
    std::uint64_t at;
    std::uint64_t seq;  // scheduling order, for ties
    EventKind kind;
    int port;
    std::uint8_t prio = 0;
    std::uint32_t bytes = 0;
    wire::PauseRequest pause{};
    std::vector<std::uint8_t> frame{};
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  void schedule(Event e);
  // Runs every event due by `now`, in time order.
  void advance(std::uint64_t now);
  void run(Event& e);
  // `frame` reaches the switch from port `from` at `at`.
  void arrive(int from, std::vector<std::uint8_t> frame, std::uint64_t at);
  // Sends the host on `port` a PFC frame for `prio` at `at` (quanta 0: resume).
  void send_pfc(int port, std::uint8_t prio, std::uint16_t quanta, std::uint64_t at);

  VirtualClock& clock_;
  std::mt19937_64 rng_;
  PfcConfig pfc_;
  PfcObserver pfc_observer_;
  std::vector<Event> events_;  // a min-heap on (at, seq)
  std::uint64_t event_seq_ = 0;
  std::vector<std::unique_ptr<Port>> ports_;
};

}  // namespace uroce::sim
