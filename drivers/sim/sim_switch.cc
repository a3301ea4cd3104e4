#include "sim/sim_switch.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>

#include "wire/headers.h"

namespace uroce::sim {
namespace {

// The 802.1p priority of a frame: its VLAN PCP, or else the top three bits
// of its DSCP (IPv4 TOS, IPv6 traffic class), or 0.
std::uint8_t frame_priority(const std::vector<std::uint8_t>& f) {
  if (f.size() < 14) return 0;
  std::size_t at = 12;
  std::uint16_t type = static_cast<std::uint16_t>(f[at] << 8 | f[at + 1]);
  if (type == wire::kEtherTypeVlan) {
    if (f.size() < 18) return 0;
    return static_cast<std::uint8_t>(f[14] >> 5);
  }
  at += 2;
  if (type == wire::kEtherTypeIpv4 && f.size() > at + 1) return static_cast<std::uint8_t>(f[at + 1] >> 5);
  // IPv6: version (4 bits), then the traffic class across the next byte boundary.
  if (type == wire::kEtherTypeIpv6 && f.size() > at + 1) return static_cast<std::uint8_t>((f[at] & 0x0f) >> 1);
  return 0;
}

// Time a frame of `bytes` takes on a link of `gbps`, preamble, IFG and FCS
// included.
std::uint64_t wire_ns(std::size_t bytes, double gbps) {
  return static_cast<std::uint64_t>(static_cast<double>(bytes + 24) * 8 / gbps);
}

}  // namespace

std::uint64_t pfc_headroom_bytes(const PfcConfig& pfc, double gbps, std::uint64_t delay_ns) {
  const std::uint64_t link_ns = 2 * delay_ns + wire_ns(wire::kMacControlFrameBytes, gbps);
  return static_cast<std::uint64_t>(static_cast<double>(link_ns) * gbps / 8) + 2 * std::uint64_t{pfc.max_frame_bytes};
}

class SimSwitch::Port : public engine::PacketIo {
 public:
  Port(SimSwitch& sw, int index, const std::uint8_t mac[6], const ibv_gid& gid, const EgressConfig& egress)
      : sw_(sw), index_(index), gid_(gid), egress_(egress) {
    std::memcpy(mac_, mac, 6);
    headroom_ = sw.pfc_.headroom_bytes != 0 ? sw.pfc_.headroom_bytes
                                            : pfc_headroom_bytes(sw.pfc_, egress.gbps, egress.delay_ns);
  }

  std::uint16_t rx_burst(engine::RxFrame* frames, std::uint16_t max) override {
    const std::uint64_t now = sw_.clock_.now_ns();
    sw_.advance(now);
    std::uint16_t n = 0;
    while (n < max && !arriving_.empty() && arriving_.front().at <= now) {
      in_use_.push_back(std::move(arriving_.front().frame));
      const std::uint64_t departed = arriving_.front().at - egress_.delay_ns;
      arriving_.pop_front();
      std::vector<std::uint8_t>& f = in_use_.back();
      if (egress_.mark_on_dequeue) red(f, backlog(departed), sw_.rng_);
      frames[n++] = engine::RxFrame{f.data(), static_cast<std::uint16_t>(f.size()), nullptr};
      ++stats_.delivered;
      stats_.bytes_delivered += f.size();
    }
    return n;
  }
  void rx_release(engine::RxFrame*, std::uint16_t) override { in_use_.clear(); }

  // The host's NIC takes the frames into its queue, as many as it has room
  // for (the engine keeps the rest and offers them again); they go onto the link one after another at its rate, each
  // priority stopping while the switch has it paused.
  std::uint16_t tx_burst(const wire::TxFrame* frames, std::uint16_t n) override {
    const std::uint64_t now = sw_.clock_.now_ns();
    sw_.advance(now);
    std::uint16_t taken = 0;
    for (; taken < n && nic_frames_ < egress_.nic_frames; ++taken) {
      std::vector<std::uint8_t> bytes(frames[taken].frame_bytes());
      frames[taken].copy_to(bytes.data());
      const std::uint8_t prio = frame_priority(bytes);
      nic_[prio].push_back(Queued{nic_seq_++, std::move(bytes)});
      ++nic_frames_;
    }
    if (taken > 0) wake_nic(std::max(now, uplink_free_));
    return taken;
  }

  // The switch's ports are all there is: known at once, or never.
  Resolution resolve(const ibv_gid& gid, std::uint8_t mac[6], bool) override {
    for (const auto& p : sw_.ports_) {
      if (std::memcmp(p->gid_.raw, gid.raw, 16) == 0) {
        std::memcpy(mac, p->mac_, 6);
        return Resolution::kKnown;
      }
    }
    return Resolution::kUnreachable;
  }

  // Egress: the backlog is what the port has yet to serialize (FIFO, so the
  // time it is busy for, at its rate).
  std::uint64_t backlog(std::uint64_t now) const {
    if (busy_until_ <= now) return 0;
    return static_cast<std::uint64_t>(static_cast<double>(busy_until_ - now) * egress_.gbps / 8);
  }

  // `frame` (from ingress `from`, of priority `prio`) joins this egress at
  // `now`; false if it is tail-dropped. Its departure (the end of its
  // serialization) is returned in `departs`.
  bool enqueue(std::vector<std::uint8_t>& frame, bool lossless, std::uint64_t now, std::uint64_t& departs) {
    const std::uint64_t q = backlog(now);
    // Lossless frames are bounded at their ingress, not here.
    if (!lossless && q + frame.size() > egress_.buffer_bytes) {
      ++stats_.dropped;
      return false;
    }
    ++stats_.enqueued;
    if (!egress_.mark_on_dequeue) red(frame, q, sw_.rng_);
    busy_until_ = std::max(busy_until_, now) + wire_ns(frame.size(), egress_.gbps);
    stats_.max_queue_bytes = std::max(stats_.max_queue_bytes, backlog(now));
    departs = busy_until_;
    arriving_.push_back(Arrival{busy_until_ + egress_.delay_ns, std::move(frame)});
    return true;
  }

  std::uint64_t next_arrival() const { return arriving_.empty() ? 0 : arriving_.front().at; }

  // RED marking on backlog `q`.
  void red(std::vector<std::uint8_t>& frame, std::uint64_t q, std::mt19937_64& rng) {
    double p = 0;
    if (q >= egress_.kmax_bytes) {
      p = 1;
    } else if (q > egress_.kmin_bytes) {
      p = egress_.pmax * static_cast<double>(q - egress_.kmin_bytes) /
          static_cast<double>(egress_.kmax_bytes - egress_.kmin_bytes);
    }
    if (p > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < p && mark_ce(frame)) ++stats_.marked;
  }

  // --- the host's NIC ---

  // The NIC may send at `at`: one wake-up pending at a time, the earliest.
  void wake_nic(std::uint64_t at) {
    if (nic_wake_ != 0 && nic_wake_ <= at) return;
    nic_wake_ = at;
    sw_.schedule(Event{at, 0, EventKind::kNicFree, index_});
  }

  // At `now` the wire is free: sends the oldest frame of a priority not
  // paused, or sleeps until a pause runs out (a PFC frame resuming one
  // wakes it earlier).
  void nic_free(std::uint64_t now) {
    if (now != nic_wake_) return;  // an earlier wake-up took this one's place
    nic_wake_ = 0;
    if (nic_frames_ == 0) return;
    int pick = -1;
    std::uint64_t resume = 0;
    for (int c = 0; c < wire::kPriorities; ++c) {
      if (nic_[c].empty()) continue;
      if (pause_[c].until > now) {
        resume = resume == 0 ? pause_[c].until : std::min(resume, pause_[c].until);
      } else if (pick < 0 || nic_[c].front().seq < nic_[pick].front().seq) {
        pick = c;
      }
    }
    if (pick < 0) {
      wake_nic(resume);
      return;
    }
    std::vector<std::uint8_t> bytes = std::move(nic_[pick].front().frame);
    nic_[pick].pop_front();
    --nic_frames_;
    uplink_free_ = now + wire_ns(bytes.size(), egress_.gbps);
    sw_.schedule(Event{uplink_free_ + egress_.delay_ns, 0, EventKind::kArrive, index_, 0, 0, {}, std::move(bytes)});
    if (nic_frames_ > 0) wake_nic(uplink_free_);
  }

  // A PFC frame reaches the NIC at `now`: each priority it enables is
  // paused for its time from now (0: resumed).
  void take_pfc(const wire::PauseRequest& req, std::uint64_t now) {
    ++pfc_.received;
    for (int c = 0; c < wire::kPriorities; ++c) {
      if ((req.enabled >> c & 1) == 0) continue;
      Pause& p = pause_[c];
      if (p.until > now) p.total += now - p.since;  // paused until now, goes on anew
      else if (p.until > p.since) p.total += p.until - p.since;
      p.since = now;
      p.until = now + wire::pause_quanta_ns(req.quanta[c], egress_.gbps);
    }
    if (nic_frames_ > 0) wake_nic(std::max(now, uplink_free_));
  }

  std::uint64_t paused_ns(std::uint64_t now) const {
    std::uint64_t total = 0;
    for (const Pause& p : pause_) {
      total += p.total;
      const std::uint64_t end = std::min(now, p.until);
      if (end > p.since) total += end - p.since;
    }
    return total;
  }

  SimSwitch& sw_;
  int index_;
  std::uint8_t mac_[6];
  ibv_gid gid_;
  EgressConfig egress_;
  EgressStats stats_;
  PfcStats pfc_;
  std::uint64_t headroom_ = 0;
  std::uint64_t busy_until_ = 0;
  struct Arrival {
    std::uint64_t at;
    std::vector<std::uint8_t> frame;
  };
  std::deque<Arrival> arriving_;  // in departure order: FIFO and one delay
  std::vector<std::vector<std::uint8_t>> in_use_;

  // Ingress (frames from this port's host, by priority): bytes in the
  // switch, whether an XOFF holds, and which XOFF episode it is.
  std::array<std::uint64_t, wire::kPriorities> ingress_bytes_{};
  std::array<bool, wire::kPriorities> xoff_{};
  std::array<std::uint32_t, wire::kPriorities> xoff_episode_{};

  // The host's NIC: a queue per priority, sent oldest first among those
  // not paused.
  struct Queued {
    std::uint64_t seq;
    std::vector<std::uint8_t> frame;
  };
  std::array<std::deque<Queued>, wire::kPriorities> nic_;
  std::size_t nic_frames_ = 0;
  std::uint64_t nic_seq_ = 0;
  std::uint64_t uplink_free_ = 0;
  std::uint64_t nic_wake_ = 0;  // the pending kNicFree, 0 if none
  struct Pause {
    std::uint64_t since = 0, until = 0;  // the current (or last) pause
    std::uint64_t total = 0;             // ns paused before `since`
  };
  std::array<Pause, wire::kPriorities> pause_{};
};

SimSwitch::SimSwitch(VirtualClock& clock, std::uint64_t seed) : clock_(clock), rng_(seed) {}
SimSwitch::~SimSwitch() = default;

engine::PacketIo& SimSwitch::add_port(const std::uint8_t mac[6], const ibv_gid& gid, const EgressConfig& egress) {
  ports_.push_back(std::make_unique<Port>(*this, static_cast<int>(ports_.size()), mac, gid, egress));
  return *ports_.back();
}

void SimSwitch::schedule(Event e) {
  e.seq = event_seq_++;
  events_.push_back(std::move(e));
  std::push_heap(events_.begin(), events_.end(), std::greater<>());
}

void SimSwitch::advance(std::uint64_t now) {
  // In time order (ties: the order they were scheduled), so each egress
  // and each ingress count sees what happened as it happened even when the
  // clock jumped past several events.
  while (!events_.empty() && events_.front().at <= now) {
    std::pop_heap(events_.begin(), events_.end(), std::greater<>());
    Event e = std::move(events_.back());
    events_.pop_back();
    run(e);
  }
}

void SimSwitch::run(Event& e) {
  Port& p = *ports_[static_cast<std::size_t>(e.port)];
  switch (e.kind) {
    case EventKind::kArrive:
      arrive(e.port, std::move(e.frame), e.at);
      break;
    case EventKind::kDepart:
      p.ingress_bytes_[e.prio] -= e.bytes;
      if (p.xoff_[e.prio] && p.ingress_bytes_[e.prio] <= pfc_.xon_bytes) {
        p.xoff_[e.prio] = false;
        send_pfc(e.port, e.prio, 0, e.at);
      }
      break;
    case EventKind::kNicFree:
      p.nic_free(e.at);
      break;
    case EventKind::kPfcAt:
      p.take_pfc(e.pause, e.at);
      break;
    case EventKind::kRefresh:
      // The XOFF still holds (the same episode): pause again before the
      // last one runs out.
      if (p.xoff_[e.prio] && p.xoff_episode_[e.prio] == e.bytes) send_pfc(e.port, e.prio, pfc_.quanta, e.at);
      break;
  }
}

void SimSwitch::send_pfc(int port, std::uint8_t prio, std::uint16_t quanta, std::uint64_t at) {
  Port& p = *ports_[static_cast<std::size_t>(port)];
  wire::PauseRequest req;
  req.enabled = static_cast<std::uint8_t>(1u << prio);
  req.quanta[prio] = quanta;
  if (quanta != 0) {
    ++p.pfc_.xoff_sent;
    const std::uint64_t half = std::max<std::uint64_t>(1, wire::pause_quanta_ns(quanta, p.egress_.gbps) / 2);
    schedule(Event{at + half, 0, EventKind::kRefresh, port, prio, p.xoff_episode_[prio]});
  } else {
    ++p.pfc_.xon_sent;
  }
  if (pfc_observer_) pfc_observer_(at, port, req);
  // MAC Control frames go out ahead of the egress queue (the frame being
  // sent is not waited for: the headroom counts a whole frame for it).
  const std::uint64_t reaches = at + wire_ns(wire::kMacControlFrameBytes, p.egress_.gbps) + p.egress_.delay_ns;
  Event e{reaches, 0, EventKind::kPfcAt, port};
  e.pause = req;
  schedule(std::move(e));
}

void SimSwitch::forward(int from, std::vector<std::uint8_t> frame) {
  const std::uint64_t now = clock_.now_ns();
  advance(now);
  arrive(from, std::move(frame), now);
}

void SimSwitch::arrive(int from, std::vector<std::uint8_t> frame, std::uint64_t at) {
  if (frame.size() < 14) return;
  Port* out = nullptr;
  for (auto& p : ports_) {
    if (std::memcmp(p->mac_, frame.data(), 6) == 0) out = p.get();
  }
  // No such host: dropped, as a switch drops unknown unicast here.
  if (out == nullptr) return;
  const std::uint8_t prio = frame_priority(frame);
  Port* in = from >= 0 && static_cast<std::size_t>(from) < ports_.size() ? ports_[static_cast<std::size_t>(from)].get()
                                                                          : nullptr;
  const bool lossless = pfc_.enabled && in != nullptr && (pfc_.lossless >> prio & 1) != 0;
  const auto bytes = static_cast<std::uint32_t>(frame.size());
  if (lossless && in->ingress_bytes_[prio] + bytes > pfc_.xoff_bytes + in->headroom_) {
    // The headroom did not hold what came after the pause went out.
    ++in->pfc_.headroom_drops;
    ++out->stats_.dropped;
    return;
  }
  std::uint64_t departs = 0;
  if (!out->enqueue(frame, lossless, at, departs) || !lossless) return;
  std::uint64_t& count = in->ingress_bytes_[prio];
  count += bytes;
  in->pfc_.max_ingress_bytes = std::max(in->pfc_.max_ingress_bytes, count);
  schedule(Event{departs, 0, EventKind::kDepart, from, prio, bytes});
  if (count > pfc_.xoff_bytes && !in->xoff_[prio]) {
    in->xoff_[prio] = true;
    ++in->xoff_episode_[prio];
    send_pfc(from, prio, pfc_.quanta, at);
  }
}

std::uint64_t SimSwitch::queue_bytes(int port) {
  advance(clock_.now_ns());
  return ports_[static_cast<std::size_t>(port)]->backlog(clock_.now_ns());
}
const EgressStats& SimSwitch::stats(int port) const { return ports_[static_cast<std::size_t>(port)]->stats_; }
const PfcStats& SimSwitch::pfc_stats(int port) const { return ports_[static_cast<std::size_t>(port)]->pfc_; }
std::uint64_t SimSwitch::pfc_headroom(int port) const { return ports_[static_cast<std::size_t>(port)]->headroom_; }
std::uint64_t SimSwitch::paused_ns(int port) {
  advance(clock_.now_ns());
  return ports_[static_cast<std::size_t>(port)]->paused_ns(clock_.now_ns());
}
std::size_t SimSwitch::nic_frames(int port) const { return ports_[static_cast<std::size_t>(port)]->nic_frames_; }

std::uint64_t SimSwitch::next_delivery_ns() {
  advance(clock_.now_ns());
  std::uint64_t t = events_.empty() ? 0 : events_.front().at;
  for (const auto& p : ports_) {
    const std::uint64_t a = p->next_arrival();
    if (a != 0 && (t == 0 || a < t)) t = a;
  }
  return t;
}

}  // namespace uroce::sim
