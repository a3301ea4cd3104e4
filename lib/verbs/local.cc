// The in-process backend's context (verbs/local.h): its engines, the workers
// that run them, the control calls that hold them, and the PDs, CQs, buffers
// and memory regions. Its QPs are in local_qp.cc.
#include "verbs/local.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>
#include <sched.h>

#include "log/log.h"
#include "mem/odp.h"
#include "verbs/traffic_class.h"
#include "wire/headers.h"

namespace uroce {
namespace internal {

namespace {

// PD identities, for the whole process and never reused: 64 bits do not
// wrap. They start above 2^32, so that a 32-bit handle() never equals one.
std::atomic<std::uint64_t> next_pd_id{(std::uint64_t{1} << 32) + 1};

// CompletionQueue::Impl::poll in process (set by create_cq_now).
int local_poll(CqImpl& cq, int n, ibv_wc* wc, std::uint64_t* stamps) { return cq.poll_rings(n, wc, stamps); }

constexpr std::uint32_t kIdlePollsBeforeYield = 64;

}  // namespace

LocalBackend::LocalBackend(Context& ctx)
    : ctx_(ctx),
      c_(impl_of(ctx)),
      mrs_(c_.limits.max_mr, random_bytes),
      loopback_(c_.port.queues, c_.port.mac, c_.port.gid),
      resolver_(&loopback_.queue(0)) {
  const PortConfig& port = c_.port;
  for (std::size_t i = 0; i < loopback_.size(); ++i) {
    engines_.push_back(std::make_unique<engine::Engine>(loopback_.queue(i), *port.clock, mrs_));
    engines_.back()->set_congestion_control(port.dcqcn);
    engines_.back()->set_delay_control(port.delay_cc);
    engines_.back()->set_min_ack_timeout(port.min_ack_timeout);
  }
  if (engines_.size() > 1) {
    handover_ = std::make_unique<engine::Handover>(static_cast<std::uint32_t>(engines_.size()));
    for (std::size_t i = 0; i < engines_.size(); ++i) {
      engines_[i]->attach(handover_.get(), static_cast<std::uint32_t>(i));
    }
  }
  parked_ = std::make_unique<std::atomic<std::uint64_t>[]>(engines_.size());
  polled_ = std::make_unique<std::atomic<std::uint64_t>[]>(engines_.size());
  // A CNP tells a sender to slow down; paused behind the very data it is
  // about, it arrives late when it matters most. ConnectX sends them on
  // priority 6 (DSCP 48), apart from the lossless data.
  if (const int lossless = port.pfc_priority;
      lossless >= 0 && port.dcqcn != nullptr && port.dcqcn->enabled &&
      (dscp_priority(port.dcqcn->cnp_dscp) == lossless || port.dcqcn->cnp_priority == lossless)) {
    logger().warn("CNPs (np_cnp_dscp {}, np_cnp_priority {}) share the PFC priority {}: pauses delay them; give "
                  "np_cnp_dscp and np_cnp_priority another priority (ConnectX: 48 and 6)",
                  port.dcqcn->cnp_dscp, port.dcqcn->cnp_priority, lossless);
  }
}

LocalBackend::~LocalBackend() {
  stop_workers();
  for (auto& qp : c_.qps) engines_[impl_of(*qp).engine]->remove_qp(&impl_of(*qp).qp);
  c_.qps.clear();
  for (auto& e : engines_) e->release_handed_in();
  for (auto& [addr, buffer] : buffers_) mem::unmap_buffer(buffer);
}

LocalBackend& LocalBackend::of(Context& ctx) { return dynamic_cast<LocalBackend&>(*impl_of(ctx).backend); }

std::unique_ptr<Backend> make_local_backend(Context& ctx) { return std::make_unique<LocalBackend>(ctx); }

namespace {

// The engines' threads (workers, the helper) are born with every signal
// blocked, so the application's handlers run on its own threads: one that
// calls exit() on a worker would wait for the worker itself (issue 27,
// item 5). Blocked in the creating thread while this lives.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &was_);
  }
  ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &was_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t was_;
};

}  // namespace

int LocalBackend::check_cpus(const std::vector<int>& cpus) {
  if (cpus.size() == engines_.size()) return 0;
  return c_.fail(EINVAL, "give one CPU per engine: this context has " + std::to_string(engines_.size()) +
                             " port queue(s), " + std::to_string(cpus.size()) + " CPU(s) given");
}

std::uint64_t LocalBackend::requests_received() const {
  std::uint64_t n = 0;
  for (const auto& e : engines_) n += e->counter(engine::EngineCounter::rx_requests);
  return n;
}

std::size_t LocalBackend::progress(Context::ProgressFor why) {
  ThreadState& t = here;  // one look-up of the thread's block (a shared library's TLS costs a call)
  if (!t.in_helper) {
    if (t.tid == 0) t.tid = static_cast<pid_t>(syscall(SYS_gettid));
    caller_polls_.store(caller_polls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    caller_tid_.store(t.tid, std::memory_order_relaxed);
  }
  // Not beside a control call from another thread, nor beside another
  // progress() (`polling`: whoever takes it polls, the others return).
  // Running on an application's thread, the engines reach one cancellation
  // point: a completion event's write(2), which lib/ibverbs makes with
  // cancellation off (rping cancels its CQ thread, which may be in here).
  if (polling_.exchange(true, std::memory_order_seq_cst)) return 0;
  t.progress_here = true;
  std::size_t n = 0;
  if (!workers_running_.load(std::memory_order_acquire) &&
      (control_seq_.load(std::memory_order_seq_cst) & 1) == 0) {
    const Context::WorkerHook hook = hook_;
    const engine::Poll poll_kind = why == Context::ProgressFor::kPolling ? engine::Poll::kHoldingAcks
                                   : why == Context::ProgressFor::kPosted ? engine::Poll::kSendingFirst
                                                                           : engine::Poll::kPlain;
    for (std::size_t i = 0; i < engines_.size(); ++i) {
      if (hook.before != nullptr) n += hook.before(hook.arg, i);
      n += engines_[i]->poll(poll_kind);
      if (hook.run != nullptr) n += hook.run(hook.arg, i);
    }
  }
  t.progress_here = false;
  polling_.store(false, std::memory_order_release);
  return n;
}

int LocalBackend::set_progress(Context::Progress mode) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (workers_running_.load() || helper_running_.load()) {
    return c_.fail(EBUSY, "the engines' threads run: stop_workers() before changing how they progress");
  }
  progress_mode_ = mode;
  return 0;
}

int LocalBackend::start_workers(const std::vector<int>& cpus, Context::WorkerHook hook) {
  if (progress_mode_ == Context::Progress::kCaller) return start_helper(cpus, hook);
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (workers_running_.load()) return c_.fail(EBUSY, "workers already run this context's engines");
  if (const int e = check_cpus(cpus); e != 0) return e;
  workers_stop_.store(false);
  workers_running_.store(true, std::memory_order_release);
  const SignalsBlocked blocked;  // inherited by the workers
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    parked_[i].store(0, std::memory_order_relaxed);
    polled_[i].store(0, std::memory_order_relaxed);
    workers_.emplace_back([this, i, cpu = cpus[i], hook] {
      cpu_set_t set;
      CPU_ZERO(&set);
      if (cpu >= 0) {
        CPU_SET(cpu, &set);
      } else {
        // Not pinned: any CPU the process may use. A thread inherits its
        // creator's affinity, and EAL pins the main thread to its first
        // lcore, where the worker would otherwise share one core with the
        // application thread that polls it.
        for (int k = 0; k < CPU_SETSIZE; ++k) CPU_SET(k, &set);
      }
      pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      port_threads(true);
      engine::Engine& e = *engines_[i];
      std::uint32_t idle = 0;  // polls in a row that moved no frame
      while (!workers_stop_.load(std::memory_order_relaxed)) {
        const std::uint64_t seq = control_seq_.load(std::memory_order_acquire);
        if (seq & 1) [[unlikely]] {
          // A control call holds the workers: park between two polls.
          parked_[i].store(seq, std::memory_order_release);
          while (control_seq_.load(std::memory_order_acquire) == seq) std::this_thread::yield();
          continue;
        }
        // An idle worker offers its CPU: with more busy threads than cores
        // (two processes with a worker and a polling application each on
        // a 2-core machine) a spinning worker would otherwise hold its core
        // for a whole time slice while the thread it waits for cannot run.
        // On a core of its own, sched_yield returns at once.
        std::size_t did = hook.before != nullptr ? hook.before(hook.arg, i) : 0;
        did += e.poll();
        if (hook.run != nullptr) did += hook.run(hook.arg, i);
        polled_[i].store(seq, std::memory_order_release);  // the next control call may hold it now
        idle = did != 0 ? 0 : idle + 1;
        if (idle >= kIdlePollsBeforeYield) sched_yield();
      }
      port_threads(false);
    });
    // Named (before start_workers returns), so that an embedding
    // application and its tests see uroce's threads come and go: none
    // outlives the last context (docs/embedding.md).
    pthread_setname_np(workers_.back().native_handle(), "uroce-worker");
  }
    return 0;
}

void LocalBackend::stop_workers() {
  if (controls_here != 0) return;  // this thread holds them already (issue 27, item 5)
  if (progress_mode_ == Context::Progress::kCaller) {
    std::lock_guard<std::mutex> lock(helper_mutex_);
    if (!helper_running_.load()) return;
    helper_stop_.store(true);
    hand_to_helper();  // wakes it
    helper_.join();
    helper_running_.store(false);
    // What the program posted last (its final SEND, the CM's DREQ before
    // exit) may wait in the engines for a poll that no one would make now:
    // polled for here until 64 polls in a row move nothing, 20 ms at most.
    if (!here.progress_here) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      for (int quiet = 0; quiet < 64 && std::chrono::steady_clock::now() < until;) {
        quiet = progress() != 0 ? 0 : quiet + 1;
      }
    }
    control([&] {
      hook_ = Context::WorkerHook{};
      return 0;
    }, Access::kReadsOnly);
    return;
  }
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!workers_running_.load()) return;
  workers_stop_.store(true);
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  workers_running_.store(false, std::memory_order_release);
}

int LocalBackend::start_helper(const std::vector<int>& cpus, Context::WorkerHook hook) {
  std::lock_guard<std::mutex> lock(helper_mutex_);
  if (helper_running_.load()) return c_.fail(EBUSY, "the helper already runs this context's engines");
  if (const int e = check_cpus(cpus); e != 0) return e;
  control([&] {
    hook_ = hook;
    return 0;
  }, Access::kReadsOnly);
  helper_stop_.store(false);
  helper_running_.store(true);
  const SignalsBlocked blocked;  // inherited by the helper
  helper_ = std::thread([this, cpu = cpus.front()] {
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    port_threads(true);
    run_helper();
    port_threads(false);
  });
  pthread_setname_np(helper_.native_handle(), "uroce-helper");
  return 0;
}

void LocalBackend::hand_to_helper() {
  if (!helper_running_.load(std::memory_order_relaxed)) return;
  helper_kick_.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, &helper_kick_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void LocalBackend::helper_sleep(std::uint64_t ns, std::uint32_t kick_seen) {
  if (helper_stop_.load(std::memory_order_relaxed)) return;
  const timespec ts{static_cast<time_t>(ns / 1'000'000'000u), static_cast<long>(ns % 1'000'000'000u)};
  // Returns at once if the count moved past `kick_seen` already: a kick
  // between the helper's last look and this call is not slept through.
  syscall(SYS_futex, &helper_kick_, FUTEX_WAIT_PRIVATE, kick_seen, &ts, nullptr, 0);
}

void LocalBackend::port_threads(bool start) {
  const auto each = [start](PacketIo* io) {
    if (io == nullptr) return;
    if (start) io->thread_start();
    else io->thread_stop();
  };
  if (c_.port.queues.empty()) each(c_.port.io);
  for (PacketIo* q : c_.port.queues) each(q);
}

namespace {

std::uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Whether thread `tid` of this process is running or wants to (state R in
// /proc/self/task/TID/stat), through `fd`, opened again when tid changes.
bool thread_runnable(pid_t tid, pid_t& open_tid, int& fd) {
  if (tid == 0) return false;
  if (tid != open_tid) {
    if (fd >= 0) close(fd);
    const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    open_tid = tid;
  }
  if (fd < 0) return false;
  char buf[256];
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // the name may hold blanks and parentheses
  return paren != nullptr && paren[1] == ' ' && paren[2] == 'R';
}

}  // namespace

// The helper of Context::Progress::kCaller. Three states:
//  - a caller polled since the last look: it keeps the engines going, so
//    the helper looks again kWatch later;
//  - nobody did: the helper polls, flat out while the thread that last
//    called progress() is blocked or asleep (a server waiting on a socket:
//    the core is the helper's), and, while that thread is runnable (a
//    program spinning on memory, perhaps on this very core), offering the
//    CPU after each poll that moved frames, so that the spinning thread
//    sees at once what they placed (one sched_yield, 0.15 us where nobody
//    waits for the core);
//    (and always after hand_to_helper(), whose caller sleeps for an event);
//  - no frame moved for kIdle: it sleeps, twice as long each time up to
//    kIdleMax, polling once between sleeps.
void LocalBackend::run_helper() {
  constexpr std::uint64_t kWatch = 1'000'000;     // ns between looks while callers poll
  constexpr std::uint64_t kIdle = 200'000;        // no frame for this long: idle
  constexpr std::uint64_t kIdleMin = 20'000, kIdleMax = 1'000'000;
  constexpr std::uint64_t kLookAtCaller = 100'000;  // ns between reads of its state (0.8 us each)
  here.in_helper = true;
  prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us: the default 50 us would stretch every short sleep
  pid_t stat_tid = 0;
  int stat_fd = -1;
  std::uint64_t seen = caller_polls_.load(std::memory_order_relaxed);
  std::uint64_t idle_sleep = kIdleMin;
  std::uint32_t kick_seen = helper_kick_.load(std::memory_order_acquire);
  while (!helper_stop_.load(std::memory_order_relaxed)) {
    if (const std::uint64_t calls = caller_polls_.load(std::memory_order_relaxed); calls != seen) {
      idle_sleep = kIdleMin;
      helper_sleep(kWatch, kick_seen);
      seen = calls;
    }
    // Woken by hand_to_helper(): what it waits for comes within a round
    // trip, so polled for from here, whatever the callers did before.
    const std::uint32_t kick = helper_kick_.load(std::memory_order_acquire);
    const bool kicked = kick != kick_seen;
    kick_seen = kick;
    if (kicked) {
      seen = caller_polls_.load(std::memory_order_relaxed);
    } else if (caller_polls_.load(std::memory_order_relaxed) != seen) {
      continue;  // a caller polled meanwhile: it drives them
    }
    std::uint64_t now = clock_ns(CLOCK_MONOTONIC);
    if (progress() == 0 && !kicked) {
      // Nothing moved: idle, unless a caller polls meanwhile.
      helper_sleep(idle_sleep, kick_seen);
      idle_sleep = std::min(idle_sleep * 2, kIdleMax);
      continue;
    }
    idle_sleep = kIdleMin;
    std::uint64_t last_work = now;
    // Woken by a caller about to sleep for an event, the helper offers the
    // core after every poll that moved frames: the one that makes the event
    // wakes that caller, which then runs at once instead of after a slice.
    bool shared = kicked || thread_runnable(caller_tid_.load(std::memory_order_relaxed), stat_tid, stat_fd);
    std::uint64_t looked = now;
    if (shared) sched_yield();
    bool moved = false;  // since the clock was last read
    for (std::uint32_t i = 1; !helper_stop_.load(std::memory_order_relaxed) &&
                              caller_polls_.load(std::memory_order_relaxed) == seen;
         ++i) {
      const bool did = progress() != 0;
      moved |= did;
      if (did && shared) sched_yield();
      // The clock every 16 polls: reading it each time was a tenth of a
      // busy helper's time.
      if (i % 16 != 0) continue;
      now = clock_ns(CLOCK_MONOTONIC);
      if (moved) last_work = now;
      moved = false;
      if (now - last_work > kIdle) break;
      if (now - looked > kLookAtCaller) {
        shared = kicked || thread_runnable(caller_tid_.load(std::memory_order_relaxed), stat_tid, stat_fd);
        looked = now;
      }
    }
  }
  if (stat_fd >= 0) close(stat_fd);
}

void LocalBackend::wake_one(QueuePair& qp) {
  QpImpl& q = impl_of(qp);
  engines_[q.engine]->wake(&q.qp);
}

transport::Qp* LocalBackend::find_qp(std::uint32_t qpn) const {
  for (const auto& e : engines_) {
    if (transport::Qp* qp = e->find_qp(qpn)) return qp;
  }
  return nullptr;
}

void LocalBackend::publish_owners() {
  if (!handover_) return;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> owners;
  owners.reserve(c_.qps.size());
  for (const auto& qp : c_.qps) owners.emplace_back(qp->qp_num(), impl_of(*qp).engine);
  handover_->set_owners(owners);
}

int LocalBackend::wait_resolved(const ibv_gid& gid, std::uint8_t mac[6], const char* what) {
  // The resolver gives up after a second (more if this thread was kept
  // from asking); the deadline only bounds the wait should it be busy with
  // others (Resolver::kMaxPending).
  const auto deadline = std::chrono::steady_clock::now() + Resolver::kAbandoned + std::chrono::milliseconds(500);
  for (;;) {
    switch (resolver_.query(gid, mac)) {
      case Reach::kKnown: return 0;
      case Reach::kUnreachable:
        return c_.fail(EHOSTUNREACH, std::string(what) +
                                         ": cannot resolve the peer's GID to an Ethernet address: no answer to ARP/ND "
                                         "within a second, now or in the last 5 s (is it on the link?)");
      case Reach::kPending: break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return c_.fail(EHOSTUNREACH, std::string(what) + ": the peer's GID was not resolved in time (too many "
                                                       "resolutions under way); try again");
    }
    if (!workers_running_.load(std::memory_order_acquire)) {
      // Nobody else may be polling the port's queues: poll them here, in a
      // short control call (exclusive with progress() in other threads).
      control([&] {
        for (auto& e : engines_) e->poll();
        return 0;
      }, Access::kReadsOnly);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

std::uint8_t LocalBackend::sent_traffic_class(const ibv_ah_attr& ah, std::size_t engine, const std::string& what) {
  const SentClass s = internal::sent_traffic_class(ah.grh.traffic_class, c_.port.pfc_priority);
  if (s.outside_pfc) {
    engines_.at(engine)->add_counter(engine::EngineCounter::paths_outside_pfc_priority);
    if (!warned_outside_pfc_) {
      warned_outside_pfc_ = true;
      const int dscp = ah.grh.traffic_class >> 2;
      const int pfc = c_.port.pfc_priority;
      logger().warn("{}: traffic class {:#x} is DSCP {}, priority {}, not the PFC priority {}: its packets are not "
                    "lossless; leave the traffic class 0 or give a DSCP from {} to {} (warned once; counted in "
                    "paths_outside_pfc_priority)",
                    what, ah.grh.traffic_class, dscp, dscp_priority(static_cast<std::uint8_t>(dscp)), pfc, pfc * 8,
                    pfc * 8 + 7);
    }
  }
  return s.traffic_class;
}

int LocalBackend::query_gid(int index, ibv_gid& gid) {
  if (index == 1) {
    gid = c_.port.gid;
    return 0;
  }
  if (index == 0) {
    const wire::Ipv6Addr a = wire::ipv6_link_local(c_.port.mac);
    std::memcpy(gid.raw, a.data(), 16);
    return 0;
  }
  return c_.fail(EINVAL, "GID index " + std::to_string(index) + " does not exist (0: IPv6 link-local, 1: IPv4)");
}

// --- PDs and CQs ------------------------------------------------------------------

ProtectionDomain* LocalBackend::alloc_pd() {
  return control([&] {
    c_.pds.push_back(std::make_unique<ProtectionDomain>(&ctx_, next_pd_id.fetch_add(1)));
    return c_.pds.back().get();
  });
}

int LocalBackend::dealloc_pd_now(ProtectionDomain* pd) {
  if (mrs_.regions_in_pd(pd->id()) != 0) {
    return c_.fail(EBUSY, "the PD still has memory regions or windows; deregister or deallocate them first");
  }
  for (const auto& qp : c_.qps) {
    if (impl_of(*qp).pd == pd) return c_.fail(EBUSY, "the PD still has QPs; destroy them first");
  }
  for (const auto& ah : c_.ahs) {
    if (ah->pd() == pd) return c_.fail(EBUSY, "the PD still has address handles; destroy them first");
  }
  return erase_owned(c_.pds, pd) ? 0 : c_.fail(EINVAL, "not a PD of this context");
}

int LocalBackend::dealloc_pd(ProtectionDomain* pd) {
  return control([&] { return dealloc_pd_now(pd); });
}

CompletionQueue* LocalBackend::create_cq_now(const CqAttr& attr) {
  if (attr.cqe < 1 || static_cast<std::uint32_t>(attr.cqe) > c_.limits.max_cqe) {
    c_.fail(EINVAL, "cqe must be between 1 and the device's max_cqe");
    return nullptr;
  }
  auto impl = std::make_unique<CqImpl>(static_cast<std::uint32_t>(attr.cqe), engines_.size());
  impl->events.fire = attr.on_event;
  impl->events.arg = attr.arg;
  // Stamped by the engines' clock as they push (CompletionRing::stamp_with).
  impl->timestamps = attr.completion_timestamps;
  if (attr.completion_timestamps) impl->stamp_clock = c_.port.clock;
  impl->poll = &local_poll;
  impl->backend = this;
  c_.cqs.push_back(internal::Access::make_cq(std::move(impl)));
  return c_.cqs.back().get();
}

CompletionQueue* LocalBackend::create_cq(const CqAttr& attr) {
  return control([&]() -> CompletionQueue* { return create_cq_now(attr); });
}

int LocalBackend::destroy_cq(CompletionQueue* cq) {
  return control([&] {
    if (impl_of(*cq).users != 0) return c_.fail(EBUSY, "QPs still use this CQ; destroy them first");
    return erase_owned(c_.cqs, cq) ? 0 : c_.fail(EINVAL, "not a CQ of this context");
  });
}

// The next completion added fires the event; of those already waiting, only
// ones no event announced (CompletionRing::missed): a program that polled
// before arming gets the completions that came meanwhile (UCX arms without
// polling after, as RNICs' arms with the consumer index allow), and one
// that re-arms before polling the completion that woke it (perftest's -e
// latency loops) gets no second event for it.
int LocalBackend::arm_cq(CqImpl& cq, bool solicited_only) {
  transport::CqEvents& e = cq.events;
  if (e.fire == nullptr) return EINVAL;
  e.armed.store(solicited_only ? transport::CqEvents::kSolicited : transport::CqEvents::kNext,
                std::memory_order_seq_cst);
  if (solicited_only) return 0;  // what waits is not known to be solicited
  // The heads seen, to cover once fired (the rings of the first 64 engines;
  // one beyond may fire once more).
  std::array<std::uint32_t, 64> heads{};
  bool fire = false;
  for (std::size_t i = 0; i < cq.rings.size(); ++i) {
    const transport::CompletionRing* ring = cq.published[i].load(std::memory_order_acquire);
    std::uint32_t head = 0;
    if (ring != nullptr) fire |= ring->missed(head) || ring->overflowed();
    if (i < heads.size()) heads[i] = head;
  }
  if (fire && e.take(true)) {
    for (std::size_t i = 0; i < std::min(cq.rings.size(), heads.size()); ++i) {
      if (transport::CompletionRing* ring = cq.published[i].load(std::memory_order_acquire)) ring->cover(heads[i]);
    }
    e.fire(e.arg);
  }
  return 0;
}

bool LocalBackend::cq_overflowed(const CqImpl& cq) const {
  for (std::size_t i = 0; i < cq.rings.size(); ++i) {
    const transport::CompletionRing* ring = cq.published[i].load(std::memory_order_acquire);
    if (ring != nullptr && ring->overflowed()) return true;
  }
  return false;
}

// --- Buffers and memory regions ---------------------------------------------------------

void* LocalBackend::alloc_buffer(std::size_t bytes) {
  const PortConfig::Pages pages = c_.port.buffer_pages;
  mem::Buffer b = mem::map_buffer(bytes, pages != PortConfig::Pages::kNormal);
  if (b.addr != nullptr && pages == PortConfig::Pages::kHuge && b.kind != mem::PageKind::kHuge) {
    mem::unmap_buffer(b);
    c_.fail(ENOMEM, "no free hugepages for a " + std::to_string(bytes) +
                        "-byte region: reserve more with 'dpdk-hugepages.py --setup 2G', or run with --no-huge");
    return nullptr;
  }
  if (b.addr == nullptr) {
    c_.fail(ENOMEM, "out of memory for a " + std::to_string(bytes) + "-byte buffer");
    return nullptr;
  }
  buffers_[b.addr] = b;
  return b.addr;
}

void LocalBackend::free_buffer(void* buffer) {
  const auto it = buffers_.find(buffer);
  if (it == buffers_.end()) return;
  mem::unmap_buffer(it->second);
  buffers_.erase(it);
}

// The region's entry in the MR table; the memory is populated and known to
// the port already (reg_mr). In a control call.
MemoryRegion* LocalBackend::reg_mr_now(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                       int access) {
  std::uint32_t key = 0;
  const int rc = mrs_.add(pd->id(), addr, iova, length, access, key);
  if (rc != 0) {
    c_.fail(rc, rc == ENOMEM ? "too many memory regions (the device's max_mr)"
                             : "bad region: zero length, or REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE");
    return nullptr;
  }
  auto mr = std::make_unique<MemoryRegion>();
  mr->addr = addr;
  mr->length = length;
  mr->iova = iova;
  mr->lkey = mr->rkey = key;
  mr->access = access;
  mr->pd = pd;
  c_.mrs_owned.push_back(std::move(mr));
  return c_.mrs_owned.back().get();
}

// Takes the region out of the table (and ownership of it from the context)
// inside the control call; the caller frees it after.
std::unique_ptr<MemoryRegion> LocalBackend::dereg_mr_now(MemoryRegion* mr) {
  const auto it =
      std::find_if(c_.mrs_owned.begin(), c_.mrs_owned.end(), [mr](const auto& m) { return m.get() == mr; });
  if (it == c_.mrs_owned.end()) {
    c_.fail(EINVAL, "not a registered memory region");
    return nullptr;
  }
  if (const int rc = mrs_.remove(mr->lkey); rc != 0) {
    c_.fail(rc, rc == EBUSY ? "memory windows are bound to the region: deallocate or unbind them first"
                            : "not a registered memory region");
    return nullptr;
  }
  std::unique_ptr<MemoryRegion> owned = std::move(*it);
  c_.mrs_owned.erase(it);
  if (owned->dm != nullptr) --owned->dm->regions;
  return owned;
}

// reg_mr_iova, and with `copied` internal::reg_mr_copied (the port is not
// told of the region).
MemoryRegion* LocalBackend::reg_mr(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                   int access, bool copied) {
  if (access & IBV_ACCESS_ON_DEMAND) return reg_mr_odp(pd, addr, length, iova, access, mem::own_pid());
  if (addr == nullptr) {
    // Only an on-demand region may start at NULL (implicit ODP): the
    // engines copy a pinned one with memcpy.
    c_.fail(EINVAL, "bad region: no address (only an on-demand region may be implicit)");
    return nullptr;
  }
  const bool port = !copied;
  // Populating a large region (seconds for gigabytes) and registering it
  // with the port run before the control call, the engines still running:
  // only the table's insert holds them. The region has no key yet, so no
  // frame can reach it meanwhile.
  const bool usable = mem::MrTable::check_args(iova, length, access) == 0;
  if (usable) {
    mem::populate(addr, length);  // as pinning does: no first-touch faults in transfers
    if (port) c_.port.io->register_memory(addr, length);
  }
  MemoryRegion* mr = control([&]() -> MemoryRegion* {
    MemoryRegion* made = reg_mr_now(pd, addr, length, iova, access);
    if (made != nullptr && !port) unported_.insert(made);
    return made;
  });
  if (mr == nullptr && usable && port) c_.port.io->unregister_memory(addr, length);
  return mr;
}

int LocalBackend::dereg_mr(ProtectionDomain*, MemoryRegion* mr) {
  // Out of the table under the control call (no frame looks it up after);
  // the port forgets the memory after, the engines running.
  bool ported = true;
  int err = 0;
  std::unique_ptr<MemoryRegion> gone = control([&] {
    ported = unported_.erase(mr) == 0;
    std::unique_ptr<MemoryRegion> out = dereg_mr_now(mr);
    if (out == nullptr) {
      // Still registered while windows are bound to it (EBUSY).
      err = mrs_.find(mr->lkey) != nullptr ? EBUSY : EINVAL;
      if (err == EBUSY && !ported) unported_.insert(mr);
    }
    return out;
  });
  if (gone == nullptr) return err;
  if (ported) c_.port.io->unregister_memory(gone->addr, gone->length);
  return 0;
}

MemoryRegion* LocalBackend::reg_mr_with_key(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                            int access, std::uint32_t key) {
  if (mrs_.add_with_key(pd->id(), addr, iova, length, access, key) != 0) return nullptr;
  auto mr = std::make_unique<MemoryRegion>();
  *mr = MemoryRegion{addr, length, iova, key, key, access, pd};
  c_.mrs_owned.push_back(std::move(mr));
  return c_.mrs_owned.back().get();
}

}  // namespace internal

namespace testing {

void set_next_pd_id(std::uint64_t id) { internal::next_pd_id.store(id); }

MemoryRegion* reg_mr_with_key(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                              int access, std::uint32_t key) {
  return internal::LocalBackend::of(pd->context()).reg_mr_with_key(pd, addr, length, iova, access, key);
}

const mem::MrTable& mr_table(Context& ctx) { return internal::LocalBackend::of(ctx).mrs(); }

}  // namespace testing
}  // namespace uroce
