// On-demand paging at the API: ODP regions (reg_mr with IBV_ACCESS_ON_DEMAND,
// implicit ones over the whole address space) and advise_mr's prefetch.
// How the engines reach such memory without faulting: mem/odp.h.
#include <cerrno>
#include <cstdint>
#include <string>

#include "mem/odp.h"
#include "verbs/local.h"
#include "verbs/verbs_impl.h"

namespace uroce {

namespace internal {

MemoryRegion* LocalBackend::reg_mr_odp(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                       int access, std::int32_t pid) {
  // Implicit ODP (ibv_reg_mr(pd, NULL, SIZE_MAX, ...ON_DEMAND)): every
  // address is its own iova. Otherwise a range, as any region, that need
  // not be mapped yet: nothing is populated, pinned or told to the port.
  const bool implicit = addr == nullptr && length == SIZE_MAX;
  if (implicit) iova = 0;
  if (!implicit && (addr == nullptr || length == 0)) {
    c_.fail(EINVAL, "bad on-demand region: no address or zero length (implicit ODP is addr NULL, length SIZE_MAX)");
    return nullptr;
  }
  int rc = 0;
  MemoryRegion* made = control([&]() -> MemoryRegion* {
    std::uint32_t key = 0;
    rc = mrs_.add_odp(pd->id(), addr, iova, length, access, pid, key);
    if (rc != 0) return nullptr;
    auto mr = std::make_unique<MemoryRegion>();
    *mr = MemoryRegion{addr, length, iova, key, key, access, pd};
    unported_.insert(mr.get());  // not on the port: dereg_mr leaves the port alone
    c_.mrs_owned.push_back(std::move(mr));
    return c_.mrs_owned.back().get();
  });
  if (made == nullptr) {
    c_.fail(rc, rc == ENOMEM ? "too many memory regions (the device's max_mr)"
                             : "bad region: REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE, or unknown flags");
  }
  return made;
}

MemoryRegion* reg_mr_odp(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access,
                         std::int32_t pid) {
  return LocalBackend::of(pd->context()).reg_mr_odp(pd, addr, length, iova, access | IBV_ACCESS_ON_DEMAND, pid);
}

}  // namespace internal

// Prefetch populates the pages in the calling process, which owns the
// memory in process and attached alike (the daemon reads the client's pages
// through the kernel, which sees them populated the same). Every SGE is
// checked before any is prefetched.
int ProtectionDomain::advise_mr(int advice, std::uint32_t flags, const ibv_sge* sg_list, std::uint32_t num_sge) {
  internal::ContextImpl& c = internal::impl_of(*ctx_);
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
    return c.fail(ENOTSUP, "advise_mr: advice " + std::to_string(advice) + " is not a prefetch");
  }
  if ((flags & ~static_cast<std::uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) != 0 || (num_sge != 0 && sg_list == nullptr)) {
    return c.fail(EINVAL, "advise_mr: flags beyond IBV_ADVISE_MR_FLAG_FLUSH, or no SGE list");
  }
  const bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
  for (std::uint32_t i = 0; i < num_sge; ++i) {
    const ibv_sge& s = sg_list[i];
    const MemoryRegion* mr = nullptr;
    for (const auto& m : c.mrs_owned) {
      if (m->lkey == s.lkey) mr = m.get();
    }
    if (mr == nullptr || mr->pd != this || (mr->access & IBV_ACCESS_ON_DEMAND) == 0) {
      return c.fail(EFAULT, "advise_mr: SGE " + std::to_string(i) + "'s lkey is not an on-demand region of this PD");
    }
    if (s.addr < mr->iova || s.addr + s.length < s.addr || s.addr + s.length - mr->iova > mr->length) {
      return c.fail(EFAULT, "advise_mr: SGE " + std::to_string(i) + " leaves its region");
    }
    if (write && (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0) {
      return c.fail(EPERM, "advise_mr: PREFETCH_WRITE on a region registered without LOCAL_WRITE");
    }
  }
  // PREFETCH_NO_FAULT maps what is present: the engines read present
  // pages as they are, so there is nothing to do. With or without FLUSH the
  // prefetch is done when this returns (best effort, as the verbs say).
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) return 0;
  for (std::uint32_t i = 0; i < num_sge; ++i) {
    const ibv_sge& s = sg_list[i];
    const MemoryRegion* mr = nullptr;
    for (const auto& m : c.mrs_owned) {
      if (m->lkey == s.lkey) mr = m.get();
    }
    const std::uint64_t host = reinterpret_cast<std::uintptr_t>(mr->addr) + (s.addr - mr->iova);
    if (mem::odp_prefetch(host, s.length, write) != 0) {
      return c.fail(EFAULT, "advise_mr: SGE " + std::to_string(i) + " reaches pages that are not mapped");
    }
  }
  return 0;
}

}  // namespace uroce
