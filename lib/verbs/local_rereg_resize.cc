// The in-process backend's changes to live objects: ibv_rereg_mr (a region
// keeps its key under a new translation, PD or access), ibv_resize_cq (a CQ
// keeps what waits in it), and the clock completions are stamped with.
#include <time.h>

#include <algorithm>
#include <cerrno>

#include "verbs/local.h"

namespace uroce::internal {

namespace {

constexpr int kReregFlags = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;

std::uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

int check_rereg(ContextImpl& c, const Context& ctx, const MemoryRegion& mr, const ReregAttr& change,
                ReregAttr& to) {
  const int flags = change.flags;
  if (flags == 0 || (flags & ~kReregFlags) != 0) {
    return c.fail(EINVAL, "rereg_mr: flags must be a non-empty set of IBV_REREG_MR_CHANGE_TRANSLATION, "
                          "IBV_REREG_MR_CHANGE_PD and IBV_REREG_MR_CHANGE_ACCESS");
  }
  to = ReregAttr{flags, mr.pd, mr.addr, mr.length, mr.iova, mr.access};
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0) {
    if (change.addr == nullptr || change.length == 0) {
      return c.fail(EINVAL, "rereg_mr: a new translation needs an address and a non-zero length");
    }
    to.addr = change.addr;
    to.length = change.length;
    to.iova = change.iova;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) != 0) {
    if (change.pd == nullptr || &change.pd->context() != &ctx) {
      return c.fail(EINVAL, "rereg_mr: the new PD is not a PD of this context");
    }
    to.pd = change.pd;
  }
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) != 0) to.access = change.access;
  // An on-demand region is reached through the kernel, never pinned or
  // told to the port: changing one, or a region into one, is not done.
  if (((mr.access | to.access) & IBV_ACCESS_ON_DEMAND) != 0) {
    return c.fail(EOPNOTSUPP, "rereg_mr: on-demand regions cannot be re-registered: deregister the region and "
                              "register it again");
  }
  if (mem::MrTable::check_args(to.iova, to.length, to.access) != 0) {
    return c.fail(EINVAL, "rereg_mr: bad access (REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE, or an unknown "
                          "bit) or a range that wraps");
  }
  return 0;
}

int LocalBackend::rereg_mr(ProtectionDomain* pd, MemoryRegion* mr, const ReregAttr& change,
                           std::optional<bool> copied) {
  ReregAttr to;
  if (const int e = check_rereg(c_, ctx_, *mr, change, to); e != 0) return e;
  const bool translation = (change.flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
  // The new memory is populated and made known to the port before the
  // control call, as reg_mr does; the old is forgotten after it, once no
  // frame can be resolved under it. A region the port was not told of
  // (internal::reg_mr_copied) stays so.
  const bool was_ported = control([&] { return unported_.count(mr) == 0; }, Access::kReadsOnly);
  const bool ported = translation && copied.has_value() ? !*copied : was_ported;
  if (translation) {
    mem::populate(to.addr, to.length);
    if (ported) c_.port.io->register_memory(to.addr, to.length);
  }
  void* const old_addr = mr->addr;
  const std::size_t old_length = mr->length;
  const int rc = control([&] {
    const bool owned = std::any_of(c_.mrs_owned.begin(), c_.mrs_owned.end(), [mr](const auto& m) { return m.get() == mr; });
    if (!owned || mr->pd != pd) return c_.fail(EINVAL, "rereg_mr: not a registered memory region of this PD");
    // A region with memory windows bound to it is refused (EBUSY, as the
    // kernel's ib_uverbs_rereg_mr does), before the table changes.
    if (const int e = mrs_.rereg(mr->lkey, to.pd->id(), to.addr, to.iova, to.length, to.access); e != 0) {
      return e == EBUSY ? c_.fail(EBUSY, "rereg_mr: memory windows are bound to the region: unbind or deallocate "
                                         "them first")
                        : c_.fail(EINVAL, "rereg_mr: the region is not in the memory region table");
    }
    mr->pd = to.pd;
    mr->addr = to.addr;
    mr->length = to.length;
    mr->iova = to.iova;
    mr->access = to.access;
    if (ported) {
      unported_.erase(mr);
    } else {
      unported_.insert(mr);
    }
    return 0;
  });
  if (rc == 0 && translation && was_ported) c_.port.io->unregister_memory(old_addr, old_length);
  if (rc != 0 && translation && ported) c_.port.io->unregister_memory(to.addr, to.length);
  return rc;
}

int LocalBackend::resize_cq(CompletionQueue& cq, int cqe) {
  if (cqe < 1 || static_cast<std::uint32_t>(cqe) > c_.limits.max_cqe) {
    return c_.fail(EINVAL, "resize_cq: cqe must be between 1 and the device's max_cqe");
  }
  return control([&] {
    if (std::none_of(c_.cqs.begin(), c_.cqs.end(), [&cq](const auto& p) { return p.get() == &cq; })) {
      return c_.fail(EINVAL, "resize_cq: not a CQ of this context");
    }
    CqImpl& q = impl_of(cq);
    // The engines are held: what waits now is all that will wait until
    // the rings are replaced. Send work requests posted and not completed
    // count too: they complete into this CQ whatever its size.
    std::uint64_t waiting = 0;
    for (const auto& ring : q.rings) waiting += ring ? ring->waiting() : 0;
    for (const auto& qp : c_.qps) {
      const QpImpl& p = impl_of(*qp);
      if (p.init.send_cq == &cq) waiting += p.qp.sq.published() - p.qp.sq.consumed();
    }
    if (waiting > static_cast<std::uint64_t>(cqe)) {
      return c_.fail(EINVAL, "resize_cq: " + std::to_string(waiting) + " completions wait or will come from "
                                 "send work requests posted, more than " + std::to_string(cqe) + ": poll them first");
    }
    for (const auto& ring : q.rings) {
      if (ring) ring->resize(static_cast<std::uint32_t>(cqe));  // each holds at most `waiting`: cannot fail
    }
    q.capacity = static_cast<std::uint32_t>(cqe);
    return 0;
  });
}

int LocalBackend::query_clock(ClockValues& values) {
  // In a read-only control call: a Clock is the engines' (a simulated one
  // need not be safe beside them).
  return control([&] {
    values.raw_ns = c_.port.clock->now_ns();
    values.realtime_ns = realtime_ns();
    return 0;
  }, Access::kReadsOnly);
}

}  // namespace uroce::internal
