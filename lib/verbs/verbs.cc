// The verbs-like API on top of the engine and the transport.
#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include <pthread.h>
#include <sched.h>

#include "service/client.h"
#include "transport/qp_state.h"
#include "log/log.h"
#include "verbs/backend.h"
#include "verbs/traffic_class.h"
#include "verbs/verbs_impl.h"
#include "wire/headers.h"

namespace uroce {

using internal::ContextImpl;
using internal::impl_of;

namespace internal {

// IBTA leaves only keys, QPNs and the PSN between a spoofed packet and memory.
void random_bytes(void* dst, std::size_t bytes) {
  auto* p = static_cast<std::uint8_t*>(dst);
  while (bytes > 0) {
    const ssize_t got = getrandom(p, bytes, 0);
    if (got > 0) {
      p += got;
      bytes -= static_cast<std::size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    // No getrandom (a kernel before 3.17): the library's own source.
    std::random_device rd;
    for (; bytes > 0; --bytes) *p++ = static_cast<std::uint8_t>(rd());
  }
}

}  // namespace internal

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

const char* wc_status_str(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_LOC_EEC_OP_ERR: return "local EE context operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_MW_BIND_ERR: return "memory management operation error";
    case IBV_WC_BAD_RESP_ERR: return "bad response error";
    case IBV_WC_LOC_ACCESS_ERR: return "local access error";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_REM_OP_ERR: return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "local RDD violation error";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "remote invalid RD request";
    case IBV_WC_REM_ABORT_ERR: return "aborted error";
    case IBV_WC_INV_EECN_ERR: return "invalid EE context number";
    case IBV_WC_INV_EEC_STATE_ERR: return "invalid EE context state";
    case IBV_WC_FATAL_ERR: return "fatal error";
    case IBV_WC_RESP_TIMEOUT_ERR: return "response timeout error";
    case IBV_WC_GENERAL_ERR: return "general error";
    default: break;
  }
  return "unknown";
}

// --- Context -------------------------------------------------------------------

std::unique_ptr<Context> Context::open(const PortConfig& port, std::string& error) {
  if ((port.io == nullptr && port.queues.empty()) || port.clock == nullptr) {
    error = "no packet I/O or clock given: open a DPDK port or a simulated link first";
    return nullptr;
  }
  if (!port.queues.empty() &&
      (std::count(port.queues.begin(), port.queues.end(), nullptr) != 0 ||
       (port.io != nullptr && port.io != port.queues[0]))) {
    error = "PortConfig::queues must all be set, and io be nullptr or queues[0]";
    return nullptr;
  }
  if (port.pfc_priority < -1 || port.pfc_priority > 7) {
    error = "PortConfig::pfc_priority " + std::to_string(port.pfc_priority) +
            ": give the lossless 802.1p priority, 0 to 7, or -1 for none";
    return nullptr;
  }
  auto ctx = std::unique_ptr<Context>(new Context());
  ctx->impl_ = std::make_unique<Impl>(port);
  ctx->impl_->backend = internal::make_local_backend(*ctx);
  return ctx;
}

std::unique_ptr<Context> Context::attach(const std::string& socket_path, std::string& error) {
  auto client = service::Client::connect(socket_path, error);
  if (!client) return nullptr;
  auto ctx = std::unique_ptr<Context>(new Context());
  ctx->impl_ = std::make_unique<Impl>(client->hello());
  ctx->impl_->backend = internal::make_service_backend(*ctx, std::move(client));
  return ctx;
}

bool Context::attached() const { return impl_->backend->attached(); }

Context::Impl::Impl(const PortConfig& p) : port(p), mrs(limits.max_mr, random_bytes) {
  if (port.queues.empty()) port.queues.push_back(port.io);
  port.io = port.queues[0];  // the control path's queue: neighbour resolution, memory registration
  resolver = std::make_unique<Resolver>(port.io);
  for (engine::PacketIo* io : port.queues) {
    engines.push_back(std::make_unique<engine::Engine>(*io, *port.clock, mrs));
    engines.back()->set_congestion_control(port.dcqcn);
  }
  if (engines.size() > 1) {
    handover = std::make_unique<engine::Handover>(static_cast<std::uint32_t>(engines.size()));
    for (std::size_t i = 0; i < engines.size(); ++i) engines[i]->attach(handover.get(), static_cast<std::uint32_t>(i));
  }
  parked = std::make_unique<std::atomic<std::uint64_t>[]>(engines.size());
  polled = std::make_unique<std::atomic<std::uint64_t>[]>(engines.size());
  // A CNP tells a sender to slow down; paused behind the very data it is
  // about, it arrives late when it matters most. ConnectX sends them on
  // priority 6 (DSCP 48), apart from the lossless data.
  if (const int lossless = port.pfc_priority;
      lossless >= 0 && port.dcqcn != nullptr && port.dcqcn->enabled &&
      (internal::dscp_priority(port.dcqcn->cnp_dscp) == lossless || port.dcqcn->cnp_priority == lossless)) {
    logger().warn("CNPs (np_cnp_dscp {}, np_cnp_priority {}) share the PFC priority {}: pauses delay them; give "
                  "np_cnp_dscp and np_cnp_priority another priority (ConnectX: 48 and 6)",
                  port.dcqcn->cnp_dscp, port.dcqcn->cnp_priority, lossless);
  }
}

std::uint8_t Context::Impl::sent_traffic_class(const ibv_ah_attr& ah, std::size_t engine, const std::string& what) {
  const internal::SentClass s = internal::sent_traffic_class(ah.grh.traffic_class, port.pfc_priority);
  if (s.outside_pfc) {
    engines.at(engine)->add_counter(engine::EngineCounter::paths_outside_pfc_priority);
    if (!warned_outside_pfc) {
      warned_outside_pfc = true;
      const int dscp = ah.grh.traffic_class >> 2;
      logger().warn("{}: traffic class {:#x} is DSCP {}, priority {}, not the PFC priority {}: its packets are not "
                    "lossless; leave the traffic class 0 or give a DSCP from {} to {} (warned once; counted in "
                    "paths_outside_pfc_priority)",
                    what, ah.grh.traffic_class, dscp, internal::dscp_priority(static_cast<std::uint8_t>(dscp)),
                    port.pfc_priority, port.pfc_priority * 8, port.pfc_priority * 8 + 7);
    }
  }
  return s.traffic_class;
}

transport::Qp* Context::Impl::find_qp(std::uint32_t qpn) const {
  for (const auto& e : engines) {
    if (transport::Qp* qp = e->find_qp(qpn)) return qp;
  }
  return nullptr;
}

void Context::Impl::publish_owners() {
  if (!handover) return;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> owners;
  owners.reserve(qps.size());
  for (const auto& qp : qps) owners.emplace_back(qp->qp_num(), impl_of(*qp).engine);
  handover->set_owners(owners);
}

Context::~Context() {
  if (impl_) impl_->backend.reset();  // its teardown (~LocalBackend, ~ServiceBackend)
}

const DeviceLimits& Context::limits() const { return impl_->limits; }
const ibv_gid& Context::gid() const { return impl_->port.gid; }
ibv_mtu Context::active_mtu() const { return impl_->port.active_mtu; }
namespace {

// The last error of each thread, with the context it came from.
struct ThreadError {
  const ContextImpl* context = nullptr;
  std::string text;
};
thread_local ThreadError t_last_error;
const std::string kNoError;

// Sets the last error without logging: post_send and post_recv are the data
// path, where a full queue is ordinary back-pressure.
int record_error(const ContextImpl* c, int err, std::string message) {
  t_last_error.context = c;
  t_last_error.text = std::move(message);
  return err;
}

}  // namespace

// Every failed control call passes here.
void Context::Impl::wake_one(Impl& c, QueuePair& qp) {
  const internal::QpImpl& q = impl_of(qp);
  c.engines[q.engine]->wake(const_cast<transport::Qp*>(&q.qp));
}

int Context::Impl::fail(int err, std::string message) {
  logger().debug("{} ({})", message, std::strerror(err));
  return record_error(this, err, std::move(message));
}

int Context::Impl::note(int err, std::string message) { return record_error(this, err, std::move(message)); }

const std::string& Context::last_error() const {
  return t_last_error.context == impl_.get() ? t_last_error.text : kNoError;
}

namespace internal {

std::unique_ptr<CompletionQueue> Access::make_cq(std::unique_ptr<CqImpl> impl) {
  return std::unique_ptr<CompletionQueue>(new CompletionQueue(std::move(impl)));
}
std::unique_ptr<QueuePair> Access::make_qp(Context* ctx, std::unique_ptr<QpImpl> impl) {
  return std::unique_ptr<QueuePair>(new QueuePair(ctx, std::move(impl)));
}

engine::Engine& engine_of(Context& ctx, std::size_t i) { return *impl_of(ctx).engines.at(i); }
std::size_t engine_count(const Context& ctx) { return impl_of(ctx).engines.size(); }

}  // namespace internal

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

std::size_t Context::progress() { return impl_->backend->progress(); }

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

int Context::start_workers(const std::vector<int>& cpus) { return start_workers(cpus, WorkerHook{}); }

int Context::start_workers(const std::vector<int>& cpus, WorkerHook hook) {
  return impl_->backend->start_workers(cpus, hook);
}

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
  return 0;
}

void Context::stop_workers() { impl_->backend->stop_workers(); }

void LocalBackend::stop_workers() {
  ContextImpl& c = c_;
  std::lock_guard<std::mutex> lock(c.control_mutex);
  if (!c.workers_running.load()) return;
  c.workers_stop.store(true);
  for (std::thread& t : c.workers) t.join();
  c.workers.clear();
  c.workers_running.store(false, std::memory_order_release);
}

ProtectionDomain* Context::alloc_pd() { return impl_->backend->alloc_pd(); }

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

int Context::dealloc_pd(ProtectionDomain* pd) { return impl_->backend->dealloc_pd(pd); }

int LocalBackend::dealloc_pd(ProtectionDomain* pd) {
  return c_.control([&] { return dealloc_pd_now(c_, pd); });
}

CompletionQueue* Context::create_cq(int cqe, void (*on_event)(void*), void* arg) {
  return impl_->backend->create_cq(cqe, on_event, arg);
}

CompletionQueue* LocalBackend::create_cq(int cqe, void (*on_event)(void*), void* arg) {
  return c_.control([&]() -> CompletionQueue* { return create_cq_now(c_, cqe, on_event, arg); });
}

int Context::destroy_cq(CompletionQueue* cq) { return impl_->backend->destroy_cq(cq); }

int LocalBackend::destroy_cq(CompletionQueue* cq) {
  return c_.control([&] {
    if (impl_of(*cq).users != 0) return c_.fail(EBUSY, "QPs still use this CQ; destroy them first");
    return erase_owned(c_.cqs, cq) ? 0 : c_.fail(EINVAL, "not a CQ of this context");
  });
}

void* Context::alloc_buffer(std::size_t bytes) { return impl_->backend->alloc_buffer(bytes); }

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

int Context::query_gid(int index, ibv_gid& gid) const { return impl_->query_gid(index, gid); }

int Context::Impl::query_gid(int index, ibv_gid& gid) { return backend->query_gid(index, gid); }

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

Reach Context::resolve_gid(const ibv_gid& gid, std::uint8_t mac[6]) { return impl_->backend->resolve_gid(gid, mac); }

int Context::Impl::wait_resolved(const ibv_gid& gid, std::uint8_t mac[6], const char* what) {
  // The resolver gives up after a second; the deadline only bounds the
  // wait should it be busy with others (Resolver::kMaxPending).
  const auto deadline = std::chrono::steady_clock::now() + Resolver::kTimeout + std::chrono::milliseconds(500);
  for (;;) {
    switch (resolver->query(gid, mac)) {
      case Reach::kKnown: return 0;
      case Reach::kUnreachable:
        return fail(EHOSTUNREACH, std::string(what) +
                                      ": cannot resolve the peer's GID to an Ethernet address: no answer to ARP/ND "
                                      "within a second, now or in the last 5 s (is it on the link?)");
      case Reach::kPending: break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return fail(EHOSTUNREACH, std::string(what) + ": the peer's GID was not resolved in time (too many "
                                                    "resolutions under way); try again");
    }
    if (!workers_running.load(std::memory_order_acquire)) {
      // Nobody else may be polling the port's queues: poll them here, in a
      // short control call (exclusive with progress() in other threads).
      control([&] {
        for (auto& e : engines) e->poll();
        return 0;
      }, Access::kReadsOnly);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

void Context::free_buffer(void* buffer) { impl_->backend->free_buffer(buffer); }

void LocalBackend::free_buffer(void* buffer) {
  const auto it = c_.buffers.find(buffer);
  if (it == c_.buffers.end()) return;
  mem::unmap_buffer(it->second);
  c_.buffers.erase(it);
}

// --- ProtectionDomain -------------------------------------------------------------

MemoryRegion* ProtectionDomain::reg_mr(void* addr, std::size_t length, int access) {
  return reg_mr_iova(addr, length, reinterpret_cast<std::uint64_t>(addr), access);
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

MemoryRegion* ProtectionDomain::reg_mr_iova(void* addr, std::size_t length, std::uint64_t iova, int access) {
  return impl_of(*ctx_).backend->reg_mr(this, addr, length, iova, access, false);
}

MemoryRegion* internal::reg_mr_copied(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                      int access) {
  return impl_of(pd->context()).backend->reg_mr(pd, addr, length, iova, access, true);
}

MemoryRegion* LocalBackend::reg_mr(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                   int access, bool copied) {
  return reg_mr_outside(c_, pd, addr, length, iova, access, !copied);
}

int ProtectionDomain::dereg_mr(MemoryRegion* mr) { return impl_of(*ctx_).backend->dereg_mr(this, mr); }

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

namespace internal {

Reach lookup_gid(Context& ctx, const ibv_gid& gid) {
  ContextImpl& c = impl_of(ctx);
  return c.resolver == nullptr ? Reach::kKnown : c.resolver->look(gid, nullptr);
}

std::uint64_t resolve_counter(const Context& ctx, const char* name) {
  const ContextImpl& c = impl_of(ctx);
  if (c.resolver == nullptr) return 0;
  const ResolveCounters counters = c.resolver->counters();
#define UROCE_X(row, description) \
  if (std::strcmp(name, #row) == 0) return counters.row;
  UROCE_RESOLVE_COUNTER_LIST(UROCE_X)
#undef UROCE_X
  return 0;
}

QueuePair* create_gsi_qp(ProtectionDomain* pd, const QpInitAttr& attr) {
  return impl_of(pd->context()).backend->create_qp(pd, attr, true);
}

std::uint64_t now_ns(Context& ctx) { return impl_of(ctx).port.clock->now_ns(); }

}  // namespace internal

QueuePair* ProtectionDomain::create_qp(const QpInitAttr& attr) {
  return impl_of(*ctx_).backend->create_qp(this, attr, false);
}

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

int ProtectionDomain::destroy_qp(QueuePair* qp) { return impl_of(*ctx_).backend->destroy_qp(this, qp); }

int LocalBackend::destroy_qp(ProtectionDomain*, QueuePair* qp) {
  return c_.control([&] { return destroy_qp_now(c_, qp); });
}

// --- CompletionQueue ----------------------------------------------------------------

CompletionQueue::CompletionQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompletionQueue::~CompletionQueue() = default;
int CompletionQueue::poll(int n, ibv_wc* wc) { return impl_->poll(*impl_, n, wc); }
int CompletionQueue::capacity() const { return static_cast<int>(impl_->capacity); }

int CompletionQueue::arm(bool solicited_only) { return impl_->backend->arm_cq(*impl_, solicited_only); }

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

bool CompletionQueue::overflowed() const { return impl_->backend->cq_overflowed(*impl_); }

bool LocalBackend::cq_overflowed(const internal::CqImpl& cq) const {
  for (std::size_t i = 0; i < cq.rings.size(); ++i) {
    const transport::CompletionRing* ring = cq.published[i].load(std::memory_order_acquire);
    if (ring != nullptr && ring->overflowed()) return true;
  }
  return false;
}

transport::CompletionRing& CompletionQueue::Impl::ring_for(std::size_t engine) {
  if (!rings[engine]) {
    rings[engine] = std::make_unique<transport::CompletionRing>(
        capacity, events.fire != nullptr ? &events : nullptr);
    published[engine].store(rings[engine].get(), std::memory_order_release);
  }
  return *rings[engine];
}

int CompletionQueue::Impl::poll_rings(int n, ibv_wc* wc) {
  // Rings in turn from a rotating start, so no engine's completions wait
  // behind another's.
  const std::size_t count = rings.size();
  int got = 0;
  for (std::size_t k = 0; k < count && got < n; ++k) {
    transport::CompletionRing* ring = published[(next + k) % count].load(std::memory_order_acquire);
    if (ring == nullptr) continue;
    const int r = ring->poll(n - got, wc + got);
    if (r < 0) return r;
    got += r;
  }
  if (count > 1) next = (next + 1) % count;
  return got;
}

// --- QueuePair ------------------------------------------------------------------------

QueuePair::QueuePair(Context* ctx, std::unique_ptr<Impl> impl) : ctx_(ctx), impl_(std::move(impl)) {}
QueuePair::~QueuePair() = default;

std::uint32_t QueuePair::qp_num() const { return impl_->qp.qpn; }
// The engine's copy (qp.state) changes under the workers; app_state follows
// it at every transition (transport/qp.cc).
ibv_qp_state QueuePair::state() const { return impl_->qp.app_state.load(std::memory_order_acquire); }

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

int QueuePair::modify(const ibv_qp_attr& attr, int attr_mask) {
  return impl_of(*ctx_).backend->modify_qp(*this, attr, attr_mask);
}

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

int QueuePair::query(ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) const {
  return impl_of(*ctx_).backend->query_qp(*this, attr, attr_mask, init_attr);
}

int LocalBackend::query_qp(const QueuePair& qp, ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) {
  return c_.control([&] { return query_now(impl_of(qp), attr, attr_mask, init_attr); },
                    ContextImpl::Access::kReadsOnly);
}

// One indirect call per call (not per WR): the backend's data path.
int QueuePair::post_send(ibv_send_wr* wr, ibv_send_wr** bad_wr) { return impl_->post_send(*this, wr, bad_wr); }
int QueuePair::post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad_wr) { return impl_->post_recv(*this, wr, bad_wr); }

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
        return record_error(&impl_of(q.pd->context()), EINVAL,
                            "UD send WR: wr.ud.ah is not an address handle of the QP's PD");
      }
      to = &internal::Access::impl(const_cast<AddressHandle&>(*ah)).path;
    }
    if (const int rc = transport::qp_post_send(q.qp, *wr, to); rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return record_error(&impl_of(q.pd->context()), rc,
                          rc == ENOMEM ? "send queue full (max_send_wr)"
                                       : "bad send WR: opcode (for the QP type), SGE count, inline size, "
                                         "length (UD: at most the MTU) or QP state");
    }
  }
  return 0;
}

int local_post_recv(QueuePair& qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  internal::QpImpl& q = impl_of(qp);
  if (q.qp.srq != nullptr) [[unlikely]] {
    if (bad_wr != nullptr) *bad_wr = wr;
    return record_error(&impl_of(q.pd->context()), EINVAL, "this QP receives from an SRQ: post to the SRQ");
  }
  for (; wr != nullptr; wr = wr->next) {
    if (const int rc = transport::qp_post_recv(q.qp, *wr); rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return record_error(&impl_of(q.pd->context()), rc,
                          rc == ENOMEM ? "receive queue full (max_recv_wr)"
                                       : "bad receive WR: SGE count or QP state (RESET)");
    }
  }
  return 0;
}

}  // namespace

std::uint32_t QueuePair::send_retired() const { return impl_->qp.sq_retired.load(std::memory_order_acquire); }
std::uint32_t QueuePair::recv_retired() const { return impl_->qp.rq_retired.load(std::memory_order_acquire); }

QueuePair::CongestionState QueuePair::congestion() const { return impl_of(*ctx_).backend->congestion(*this); }

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

std::uint64_t QueuePair::counter(const char* name) const {
  const transport::QpCounter c = transport::qp_counter_by_name(name);
  if (c != transport::QpCounter::kCount) impl_of(*ctx_).backend->refresh_counters(*this);
  // A relaxed atomic load (transport/counters.h): safe while workers run.
  return c == transport::QpCounter::kCount ? 0 : impl_->qp.counters.get(c);
}

}  // namespace uroce
