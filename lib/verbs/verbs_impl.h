// The objects behind include/uroce/verbs.h (their private Impl types; code
// outside the classes reaches them through verbs/internal.h), and the small
// testing interface (tests that replay captured traffic need a given QPN and
// rkey).
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/handover.h"
#include "mem/arena.h"
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
  // or the daemon's through `remote`).
  int (*poll)(Impl& cq, int n, ibv_wc* wc) = nullptr;
  internal::Backend* backend = nullptr;  // arm, overflowed (the CQ has no Context)
  transport::CqEvents events;  // events.fire == nullptr: no completion events
  transport::CompletionRing& ring_for(std::size_t engine);  // control path
  int poll_rings(int n, ibv_wc* wc);

  std::uint32_t capacity;
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

struct Context::Impl {
  explicit Impl(const PortConfig& p);
  explicit Impl(const service::HelloReply& hello);  // attached to uroced: the daemon's limits and port
  ~Impl();
  // The engines here (Context::open) or uroced's (Context::attach), chosen
  // once: every control call goes through it. Attached to uroced there are
  // no engines here, and the fields that serve them stay unused.
  std::unique_ptr<internal::Backend> backend;
  PortConfig port;
  DeviceLimits limits;
  mem::MrTable mrs;
  std::vector<std::unique_ptr<engine::Engine>> engines;
  std::unique_ptr<engine::Handover> handover;  // with more than one engine
  // create_qp's QPNs: a keyed permutation of the 24-bit space applied to a
  // counter, so they are unpredictable yet none comes back before 2^24 more
  // QPs were made (the key is drawn at the first create_qp).
  std::uint32_t next_qpn = 0;
  std::array<std::uint64_t, 4> qpn_key{};
  bool qpn_keyed = false;
  std::vector<std::unique_ptr<ProtectionDomain>> pds;
  std::vector<std::unique_ptr<MemoryRegion>> mrs_owned;
  // Regions the port was not told of (internal::reg_mr_copied): frames from
  // them are copied. Under control calls.
  std::set<const MemoryRegion*> unported;
  std::vector<std::unique_ptr<CompletionQueue>> cqs;
  std::vector<std::unique_ptr<QueuePair>> qps;
  // By QPN & (size - 1): how many live QPs have those low bits (create_qp's
  // choice of QPN). Grows (rebuilt) with the number of QPs, never shrinks;
  // every QP made counts itself in, destroy_qp counts it out.
  std::vector<std::uint32_t> qpn_low_used;
  std::vector<std::unique_ptr<SharedReceiveQueue>> srqs;
  std::vector<std::unique_ptr<AddressHandle>> ahs;
  std::map<void*, mem::Buffer> buffers;

  // GID table: 0 IPv6 link-local, 1 IPv4-mapped (Context::query_gid).
  int query_gid(int index, ibv_gid& gid);

  // Address resolution for the port (Context::resolve_gid); nullptr when
  // attached to uroced.
  std::unique_ptr<Resolver> resolver;
  // Waits until `gid`'s Ethernet address is known (0, `mac` filled), or it
  // is unreachable or 1.5 s passed (EHOSTUNREACH, with last_error()). Never
  // inside a control call: the engines keep running meanwhile (the workers,
  // or, without them, this thread polls them in short control calls, since
  // it may be the very thread that would call progress()).
  int wait_resolved(const ibv_gid& gid, std::uint8_t mac[6], const char* what);

  // Records `message` as the calling thread's last error on this context
  // (Context::last_error) and returns `err`. Per thread: two threads that
  // post at once each read their own message.
  int fail(int err, std::string message);
  // The same without logging: post_send and post_recv (the data path).
  int note(int err, std::string message);

  // The traffic class frames on the address vector `ah` carry: as
  // verbs/traffic_class.h rules with port.pfc_priority. One whose DSCP maps
  // outside the PFC priority is counted on engine `engine` (and warned
  // about, the first time, naming `what`). In a control call.
  std::uint8_t sent_traffic_class(const ibv_ah_attr& ah, std::size_t engine, const std::string& what);
  bool warned_outside_pfc = false;  // control path

  transport::Qp* find_qp(std::uint32_t qpn) const;  // on any engine
  void publish_owners();  // the handover's QPN -> engine table (control path)

  // The engines' threads. A control call holds them all: it makes
  // control_seq odd, waits until every worker has parked on that value
  // between two polls, runs in the caller's thread, and makes it even again.
  // One control call at a time, and never two in a row without a poll of
  // every worker between them: a control call first waits until each
  // worker has polled since the last one ended (`polled`), so a thread that
  // makes control calls back to back (telemetry, a stats loop) slows the
  // engines but cannot starve them.
  //
  // Without workers the engines run in whichever thread calls progress(),
  // and a control call may come from another one (telemetry's). progress()
  // sets `polling`, then polls only if control_seq is even; a control call
  // makes control_seq odd, then waits until `polling` is clear. Each side
  // stores, then loads what the other stores, all seq_cst: at least one of
  // them sees the other, so the engines never run beside a control call.
  std::vector<std::thread> workers;
  std::atomic<bool> workers_running{false};
  std::atomic<bool> workers_stop{false};
  std::mutex control_mutex;
  std::atomic<std::uint64_t> control_seq{0};
  std::unique_ptr<std::atomic<std::uint64_t>[]> parked;  // per worker: the odd control_seq it holds for
  std::unique_ptr<std::atomic<std::uint64_t>[]> polled;  // per worker: the even control_seq of its last poll
  std::atomic<bool> polling{false};                      // progress() is running the engines

  // The engine serving `qp` looks at it in its next poll.
  static void wake_one(Impl& c, QueuePair& qp);

  // Runs f as a control call. Unless it only reads, every engine then looks
  // at all its QPs once (f may have changed their state or attributes). A
  // call on one QP wakes only it (kOneQp: `one`), and creating a QP wakes
  // none (kAddsQp: the engine's add_qp looks at the new one): with 10,000
  // QPs, waking them all made their set-up quadratic.
  enum class Access { kChanges, kReadsOnly, kOneQp, kAddsQp };
  // The control calls this thread is in, counted from before it asks for the
  // lock until after it gives it back: stop_workers() from inside one (exit()
  // from a signal handler that interrupted it) must not wait for the lock.
  static inline thread_local int controls_here = 0;
  template <typename F>
  auto control(F&& f, Access access = Access::kChanges, QueuePair* one = nullptr) -> decltype(f()) {
    struct Inside { Inside() { ++controls_here; } ~Inside() { --controls_here; } } inside;
    std::lock_guard<std::mutex> lock(control_mutex);
    struct Release {
      Impl& c;
      bool held;
      Access access;
      QueuePair* one;
      ~Release() {
        if (access == Access::kOneQp) {
          wake_one(c, *one);
        } else if (access == Access::kChanges) {
          for (auto& e : c.engines) e->wake_all();
        }
        c.control_seq.fetch_add(1, std::memory_order_release);
      }
    } release{*this, workers_running.load(std::memory_order_acquire), access, one};
    const std::uint64_t seq = control_seq.load(std::memory_order_relaxed) + 1;
    if (release.held) {
      for (std::size_t i = 0; i < workers.size(); ++i) {
        while (polled[i].load(std::memory_order_acquire) < seq - 1) std::this_thread::yield();
      }
    }
    control_seq.store(seq, std::memory_order_seq_cst);
    if (release.held) {
      for (std::size_t i = 0; i < workers.size(); ++i) {
        while (parked[i].load(std::memory_order_acquire) != seq) std::this_thread::yield();
      }
    } else {
      while (polling.load(std::memory_order_seq_cst)) std::this_thread::yield();
    }
    return f();
  }
};

namespace internal {
// The backends (lib/verbs/local.cc, lib/verbs/service_backend.cc), made once
// the Context exists.
std::unique_ptr<Backend> make_local_backend(Context& ctx);
std::unique_ptr<Backend> make_service_backend(Context& ctx, std::unique_ptr<service::Client> client);
// The in-process bodies of create_ah and create_srq (lib/verbs/ah.cc, srq.cc).
AddressHandle* local_create_ah(ProtectionDomain* pd, const ibv_ah_attr& attr);
SharedReceiveQueue* local_create_srq(ProtectionDomain* pd, const SrqInitAttr& attr, void (*on_limit)(void*),
                                     void* arg);
}  // namespace internal

namespace testing {

QueuePair* create_qp_with_qpn(ProtectionDomain* pd, const QpInitAttr& attr, std::uint32_t qpn);
// The identity the next PD of this process gets (ProtectionDomain::id()):
// tests that need PDs made after 2^32 others.
void set_next_pd_id(std::uint64_t id);
MemoryRegion* reg_mr_with_key(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                              int access, std::uint32_t key);
transport::Qp& transport_qp(QueuePair* qp);

}  // namespace testing
}  // namespace uroce
