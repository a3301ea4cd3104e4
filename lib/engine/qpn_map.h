// QPN -> value, indexed directly by the QPN's low bits: one slot, one
// compare per lookup, whatever QPN a packet names. QPNs are ours to
// allocate (the verbs layer gives out QPNs whose low bits differ), so the
// table is rebuilt whole on the control path at the smallest power-of-two
// size, at least twice the entries, at which no two QPNs share a slot.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace uroce::engine {

template <typename V>
class QpnMap {
 public:
  QpnMap() { rebuild({}); }

  // QPNs are distinct and 24-bit; at 2^24 slots no two can collide.
  void rebuild(const std::vector<std::pair<std::uint32_t, V>>& entries) {
    std::size_t capacity = 64;
    while (capacity < 2 * (entries.size() + 1)) capacity *= 2;
    while (!place(entries, capacity)) capacity *= 2;
  }

  // Adds one entry in place when its slot is free and the table stays at
  // most half full; false when the caller must rebuild() instead.
  bool insert(std::uint32_t qpn, const V& value, std::size_t entries_after) {
    if (2 * (entries_after + 1) > slots_.size()) return false;
    Slot& s = slots_[qpn & mask_];
    if (s.qpn != kEmpty) return false;
    s = Slot{qpn, value};
    return true;
  }

  // Removes `qpn`'s entry, if it has one (the table keeps its size).
  void erase(std::uint32_t qpn) {
    Slot& s = slots_[qpn & mask_];
    if (s.qpn == qpn) s = Slot{};
  }

  // The value for `qpn`, or nullptr.
  const V* find(std::uint32_t qpn) const {
    const Slot& s = slots_[qpn & mask_];
    return s.qpn == qpn ? &s.value : nullptr;
  }

  // Where `qpn`'s slot lies, to prefetch it ahead of find().
  const void* slot_of(std::uint32_t qpn) const { return &slots_[qpn & mask_]; }

  std::size_t capacity() const { return slots_.size(); }

 private:
  static constexpr std::uint32_t kEmpty = 0xffffffffu;  // QPNs have 24 bits
  struct Slot {
    std::uint32_t qpn = kEmpty;
    V value{};
  };
  bool place(const std::vector<std::pair<std::uint32_t, V>>& entries, std::size_t capacity) {
    slots_.assign(capacity, Slot{});
    mask_ = static_cast<std::uint32_t>(capacity - 1);
    for (const auto& [qpn, value] : entries) {
      Slot& s = slots_[qpn & mask_];
      if (s.qpn != kEmpty) return false;
      s = Slot{qpn, value};
    }
    return true;
  }

  std::vector<Slot> slots_;
  std::uint32_t mask_ = 0;
};

}  // namespace uroce::engine
