// The in-process backend (Context::open): the engines in this process, the
// memory region table they check every access against, the workers that run
// them and the control calls that hold them; the data path goes straight
// into the transport (lib/verbs/backend.h). Its bodies: local.cc (the
// context, workers, PDs, CQs, regions), local_qp.cc (QPs), ah.cc, srq.cc and
// stats.cc (beside the public objects they make or read).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/handover.h"
#include "engine/loopback.h"
#include "mem/arena.h"
#include "mem/mr_table.h"
#include "uroce/stats.h"
#include "verbs/backend.h"
#include "verbs/resolver.h"
#include "verbs/verbs_impl.h"

namespace uroce::internal {

class LocalBackend final : public Backend {
 public:
  explicit LocalBackend(Context& ctx);
  ~LocalBackend() override;

  // The backend of an in-process context (testing hooks, which exist only
  // in process); std::bad_cast for one attached to uroced.
  static LocalBackend& of(Context& ctx);

  bool attached() const override { return false; }
  std::uint64_t now_ns() const override { return c_.port.clock->now_ns(); }
  std::size_t engine_count() const override { return engines_.size(); }
  engine::Engine& engine(std::size_t i) override { return *engines_.at(i); }
  std::size_t progress(Context::ProgressFor why) override;
  std::size_t progress() { return progress(Context::ProgressFor::kAny); }
  std::uint64_t requests_received() const override;
  int start_workers(const std::vector<int>& cpus, Context::WorkerHook hook) override;
  void stop_workers() override;
  int set_progress(Context::Progress mode) override;
  Context::Progress progress_mode() const override { return progress_mode_; }
  void hand_to_helper() override;
  int query_gid(int index, ibv_gid& gid) override;
  Reach resolve_gid(const ibv_gid& gid, std::uint8_t mac[6]) override { return resolver_.query(gid, mac); }
  Reach lookup_gid(const ibv_gid& gid) override { return resolver_.look(gid, nullptr); }
  ResolveCounters resolve_counters() const override { return resolver_.counters(); }
  void* alloc_buffer(std::size_t bytes) override;
  void free_buffer(void* buffer) override;
  ProtectionDomain* alloc_pd() override;
  int dealloc_pd(ProtectionDomain* pd) override;
  MemoryRegion* reg_mr(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access,
                       bool copied) override;
  int dereg_mr(ProtectionDomain* pd, MemoryRegion* mr) override;
  std::unique_ptr<DeviceMemory> alloc_dm(std::size_t length) override;                   // dm.cc
  int free_dm(DeviceMemory* dm) override;                                                 // dm.cc
  MemoryRegion* reg_dm_mr(ProtectionDomain* pd, DeviceMemory* dm, std::uint64_t offset, std::size_t length,
                          int access) override;                                           // dm.cc
  MemoryRegion* reg_mr_empty(ProtectionDomain* pd, void* addr, int access);               // dm.cc
  MemoryWindow* alloc_mw(ProtectionDomain* pd, ibv_mw_type type) override;  // mw.cc
  XrcDomain* open_xrcd() override;                                          // xrc.cc
  int close_xrcd(XrcDomain* xrcd) override;                                 // xrc.cc
  int dealloc_mw(ProtectionDomain* pd, MemoryWindow* mw) override;          // mw.cc
  int rereg_mr(ProtectionDomain* pd, MemoryRegion* mr, const ReregAttr& change, std::optional<bool> copied) override;  // local_rereg_resize.cc
  CompletionQueue* create_cq(const CqAttr& attr) override;
  int resize_cq(CompletionQueue& cq, int cqe) override;                                   // local_rereg_resize.cc
  int query_clock(ClockValues& values) override;                                          // local_rereg_resize.cc
  int destroy_cq(CompletionQueue* cq) override;
  int arm_cq(CqImpl& cq, bool solicited_only) override;
  bool cq_overflowed(const CqImpl& cq) const override;
  QueuePair* create_qp(ProtectionDomain* pd, const QpInitAttr& attr, bool gsi) override;
  int destroy_qp(ProtectionDomain* pd, QueuePair* qp) override;
  int modify_qp(QueuePair& qp, const ibv_qp_attr& attr, int attr_mask) override;
  int set_transport_options(QueuePair& qp, const TransportOptions& options) override;  // transport_options.cc
  int query_qp(const QueuePair& qp, ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) override;
  void refresh_counters(const QueuePair&) override {}  // the engines count in place
  QueuePair::CongestionState congestion(const QueuePair& qp) override;
  AddressHandle* create_ah(ProtectionDomain* pd, const ibv_ah_attr& attr) override;      // ah.cc
  int destroy_ah(AddressHandle* ah) override;                                            // ah.cc
  SharedReceiveQueue* create_srq(ProtectionDomain* pd, const SrqInitAttr& attr, void (*on_limit)(void*),
                                 void* arg) override;                                    // srq.cc
  int destroy_srq(SharedReceiveQueue* srq) override;                                     // srq.cc
  std::vector<Stat> stats() override;                                                    // stats.cc
  std::vector<Stat> engine_stats(std::size_t engine) override;                           // stats.cc
  std::vector<std::uint32_t> qp_nums() override;                                         // stats.cc
  bool qp_stats(std::uint32_t qpn, QpStats& out) override;                               // stats.cc
  std::size_t qp_stats_page(std::uint32_t first_qpn, std::size_t max, std::vector<QpStats>& out,
                            std::size_t at) override;  // stats.cc

  // create_qp with a given QPN, outside a control call
  // (testing::create_qp_with_qpn; create_qp calls it inside one).
  QueuePair* create_qp_with_qpn(ProtectionDomain* pd, const QpInitAttr& attr, std::uint32_t qpn);
  // reg_mr with a given key, outside a control call (testing::reg_mr_with_key).
  MemoryRegion* reg_mr_with_key(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access,
                                std::uint32_t key);
  const mem::MrTable& mrs() const { return mrs_; }
  // An on-demand region (local_odp.cc) of process `pid`'s memory: neither
  // populated nor made known to the port; the engines reach it only through
  // mem/odp.h. reg_mr's answers.
  MemoryRegion* reg_mr_odp(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access,
                           std::int32_t pid);

 private:
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
  auto control(F&& f, Access access = Access::kChanges, QueuePair* one = nullptr) -> decltype(f());

  // The engine serving `qp` looks at it in its next poll.
  void wake_one(QueuePair& qp);
  transport::Qp* find_qp(std::uint32_t qpn) const;  // on any engine
  void publish_owners();  // the handover's QPN -> engine table (control path)

  // Waits until `gid`'s Ethernet address is known (0, `mac` filled), or it
  // is unreachable or 1.5 s passed (EHOSTUNREACH, with last_error()). Never
  // inside a control call: the engines keep running meanwhile (the workers,
  // or, without them, this thread polls them in short control calls, since
  // it may be the very thread that would call progress()).
  int wait_resolved(const ibv_gid& gid, std::uint8_t mac[6], const char* what);

  // The traffic class frames on the address vector `ah` carry: as
  // verbs/traffic_class.h rules with port.pfc_priority. One whose DSCP maps
  // outside the PFC priority is counted on engine `engine` (and warned
  // about, the first time, naming `what`). In a control call.
  std::uint8_t sent_traffic_class(const ibv_ah_attr& ah, std::size_t engine, const std::string& what);

  // The bodies of the control calls (local.cc, local_qp.cc).
  int dealloc_pd_now(ProtectionDomain* pd);
  CompletionQueue* create_cq_now(const CqAttr& attr);
  MemoryRegion* reg_mr_now(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access);
  std::unique_ptr<MemoryRegion> dereg_mr_now(MemoryRegion* mr);
  QueuePair* create_qp_now(ProtectionDomain* pd, const QpInitAttr& attr);
  int destroy_qp_now(QueuePair* qp);
  void send_held_ack(const QpImpl& q);
  int modify_now(QpImpl& q, const ibv_qp_attr& attr, int attr_mask, const std::uint8_t peer_mac[6]);
  void forget_completions(QpImpl& q);  // a QP moved to RESET (local_qp.cc)
  ibv_gid source_gid(const ibv_ah_attr& ah) const;

  Context& ctx_;
  ContextImpl& c_;  // the objects, port and limits both backends share
  mem::MrTable mrs_;
  // The engines run on the port's queues through it: frames to the
  // device's own GIDs come back inside uroce, as on an RNIC.
  engine::LoopbackPort loopback_;
  std::vector<std::unique_ptr<engine::Engine>> engines_;
  // qp_stats_page's index: every QP's number and engine, by number, made
  // again (in a control call) when an engine's QPs changed since; a page
  // then finds its QPs without looking at the others.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> qp_index_;
  std::uint64_t qp_index_changes_ = ~std::uint64_t{0};
  std::unique_ptr<engine::Handover> handover_;  // with more than one engine
  // create_qp's QPNs: a keyed permutation of the 24-bit space applied to a
  // counter, so they are unpredictable yet none comes back before 2^24 more
  // QPs were made (the key is drawn at the first create_qp).
  std::uint32_t next_qpn_ = 0;
  std::array<std::uint64_t, 4> qpn_key_{};
  bool qpn_keyed_ = false;
  // By QPN & (size - 1): how many live QPs have those low bits (create_qp's
  // choice of QPN). Grows (rebuilt) with the number of QPs, never shrinks;
  // every QP made counts itself in, destroy_qp counts it out.
  std::vector<std::uint32_t> qpn_low_used_;
  // Regions the port was not told of (internal::reg_mr_copied): frames from
  // them are copied. Under control calls.
  std::set<const MemoryRegion*> unported_;
  std::map<void*, mem::Buffer> buffers_;  // alloc_buffer's
  // Address resolution for the port (Context::resolve_gid).
  Resolver resolver_;
  bool warned_outside_pfc_ = false;  // control path

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
  std::vector<std::thread> workers_;
  std::atomic<bool> workers_running_{false};
  std::atomic<bool> workers_stop_{false};
  std::mutex control_mutex_;
  std::atomic<std::uint64_t> control_seq_{0};
  std::unique_ptr<std::atomic<std::uint64_t>[]> parked_;  // per worker: the odd control_seq it holds for
  std::unique_ptr<std::atomic<std::uint64_t>[]> polled_;  // per worker: the even control_seq of its last poll
  std::atomic<bool> polling_{false};                      // progress() is running the engines

  // Context::Progress::kCaller: the helper thread (run_helper) instead of
  // workers; progress() is then called by it and by any application
  // thread, one at a time (`polling` taken with an exchange: a caller that
  // finds it taken returns 0, someone else is polling), and runs `hook_`.
  // `caller_polls` counts the progress() calls of threads other than the
  // helper (approximately: racing callers may count once), so the helper
  // sees whether anyone else keeps the engines going.
  int start_helper(const std::vector<int>& cpus, Context::WorkerHook hook);
  int check_cpus(const std::vector<int>& cpus);  // one per engine, else EINVAL (last_error says so)
  void run_helper();
  // The helper sleeps up to `ns` or until woken (helper_kick, a futex):
  // by hand_to_helper() or stop_workers(), since its last look at the
  // count (`kick_seen`) included.
  void helper_sleep(std::uint64_t ns, std::uint32_t kick_seen);
  // PacketIo::thread_start (true) or thread_stop on every queue of the
  // port, from a thread that runs the engines (a worker, the helper).
  void port_threads(bool start);
  Context::Progress progress_mode_ = Context::Progress::kWorkers;
  std::mutex helper_mutex_;  // starts and stops the helper
  std::thread helper_;
  std::atomic<bool> helper_running_{false};
  std::atomic<bool> helper_stop_{false};
  Context::WorkerHook hook_{};  // changed only in a control call
  std::atomic<std::uint64_t> caller_polls_{0};
  std::atomic<pid_t> caller_tid_{0};
  std::atomic<std::uint32_t> helper_kick_{0};  // the thread that called progress() last (not the helper)
  struct ThreadState {  // zero-initialised, as every thread_local
    bool in_helper;      // the helper thread
    bool progress_here;  // this thread holds `polling` (progress())
    pid_t tid;           // gettid(), once known; 0 before
  };
  // The default TLS model, though in a shared library each progress() then
  // looks `here` up with a call (__tls_get_addr): initial-exec, a plain load,
  // cannot be used, because EAL dlopens PMD plugins that pull in our
  // libibverbs.so.1 after start-up, and no static TLS block is left by then.
  static inline thread_local ThreadState here;
};

template <typename F>
auto LocalBackend::control(F&& f, Access access, QueuePair* one) -> decltype(f()) {
  struct Inside {
    Inside() { ++controls_here; }
    ~Inside() { --controls_here; }
  } inside;
  std::lock_guard<std::mutex> lock(control_mutex_);
  struct Release {
    LocalBackend& b;
    bool held;
    Access access;
    QueuePair* one;
    ~Release() {
      if (access == Access::kOneQp) {
        b.wake_one(*one);
      } else if (access == Access::kChanges) {
        for (auto& e : b.engines_) e->wake_all();
      }
      b.control_seq_.fetch_add(1, std::memory_order_release);
    }
  } release{*this, workers_running_.load(std::memory_order_acquire), access, one};
  const std::uint64_t seq = control_seq_.load(std::memory_order_relaxed) + 1;
  if (release.held) {
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      while (polled_[i].load(std::memory_order_acquire) < seq - 1) std::this_thread::yield();
    }
  }
  control_seq_.store(seq, std::memory_order_seq_cst);
  if (release.held) {
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      while (parked_[i].load(std::memory_order_acquire) != seq) std::this_thread::yield();
    }
  } else {
    // Not for this thread's own progress(), interrupted by a signal whose
    // handler calls exit() (the counters printed, the helper stopped): it
    // would never end.
    while (polling_.load(std::memory_order_seq_cst) && !here.progress_here) std::this_thread::yield();
  }
  return f();
}

}  // namespace uroce::internal
