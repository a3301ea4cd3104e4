// The objects behind include/uroce/verbs.h (their private Impl types; code
// outside the classes reaches them through verbs/internal.h), and the small
// testing interface (tests that replay captured traffic need a given QPN and
// rkey).
#pragma once

#include <array>
#include <atomic>
#include <mutex>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "mem/mr_table.h"
#include "service/client.h"
#include "transport/qp.h"
#include "uroce/verbs.h"
#include "verbs/backend.h"
#include "verbs/internal.h"
#include "verbs/resolver.h"

namespace uroce {

// Each engine that serves a QP of this CQ produces into a ring of its own
// (each ring has one producer), made on the control path when the first such
// QP appears; poll() drains them in turn. Each holds `capacity` entries.
struct CompletionQueue::Impl {
  Impl(std::uint32_t cqe, std::size_t engines)
      : capacity(cqe), rings(engines), published(std::make_unique<std::atomic<transport::CompletionRing*>[]>(engines)) {}
  // CompletionQueue::poll: set by the backend's create_cq (the rings below,
  // or the daemon's through `remote`). `stamps`: nullptr, or where each
  // completion's timestamp goes (a CQ made with completion_timestamps).
  int (*poll)(Impl& cq, int n, ibv_wc* wc, std::uint64_t* stamps) = nullptr;
  internal::Backend* backend = nullptr;  // arm, overflowed (the CQ has no Context)
  transport::CqEvents events;  // events.fire == nullptr: no completion events
  transport::CompletionRing& ring_for(std::size_t engine);  // control path
  int poll_rings(int n, ibv_wc* wc, std::uint64_t* stamps);
  // Completion timestamps: each engine's ring stamped with this clock
  // (the engines' clock; nullptr: not stamped).
  Clock* stamp_clock = nullptr;

  std::uint32_t capacity;
  bool timestamps = false;  // made with CqAttr::completion_timestamps
  std::uint32_t users = 0;  // QPs attached (control path)
  std::vector<std::unique_ptr<transport::CompletionRing>> rings;
  std::unique_ptr<std::atomic<transport::CompletionRing*>[]> published;  // what poll() reads
  std::size_t next = 0;  // the ring poll() starts with (the polling thread's)
  // Attached to uroced (Context::attach): the ring the daemon fills; the
  // fields above stay unused.
  std::unique_ptr<service::RemoteCq> remote;
  ~Impl();
};

struct QueuePair::Impl {
  // QueuePair::post_send and post_recv: set by the backend's create_qp.
  int (*post_send)(QueuePair& qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) = nullptr;
  int (*post_recv)(QueuePair& qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) = nullptr;
  transport::Qp qp;
  ProtectionDomain* pd = nullptr;
  QpInitAttr init;
  std::uint32_t engine = 0;  // which engine serves it
  // Attached to uroced: the rings the daemon drains; `qp` holds only the
  // QPN and the counters last fetched.
  std::unique_ptr<service::RemoteQp> remote;
  ~Impl();
};

struct SharedReceiveQueue::Impl {
  transport::Srq srq;
  ProtectionDomain* pd = nullptr;
  SrqInitAttr init;
  int engine = -1;          // the engine serving its QPs; -1 while none does (control path)
  std::uint32_t users = 0;  // QPs attached (control path)
  // Attached to uroced: the ring the daemon drains, and its calls; `srq`
  // stays unused.
  std::unique_ptr<service::RemoteSrq> remote;
};

// Standard layout with the verbs handle first: AddressHandle::of() finds
// the Impl from the ibv_ah* a WR carries (after checking, by its handle,
// that it is a live one: lib/verbs/ah.cc).
struct AddressHandle::Impl {
  ibv_ah ah{};
  AddressHandle* self = nullptr;
  ProtectionDomain* pd = nullptr;
  ibv_ah_attr attr{};
  wire::PathHeader path;  // the headers each UD WR to it copies
};

// What both backends share: the verbs objects, the port and limits, and
// error reporting. The rest of each backend's state is its own
// (verbs/local.h, lib/verbs/service_backend.cc).
struct Context::Impl {
  explicit Impl(const PortConfig& p) : port(p) {}
  ~Impl();
  // The engines here (Context::open) or uroced's (Context::attach), chosen
  // once: every control call goes through it.
  std::unique_ptr<internal::Backend> backend;
  PortConfig port;  // attached: the daemon's port's addresses and MTU only
  DeviceLimits limits;
  std::vector<std::unique_ptr<ProtectionDomain>> pds;
  std::vector<std::unique_ptr<MemoryRegion>> mrs_owned;
  std::vector<std::unique_ptr<MemoryWindow>> mws_owned;
  std::vector<std::unique_ptr<CompletionQueue>> cqs;
  std::vector<std::unique_ptr<QueuePair>> qps;
  std::vector<std::unique_ptr<SharedReceiveQueue>> srqs;
  std::vector<std::unique_ptr<AddressHandle>> ahs;
  std::vector<std::unique_ptr<XrcDomain>> xrcds;
  std::uint32_t next_xrcd = 0;  // in process: handles of XRC domains
  std::uint32_t next_srqn = 0;  // in process: numbers of XRC SRQs
  // Device memory (lib/verbs/dm.cc), and its bytes held (whole pages), under dm_mutex.
  std::mutex dm_mutex;
  std::vector<std::unique_ptr<DeviceMemory>> dms;
  std::uint64_t dm_bytes = 0;

  // GID table: 0 IPv6 link-local, 1 IPv4-mapped (Context::query_gid).
  int query_gid(int index, ibv_gid& gid);

  // Records `message` as the calling thread's last error on this context
  // (Context::last_error) and returns `err`. Per thread: two threads that
  // post at once each read their own message.
  int fail(int err, std::string message);
  // The same without logging: post_send and post_recv (the data path).
  int note(int err, std::string message);
};

// The XRC domain's SRQs as its target QPs' engine finds them.
struct XrcDomain::Targets : transport::XrcDomain {};

namespace internal {
// A process-wide address handle number (AddressHandle's ibv_ah::handle,
// given back by its destructor); 0 when all 32767 are in use.
std::uint32_t take_ah_handle();

// Destroys *p if `v` owns it; false if it does not (not an object of this
// context).
template <typename T>
bool erase_owned(std::vector<std::unique_ptr<T>>& v, const T* p) {
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it->get() == p) {
      v.erase(it);
      return true;
    }
  }
  return false;
}

// ProtectionDomain::rereg_mr's checks, both backends: 0 and `to`, the
// region as it would be after (what does not change, as it is), or EINVAL
// with the reason recorded (local_rereg_resize.cc).
int check_rereg(ContextImpl& c, const Context& ctx, const MemoryRegion& mr, const ReregAttr& change, ReregAttr& to);

// The backends (verbs/local.h, lib/verbs/service_backend.cc), made once
// the Context exists.
std::unique_ptr<Backend> make_local_backend(Context& ctx);
std::unique_ptr<Backend> make_service_backend(Context& ctx, std::unique_ptr<service::Client> client);
}  // namespace internal

namespace testing {

QueuePair* create_qp_with_qpn(ProtectionDomain* pd, const QpInitAttr& attr, std::uint32_t qpn);
// The identity the next PD of this process gets (ProtectionDomain::id()):
// tests that need PDs made after 2^32 others.
void set_next_pd_id(std::uint64_t id);
MemoryRegion* reg_mr_with_key(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                              int access, std::uint32_t key);
transport::Qp& transport_qp(QueuePair* qp);
// The memory region table of an in-process context (std::bad_cast for one
// attached to uroced).
const mem::MrTable& mr_table(Context& ctx);

}  // namespace testing
}  // namespace uroce
