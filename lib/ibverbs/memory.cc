// Protection domains and memory regions: ibv_alloc_pd, ibv_reg_mr (every
// form) and their inverses, on uroce's ProtectionDomain and MemoryRegion.
// Verbs' return conventions: NULL with errno, or an errno value.
#include <cerrno>
#include <cstdint>
#include <new>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {

ibv_mr* finish_mr(Mr* m, ibv_pd* ibv_pd, void* addr, std::size_t length) {
  if (m->mr == nullptr) {
    // zero length, outside device memory, REMOTE_WRITE/ATOMIC without
    // LOCAL_WRITE (EINVAL); out of keys or over uroced's budget (ENOMEM)
    const std::string& why = ctx_of(ibv_pd->context)->ctx->last_error();
    errno = why.find("too many") != std::string::npos || why.find("budget") != std::string::npos ? ENOMEM : EINVAL;
    delete m;
    return nullptr;
  }
  m->ibv.context = ibv_pd->context;
  m->ibv.pd = ibv_pd;
  m->ibv.addr = addr;
  m->ibv.length = length;
  m->ibv.handle = m->mr->lkey;
  m->ibv.lkey = m->mr->lkey;
  m->ibv.rkey = m->mr->rkey;
  hold_domain(ibv_pd);
  return &m->ibv;
}

namespace {

Pd* pd_of(ibv_pd* pd) {
  if (pd == nullptr || ctx_of(pd->context, reinterpret_cast<Pd*>(pd)->born) == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return reinterpret_cast<Pd*>(pd);
}

// The access bits uroce honours; the optional range (0x3ff00000, e.g.
// IBV_ACCESS_RELAXED_ORDERING) may be dropped by any provider, as
// ibv_reg_mr_iova2's man page allows: perftest and UCX ask for it.
constexpr unsigned kSupportedAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |
                                      IBV_ACCESS_MW_BIND;

ibv_mr* register_region(ibv_pd* ibv_pd, void* addr, std::size_t length, std::uint64_t iova, unsigned access) {
  Pd* pd = pd_of(ibv_pd);
  if (pd == nullptr) return nullptr;
  access &= ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  // HUGETLB says the memory is on huge pages, so an ODP region may be
  // faulted in by 2 MiB: a hint uroce has no use for (the kernel reaches any
  // page), dropped as the optional bits are.
  access &= ~static_cast<unsigned>(IBV_ACCESS_HUGETLB);
  if ((access & ~kSupportedAccess) != 0) {
    // Flush and atomic-write access need features uroce does not have.
    errno = unsupported(EOPNOTSUPP, "ibv_reg_mr: access flags beyond LOCAL_WRITE, REMOTE_WRITE/READ/ATOMIC, "
                                    "ZERO_BASED, ON_DEMAND and MW_BIND are not supported (flush, atomic write)");
    return nullptr;
  }
  if ((access & IBV_ACCESS_ZERO_BASED) != 0) iova = 0;
  // addr NULL is only implicit ODP's (length SIZE_MAX, ON_DEMAND).
  const bool implicit = addr == nullptr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND) != 0;
  if (addr == nullptr && length != 0 && !implicit) {
    errno = EINVAL;
    return nullptr;
  }
  auto* m = allocate<Mr>();
  if (m == nullptr) return nullptr;
  m->mr = pd->pd->reg_mr_iova(addr, length, iova, static_cast<int>(access & ~IBV_ACCESS_ZERO_BASED));
  return finish_mr(m, ibv_pd, addr, length);
}

}  // namespace

int advise_mr_op(ibv_pd* ibv_pd, ibv_advise_mr_advice advice, std::uint32_t flags, ibv_sge* sg_list,
                 std::uint32_t num_sge) {
  Pd* pd = pd_of(ibv_pd);
  if (pd == nullptr) return EINVAL;
  return pd->pd->advise_mr(advice, flags, sg_list, num_sge);
}

}  // namespace uroce::ibverbs

using uroce::ibverbs::allocate;
using uroce::ibverbs::Ctx;
using uroce::ibverbs::ctx_of;
using uroce::ibverbs::Mr;
using uroce::ibverbs::Pd;

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  Ctx* x = ctx_of(context);
  if (x == nullptr) return nullptr;
  auto* p = allocate<Pd>();
  if (p == nullptr) return nullptr;
  p->pd = x->ctx->alloc_pd();
  if (p->pd == nullptr) {  // attached: the service refused, or is gone
    delete p;
    errno = ENOMEM;
    return nullptr;
  }
  p->ibv.context = context;
  p->ibv.handle = p->pd->handle();
  return &p->ibv;
}

int ibv_dealloc_pd(ibv_pd* ibv_pd) {
  Pd* pd = uroce::ibverbs::pd_of(ibv_pd);
  if (pd == nullptr) return EINVAL;
  if (pd->protection != nullptr) return uroce::ibverbs::dealloc_parent_domain(pd);
  // EBUSY while regions or QPs use it, as the kernel answers, or parent
  // domains stand on it (as rdma-core's providers answer).
  if (pd->parents.load() != 0) return EBUSY;
  if (const int rc = ctx_of(ibv_pd->context)->ctx->dealloc_pd(pd->pd); rc != 0) return rc;
  delete pd;
  return 0;
}

// verbs.h turns ibv_reg_mr into a macro; the parentheses name the function.
ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, std::size_t length, int access) {
  return uroce::ibverbs::register_region(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr),
                                         static_cast<unsigned>(access));
}

ibv_mr*(ibv_reg_mr_iova)(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t iova, int access) {
  return uroce::ibverbs::register_region(pd, addr, length, iova, static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t iova, unsigned int access) {
  return uroce::ibverbs::register_region(pd, addr, length, iova, access);
}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, std::uint64_t, std::size_t, std::uint64_t, int, int) {
  errno = uroce::ibverbs::unsupported(EOPNOTSUPP, "ibv_reg_dmabuf_mr: dma-buf regions need a device with DMA");
  return nullptr;
}

int ibv_dereg_mr(ibv_mr* ibv_mr) {
  if (ibv_mr == nullptr || ctx_of(ibv_mr->context, reinterpret_cast<Mr*>(ibv_mr)->born) == nullptr) return EINVAL;
  auto* m = reinterpret_cast<Mr*>(ibv_mr);
  auto* pd = reinterpret_cast<Pd*>(ibv_mr->pd);
  if (const int rc = pd->pd->dereg_mr(m->mr); rc != 0) return rc;
  uroce::ibverbs::release_domain(ibv_mr->pd);
  delete m;
  return 0;
}

// ibv_rereg_mr: 0 or an ibv_rereg_mr_err_code, errno set: IBV_REREG_MR_ERR_INPUT
// for what rdma-core's libibverbs refuses before asking the device (unknown
// flags, a new translation without address or length, access without
// CHANGE_ACCESS, not our region or PD), IBV_REREG_MR_ERR_CMD for what the
// device refuses (no flag at all, bad access bits, the region in use).
// The region keeps its lkey and rkey. pd, addr, length and access are read
// only with their flag (pyverbs passes junk for a pd it does not change).
int ibv_rereg_mr(ibv_mr* ibv_mr, int flags, ibv_pd* ibv_pd, void* addr, std::size_t length, int access) {
  constexpr int kFlags = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  if (ibv_mr == nullptr || ctx_of(ibv_mr->context, reinterpret_cast<Mr*>(ibv_mr)->born) == nullptr ||
      (flags & ~kFlags) != 0 ||
      ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0 && (addr == nullptr || length == 0)) ||
      (access != 0 && (flags & IBV_REREG_MR_CHANGE_ACCESS) == 0)) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  auto* m = reinterpret_cast<Mr*>(ibv_mr);
  auto* pd = reinterpret_cast<Pd*>(ibv_mr->pd);
  uroce::ReregAttr change;
  change.flags = flags;
  if ((flags & IBV_REREG_MR_CHANGE_PD) != 0) {
    if (ibv_pd == nullptr || ibv_pd->context != ibv_mr->context ||
        ctx_of(ibv_pd->context, reinterpret_cast<Pd*>(ibv_pd)->born) == nullptr) {
      errno = EINVAL;
      return IBV_REREG_MR_ERR_INPUT;
    }
    change.pd = reinterpret_cast<Pd*>(ibv_pd)->pd;
  }
  bool zero_based = false;
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) != 0) {
    auto bits = static_cast<unsigned>(access) & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
    if ((bits & ~uroce::ibverbs::kSupportedAccess) != 0) {
      errno = uroce::ibverbs::unsupported(EOPNOTSUPP, "ibv_rereg_mr: access flags beyond LOCAL_WRITE, "
                                                      "REMOTE_WRITE/READ/ATOMIC, ZERO_BASED, ON_DEMAND and MW_BIND "
                                                      "are not supported");
      return IBV_REREG_MR_ERR_CMD;
    }
    zero_based = (bits & IBV_ACCESS_ZERO_BASED) != 0;
    change.access = static_cast<int>(bits & ~IBV_ACCESS_ZERO_BASED);
  }
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0) {
    change.addr = addr;
    change.length = length;
    change.iova = zero_based ? 0 : reinterpret_cast<std::uintptr_t>(addr);
  }
  // Memory windows bound to the region refuse it (EBUSY), as does an
  // on-demand region (EOPNOTSUPP): ProtectionDomain::rereg_mr's checks.
  if (const int rc = pd->pd->rereg_mr(m->mr, change); rc != 0) {
    errno = rc;
    return IBV_REREG_MR_ERR_CMD;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) != 0) ibv_mr->pd = ibv_pd;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0) {
    ibv_mr->addr = addr;
    ibv_mr->length = length;
  }
  return 0;
}

}  // extern "C"
