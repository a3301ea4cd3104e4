#include "sim/sim_link.h"

#include <cstring>

#include "wire/frame.h"

namespace uroce::sim {

class SimLink::Port : public engine::PacketIo {
 public:
  Port(SimLink& link, int side, const std::uint8_t own[6], const std::uint8_t peer[6]) : link_(link), side_(side) {
    std::memcpy(own_, own, 6);
    std::memcpy(peer_, peer, 6);
  }

  std::uint16_t rx_burst(engine::RxFrame* frames, std::uint16_t max) override {
    Queue& q = link_.queue_[side_];
    const std::uint64_t now = link_.clock_.now_ns();
    std::uint16_t n = 0;
    while (n < max && !q.empty() && q.top().at <= now) {
      std::vector<std::uint8_t>* f = q.top().frame;
      q.pop();
      frames[n++] = engine::RxFrame{f->data(), static_cast<std::uint16_t>(f->size()), f};
      ++link_.stats_[1 - side_].delivered;
    }
    return n;
  }

  void rx_release(engine::RxFrame* frames, std::uint16_t n) override {
    for (std::uint16_t i = 0; i < n; ++i) link_.free_.push_back(static_cast<std::vector<std::uint8_t>*>(frames[i].cookie));
  }

  std::uint16_t tx_burst(const wire::TxFrame* frames, std::uint16_t n) override {
    for (std::uint16_t i = 0; i < n; ++i) link_.send(side_, frames[i]);
    return n;
  }

  Resolution resolve(const ibv_gid&, std::uint8_t mac[6], bool) override {
    std::memcpy(mac, peer_, 6);  // a point-to-point link: everything is the other side
    return Resolution::kKnown;
  }

 private:
  SimLink& link_;
  int side_;
  std::uint8_t own_[6];
  std::uint8_t peer_[6];
};

SimLink::SimLink(VirtualClock& clock, std::uint64_t seed, const std::uint8_t mac0[6], const std::uint8_t mac1[6],
                 Impairments to1, Impairments to0)
    : clock_(clock), rng_(seed) {
  ports_[0] = std::make_unique<Port>(*this, 0, mac0, mac1);
  ports_[1] = std::make_unique<Port>(*this, 1, mac1, mac0);
  imp_[0] = to1;
  imp_[1] = to0;
}

SimLink::~SimLink() = default;

engine::PacketIo& SimLink::port(int side) { return *ports_[side]; }

void SimLink::set_impairments(int from_side, const Impairments& imp) { imp_[from_side] = imp; }

bool SimLink::tap(const std::string& path, std::string& error) {
  tap_ = pcap::Writer::create(path, error);
  return tap_ != nullptr;
}

std::uint64_t SimLink::next_delivery_ns() const {
  std::uint64_t t = 0;
  for (const Queue& q : queue_) {
    if (!q.empty() && (t == 0 || q.top().at < t)) t = q.top().at;
  }
  return t;
}

const DirectionStats& SimLink::stats(int from_side) const { return stats_[from_side]; }

std::vector<std::uint8_t>* SimLink::take_buffer() {
  if (free_.empty()) {
    buffers_.push_back(std::make_unique<std::vector<std::uint8_t>>());
    buffers_.back()->reserve(9216);
    return buffers_.back().get();
  }
  std::vector<std::uint8_t>* b = free_.back();
  free_.pop_back();
  return b;
}

void SimLink::send(int from, const wire::TxFrame& f) {
  std::vector<std::uint8_t>* buf = take_buffer();
  buf->resize(f.frame_bytes());
  f.copy_to(buf->data());

  const std::uint64_t now = clock_.now_ns();
  DirectionStats& st = stats_[from];
  const Impairments& imp = imp_[from];
  ++st.sent;
  st.bytes += buf->size();
  if (tap_) tap_->write(*buf, static_cast<std::int64_t>(now));
  if (observer_) observer_(from, *buf);

  // Serialization: frames leave one after another at the link's rate.
  std::uint64_t leave = std::max(now, link_free_[from]);
  if (imp.gbps > 0) {
    leave += static_cast<std::uint64_t>(static_cast<double>(buf->size() + 24) * 8.0 / imp.gbps);  // + preamble, IFG, FCS
    link_free_[from] = leave;
  }
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (u(rng_) < imp.loss) {
    ++st.lost;
    free_.push_back(buf);
    return;
  }
  // Drawn only when asked for, so runs without marking keep their sequences.
  if (imp.ce_mark > 0 && u(rng_) < imp.ce_mark && mark_ce(*buf)) ++st.ce_marked;
  if (u(rng_) < imp.corrupt) {
    ++st.corrupted;
    (*buf)[rng_() % buf->size()] ^= static_cast<std::uint8_t>(1 + rng_() % 255);
  }
  std::uint64_t at = leave + imp.delay_ns;
  if (u(rng_) < imp.reorder) {
    ++st.reordered;
    at += imp.reorder_ns;
  }
  queue_[1 - from].push(InFlight{at, seq_++, buf});
  if (u(rng_) < imp.duplicate) {
    ++st.duplicated;
    std::vector<std::uint8_t>* copy = take_buffer();
    *copy = *buf;
    queue_[1 - from].push(InFlight{at + 1000, seq_++, copy});
  }
}

bool mark_ce(std::vector<std::uint8_t>& frame) {
  wire::ParsedFrame p;
  const wire::ParseStatus s = wire::parse_frame(frame, p, wire::ParseOptions{false});
  if (s != wire::ParseStatus::kOk || p.ecn() == 0) return false;  // not RoCE, or not ECN-capable
  std::uint8_t* ip = frame.data() + p.l3_offset;
  if (p.ip_version == 4) {
    ip[1] |= 3;
    wire::ipv4_refresh_checksum(ip);
  } else {
    ip[1] |= 0x30;  // the low two bits of the traffic class
  }
  return true;
}

}  // namespace uroce::sim
