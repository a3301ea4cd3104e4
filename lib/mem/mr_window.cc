// Memory windows (IBTA 10.6.7): slots of the region table whose keys are
// rkeys only, bound to a range of a region by a work request and unbound by
// a new bind (type 1), an invalidation (type 2: LOCAL_INV, SEND with
// Invalidate) or deallocation. The rule each refusal cites is IBTA's
// compliance statement (C10-nn, o10-nn), as rxe's rxe_mw.c cites them.
#include <cerrno>

#include <infiniband/verbs.h>

#include "mem/mr_table.h"

namespace uroce::mem {
namespace {

constexpr int kWindowRights = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
// What a bind may ask for: the remote rights, zero-based addressing, and the
// local bits a consumer may pass along (a window grants no local access:
// its key is never an lkey, so they are ignored).
constexpr int kBindAccess = kWindowRights | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE;

}  // namespace

const char* window_result_name(WindowResult r) {
  switch (r) {
    case WindowResult::kOk: return "ok";
    case WindowResult::kNoWindow: return "no_window";
    case WindowResult::kWrongPd: return "wrong_pd";
    case WindowResult::kWrongKey: return "wrong_key";
    case WindowResult::kStillBound: return "still_bound";
    case WindowResult::kNoRegion: return "no_region";
    case WindowResult::kNoBindRight: return "no_bind_right";
    case WindowResult::kNeedLocalWrite: return "need_local_write";
    case WindowResult::kOutOfBounds: return "out_of_bounds";
    case WindowResult::kBadAccess: return "bad_access";
    case WindowResult::kNotInvalidatable: return "not_invalidatable";
  }
  return "invalid";
}

int MrTable::add_window(std::uint64_t pd, int type, std::uint32_t& key) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return EINVAL;
  const auto n = static_cast<std::uint32_t>(slots_.size());
  for (std::uint32_t k = 0; k + 1 < n; ++k) {
    const std::uint32_t i = next_slot_;
    next_slot_ = next_slot_ + 1 < n ? next_slot_ + 1 : 1;
    if (slots_[i].valid) continue;
    Region& w = slots_[i];
    w = Region{};
    w.pd = pd;
    w.key = key_of(i, generation_[i]);
    w.valid = true;
    w.rkey_valid = false;  // unbound: the rkey grants nothing yet
    w.kind = type == IBV_MW_TYPE_1 ? Region::Kind::kWindow1 : Region::Kind::kWindow2;
    // o10-37.2.26: only type 2 windows are invalidated (LOCAL_INV, SEND with Invalidate).
    w.remote_invalidatable = type == IBV_MW_TYPE_2;
    generation_[i] = (generation_[i] + 1) & ((1u << (32 - slot_bits_)) - 1);
    ++pd_regions_[pd];  // dealloc_pd waits for the PD's windows as for its regions
    key = w.key;
    return 0;
  }
  return ENOMEM;
}

Region* MrTable::window_of(std::uint32_t key) {
  const std::uint32_t i = slot_of(key);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid || !slots_[i].is_window()) return nullptr;
  // The consumer's key (the low 8 bits) changes with every bind; the rest
  // (slot and generation) names the window for as long as it lives.
  if ((slots_[i].key >> 8) != (key >> 8)) return nullptr;
  return &slots_[i];
}

bool MrTable::names_window(std::uint32_t key) const {
  return const_cast<MrTable*>(this)->window_of(key) != nullptr;
}

void MrTable::unbind(Region& w) {
  if (w.bound_mr != 0) {
    const std::uint32_t i = slot_of(w.bound_mr);
    if (i < slots_.size() && slots_[i].valid && slots_[i].key == w.bound_mr && slots_[i].windows > 0) {
      --slots_[i].windows;
    }
  }
  w.bound_mr = 0;
  w.bound_qpn = 0;
  w.odp_pid = 0;
  w.base = nullptr;
  w.iova = 0;
  w.length = 0;
  w.access = 0;
  w.rkey_valid = false;
  ++epoch_;  // whatever was resolved under its rkey is checked again
}

int MrTable::remove_window(std::uint32_t key) {
  Region* w = window_of(key);
  if (w == nullptr) return EINVAL;
  unbind(*w);  // IBTA 10.6.7: deallocating a bound window invalidates its rkey
  if (auto n = pd_regions_.find(w->pd); n != pd_regions_.end() && --n->second == 0) pd_regions_.erase(n);
  // Its rkeys took any low byte (the consumer's key): the slot's next keys
  // move to the next value of the generation's upper bits, so no later
  // region or window of the slot answers to a key this window had, for as
  // long as those bits allow.
  const std::uint32_t i = slot_of(w->key);
  const std::uint32_t mask = (1u << (32 - slot_bits_)) - 1;
  generation_[i] = ((((generation_[i] >> 8) + 1) << 8) | (generation_[i] & 0xffu)) & mask;
  *w = Region{};
  return 0;
}

WindowResult MrTable::bind_window(const WindowBind& b, std::uint64_t pd, std::uint32_t qpn) {
  Region* w = window_of(b.window_key);
  if (w == nullptr) return WindowResult::kNoWindow;
  // C10-72, o10-36.2.1: the window, the region and the QP share one PD.
  if (w->pd != pd) return WindowResult::kWrongPd;
  if ((b.new_rkey >> 8) != (w->key >> 8)) return WindowResult::kWrongKey;
  const bool type2 = w->kind == Region::Kind::kWindow2;
  if ((b.access & ~kBindAccess) != 0) return WindowResult::kBadAccess;
  // o10-36.2.2: zero-based addressing is for type 2 windows only.
  if (!type2 && (b.access & IBV_ACCESS_ZERO_BASED)) return WindowResult::kBadAccess;
  // o10-37.2.30: a type 2 window is bound only while free (invalidated or never bound).
  if (type2 && w->rkey_valid) return WindowResult::kStillBound;
  const bool unbinding = b.mr_key == 0 || b.length == 0;
  // A type 1 bind of nothing unbinds it (IBTA 10.6.7.2.1); a type 2 window
  // is bound to something (o10-37.2.36: its length is not zero).
  if (unbinding && type2) return WindowResult::kOutOfBounds;
  const Region* mr = nullptr;
  if (!unbinding) {
    mr = find(b.mr_key);
    if (mr == nullptr || mr->is_window()) return WindowResult::kNoRegion;
    if (mr->pd != pd) return WindowResult::kWrongPd;
    if (!(mr->access & IBV_ACCESS_MW_BIND)) return WindowResult::kNoBindRight;  // C10-73
    if ((b.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) {
      return WindowResult::kNeedLocalWrite;  // C10-74
    }
    if (b.addr < mr->iova || b.addr + b.length < b.addr || b.addr + b.length > mr->iova + mr->length) {
      return WindowResult::kOutOfBounds;  // C10-75
    }
  }
  unbind(*w);
  w->key = b.new_rkey;
  if (unbinding) return WindowResult::kOk;  // type 1: a new rkey that grants nothing
  const std::uint32_t mr_slot = slot_of(b.mr_key);
  ++slots_[mr_slot].windows;
  w->bound_mr = b.mr_key;
  w->bound_qpn = type2 ? qpn : 0;
  // As integers: an implicit ODP region has no base (every address).
  w->base = reinterpret_cast<std::uint8_t*>(reinterpret_cast<std::uintptr_t>(mr->base) + (b.addr - mr->iova));
  w->odp_pid = mr->odp_pid;  // reached as its region is
  // Zero-based: the peer addresses the window from 0 (IBTA 10.6.7.1);
  // otherwise by the region's own addresses.
  w->iova = (b.access & IBV_ACCESS_ZERO_BASED) ? 0 : b.addr;
  w->length = b.length;
  w->access = b.access & kWindowRights;
  w->rkey_valid = true;
  return WindowResult::kOk;
}

WindowResult MrTable::invalidate_window(std::uint32_t rkey, std::uint64_t pd) {
  const std::uint32_t i = slot_of(rkey);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid || slots_[i].key != rkey || !slots_[i].is_window()) {
    return WindowResult::kNoWindow;
  }
  Region& w = slots_[i];
  if (w.pd != pd) return WindowResult::kWrongPd;
  if (w.kind != Region::Kind::kWindow2) return WindowResult::kNotInvalidatable;  // o10-37.2.26
  unbind(w);
  return WindowResult::kOk;
}

AccessResult MrTable::check_remote(std::uint32_t rkey, std::uint64_t pd, std::uint32_t qpn, std::uint64_t iova,
                                   std::uint64_t len, int need, std::uint8_t*& host) const {
  const Region* r = find(rkey);
  if (r == nullptr || !r->is_window()) return check(rkey, true, pd, iova, len, need, host);
  if (!r->rkey_valid) return AccessResult::kBadKey;  // unbound, invalidated
  if (r->pd != pd) return AccessResult::kBadPd;
  if (r->kind == Region::Kind::kWindow2 && r->bound_qpn != qpn) return AccessResult::kBadKey;
  if (iova < r->iova || iova + len < iova || iova + len > r->iova + r->length) return AccessResult::kOutOfBounds;
  if ((r->access & need) != need) return AccessResult::kNoAccess;
  host = reinterpret_cast<std::uint8_t*>(reinterpret_cast<std::uintptr_t>(r->base) + (iova - r->iova));
  return AccessResult::kOk;
}

AccessResult MrTable::check_remote(std::uint32_t rkey, std::uint64_t pd, std::uint32_t qpn, std::uint64_t iova,
                                   std::uint64_t len, int need, std::uint8_t*& host, std::int32_t& odp_pid) const {
  const AccessResult r = check_remote(rkey, pd, qpn, iova, len, need, host);
  odp_pid = r == AccessResult::kOk ? find(rkey)->odp_pid : 0;
  return r;
}

}  // namespace uroce::mem
