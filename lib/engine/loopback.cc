#include "engine/loopback.h"

#include <algorithm>
#include <cstring>

#include "transport/counters.h"
#include "wire/frame.h"
#include "wire/headers.h"

namespace uroce::engine {
namespace {

enum LoopbackCounter : std::uint8_t { kFrames, kBytes, kHeldBack };

constexpr const char* kNames[] = {
#define UROCE_X(name, description) #name,
    UROCE_LOOPBACK_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};
constexpr const char* kDescriptions[] = {
#define UROCE_X(name, description) description,
    UROCE_LOOPBACK_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};

}  // namespace

LoopbackPort::LoopbackPort(const std::vector<PacketIo*>& queues, const std::uint8_t mac[6], const ibv_gid& gid) {
  std::memcpy(mac_.data(), mac, 6);
  const wire::Ipv6Addr link_local = wire::ipv6_link_local(mac);
  std::memcpy(gids_[0].data(), link_local.data(), 16);
  std::memcpy(gids_[1].data(), gid.raw, 16);
  ipv4_ = is_ipv4_gid(gid);
  std::memcpy(&own_ipv4_, gid.raw + 12, 4);
  nslots_ = static_cast<std::uint32_t>(queues.size()) * kSlotsPerQueue;
  slots_ = std::make_unique<Slot[]>(nslots_);
  // Not value-initialised: pages nobody loops into are never touched.
  buffers_.reset(new std::uint8_t[std::size_t{nslots_} * kSlotBytes]);
  for (std::size_t i = 0; i < queues.size(); ++i) {
    queues_.emplace_back(new LoopbackQueue(*this, *queues[i], static_cast<std::uint32_t>(i) * kSlotsPerQueue));
  }
}

LoopbackPort::~LoopbackPort() = default;

bool LoopbackPort::own(const std::uint8_t gid[16]) const {
  return std::memcmp(gid, gids_[1].data(), 16) == 0 || std::memcmp(gid, gids_[0].data(), 16) == 0;
}

LoopbackQueue::LoopbackQueue(LoopbackPort& port, PacketIo& inner, std::uint32_t first_slot)
    : port_(port), inner_(inner), first_slot_(first_slot), pending_(LoopbackPort::kSlotsPerQueue) {}

bool LoopbackQueue::to_self(const TxFrame& f) const {
  // Per frame sent: one load and compare for IPv4 (the common case).
  const std::uint8_t* l3 = f.head.data + f.l3_offset;
  if ((l3[0] >> 4) == 4) {
    std::uint32_t dst;
    std::memcpy(&dst, l3 + 16, 4);
    return port_.ipv4_ && dst == port_.own_ipv4_;
  }
  return (l3[0] >> 4) == 6 && port_.own(l3 + 24);
}

bool LoopbackQueue::loop(const TxFrame& f) {
  const std::uint32_t bytes = f.frame_bytes();
  const std::uint32_t slot = first_slot_ + next_free_;
  LoopbackPort::Slot& s = port_.slots_[slot];
  // Released by whichever engine received it (acquire: its reads of the
  // buffer are over before we write it again).
  if (s.busy.load(std::memory_order_acquire) || pending_count_ == pending_.size()) {
    transport::counter_add(counters_[kHeldBack], 1);
    return false;
  }
  if (bytes > LoopbackPort::kSlotBytes) return true;  // cannot be: the engine builds none larger; dropped
  std::uint8_t* out = port_.data(slot);
  f.copy_to(out);
  // A port that fills IPv4 checksums left this one 0; the receive path
  // checks it as on any frame.
  if (inner_.ipv4_checksum_offload() && (out[f.l3_offset] >> 4) == 4) wire::ipv4_refresh_checksum(out + f.l3_offset);
  s.len = static_cast<std::uint16_t>(bytes);
  s.busy.store(true, std::memory_order_relaxed);
  next_free_ = (next_free_ + 1) % LoopbackPort::kSlotsPerQueue;
  pending_[(pending_head_ + pending_count_) % pending_.size()] = slot;
  ++pending_count_;
  transport::counter_add(counters_[kFrames], 1);
  transport::counter_add(counters_[kBytes], bytes);
  return true;
}

std::uint16_t LoopbackQueue::rx_burst(RxFrame* frames, std::uint16_t max) {
  std::uint16_t n = 0;
  while (n < max && pending_count_ > 0) {
    const std::uint32_t slot = pending_[pending_head_];
    pending_head_ = static_cast<std::uint32_t>((pending_head_ + 1) % pending_.size());
    --pending_count_;
    LoopbackPort::Slot& s = port_.slots_[slot];
    frames[n++] = RxFrame{port_.data(slot), s.len, &s, 0, {}};
  }
  if (n < max) n = static_cast<std::uint16_t>(n + inner_.rx_burst(frames + n, static_cast<std::uint16_t>(max - n)));
  return n;
}

void LoopbackQueue::rx_release(RxFrame* frames, std::uint16_t n) {
  // The port's frames go back to it in runs between looped ones (usually
  // one run: the whole batch).
  std::uint16_t run = 0;
  for (std::uint16_t i = 0; i < n; ++i) {
    if (!port_.owns(frames[i].cookie)) continue;
    if (i > run) inner_.rx_release(frames + run, static_cast<std::uint16_t>(i - run));
    static_cast<LoopbackPort::Slot*>(frames[i].cookie)->busy.store(false, std::memory_order_release);
    run = static_cast<std::uint16_t>(i + 1);
  }
  if (n > run) inner_.rx_release(frames + run, static_cast<std::uint16_t>(n - run));
}

std::uint16_t LoopbackQueue::tx_burst(const TxFrame* frames, std::uint16_t n) {
  // The port takes a prefix of what it is offered; so does this: frames to
  // ourselves are looped in order between runs sent to the port, and the
  // first one either cannot take ends the burst.
  std::uint16_t run = 0;
  std::array<TxHead, 32> looped_heads;
  std::uint16_t nlooped = 0;
  const bool port_heads = inner_.provides_tx_heads();
  auto return_heads = [&] {
    if (nlooped > 0) inner_.tx_heads_return(looped_heads.data(), nlooped);
    nlooped = 0;
  };
  for (std::uint16_t i = 0; i < n; ++i) {
    if (!to_self(frames[i])) continue;
    if (i > run) {
      const std::uint16_t want = static_cast<std::uint16_t>(i - run);
      const std::uint16_t took = inner_.tx_burst(frames + run, want);
      if (took < want) {
        return_heads();
        return static_cast<std::uint16_t>(run + took);
      }
    }
    if (!loop(frames[i])) {
      return_heads();
      return i;
    }
    // The frame is taken: a head of the port's goes back to it unsent.
    if (port_heads) {
      if (nlooped == looped_heads.size()) return_heads();
      looped_heads[nlooped++] = frames[i].head;
    }
    run = static_cast<std::uint16_t>(i + 1);
  }
  return_heads();
  if (n == run) return n;
  return static_cast<std::uint16_t>(run + inner_.tx_burst(frames + run, static_cast<std::uint16_t>(n - run)));
}

PacketIo::Resolution LoopbackQueue::resolve(const ibv_gid& gid, std::uint8_t mac[6], bool ask) {
  if (port_.own(gid.raw)) {
    std::memcpy(mac, port_.mac_.data(), 6);
    return Resolution::kKnown;
  }
  return inner_.resolve(gid, mac, ask);
}

void LoopbackQueue::visit_counters(void (*visit)(void*, const char*, const char*, std::uint64_t), void* arg) const {
  inner_.visit_counters(visit, arg);
  for (std::size_t c = 0; c < counters_.size(); ++c) {
    visit(arg, kNames[c], kDescriptions[c], transport::counter_load(counters_[c]));
  }
}

}  // namespace uroce::engine
