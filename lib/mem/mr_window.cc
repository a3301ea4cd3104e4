// Memory windows (IBTA 10.6.7): slots of the region table whose keys are
// rkeys only, bound to a range of a region by a work request and unbound by
// a new bind (type 1), an invalidation (type 2: LOCAL_INV, SEND with
// Invalidate) or deallocation. The rule each refusal cites is IBTA's
// compliance statement (C10-nn, o10-nn), as rxe's rxe_mw.c cites them.
#include <cerrno>

#include <infiniband/verbs.h>

#include "mem/mr_slot.h"
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
  if ((load(slots_[i].key) >> 8) != (key >> 8)) return nullptr;
  return &slots_[i];
}

bool MrTable::names_window(std::uint32_t key) const {
  return const_cast<MrTable*>(this)->window_of(key) != nullptr;
}

void MrTable::unbind(Region& w) {
  if (w.bound_mr != 0) {
    // The region stays while windows are bound to it (remove() is refused),
    // so bound_mr still names it; other engines may bind to it meanwhile.
    const std::uint32_t i = slot_of(w.bound_mr);
    if (i < slots_.size() && slots_[i].valid && slots_[i].key == w.bound_mr) {
      std::atomic_ref<std::uint32_t> windows(slots_[i].windows);
      std::uint32_t n = windows.load(std::memory_order_relaxed);
      while (n > 0 && !windows.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
      }
    }
  }
  store(w.bound_mr, 0u);
  store(w.bound_qpn, 0u);
  store(w.odp_pid, 0);
  store(w.base, static_cast<std::uint8_t*>(nullptr));
  store(w.iova, std::uint64_t{0});
  store(w.length, std::uint64_t{0});
  store(w.access, 0);
  store(w.rkey_valid, false);
  bump_epoch();  // whatever was resolved under its rkey is checked again
}

int MrTable::remove_window(std::uint32_t key) {
  Region* w = window_of(key);
  if (w == nullptr) return EINVAL;
  {
    SlotWriter writing(*this, slot_of(key));
    unbind(*w);  // IBTA 10.6.7: deallocating a bound window invalidates its rkey
  }
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
  const std::uint32_t i = slot_of(b.window_key);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid || !slots_[i].is_window()) return WindowResult::kNoWindow;
  // Another engine may bind or invalidate this window at the same time.
  SlotWriter writing(*this, i);
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
  store(w->key, b.new_rkey);
  if (unbinding) return WindowResult::kOk;  // type 1: a new rkey that grants nothing
  const std::uint32_t mr_slot = slot_of(b.mr_key);
  std::atomic_ref<std::uint32_t>(slots_[mr_slot].windows).fetch_add(1, std::memory_order_relaxed);
  store(w->bound_mr, b.mr_key);
  store(w->bound_qpn, type2 ? qpn : 0u);
  // As integers: an implicit ODP region has no base (every address).
  store(w->base, reinterpret_cast<std::uint8_t*>(reinterpret_cast<std::uintptr_t>(mr->base) + (b.addr - mr->iova)));
  store(w->odp_pid, mr->odp_pid);  // reached as its region is
  // Zero-based: the peer addresses the window from 0 (IBTA 10.6.7.1);
  // otherwise by the region's own addresses.
  store(w->iova, (b.access & IBV_ACCESS_ZERO_BASED) ? std::uint64_t{0} : b.addr);
  store(w->length, b.length);
  store(w->access, b.access & kWindowRights);
  store(w->rkey_valid, true);
  return WindowResult::kOk;
}

WindowResult MrTable::invalidate_window(std::uint32_t rkey, std::uint64_t pd) {
  const std::uint32_t i = slot_of(rkey);
  if (i == 0 || i >= slots_.size() || !slots_[i].valid || !slots_[i].is_window()) return WindowResult::kNoWindow;
  SlotWriter writing(*this, i);  // another engine may bind or invalidate it at the same time
  Region& w = slots_[i];
  if (w.key != rkey) return WindowResult::kNoWindow;
  if (w.pd != pd) return WindowResult::kWrongPd;
  if (w.kind != Region::Kind::kWindow2) return WindowResult::kNotInvalidatable;  // o10-37.2.26
  unbind(w);
  return WindowResult::kOk;
}

// The reader's side of the slot's sequence counter (SlotWriter): the
// changing fields are copied while it is even and taken again if it moved
// meanwhile; their acquire loads keep the copy ahead of the second look.
Region MrTable::read_window(std::uint32_t i) const {
  const Region& w = slots_[i];
  Region c;
  unsigned spins = 0;
  for (;;) {
    const std::uint32_t s = seq_[i].load(std::memory_order_acquire);
    if ((s & 1) == 0) {
      c.key = load(w.key);
      c.rkey_valid = load(w.rkey_valid);
      c.base = load(w.base);
      c.iova = load(w.iova);
      c.length = load(w.length);
      c.access = load(w.access);
      c.odp_pid = load(w.odp_pid);
      c.bound_mr = load(w.bound_mr);
      c.bound_qpn = load(w.bound_qpn);
      if (seq_[i].load(std::memory_order_relaxed) == s) break;
    }
    spin_wait(spins);
  }
  // Changed only in control calls.
  c.valid = w.valid;
  c.pd = w.pd;
  c.kind = w.kind;
  c.remote_invalidatable = w.remote_invalidatable;
  return c;
}

AccessResult MrTable::check_window(std::uint32_t i, std::uint32_t rkey, std::uint64_t pd, std::uint32_t qpn,
                                   std::uint64_t iova, std::uint64_t len, int need, std::uint8_t*& host,
                                   std::int32_t& odp_pid) const {
  const Region r = read_window(i);
  if (r.key != rkey || !r.rkey_valid) return AccessResult::kBadKey;  // another binding's key; unbound, invalidated
  if (r.pd != pd) return AccessResult::kBadPd;
  if (r.kind == Region::Kind::kWindow2 && r.bound_qpn != qpn) return AccessResult::kBadKey;
  if (iova < r.iova || iova + len < iova || iova + len > r.iova + r.length) return AccessResult::kOutOfBounds;
  if ((r.access & need) != need) return AccessResult::kNoAccess;
  host = reinterpret_cast<std::uint8_t*>(reinterpret_cast<std::uintptr_t>(r.base) + (iova - r.iova));
  odp_pid = r.odp_pid;
  return AccessResult::kOk;
}

AccessResult MrTable::check_remote(std::uint32_t rkey, std::uint64_t pd, std::uint32_t qpn, std::uint64_t iova,
                                   std::uint64_t len, int need, std::uint8_t*& host) const {
  std::int32_t odp_pid = 0;
  return check_remote(rkey, pd, qpn, iova, len, need, host, odp_pid);
}

AccessResult MrTable::check_remote(std::uint32_t rkey, std::uint64_t pd, std::uint32_t qpn, std::uint64_t iova,
                                   std::uint64_t len, int need, std::uint8_t*& host, std::int32_t& odp_pid) const {
  odp_pid = 0;
  // Valid and kind change only in control calls: an ordinary region's key
  // is checked as before, with no sequence counter.
  const std::uint32_t i = slot_of(rkey);
  if (i != 0 && i < slots_.size() && slots_[i].valid && slots_[i].is_window()) [[unlikely]] {
    return check_window(i, rkey, pd, qpn, iova, len, need, host, odp_pid);
  }
  const AccessResult r = check(rkey, true, pd, iova, len, need, host);
  if (r == AccessResult::kOk) odp_pid = slots_[i].odp_pid;
  return r;
}

}  // namespace uroce::mem
