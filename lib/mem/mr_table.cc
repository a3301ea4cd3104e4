#include "mem/mr_table.h"

#include <cerrno>

#include <infiniband/verbs.h>

namespace uroce::mem {
namespace {

constexpr int kValidAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC;

// Key layout: slot index in the high 24 bits, a generation byte in the low 8,
// so a key that outlives its region is not honoured by the next one.
constexpr std::uint32_t slot_of(std::uint32_t key) { return key >> 8; }

}  // namespace

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

MrTable::MrTable(std::uint32_t capacity) : slots_(capacity + 1), generation_(capacity + 1, 1) {}

int MrTable::add(std::uint32_t pd, void* base, std::uint64_t iova, std::uint64_t length, int access,
                 std::uint32_t& key) {
  // Slot 0 is never used, so key 0 is never valid.
  for (std::uint32_t i = 1; i < slots_.size(); ++i) {
    if (slots_[i].valid) continue;
    const std::uint32_t k = i << 8 | generation_[i];
    if (const int rc = add_with_key(pd, base, iova, length, access, k); rc != 0) return rc;
    generation_[i] = static_cast<std::uint8_t>(generation_[i] + 1);
    key = k;
    return 0;
  }
  return ENOMEM;
}

int MrTable::add_with_key(std::uint32_t pd, void* base, std::uint64_t iova, std::uint64_t length,
                          int access, std::uint32_t key) {
  if (length == 0 || (access & ~kValidAccess)) return EINVAL;
  // Remote write and remote atomic need local write (ibv_reg_mr, IBTA 10.6.3.1).
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    return EINVAL;
  }
  if (iova + length < iova) return EINVAL;
  const std::uint32_t i = slot_of(key);
  if (i == 0 || i >= slots_.size()) return EINVAL;
  if (slots_[i].valid) return EEXIST;
  slots_[i] = Region{static_cast<std::uint8_t*>(base), iova, length, access, pd, key, true, true};
  return 0;
}

int MrTable::remove(std::uint32_t key) {
  const std::uint32_t i = slot_of(key);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid || slots_[i].key != key) return EINVAL;
  slots_[i] = Region{};
  return 0;
}

std::uint32_t MrTable::regions_in_pd(std::uint32_t pd) const {
  std::uint32_t n = 0;
  for (const Region& r : slots_) n += r.valid && r.pd == pd;
  return n;
}

const Region* MrTable::find(std::uint32_t key) const {
  const std::uint32_t i = slot_of(key);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid || slots_[i].key != key) return nullptr;
  return &slots_[i];
}

AccessResult MrTable::check(std::uint32_t key, bool remote, std::uint32_t pd, std::uint64_t iova,
                            std::uint64_t len, int need, std::uint8_t*& host) const {
  const Region* r = find(key);
  if (r == nullptr || (remote && !r->rkey_valid)) return AccessResult::kBadKey;
  if (r->pd != pd) return AccessResult::kBadPd;
  if (iova < r->iova || iova + len < iova || iova + len > r->iova + r->length) {
    return AccessResult::kOutOfBounds;
  }
  if ((r->access & need) != need) return AccessResult::kNoAccess;
  host = r->base + (iova - r->iova);
  return AccessResult::kOk;
}

AccessResult MrTable::invalidate(std::uint32_t rkey, std::uint32_t pd) {
  const std::uint32_t i = slot_of(rkey);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid || slots_[i].key != rkey) return AccessResult::kBadKey;
  if (slots_[i].pd != pd) return AccessResult::kBadPd;
  slots_[i].rkey_valid = false;
  return AccessResult::kOk;
}

}  // namespace uroce::mem
