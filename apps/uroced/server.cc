#include "server.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iterator>
#include <thread>
#include <utility>

#include "service/shm.h"
#include "uroce/stats.h"
#include <spdlog/spdlog.h>

namespace uroce::daemon {

using service::Op;
using service::Reply;
using service::Request;

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

std::string errno_text(int e) { return std::strerror(e); }

// Every reply has room for a message; this one is cut to fit.
void set_message(Reply& reply, const std::string& why) {
  std::snprintf(reply.message, sizeof reply.message, "%s", why.c_str());
}

}  // namespace

Server::Server(Context& ctx, std::size_t workers, const Config& config)
    : ctx_(ctx), config_(config), pumps_(std::max<std::size_t>(workers, 1)) {}

Server::~Server() {
  for (auto& [fd, c] : clients_) release(*c);
  clients_.clear();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(config_.socket.c_str());
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (signal_fd_ >= 0) close(signal_fd_);
}

std::string Server::listen() {
  const std::string& path = config_.socket;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return "socket path '" + path + "' is too long for a UNIX socket";
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty() && dir != path) mkdir(dir.c_str(), 0755);  // /run/uroce; EEXIST is fine
  // A socket file left by a daemon that died is removed; one that answers
  // belongs to a running daemon.
  const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    close(probe);
    return "socket " + path + " is in use by a running uroced: stop it, or give another --socket";
  }
  close(probe);
  unlink(path.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return "socket: " + errno_text(errno);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return "cannot bind " + path + ": " + errno_text(errno) + " (is its folder there and writable?)";
  }
  if (chmod(path.c_str(), config_.socket_mode) != 0) return "chmod " + path + ": " + errno_text(errno);
  if (!config_.socket_group.empty()) {
    const group* g = getgrnam(config_.socket_group.c_str());
    if (g == nullptr) return "socket_group '" + config_.socket_group + "' does not exist (groupadd it, or unset it)";
    if (chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
      return "chown " + path + " to group " + config_.socket_group + ": " + errno_text(errno);
    }
  }
  if (::listen(listen_fd_, 64) != 0) return "listen: " + errno_text(errno);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC);
  if (epoll_fd_ < 0 || signal_fd_ < 0) return "epoll/signalfd: " + errno_text(errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = signal_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, signal_fd_, &ev);
  return "";
}

int Server::run() {
  epoll_event evs[32];
  for (;;) {
    const int n = epoll_wait(epoll_fd_, evs, 32, any_deferred() ? kTickMs : -1);
    tick();
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 1;
    for (int i = 0; i < n; ++i) {
      const int fd = evs[i].data.fd;
      if (fd == signal_fd_) {
        signalfd_siginfo info{};
        [[maybe_unused]] ssize_t r = read(signal_fd_, &info, sizeof info);
        spdlog::info("uroced: signal {}: moving {} client(s)' QPs to the error state and closing them",
                      info.ssi_signo, clients_.size());
        // QPs to ERR: their outstanding work completes with flush errors,
        // which the pumps still carry to the clients' rings.
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        for (auto& [sock, c] : clients_) {
          for (auto& [h, q] : c->qps) q.qp->modify(attr, IBV_QP_STATE);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        for (auto& [sock, c] : clients_) release(*c);
        clients_.clear();
        return 0;
      }
      if (fd == listen_fd_) {
        accept_client();
        continue;
      }
      auto it = clients_.find(fd);
      if (it == clients_.end()) continue;
      if (!serve(*it->second)) {
        Client& c = *it->second;
        spdlog::info("uroced: client {} (pid {}) gone: its {} QP(s), {} CQ(s), {} region(s) freed", c.id, c.pid,
                      c.qps.size(), c.cqs.size(), c.mrs.size());
        release(c);
        clients_.erase(it);
      }
    }
    publish_client_table();
  }
}

Server::ClientRow Server::row_of(const Client& c) {
  ClientRow r;
  r.id = c.id;
  r.pid = c.pid;
  r.uid = c.uid;
  r.pds = static_cast<std::uint32_t>(c.pds.size());
  r.mrs = static_cast<std::uint32_t>(c.mrs.size());
  r.cqs = static_cast<std::uint32_t>(c.cqs.size());
  r.qps = static_cast<std::uint32_t>(c.qps.size());
  r.mapped_bytes = c.mapped + c.ring_bytes;
  for (const auto& [h, q] : c.qps) r.qpns.push_back(q.qp->qp_num());
  return r;
}

void Server::publish_client_table() {
  std::vector<ClientRow> rows;
  rows.reserve(clients_.size());
  for (const auto& [sock, c] : clients_) rows.push_back(row_of(*c));
  std::lock_guard<std::mutex> lock(table_mutex_);
  table_.swap(rows);
}

std::vector<Server::ClientRow> Server::client_table() const {
  std::lock_guard<std::mutex> lock(table_mutex_);
  return table_;
}

void Server::accept_client() {
  const int sock = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (sock < 0) return;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    close(sock);
    return;
  }
  if (clients_.size() >= config_.limits.clients) {
    spdlog::warn("uroced: refused pid {}: {} clients attached (max_clients)", cred.pid, clients_.size());
    close(sock);  // the client reads "uroced closed the connection"
    return;
  }
  auto c = std::make_unique<Client>();
  c->sock = sock;
  c->id = next_client_++;
  c->pid = cred.pid;
  c->uid = cred.uid;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = sock;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sock, &ev);
  spdlog::info("uroced: client {} attached: pid {}, uid {}", c->id, cred.pid, cred.uid);
  clients_[sock] = std::move(c);
}

bool Server::serve(Client& c) {
  // A deferred client's socket is watched for nothing: only a hang-up or an
  // error gets here, and its answer no longer matters.
  if (c.deferred) return false;
  Request req;
  int fds[service::kMaxFds];
  int nfds = 0;
  const long n = service::recv_message(c.sock, &req, sizeof req, fds, service::kMaxFds, nfds);
  if (n <= 0 && n != -EMSGSIZE) return false;  // closed (exit, kill) or broken
  Reply reply;
  std::vector<int> reply_fds;
  if (n != static_cast<long>(sizeof req)) {
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    fail(reply, EPROTO, "malformed request: " + std::to_string(n < 0 ? -1 : n) + " bytes, a request is " +
                            std::to_string(sizeof req) + " (is the client built from this uroce?)");
  } else {
    handle(c, req, fds, nfds, reply, reply_fds);
    for (int i = 0; i < nfds; ++i) close(fds[i]);  // what was kept is mapped, or dup'd
    if (std::exchange(reply_deferred_, false)) return true;  // tick() answers it
  }
  const int e = service::send_message(c.sock, &reply, sizeof reply, reply_fds.data(), static_cast<int>(reply_fds.size()));
  for (int fd : reply_fds) close(fd);
  return e == 0;
}

void Server::modify_qp(Client& c, Qp& q, const service::ModifyQp& r, Reply& reply) {
  (void)c;
  const bool reset = (r.mask & IBV_QP_STATE) && r.attr.qp_state == IBV_QPS_RESET;
  if (const int e = q.qp->modify(r.attr, r.mask); e != 0) {
    fail(reply, e, ctx_.last_error());
    return;
  }
  if (reset) {
    // RESET empties the queues and restarts their counts: the rings too
    // (the client's library restarts its own side as it gets this reply).
    pumps_[q.worker].with_lock([&] {
      PumpQp& p = *q.pump;
      p.sq_next = p.rq_next = p.sq_rejected = p.rq_rejected = p.sq_retired = p.rq_retired = 0;
      p.sq.header->head.store(0);
      p.sq.header->retired.store(0);
      p.rq.header->head.store(0);
      p.rq.header->retired.store(0);
    });
  }
}

void Server::defer(Client& c, const service::ModifyQp& r, std::chrono::milliseconds hold_off) {
  // The resolver answers within a second; the deadline only bounds a wait
  // behind too many other resolutions.
  const auto now = std::chrono::steady_clock::now();
  c.deferred = Client::Deferred{r, now + hold_off, now + std::chrono::milliseconds(1500)};
  epoll_event ev{};
  ev.events = 0;  // hang-ups and errors only
  ev.data.fd = c.sock;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.sock, &ev);
  reply_deferred_ = true;
}

bool Server::any_deferred() const {
  return std::any_of(clients_.begin(), clients_.end(), [](const auto& e) { return e.second->deferred.has_value(); });
}

void Server::tick() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [sock, cp] : clients_) {
    Client& c = *cp;
    if (!c.deferred || now < c.deferred->not_before) continue;
    const service::ModifyQp& r = c.deferred->req;
    const Reach reach = ctx_.resolve_gid(r.attr.ah_attr.grh.dgid);
    if (reach == Reach::kPending && now < c.deferred->deadline) continue;
    Reply reply;
    auto it = c.qps.find(r.qp);
    if (it == c.qps.end()) {
      fail(reply, EINVAL, "no QP " + std::to_string(r.qp) + " of this client");
    } else if (reach == Reach::kPending) {
      fail(reply, EHOSTUNREACH, "modify QP: the peer's GID was not resolved in time (too many resolutions under "
                                "way); try again");
    } else {
      modify_qp(c, it->second, r, reply);  // known: applied now; unreachable: refused at once
    }
    c.deferred.reset();
    service::send_message(c.sock, &reply, sizeof reply, nullptr, 0);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = c.sock;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.sock, &ev);
  }
}

int Server::fail(Reply& reply, int err, const std::string& why) {
  reply.error = err;
  set_message(reply, why);
  return err;
}

void Server::handle(Client& c, const Request& req, const int* fds, int nfds, Reply& reply,
                    std::vector<int>& reply_fds) {
  switch (req.op) {
    case Op::kHello: {
      if (req.hello.version != service::kProtocolVersion) {
        fail(reply, EPROTO, "protocol version " + std::to_string(req.hello.version) + ", this uroced speaks " +
                                std::to_string(service::kProtocolVersion) + ": use the library of the same uroce");
        return;
      }
      service::HelloReply& h = reply.hello;
      h.client = c.id;
      h.workers = static_cast<std::uint32_t>(pumps_.size());
      ctx_.query_gid(0, h.gid[0]);
      ctx_.query_gid(1, h.gid[1]);
      // The link-local GID is fe80::(EUI-64 of the MAC): the MAC back from it.
      h.mac[0] = static_cast<std::uint8_t>(h.gid[0].raw[8] ^ 2);
      h.mac[1] = h.gid[0].raw[9];
      h.mac[2] = h.gid[0].raw[10];
      h.mac[3] = h.gid[0].raw[13];
      h.mac[4] = h.gid[0].raw[14];
      h.mac[5] = h.gid[0].raw[15];
      const DeviceLimits& l = ctx_.limits();
      h.max_qp = std::min(l.max_qp, config_.limits.qps);
      h.max_qp_wr = l.max_qp_wr;
      h.max_sge = std::min<std::uint32_t>(l.max_sge, service::kMaxSge);
      h.max_inline_data = std::min<std::uint32_t>(l.max_inline_data, service::kMaxInline);
      h.max_cqe = l.max_cqe;
      h.max_mr = std::min(l.max_mr, config_.limits.mrs);
      h.max_qp_rd_atom = l.max_qp_rd_atom;
      h.max_qp_init_rd_atom = l.max_qp_init_rd_atom;
      return;
    }
    case Op::kAllocPd: {
      ProtectionDomain* pd = ctx_.alloc_pd();
      if (pd == nullptr) {
        fail(reply, ENOMEM, ctx_.last_error());
        return;
      }
      reply.handle = c.next_handle++;
      c.pds[reply.handle] = pd;
      return;
    }
    case Op::kDeallocPd: {
      auto it = c.pds.find(req.handle);
      if (it == c.pds.end()) {
        fail(reply, EINVAL, "no PD " + std::to_string(req.handle) + " of this client");
        return;
      }
      if (const int e = ctx_.dealloc_pd(it->second); e != 0) {
        fail(reply, e, ctx_.last_error());
        return;
      }
      c.pds.erase(it);
      return;
    }
    case Op::kRegMr:
      reg_mr(c, req.reg_mr, fds, nfds, reply);
      return;
    case Op::kDeregMr:
      if (const int e = dereg_mr(c, req.handle); e != 0) {
        fail(reply, e, e == EINVAL ? "no region " + std::to_string(req.handle) + " of this client" : ctx_.last_error());
      }
      return;
    case Op::kCreateCq:
      create_cq(c, req.create_cq, reply, reply_fds);
      return;
    case Op::kDestroyCq:
      if (const int e = destroy_cq(c, req.handle); e != 0) {
        fail(reply, e, e == EINVAL ? "no CQ " + std::to_string(req.handle) + " of this client"
                                   : "QPs still use this CQ; destroy them first");
      }
      return;
    case Op::kCreateQp:
      create_qp(c, req.create_qp, reply, reply_fds);
      return;
    case Op::kModifyQp: {
      auto it = c.qps.find(req.modify_qp.qp);
      if (it == c.qps.end()) {
        fail(reply, EINVAL, "no QP " + std::to_string(req.modify_qp.qp) + " of this client");
        return;
      }
      Qp& q = it->second;
      // The peer's address is resolved without holding this loop: not known
      // yet, the reply waits (tick()) while other clients are served.
      if ((req.modify_qp.mask & IBV_QP_AV) && req.modify_qp.attr.ah_attr.is_global) {
        const Reach reach = ctx_.resolve_gid(req.modify_qp.attr.ah_attr.grh.dgid);
        if (reach != Reach::kKnown) {
          defer(c, req.modify_qp, reach == Reach::kUnreachable ? kRefusalHoldOff : std::chrono::milliseconds{});
          return;
        }
      }
      modify_qp(c, q, req.modify_qp, reply);
      return;
    }
    case Op::kQueryQp: {
      auto it = c.qps.find(req.handle);
      if (it == c.qps.end()) {
        fail(reply, EINVAL, "no QP " + std::to_string(req.handle) + " of this client");
        return;
      }
      QpInitAttr init;
      if (const int e = it->second.qp->query(reply.query_qp.attr, ~0, &init); e != 0) {
        fail(reply, e, ctx_.last_error());
        return;
      }
      reply.query_qp.cap = reply.query_qp.attr.cap;
      reply.query_qp.sq_sig_all = init.sq_sig_all ? 1 : 0;
      return;
    }
    case Op::kDestroyQp:
      if (const int e = destroy_qp(c, req.handle); e != 0) {
        fail(reply, e, e == EINVAL ? "no QP " + std::to_string(req.handle) + " of this client" : ctx_.last_error());
      }
      return;
    case Op::kQpCounters: {
      auto it = c.qps.find(req.handle);
      if (it == c.qps.end()) {
        fail(reply, EINVAL, "no QP " + std::to_string(req.handle) + " of this client");
        return;
      }
      const std::vector<Stat> rows = it->second.qp->stats();
      reply.counters.count = static_cast<std::uint32_t>(std::min(rows.size(), service::QpCountersReply::kMax));
      for (std::size_t i = 0; i < reply.counters.count; ++i) reply.counters.value[i] = rows[i].value;
      return;
    }
    case Op::kStats: {
      const Totals t = totals();
      service::StatsReply& s = reply.stats;
      s.clients = t.clients;
      s.pds = t.pds;
      s.mrs = t.mrs;
      s.cqs = t.cqs;
      s.qps = t.qps;
      s.mapped_bytes = t.mapped_bytes;
      for (const auto& [sock, k] : clients_) {
        if (s.listed == service::StatsReply::kMaxClients) break;
        const ClientRow r = row_of(*k);
        service::StatsReply::Client& e = s.client[s.listed++];
        e.id = r.id;
        e.pid = r.pid;
        e.uid = r.uid;
        e.pds = r.pds;
        e.mrs = r.mrs;
        e.cqs = r.cqs;
        e.qps = r.qps;
        e.mapped_bytes = r.mapped_bytes;
        for (std::size_t j = 0; j < r.qpns.size() && j < std::size(e.qpn); ++j) e.qpn[j] = r.qpns[j];
      }
      return;
    }
  }
  fail(reply, EINVAL, "unknown request " + std::to_string(static_cast<std::uint32_t>(req.op)));
}

Server::Totals Server::totals() const {
  Totals t;
  for (const auto& [sock, c] : clients_) {
    ++t.clients;
    t.pds += static_cast<std::uint32_t>(c->pds.size());
    t.mrs += static_cast<std::uint32_t>(c->mrs.size());
    t.cqs += static_cast<std::uint32_t>(c->cqs.size());
    t.qps += static_cast<std::uint32_t>(c->qps.size());
    t.mapped_bytes += c->mapped + c->ring_bytes;
  }
  return t;
}

// --- Memory regions ------------------------------------------------------------------

void Server::reg_mr(Client& c, const service::RegMr& r, const int* fds, int nfds, Reply& reply) {
  auto pd = c.pds.find(r.pd);
  if (pd == c.pds.end()) {
    fail(reply, EINVAL, "no PD " + std::to_string(r.pd) + " of this client");
    return;
  }
  if (c.mrs.size() >= config_.limits.mrs) {
    fail(reply, ENOMEM, "this client has " + std::to_string(c.mrs.size()) +
                            " memory regions, its limit (uroced max_mrs)");
    return;
  }
  if (r.pieces == 0 || r.pieces > service::kMaxPieces || static_cast<int>(r.pieces) != nfds) {
    fail(reply, EINVAL, "reg_mr names " + std::to_string(r.pieces) + " pieces of memory and passes " +
                            std::to_string(nfds) + " memory files: one file per piece, 1 to " +
                            std::to_string(service::kMaxPieces));
    return;
  }
  // Every piece whole pages inside a sealed memory file; the new files
  // within the client's limit.
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<std::uint64_t> inodes;
  std::map<std::uint64_t, std::uint64_t> new_files;  // inode -> bytes
  std::uint64_t total = 0;
  for (std::uint32_t i = 0; i < r.pieces; ++i) {
    const service::MemoryPiece& p = r.piece[i];
    struct stat st {};
    if (fstat(fds[i], &st) != 0) {
      fail(reply, EINVAL, "the region's memory file: " + errno_text(errno));
      return;
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (p.bytes == 0 || p.file_offset % page != 0 || p.bytes % page != 0 || p.file_offset > size ||
        p.bytes > size - p.file_offset) {
      fail(reply, EINVAL, "piece " + std::to_string(i) + " of the region (offset " + std::to_string(p.file_offset) +
                              ", " + std::to_string(p.bytes) + " bytes) is not whole pages of its memory file of " +
                              std::to_string(size) + " bytes");
      return;
    }
    const auto inode = static_cast<std::uint64_t>(st.st_ino);
    if (c.files.count(inode) == 0 && new_files.count(inode) == 0) {
      if (std::string e = service::check_memory_file(fds[i], size); !e.empty()) {
        fail(reply, EINVAL, "the region's memory file: " + e);
        return;
      }
      new_files[inode] = size;
    }
    inodes.push_back(inode);
    total += p.bytes;
  }
  if (r.length == 0 || r.offset > total || r.length > total - r.offset) {
    fail(reply, EINVAL, "the region (offset " + std::to_string(r.offset) + ", " + std::to_string(r.length) +
                            " bytes) leaves its " + std::to_string(total) + " bytes of memory files");
    return;
  }
  std::uint64_t added = 0;
  for (const auto& [inode, bytes] : new_files) added += bytes;
  if (c.mapped + added > config_.limits.pinned_mb * kMiB) {
    fail(reply, ENOMEM, "this client would have " + std::to_string((c.mapped + added) / kMiB) +
                            " MiB registered, over its limit of " + std::to_string(config_.limits.pinned_mb) +
                            " MiB (uroced max_pinned_mb)");
    return;
  }
  // The view: one mapping, or an address range reserved and the pieces
  // mapped over it side by side.
  void* view = nullptr;
  if (r.pieces == 1) {
    view = service::map_shared(fds[0], r.piece[0].bytes, r.piece[0].file_offset);
  } else {
    void* base = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    view = base == MAP_FAILED ? nullptr : base;
    std::uint64_t at = 0;
    for (std::uint32_t i = 0; view != nullptr && i < r.pieces; at += r.piece[i++].bytes) {
      void* p = mmap(static_cast<char*>(base) + at, r.piece[i].bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                     fds[i], static_cast<off_t>(r.piece[i].file_offset));
      if (p == MAP_FAILED) {
        const int e = errno;
        munmap(base, total);
        errno = e;
        view = nullptr;
      }
    }
  }
  if (view == nullptr) {
    fail(reply, ENOMEM, "mapping the region's memory files: " + errno_text(errno));
    return;
  }
  MemoryRegion* mr = pd->second->reg_mr_iova(static_cast<char*>(view) + r.offset, r.length, r.iova, r.access);
  if (mr == nullptr) {
    fail(reply, EINVAL, ctx_.last_error());
    munmap(view, total);
    return;
  }
  for (const auto& [inode, bytes] : new_files) c.files[inode] = File{bytes, 0};
  for (std::uint64_t inode : inodes) ++c.files[inode].users;
  c.mapped += added;
  reply.handle = c.next_handle++;
  reply.reg_mr.lkey = mr->lkey;
  reply.reg_mr.rkey = mr->rkey;
  c.mrs[reply.handle] = Mr{mr, view, total, std::move(inodes)};
}

int Server::dereg_mr(Client& c, std::uint32_t handle) {
  auto it = c.mrs.find(handle);
  if (it == c.mrs.end()) return EINVAL;
  if (const int e = it->second.mr->pd->dereg_mr(it->second.mr); e != 0) return e;
  // dereg_mr returned: the engines no longer touch the view.
  munmap(it->second.view, it->second.view_bytes);
  for (std::uint64_t inode : it->second.inodes) {
    auto f = c.files.find(inode);
    if (f != c.files.end() && --f->second.users == 0) {
      c.mapped -= f->second.bytes;
      c.files.erase(f);
    }
  }
  c.mrs.erase(it);
  return 0;
}

// --- CQs and QPs ---------------------------------------------------------------------

void Server::create_cq(Client& c, const service::CreateCq& r, Reply& reply, std::vector<int>& fds) {
  if (c.cqs.size() >= config_.limits.cqs) {
    fail(reply, ENOMEM, "this client has " + std::to_string(c.cqs.size()) + " CQs, its limit (uroced max_cqs)");
    return;
  }
  if (r.cqe == 0 || r.cqe > ctx_.limits().max_cqe) {
    fail(reply, EINVAL, "cqe must be between 1 and the device's max_cqe (" + std::to_string(ctx_.limits().max_cqe) + ")");
    return;
  }
  const std::uint32_t slots = service::ring_slots(r.cqe);
  const std::size_t bytes = service::page_round(service::Ring<ibv_wc>::bytes(slots));
  auto pump = std::make_unique<PumpCq>();
  const int file = service::make_memory_file("uroced-cq", bytes);
  void* map = file >= 0 ? service::map_shared(file, bytes) : nullptr;
  pump->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  CompletionQueue* cq = map != nullptr && pump->event_fd >= 0
                            ? ctx_.create_cq(static_cast<int>(r.cqe), &PumpCq::on_event, pump.get())
                            : nullptr;
  if (cq == nullptr) {
    const std::string why = map == nullptr || pump->event_fd < 0 ? "memory file or eventfd: " + errno_text(errno)
                                                                 : ctx_.last_error();
    if (map != nullptr) munmap(map, bytes);
    if (file >= 0) close(file);
    if (pump->event_fd >= 0) close(pump->event_fd);
    fail(reply, ENOMEM, why);
    return;
  }
  new (map) service::RingHeader();
  pump->cq = cq;
  pump->ring = service::Ring<ibv_wc>::at(map, slots);
  reply.handle = c.next_handle++;
  reply.create_cq.slots = slots;
  reply.create_cq.file_size = bytes;
  fds.push_back(file);
  fds.push_back(dup(pump->event_fd));
  Cq rec;
  rec.cq = cq;
  rec.map = map;
  rec.bytes = bytes;
  rec.worker = next_worker_++ % pumps_.size();
  rec.pump = std::move(pump);
  pumps_[rec.worker].add(rec.pump.get());
  c.ring_bytes += bytes;
  c.cqs[reply.handle] = std::move(rec);
}

int Server::destroy_cq(Client& c, std::uint32_t handle) {
  auto it = c.cqs.find(handle);
  if (it == c.cqs.end()) return EINVAL;
  Cq& rec = it->second;
  if (rec.users != 0) return EBUSY;
  pumps_[rec.worker].remove(rec.pump.get());
  ctx_.destroy_cq(rec.cq);
  munmap(rec.map, rec.bytes);
  close(rec.pump->event_fd);
  c.ring_bytes -= rec.bytes;
  c.cqs.erase(it);
  return 0;
}

void Server::create_qp(Client& c, const service::CreateQp& r, Reply& reply, std::vector<int>& fds) {
  auto pd = c.pds.find(r.pd);
  auto scq = c.cqs.find(r.send_cq);
  auto rcq = c.cqs.find(r.recv_cq);
  if (pd == c.pds.end() || scq == c.cqs.end() || rcq == c.cqs.end()) {
    fail(reply, EINVAL, "create_qp names a PD or CQ that is not this client's");
    return;
  }
  if (c.qps.size() >= config_.limits.qps) {
    fail(reply, ENOMEM, "this client has " + std::to_string(c.qps.size()) + " QPs, its limit (uroced max_qps)");
    return;
  }
  if (r.cap.max_send_sge > service::kMaxSge || r.cap.max_recv_sge > service::kMaxSge ||
      r.cap.max_inline_data > service::kMaxInline) {
    fail(reply, EINVAL, "QP capabilities exceed the device limits (max_sge 16, max_inline_data 256)");
    return;
  }
  // The worker serving the fewest of this daemon's QPs.
  std::vector<std::size_t> load(pumps_.size(), 0);
  for (const auto& [sock, k] : clients_) {
    for (const auto& [h, q] : k->qps) ++load[q.worker];
  }
  const std::size_t worker = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
  QpInitAttr attr;
  attr.send_cq = scq->second.cq;
  attr.recv_cq = rcq->second.cq;
  attr.cap = r.cap;
  attr.qp_type = static_cast<ibv_qp_type>(r.qp_type);
  attr.sq_sig_all = r.sq_sig_all != 0;
  attr.worker = static_cast<int>(worker);
  if (attr.qp_type != IBV_QPT_RC) {
    // UD's address handles and UC's sends that complete without an ACK are
    // not carried by the service protocol yet.
    fail(reply, EOPNOTSUPP, "UC and UD QPs through uroced are not supported yet: run the program in-process");
    return;
  }
  QueuePair* qp = pd->second->create_qp(attr);
  if (qp == nullptr) {
    fail(reply, EINVAL, ctx_.last_error());
    return;
  }
  ibv_qp_attr got{};
  qp->query(got, ~0);
  const std::uint32_t sq_slots = service::ring_slots(std::max<std::uint32_t>(got.cap.max_send_wr, 1));
  const std::uint32_t rq_slots = service::ring_slots(std::max<std::uint32_t>(got.cap.max_recv_wr, 1));
  const std::size_t sq_bytes = service::page_round(service::Ring<service::SendSlot>::bytes(sq_slots));
  const std::size_t bytes = sq_bytes + service::page_round(service::Ring<service::RecvSlot>::bytes(rq_slots));
  const int file = service::make_memory_file("uroced-qp", bytes);
  void* map = file >= 0 ? service::map_shared(file, bytes) : nullptr;
  if (map == nullptr) {
    if (file >= 0) close(file);
    pd->second->destroy_qp(qp);
    fail(reply, ENOMEM, "memory file for the QP's rings: " + errno_text(errno));
    return;
  }
  new (map) service::RingHeader();
  new (static_cast<char*>(map) + sq_bytes) service::RingHeader();
  auto pump = std::make_unique<PumpQp>();
  pump->qp = qp;
  pump->sq = service::Ring<service::SendSlot>::at(map, sq_slots);
  pump->rq = service::Ring<service::RecvSlot>::at(static_cast<char*>(map) + sq_bytes, rq_slots);
  reply.handle = c.next_handle++;
  service::CreateQpReply& out = reply.create_qp;
  out.qpn = qp->qp_num();
  out.cap = got.cap;
  out.sq_offset = 0;
  out.rq_offset = sq_bytes;
  out.sq_slots = sq_slots;
  out.rq_slots = rq_slots;
  out.file_size = bytes;
  fds.push_back(file);
  Qp rec;
  rec.qp = qp;
  rec.pd = pd->second;
  rec.send_cq = r.send_cq;
  rec.recv_cq = r.recv_cq;
  rec.map = map;
  rec.bytes = bytes;
  rec.worker = worker;
  rec.pump = std::move(pump);
  pumps_[worker].add(rec.pump.get());
  ++scq->second.users;
  ++rcq->second.users;
  c.ring_bytes += bytes;
  c.qps[reply.handle] = std::move(rec);
}

int Server::destroy_qp(Client& c, std::uint32_t handle) {
  auto it = c.qps.find(handle);
  if (it == c.qps.end()) return EINVAL;
  Qp& rec = it->second;
  pumps_[rec.worker].remove(rec.pump.get());
  if (const int e = rec.pd->destroy_qp(rec.qp); e != 0) {
    pumps_[rec.worker].add(rec.pump.get());
    return e;
  }
  munmap(rec.map, rec.bytes);
  c.ring_bytes -= rec.bytes;
  --c.cqs[rec.send_cq].users;
  --c.cqs[rec.recv_cq].users;
  c.qps.erase(it);
  return 0;
}

void Server::release(Client& c) {
  // The pumps first, so no worker touches the client's rings any more; then
  // the QPs (to error, then gone), CQs, regions, PDs, and the mappings.
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  for (auto& [h, q] : c.qps) {
    pumps_[q.worker].remove(q.pump.get());
    q.qp->modify(err, IBV_QP_STATE);
  }
  while (!c.qps.empty()) destroy_qp(c, c.qps.begin()->first);
  while (!c.cqs.empty()) {
    if (destroy_cq(c, c.cqs.begin()->first) != 0) c.cqs.erase(c.cqs.begin());
  }
  while (!c.mrs.empty()) {
    // A region that cannot be deregistered keeps its view mapped (the
    // engines may still read it): leaked, never unmapped under them.
    if (dereg_mr(c, c.mrs.begin()->first) != 0) {
      spdlog::warn("uroced: client {}: a region would not deregister; its memory stays mapped", c.id);
      c.mrs.erase(c.mrs.begin());
    }
  }
  for (auto& [h, pd] : c.pds) ctx_.dealloc_pd(pd);
  c.pds.clear();
  c.files.clear();
  c.mapped = 0;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.sock, nullptr);
  close(c.sock);
  c.sock = -1;
}

}  // namespace uroce::daemon
