// Memory windows (IBTA 10.6.7) behind the public API: ProtectionDomain's
// alloc_mw and dealloc_mw, QueuePair::bind_mw (type 1: a bind work request
// with the next rkey), and the in-process backend's halves (a window is a
// slot of the engines' region table, lib/mem/mr_window.cc). Binds and
// invalidations run on the engine, in the send queue's order
// (lib/transport/requester.cc).
#include <cerrno>

#include "verbs/local.h"
#include "verbs/verbs_impl.h"

namespace uroce {

namespace {
internal::Backend& backend_of(Context& ctx) { return *internal::Access::impl(ctx).backend; }
}  // namespace

MemoryWindow* ProtectionDomain::alloc_mw(ibv_mw_type type) { return backend_of(*ctx_).alloc_mw(this, type); }

int ProtectionDomain::dealloc_mw(MemoryWindow* mw) { return backend_of(*ctx_).dealloc_mw(this, mw); }

int QueuePair::bind_mw(MemoryWindow* mw, const ibv_mw_bind& bind) {
  if (mw == nullptr || mw->type() != IBV_MW_TYPE_1) return EINVAL;
  // o10-36.2.2: a type 1 window is never zero-based.
  if (bind.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) return EINVAL;
  // The next rkey: the same window, the consumer's key (low 8 bits) moved
  // on, as ibv_inc_rkey does; the old rkey stops working when it executes.
  const std::uint32_t next = (mw->rkey() & 0xffffff00u) | ((mw->rkey() + 1) & 0xffu);
  ibv_send_wr wr{};
  wr.wr_id = bind.wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind.send_flags;
  wr.bind_mw.mw = mw->ibv();
  wr.bind_mw.rkey = next;
  wr.bind_mw.bind_info = bind.bind_info;
  ibv_send_wr* bad = nullptr;
  const int rc = post_send(&wr, &bad);
  if (rc == 0) mw->set_rkey(next);
  return rc;
}

namespace internal {

MemoryWindow* LocalBackend::alloc_mw(ProtectionDomain* pd, ibv_mw_type type) {
  return control([&]() -> MemoryWindow* {
    std::uint32_t key = 0;
    if (const int rc = mrs_.add_window(pd->id(), type, key); rc != 0) {
      c_.fail(rc, rc == ENOMEM ? "too many memory regions and windows (the device's max_mr)"
                               : "memory windows are of type 1 or 2");
      return nullptr;
    }
    c_.mws_owned.push_back(std::make_unique<MemoryWindow>(pd, type, key, key));
    return c_.mws_owned.back().get();
  });
}

int LocalBackend::dealloc_mw(ProtectionDomain* pd, MemoryWindow* mw) {
  return control([&] {
    bool ours = false;
    for (const auto& w : c_.mws_owned) ours = ours || w.get() == mw;
    if (!ours || mw->pd() != pd) return c_.fail(EINVAL, "not a memory window of this PD");
    // By the key it was allocated with (its handle): the window's slot, whatever it is bound as.
    mrs_.remove_window(mw->handle());
    erase_owned(c_.mws_owned, static_cast<const MemoryWindow*>(mw));
    return 0;
  });
}

}  // namespace internal
}  // namespace uroce
