#include "service_daemon/server.h"

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
#include <fstream>
#include <iterator>
#include <thread>
#include <utility>

#include "service/shm.h"
#include "service_daemon/cm_relay.h"
#include "uroce/stats.h"
#include <spdlog/spdlog.h>

namespace uroce::daemon {

using service::Reply;
using service::Request;

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

// What the engine holds per CQ entry and per WQE, for the budgets: an
// ibv_wc per entry in each engine's completion ring (lib/transport/qp.h
// CompletionRing, made by the first QP of that engine on the CQ); a
// SendWqe (480 bytes) and a RecvWqe (408) per slot, rounded up, plus the
// inline bytes of each send slot and the responder's rings (a fixed part).
constexpr std::uint64_t kSendWqeBytes = 512;
constexpr std::uint64_t kRecvWqeBytes = 448;
constexpr std::uint64_t kQpFixedBytes = 64 * 1024;

std::uint64_t half_of_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 2 : 8192 * kMiB;
}

// Half of vm.max_map_count for clients' mappings: the rest is the daemon's
// own (DPDK, libraries, thread stacks, its allocator).
std::uint32_t half_of_max_map_count() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  std::uint64_t n = 0;
  if (!(in >> n) || n == 0) n = 65530;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(n / 2, 1u << 30));
}

std::string errno_text(int e) { return std::strerror(e); }

// Every reply has room for a message; this one is cut to fit.
void set_message(Reply& reply, const std::string& why) {
  std::snprintf(reply.message, sizeof reply.message, "%s", why.c_str());
}

// A warning any local user can cause at will (refused connections): at
// most one line a second, with the count of those held back.
struct Hushed {
  std::chrono::steady_clock::time_point next{};
  std::uint64_t held = 0;
  void warn(const std::string& line) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next) {
      ++held;
      return;
    }
    if (held != 0) spdlog::warn("{} (and {} more like it in the last second)", line, held);
    else spdlog::warn("{}", line);
    held = 0;
    next = now + std::chrono::seconds(1);
  }
};
Hushed refusals;

// The socket's folder: only root (or the daemon's own user) may rename or
// replace names in it, or it is sticky (only a name's owner may) and
// root's. Otherwise another user could swap the socket for a link between
// bind() and the chown that sets its group (or remove a live daemon's).
std::string check_socket_folder(int dir_fd, const std::string& dir) {
  struct stat st {};
  if (fstat(dir_fd, &st) != 0) return "socket folder " + dir + ": " + errno_text(errno);
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    return "socket folder " + dir + " belongs to uid " + std::to_string(st.st_uid) +
           ", who could replace the socket: give a folder of root's (e.g. /run/uroce) with --socket";
  }
  const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (others_write && !((st.st_mode & S_ISVTX) != 0 && st.st_uid == 0)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return "socket folder " + dir + " (mode " + mode +
           ") is writable by other users and not sticky: they could swap the socket for a link; "
           "chmod go-w it, or give a folder only root writes (e.g. /run/uroce) with --socket";
  }
  return "";
}

}  // namespace

Server::Server(Context& ctx, std::size_t workers, const ServerConfig& config)
    : ctx_(ctx), config_(config), pumps_(std::max<std::size_t>(workers, 1)), cm_(std::make_unique<CmRelay>(ctx)) {
  memory_budget_ = config_.limits.memory_mb != 0 ? config_.limits.memory_mb * kMiB : half_of_memory();
  mappings_budget_ = half_of_max_map_count();
}

Server::~Server() {
  while (!clients_.empty()) drop(clients_.begin()->first, "");
  if (files_pd_ != nullptr) ctx_.dealloc_pd(files_pd_);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    // Ours if it is still a socket (in a folder nobody else can change).
    struct stat st {};
    if (fstatat(socket_dir_, socket_name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode)) {
      unlinkat(socket_dir_, socket_name_.c_str(), 0);
    }
  }
  if (socket_dir_ >= 0) close(socket_dir_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (signal_fd_ >= 0) close(signal_fd_);
}

std::string Server::listen() {
  const std::string& path = config_.socket;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return "socket path '" + path + "' is too long for a UNIX socket";
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  socket_name_ = slash == std::string::npos ? path : path.substr(slash + 1);
  if (socket_name_.empty() || socket_name_ == "." || socket_name_ == "..") {
    return "socket '" + path + "' names a folder: give a file in it, e.g. /run/uroce/uroced.sock";
  }
  mkdir(dir.c_str(), 0755);  // /run/uroce; EEXIST is fine
  socket_dir_ = open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (socket_dir_ < 0) {
    const int e = errno;
    return "socket folder " + dir + ": " + errno_text(e) +
           (e == ENOTDIR || e == ELOOP ? " (a link or not a folder: give the real folder in --socket)" : "");
  }
  if (std::string e = check_socket_folder(socket_dir_, dir); !e.empty()) return e;
  // A socket file left by a daemon that died is removed; one that answers
  // belongs to a running daemon; anything else is not ours to remove.
  const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    close(probe);
    return "socket " + path + " is in use by a running uroced: stop it, or give another --socket";
  }
  close(probe);
  const char* name = socket_name_.c_str();
  struct stat st {};
  if (fstatat(socket_dir_, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return path + " exists and is not a socket (" + (S_ISLNK(st.st_mode) ? "a link" : "a file") +
             "): remove it, or give another --socket";
    }
    unlinkat(socket_dir_, name, 0);
  }
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return "socket: " + errno_text(errno);
  // Made with its mode (bind applies the umask): no chmod by path after.
  const mode_t umask_was = umask(~static_cast<mode_t>(config_.socket_mode) & 0777);
  const int bound = bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  umask(umask_was);
  if (bound != 0) {
    return "cannot bind " + path + ": " + errno_text(bind_errno) + " (is its folder there and writable?)";
  }
  if (!config_.socket_group.empty()) {
    const group* g = getgrnam(config_.socket_group.c_str());
    if (g == nullptr) return "socket_group '" + config_.socket_group + "' does not exist (groupadd it, or unset it)";
    // The name, not a link it might have become: fchownat never follows one.
    if (fstatat(socket_dir_, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
      return "socket " + path + " changed under uroced after bind: is another program using its folder?";
    }
    if (fchownat(socket_dir_, name, static_cast<uid_t>(-1), g->gr_gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return "chown " + path + " to group " + config_.socket_group + ": " + errno_text(errno);
    }
  }
  if (::listen(listen_fd_, 64) != 0) return "listen: " + errno_text(errno);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  // uroced stops on SIGTERM/SIGINT (blocked by its main, read here); an
  // embedded server on its program's eventfd, leaving signals to the program.
  if (config_.stop_fd < 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC);
  }
  const int stop_fd = config_.stop_fd >= 0 ? config_.stop_fd : signal_fd_;
  if (epoll_fd_ < 0 || stop_fd < 0) return "epoll/signalfd: " + errno_text(errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = stop_fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, stop_fd, &ev);
  ev.data.fd = cm_->wake_fd();  // MADs on QP1
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, cm_->wake_fd(), &ev);
  return "";
}

int Server::run() {
  epoll_event evs[32];
  for (;;) {
    int n = epoll_wait(epoll_fd_, evs, 32, static_cast<int>(kTick.count()));
    if (n < 0 && errno != EINTR) return 1;
    n = std::max(n, 0);
    for (int i = 0; i < n; ++i) {
      const int fd = evs[i].data.fd;
      if (fd == signal_fd_ || (fd == config_.stop_fd && fd >= 0)) {
        if (fd == signal_fd_) {
          signalfd_siginfo info{};
          [[maybe_unused]] ssize_t r = read(signal_fd_, &info, sizeof info);
          spdlog::info("uroced: signal {}: moving {} client(s)' QPs to the error state and closing them",
                       info.ssi_signo, clients_.size());
        }
        // QPs to ERR: their outstanding work completes with flush errors,
        // which the pumps still carry to the clients' rings.
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        for (auto& [sock, c] : clients_) {
          for (auto& [h, q] : c->qps) q.qp->modify(attr, IBV_QP_STATE);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        while (!clients_.empty()) drop(clients_.begin()->first, "");
        return 0;
      }
      if (fd == listen_fd_) {
        accept_client();
        continue;
      }
      if (fd == cm_->wake_fd()) {
        cm_->clear_wake();  // polled below
        continue;
      }
      auto it = clients_.find(fd);
      if (it == clients_.end()) continue;
      Client& c = *it->second;
      // A held reply goes first; the client is read again once it is out.
      const bool stays = c.out ? flush(c) : serve(c);
      if (!stays) drop(fd, c.leaving ? "" : c.attached ? "gone" : "gone before hello");
    }
    const bool expired = expire();
    cm_->poll();
    tick();
    if (n > 0 || expired) publish_client_table();
  }
}

bool Server::expire() {
  const auto now = Clock::now();
  const auto hello_by = std::chrono::milliseconds(config_.hello_timeout_ms);
  const auto reply_by = std::chrono::milliseconds(config_.reply_timeout_ms);
  std::vector<std::pair<int, std::string>> late;
  for (const auto& [sock, c] : clients_) {
    if (c->out && now - c->held > reply_by) {
      late.emplace_back(sock, "left its replies unread for " + std::to_string(config_.reply_timeout_ms) +
                                  " ms (reply_timeout_ms): dropped");
    } else if (!c->attached && now - c->accepted > hello_by) {
      late.emplace_back(sock, "");  // no hello in hello_timeout_ms: closed (debug)
    }
  }
  for (const auto& [sock, why] : late) {
    if (why.empty()) {
      const Client& c = *clients_.at(sock);
      spdlog::debug("uroced: connection of pid {} (uid {}) closed: no hello in {} ms", c.pid, c.uid,
                    config_.hello_timeout_ms);
    }
    drop(sock, why);
  }
  return !late.empty();
}

void Server::drop(int sock, const std::string& why) {
  auto it = clients_.find(sock);
  if (it == clients_.end()) return;
  Client& c = *it->second;
  if (!why.empty()) {
    spdlog::info("uroced: client {} (pid {}, uid {}) {}: its {} QP(s), {} CQ(s), {} region(s) freed", c.id, c.pid,
                 c.uid, why, c.qps.size(), c.cqs.size(), c.mrs.size());
  }
  for (int fd : c.out_fds) close(fd);
  c.out_fds.clear();
  release(c);
  clients_.erase(it);
}

void Server::watch(const Client& c) {
  epoll_event ev{};
  ev.events = c.out ? EPOLLOUT : EPOLLIN;
  ev.data.fd = c.sock;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.sock, &ev);
}

Server::UidUsage Server::usage(uid_t uid) const {
  UidUsage u;
  for (const auto& [sock, c] : clients_) {
    if (c->uid != uid) continue;
    ++(c->attached ? u.connections : u.waiting);
    u.pds += static_cast<std::uint32_t>(c->pds.size() + c->xrcds.size());
    u.mrs += static_cast<std::uint32_t>(c->mrs.size() + c->mws.size());
    u.cqs += static_cast<std::uint32_t>(c->cqs.size());
    u.qps += static_cast<std::uint32_t>(c->qps.size());
    u.srqs += static_cast<std::uint32_t>(c->srqs.size());
    u.ahs += static_cast<std::uint32_t>(c->ahs.size());
  }
  return u;
}

std::string Server::over_budget(const Client& c, Budget budget) const {
  struct Count {
    std::size_t mine;
    std::uint32_t limit;
    std::uint32_t Server::UidUsage::*ours;
    std::uint32_t uid_limit;
    const char* what;
    const char* key;
  };
  const Limits& l = c.limits;
  Count b{};
  switch (budget) {
    case Budget::kNone: return "";
    case Budget::kPds:
      b = {c.pds.size() + c.xrcds.size(), l.pds, &UidUsage::pds, l.uid_pds, "PDs and XRC domains", "max_pds"};
      break;
    case Budget::kMrs:
      b = {c.mrs.size() + c.mws.size(), l.mrs, &UidUsage::mrs, l.uid_mrs, "memory regions and windows", "max_mrs"};
      break;
    case Budget::kCqs: b = {c.cqs.size(), l.cqs, &UidUsage::cqs, l.uid_cqs, "CQs", "max_cqs"}; break;
    case Budget::kQps: b = {c.qps.size(), l.qps, &UidUsage::qps, l.uid_qps, "QPs", "max_qps"}; break;
    case Budget::kSrqs: b = {c.srqs.size(), l.srqs, &UidUsage::srqs, l.uid_srqs, "SRQs", "max_srqs"}; break;
    case Budget::kAhs: b = {c.ahs.size(), l.ahs, &UidUsage::ahs, l.uid_ahs, "address handles", "max_ahs"}; break;
  }
  if (b.mine >= b.limit) {
    return "this client has " + std::to_string(b.mine) + " " + b.what + ", its limit (uroced " + b.key + ")";
  }
  const std::uint32_t ours = usage(c.uid).*b.ours;
  if (ours >= b.uid_limit) {
    const std::string uid = std::to_string(c.uid);
    return "the clients of uid " + uid + " have " + std::to_string(ours) + " " + b.what + ", its limit (uroced uid_" +
           b.key + ", or uid." + uid + ".uid_" + b.key + " for this uid)";
  }
  return "";
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
  r.srqs = static_cast<std::uint32_t>(c.srqs.size());
  r.ahs = static_cast<std::uint32_t>(c.ahs.size());
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
  // Non-blocking: a reply is never waited for (send_reply).
  const int sock = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (sock < 0) return;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    close(sock);
    return;
  }
  // Connections that have not said hello: per uid at most as many as it may
  // have attached, its oldest giving way to its newest (so its own idle
  // ones never keep its next client out, and never another uid's), at most
  // max_clients in all, each closed after hello_timeout_ms. The budgets of
  // attached clients apply at hello (admit).
  if (config_.own_uid_only && cred.uid != geteuid()) {
    refusals.warn("uroce: refused a connection of pid " + std::to_string(cred.pid) + " (uid " +
                  std::to_string(cred.uid) + "): only this program's own uid may attach");
    close(sock);
    return;
  }
  auto c = std::make_unique<Client>();
  c->limits = config_.limits_for(cred.uid);
  if (usage(cred.uid).waiting >= c->limits.connections_per_uid()) {
    const Client* oldest = nullptr;
    for (const auto& [s, k] : clients_) {
      if (k->uid == cred.uid && !k->attached && (oldest == nullptr || k->id < oldest->id)) oldest = k.get();
    }
    if (oldest != nullptr) drop(oldest->sock, "");
  }
  const auto waiting = std::count_if(clients_.begin(), clients_.end(), [](const auto& k) { return !k.second->attached; });
  if (static_cast<std::uint32_t>(waiting) >= config_.limits.clients) {
    refusals.warn("uroced: refused a connection of pid " + std::to_string(cred.pid) + " (uid " +
                  std::to_string(cred.uid) + "): " + std::to_string(waiting) + " connections wait for their hello");
    close(sock);  // the client reads "uroced closed the connection"
    return;
  }
  c->sock = sock;
  c->id = next_client_++;
  c->pid = cred.pid;
  c->uid = cred.uid;
  c->accepted = Clock::now();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = sock;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sock, &ev);
  clients_[sock] = std::move(c);
}

std::string Server::admit(const Client& c) const {
  const auto attached = std::count_if(clients_.begin(), clients_.end(), [](const auto& k) { return k.second->attached; });
  if (static_cast<std::uint32_t>(attached) >= config_.limits.clients) {
    return "uroced serves " + std::to_string(attached) + " clients, its limit (max_clients): try again later";
  }
  const std::uint32_t mine = usage(c.uid).connections;
  if (mine >= c.limits.connections_per_uid()) {
    const std::string uid = std::to_string(c.uid);
    return "uid " + uid + " has " + std::to_string(mine) + " clients attached, its limit (uroced uid_max_connections, or uid." +
           uid + ".uid_max_connections for this uid)";
  }
  return "";
}

// Attaches the client (admit: the budgets of attached clients) and tells it
// the device as it may use it.
void Server::op_hello(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  if (req.hello.version != service::kProtocolVersion) {
    fail(reply, EPROTO, "protocol version " + std::to_string(req.hello.version) + ", this uroced speaks " +
                            std::to_string(service::kProtocolVersion) + ": use the library of the same uroce");
    return;
  }
  if (!c.attached) {
    if (std::string why = admit(c); !why.empty()) {
      refusals.warn("uroced: refused pid " + std::to_string(c.pid) + ": " + why);
      fail(reply, EUSERS, why);
      c.leaving = true;  // closed once this reply is out
      return;
    }
    c.attached = true;
    spdlog::info("uroced: client {} attached: pid {}, uid {}", c.id, c.pid, c.uid);
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
  h.max_qp = std::min(l.max_qp, c.limits.qps);
  h.max_qp_wr = l.max_qp_wr;
  h.max_sge = std::min<std::uint32_t>(l.max_sge, service::kMaxSge);
  h.max_inline_data = std::min<std::uint32_t>(l.max_inline_data, service::kMaxInline);
  h.max_cqe = l.max_cqe;
  h.max_mr = std::min(l.max_mr, c.limits.mrs);
  h.max_qp_rd_atom = l.max_qp_rd_atom;
  h.max_qp_init_rd_atom = l.max_qp_init_rd_atom;
  h.max_dm_size = l.max_dm_size;
}

bool Server::serve(Client& c) {
  // A deferred client's socket is watched for nothing: only a hang-up or an
  // error gets here, and its answer no longer matters.
  if (c.deferred) return false;
  Request req;
  int fds[service::kMaxFds];
  int nfds = 0;
  const long n = service::recv_message(c.sock, &req, sizeof req, fds, service::kMaxFds, nfds);
  if (n == -EAGAIN || n == -EWOULDBLOCK) return true;  // nothing after all
  if (n <= 0 && n != -EMSGSIZE) return false;         // closed (exit, kill) or broken
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
  return send_reply(c, reply, reply_fds) && !(c.leaving && !c.out);
}

bool Server::send_reply(Client& c, const Reply& reply, std::vector<int>& fds) {
  // The socket is non-blocking, so this sendmsg never sleeps (MSG_DONTWAIT).
  const int e = service::send_message(c.sock, &reply, sizeof reply, fds.data(), static_cast<int>(fds.size()));
  if (e == EAGAIN || e == EWOULDBLOCK) {
    // The client is not reading: hold this reply, stop reading its
    // requests (so nothing more piles up), drop it after reply_timeout_ms.
    c.out = std::make_unique<Reply>(reply);
    c.out_fds.swap(fds);
    c.held = Clock::now();
    watch(c);
    return true;
  }
  for (int fd : fds) close(fd);
  fds.clear();
  return e == 0;
}

bool Server::flush(Client& c) {
  const int e = service::send_message(c.sock, c.out.get(), sizeof *c.out, c.out_fds.data(),
                                      static_cast<int>(c.out_fds.size()));
  if (e == EAGAIN || e == EWOULDBLOCK) return true;  // still no room
  for (int fd : c.out_fds) close(fd);
  c.out_fds.clear();
  c.out.reset();
  if (e != 0 || c.leaving) return false;
  watch(c);
  return true;
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
      p.sq_next = p.rq_next = p.sq_rejected = p.rq_rejected = 0;
      p.sq.reset();  // head and retired
      p.rq.reset();
    });
    forget_completions(c, q);
  }
}

void Server::defer(Client& c, const Request& r, std::chrono::milliseconds hold_off) {
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

const ibv_gid& Server::awaited_gid(const Request& req) {
  return req.op == service::Op::kCreateAh ? req.create_ah.attr.grh.dgid : req.modify_qp.attr.ah_attr.grh.dgid;
}

void Server::tick() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<int> gone;
  for (auto& [sock, cp] : clients_) {
    Client& c = *cp;
    if (!c.deferred || now < c.deferred->not_before) continue;
    const Request& req = c.deferred->req;
    const Reach reach = ctx_.resolve_gid(awaited_gid(req));
    if (reach == Reach::kPending && now < c.deferred->deadline) continue;
    Reply reply;
    const char* what = req.op == service::Op::kCreateAh ? "create AH" : "modify QP";
    if (reach == Reach::kPending) {
      fail(reply, EHOSTUNREACH, std::string(what) + ": the peer's GID was not resolved in time (too many "
                                                    "resolutions under way); try again");
    } else if (req.op == service::Op::kCreateAh) {
      create_ah(c, req.create_ah, reply);  // known: made now; unreachable: refused at once
    } else if (Qp* q = find(c.qps, req.modify_qp.qp, "QP", reply); q != nullptr) {
      modify_qp(c, *q, req.modify_qp, reply);
    }
    c.deferred.reset();
    // Through the same non-blocking path as every reply (held if the
    // client does not read); its socket is read again once it is out.
    std::vector<int> no_fds;
    if (send_reply(c, reply, no_fds)) watch(c);
    else gone.push_back(sock);
  }
  for (int sock : gone) drop(sock, "gone");
}

int Server::fail(Reply& reply, int err, const std::string& why) {
  reply.error = err;
  set_message(reply, why);
  return err;
}

void Server::stats(const Client& asking, service::StatsReply& s) const {
  // root sees every client (uroced --stats); any other uid its own clients
  // only: another user's pids and QPNs are not its business.
  const bool all = asking.uid == 0;
  s = service::StatsReply{};  // the reply's union was a HelloReply until now
  for (const auto& [sock, k] : clients_) {
    if (!all && k->uid != asking.uid) continue;
    ++s.clients;
    s.pds += static_cast<std::uint32_t>(k->pds.size());
    s.mrs += static_cast<std::uint32_t>(k->mrs.size());
    s.cqs += static_cast<std::uint32_t>(k->cqs.size());
    s.qps += static_cast<std::uint32_t>(k->qps.size());
    s.srqs += static_cast<std::uint32_t>(k->srqs.size());
    s.ahs += static_cast<std::uint32_t>(k->ahs.size());
    s.mapped_bytes += k->mapped + k->ring_bytes;
  }
  for (const auto& [sock, k] : clients_) {
    if (s.listed == service::StatsReply::kMaxClients) break;
    if (!all && k->uid != asking.uid) continue;
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
    s.client_srqs[s.listed - 1] = r.srqs;
    s.client_ahs[s.listed - 1] = r.ahs;
    for (std::size_t j = 0; j < r.qpns.size() && j < std::size(e.qpn); ++j) e.qpn[j] = r.qpns[j];
  }
}

Server::Totals Server::totals() const {
  Totals t;
  for (const auto& [sock, c] : clients_) {
    ++t.clients;
    t.pds += static_cast<std::uint32_t>(c->pds.size());
    t.mrs += static_cast<std::uint32_t>(c->mrs.size());
    t.cqs += static_cast<std::uint32_t>(c->cqs.size());
    t.qps += static_cast<std::uint32_t>(c->qps.size());
    t.srqs += static_cast<std::uint32_t>(c->srqs.size());
    t.ahs += static_cast<std::uint32_t>(c->ahs.size());
    t.mapped_bytes += c->mapped + c->ring_bytes;
  }
  return t;
}

// --- CQs and QPs ---------------------------------------------------------------------

void Server::op_create_cq(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>& fds) {
  const service::CreateCq& r = req.create_cq;
  if (r.cqe == 0 || r.cqe > ctx_.limits().max_cqe) {
    fail(reply, EINVAL, "cqe must be between 1 and the device's max_cqe (" + std::to_string(ctx_.limits().max_cqe) + ")");
    return;
  }
  const std::uint32_t slots = service::ring_slots(r.cqe);
  const std::size_t bytes = service::page_round(service::Ring<service::CqSlot>::bytes(slots));
  // The shared ring, and an engine ring per worker: cqe completions in
  // the smallest power of two of slots that holds them (ring::SpscRing).
  const Charge add{0, bytes + pumps_.size() * std::uint64_t{service::ring_slots(r.cqe)} * sizeof(ibv_wc), 1};
  if (std::string e = over_budget(c, add); !e.empty()) {
    fail(reply, ENOMEM, e);
    return;
  }
  auto pump = std::make_unique<PumpCq>();
  const int file = service::make_memory_file("uroced-cq", bytes, false, service::Sealing::kFinal);
  void* map = file >= 0 ? service::map_shared(file, bytes) : nullptr;
  pump->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  CompletionQueue* cq = map != nullptr && pump->event_fd >= 0
                            ? ctx_.create_cq(CqAttr{static_cast<int>(r.cqe), &PumpCq::on_event, pump.get(),
                                                    r.timestamps != 0})
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
  pump->ring = service::Ring<service::CqSlot>::at(map, slots);
  pump->timestamps = r.timestamps != 0;
  reply.handle = c.next_handle++;
  reply.create_cq.slots = slots;
  reply.create_cq.file_size = bytes;
  fds.push_back(file);
  fds.push_back(dup(pump->event_fd));
  Cq rec;
  rec.cq = cq;
  rec.map = map;
  rec.bytes = bytes;
  rec.charge = add.objects;
  rec.worker = next_worker_++ % pumps_.size();
  rec.pump = std::move(pump);
  pumps_[rec.worker].add(rec.pump.get());
  c.ring_bytes += bytes;
  charge(c, add, +1);
  ++mappings_total_;
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
  charge(c, Charge{0, rec.charge, 1}, -1);
  --mappings_total_;
  c.cqs.erase(it);
  return 0;
}

void Server::op_create_qp(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>& fds) {
  const service::CreateQp& r = req.create_qp;
  auto pd = c.pds.find(r.pd);
  auto scq = c.cqs.find(r.send_cq);
  auto rcq = c.cqs.find(r.recv_cq);
  auto srq = c.srqs.find(r.srq);
  auto xrcd = c.xrcds.find(r.xrcd);
  if (pd == c.pds.end() || scq == c.cqs.end() || rcq == c.cqs.end() || (r.srq != 0 && srq == c.srqs.end()) ||
      (r.xrcd != 0 && xrcd == c.xrcds.end())) {
    fail(reply, EINVAL, "create_qp names a PD, CQ, SRQ or XRC domain that is not this client's");
    return;
  }
  if (r.qp_type != IBV_QPT_RC && r.qp_type != IBV_QPT_UC && r.qp_type != IBV_QPT_UD &&
      r.qp_type != IBV_QPT_XRC_SEND && r.qp_type != IBV_QPT_XRC_RECV) {
    fail(reply, EOPNOTSUPP, "qp_type must be IBV_QPT_RC, UC, UD, XRC_SEND or XRC_RECV (raw packet QPs are "
                            "not supported)");
    return;
  }
  if (r.cap.max_send_sge > service::kMaxSge || r.cap.max_recv_sge > service::kMaxSge ||
      r.cap.max_inline_data > service::kMaxInline) {
    fail(reply, EINVAL, "QP capabilities exceed the device limits (max_sge 16, max_inline_data 256)");
    return;
  }
  // Its rings and WQE arrays as asked (the device may round up: charged
  // again from what it gave, below, before anything is kept).
  auto qp_charge = [&](const ibv_qp_cap& cap) {
    const std::uint64_t sq = service::ring_slots(std::max<std::uint32_t>(cap.max_send_wr, 1));
    const std::uint64_t rq = service::ring_slots(std::max<std::uint32_t>(cap.max_recv_wr, 1));
    const std::uint64_t rings = service::page_round(service::Ring<service::SendSlot>::bytes(static_cast<std::uint32_t>(sq))) +
                                service::page_round(service::Ring<service::RecvSlot>::bytes(static_cast<std::uint32_t>(rq)));
    return Charge{0, rings + sq * (kSendWqeBytes + std::max<std::uint32_t>(cap.max_inline_data, 1)) + rq * kRecvWqeBytes +
                         kQpFixedBytes, 1};
  };
  if (r.cap.max_send_wr > ctx_.limits().max_qp_wr || r.cap.max_recv_wr > ctx_.limits().max_qp_wr) {
    fail(reply, EINVAL, "max_send_wr and max_recv_wr must be at most the device's max_qp_wr (" +
                            std::to_string(ctx_.limits().max_qp_wr) + ")");
    return;
  }
  if (std::string e = over_budget(c, qp_charge(r.cap)); !e.empty()) {
    fail(reply, ENOMEM, e);
    return;
  }
  // The worker serving the fewest of this daemon's QPs; the SRQ's, on one
  // (one engine takes from an SRQ).
  std::vector<std::size_t> load(pumps_.size(), 0);
  for (const auto& [sock, k] : clients_) {
    for (const auto& [h, q] : k->qps) ++load[q.worker];
  }
  // An XRC domain's target QPs: its engine's worker.
  const std::size_t worker = r.srq != 0    ? srq->second.worker
                             : r.xrcd != 0 ? static_cast<std::size_t>(xrcd->second->engine())
                                           : static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
  QpInitAttr attr;
  attr.send_cq = scq->second.cq;
  attr.recv_cq = rcq->second.cq;
  attr.cap = r.cap;
  attr.qp_type = static_cast<ibv_qp_type>(r.qp_type);
  attr.sq_sig_all = r.sq_sig_all != 0;
  attr.worker = static_cast<int>(worker);
  attr.srq = r.srq != 0 ? srq->second.srq : nullptr;
  attr.xrcd = r.xrcd != 0 ? xrcd->second : nullptr;
  if (attr.qp_type == IBV_QPT_UD) {
    if (std::string e = make_ah_table(c); !e.empty()) {
      fail(reply, ENOMEM, e);
      return;
    }
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
  const Charge add = qp_charge(got.cap);
  if (std::string e = over_budget(c, add); !e.empty()) {
    pd->second->destroy_qp(qp);
    fail(reply, ENOMEM, e);
    return;
  }
  const int file = service::make_memory_file("uroced-qp", bytes, false, service::Sealing::kFinal);
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
  pump->ahs = attr.qp_type == IBV_QPT_UD ? c.ah_table.get() : nullptr;
  pump->sq = service::Ring<service::SendSlot>::work_queue_at(map, sq_slots, sq_slots);
  pump->rq = service::Ring<service::RecvSlot>::work_queue_at(static_cast<char*>(map) + sq_bytes, rq_slots, rq_slots);
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
  rec.srq = r.srq;
  rec.map = map;
  rec.bytes = bytes;
  rec.charge = add.objects;
  rec.worker = worker;
  rec.pump = std::move(pump);
  pumps_[worker].add(rec.pump.get());
  ++scq->second.users;
  ++rcq->second.users;
  if (r.srq != 0) ++srq->second.users;
  c.ring_bytes += bytes;
  charge(c, add, +1);
  ++mappings_total_;
  c.qps[reply.handle] = std::move(rec);
}

int Server::destroy_qp(Client& c, std::uint32_t handle) {
  auto it = c.qps.find(handle);
  if (it == c.qps.end()) return EINVAL;
  Qp& rec = it->second;
  cm_->forget_qp(rec.qp);
  pumps_[rec.worker].remove(rec.pump.get());
  if (const int e = rec.pd->destroy_qp(rec.qp); e != 0) {
    pumps_[rec.worker].add(rec.pump.get());
    return e;
  }
  munmap(rec.map, rec.bytes);
  c.ring_bytes -= rec.bytes;
  charge(c, Charge{0, rec.charge, 1}, -1);
  --mappings_total_;
  --c.cqs[rec.send_cq].users;
  --c.cqs[rec.recv_cq].users;
  if (rec.srq != 0) --c.srqs[rec.srq].users;
  c.qps.erase(it);
  return 0;
}

void Server::release(Client& c) {
  // Its rdma_cm listeners, requests and connections end first (their QPs
  // still there, moved to ERR as the DREQs go). Then the pumps, so no
  // worker touches the client's rings any more; then the QPs (to error,
  // then gone), CQs, regions, PDs, and the mappings.
  cm_->release(c.id);
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  for (auto& [h, q] : c.qps) {
    pumps_[q.worker].remove(q.pump.get());
    q.qp->modify(err, IBV_QP_STATE);
  }
  while (!c.qps.empty()) destroy_qp(c, c.qps.begin()->first);
  while (!c.srqs.empty()) {
    if (destroy_srq(c, c.srqs.begin()->first) != 0) c.srqs.erase(c.srqs.begin());
  }
  while (!c.ahs.empty()) destroy_ah(c, c.ahs.begin()->first);
  for (auto& [h, x] : c.xrcds) ctx_.close_xrcd(x);  // its SRQs and target QPs went above
  c.xrcds.clear();
  while (!c.cqs.empty()) {
    if (destroy_cq(c, c.cqs.begin()->first) != 0) c.cqs.erase(c.cqs.begin());
  }
  bool leaked = false;
  // Windows before regions: a region with windows bound stays registered.
  for (auto& [h, mw] : c.mws) mw->pd()->dealloc_mw(mw);
  c.mws.clear();
  while (!c.mrs.empty()) {
    // A region that cannot be deregistered keeps its view mapped (the
    // engines may still read it): leaked, never unmapped under them.
    if (dereg_mr(c, c.mrs.begin()->first) != 0) {
      spdlog::warn("uroced: client {}: a region would not deregister; its memory stays mapped", c.id);
      c.mrs.erase(c.mrs.begin());
      leaked = true;
    }
  }
  // Its /proc/PID/mem once no region reaches through it (kept, like a
  // leaked region's view, while one might).
  if (c.odp_mem >= 0 && !leaked) close(c.odp_mem);
  c.odp_mem = -1;
  drop_idle_files(c, {});
  // Device memory with no region left on it (a region that would not
  // deregister keeps its memory mapped, as above).
  for (auto it = c.dms.begin(); it != c.dms.end();) {
    const std::uint32_t h = (it++)->first;
    free_dm(c, h);
  }
  c.dms.clear();
  for (auto& [h, pd] : c.pds) ctx_.dealloc_pd(pd);
  c.pds.clear();
  // Left only by regions that would not deregister (their files stay
  // mapped, under the engines); the client's share of the budgets goes.
  UidMemory& u = uid_memory_[c.uid];
  u.bytes -= std::min(u.bytes, c.mapped + c.object_bytes);
  u.mappings -= std::min(u.mappings, c.mappings);
  memory_total_ -= std::min(memory_total_, c.mapped + c.object_bytes);
  if (u.bytes == 0 && u.mappings == 0) uid_memory_.erase(c.uid);
  c.files.clear();
  c.mapped = c.object_bytes = 0;
  c.mappings = 0;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.sock, nullptr);
  close(c.sock);
  c.sock = -1;
}

}  // namespace uroce::daemon
