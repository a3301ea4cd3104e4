#include "sim/sim_switch.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace uroce::sim {

class SimSwitch::Port : public engine::PacketIo {
 public:
  Port(SimSwitch& sw, int index, const std::uint8_t mac[6], const ibv_gid& gid, const EgressConfig& egress)
      : sw_(sw), index_(index), gid_(gid), egress_(egress) {
    std::memcpy(mac_, mac, 6);
  }

  std::uint16_t rx_burst(engine::RxFrame* frames, std::uint16_t max) override {
    const std::uint64_t now = sw_.clock_.now_ns();
    sw_.arrive_until(now);
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

  // The host's NIC: frames leave one after another at the link's rate
  // (the link is symmetric) and reach the switch one delay later, whole.
  std::uint16_t tx_burst(const wire::TxFrame* frames, std::uint16_t n) override {
    const std::uint64_t now = sw_.clock_.now_ns();
    for (std::uint16_t i = 0; i < n; ++i) {
      std::vector<std::uint8_t> bytes(frames[i].frame_bytes());
      frames[i].copy_to(bytes.data());
      uplink_busy_until_ = std::max(uplink_busy_until_, now) + wire_ns(bytes.size());
      sw_.in_flight_.push_back(InFlight{uplink_busy_until_ + egress_.delay_ns, sw_.in_flight_seq_++, index_, std::move(bytes)});
      std::push_heap(sw_.in_flight_.begin(), sw_.in_flight_.end(), std::greater<>());
    }
    return n;
  }

  bool resolve(const ibv_gid& gid, std::uint8_t mac[6]) override {
    for (const auto& p : sw_.ports_) {
      if (std::memcmp(p->gid_.raw, gid.raw, 16) == 0) {
        std::memcpy(mac, p->mac_, 6);
        return true;
      }
    }
    return false;
  }

  // Egress: the backlog is what the port has yet to serialize (FIFO, so the
  // time it is busy for, at its rate).
  std::uint64_t backlog(std::uint64_t now) const {
    if (busy_until_ <= now) return 0;
    return static_cast<std::uint64_t>(static_cast<double>(busy_until_ - now) * egress_.gbps / 8);
  }

  std::uint64_t wire_ns(std::size_t frame_bytes) const {
    // Preamble, IFG and FCS on the wire too.
    return static_cast<std::uint64_t>(static_cast<double>(frame_bytes + 24) * 8 / egress_.gbps);
  }

  // `frame` reaches the switch for this port at `now`.
  void enqueue(std::vector<std::uint8_t> frame, std::uint64_t now, std::mt19937_64& rng) {
    const std::uint64_t q = backlog(now);
    if (q + frame.size() > egress_.buffer_bytes) {
      ++stats_.dropped;
      return;
    }
    ++stats_.enqueued;
    if (!egress_.mark_on_dequeue) red(frame, q, rng);
    busy_until_ = std::max(busy_until_, now) + wire_ns(frame.size());
    stats_.max_queue_bytes = std::max(stats_.max_queue_bytes, backlog(now));
    arriving_.push_back(Arrival{busy_until_ + egress_.delay_ns, std::move(frame)});
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

  SimSwitch& sw_;
  int index_;
  std::uint8_t mac_[6];
  ibv_gid gid_;
  EgressConfig egress_;
  EgressStats stats_;
  std::uint64_t busy_until_ = 0;
  std::uint64_t uplink_busy_until_ = 0;  // the host's side of the link
  struct Arrival {
    std::uint64_t at;
    std::vector<std::uint8_t> frame;
  };
  std::deque<Arrival> arriving_;  // in departure order: FIFO and one delay
  std::vector<std::vector<std::uint8_t>> in_use_;
};

SimSwitch::SimSwitch(VirtualClock& clock, std::uint64_t seed) : clock_(clock), rng_(seed) {}
SimSwitch::~SimSwitch() = default;

engine::PacketIo& SimSwitch::add_port(const std::uint8_t mac[6], const ibv_gid& gid, const EgressConfig& egress) {
  ports_.push_back(std::make_unique<Port>(*this, static_cast<int>(ports_.size()), mac, gid, egress));
  return *ports_.back();
}

void SimSwitch::forward(int from, std::vector<std::uint8_t> frame) { forward_at(from, std::move(frame), clock_.now_ns()); }

void SimSwitch::forward_at(int from, std::vector<std::uint8_t> frame, std::uint64_t at) {
  (void)from;
  if (frame.size() < 14) return;
  for (auto& p : ports_) {
    if (std::memcmp(p->mac_, frame.data(), 6) == 0) {
      p->enqueue(std::move(frame), at, rng_);
      return;
    }
  }
  // No such host: dropped, as a switch drops unknown unicast here.
}

void SimSwitch::arrive_until(std::uint64_t now) {
  // In the order they reach the switch (ties: the order they were sent), so
  // each egress sees its arrivals as they happened even when the clock
  // jumped past several.
  while (!in_flight_.empty() && in_flight_.front().at <= now) {
    std::pop_heap(in_flight_.begin(), in_flight_.end(), std::greater<>());
    InFlight f = std::move(in_flight_.back());
    in_flight_.pop_back();
    forward_at(f.from, std::move(f.frame), f.at);
  }
}

std::uint64_t SimSwitch::queue_bytes(int port) {
  arrive_until(clock_.now_ns());
  return ports_[static_cast<std::size_t>(port)]->backlog(clock_.now_ns());
}
const EgressStats& SimSwitch::stats(int port) const { return ports_[static_cast<std::size_t>(port)]->stats_; }

std::uint64_t SimSwitch::next_delivery_ns() {
  arrive_until(clock_.now_ns());
  std::uint64_t t = in_flight_.empty() ? 0 : in_flight_.front().at;
  for (const auto& p : ports_) {
    const std::uint64_t a = p->next_arrival();
    if (a != 0 && (t == 0 || a < t)) t = a;
  }
  return t;
}

}  // namespace uroce::sim
