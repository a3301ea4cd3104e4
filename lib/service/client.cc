#include "service/client.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <vector>
#include <sstream>

namespace uroce::service {

// --- The rings --------------------------------------------------------------------------

RemoteCq::~RemoteCq() {
  if (map != nullptr) munmap(map, map_bytes);
}

RemoteQp::~RemoteQp() {
  if (map != nullptr) munmap(map, map_bytes);
}

RemoteSrq::~RemoteSrq() {
  if (map != nullptr) munmap(map, map_bytes);
}

int RemoteCq::poll(int n, ibv_wc* wc, std::uint64_t* stamps) {
  if (overflowed()) return -EOVERFLOW;
  const std::uint32_t k = std::min<std::uint32_t>(ring.ready(), n > 0 ? static_cast<std::uint32_t>(n) : 0);
  for (std::uint32_t i = 0; i < k; ++i) wc[i] = ring.at(i).wc;
  if (stamps != nullptr) {
    for (std::uint32_t i = 0; i < k; ++i) stamps[i] = ring.at(i).completion_ts;
  }
  ring.consume(k);
  return static_cast<int>(k);
}

int RemoteCq::arm(bool solicited_only) {
  if (on_event == nullptr) return EINVAL;
  // The next completion the daemon adds fires the event; of those waiting,
  // only ones no event announced (LocalBackend::arm_cq says why). The
  // daemon stores head, then loads armed; this stores armed, then loads
  // head: one of the two sees the other, so none is missed.
  RingHeader& h = *ring.header;
  std::atomic<std::uint32_t>& armed = h.armed;
  armed.store(solicited_only ? 1 : 2, std::memory_order_seq_cst);
  if (solicited_only) return 0;
  const std::uint32_t tail = ring.tail();
  const std::uint32_t head = tail + ring.ready(std::memory_order_seq_cst);
  const bool missed = head != tail && ring::cursor_after(head, h.covered.load(std::memory_order_acquire));
  if (missed || overflowed()) {
    std::uint32_t a = 2;
    if (armed.compare_exchange_strong(a, 0)) {
      ring::advance_cursor(h.covered, head);
      on_event(arg);
    }
  }
  return 0;
}

namespace {

// The operations each service carries (IBTA table 39), as the engine
// checks them (transport/queues.cc): UC SENDs and WRITEs, UD only SENDs.
bool service_allows(ibv_qp_type type, ibv_wr_opcode op) {
  if (type == IBV_QPT_XRC_RECV) return false;  // a target QP sends nothing
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
      return type != IBV_QPT_UD;
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_ATOMIC_WRITE:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
    default:
      return false;
  }
}

}  // namespace

int RemoteQp::post_send(const ibv_send_wr& wr, std::uint32_t ah) {
  if (state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_RTR) return EINVAL;
  if (sq.room() == 0) return ENOMEM;
  if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > cap.max_send_sge) return EINVAL;
  const bool atomic = wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  if (!service_allows(type, wr.opcode)) return EINVAL;
  if (type == IBV_QPT_UD && ah == 0) return EINVAL;
  SendSlot& s = sq.slot();
  s.wr_id = wr.wr_id;
  s.opcode = wr.opcode;
  s.send_flags = wr.send_flags;
  s.imm_data = wr.opcode == IBV_WR_SEND_WITH_INV ? wr.invalidate_rkey : wr.imm_data;
  s.remote_addr = atomic ? wr.wr.atomic.remote_addr : wr.wr.rdma.remote_addr;
  s.rkey = atomic ? wr.wr.atomic.rkey : wr.wr.rdma.rkey;
  s.compare_add = atomic ? wr.wr.atomic.compare_add : 0;
  s.swap = atomic ? wr.wr.atomic.swap : 0;
  s.ah = ah;
  s.remote_qpn = type == IBV_QPT_UD ? wr.wr.ud.remote_qpn : type == IBV_QPT_XRC_SEND ? wr.qp_type.xrc.remote_srqn : 0;
  s.remote_qkey = type == IBV_QPT_UD ? wr.wr.ud.remote_qkey : 0;
  if (wr.opcode == IBV_WR_BIND_MW) {
    // Keys, not pointers (protocol.h): the daemon's engine checks both
    // against the QP's PD, so another client's keys bind nothing.
    if (wr.bind_mw.mw == nullptr) return EINVAL;
    const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
    s.imm_data = wr.bind_mw.mw->rkey;
    s.rkey = wr.bind_mw.rkey;
    s.remote_qkey = b.mr != nullptr ? b.mr->lkey : 0;
    s.remote_addr = b.addr;
    s.compare_add = b.length;
    s.swap = static_cast<std::uint32_t>(b.mw_access_flags);
    s.num_sge = 0;
    s.inline_len = 0;
    s.send_flags &= ~static_cast<unsigned>(IBV_SEND_INLINE);
    sq.publish(1);
    return 0;
  }
  if (wr.opcode == IBV_WR_LOCAL_INV) {
    s.num_sge = 0;
    s.inline_len = 0;
    s.send_flags &= ~static_cast<unsigned>(IBV_SEND_INLINE);
    sq.publish(1);
    return 0;
  }
  std::uint64_t total = 0;
  for (int i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
  if (type == IBV_QPT_UD && total > mtu) return EINVAL;  // a datagram is one packet (IBTA 9.8)
  if (wr.send_flags & IBV_SEND_INLINE) {
    // Copied now: the buffers may be reused once post_send returns.
    // ATOMIC WRITE's 8 bytes go inline whatever max_inline_data is (the
    // engine keeps them in the WQE).
    const bool atomic_write = wr.opcode == IBV_WR_ATOMIC_WRITE && total == 8;
    if (wr.opcode == IBV_WR_RDMA_READ || atomic || (total > cap.max_inline_data && !atomic_write)) return EINVAL;
    std::uint32_t at = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      std::memcpy(s.inline_data + at, reinterpret_cast<const void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
      at += wr.sg_list[i].length;
    }
    s.inline_len = at;
    s.num_sge = 0;
  } else {
    if (atomic && (wr.num_sge != 1 || total != 8)) return EINVAL;
    if (total > (1ull << 31)) return EINVAL;
    s.inline_len = 0;
    s.num_sge = static_cast<std::uint32_t>(wr.num_sge);
    for (int i = 0; i < wr.num_sge; ++i) s.sge[i] = WireSge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  }
  sq.publish(1);
  return 0;
}

int RemoteQp::post_recv(const ibv_recv_wr& wr) {
  if (state == IBV_QPS_RESET || on_srq) return EINVAL;
  if (rq.room() == 0) return ENOMEM;
  if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > cap.max_recv_sge) return EINVAL;
  RecvSlot& s = rq.slot();
  s.wr_id = wr.wr_id;
  s.num_sge = static_cast<std::uint32_t>(wr.num_sge);
  for (int i = 0; i < wr.num_sge; ++i) s.sge[i] = WireSge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  rq.publish(1);
  return 0;
}

int RemoteSrq::post_recv(const ibv_recv_wr& wr) {
  if (ring.room() == 0) return ENOMEM;
  if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > max_sge) return EINVAL;
  RecvSlot& s = ring.slot();
  s.wr_id = wr.wr_id;
  s.num_sge = static_cast<std::uint32_t>(wr.num_sge);
  for (int i = 0; i < wr.num_sge; ++i) s.sge[i] = WireSge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  ring.publish(1);
  return 0;
}

int RemoteSrq::modify(const ibv_srq_attr& attr, int attr_mask, std::string& why) {
  Request req;
  req.op = Op::kModifySrq;
  req.modify_srq = ModifySrq{handle, attr_mask, attr};
  Reply reply;
  return client->call(req, reply, nullptr, 0, nullptr, why);
}

int RemoteSrq::query(ibv_srq_attr& attr, std::string& why) {
  Request req;
  req.op = Op::kQuerySrq;
  req.handle = handle;
  Reply reply;
  const int e = client->call(req, reply, nullptr, 0, nullptr, why);
  if (e == 0) attr = reply.query_srq.attr;
  return e;
}

// --- Attaching --------------------------------------------------------------------------

namespace {

// Every live Client, for the fork handler: a forked child must not speak on
// its parent's connection (uroced would take the child's calls for the
// parent's: one client, objects mixed, handles raced). The child's side
// closes the inherited socket and leaves the rest alone.
struct Clients {
  std::mutex mutex;
  std::set<Client*> live;
};
Clients& clients() {
  static Clients* c = new Clients;  // never freed: Clients may outlive static destructors
  return *c;
}
void clients_prepare() { clients().mutex.lock(); }
void clients_parent() { clients().mutex.unlock(); }
// Allocates and frees nothing: memory.cc's handler may not have given the
// child its own copy of heap pages shared with uroced yet.
void clients_child() {
  for (Client* c : clients().live) c->forget_after_fork();
  clients().mutex.unlock();
}

}  // namespace

void Client::forget_after_fork() {
  // The parent's thread, socket and epoll set: the child has only copies of
  // the descriptors; closing them leaves the parent's connection as it is.
  // Nothing of this object is written (see forked()).
  if (sock_ >= 0) close(sock_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

std::unique_ptr<Client> Client::connect(const std::string& path, std::string& error) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    error = "socket path '" + path + "' is too long for a UNIX socket";
    return nullptr;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  static const int handlers = pthread_atfork(clients_prepare, clients_parent, clients_child);
  (void)handlers;
  std::unique_ptr<Client> c(new Client);
  {
    std::lock_guard<std::mutex> lock(clients().mutex);
    clients().live.insert(c.get());
  }
  c->sock_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (c->sock_ < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return nullptr;
  }
  if (::connect(c->sock_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    if (e == ENOENT) {
      error = "no uroced socket at " + path + ": start the daemon (uroced --conf conf/uroced.conf) or set UROCE_SERVICE to its socket";
    } else if (e == EACCES) {
      error = "permission denied on " + path + ": uroced's socket_mode / socket_group do not admit this user";
    } else if (e == ECONNREFUSED) {
      error = "nobody listens on " + path + " (a stale socket: uroced is not running)";
    } else {
      error = "cannot connect to " + path + ": " + std::strerror(e);
    }
    return nullptr;
  }
  Request req;
  req.op = Op::kHello;
  Reply reply;
  std::string why;
  if (c->call(req, reply, nullptr, 0, nullptr, why) != 0) {
    error = "uroced at " + path + " refused us: " + why;
    return nullptr;
  }
  c->hello_ = reply.hello;
  c->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  c->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (c->epoll_fd_ < 0 || c->stop_fd_ < 0) {
    error = std::string("epoll/eventfd: ") + std::strerror(errno);
    return nullptr;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = ~0ull;
  epoll_ctl(c->epoll_fd_, EPOLL_CTL_ADD, c->stop_fd_, &ev);
  c->events_ = std::thread([p = c.get()] { p->watch_events(); });
  return c;
}

Client::~Client() {
  {
    std::lock_guard<std::mutex> lock(clients().mutex);
    clients().live.erase(this);
  }
  if (forked()) {
    // A parent's, in a forked child: its thread is not in this process
    // (std::thread would end the program for a joinable one; it is left),
    // its descriptors are closed, and the daemon's objects stay the parent's.
    static auto* left = new std::vector<std::thread>;  // kept, never joined
    left->push_back(std::move(events_));
    return;
  }
  if (events_.joinable()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof one);
    events_.join();
  }
  for (auto& [fd, w] : waiters_) close(w.fd);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  // The daemon frees everything of ours when the socket closes; the shared
  // ranges stay mapped (they hold the program's memory now, see memory.cc).
  if (sock_ >= 0) close(sock_);
}

int Client::call(const Request& req, Reply& reply, const int* fds, int nfds, std::vector<int>* got,
                 std::string& message) {
  if (forked()) {
    message = "this process was forked from the one that attached to uroced: its objects are the parent's";
    return ENODEV;
  }
  std::lock_guard<std::mutex> lock(call_mutex_);
  if (const int e = send_message(sock_, &req, sizeof req, fds, nfds); e != 0) {
    message = std::string("uroced's socket: ") + std::strerror(e) + " (has the daemon stopped?)";
    return e == EPIPE ? ECONNRESET : e;
  }
  int rfds[kMaxFds];
  int n = 0;
  const long len = recv_message(sock_, &reply, sizeof reply, rfds, kMaxFds, n);
  if (len <= 0 || static_cast<std::size_t>(len) != sizeof reply) {
    for (int i = 0; i < n; ++i) close(rfds[i]);
    message = len == 0 ? "uroced closed the connection (it stopped, or refused this client)"
                       : "uroced's reply is malformed";
    return ECONNRESET;
  }
  if (got != nullptr) got->assign(rfds, rfds + n);
  else for (int i = 0; i < n; ++i) close(rfds[i]);
  if (reply.error != 0) message.assign(reply.message, strnlen(reply.message, sizeof reply.message));
  return reply.error;
}

// --- CQs, QPs and their events ---------------------------------------------------------------

std::unique_ptr<RemoteCq> Client::create_cq(std::uint32_t cqe, void (*on_event)(void*), void* arg, std::string& why,
                                            int& err, bool timestamps) {
  Request req;
  req.op = Op::kCreateCq;
  req.create_cq = CreateCq{cqe, timestamps ? 1u : 0u};
  Reply reply;
  std::vector<int> fds;
  err = call(req, reply, nullptr, 0, &fds, why);
  if (err != 0) return nullptr;
  auto cq = std::make_unique<RemoteCq>();
  cq->handle = reply.handle;
  const std::uint32_t slots = reply.create_cq.slots;
  if (fds.size() != 2 || slots == 0 || (slots & (slots - 1)) != 0 ||
      reply.create_cq.file_size < Ring<CqSlot>::bytes(slots)) {
    for (int fd : fds) close(fd);
    why = "uroced's CQ reply is malformed";
    err = EPROTO;
    return nullptr;
  }
  cq->map_bytes = reply.create_cq.file_size;
  cq->map = map_shared(fds[0], cq->map_bytes);
  close(fds[0]);
  if (cq->map == nullptr) {
    close(fds[1]);
    why = std::string("mmap of the CQ ring: ") + std::strerror(errno);
    err = ENOMEM;
    return nullptr;
  }
  cq->ring = Ring<CqSlot>::at(cq->map, slots);
  cq->on_event = on_event;
  cq->arg = arg;
  cq->event_fd = fds[1];
  watch_fd(cq->handle, cq->event_fd, on_event, arg);
  return cq;
}

void Client::watch_fd(std::uint32_t handle, int fd, void (*on_event)(void*), void* arg) {
  std::lock_guard<std::mutex> lock(events_mutex_);
  waiters_[handle] = Waiter{fd, on_event, arg};
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = handle;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void Client::unwatch_fd(std::uint32_t handle, int fd) {
  std::lock_guard<std::mutex> lock(events_mutex_);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  waiters_.erase(handle);
}

int Client::destroy_cq(RemoteCq* cq, std::string& why) {
  Request req;
  req.op = Op::kDestroyCq;
  req.handle = cq->handle;
  Reply reply;
  if (const int e = call(req, reply, nullptr, 0, nullptr, why); e != 0) return e;
  unwatch_fd(cq->handle, cq->event_fd);
  close(cq->event_fd);
  cq->event_fd = -1;
  return 0;
}

int Client::resize_cq(RemoteCq* cq, std::uint32_t cqe, std::string& why) {
  // Once the daemon answers it fills the new ring only, so mapping that
  // ring must not fail then: its address space is taken first (nothing has
  // changed if that fails), and the ring mapped over it.
  const std::size_t room_bytes = page_round(Ring<CqSlot>::bytes(ring_slots(cqe)));
  void* room = mmap(nullptr, room_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (room == MAP_FAILED) {
    why = std::string("address space for the resized CQ ring: ") + std::strerror(errno);
    return ENOMEM;
  }
  Request req;
  req.op = Op::kResizeCq;
  req.handle = cq->handle;
  req.create_cq = CreateCq{cqe, 0};
  Reply reply;
  std::vector<int> fds;
  if (const int e = call(req, reply, nullptr, 0, &fds, why); e != 0) {
    munmap(room, room_bytes);
    return e;
  }
  const std::uint32_t slots = reply.create_cq.slots;
  const std::uint64_t file_size = reply.create_cq.file_size;
  if (fds.size() != 1 || slots == 0 || (slots & (slots - 1)) != 0 || file_size < Ring<CqSlot>::bytes(slots) ||
      file_size > room_bytes) {
    for (int fd : fds) close(fd);
    munmap(room, room_bytes);
    why = "uroced's resize_cq reply is malformed";
    return EPROTO;
  }
  // Over address space this process holds: MAP_FIXED replaces it.
  void* map = mmap(room, file_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fds[0], 0);
  close(fds[0]);
  if (map == MAP_FAILED) {
    // Only a file the kernel cannot map at all comes here (the address
    // space was ours): this CQ cannot be polled any more.
    munmap(room, room_bytes);
    why = std::string("mmap of the resized CQ ring: ") + std::strerror(errno);
    return ENOMEM;
  }
  const std::size_t mapped = page_round(file_size);
  if (mapped < room_bytes) munmap(static_cast<char*>(room) + mapped, room_bytes - mapped);
  // The daemon filled the new ring with what waited in the old one
  // (head), its tail at 0, before it answered, and has not touched the
  // old one since.
  munmap(cq->map, cq->map_bytes);
  cq->map = map;
  cq->map_bytes = file_size;
  cq->ring = Ring<CqSlot>::at(map, slots);
  return 0;
}

std::unique_ptr<RemoteQp> Client::create_qp(const CreateQp& attr, std::string& why, int& err) {
  Request req;
  req.op = Op::kCreateQp;
  req.create_qp = attr;
  Reply reply;
  std::vector<int> fds;
  err = call(req, reply, nullptr, 0, &fds, why);
  if (err != 0) return nullptr;
  const CreateQpReply& r = reply.create_qp;
  auto qp = std::make_unique<RemoteQp>();
  qp->handle = reply.handle;
  qp->qpn = r.qpn;
  const bool pow2 = r.sq_slots != 0 && r.rq_slots != 0 && (r.sq_slots & (r.sq_slots - 1)) == 0 &&
                    (r.rq_slots & (r.rq_slots - 1)) == 0;
  if (fds.size() != 1 || !pow2 || r.sq_offset + Ring<SendSlot>::bytes(r.sq_slots) > r.file_size ||
      r.rq_offset + Ring<RecvSlot>::bytes(r.rq_slots) > r.file_size) {
    for (int fd : fds) close(fd);
    why = "uroced's QP reply is malformed";
    err = EPROTO;
    return nullptr;
  }
  qp->map_bytes = r.file_size;
  qp->map = map_shared(fds[0], qp->map_bytes);
  close(fds[0]);
  if (qp->map == nullptr) {
    why = std::string("mmap of the QP rings: ") + std::strerror(errno);
    err = ENOMEM;
    return nullptr;
  }
  qp->cap = r.cap;
  qp->sq = Ring<SendSlot>::work_queue_at(static_cast<char*>(qp->map) + r.sq_offset, r.sq_slots, qp->cap.max_send_wr);
  qp->rq = Ring<RecvSlot>::work_queue_at(static_cast<char*>(qp->map) + r.rq_offset, r.rq_slots, qp->cap.max_recv_wr);
  qp->sq_sig_all = attr.sq_sig_all != 0;
  qp->type = static_cast<ibv_qp_type>(attr.qp_type);
  qp->on_srq = attr.srq != 0;
  qp->mtu = 128u << hello_.active_mtu;
  return qp;
}

int Client::destroy_qp(RemoteQp* qp, std::string& why) {
  Request req;
  req.op = Op::kDestroyQp;
  req.handle = qp->handle;
  Reply reply;
  return call(req, reply, nullptr, 0, nullptr, why);
}

std::unique_ptr<RemoteSrq> Client::create_srq(const CreateSrq& attr, void (*on_limit)(void*), void* arg,
                                              std::string& why, int& err) {
  Request req;
  req.op = Op::kCreateSrq;
  req.create_srq = attr;
  Reply reply;
  std::vector<int> fds;
  err = call(req, reply, nullptr, 0, &fds, why);
  if (err != 0) return nullptr;
  const CreateSrqReply& r = reply.create_srq;
  if (fds.size() != 2 || r.slots == 0 || (r.slots & (r.slots - 1)) != 0 || r.max_wr > r.slots ||
      r.file_size < Ring<RecvSlot>::bytes(r.slots)) {
    for (int fd : fds) close(fd);
    why = "uroced's SRQ reply is malformed";
    err = EPROTO;
    return nullptr;
  }
  auto srq = std::make_unique<RemoteSrq>();
  srq->client = this;
  srq->handle = reply.handle;
  srq->srqn = r.srqn;
  srq->max_wr = r.max_wr;
  srq->max_sge = r.max_sge;
  srq->map_bytes = r.file_size;
  srq->map = map_shared(fds[0], srq->map_bytes);
  close(fds[0]);
  if (srq->map == nullptr) {
    close(fds[1]);
    why = std::string("mmap of the SRQ ring: ") + std::strerror(errno);
    err = ENOMEM;
    return nullptr;
  }
  srq->ring = Ring<RecvSlot>::work_queue_at(srq->map, r.slots, r.max_wr);
  srq->event_fd = fds[1];
  watch_fd(srq->handle, srq->event_fd, on_limit, arg);
  return srq;
}

int Client::destroy_srq(RemoteSrq* srq, std::string& why) {
  Request req;
  req.op = Op::kDestroySrq;
  req.handle = srq->handle;
  Reply reply;
  if (const int e = call(req, reply, nullptr, 0, nullptr, why); e != 0) return e;
  unwatch_fd(srq->handle, srq->event_fd);
  close(srq->event_fd);
  srq->event_fd = -1;
  return 0;
}

void Client::watch_events() {
  epoll_event evs[16];
  for (;;) {
    const int n = epoll_wait(epoll_fd_, evs, 16, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == ~0ull) return;
      std::lock_guard<std::mutex> lock(events_mutex_);
      auto it = waiters_.find(static_cast<std::uint32_t>(evs[i].data.u64));
      if (it == waiters_.end()) continue;
      std::uint64_t count;
      if (read(it->second.fd, &count, sizeof count) == sizeof count && it->second.on_event != nullptr) {
        it->second.on_event(it->second.arg);
      }
    }
  }
}

}  // namespace uroce::service
