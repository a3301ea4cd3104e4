#include "sim/leaf_spine.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "uroce/port.h"
#include "wire/headers.h"

namespace uroce::sim {
namespace {

// Time a frame of `bytes` takes on a link of `gbps`, preamble, IFG and FCS
// included.
std::uint64_t wire_ns(std::size_t bytes, double gbps) {
  return static_cast<std::uint64_t>(static_cast<double>(bytes + 24) * 8 / gbps);
}

// splitmix64's finalizer: every input bit reaches every output bit.
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

bool parse_five_tuple(std::span<const std::uint8_t> f, FiveTuple& t) {
  std::size_t at = 12;
  if (f.size() < at + 2) return false;
  auto type = static_cast<std::uint16_t>(f[at] << 8 | f[at + 1]);
  if (type == wire::kEtherTypeVlan) {
    at += 4;
    if (f.size() < at + 2) return false;
    type = static_cast<std::uint16_t>(f[at] << 8 | f[at + 1]);
  }
  at += 2;
  auto be32 = [&](std::size_t i) {
    return static_cast<std::uint32_t>(f[i]) << 24 | static_cast<std::uint32_t>(f[i + 1]) << 16 |
           static_cast<std::uint32_t>(f[i + 2]) << 8 | f[i + 3];
  };
  t.src_port = t.dst_port = 0;
  if (type == wire::kEtherTypeIpv6) {
    // The addresses folded to 32 bits each (what a hash of them keeps);
    // UDP only directly after the fixed header.
    if (f.size() < at + 40) return false;
    t.protocol = f[at + 6];
    t.src_ip = be32(at + 8) ^ be32(at + 12) ^ be32(at + 16) ^ be32(at + 20);
    t.dst_ip = be32(at + 24) ^ be32(at + 28) ^ be32(at + 32) ^ be32(at + 36);
    if (t.protocol == 17 && f.size() >= at + 44) {
      t.src_port = static_cast<std::uint16_t>(f[at + 40] << 8 | f[at + 41]);
      t.dst_port = static_cast<std::uint16_t>(f[at + 42] << 8 | f[at + 43]);
    }
    return true;
  }
  if (type != wire::kEtherTypeIpv4 || f.size() < at + 20) return false;
  const std::size_t ihl = (f[at] & 0x0fu) * 4u;
  t.protocol = f[at + 9];
  t.src_ip = be32(at + 12);
  t.dst_ip = be32(at + 16);
  if (t.protocol == 17 && ihl >= 20 && f.size() >= at + ihl + 4) {
    t.src_port = static_cast<std::uint16_t>(f[at + ihl] << 8 | f[at + ihl + 1]);
    t.dst_port = static_cast<std::uint16_t>(f[at + ihl + 2] << 8 | f[at + ihl + 3]);
  }
  return true;
}

int ecmp_pick(const FiveTuple& t, std::uint64_t salt, int paths) {
  std::uint64_t h = mix(salt);
  h = mix(h ^ (std::uint64_t{t.src_ip} << 32 | t.dst_ip));
  h = mix(h ^ (std::uint64_t{t.src_port} << 24 | std::uint64_t{t.dst_port} << 8 | t.protocol));
  return static_cast<int>(h % static_cast<std::uint64_t>(paths));
}

// One direction of a link: an egress queue at its sending end.
struct LeafSpine::Queue {
  int to = 0;  // the node at the far end
  double gbps = 10;
  double loss = 0;
  std::uint64_t down_at = 0;  // 0: never
  std::uint64_t withdrawn_at = 0;  // out of the ECMP choice from then; 0: never
  bool routed(std::uint64_t now) const { return withdrawn_at == 0 || now < withdrawn_at; }
  std::uint64_t busy_until = 0;
  std::deque<std::uint64_t> departures;  // of frames still queued, in order
  std::mt19937_64 rng;
  LinkStats stats;

  std::uint64_t backlog(std::uint64_t now) const {
    if (busy_until <= now) return 0;
    return static_cast<std::uint64_t>(static_cast<double>(busy_until - now) * gbps / 8);
  }
  std::size_t frames(std::uint64_t now) {
    while (!departures.empty() && departures.front() <= now) departures.pop_front();
    return departures.size();
  }
};

class LeafSpine::HostPort : public engine::PacketIo {
 public:
  HostPort(LeafSpine& fabric, int host) : fabric_(fabric), host_(host) {}

  std::uint16_t rx_burst(engine::RxFrame* frames, std::uint16_t max) override {
    fabric_.advance(fabric_.clock_.now_ns());
    std::uint16_t n = 0;
    while (n < max && !arrived_.empty()) {
      in_use_.push_back(std::move(arrived_.front()));
      arrived_.pop_front();
      std::vector<std::uint8_t>& f = in_use_.back();
      frames[n++] = engine::RxFrame{f.data(), static_cast<std::uint16_t>(f.size()), nullptr};
    }
    return n;
  }
  void rx_release(engine::RxFrame*, std::uint16_t) override { in_use_.clear(); }

  // The host's NIC holds EgressConfig::nic_frames frames on their way out
  // and refuses more (the engine offers them again), as SimSwitch's.
  std::uint16_t tx_burst(const wire::TxFrame* frames, std::uint16_t n) override {
    const std::uint64_t now = fabric_.clock_.now_ns();
    fabric_.advance(now);
    Queue& q = *fabric_.queues_[static_cast<std::size_t>(2 * host_)];
    std::uint16_t taken = 0;
    for (; taken < n && q.frames(now) < fabric_.config_.egress.nic_frames; ++taken) {
      std::vector<std::uint8_t> bytes(frames[taken].frame_bytes());
      frames[taken].copy_to(bytes.data());
      fabric_.send(q, std::move(bytes), now);
    }
    // Wake the host when its NIC has room again.
    if (taken < n && !q.departures.empty()) fabric_.schedule(q.departures.front(), -1, {});
    return taken;
  }

  Resolution resolve(const ibv_gid& gid, std::uint8_t mac[6], bool) override {
    for (int h = 0; h < fabric_.hosts(); ++h) {
      ibv_gid g;
      std::uint8_t m[6];
      fabric_.host_address(h, m, g);
      if (std::memcmp(g.raw, gid.raw, 16) == 0) {
        std::memcpy(mac, m, 6);
        return Resolution::kKnown;
      }
    }
    return Resolution::kUnreachable;
  }

  void arrive(std::vector<std::uint8_t> frame) { arrived_.push_back(std::move(frame)); }

 private:
  LeafSpine& fabric_;
  int host_;
  std::deque<std::vector<std::uint8_t>> arrived_;
  std::vector<std::vector<std::uint8_t>> in_use_;
};

std::string LeafSpineConfig::check() const {
  // A host's MAC and GID hold its leaf and its number on the leaf in a byte each.
  if (leaves < 1 || leaves > 254) return "leaf-spine: 1 to 254 leaves, not " + std::to_string(leaves);
  if (hosts_per_leaf < 1 || hosts_per_leaf > 254) {
    return "leaf-spine: 1 to 254 hosts per leaf, not " + std::to_string(hosts_per_leaf);
  }
  if (spines < 0 || spines > 256) return "leaf-spine: 0 to 256 spines, not " + std::to_string(spines);
  if (!(egress.gbps > 0)) return "leaf-spine: links need a rate above 0";
  if (!(loss >= 0 && loss < 1)) return "leaf-spine: loss is a probability below 1";
  return {};
}

LeafSpine::LeafSpine(VirtualClock& clock, std::uint64_t seed, const LeafSpineConfig& config)
    : clock_(clock), config_(config), seed_(seed) {
  if (!config_.check().empty()) config_ = LeafSpineConfig{0, 1, 1, config.egress, 0};
  if (!(config_.egress.gbps > 0)) config_.egress.gbps = 10;
  const int h = hosts();
  auto add = [&](int to) {
    auto q = std::make_unique<Queue>();
    q->to = to;
    q->gbps = config.egress.gbps;
    q->loss = config.loss;
    q->rng.seed(mix(seed ^ mix(queues_.size() + 1)));  // each queue its own stream
    queues_.push_back(std::move(q));
  };
  for (int i = 0; i < h; ++i) {
    add(h + leaf_of(i));  // host to its leaf
    add(i);               // leaf to host
    ports_.push_back(std::make_unique<HostPort>(*this, i));
  }
  for (int l = 0; l < config.leaves; ++l) {
    for (int s = 0; s < config.spines; ++s) {
      add(h + config.leaves + s);  // up
      add(h + l);                  // down
    }
  }
}

LeafSpine::~LeafSpine() = default;

void LeafSpine::host_address(int host, std::uint8_t mac[6], ibv_gid& gid) const {
  const auto leaf = static_cast<std::uint8_t>(leaf_of(host) + 1);
  const auto n = static_cast<std::uint8_t>(host % config_.hosts_per_leaf + 1);
  const std::uint8_t m[6] = {0x02, 0, 0, 0, leaf, n};
  std::memcpy(mac, m, 6);
  gid = ipv4_gid({10, 99, leaf, n});
}

engine::PacketIo& LeafSpine::port(int host) { return *ports_.at(static_cast<std::size_t>(host)); }

LeafSpine::Queue& LeafSpine::spine_link(int leaf, int spine, bool up) const {
  const auto i = static_cast<std::size_t>(2 * hosts() + 2 * (leaf * config_.spines + spine) + (up ? 0 : 1));
  return *queues_[i];
}

bool LeafSpine::fail_link(int leaf, int spine, std::uint64_t at_ns, std::uint64_t reroute_ns) {
  if (!has_link(leaf, spine)) return false;
  for (bool up : {true, false}) {
    Queue& q = spine_link(leaf, spine, up);
    q.down_at = at_ns;
    q.withdrawn_at = reroute_ns == 0 ? 0 : at_ns + reroute_ns;
  }
  return true;
}
bool LeafSpine::set_link_gbps(int leaf, int spine, double gbps) {
  if (!has_link(leaf, spine) || !(gbps > 0)) return false;
  spine_link(leaf, spine, true).gbps = gbps;
  spine_link(leaf, spine, false).gbps = gbps;
  return true;
}
bool LeafSpine::set_link_loss(int leaf, int spine, double loss) {
  if (!has_link(leaf, spine)) return false;
  spine_link(leaf, spine, true).loss = loss;
  spine_link(leaf, spine, false).loss = loss;
  return true;
}

void LeafSpine::set_host_rx_loss(int host, double loss) {
  queues_.at(static_cast<std::size_t>(2 * host + 1))->loss = loss;
}

const LinkStats& LeafSpine::uplink(int leaf, int spine) const { return spine_link(leaf, spine, true).stats; }
const LinkStats& LeafSpine::downlink(int spine, int leaf) const { return spine_link(leaf, spine, false).stats; }
const LinkStats& LeafSpine::host_tx(int host) const { return queues_.at(static_cast<std::size_t>(2 * host))->stats; }
const LinkStats& LeafSpine::host_rx(int host) const { return queues_.at(static_cast<std::size_t>(2 * host + 1))->stats; }

std::uint64_t LeafSpine::failed_drops() const {
  std::uint64_t n = 0;
  for (const auto& q : queues_) n += q->stats.failed_dropped;
  return n;
}

std::uint64_t LeafSpine::tail_drops() const {
  std::uint64_t n = 0;
  for (const auto& q : queues_) n += q->stats.tail_dropped;
  return n;
}

std::uint64_t LeafSpine::marks() const {
  std::uint64_t n = 0;
  for (const auto& q : queues_) n += q->stats.marked;
  return n;
}

void LeafSpine::schedule(std::uint64_t at, int node, std::vector<std::uint8_t> frame) {
  events_.push_back(Event{at, event_seq_++, node, std::move(frame)});
  std::push_heap(events_.begin(), events_.end(), std::greater<>());
}

void LeafSpine::advance(std::uint64_t now) {
  // In time order (ties: the order they were scheduled), so every queue
  // sees what happened as it happened even when the clock jumped.
  while (!events_.empty() && events_.front().at <= now) {
    std::pop_heap(events_.begin(), events_.end(), std::greater<>());
    Event e = std::move(events_.back());
    events_.pop_back();
    if (e.node < 0) continue;  // a wake-up: the host polls
    if (e.node < hosts()) ports_[static_cast<std::size_t>(e.node)]->arrive(std::move(e.frame));
    else route(e.node, std::move(e.frame), e.at);
  }
}

bool LeafSpine::send(Queue& q, std::vector<std::uint8_t> frame, std::uint64_t at) {
  const EgressConfig& eg = config_.egress;
  const std::uint64_t backlog = q.backlog(at);
  const std::uint64_t departs = std::max(q.busy_until, at) + wire_ns(frame.size(), q.gbps);
  if (q.down_at != 0 && departs >= q.down_at) {
    ++q.stats.failed_dropped;
    return false;
  }
  if (backlog + frame.size() > eg.buffer_bytes) {
    ++q.stats.tail_dropped;
    return false;
  }
  ++q.stats.enqueued;
  q.busy_until = departs;
  q.departures.push_back(departs);
  q.stats.max_queue_bytes = std::max(q.stats.max_queue_bytes, q.backlog(at));
  // The frame goes onto the wire (and uses it) whether or not it arrives.
  if (q.loss > 0 && std::uniform_real_distribution<double>(0, 1)(q.rng) < q.loss) {
    ++q.stats.lost;
    return false;
  }
  // RED on the backlog the frame finds (SimSwitch's EgressConfig::
  // mark_on_dequeue = false), ECN-capable frames only.
  double p = 0;
  if (backlog >= eg.kmax_bytes) p = 1;
  else if (backlog > eg.kmin_bytes) {
    p = eg.pmax * static_cast<double>(backlog - eg.kmin_bytes) / static_cast<double>(eg.kmax_bytes - eg.kmin_bytes);
  }
  if (p > 0 && std::uniform_real_distribution<double>(0, 1)(q.rng) < p && mark_ce(frame)) ++q.stats.marked;
  ++q.stats.delivered;
  q.stats.bytes += frame.size();
  schedule(departs + eg.delay_ns, q.to, std::move(frame));
  return true;
}

int LeafSpine::host_of_mac(const std::uint8_t* mac) const {
  if (mac[0] != 0x02 || mac[1] != 0 || mac[2] != 0 || mac[3] != 0) return -1;
  const int leaf = mac[4] - 1, n = mac[5] - 1;
  if (leaf < 0 || leaf >= config_.leaves || n < 0 || n >= config_.hosts_per_leaf) return -1;
  return leaf * config_.hosts_per_leaf + n;
}

void LeafSpine::route(int node, std::vector<std::uint8_t> frame, std::uint64_t at) {
  const int h = hosts();
  const int dst = frame.size() >= 14 ? host_of_mac(frame.data()) : -1;
  if (dst < 0) return;  // unknown unicast: dropped
  const int dst_leaf = leaf_of(dst);
  if (node >= h + config_.leaves) {  // a spine: down to the destination's leaf
    send(spine_link(dst_leaf, node - h - config_.leaves, false), std::move(frame), at);
    return;
  }
  const int leaf = node - h;
  if (leaf == dst_leaf) {
    send(*queues_[static_cast<std::size_t>(2 * dst + 1)], std::move(frame), at);
    return;
  }
  // ECMP over the spines that routing still offers towards the
  // destination's leaf (all of them until a failed link is withdrawn).
  int paths[256];
  int n = 0;
  for (int s = 0; s < config_.spines && n < 256; ++s) {
    if (spine_link(leaf, s, true).routed(at) && spine_link(dst_leaf, s, false).routed(at)) paths[n++] = s;
  }
  if (n == 0) return;  // no way up
  FiveTuple t;
  const int pick = parse_five_tuple(frame, t) ? ecmp_pick(t, seed_ ^ mix(static_cast<std::uint64_t>(leaf) + 101), n) : 0;
  send(spine_link(leaf, paths[pick], true), std::move(frame), at);
}

std::uint64_t LeafSpine::next_delivery_ns() {
  advance(clock_.now_ns());
  return events_.empty() ? 0 : events_.front().at;
}

}  // namespace uroce::sim
