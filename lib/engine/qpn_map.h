// QPN -> value, open addressing with linear probing, at most half full.
// Rebuilt whole on the control path when QPs come and go; looked up on the
// data path with one probe or two and no allocation.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace uroce::engine {

template <typename V>
class QpnMap {
 public:
  QpnMap() { rebuild({}); }

  void rebuild(const std::vector<std::pair<std::uint32_t, V>>& entries) {
    std::size_t capacity = 64;
    while (capacity < 2 * (entries.size() + 1)) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = static_cast<std::uint32_t>(capacity - 1);
    for (const auto& [qpn, value] : entries) {
      std::uint32_t i = slot_of(qpn);
      while (slots_[i].qpn != kEmpty) i = (i + 1) & mask_;
      slots_[i] = Slot{qpn, value};
    }
  }

  // The value for `qpn`, or nullptr.
  const V* find(std::uint32_t qpn) const {
    for (std::uint32_t i = slot_of(qpn);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.qpn == qpn) return &s.value;
      if (s.qpn == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr std::uint32_t kEmpty = 0xffffffffu;  // QPNs have 24 bits
  struct Slot {
    std::uint32_t qpn = kEmpty;
    V value{};
  };
  std::uint32_t slot_of(std::uint32_t qpn) const { return (qpn * 0x9e3779b1u) >> 8 & mask_; }

  std::vector<Slot> slots_;
  std::uint32_t mask_ = 0;
};

}  // namespace uroce::engine
