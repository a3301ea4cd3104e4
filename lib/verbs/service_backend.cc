// A Context attached to uroced (Context::attach): the same objects as in
// process, each call a control message to the daemon (lib/service), the data
// path the shared rings. Object lists are guarded by mutex_, as the
// in-process calls guard them by their control calls.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#include "service/client.h"
#include "service/shm.h"
#include "transport/counters.h"
#include "verbs/backend.h"
#include "verbs/verbs_impl.h"

namespace uroce {

using internal::impl_of;

CompletionQueue::Impl::~Impl() = default;
QueuePair::Impl::~Impl() = default;

namespace internal {
namespace {

// The data path (QueuePair::Impl::post_send, post_recv; CompletionQueue::Impl::poll):
// WRs into the rings the daemon drains.
int post_send(QueuePair& qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  QpImpl& q = impl_of(qp);
  const bool ud = q.init.qp_type == IBV_QPT_UD;
  for (; wr != nullptr; wr = wr->next) {
    // A UD send names its AH by number (the daemon's table of this
    // client's AHs holds it under the same one); of the QP's PD, as in process.
    std::uint32_t ah = 0;
    if (ud) {
      const AddressHandle* h = AddressHandle::of(wr->wr.ud.ah);
      if (h == nullptr || h->pd() != q.pd) [[unlikely]] {
        if (bad_wr != nullptr) *bad_wr = wr;
        return impl_of(q.pd->context()).note(EINVAL, "UD send WR: wr.ud.ah is not an address handle of the QP's PD");
      }
      ah = wr->wr.ud.ah->handle;
    }
    if (const int rc = q.remote->post_send(*wr, ah); rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return impl_of(q.pd->context()).note(rc, rc == ENOMEM ? "send queue full (max_send_wr)"
                                                           : "bad send WR: opcode (for the QP type), SGE count, "
                                                             "inline size, length (UD: at most the MTU) or QP state");
    }
  }
  return 0;
}

int post_recv(QueuePair& qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  QpImpl& q = impl_of(qp);
  if (q.init.srq != nullptr) [[unlikely]] {
    if (bad_wr != nullptr) *bad_wr = wr;
    return impl_of(q.pd->context()).note(EINVAL, "this QP receives from an SRQ: post to the SRQ");
  }
  for (; wr != nullptr; wr = wr->next) {
    if (const int rc = q.remote->post_recv(*wr); rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return impl_of(q.pd->context()).note(rc, rc == ENOMEM ? "receive queue full (max_recv_wr)"
                                                           : "bad receive WR: SGE count or QP state (RESET)");
    }
  }
  return 0;
}

int poll_cq(CqImpl& cq, int n, ibv_wc* wc, std::uint64_t* stamps) { return cq.remote->poll(n, wc, stamps); }

// Every call the daemon's; it owns the socket.
class ServiceBackend final : public Backend {
 public:
  // The context's limits and port addresses are the daemon's (its hello).
  ServiceBackend(Context& ctx, std::unique_ptr<service::Client> client);
  // Closing the socket (client_) is the daemon's signal to free all of
  // ours; the event thread stops before the CQs it calls back go (the
  // Context's Impl outlives its backend).
  ~ServiceBackend() override;

  bool attached() const override { return true; }
  std::uint64_t now_ns() const override {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
  }
  std::size_t engine_count() const override { return 0; }  // the daemon's
  engine::Engine& engine(std::size_t) override {
    throw std::out_of_range("a context attached to uroced has no engines in this process");
  }
  std::size_t progress(Context::ProgressFor) override { return 0; }  // the daemon's workers run the engines
  std::uint64_t requests_received() const override { return 0; }
  int start_workers(const std::vector<int>&, Context::WorkerHook) override { return 0; }
  void stop_workers() override {}
  int set_progress(Context::Progress mode) override {
    if (mode == Context::Progress::kWorkers) return 0;
    return c_.fail(ENOTSUP, "progress in the caller is for an in-process device: attached, uroced's cores run the "
                            "engines");
  }
  Context::Progress progress_mode() const override { return Context::Progress::kWorkers; }
  int query_gid(int index, ibv_gid& gid) override;
  Reach resolve_gid(const ibv_gid&, std::uint8_t*) override {
    return Reach::kKnown;  // the daemon resolves when the address is set
  }
  Reach lookup_gid(const ibv_gid&) override { return Reach::kKnown; }
  ResolveCounters resolve_counters() const override { return {}; }  // the daemon's
  void* alloc_buffer(std::size_t bytes) override;
  void free_buffer(void* buffer) override { client_->free_buffer(buffer); }
  ProtectionDomain* alloc_pd() override;
  int dealloc_pd(ProtectionDomain* pd) override;
  MemoryRegion* reg_mr(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access,
                       bool copied) override;
  int dereg_mr(ProtectionDomain* pd, MemoryRegion* mr) override;
  MemoryRegion* reg_mr_odp(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova, int access);
  // A region the daemon made (its keys in `region`, its handle `handle`),
  // owned by the context from now on.
  MemoryRegion* keep_region(const MemoryRegion& region, std::uint32_t handle);
  std::unique_ptr<DeviceMemory> alloc_dm(std::size_t length) override;
  int free_dm(DeviceMemory* dm) override;
  MemoryRegion* reg_dm_mr(ProtectionDomain* pd, DeviceMemory* dm, std::uint64_t offset, std::size_t length,
                          int access) override;
  MemoryWindow* alloc_mw(ProtectionDomain* pd, ibv_mw_type type) override;
  int dealloc_mw(ProtectionDomain* pd, MemoryWindow* mw) override;
  XrcDomain* open_xrcd() override;
  int close_xrcd(XrcDomain* xrcd) override;
  int rereg_mr(ProtectionDomain* pd, MemoryRegion* mr, const ReregAttr& change, std::optional<bool> copied) override;
  CompletionQueue* create_cq(const CqAttr& attr) override;
  int resize_cq(CompletionQueue& cq, int cqe) override;
  int query_clock(ClockValues& values) override;
  int destroy_cq(CompletionQueue* cq) override;
  int arm_cq(CqImpl& cq, bool solicited_only) override { return cq.remote->arm(solicited_only); }
  bool cq_overflowed(const CqImpl& cq) const override { return cq.remote->overflowed(); }
  QueuePair* create_qp(ProtectionDomain* pd, const QpInitAttr& attr, bool gsi) override;
  int destroy_qp(ProtectionDomain* pd, QueuePair* qp) override;
  int modify_qp(QueuePair& qp, const ibv_qp_attr& attr, int attr_mask) override;
  int set_transport_options(QueuePair& qp, const TransportOptions& options) override;
  int query_qp(const QueuePair& qp, ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) override;
  void refresh_counters(const QueuePair& qp) override;
  QueuePair::CongestionState congestion(const QueuePair&) override { return {}; }  // the daemon's (uroced --stats)
  AddressHandle* create_ah(ProtectionDomain* pd, const ibv_ah_attr& attr) override;
  int destroy_ah(AddressHandle* ah) override;
  SharedReceiveQueue* create_srq(ProtectionDomain* pd, const SrqInitAttr& attr, void (*on_limit)(void*),
                                 void* arg) override;
  int destroy_srq(SharedReceiveQueue* srq) override;
  // The engines are the daemon's (uroced --stats).
  std::vector<Stat> stats() override { return {}; }
  std::vector<Stat> engine_stats(std::size_t) override { return {}; }
  std::vector<std::uint32_t> qp_nums() override { return {}; }
  bool qp_stats(std::uint32_t, QpStats&) override { return false; }
  std::size_t qp_stats_page(std::uint32_t, std::size_t, std::vector<QpStats>&, std::size_t) override { return 0; }

 private:
  // One call that names an object and returns nothing else.
  int simple(service::Op op, std::uint32_t handle, const char* what);
  // A request with no arguments that makes an object: its handle, or 0
  // (failed, with last_error()).
  std::uint32_t make(service::Op op, const char* what);

  Context& ctx_;
  ContextImpl& c_;
  std::unique_ptr<service::Client> client_;
  std::map<const MemoryRegion*, std::uint32_t> mrs_;  // the daemon's handle of each region
  std::map<const DeviceMemory*, std::size_t> dm_maps_;  // device memory mapped here: its bytes
  std::mutex mutex_;  // one control call at a time
};

ServiceBackend::ServiceBackend(Context& ctx, std::unique_ptr<service::Client> client)
    : ctx_(ctx), c_(impl_of(ctx)), client_(std::move(client)) {
  const service::HelloReply& h = client_->hello();
  DeviceLimits& limits = c_.limits;
  limits.max_qp = h.max_qp;
  limits.max_qp_wr = h.max_qp_wr;
  limits.max_sge = h.max_sge;
  limits.max_inline_data = h.max_inline_data;
  limits.max_cqe = h.max_cqe;
  limits.max_mr = h.max_mr;
  limits.max_qp_rd_atom = h.max_qp_rd_atom;
  limits.max_qp_init_rd_atom = h.max_qp_init_rd_atom;
  limits.max_dm_size = h.max_dm_size;
  PortConfig& port = c_.port;
  std::memcpy(port.mac, h.mac, sizeof port.mac);
  port.gid = h.gid[1];
  port.active_mtu = static_cast<ibv_mtu>(h.active_mtu);
}

// The daemon frees what is left when the socket closes; this process's
// mappings of its device memory go here.
ServiceBackend::~ServiceBackend() {
  for (const auto& [dm, bytes] : dm_maps_) munmap(dm->addr(), bytes);
}

int ServiceBackend::simple(service::Op op, std::uint32_t handle, const char* what) {
  service::Request req;
  req.op = op;
  req.handle = handle;
  service::Reply reply;
  std::string why;
  const int e = client_->call(req, reply, nullptr, 0, nullptr, why);
  return e == 0 ? 0 : c_.fail(e, std::string(what) + ": " + why);
}

int ServiceBackend::query_gid(int index, ibv_gid& gid) {
  if (index == 0 || index == 1) {
    gid = client_->hello().gid[index];
    return 0;
  }
  return c_.fail(EINVAL, "GID index " + std::to_string(index) + " does not exist (0: IPv6 link-local, 1: IPv4)");
}

std::uint32_t ServiceBackend::make(service::Op op, const char* what) {
  service::Request req;
  req.op = op;
  service::Reply reply;
  std::string why;
  if (const int e = client_->call(req, reply, nullptr, 0, nullptr, why); e != 0) {
    c_.fail(e, std::string(what) + ": " + why);
    return 0;
  }
  return reply.handle;
}

ProtectionDomain* ServiceBackend::alloc_pd() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint32_t handle = make(service::Op::kAllocPd, "alloc_pd");
  if (handle == 0) return nullptr;
  c_.pds.push_back(std::make_unique<ProtectionDomain>(&ctx_, handle));
  return c_.pds.back().get();
}

int ServiceBackend::dealloc_pd(ProtectionDomain* pd) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::none_of(c_.pds.begin(), c_.pds.end(), [pd](const auto& p) { return p.get() == pd; })) {
    return c_.fail(EINVAL, "not a PD of this context");
  }
  if (const int e = simple(service::Op::kDeallocPd, pd->handle(), "dealloc_pd"); e != 0) return e;
  erase_owned(c_.pds, pd);
  return 0;
}

CompletionQueue* ServiceBackend::create_cq(const CqAttr& attr) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (attr.cqe < 1 || static_cast<std::uint32_t>(attr.cqe) > c_.limits.max_cqe) {
    c_.fail(EINVAL, "cqe must be between 1 and the device's max_cqe");
    return nullptr;
  }
  std::string why;
  int err = 0;
  auto rcq = client_->create_cq(static_cast<std::uint32_t>(attr.cqe), attr.on_event, attr.arg, why, err,
                                attr.completion_timestamps);
  if (!rcq) {
    c_.fail(err, "create_cq: " + why);
    return nullptr;
  }
  auto impl = std::make_unique<CqImpl>(static_cast<std::uint32_t>(attr.cqe), 0);
  impl->events.fire = attr.on_event;
  impl->events.arg = attr.arg;
  impl->timestamps = attr.completion_timestamps;  // the daemon stamps them
  impl->remote = std::move(rcq);
  impl->poll = &poll_cq;
  impl->backend = this;
  c_.cqs.push_back(Access::make_cq(std::move(impl)));
  return c_.cqs.back().get();
}

int ServiceBackend::destroy_cq(CompletionQueue* cq) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::none_of(c_.cqs.begin(), c_.cqs.end(), [cq](const auto& p) { return p.get() == cq; })) {
    return c_.fail(EINVAL, "not a CQ of this context");
  }
  if (impl_of(*cq).users != 0) return c_.fail(EBUSY, "QPs still use this CQ; destroy them first");
  std::string why;
  if (const int e = client_->destroy_cq(impl_of(*cq).remote.get(), why); e != 0) {
    return c_.fail(e, "destroy_cq: " + why);
  }
  erase_owned(c_.cqs, cq);
  return 0;
}

int ServiceBackend::resize_cq(CompletionQueue& cq, int cqe) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::none_of(c_.cqs.begin(), c_.cqs.end(), [&cq](const auto& p) { return p.get() == &cq; })) {
    return c_.fail(EINVAL, "resize_cq: not a CQ of this context");
  }
  if (cqe < 1 || static_cast<std::uint32_t>(cqe) > c_.limits.max_cqe) {
    return c_.fail(EINVAL, "resize_cq: cqe must be between 1 and the device's max_cqe");
  }
  std::string why;
  if (const int e = client_->resize_cq(impl_of(cq).remote.get(), static_cast<std::uint32_t>(cqe), why); e != 0) {
    return c_.fail(e, "resize_cq: " + why);
  }
  impl_of(cq).capacity = static_cast<std::uint32_t>(cqe);
  return 0;
}

// The daemon's clock: completions through it are stamped there.
int ServiceBackend::query_clock(ClockValues& values) {
  std::lock_guard<std::mutex> lock(mutex_);
  service::Request req;
  req.op = service::Op::kQueryClock;
  service::Reply reply;
  std::string why;
  if (const int e = client_->call(req, reply, nullptr, 0, nullptr, why); e != 0) {
    return c_.fail(e, "query_clock: " + why);
  }
  values.raw_ns = reply.clock.raw_ns;
  values.realtime_ns = reply.clock.realtime_ns;
  return 0;
}

// A new translation is moved onto memory files as reg_mr's memory is; the
// daemon maps it and changes its region in place (the keys stay).
int ServiceBackend::rereg_mr(ProtectionDomain* pd, MemoryRegion* mr, const ReregAttr& change, std::optional<bool>) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = mrs_.find(mr);
  if (it == mrs_.end() || mr->pd != pd) return c_.fail(EINVAL, "rereg_mr: not a registered memory region of this PD");
  ReregAttr to;
  if (const int e = check_rereg(c_, ctx_, *mr, change, to); e != 0) return e;
  service::Request req;
  req.op = service::Op::kReregMr;
  req.handle = it->second;
  req.rereg_mr.flags = static_cast<std::uint32_t>(change.flags);
  service::RegMr& r = req.rereg_mr.region;
  r = service::RegMr{to.pd->handle(), to.access, to.iova, to.length, 0, 0, {}};
  int fds[service::kMaxPieces];
  std::string why;
  if ((change.flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0) {
    service::SharedRange range;
    if (const int e = client_->share(to.addr, to.length, range, why); e != 0) return c_.fail(e, "rereg_mr: " + why);
    r.offset = range.offset;
    for (const service::SharedRange::Piece& p : range.pieces) {
      fds[r.pieces] = p.fd;
      r.piece[r.pieces++] = service::MemoryPiece{p.file_offset, p.bytes};
    }
  }
  service::Reply reply;
  if (const int e = client_->call(req, reply, fds, static_cast<int>(r.pieces), nullptr, why); e != 0) {
    return c_.fail(e, "rereg_mr: " + why);
  }
  mr->pd = to.pd;
  mr->addr = to.addr;
  mr->length = to.length;
  mr->iova = to.iova;
  mr->access = to.access;
  return 0;
}

void* ServiceBackend::alloc_buffer(std::size_t bytes) {
  void* p = client_->alloc_buffer(bytes);
  if (p == nullptr) c_.fail(ENOMEM, "out of memory for a " + std::to_string(bytes) + "-byte shared buffer");
  return p;
}

// `copied` is not the client's to ask: the daemon picks how it registers
// the region (lib/service/daemon/memory.cc).
MemoryRegion* ServiceBackend::reg_mr(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                     int access, bool) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (access & IBV_ACCESS_ON_DEMAND) return reg_mr_odp(pd, addr, length, iova, access);
  if (length == 0 || addr == nullptr) {
    c_.fail(EINVAL, "bad region: zero length or no address");
    return nullptr;
  }
  service::SharedRange range;
  std::string why;
  if (const int e = client_->share(addr, length, range, why); e != 0) {
    c_.fail(e, "reg_mr: " + why);
    return nullptr;
  }
  service::Request req;
  req.op = service::Op::kRegMr;
  req.reg_mr = service::RegMr{pd->handle(), access, iova, length, range.offset, 0, {}};
  int fds[service::kMaxPieces];
  for (const service::SharedRange::Piece& p : range.pieces) {
    fds[req.reg_mr.pieces] = p.fd;
    req.reg_mr.piece[req.reg_mr.pieces++] = service::MemoryPiece{p.file_offset, p.bytes};
  }
  service::Reply reply;
  if (const int e = client_->call(req, reply, fds, static_cast<int>(req.reg_mr.pieces), nullptr, why); e != 0) {
    c_.fail(e, "reg_mr: " + why);
    return nullptr;
  }
  return keep_region(MemoryRegion{addr, length, iova, reply.reg_mr.lkey, reply.reg_mr.rkey, access, pd}, reply.handle);
}

MemoryRegion* ServiceBackend::keep_region(const MemoryRegion& region, std::uint32_t handle) {
  c_.mrs_owned.push_back(std::make_unique<MemoryRegion>(region));
  mrs_[c_.mrs_owned.back().get()] = handle;
  return c_.mrs_owned.back().get();
}

// On demand: the memory stays where it is, unshared; the daemon reaches it
// through the kernel, by this process's /proc/self/mem, passed with the
// registration (lib/service/daemon/memory.cc).
MemoryRegion* ServiceBackend::reg_mr_odp(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                                         int access) {
  const bool implicit = addr == nullptr && length == SIZE_MAX;
  if (!implicit && (length == 0 || addr == nullptr)) {
    c_.fail(EINVAL, "bad on-demand region: no address or zero length (implicit ODP is addr NULL, length SIZE_MAX)");
    return nullptr;
  }
  service::Request req;
  req.op = service::Op::kRegMr;
  req.reg_mr = service::RegMr{pd->handle(), access, implicit ? 0 : iova, length, 0, 0, {},
                              reinterpret_cast<std::uintptr_t>(addr)};
  const int self = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  if (self < 0) {
    c_.fail(errno, "reg_mr: on-demand regions need this process's /proc/self/mem, which the daemon reaches them by: " +
                       std::string(std::strerror(errno)));
    return nullptr;
  }
  service::Reply reply;
  std::string why;
  const int e = client_->call(req, reply, &self, 1, nullptr, why);
  close(self);
  if (e != 0) {
    c_.fail(e, "reg_mr: " + why);
    return nullptr;
  }
  const std::uint64_t at = implicit ? 0 : iova;
  return keep_region(MemoryRegion{addr, length, at, reply.reg_mr.lkey, reply.reg_mr.rkey, access, pd}, reply.handle);
}

int ServiceBackend::dereg_mr(ProtectionDomain*, MemoryRegion* mr) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = mrs_.find(mr);
  if (it == mrs_.end()) return c_.fail(EINVAL, "not a registered memory region");
  if (const int e = simple(service::Op::kDeregMr, it->second, "dereg_mr"); e != 0) return e;
  mrs_.erase(it);
  if (mr->dm != nullptr) --mr->dm->regions;
  erase_owned(c_.mrs_owned, mr);
  return 0;
}

// Device memory: the daemon's memory file, mapped here as well.
std::unique_ptr<DeviceMemory> ServiceBackend::alloc_dm(std::size_t length) {
  std::lock_guard<std::mutex> lock(mutex_);
  service::Request req;
  req.op = service::Op::kAllocDm;
  req.alloc_dm.length = length;
  service::Reply reply;
  std::vector<int> got;
  std::string why;
  if (const int e = client_->call(req, reply, nullptr, 0, &got, why); e != 0) {
    c_.fail(e, "alloc_dm: " + why);
    return nullptr;
  }
  const std::size_t bytes = service::page_round(length);
  void* map = got.size() == 1 ? service::map_shared(got[0], bytes) : nullptr;
  const int e = errno;
  for (const int fd : got) close(fd);
  if (map == nullptr) {
    simple(service::Op::kFreeDm, reply.handle, "free_dm");
    c_.fail(ENOMEM, std::string("alloc_dm: mapping the daemon's memory file: ") + std::strerror(e));
    return nullptr;
  }
  auto dm = std::make_unique<DeviceMemory>(&ctx_, map, length, reply.handle);
  dm_maps_[dm.get()] = bytes;
  return dm;
}

int ServiceBackend::free_dm(DeviceMemory* dm) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const int e = simple(service::Op::kFreeDm, dm->handle(), "free_dm"); e != 0) return e;
  munmap(dm->addr(), dm_maps_.at(dm));
  dm_maps_.erase(dm);
  return 0;
}

MemoryRegion* ServiceBackend::reg_dm_mr(ProtectionDomain* pd, DeviceMemory* dm, std::uint64_t offset,
                                        std::size_t length, int access) {
  std::lock_guard<std::mutex> lock(mutex_);
  service::Request req;
  req.op = service::Op::kRegDmMr;
  req.reg_dm_mr = service::RegDmMr{pd->handle(), dm->handle(), access, offset, length};
  service::Reply reply;
  std::string why;
  if (const int e = client_->call(req, reply, nullptr, 0, nullptr, why); e != 0) {
    c_.fail(e, "reg_dm_mr: " + why);
    return nullptr;
  }
  const MemoryRegion region{dm->addr() + offset, length, 0, reply.reg_mr.lkey, reply.reg_mr.rkey, access, pd};
  return keep_region(region, reply.handle);
}

// Memory windows live in the daemon's table; the window's handle there is
// MemoryWindow::handle(). Binds and invalidations travel in the send ring.
MemoryWindow* ServiceBackend::alloc_mw(ProtectionDomain* pd, ibv_mw_type type) {
  std::lock_guard<std::mutex> lock(mutex_);
  service::Request req;
  req.op = service::Op::kAllocMw;
  req.handle = pd->handle();
  req.alloc_mw.type = static_cast<std::uint32_t>(type);
  service::Reply reply;
  std::string why;
  if (const int e = client_->call(req, reply, nullptr, 0, nullptr, why); e != 0) {
    c_.fail(e, "alloc_mw: " + why);
    return nullptr;
  }
  c_.mws_owned.push_back(std::make_unique<MemoryWindow>(pd, type, reply.reg_mr.rkey, reply.handle));
  return c_.mws_owned.back().get();
}

int ServiceBackend::dealloc_mw(ProtectionDomain* pd, MemoryWindow* mw) {
  std::lock_guard<std::mutex> lock(mutex_);
  bool ours = false;
  for (const auto& w : c_.mws_owned) ours = ours || w.get() == mw;
  if (!ours || mw->pd() != pd) return c_.fail(EINVAL, "not a memory window of this PD");
  if (const int e = simple(service::Op::kDeallocMw, mw->handle(), "dealloc_mw"); e != 0) return e;
  erase_owned(c_.mws_owned, static_cast<const MemoryWindow*>(mw));
  return 0;
}

XrcDomain* ServiceBackend::open_xrcd() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint32_t handle = make(service::Op::kOpenXrcd, "open_xrcd");
  if (handle == 0) return nullptr;
  c_.xrcds.push_back(std::make_unique<XrcDomain>(&ctx_, handle, -1));  // the engine is the daemon's
  return c_.xrcds.back().get();
}

int ServiceBackend::close_xrcd(XrcDomain* xrcd) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::none_of(c_.xrcds.begin(), c_.xrcds.end(), [xrcd](const auto& x) { return x.get() == xrcd; })) {
    return c_.fail(EINVAL, "not an XRC domain of this context");
  }
  if (xrcd->users != 0) return c_.fail(EBUSY, "XRC SRQs or target QPs of this domain remain: destroy them first");
  if (const int e = simple(service::Op::kCloseXrcd, xrcd->handle(), "close_xrcd"); e != 0) return e;
  erase_owned(c_.xrcds, static_cast<const XrcDomain*>(xrcd));
  return 0;
}

QueuePair* ServiceBackend::create_qp(ProtectionDomain* pd, const QpInitAttr& asked, bool gsi) {
  if (gsi) {
    c_.fail(EOPNOTSUPP, "QP1 (the CM) through uroced is not supported yet");
    return nullptr;
  }
  QpInitAttr attr = asked;
  if (attr.qp_type == IBV_QPT_XRC_SEND && attr.recv_cq == nullptr) attr.recv_cq = attr.send_cq;  // it receives nothing
  std::lock_guard<std::mutex> lock(mutex_);
  if (attr.send_cq == nullptr || attr.recv_cq == nullptr || !impl_of(*attr.send_cq).remote ||
      !impl_of(*attr.recv_cq).remote) {
    c_.fail(EINVAL, "send_cq and recv_cq are required, both of this context");
    return nullptr;
  }
  if (attr.srq != nullptr && !impl_of(*attr.srq).remote) {
    c_.fail(EINVAL, "srq is not an SRQ of this context");
    return nullptr;
  }
  service::CreateQp req{pd->handle(),
                        impl_of(*attr.send_cq).remote->handle,
                        impl_of(*attr.recv_cq).remote->handle,
                        static_cast<std::uint32_t>(attr.qp_type),
                        attr.sq_sig_all ? 1u : 0u,
                        attr.cap,
                        attr.srq != nullptr ? impl_of(*attr.srq).remote->handle : 0,
                        attr.xrcd != nullptr ? attr.xrcd->handle() : 0};
  std::string why;
  int err = 0;
  auto rqp = client_->create_qp(req, why, err);
  if (!rqp) {
    c_.fail(err, "create_qp: " + why);
    return nullptr;
  }
  auto impl = std::make_unique<QpImpl>();
  impl->post_send = &post_send;
  impl->post_recv = &post_recv;
  impl->pd = pd;
  impl->init = attr;
  impl->init.cap = rqp->cap;
  impl->qp.qpn = rqp->qpn;
  impl->remote = std::move(rqp);
  auto qp = Access::make_qp(&ctx_, std::move(impl));
  ++impl_of(*attr.send_cq).users;
  ++impl_of(*attr.recv_cq).users;
  if (attr.srq != nullptr) ++impl_of(*attr.srq).users;
  if (attr.xrcd != nullptr) ++attr.xrcd->users;
  c_.qps.push_back(std::move(qp));
  return c_.qps.back().get();
}

int ServiceBackend::destroy_qp(ProtectionDomain*, QueuePair* qp) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::none_of(c_.qps.begin(), c_.qps.end(), [qp](const auto& p) { return p.get() == qp; })) {
    return c_.fail(EINVAL, "not a QP of this context");
  }
  QpImpl& q = impl_of(*qp);
  std::string why;
  if (const int e = client_->destroy_qp(q.remote.get(), why); e != 0) return c_.fail(e, "destroy_qp: " + why);
  --impl_of(*q.init.send_cq).users;
  --impl_of(*q.init.recv_cq).users;
  if (q.init.srq != nullptr) --impl_of(*q.init.srq).users;
  if (q.init.xrcd != nullptr) --q.init.xrcd->users;
  erase_owned(c_.qps, qp);
  return 0;
}

int ServiceBackend::modify_qp(QueuePair& qp, const ibv_qp_attr& attr, int attr_mask) {
  QpImpl& q = impl_of(qp);
  std::lock_guard<std::mutex> lock(mutex_);
  service::Request req;
  req.op = service::Op::kModifyQp;
  req.modify_qp.qp = q.remote->handle;
  req.modify_qp.mask = attr_mask;
  req.modify_qp.attr = attr;
  service::Reply reply;
  std::string why;
  if (const int e = client_->call(req, reply, nullptr, 0, nullptr, why); e != 0) return c_.fail(e, why);
  if (attr_mask & IBV_QP_STATE) {
    q.remote->state = attr.qp_state;
    q.qp.app_state.store(attr.qp_state, std::memory_order_release);
    // RESET empties the queues: the daemon restarted its side of the rings
    // before it answered; this side's cursors restart too, or the next post
    // would hand the daemon every stale slot before it.
    if (attr.qp_state == IBV_QPS_RESET) {
      q.remote->sq.reset();
      q.remote->rq.reset();
    }
  }
  return 0;
}

// The daemon's QP checks and takes them; this side keeps a copy for
// QueuePair::transport_options().
int ServiceBackend::set_transport_options(QueuePair& qp, const TransportOptions& options) {
  QpImpl& q = impl_of(qp);
  std::lock_guard<std::mutex> lock(mutex_);
  service::Request req;
  req.op = service::Op::kSetTransportOptions;
  req.handle = q.remote->handle;
  req.set_transport_options.selective_repeat = options.selective_repeat ? 1 : 0;
  req.set_transport_options.spray_paths = options.spray_paths;
  req.set_transport_options.bdp_packets = options.bdp_packets;
  service::Reply reply;
  std::string why;
  if (const int e = client_->call(req, reply, nullptr, 0, nullptr, why); e != 0) {
    return c_.fail(e, "set_transport_options: " + why);
  }
  q.qp.options = transport::Qp::Options{options.selective_repeat, options.spray_paths, options.bdp_packets};
  return 0;
}

int ServiceBackend::query_qp(const QueuePair& qp, ibv_qp_attr& attr, int, QpInitAttr* init_attr) {
  // The QP's last known state is refreshed (a const call on the object).
  QpImpl& q = const_cast<QpImpl&>(impl_of(qp));
  std::lock_guard<std::mutex> lock(mutex_);
  service::Request req;
  req.op = service::Op::kQueryQp;
  req.handle = q.remote->handle;
  service::Reply reply;
  std::string why;
  if (const int e = client_->call(req, reply, nullptr, 0, nullptr, why); e != 0) return c_.fail(e, "query_qp: " + why);
  attr = reply.query_qp.attr;
  // The daemon's CM may have set them (an ECE agreement): this side's copy follows.
  q.qp.options = transport::Qp::Options{reply.query_qp.selective_repeat != 0, reply.query_qp.spray_paths,
                                        reply.query_qp.bdp_packets};
  q.remote->state = attr.qp_state;
  q.qp.app_state.store(attr.qp_state, std::memory_order_release);
  if (init_attr != nullptr) *init_attr = q.init;
  return 0;
}

SharedReceiveQueue* ServiceBackend::create_srq(ProtectionDomain* pd, const SrqInitAttr& attr, void (*on_limit)(void*),
                                               void* arg) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string why;
  int err = 0;
  if (attr.xrcd != nullptr && (attr.cq == nullptr || !impl_of(*attr.cq).remote)) {
    c_.fail(EINVAL, "an XRC SRQ needs a CQ of this context");
    return nullptr;
  }
  service::CreateSrq req{pd->handle(), attr.max_wr, attr.max_sge, attr.srq_limit};
  if (attr.xrcd != nullptr) {
    req.xrcd = attr.xrcd->handle();
    req.cq = impl_of(*attr.cq).remote->handle;
  }
  auto remote = client_->create_srq(req, on_limit, arg, why, err);
  if (!remote) {
    c_.fail(err, "create_srq: " + why);
    return nullptr;
  }
  auto impl = std::make_unique<SrqImpl>();
  impl->pd = pd;
  impl->init = attr;
  impl->remote = std::move(remote);
  if (attr.xrcd != nullptr) {
    ++attr.xrcd->users;
    ++impl_of(*attr.cq).users;
  }
  c_.srqs.push_back(Access::make_srq(std::move(impl)));
  return c_.srqs.back().get();
}

int ServiceBackend::destroy_srq(SharedReceiveQueue* srq) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::none_of(c_.srqs.begin(), c_.srqs.end(), [srq](const auto& p) { return p.get() == srq; })) {
    return c_.fail(EINVAL, "not an SRQ of this context");
  }
  if (impl_of(*srq).users != 0) return c_.fail(EBUSY, "QPs still use this SRQ: destroy them first");
  std::string why;
  if (const int e = client_->destroy_srq(impl_of(*srq).remote.get(), why); e != 0) {
    return c_.fail(e, "destroy_srq: " + why);
  }
  if (XrcDomain* x = impl_of(*srq).init.xrcd) {
    --x->users;
    --impl_of(*impl_of(*srq).init.cq).users;
  }
  erase_owned(c_.srqs, srq);
  return 0;
}

// The daemon makes the AH (and resolves its GID, as for a QP's address)
// under this process's number for it, which UD send slots carry.
AddressHandle* ServiceBackend::create_ah(ProtectionDomain* pd, const ibv_ah_attr& attr) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint32_t number = take_ah_handle();
  if (number == 0 || number >= service::kMaxAhNumber) {
    c_.fail(ENOMEM, "ibv_create_ah: every one of the 32767 address handles is in use; destroy some");
    return nullptr;
  }
  auto impl = std::make_unique<AhImpl>();
  impl->ah.handle = number;
  impl->pd = pd;
  impl->attr = attr;
  auto ah = Access::make_ah(std::move(impl));  // its destructor gives the number back
  service::Request req;
  req.op = service::Op::kCreateAh;
  req.create_ah = service::CreateAh{pd->handle(), number, attr};
  service::Reply reply;
  std::string why;
  if (const int e = client_->call(req, reply, nullptr, 0, nullptr, why); e != 0) {
    c_.fail(e, "ibv_create_ah: " + why);
    return nullptr;
  }
  c_.ahs.push_back(std::move(ah));
  return c_.ahs.back().get();
}

int ServiceBackend::destroy_ah(AddressHandle* ah) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::none_of(c_.ahs.begin(), c_.ahs.end(), [ah](const auto& p) { return p.get() == ah; })) {
    return c_.fail(EINVAL, "not an address handle of this context");
  }
  if (const int e = simple(service::Op::kDestroyAh, ah->ibv()->handle, "destroy_ah"); e != 0) return e;
  erase_owned(c_.ahs, ah);
  return 0;
}

static_assert(transport::kQpCounterCount <= service::QpCountersReply::kMax,
              "QpCountersReply::kMax must hold every QP counter (the daemon sends them in order)");

void ServiceBackend::refresh_counters(const QueuePair& qp) {
  QpImpl& q = const_cast<QpImpl&>(impl_of(qp));  // the counters are a cache of the daemon's
  service::Request req;
  req.op = service::Op::kQpCounters;
  req.handle = q.remote->handle;
  service::Reply reply;
  std::string why;
  if (client_->call(req, reply, nullptr, 0, nullptr, why) != 0) return;
  const std::size_t n = std::min<std::size_t>(reply.counters.count, transport::kQpCounterCount);
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<transport::QpCounter>(i);
    q.qp.counters.add(k, reply.counters.value[i] - q.qp.counters.get(k));
  }
}

}  // namespace

std::unique_ptr<Backend> make_service_backend(Context& ctx, std::unique_ptr<service::Client> client) {
  return std::make_unique<ServiceBackend>(ctx, std::move(client));
}

}  // namespace internal
}  // namespace uroce
