// The verbs-like API on top of the engine and the transport.
#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "service/client.h"
#include "log/log.h"
#include "verbs/backend.h"
#include "verbs/verbs_impl.h"

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
  if (port.min_ack_timeout > 31) {
    error = "PortConfig::min_ack_timeout " + std::to_string(port.min_ack_timeout) +
            ": give a local ACK timeout exponent, 0 to 31 (4.096 us * 2^N), or 0 for no floor";
    return nullptr;
  }
  if (port.dcqcn != nullptr && port.dcqcn->enabled && port.delay_cc != nullptr) {
    error = "PortConfig: both dcqcn and delay_cc are set; choose one congestion control (cc = dcqcn or cc = delay)";
    return nullptr;
  }
  PortConfig p = port;
  if (p.queues.empty()) p.queues.push_back(p.io);
  p.io = p.queues[0];  // the control path's queue: neighbour resolution, memory registration
  auto ctx = std::unique_ptr<Context>(new Context());
  ctx->impl_ = std::make_unique<Impl>(p);
  ctx->impl_->backend = internal::make_local_backend(*ctx);
  return ctx;
}

std::unique_ptr<Context> Context::attach(const std::string& socket_path, std::string& error) {
  auto client = service::Client::connect(socket_path, error);
  if (!client) return nullptr;
  auto ctx = std::unique_ptr<Context>(new Context());
  ctx->impl_ = std::make_unique<Impl>(PortConfig{});  // the daemon's port, filled in by the backend
  ctx->impl_->backend = internal::make_service_backend(*ctx, std::move(client));
  return ctx;
}

bool Context::attached() const { return impl_->backend->attached(); }

Context::Impl::~Impl() = default;

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

engine::Engine& engine_of(Context& ctx, std::size_t i) { return impl_of(ctx).backend->engine(i); }
std::size_t engine_count(const Context& ctx) { return impl_of(ctx).backend->engine_count(); }

}  // namespace internal

std::size_t Context::progress() { return impl_->backend->progress(ProgressFor::kAny); }

std::size_t Context::progress(ProgressFor why) { return impl_->backend->progress(why); }

std::uint64_t Context::requests_received() const { return impl_->backend->requests_received(); }

int Context::start_workers(const std::vector<int>& cpus) { return start_workers(cpus, WorkerHook{}); }

int Context::start_workers(const std::vector<int>& cpus, WorkerHook hook) {
  return impl_->backend->start_workers(cpus, hook);
}

void Context::stop_workers() { impl_->backend->stop_workers(); }

int Context::set_progress(Progress mode) { return impl_->backend->set_progress(mode); }

Context::Progress Context::progress_mode() const { return impl_->backend->progress_mode(); }

void Context::hand_to_helper() { impl_->backend->hand_to_helper(); }

ProtectionDomain* Context::alloc_pd() { return impl_->backend->alloc_pd(); }

int Context::dealloc_pd(ProtectionDomain* pd) { return impl_->backend->dealloc_pd(pd); }

CompletionQueue* Context::create_cq(int cqe, void (*on_event)(void*), void* arg) {
  return impl_->backend->create_cq(CqAttr{cqe, on_event, arg, false});
}

CompletionQueue* Context::create_cq(const CqAttr& attr) { return impl_->backend->create_cq(attr); }

int Context::query_clock(ClockValues& values) { return impl_->backend->query_clock(values); }

int Context::destroy_cq(CompletionQueue* cq) { return impl_->backend->destroy_cq(cq); }

void* Context::alloc_buffer(std::size_t bytes) { return impl_->backend->alloc_buffer(bytes); }

int Context::query_gid(int index, ibv_gid& gid) const { return impl_->query_gid(index, gid); }

int Context::Impl::query_gid(int index, ibv_gid& gid) { return backend->query_gid(index, gid); }

Reach Context::resolve_gid(const ibv_gid& gid, std::uint8_t mac[6]) { return impl_->backend->resolve_gid(gid, mac); }

void Context::free_buffer(void* buffer) { impl_->backend->free_buffer(buffer); }

// --- ProtectionDomain -------------------------------------------------------------

MemoryRegion* ProtectionDomain::reg_mr(void* addr, std::size_t length, int access) {
  return reg_mr_iova(addr, length, reinterpret_cast<std::uint64_t>(addr), access);
}

MemoryRegion* ProtectionDomain::reg_mr_iova(void* addr, std::size_t length, std::uint64_t iova, int access) {
  return impl_of(*ctx_).backend->reg_mr(this, addr, length, iova, access, false);
}

MemoryRegion* internal::reg_mr_copied(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                      int access) {
  return impl_of(pd->context()).backend->reg_mr(pd, addr, length, iova, access, true);
}

int ProtectionDomain::dereg_mr(MemoryRegion* mr) { return impl_of(*ctx_).backend->dereg_mr(this, mr); }

int ProtectionDomain::rereg_mr(MemoryRegion* mr, const ReregAttr& change) {
  return impl_of(*ctx_).backend->rereg_mr(this, mr, change, std::nullopt);
}

int internal::rereg_mr_as(ProtectionDomain* pd, MemoryRegion* mr, const ReregAttr& change, bool copied) {
  return impl_of(pd->context()).backend->rereg_mr(pd, mr, change, copied);
}

std::uint32_t internal::cq_waiting(CompletionQueue& cq) {
  std::uint32_t n = 0;
  for (const auto& ring : impl_of(cq).rings) n += ring ? ring->waiting() : 0;
  return n;
}

namespace internal {

Reach lookup_gid(Context& ctx, const ibv_gid& gid) { return impl_of(ctx).backend->lookup_gid(gid); }

std::uint64_t resolve_counter(const Context& ctx, const char* name) {
  const ResolveCounters counters = impl_of(ctx).backend->resolve_counters();
#define UROCE_X(row, description) \
  if (std::strcmp(name, #row) == 0) return counters.row;
  UROCE_RESOLVE_COUNTER_LIST(UROCE_X)
#undef UROCE_X
  return 0;
}

QueuePair* create_gsi_qp(ProtectionDomain* pd, const QpInitAttr& attr) {
  return impl_of(pd->context()).backend->create_qp(pd, attr, true);
}

std::uint64_t now_ns(Context& ctx) { return impl_of(ctx).backend->now_ns(); }

}  // namespace internal

QueuePair* ProtectionDomain::create_qp(const QpInitAttr& attr) {
  return impl_of(*ctx_).backend->create_qp(this, attr, false);
}

int ProtectionDomain::destroy_qp(QueuePair* qp) { return impl_of(*ctx_).backend->destroy_qp(this, qp); }

// --- CompletionQueue ----------------------------------------------------------------

CompletionQueue::CompletionQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CompletionQueue::~CompletionQueue() = default;

int CompletionQueue::poll(int n, ibv_wc* wc) { return impl_->poll(*impl_, n, wc, nullptr); }

int CompletionQueue::poll(int n, ibv_wc* wc, std::uint64_t* completion_ts) {
  return impl_->poll(*impl_, n, wc, completion_ts);
}

bool CompletionQueue::timestamps() const { return impl_->timestamps; }

int CompletionQueue::resize(int cqe) { return impl_->backend->resize_cq(*this, cqe); }

int CompletionQueue::capacity() const { return static_cast<int>(impl_->capacity); }

int CompletionQueue::arm(bool solicited_only) { return impl_->backend->arm_cq(*impl_, solicited_only); }

bool CompletionQueue::overflowed() const { return impl_->backend->cq_overflowed(*impl_); }

transport::CompletionRing& CompletionQueue::Impl::ring_for(std::size_t engine) {
  if (!rings[engine]) {
    rings[engine] = std::make_unique<transport::CompletionRing>(
        capacity, events.fire != nullptr ? &events : nullptr);
    if (stamp_clock != nullptr) rings[engine]->stamp_with(stamp_clock);
    published[engine].store(rings[engine].get(), std::memory_order_release);
  }
  return *rings[engine];
}

int CompletionQueue::Impl::poll_rings(int n, ibv_wc* wc, std::uint64_t* stamps) {
  // Rings in turn from a rotating start, so no engine's completions wait
  // behind another's.
  const std::size_t count = rings.size();
  int got = 0;
  for (std::size_t k = 0; k < count && got < n; ++k) {
    transport::CompletionRing* ring = published[(next + k) % count].load(std::memory_order_acquire);
    if (ring == nullptr) continue;
    const int r = ring->poll(n - got, wc + got, stamps != nullptr ? stamps + got : nullptr);
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

int QueuePair::modify(const ibv_qp_attr& attr, int attr_mask) {
  return impl_of(*ctx_).backend->modify_qp(*this, attr, attr_mask);
}

int QueuePair::query(ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) const {
  return impl_of(*ctx_).backend->query_qp(*this, attr, attr_mask, init_attr);
}

// One indirect call per call (not per WR): the backend's data path.
int QueuePair::post_send(ibv_send_wr* wr, ibv_send_wr** bad_wr) { return impl_->post_send(*this, wr, bad_wr); }

int QueuePair::post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad_wr) { return impl_->post_recv(*this, wr, bad_wr); }

std::uint32_t QueuePair::send_retired() const { return impl_->qp.sq.consumed(); }

std::uint32_t QueuePair::recv_retired() const { return impl_->qp.rq.consumed(); }

QueuePair::CongestionState QueuePair::congestion() const { return impl_of(*ctx_).backend->congestion(*this); }

std::uint64_t QueuePair::counter(const char* name) const {
  const transport::QpCounter c = transport::qp_counter_by_name(name);
  if (c != transport::QpCounter::kCount) impl_of(*ctx_).backend->refresh_counters(*this);
  // A relaxed atomic load (transport/counters.h): safe while workers run.
  return c == transport::QpCounter::kCount ? 0 : impl_->qp.counters.get(c);
}

}  // namespace uroce
