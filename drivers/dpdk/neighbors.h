// The neighbour table of a port, for ARP (RFC 826) and neighbour discovery
// (RFC 4861), bounded against floods: any host on the link can send frames
// from as many addresses as it likes, so what those frames may store is
// capped. Two tiers, each fixed in size and allocation-free after
// construction:
//  - wanted: peers configured or being resolved by us. Only our own calls
//    add to it, so no flood can push a peer we talk to out of it.
//  - learned: senders that addressed us unasked (an ARP request or a
//    solicitation for our address). A flood churns this tier only.
// No DPDK here, so the table is unit-tested on its own; not thread-safe, the
// caller locks. Keys are IPv4 (N = 4) or IPv6 (N = 16) addresses.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "wire/headers.h"

namespace uroce::dpdk {

// One tier: at most `capacity` entries, the least recently used evicted
// first. Slots and hash index are sized at construction.
template <std::size_t N>
class NeighborTier {
 public:
  using Key = std::array<std::uint8_t, N>;
  struct Entry {
    Key key{};
    wire::MacAddr mac{};
    bool pending = false;  // being resolved, no MAC yet
  };

  // `capacity` >= 1.
  explicit NeighborTier(std::uint32_t capacity);

  // The entry for `key`, or nullptr.
  Entry* find(const Key& key);
  const Entry* find(const Key& key) const;
  // Makes `e` (an entry of this tier) the most recently used.
  void touch(const Entry& e);
  // Adds `key`, which must be absent, as the most recently used entry.
  // Returns true if the tier was full and its least recently used entry was
  // evicted to make room, false if a free slot took it.
  bool insert(const Key& key, const wire::MacAddr& mac, bool pending);
  // Removes `key` if present.
  void erase(const Key& key);
  std::uint32_t size() const { return size_; }
  std::uint32_t capacity() const { return static_cast<std::uint32_t>(slots_.size()); }

 private:
  static constexpr std::uint32_t kNone = UINT32_MAX;
  struct Slot {
    Entry entry;
    std::uint32_t prev = kNone;  // toward the least recently used
    std::uint32_t next = kNone;  // toward the most recently used; the free list
  };

  std::size_t home(const Key& key) const;
  // The index position holding `key`, else the empty position where it goes.
  std::size_t position(const Key& key) const;
  void unlink(std::uint32_t s);
  void link_newest(std::uint32_t s);
  void erase_at(std::size_t pos);

  std::vector<Slot> slots_;
  // Open addressing, linear probing, never more than half full: a slot
  // number or kNone. A probe is bounded by the capacity however the keys
  // collide, and the keys are chosen by whoever sends us frames.
  std::vector<std::uint32_t> index_;
  std::size_t mask_ = 0;
  std::uint32_t oldest_ = kNone;
  std::uint32_t newest_ = kNone;
  std::uint32_t free_ = kNone;
  std::uint32_t size_ = 0;
};

// What a NeighborTable call did.
enum class NeighborOutcome : std::uint8_t {
  kMissed,          // lookup: not known (absent or pending); merge: neither, refused
  kDone,            // found, updated or stored
  kEvictedLearned,  // stored; the least recently used learned entry made room
  kEvictedWanted,   // stored; the least recently used wanted entry made room
};
enum class NeighborState : std::uint8_t { kAbsent, kPending, kWanted, kLearned };

template <std::size_t N>
class NeighborTable {
 public:
  using Key = typename NeighborTier<N>::Key;
  static constexpr std::uint32_t kWantedEntries = 4096;
  static constexpr std::uint32_t kLearnedEntries = 256;

  using Outcome = NeighborOutcome;
  using State = NeighborState;

  explicit NeighborTable(std::uint32_t wanted = kWantedEntries, std::uint32_t learned = kLearnedEntries)
      : wanted_(wanted), learned_(learned) {}

  // A configured peer: a wanted entry. kDone or kEvictedWanted.
  Outcome configure(const Key& key, const wire::MacAddr& mac);
  // The MAC for `key`, for resolution: a wanted entry (now the most recently
  // used), or a learned one, which is promoted to wanted since we talk to it.
  // kMissed (absent or pending: `mac` untouched), kDone or kEvictedWanted.
  Outcome lookup(const Key& key, wire::MacAddr& mac);
  // Marks `key` pending before a request for it goes out, so that the
  // answer is taken. kDone or kEvictedWanted.
  Outcome want(const Key& key);
  // Drops `key` if it is still pending: resolution failed (RFC 4861 7.2.2).
  void give_up(const Key& key);
  // RFC 826's merge step, and RFC 4861 7.2.5 for an advertisement: the MAC
  // of a pending or known address (either tier) is set. kDone, or kMissed
  // when the address is neither: nothing stored, the caller refuses it.
  Outcome merge(const Key& key, const wire::MacAddr& mac);
  // A sender that addressed us: merged if pending or known, else added to
  // the learned tier. kDone or kEvictedLearned.
  Outcome learn(const Key& key, const wire::MacAddr& mac);

  // Where `key` is, and its MAC if it has one; changes nothing.
  State state(const Key& key, wire::MacAddr* mac = nullptr) const;
  std::uint32_t wanted_size() const { return wanted_.size(); }
  std::uint32_t learned_size() const { return learned_.size(); }

 private:
  Outcome add_wanted(const Key& key, const wire::MacAddr& mac, bool pending) {
    return wanted_.insert(key, mac, pending) ? Outcome::kEvictedWanted : Outcome::kDone;
  }

  NeighborTier<N> wanted_;
  NeighborTier<N> learned_;  // never holds a key that wanted_ holds
};

// --- NeighborTier ---

template <std::size_t N>
NeighborTier<N>::NeighborTier(std::uint32_t capacity) : slots_(capacity < 1 ? 1 : capacity) {
  std::size_t n = 2;
  while (n < 2 * slots_.size()) n *= 2;
  index_.assign(n, kNone);
  mask_ = n - 1;
  for (std::uint32_t s = 0; s < slots_.size(); ++s) slots_[s].next = s + 1 < slots_.size() ? s + 1 : kNone;
  free_ = 0;
}

template <std::size_t N>
std::size_t NeighborTier<N>::home(const Key& key) const {
  std::uint32_t h = 2166136261u;  // FNV-1a, then a final mix of the low bits
  for (const std::uint8_t b : key) h = (h ^ b) * 16777619u;
  h ^= h >> 15;
  h *= 0x2c1b3c6du;
  h ^= h >> 12;
  return h & mask_;
}

template <std::size_t N>
std::size_t NeighborTier<N>::position(const Key& key) const {
  std::size_t pos = home(key);
  while (index_[pos] != kNone && slots_[index_[pos]].entry.key != key) pos = (pos + 1) & mask_;
  return pos;
}

template <std::size_t N>
auto NeighborTier<N>::find(const Key& key) -> Entry* {
  const std::uint32_t s = index_[position(key)];
  return s == kNone ? nullptr : &slots_[s].entry;
}

template <std::size_t N>
auto NeighborTier<N>::find(const Key& key) const -> const Entry* {
  const std::uint32_t s = index_[position(key)];
  return s == kNone ? nullptr : &slots_[s].entry;
}

template <std::size_t N>
void NeighborTier<N>::unlink(std::uint32_t s) {
  Slot& slot = slots_[s];
  (slot.prev == kNone ? oldest_ : slots_[slot.prev].next) = slot.next;
  (slot.next == kNone ? newest_ : slots_[slot.next].prev) = slot.prev;
  slot.prev = slot.next = kNone;
}

template <std::size_t N>
void NeighborTier<N>::link_newest(std::uint32_t s) {
  slots_[s].prev = newest_;
  slots_[s].next = kNone;
  (newest_ == kNone ? oldest_ : slots_[newest_].next) = s;
  newest_ = s;
}

template <std::size_t N>
void NeighborTier<N>::touch(const Entry& e) {
  // An entry is its slot's first member (pointer-interconvertible).
  static_assert(std::is_standard_layout_v<Slot> && offsetof(Slot, entry) == 0);
  const auto s = static_cast<std::uint32_t>(reinterpret_cast<const Slot*>(&e) - slots_.data());
  if (s == newest_) return;
  unlink(s);
  link_newest(s);
}

// Backward-shift deletion: entries after `pos` in its probe run move up
// unless their home lies in (pos, here], so no probe ever stops early.
template <std::size_t N>
void NeighborTier<N>::erase_at(std::size_t pos) {
  index_[pos] = kNone;
  for (std::size_t j = (pos + 1) & mask_; index_[j] != kNone; j = (j + 1) & mask_) {
    const std::size_t h = home(slots_[index_[j]].entry.key);
    const bool stays = pos <= j ? (pos < h && h <= j) : (pos < h || h <= j);
    if (stays) continue;
    index_[pos] = index_[j];
    index_[j] = kNone;
    pos = j;
  }
}

template <std::size_t N>
bool NeighborTier<N>::insert(const Key& key, const wire::MacAddr& mac, bool pending) {
  bool evicted = false;
  std::uint32_t s = free_;
  if (s != kNone) {
    free_ = slots_[s].next;
    ++size_;
  } else {
    s = oldest_;
    erase_at(position(slots_[s].entry.key));
    unlink(s);
    evicted = true;
  }
  slots_[s].entry = Entry{key, mac, pending};
  link_newest(s);
  index_[position(key)] = s;
  return evicted;
}

template <std::size_t N>
void NeighborTier<N>::erase(const Key& key) {
  const std::size_t pos = position(key);
  const std::uint32_t s = index_[pos];
  if (s == kNone) return;
  erase_at(pos);
  unlink(s);
  slots_[s].next = free_;
  free_ = s;
  --size_;
}

// --- NeighborTable ---

template <std::size_t N>
auto NeighborTable<N>::configure(const Key& key, const wire::MacAddr& mac) -> Outcome {
  if (auto* e = wanted_.find(key)) {
    e->mac = mac;
    e->pending = false;
    wanted_.touch(*e);
    return Outcome::kDone;
  }
  learned_.erase(key);
  return add_wanted(key, mac, false);
}

template <std::size_t N>
auto NeighborTable<N>::lookup(const Key& key, wire::MacAddr& mac) -> Outcome {
  if (auto* e = wanted_.find(key)) {
    if (e->pending) return Outcome::kMissed;
    mac = e->mac;
    wanted_.touch(*e);
    return Outcome::kDone;
  }
  const auto* l = learned_.find(key);
  if (l == nullptr) return Outcome::kMissed;
  mac = l->mac;
  learned_.erase(key);
  return add_wanted(key, mac, false);
}

template <std::size_t N>
auto NeighborTable<N>::want(const Key& key) -> Outcome {
  if (auto* e = wanted_.find(key)) {
    wanted_.touch(*e);
    return Outcome::kDone;
  }
  if (const auto* l = learned_.find(key)) {
    const wire::MacAddr mac = l->mac;
    learned_.erase(key);
    return add_wanted(key, mac, false);
  }
  return add_wanted(key, {}, true);
}

template <std::size_t N>
void NeighborTable<N>::give_up(const Key& key) {
  const auto* e = wanted_.find(key);
  if (e != nullptr && e->pending) wanted_.erase(key);
}

template <std::size_t N>
auto NeighborTable<N>::merge(const Key& key, const wire::MacAddr& mac) -> Outcome {
  if (auto* e = wanted_.find(key)) {
    e->mac = mac;
    e->pending = false;
    wanted_.touch(*e);
    return Outcome::kDone;
  }
  if (auto* l = learned_.find(key)) {
    l->mac = mac;
    learned_.touch(*l);
    return Outcome::kDone;
  }
  return Outcome::kMissed;
}

template <std::size_t N>
auto NeighborTable<N>::learn(const Key& key, const wire::MacAddr& mac) -> Outcome {
  if (merge(key, mac) == Outcome::kDone) return Outcome::kDone;
  return learned_.insert(key, mac, false) ? Outcome::kEvictedLearned : Outcome::kDone;
}

template <std::size_t N>
auto NeighborTable<N>::state(const Key& key, wire::MacAddr* mac) const -> State {
  if (const auto* e = wanted_.find(key)) {
    if (e->pending) return State::kPending;
    if (mac != nullptr) *mac = e->mac;
    return State::kWanted;
  }
  if (const auto* l = learned_.find(key)) {
    if (mac != nullptr) *mac = l->mac;
    return State::kLearned;
  }
  return State::kAbsent;
}

}  // namespace uroce::dpdk
