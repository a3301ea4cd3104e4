#include "mem/mr_table.h"

#include <cerrno>

#include <infiniband/verbs.h>

#include "mem/mr_slot.h"

namespace uroce::mem {
namespace {

constexpr int kValidAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;  // MW_BIND: windows may be bound to it

}  // namespace

// Key layout: bits 8 and up hold the slot index in as few bits as the table
// needs (17 for 65,536 regions); the low byte and the bits above the index
// hold a per-slot generation (15 bits for 65,536 regions). Slots are taken
// next-fit, round the table, so a slot comes back only after every other
// free one has been used, and its key only after 2^generation-bits more
// registrations of it: a key that outlives its region is not honoured by a
// later one for as long as the key space allows. Each slot's generation
// starts at a random value (MrTable's RandomFill), so a peer cannot guess a
// key from the slot alone (RNICs randomise a key byte the same way).
std::uint32_t MrTable::key_of(std::uint32_t slot, std::uint32_t generation) const {
  const std::uint32_t high = generation >> 8 << (8 + slot_bits_);
  return high | slot << 8 | (generation & 0xff);
}

const char* access_result_name(AccessResult r) {
  switch (r) {
    case AccessResult::kOk: return "ok";
    case AccessResult::kBadKey: return "bad_key";
    case AccessResult::kBadPd: return "bad_pd";
    case AccessResult::kOutOfBounds: return "out_of_bounds";
    case AccessResult::kNoAccess: return "no_access";
  }
  return "invalid";
}

MrTable::MrTable(std::uint32_t capacity, RandomFill random) : slots_(capacity + 1), generation_(capacity + 1, 1) {
  while ((1ull << slot_bits_) < slots_.size()) ++slot_bits_;
  if (slot_bits_ > 24) slot_bits_ = 24;
  slot_mask_ = (1u << slot_bits_) - 1;
  if (slots_.size() > slot_mask_ + 1ull) slots_.resize(slot_mask_ + 1ull);
  generation_.resize(slots_.size());
  seq_ = std::make_unique<std::atomic<std::uint32_t>[]>(slots_.size());
  if (random == nullptr) return;
  random(generation_.data(), generation_.size() * sizeof generation_[0]);
  const std::uint32_t bits = 32 - slot_bits_;
  for (std::uint32_t& g : generation_) g &= bits >= 32 ? ~0u : (1u << bits) - 1;
  std::uint32_t start = 0;
  random(&start, sizeof start);
  if (slots_.size() > 1) next_slot_ = 1 + start % static_cast<std::uint32_t>(slots_.size() - 1);
}

int MrTable::add_empty(std::uint64_t pd, void* base, std::uint64_t iova, int access, std::uint32_t& key) {
  // add()'s checks with one byte in place of none; the region then has none.
  if (const int rc = check_args(iova, 1, access); rc != 0) return rc;
  if (const int rc = add(pd, base, iova, 1, access, key); rc != 0) return rc;
  slots_[slot_of(key)].length = 0;
  return 0;
}

int MrTable::add(std::uint64_t pd, void* base, std::uint64_t iova, std::uint64_t length, int access,
                 std::uint32_t& key) {
  // Slot 0 is never used, so key 0 is never valid.
  const auto n = static_cast<std::uint32_t>(slots_.size());
  for (std::uint32_t k = 0; k + 1 < n; ++k) {
    const std::uint32_t i = next_slot_;
    next_slot_ = next_slot_ + 1 < n ? next_slot_ + 1 : 1;
    if (slots_[i].valid) continue;
    const std::uint32_t candidate = key_of(i, generation_[i]);
    if (const int rc = add_with_key(pd, base, iova, length, access, candidate); rc != 0) return rc;
    // The generation wraps within the bits the key has for it.
    generation_[i] = (generation_[i] + 1) & ((1u << (32 - slot_bits_)) - 1);
    key = candidate;
    return 0;
  }
  return ENOMEM;
}

int MrTable::check_args(std::uint64_t iova, std::uint64_t length, int access) {
  if (length == 0 || (access & ~kValidAccess)) return EINVAL;
  // Remote write and remote atomic need local write (ibv_reg_mr, IBTA 10.6.3.1).
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    return EINVAL;
  }
  if (iova + length < iova) return EINVAL;
  return 0;
}

int MrTable::add_with_key(std::uint64_t pd, void* base, std::uint64_t iova, std::uint64_t length,
                          int access, std::uint32_t key) {
  if (const int rc = check_args(iova, length, access); rc != 0) return rc;
  const std::uint32_t i = slot_of(key);
  if (i == 0 || i >= slots_.size()) return EINVAL;
  if (slots_[i].valid) return EEXIST;
  slots_[i] = Region{static_cast<std::uint8_t*>(base), iova, length, access, pd, key, true, true, false};
  ++pd_regions_[pd];
  return 0;
}

int MrTable::add_odp(std::uint64_t pd, void* base, std::uint64_t iova, std::uint64_t length, int access,
                     std::int32_t pid, std::uint32_t& key) {
  if (pid == 0) return EINVAL;
  if (const int rc = add(pd, base, iova, length, access & ~IBV_ACCESS_ON_DEMAND, key); rc != 0) return rc;
  slots_[slot_of(key)].odp_pid = pid;
  return 0;
}

int MrTable::remove(std::uint32_t key) {
  const std::uint32_t i = slot_of(key);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid || slots_[i].key != key) return EINVAL;
  if (slots_[i].is_window()) return EINVAL;  // remove_window
  // IBTA 11.2.8.5 (rxe likewise): a region with windows bound to it stays.
  if (load(slots_[i].windows) != 0) return EBUSY;
  if (auto n = pd_regions_.find(slots_[i].pd); n != pd_regions_.end() && --n->second == 0) pd_regions_.erase(n);
  slots_[i] = Region{};
  bump_epoch();
  return 0;
}

int MrTable::rereg(std::uint32_t key, std::uint64_t pd, void* base, std::uint64_t iova, std::uint64_t length,
                   int access) {
  if (const int rc = check_args(iova, length, access); rc != 0) return rc;
  const std::uint32_t i = slot_of(key);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid || slots_[i].key != key) return EINVAL;
  Region& r = slots_[i];
  if (r.is_window()) return EINVAL;
  // Windows bound to it grant what it granted (IBTA 11.2.8.5 for
  // deregistration; the kernel refuses a rereg the same way).
  if (load(r.windows) != 0) return EBUSY;
  if (r.pd != pd) {
    if (auto n = pd_regions_.find(r.pd); n != pd_regions_.end() && --n->second == 0) pd_regions_.erase(n);
    ++pd_regions_[pd];
  }
  r.base = static_cast<std::uint8_t*>(base);
  r.iova = iova;
  r.length = length;
  r.access = access;
  r.pd = pd;
  bump_epoch();
  return 0;
}

std::uint32_t MrTable::regions_in_pd(std::uint64_t pd) const {
  const auto n = pd_regions_.find(pd);
  return n == pd_regions_.end() ? 0 : n->second;
}

// A window's key changes with its binds, on whichever engine runs them: it
// is loaded atomically; a region's changes only in control calls.
const Region* MrTable::find(std::uint32_t key) const {
  const std::uint32_t i = slot_of(key);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid) return nullptr;
  const Region& r = slots_[i];
  if ((r.is_window() ? load(r.key) : r.key) != key) return nullptr;
  return &r;
}

AccessResult MrTable::check(std::uint32_t key, bool remote, std::uint64_t pd, std::uint64_t iova,
                            std::uint64_t len, int need, std::uint8_t*& host) const {
  const Region* r = find(key);
  // A window's key is never an lkey; a peer's goes through check_remote.
  // Asked before rkey_valid, which a region changes only in control calls
  // but a window on the data path.
  if (r == nullptr || r->is_window()) return AccessResult::kBadKey;
  if (remote && !r->rkey_valid) return AccessResult::kBadKey;
  if (r->pd != pd) return AccessResult::kBadPd;
  if (iova < r->iova || iova + len < iova || iova + len > r->iova + r->length) {
    return AccessResult::kOutOfBounds;
  }
  if ((r->access & need) != need) return AccessResult::kNoAccess;
  // As integers: an implicit ODP region has no base (every address).
  host = reinterpret_cast<std::uint8_t*>(reinterpret_cast<std::uintptr_t>(r->base) + (iova - r->iova));
  return AccessResult::kOk;
}

AccessResult MrTable::check(std::uint32_t key, bool remote, std::uint64_t pd, std::uint64_t iova,
                            std::uint64_t len, int need, std::uint8_t*& host, std::int32_t& odp_pid) const {
  const AccessResult r = check(key, remote, pd, iova, len, need, host);
  odp_pid = r == AccessResult::kOk ? find(key)->odp_pid : 0;
  return r;
}

AccessResult MrTable::invalidate(std::uint32_t rkey, std::uint64_t pd) {
  const std::uint32_t i = slot_of(rkey);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid) return AccessResult::kBadKey;
  Region& r = slots_[i];
  // Only type 2 windows may be (remote_invalidatable: set when the window
  // was allocated); nothing else is written here.
  if (!r.is_window()) {
    if (r.key != rkey) return AccessResult::kBadKey;
    return r.pd != pd ? AccessResult::kBadPd : AccessResult::kNoAccess;
  }
  SlotWriter writing(*this, i);
  if (r.key != rkey) return AccessResult::kBadKey;
  if (r.pd != pd) return AccessResult::kBadPd;
  if (!r.remote_invalidatable) return AccessResult::kNoAccess;
  unbind(r);  // the rkey stops working, and the type 2 window is free to be bound again
  return AccessResult::kOk;
}

}  // namespace uroce::mem
