// What the stack's own code reaches behind include/uroce/verbs.h: a
// Context's engines, and the private objects behind Context, CompletionQueue
// and QueuePair. lib/verbs builds the API with it; drivers (the simulator
// steps engines to their next timer) and tests (they look at engine and QP
// state) use it too. Not part of the public API: an embedder has
// Context::stats() and friends (include/uroce/stats.h).
#pragma once

#include <cstddef>
#include <memory>

#include "uroce/verbs.h"

namespace uroce {

namespace engine {
class Engine;
}  // namespace engine

namespace internal {

// The one friend of the public classes. Its aliases name their private Impl
// types for code outside those classes.
struct Access {
  using ContextImpl = Context::Impl;
  using CqImpl = CompletionQueue::Impl;
  using QpImpl = QueuePair::Impl;
  using SrqImpl = SharedReceiveQueue::Impl;
  using AhImpl = AddressHandle::Impl;

  static ContextImpl& impl(Context& c) { return *c.impl_; }
  static const ContextImpl& impl(const Context& c) { return *c.impl_; }
  static CqImpl& impl(CompletionQueue& cq) { return *cq.impl_; }
  static QpImpl& impl(QueuePair& qp) { return *qp.impl_; }
  static const QpImpl& impl(const QueuePair& qp) { return *qp.impl_; }
  static SrqImpl& impl(SharedReceiveQueue& srq) { return *srq.impl_; }
  static const SrqImpl& impl(const SharedReceiveQueue& srq) { return *srq.impl_; }

  // The constructors are private: a CQ or QP is made by its Context
  // (lib/verbs/verbs.cc, where the Impl types are complete).
  static std::unique_ptr<CompletionQueue> make_cq(std::unique_ptr<CqImpl> impl);
  static std::unique_ptr<QueuePair> make_qp(Context* ctx, std::unique_ptr<QpImpl> impl);
  static std::unique_ptr<SharedReceiveQueue> make_srq(std::unique_ptr<SrqImpl> impl);
  static std::unique_ptr<AddressHandle> make_ah(std::unique_ptr<AhImpl> impl);
  static AhImpl& impl(AddressHandle& ah) { return *ah.impl_; }
};

using ContextImpl = Access::ContextImpl;
using CqImpl = Access::CqImpl;
using QpImpl = Access::QpImpl;
using SrqImpl = Access::SrqImpl;
using AhImpl = Access::AhImpl;

// The objects behind the public ones (defined in lib/verbs/verbs_impl.h).
inline ContextImpl& impl_of(Context& c) { return Access::impl(c); }
inline const ContextImpl& impl_of(const Context& c) { return Access::impl(c); }
inline CqImpl& impl_of(CompletionQueue& cq) { return Access::impl(cq); }
inline QpImpl& impl_of(QueuePair& qp) { return Access::impl(qp); }
inline const QpImpl& impl_of(const QueuePair& qp) { return Access::impl(qp); }
inline SrqImpl& impl_of(SharedReceiveQueue& srq) { return Access::impl(srq); }
inline const SrqImpl& impl_of(const SharedReceiveQueue& srq) { return Access::impl(srq); }

// The context's engines, one per port queue (PortConfig::queues): engine i
// serves queue i. engine_of throws std::out_of_range past engine_count().
// An engine belongs to the thread that runs it: read it from that thread,
// or between two progress() calls.
engine::Engine& engine_of(Context& ctx, std::size_t i = 0);
std::size_t engine_count(const Context& ctx);

// The General Services QP of `pd`'s context (IBTA 13.4.6: QP1, a UD QP
// that takes the GSI Q_Key 0x80010000), for the communication manager
// (lib/cm). `attr.qp_type` is ignored (UD). nullptr, with last_error(), if
// the context has one already or is attached to uroced.
QueuePair* create_gsi_qp(ProtectionDomain* pd, const QpInitAttr& attr);
// A memory region the port is not told of (no DPDK external memory, no DMA
// mapping): frames sent from it are copied, never read by the NIC. For
// uroced, whose regions beyond a client's share of the port's registrations
// (DPDK has 128 for the whole process) must not take others' share.
// Otherwise as ProtectionDomain::reg_mr_iova.
MemoryRegion* reg_mr_copied(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access);
// An on-demand region (IBV_ACCESS_ON_DEMAND) of process `pid`'s memory, for
// uroced: the engines reach its pages only through the kernel
// (process_vm_readv/writev on `pid`, mem/odp.h), none mapped here.
// Otherwise as ProtectionDomain::reg_mr_iova.
MemoryRegion* reg_mr_odp(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access,
                         std::int32_t pid);
// A region of no bytes at iova 0 over `addr` (lib/verbs/dm.cc: ibv_reg_dm_mr
// of length 0; uroced's for its clients' device memory). In process only.
MemoryRegion* reg_mr_empty(ProtectionDomain* pd, void* addr, int access);
// ProtectionDomain::rereg_mr whose new translation the port is told of
// (`copied` false) or not (true), whatever the old one was (uroced).
int rereg_mr_as(ProtectionDomain* pd, MemoryRegion* mr, const ReregAttr& change, bool copied);
// Completions waiting in an in-process CQ (a snapshot; 0 attached).
std::uint32_t cq_waiting(CompletionQueue& cq);
// The context's clock, in nanoseconds (virtual on a simulated link).
std::uint64_t now_ns(Context& ctx);
// Unpredictable bytes (the kernel's CSPRNG), for what a peer on the link must
// not guess: keys, QPNs, the CM's comm IDs and starting PSNs.
void random_bytes(void* dst, std::size_t bytes);
// The context's address resolver (Context::resolve_gid): its counters
// (verbs/resolver.h UROCE_RESOLVE_COUNTER_LIST), by name; 0 for an unknown
// name or an attached context.
std::uint64_t resolve_counter(const Context& ctx, const char* name);
// Context::resolve_gid without starting a resolution (the CM, when it may
// wait on no more peers): kKnown, kUnreachable (negatively cached), else
// kPending with nothing asked. kKnown for an attached context.
Reach lookup_gid(Context& ctx, const ibv_gid& gid);

}  // namespace internal
}  // namespace uroce
