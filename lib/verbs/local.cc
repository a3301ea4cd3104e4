// The in-process backend (Context::open): the engines in this process, the
// workers that run them, the control calls that hold them, and the data path
// straight into the transport (lib/verbs/backend.h).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <pthread.h>
#include <signal.h>
#include <sched.h>

#include "log/log.h"
#include "transport/qp_state.h"
#include "verbs/backend.h"
#include "verbs/verbs_impl.h"
#include "wire/headers.h"

namespace uroce {

using internal::ContextImpl;
using internal::impl_of;
using internal::random_bytes;

namespace {

// A bijection of the 24-bit QPN space under `key`: four Feistel rounds on
// 12-bit halves, each round a 64-bit mix (splitmix64's finaliser) of the
// other half and its round key. Distinct counters give distinct QPNs, and
// without the key one QPN says little about the next.
std::uint32_t permute_qpn(std::uint32_t n, const std::array<std::uint64_t, 4>& key) {
  std::uint32_t left = n >> 12 & 0xfff;
  std::uint32_t right = n & 0xfff;
  for (const std::uint64_t k : key) {
    std::uint64_t x = right ^ k;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    const std::uint32_t next = left ^ static_cast<std::uint32_t>(x & 0xfff);
    left = right;
    right = next;
  }
  return left << 12 | right;
}

// PD identities, for the whole process and never reused: 64 bits do not
// wrap. They start above 2^32, so that a 32-bit handle() never equals one.
std::atomic<std::uint64_t> next_pd_id{(std::uint64_t{1} << 32) + 1};

template <typename T>
bool erase_owned(std::vector<std::unique_ptr<T>>& v, const T* p) {
  const auto it = std::find_if(v.begin(), v.end(), [p](const auto& u) { return u.get() == p; });
  if (it == v.end()) return false;
  v.erase(it);
  return true;
}

// The in-process data path (QueuePair::Impl::post_send, post_recv;
// CompletionQueue::Impl::poll), set by create_qp_with_qpn and create_cq_now.
int local_post_send(QueuePair& qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int local_post_recv(QueuePair& qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int local_poll(internal::CqImpl& cq, int n, ibv_wc* wc) { return cq.poll_rings(n, wc); }

}  // namespace

namespace {

// A Context with its engines in this process (Context::open).
class LocalBackend final : public internal::Backend {
 public:
  explicit LocalBackend(Context& ctx) : ctx_(ctx), c_(impl_of(ctx)) {}
  ~LocalBackend() override;

  bool attached() const override { return false; }
  std::size_t progress() override;
  int start_workers(const std::vector<int>& cpus, Context::WorkerHook hook) override;
  void stop_workers() override;
  int query_gid(int index, ibv_gid& gid) override;
  Reach resolve_gid(const ibv_gid& gid, std::uint8_t mac[6]) override { return c_.resolver->query(gid, mac); }
  void* alloc_buffer(std::size_t bytes) override;
  void free_buffer(void* buffer) override;
  ProtectionDomain* alloc_pd() override;
  int dealloc_pd(ProtectionDomain* pd) override;
  MemoryRegion* reg_mr(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access,
                       bool copied) override;
  int dereg_mr(ProtectionDomain* pd, MemoryRegion* mr) override;
  CompletionQueue* create_cq(int cqe, void (*on_event)(void*), void* arg) override;
  int destroy_cq(CompletionQueue* cq) override;
  int arm_cq(internal::CqImpl& cq, bool solicited_only) override;
  bool cq_overflowed(const internal::CqImpl& cq) const override;
  QueuePair* create_qp(ProtectionDomain* pd, const QpInitAttr& attr, bool gsi) override;
  int destroy_qp(ProtectionDomain* pd, QueuePair* qp) override;
  int modify_qp(QueuePair& qp, const ibv_qp_attr& attr, int attr_mask) override;
  int query_qp(const QueuePair& qp, ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) override;
  void refresh_counters(const QueuePair&) override {}  // the engines count in place
  QueuePair::CongestionState congestion(const QueuePair& qp) override;
  AddressHandle* create_ah(ProtectionDomain* pd, const ibv_ah_attr& attr) override {
    return internal::local_create_ah(pd, attr);
  }
  SharedReceiveQueue* create_srq(ProtectionDomain* pd, const SrqInitAttr& attr, void (*on_limit)(void*),
                                 void* arg) override {
    return internal::local_create_srq(pd, attr, on_limit, arg);
  }

 private:
  Context& ctx_;
  ContextImpl& c_;
};

LocalBackend::~LocalBackend() {
  stop_workers();
  for (auto& qp : c_.qps) c_.engines[impl_of(*qp).engine]->remove_qp(&impl_of(*qp).qp);
  c_.qps.clear();
  for (auto& e : c_.engines) e->release_handed_in();
  for (auto& [addr, buffer] : c_.buffers) mem::unmap_buffer(buffer);
}

}  // namespace

std::unique_ptr<internal::Backend> internal::make_local_backend(Context& ctx) {
  return std::make_unique<LocalBackend>(ctx);
}

std::size_t LocalBackend::progress() {
  ContextImpl& c = c_;
  // Not beside a control call from another thread (Impl::polling).
  c.polling.store(true, std::memory_order_seq_cst);
  std::size_t n = 0;
  if (!c.workers_running.load(std::memory_order_acquire) &&
      (c.control_seq.load(std::memory_order_seq_cst) & 1) == 0) {
    for (auto& e : c.engines) n += e->poll();
  }
  c.polling.store(false, std::memory_order_release);
  return n;
}

namespace {
constexpr std::uint32_t kIdlePollsBeforeYield = 64;
}  // namespace

int LocalBackend::start_workers(const std::vector<int>& cpus, Context::WorkerHook hook) {
  ContextImpl& c = c_;
  std::lock_guard<std::mutex> lock(c.control_mutex);
  if (c.workers_running.load()) return c.fail(EBUSY, "workers already run this context's engines");
  if (cpus.size() != c.engines.size()) {
    return c.fail(EINVAL, "give one CPU per engine: this context has " + std::to_string(c.engines.size()) +
                              " port queue(s), " + std::to_string(cpus.size()) + " CPU(s) given");
  }
  c.workers_stop.store(false);
  c.workers_running.store(true, std::memory_order_release);
  // The workers are born with every signal blocked, so the application's
  // handlers run on its own threads: one that calls exit() on a worker
  // would wait for the worker itself (issue 27, item 5).
  sigset_t all, was;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &was);
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    c.parked[i].store(0, std::memory_order_relaxed);
    c.polled[i].store(0, std::memory_order_relaxed);
    c.workers.emplace_back([&c, i, cpu = cpus[i], hook] {
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
      engine::Engine& e = *c.engines[i];
      std::uint32_t idle = 0;  // polls in a row that moved no frame
      while (!c.workers_stop.load(std::memory_order_relaxed)) {
        const std::uint64_t seq = c.control_seq.load(std::memory_order_acquire);
        if (seq & 1) [[unlikely]] {
          // A control call holds the workers: park between two polls.
          c.parked[i].store(seq, std::memory_order_release);
          while (c.control_seq.load(std::memory_order_acquire) == seq) std::this_thread::yield();
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
        c.polled[i].store(seq, std::memory_order_release);  // the next control call may hold it now
        idle = did != 0 ? 0 : idle + 1;
        if (idle >= kIdlePollsBeforeYield) sched_yield();
      }
    });
  }
  pthread_sigmask(SIG_SETMASK, &was, nullptr);
  return 0;
}

void LocalBackend::stop_workers() {
  ContextImpl& c = c_;
  if (ContextImpl::controls_here != 0) return;  // this thread holds them already (issue 27, item 5)
  std::lock_guard<std::mutex> lock(c.control_mutex);
  if (!c.workers_running.load()) return;
  c.workers_stop.store(true);
  for (std::thread& t : c.workers) t.join();
  c.workers.clear();
  c.workers_running.store(false, std::memory_order_release);
}

ProtectionDomain* LocalBackend::alloc_pd() {
  return c_.control([&] {
    c_.pds.push_back(std::make_unique<ProtectionDomain>(&ctx_, next_pd_id.fetch_add(1)));
    return c_.pds.back().get();
  });
}

namespace {

// The control calls' bodies, run inside Impl::control().

int dealloc_pd_now(ContextImpl& c, ProtectionDomain* pd) {
  if (c.mrs.regions_in_pd(pd->id()) != 0) {
    return c.fail(EBUSY, "the PD still has memory regions; deregister them first");
  }
  for (const auto& qp : c.qps) {
    if (impl_of(*qp).pd == pd) return c.fail(EBUSY, "the PD still has QPs; destroy them first");
  }
  for (const auto& ah : c.ahs) {
    if (ah->pd() == pd) return c.fail(EBUSY, "the PD still has address handles; destroy them first");
  }
  return erase_owned(c.pds, pd) ? 0 : c.fail(EINVAL, "not a PD of this context");
}

CompletionQueue* create_cq_now(ContextImpl& c, int cqe, void (*on_event)(void*), void* arg) {
  if (cqe < 1 || static_cast<std::uint32_t>(cqe) > c.limits.max_cqe) {
    c.fail(EINVAL, "cqe must be between 1 and the device's max_cqe");
    return nullptr;
  }
  auto impl = std::make_unique<internal::CqImpl>(static_cast<std::uint32_t>(cqe), c.engines.size());
  impl->events.fire = on_event;
  impl->events.arg = arg;
  impl->poll = &local_poll;
  impl->backend = c.backend.get();
  c.cqs.push_back(internal::Access::make_cq(std::move(impl)));
  return c.cqs.back().get();
}

}  // namespace

int LocalBackend::dealloc_pd(ProtectionDomain* pd) {
  return c_.control([&] { return dealloc_pd_now(c_, pd); });
}

CompletionQueue* LocalBackend::create_cq(int cqe, void (*on_event)(void*), void* arg) {
  return c_.control([&]() -> CompletionQueue* { return create_cq_now(c_, cqe, on_event, arg); });
}

int LocalBackend::destroy_cq(CompletionQueue* cq) {
  return c_.control([&] {
    if (impl_of(*cq).users != 0) return c_.fail(EBUSY, "QPs still use this CQ; destroy them first");
    return erase_owned(c_.cqs, cq) ? 0 : c_.fail(EINVAL, "not a CQ of this context");
  });
}

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
  c_.buffers[b.addr] = b;
  return b.addr;
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

void LocalBackend::free_buffer(void* buffer) {
  const auto it = c_.buffers.find(buffer);
  if (it == c_.buffers.end()) return;
  mem::unmap_buffer(it->second);
  c_.buffers.erase(it);
}

namespace {

// The region's entry in the MR table; the memory is populated and known to
// the port already (ProtectionDomain::reg_mr_iova).
MemoryRegion* reg_mr_now(ContextImpl& c, ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                         int access) {
  std::uint32_t key = 0;
  const int rc = c.mrs.add(pd->id(), addr, iova, length, access, key);
  if (rc != 0) {
    c.fail(rc, rc == ENOMEM ? "too many memory regions (the device's max_mr)"
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
  c.mrs_owned.push_back(std::move(mr));
  return c.mrs_owned.back().get();
}

// Takes the region out of the table (and ownership of it from the context)
// inside the control call; the caller frees it after.
std::unique_ptr<MemoryRegion> dereg_mr_now(ContextImpl& c, MemoryRegion* mr) {
  const auto it = std::find_if(c.mrs_owned.begin(), c.mrs_owned.end(), [mr](const auto& m) { return m.get() == mr; });
  if (it == c.mrs_owned.end() || c.mrs.remove(mr->lkey) != 0) {
    c.fail(EINVAL, "not a registered memory region");
    return nullptr;
  }
  std::unique_ptr<MemoryRegion> owned = std::move(*it);
  c.mrs_owned.erase(it);
  return owned;
}

}  // namespace

namespace {

// reg_mr_iova, and with `port` false internal::reg_mr_copied.
MemoryRegion* reg_mr_outside(ContextImpl& c, ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                             int access, bool port) {
  // Populating a large region (seconds for gigabytes) and registering it
  // with the port run before the control call, the engines still running:
  // only the table's insert holds them. The region has no key yet, so no
  // frame can reach it meanwhile.
  const bool usable = mem::MrTable::check_args(iova, length, access) == 0;
  if (usable) {
    mem::populate(addr, length);  // as pinning does: no first-touch faults in transfers
    if (port) c.port.io->register_memory(addr, length);
  }
  MemoryRegion* mr = c.control([&]() -> MemoryRegion* {
    MemoryRegion* made = reg_mr_now(c, pd, addr, length, iova, access);
    if (made != nullptr && !port) c.unported.insert(made);
    return made;
  });
  if (mr == nullptr && usable && port) c.port.io->unregister_memory(addr, length);
  return mr;
}

}  // namespace

MemoryRegion* LocalBackend::reg_mr(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                   int access, bool copied) {
  return reg_mr_outside(c_, pd, addr, length, iova, access, !copied);
}

int LocalBackend::dereg_mr(ProtectionDomain*, MemoryRegion* mr) {
  ContextImpl& c = c_;
  // Out of the table under the control call (no frame looks it up after);
  // the port forgets the memory after, the engines running.
  bool ported = true;
  std::unique_ptr<MemoryRegion> gone = c.control([&] {
    ported = c.unported.erase(mr) == 0;
    return dereg_mr_now(c, mr);
  });
  if (gone == nullptr) return EINVAL;
  if (ported) c.port.io->unregister_memory(gone->addr, gone->length);
  return 0;
}

namespace testing {

QueuePair* create_qp_with_qpn(ProtectionDomain* pd, const QpInitAttr& attr, std::uint32_t qpn) {
  ContextImpl& c = impl_of(pd->context());
  if (attr.qp_type != IBV_QPT_RC && attr.qp_type != IBV_QPT_UC && attr.qp_type != IBV_QPT_UD) {
    c.fail(EOPNOTSUPP, "qp_type must be IBV_QPT_RC, IBV_QPT_UC or IBV_QPT_UD (XRC and raw packet QPs are not supported)");
    return nullptr;
  }
  if (attr.send_cq == nullptr || attr.recv_cq == nullptr) {
    c.fail(EINVAL, "send_cq and recv_cq are required");
    return nullptr;
  }
  const DeviceLimits& l = c.limits;
  const ibv_qp_cap& cap = attr.cap;
  if (cap.max_send_wr > l.max_qp_wr || cap.max_recv_wr > l.max_qp_wr || cap.max_send_sge > l.max_sge ||
      cap.max_recv_sge > l.max_sge || cap.max_inline_data > l.max_inline_data) {
    c.fail(EINVAL, "QP capabilities exceed the device limits (max_qp_wr, max_sge, max_inline_data)");
    return nullptr;
  }
  if (attr.worker < -1 || attr.worker >= static_cast<int>(c.engines.size())) {
    c.fail(EINVAL, "worker " + std::to_string(attr.worker) + " does not exist: this context has " +
                       std::to_string(c.engines.size()) + " engine(s); -1 picks one");
    return nullptr;
  }
  if (qpn > 0xffffff || c.find_qp(qpn) != nullptr || c.qps.size() >= l.max_qp) {
    c.fail(ENOMEM, "no QP number available");
    return nullptr;
  }
  // The engine serving the fewest QPs, unless one is named, or the SRQ's.
  std::size_t engine = 0;
  internal::SrqImpl* srq = attr.srq != nullptr ? &impl_of(*attr.srq) : nullptr;
  if (srq != nullptr && srq->pd != pd) {
    c.fail(EINVAL, "the SRQ belongs to another PD");
    return nullptr;
  }
  if (srq != nullptr && srq->engine >= 0) {
    if (attr.worker >= 0 && attr.worker != srq->engine) {
      c.fail(EINVAL, "the QPs of an SRQ share one worker: this SRQ's is " + std::to_string(srq->engine));
      return nullptr;
    }
    engine = static_cast<std::size_t>(srq->engine);
  } else if (attr.worker >= 0) {
    engine = static_cast<std::size_t>(attr.worker);
  } else {
    for (std::size_t i = 1; i < c.engines.size(); ++i) {
      if (c.engines[i]->qps().size() < c.engines[engine]->qps().size()) engine = i;
    }
  }
  auto impl = std::make_unique<internal::QpImpl>();
  impl->pd = pd;
  impl->init = attr;
  impl->engine = static_cast<std::uint32_t>(engine);
  impl->post_send = &local_post_send;
  impl->post_recv = &local_post_recv;
  transport::QpCaps caps{cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge,
                         cap.max_inline_data, attr.sq_sig_all};
  transport::qp_init(impl->qp, qpn, pd->id(), caps, &impl_of(*attr.send_cq).ring_for(engine),
                     &impl_of(*attr.recv_cq).ring_for(engine), attr.qp_type);
  // A datagram is one packet of at most the port's MTU (UD has no path MTU).
  if (attr.qp_type == IBV_QPT_UD) impl->qp.mtu = 128u << c.port.active_mtu;
  if (srq != nullptr) transport::attach_srq(impl->qp, &srq->srq);
  auto qp = internal::Access::make_qp(&pd->context(), std::move(impl));
  if (!c.engines[engine]->add_qp(&impl_of(*qp).qp)) {
    c.fail(ENOMEM, "engine " + std::to_string(engine) + " serves as many QPs as it can; pick another worker");
    return nullptr;
  }
  ++impl_of(*attr.send_cq).users;
  ++impl_of(*attr.recv_cq).users;
  if (srq != nullptr) {
    srq->engine = static_cast<int>(engine);
    ++srq->users;
  }
  c.qps.push_back(std::move(qp));
  c.publish_owners();
  if (!c.qpn_low_used.empty()) ++c.qpn_low_used[qpn & (c.qpn_low_used.size() - 1)];
  return c.qps.back().get();
}

void set_next_pd_id(std::uint64_t id) { next_pd_id.store(id); }

MemoryRegion* reg_mr_with_key(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                              int access, std::uint32_t key) {
  ContextImpl& c = impl_of(pd->context());
  if (c.mrs.add_with_key(pd->id(), addr, iova, length, access, key) != 0) return nullptr;
  auto mr = std::make_unique<MemoryRegion>();
  *mr = MemoryRegion{addr, length, iova, key, key, access, pd};
  c.mrs_owned.push_back(std::move(mr));
  return c.mrs_owned.back().get();
}

transport::Qp& transport_qp(QueuePair* qp) { return impl_of(*qp).qp; }

}  // namespace testing

QueuePair* LocalBackend::create_qp(ProtectionDomain* pd, const QpInitAttr& attr, bool gsi) {
  ContextImpl& c = c_;
  if (gsi) {
    QpInitAttr qp1 = attr;
    qp1.qp_type = IBV_QPT_UD;
    return c.control([&] { return testing::create_qp_with_qpn(pd, qp1, 1); });
  }
  return c.control([&] {
    // An unpredictable QPN (a spoofed packet must name one) that is not
    // QP0/QP1 and whose low bits no live QP has: the engines index QPs by
    // those bits (engine/qpn_map.h), so they stay a direct, collision-free
    // table. The table is at most half full, so each pick is free with odds
    // of at least one half.
    std::size_t low = std::max<std::size_t>(64, c.qpn_low_used.size());
    while (low < 2 * (c.qps.size() + 1)) low *= 2;
    std::vector<std::uint32_t>& used = c.qpn_low_used;
    if (used.size() != low) {
      used.assign(low, 0);
      for (const auto& q : c.qps) ++used[q->qp_num() & (low - 1)];
    }
    auto taken = [&](std::uint32_t qpn) { return qpn < 2 || used[qpn & (low - 1)] != 0; };
    if (!c.qpn_keyed) {
      random_bytes(c.qpn_key.data(), sizeof c.qpn_key);
      random_bytes(&c.next_qpn, sizeof c.next_qpn);
      c.qpn_keyed = true;
    }
    std::uint32_t qpn = permute_qpn(c.next_qpn++ & 0xffffff, c.qpn_key);
    for (std::uint32_t tries = 0; taken(qpn) && tries < 0x1000000; ++tries) {
      qpn = permute_qpn(c.next_qpn++ & 0xffffff, c.qpn_key);
    }
    return testing::create_qp_with_qpn(pd, attr, qpn);  // counts itself into `used`
  }, ContextImpl::Access::kAddsQp);
}

namespace {

int destroy_qp_now(ContextImpl& c, QueuePair* qp) {
  internal::QpImpl& q = impl_of(*qp);
  if (std::find_if(c.qps.begin(), c.qps.end(), [qp](const auto& u) { return u.get() == qp; }) == c.qps.end()) {
    return c.fail(EINVAL, "not a QP of this context");
  }
  c.engines[q.engine]->remove_qp(&q.qp);
  if (std::vector<std::uint32_t>& used = c.qpn_low_used; !used.empty()) {
    std::uint32_t& n = used[q.qp.qpn & (used.size() - 1)];
    if (n > 0) --n;  // create_qp's table: these low bits are free again
  }
  --impl_of(*q.init.send_cq).users;
  --impl_of(*q.init.recv_cq).users;
  if (q.init.srq != nullptr && --impl_of(*q.init.srq).users == 0) impl_of(*q.init.srq).engine = -1;
  erase_owned(c.qps, qp);
  c.publish_owners();
  return 0;
}

}  // namespace

int LocalBackend::destroy_qp(ProtectionDomain*, QueuePair* qp) {
  return c_.control([&] { return destroy_qp_now(c_, qp); });
}

int LocalBackend::arm_cq(internal::CqImpl& cq, bool solicited_only) {
  transport::CqEvents& e = cq.events;
  if (e.fire == nullptr) return EINVAL;
  e.armed.store(solicited_only ? transport::CqEvents::kSolicited : transport::CqEvents::kNext,
                std::memory_order_seq_cst);
  if (solicited_only) return 0;  // what waits is not known to be solicited
  for (std::size_t i = 0; i < cq.rings.size(); ++i) {
    const transport::CompletionRing* ring = cq.published[i].load(std::memory_order_acquire);
    if (ring != nullptr && (ring->pending() || ring->overflowed())) {
      e.offer(true);
      break;
    }
  }
  return 0;
}

bool LocalBackend::cq_overflowed(const internal::CqImpl& cq) const {
  for (std::size_t i = 0; i < cq.rings.size(); ++i) {
    const transport::CompletionRing* ring = cq.published[i].load(std::memory_order_acquire);
    if (ring != nullptr && ring->overflowed()) return true;
  }
  return false;
}

namespace {

// `peer_mac`: the address vector's destination, resolved before the control
// call (QueuePair::modify).
int modify_now(ContextImpl& c, internal::QpImpl& q, const ibv_qp_attr& attr, int attr_mask,
               const std::uint8_t peer_mac[6]) {
  transport::Qp& qp = q.qp;
  // max_rd_atomic (initiator) is bounded by max_qp_init_rd_atom,
  // max_dest_rd_atomic (responder) by max_qp_rd_atom (ibv_query_device(3)).
  const transport::ModifyLimits limits{c.limits.max_qp_init_rd_atom, c.limits.max_qp_rd_atom, c.port.active_mtu};
  const transport::ModifyCheck check = transport::check_modify(qp.type, qp.state, attr, attr_mask, limits);
  if (check.error != 0) {
    return c.fail(check.error, std::string("modify QP ") + transport::qp_state_name(qp.state) + "->" +
                                   transport::qp_state_name(check.next) + ": " + check.why);
  }
  // The source address is the GID the address vector names (index 0 IPv6
  // link-local, 1 the port's address), of the destination's family: RoCEv2
  // carries both in one IP header.
  ibv_gid local = c.port.gid;
  if ((attr_mask & IBV_QP_AV) && c.query_gid(attr.ah_attr.grh.sgid_index, local) != 0) return EINVAL;
  if ((attr_mask & IBV_QP_AV) && is_ipv4_gid(local) != is_ipv4_gid(attr.ah_attr.grh.dgid)) {
    return c.fail(EINVAL, std::string("modify QP: GID index ") + std::to_string(attr.ah_attr.grh.sgid_index) + " is " +
                              (is_ipv4_gid(local) ? "IPv4" : "IPv6") + " but the destination GID is " +
                              (is_ipv4_gid(local) ? "IPv6" : "IPv4") +
                              "; use the GID index of the destination's family (0: IPv6 link-local, 1: the port's address)");
  }
  if ((attr_mask & IBV_QP_AV) && peer_mac == nullptr) {
    // Not resolved before the call: it looked invalid then (the QP's state
    // has moved since). Never applied with no address.
    return c.fail(EAGAIN, "modify QP: the QP changed state while the peer's address was looked up; try again");
  }
  const ibv_qp_state from = qp.state;
  // The address vector as sent (a PFC priority fills in DSCP 0); the QP's
  // attributes keep the one asked, which query_qp returns.
  ibv_qp_attr sent = attr;
  if (attr_mask & IBV_QP_AV) {
    sent.ah_attr.grh.traffic_class = c.sent_traffic_class(attr.ah_attr, q.engine, fmt::format("qp {:#x}", qp.qpn));
  }
  transport::qp_apply(qp, sent, attr_mask, check.next, peer_mac, c.port.mac, local, c.port.dcqcn);
  if (attr_mask & IBV_QP_AV) qp.attr.ah_attr.grh.traffic_class = attr.ah_attr.grh.traffic_class;
  if (from != check.next) {
    logger().debug("qp {:#x}: {} -> {}", qp.qpn, transport::qp_state_name(from), transport::qp_state_name(check.next));
  } else {
    logger().debug("qp {:#x}: attributes changed in {} (mask {:#x})", qp.qpn, transport::qp_state_name(from),
                   static_cast<unsigned>(attr_mask));
  }
  return 0;
}

// The GID an address vector sends from (its sgid_index); the port's IPv4
// one for an index that does not exist (modify_now then refuses it).
ibv_gid source_gid(ContextImpl& c, const ibv_ah_attr& ah) {
  ibv_gid local = c.port.gid;
  if (ah.grh.sgid_index == 0) {
    const wire::Ipv6Addr a = wire::ipv6_link_local(c.port.mac);
    std::memcpy(local.raw, a.data(), 16);
  }
  return local;
}

int query_now(const internal::QpImpl& q, ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) {
  (void)attr_mask;  // everything is returned, as providers commonly do
  const transport::Qp& qp = q.qp;
  attr = qp.attr;
  attr.qp_state = qp.state;
  attr.cur_qp_state = qp.state;
  attr.cap.max_send_wr = qp.caps.max_send_wr;
  attr.cap.max_recv_wr = qp.caps.max_recv_wr;
  attr.cap.max_send_sge = qp.caps.max_send_sge;
  attr.cap.max_recv_sge = qp.caps.max_recv_sge;
  attr.cap.max_inline_data = qp.caps.max_inline_data;
  if (init_attr != nullptr) *init_attr = q.init;
  return 0;
}

}  // namespace

int LocalBackend::modify_qp(QueuePair& qp, const ibv_qp_attr& attr, int attr_mask) {
  ContextImpl& c = c_;
  internal::QpImpl& q = impl_of(qp);
  // The address is resolved before the control call, never inside it: the
  // engines keep running while the port waits for an answer.
  // Only a modify that passes its checks (as far as they can be made
  // outside: against the QP's last published state) resolves; the others
  // fail inside with their own reason.
  std::uint8_t mac[6] = {};
  const std::uint8_t* peer_mac = nullptr;
  if (attr_mask & IBV_QP_AV) {
    const transport::ModifyLimits limits{c.limits.max_qp_init_rd_atom, c.limits.max_qp_rd_atom, c.port.active_mtu};
    const ibv_qp_state now = q.qp.app_state.load(std::memory_order_acquire);
    const bool valid = transport::check_modify(q.qp.type, now, attr, attr_mask, limits).error == 0 &&
                       is_ipv4_gid(attr.ah_attr.grh.dgid) == is_ipv4_gid(source_gid(c, attr.ah_attr));
    if (valid) {
      if (const int rc = c.wait_resolved(attr.ah_attr.grh.dgid, mac, "modify QP"); rc != 0) return rc;
      peer_mac = mac;
    }
  }
  return c.control([&] { return modify_now(c, q, attr, attr_mask, peer_mac); }, ContextImpl::Access::kOneQp, &qp);
}

int LocalBackend::query_qp(const QueuePair& qp, ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) {
  return c_.control([&] { return query_now(impl_of(qp), attr, attr_mask, init_attr); },
                    ContextImpl::Access::kReadsOnly);
}

namespace {

int local_post_send(QueuePair& qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  internal::QpImpl& q = impl_of(qp);
  const bool ud = q.qp.type == IBV_QPT_UD;
  for (; wr != nullptr; wr = wr->next) {
    const wire::PathHeader* to = nullptr;
    if (ud) {
      // The AH must be one of ours, of the QP's PD (IBTA 10.2.1.x).
      const AddressHandle* ah = AddressHandle::of(wr->wr.ud.ah);
      if (ah == nullptr || ah->pd() != q.pd) [[unlikely]] {
        if (bad_wr != nullptr) *bad_wr = wr;
        return impl_of(q.pd->context())
            .note(EINVAL, "UD send WR: wr.ud.ah is not an address handle of the QP's PD");
      }
      to = &internal::Access::impl(const_cast<AddressHandle&>(*ah)).path;
    }
    if (const int rc = transport::qp_post_send(q.qp, *wr, to); rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return impl_of(q.pd->context()).note(rc, rc == ENOMEM ? "send queue full (max_send_wr)"
                                                               : "bad send WR: opcode (for the QP type), SGE count, "
                                                                 "inline size, length (UD: at most the MTU) or QP state");
    }
  }
  return 0;
}

int local_post_recv(QueuePair& qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  internal::QpImpl& q = impl_of(qp);
  if (q.qp.srq != nullptr) [[unlikely]] {
    if (bad_wr != nullptr) *bad_wr = wr;
    return impl_of(q.pd->context()).note(EINVAL, "this QP receives from an SRQ: post to the SRQ");
  }
  for (; wr != nullptr; wr = wr->next) {
    if (const int rc = transport::qp_post_recv(q.qp, *wr); rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return impl_of(q.pd->context()).note(rc, rc == ENOMEM ? "receive queue full (max_recv_wr)"
                                                               : "bad receive WR: SGE count or QP state (RESET)");
    }
  }
  return 0;
}

}  // namespace

QueuePair::CongestionState LocalBackend::congestion(const QueuePair& qp) {
  return c_.control([&] {
    const transport::Qp::Congestion& c = impl_of(qp).qp.congestion;
    QueuePair::CongestionState s;
    if (!c.started) return s;
    s.enabled = true;
    s.rate_bps = c.rate.rate_bps();
    s.target_bps = c.rate.target_bps();
    s.alpha = c.rate.alpha();
    s.cnps = c.rate.cnps();
    return s;
  }, ContextImpl::Access::kReadsOnly);
}

}  // namespace uroce
