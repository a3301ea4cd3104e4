// Thread domains and parent domains (ibv_alloc_td, ibv_alloc_parent_domain):
// a parent domain is interchangeable with the PD it stands on (its man
// page), so it carries that PD's uroce ProtectionDomain and every verb that
// takes an ibv_pd works on it unchanged; what is its own is counted here:
// the QPs, SRQs, CQs, MRs and AHs made on it hold it (their ibv_*.pd points
// at it), so it is EBUSY until they go.
//
// The custom allocators are kept but never called. Verbs lets a provider
// use them for the buffers it allocates, each named by a resource type of
// the provider's own (rdma_driver_id in the upper half): uroce's queues are
// not buffers of this library's. In process they are the transport's rings,
// sized at creation and owned by the engine that serves the queue; through
// uroced they are shared-memory files the daemon makes and maps, which
// memory from a program's allocator could never be. A provider without
// such buffers has no resource type to ask for, and never calls them (as
// rxe and every provider without parent domains).
//
// A thread domain is a promise that one thread at a time uses the objects
// made on it, so a provider may share or drop their locks. uroce's post
// and poll locks are one uncontended atomic exchange each, so the promise
// changes nothing here; a thread domain is held by the parent domains that
// name it (EBUSY until they go).
#include <cerrno>
#include <cstdint>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

Pd* plain_pd_of(ibv_pd* pd, ibv_context* context) {
  if (pd == nullptr || pd->context != context) return nullptr;
  auto* p = reinterpret_cast<Pd*>(pd);
  if (ctx_of(context, p->born) == nullptr) return nullptr;
  return p->protection == nullptr ? p : nullptr;
}

}  // namespace

void hold_domain(ibv_pd* pd) {
  if (pd != nullptr && reinterpret_cast<Pd*>(pd)->protection != nullptr) ++reinterpret_cast<Pd*>(pd)->users;
}

void release_domain(ibv_pd* pd) {
  if (pd != nullptr && reinterpret_cast<Pd*>(pd)->protection != nullptr) --reinterpret_cast<Pd*>(pd)->users;
}

Pd* parent_domain_of(ibv_pd* pd) {
  if (pd == nullptr || ctx_of(pd->context, reinterpret_cast<Pd*>(pd)->born) == nullptr ||
      reinterpret_cast<Pd*>(pd)->protection == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return reinterpret_cast<Pd*>(pd);
}

int dealloc_parent_domain(Pd* pd) {
  // The man page: everything made with the parent domain goes first. Their
  // verbs objects point at it, so it stays while they live.
  if (pd->users.load() != 0) return EBUSY;
  --pd->protection->parents;
  if (pd->td != nullptr) --pd->td->parents;
  delete pd;
  return 0;
}

ibv_td* alloc_td_op(ibv_context* context, ibv_td_init_attr* attr) {
  if (ctx_of(context) == nullptr) return nullptr;
  if (attr == nullptr || attr->comp_mask != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* td = allocate<Td>();
  if (td == nullptr) return nullptr;
  td->ibv.context = context;
  return &td->ibv;
}

int dealloc_td_op(ibv_td* ibv_td) {
  if (ibv_td == nullptr || ctx_of(ibv_td->context, reinterpret_cast<Td*>(ibv_td)->born) == nullptr) return EINVAL;
  auto* td = reinterpret_cast<Td*>(ibv_td);
  if (td->parents.load() != 0) return EBUSY;
  delete td;
  return 0;
}

ibv_pd* alloc_parent_domain_op(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  if (ctx_of(context) == nullptr) return nullptr;
  constexpr std::uint32_t kKnown = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  Pd* protection = attr != nullptr ? plain_pd_of(attr->pd, context) : nullptr;
  // A PD of this context that is not itself a parent domain; a TD of it;
  // both allocators or neither.
  if (protection == nullptr || (attr->comp_mask & ~kKnown) != 0 ||
      (attr->td != nullptr &&
       (attr->td->context != context || ctx_of(context, reinterpret_cast<Td*>(attr->td)->born) == nullptr)) ||
      ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) != 0 &&
       (attr->alloc == nullptr || attr->free == nullptr))) {
    errno = EINVAL;
    return nullptr;
  }
  auto* p = allocate<Pd>();
  if (p == nullptr) return nullptr;
  p->ibv.context = context;
  p->ibv.handle = protection->ibv.handle;
  p->pd = protection->pd;
  p->protection = protection;
  p->td = reinterpret_cast<Td*>(attr->td);
  if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) != 0) p->pd_context = attr->pd_context;
  ++protection->parents;
  if (p->td != nullptr) ++p->td->parents;
  return &p->ibv;
}

}  // namespace uroce::ibverbs
