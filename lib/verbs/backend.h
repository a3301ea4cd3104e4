// The two ways a Context runs, chosen once (Context::open: LocalBackend,
// verbs/local.h, the engines in this process; Context::attach:
// ServiceBackend, lib/verbs/service_backend.cc, uroced's). Each keeps its
// own state; Context::Impl holds only what both share. The public objects
// (lib/verbs/verbs.cc) check arguments and call the control calls here; the data path never does: post_send, post_recv and poll go
// through the function pointers create_qp and create_cq store in the object
// (QueuePair::Impl, CompletionQueue::Impl), one indirect call per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "uroce/stats.h"
#include "uroce/verbs.h"
#include "verbs/internal.h"
#include "verbs/resolver.h"

namespace uroce::internal {

class Backend {
 public:
  // ServiceBackend closes the socket (the daemon frees the client's
  // objects); LocalBackend stops the workers and takes the QPs off the
  // engines.
  virtual ~Backend() = default;
  virtual bool attached() const = 0;
  // internal::now_ns: the port's clock in process (virtual on a simulated
  // link); attached, the host's monotonic clock (the daemon's port clock is
  // not this process's to read).
  virtual std::uint64_t now_ns() const = 0;
  // internal::engine_count, engine_of: the engines in this process (none
  // attached; engine() throws std::out_of_range past engine_count()).
  virtual std::size_t engine_count() const = 0;
  virtual engine::Engine& engine(std::size_t i) = 0;
  virtual std::size_t progress(Context::ProgressFor why) = 0;  // Context::progress
  virtual std::uint64_t requests_received() const = 0;  // Context::requests_received
  virtual int start_workers(const std::vector<int>& cpus, Context::WorkerHook hook) = 0;
  virtual void stop_workers() = 0;
  virtual int set_progress(Context::Progress mode) = 0;  // Context::set_progress
  virtual Context::Progress progress_mode() const = 0;
  virtual void hand_to_helper() {}  // Context::hand_to_helper
  virtual int query_gid(int index, ibv_gid& gid) = 0;
  virtual Reach resolve_gid(const ibv_gid& gid, std::uint8_t mac[6]) = 0;
  virtual Reach lookup_gid(const ibv_gid& gid) = 0;  // internal::lookup_gid
  virtual ResolveCounters resolve_counters() const = 0;  // internal::resolve_counter
  virtual void* alloc_buffer(std::size_t bytes) = 0;
  virtual void free_buffer(void* buffer) = 0;
  virtual ProtectionDomain* alloc_pd() = 0;
  virtual int dealloc_pd(ProtectionDomain* pd) = 0;
  // `copied`: internal::reg_mr_copied (the port is not told of the region).
  virtual MemoryRegion* reg_mr(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access,
                               bool copied) = 0;
  virtual int dereg_mr(ProtectionDomain* pd, MemoryRegion* mr) = 0;
  // Device memory (Context::alloc_dm, free_dm, ProtectionDomain::reg_dm_mr),
  // the arguments checked by lib/verbs/dm.cc: the memory (zeroed) and its
  // object, owned by ContextImpl::dms; the DM's own regions.
  virtual std::unique_ptr<DeviceMemory> alloc_dm(std::size_t length) = 0;
  virtual int free_dm(DeviceMemory* dm) = 0;
  virtual MemoryRegion* reg_dm_mr(ProtectionDomain* pd, DeviceMemory* dm, std::uint64_t offset, std::size_t length,
                                  int access) = 0;
  // Context::open_xrcd, close_xrcd (lib/verbs/xrc.cc).
  virtual XrcDomain* open_xrcd() = 0;
  virtual int close_xrcd(XrcDomain* xrcd) = 0;
  // ProtectionDomain::alloc_mw, dealloc_mw (lib/verbs/mw.cc).
  virtual MemoryWindow* alloc_mw(ProtectionDomain* pd, ibv_mw_type type) = 0;
  virtual int dealloc_mw(ProtectionDomain* pd, MemoryWindow* mw) = 0;
  // ProtectionDomain::rereg_mr (lib/verbs/rereg.cc in process).
  // `copied`: internal::rereg_mr_as (in process: the new translation
  // told to the port or not); nullopt: as the region was.
  virtual int rereg_mr(ProtectionDomain* pd, MemoryRegion* mr, const ReregAttr& change,
                       std::optional<bool> copied) = 0;
  // Sets CompletionQueue::Impl::poll.
  virtual CompletionQueue* create_cq(const CqAttr& attr) = 0;
  virtual int resize_cq(CompletionQueue& cq, int cqe) = 0;
  virtual int query_clock(ClockValues& values) = 0;
  virtual int destroy_cq(CompletionQueue* cq) = 0;
  virtual int arm_cq(CqImpl& cq, bool solicited_only) = 0;
  virtual bool cq_overflowed(const CqImpl& cq) const = 0;
  // Sets QueuePair::Impl::post_send and post_recv. `gsi`: QP1 (create_gsi_qp).
  virtual QueuePair* create_qp(ProtectionDomain* pd, const QpInitAttr& attr, bool gsi) = 0;
  virtual int destroy_qp(ProtectionDomain* pd, QueuePair* qp) = 0;
  virtual int modify_qp(QueuePair& qp, const ibv_qp_attr& attr, int attr_mask) = 0;
  // QueuePair::set_transport_options (lib/verbs/transport_options.cc).
  virtual int set_transport_options(QueuePair& qp, const TransportOptions& options) = 0;
  virtual int query_qp(const QueuePair& qp, ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) = 0;
  // Brings the QP's counters up to date (the daemon's copy); nothing in process.
  virtual void refresh_counters(const QueuePair& qp) = 0;
  virtual QueuePair::CongestionState congestion(const QueuePair& qp) = 0;
  virtual AddressHandle* create_ah(ProtectionDomain* pd, const ibv_ah_attr& attr) = 0;
  virtual int destroy_ah(AddressHandle* ah) = 0;
  virtual SharedReceiveQueue* create_srq(ProtectionDomain* pd, const SrqInitAttr& attr, void (*on_limit)(void*),
                                         void* arg) = 0;
  virtual int destroy_srq(SharedReceiveQueue* srq) = 0;
  // Context::stats, engine_stats, qp_nums, qp_stats: the engines' counters
  // (none attached: uroced --stats has the daemon's).
  virtual std::vector<Stat> stats() = 0;
  virtual std::vector<Stat> engine_stats(std::size_t engine) = 0;
  virtual std::vector<std::uint32_t> qp_nums() = 0;
  virtual bool qp_stats(std::uint32_t qpn, QpStats& out) = 0;
  virtual std::size_t qp_stats_page(std::uint32_t first_qpn, std::size_t max, std::vector<QpStats>& out,
                                    std::size_t at) = 0;
};

}  // namespace uroce::internal
