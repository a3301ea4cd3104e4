#include "service_daemon/cm_relay.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "service_daemon/server.h"
#include <spdlog/spdlog.h>

namespace uroce::daemon {

namespace {

void wake(void* fd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(*static_cast<int*>(fd), &one, sizeof one);
}

void signal_fd(int fd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd, &one, sizeof one);
}

std::vector<std::uint8_t> bytes(const std::uint8_t* p, std::size_t n) { return std::vector<std::uint8_t>(p, p + n); }

}  // namespace

CmRelay::CmRelay(Context& ctx) : ctx_(ctx) { wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

CmRelay::~CmRelay() {
  manager_.reset();  // QP1 first: its CQ's callback writes wake_fd_
  for (auto& [id, c] : clients_) close(c.event_fd);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void CmRelay::clear_wake() {
  std::uint64_t n = 0;
  [[maybe_unused]] ssize_t r = read(wake_fd_, &n, sizeof n);
}

CmRelay::ClientCm* CmRelay::client_cm(std::uint32_t client, std::string& why) {
  auto it = clients_.find(client);
  if (it != clients_.end()) return &it->second;
  why = "no CM open for this client: its first CM request is cm_open (uroce's librdmacm says it)";
  return nullptr;
}

int CmRelay::owned(std::uint32_t client, std::uint32_t comm_id, std::string& why) const {
  auto it = conns_.find(comm_id);
  if (it != conns_.end() && it->second == client) return 0;
  why = "no connection " + std::to_string(comm_id) + " of this client";
  return ENOENT;
}

int CmRelay::open(std::uint32_t client, int& fd, std::string& why) {
  if (clients_.count(client) != 0) {
    why = "the CM is open for this client already";
    return EBUSY;
  }
  if (!manager_) {
    if (wake_fd_ < 0) {
      why = "eventfd: " + std::string(std::strerror(errno));
      return ENOMEM;
    }
    // More patient than in process: a client answers a request through the
    // socket, a round trip per verbs call (PD, CQ, QP, regions, then accept),
    // on a host whose cores its programs share with the daemon; 2 s of
    // resends is too little there. Linux's CM waits 4.3 s a try
    // (remote_cm_response_timeout 20) before resending a REQ.
    cm::Timing timing;
    timing.resend_ns = 500'000'000;
    timing.max_resends = 16;
    manager_ = cm::Manager::open(ctx_, why, timing, &wake, &wake_fd_);
    if (!manager_) return ENODEV;
    spdlog::info("uroced: the communication manager (QP1) is open for rdma_cm clients");
  }
  ClientCm c;
  c.event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  fd = c.event_fd >= 0 ? dup(c.event_fd) : -1;
  if (fd < 0) {
    if (c.event_fd >= 0) close(c.event_fd);
    why = "eventfd: " + std::string(std::strerror(errno));
    return ENOMEM;
  }
  clients_.emplace(client, std::move(c));
  return 0;
}

int CmRelay::listen(std::uint32_t client, std::uint64_t service_id, std::uint32_t backlog, std::string& why) {
  ClientCm* c = client_cm(client, why);
  if (c == nullptr) return EINVAL;
  if (c->listens.size() >= CmLimits::kListens) {
    why = "this client listens on " + std::to_string(c->listens.size()) + " services, its limit";
    return ENOMEM;
  }
  const std::uint32_t b = backlog == 0 ? CmLimits::kBacklog : std::min(backlog, CmLimits::kBacklog);
  // The manager carries the service ID back as the listener's owner.
  if (const int e = manager_->listen(service_id, reinterpret_cast<void*>(service_id), b); e != 0) {
    why = "service ID 0x" + fmt::format("{:x}", service_id) + " is listened on already";
    return e;
  }
  listeners_[service_id] = client;
  c->listens.insert(service_id);
  return 0;
}

int CmRelay::unlisten(std::uint32_t client, std::uint64_t service_id, std::string& why) {
  ClientCm* c = client_cm(client, why);
  if (c == nullptr) return EINVAL;
  if (c->listens.erase(service_id) == 0) {
    why = "this client does not listen on service ID 0x" + fmt::format("{:x}", service_id);
    return ENOENT;
  }
  listeners_.erase(service_id);
  return manager_->unlisten(service_id);
}

int CmRelay::connect(std::uint32_t client, QueuePair* qp, const service::CmConnect& r, std::uint32_t& comm_id,
                     std::string& why) {
  ClientCm* c = client_cm(client, why);
  if (c == nullptr) return EINVAL;
  if (c->conns.size() >= CmLimits::kConnections) {
    why = "this client holds " + std::to_string(c->conns.size()) + " connections, its limit";
    return ENOMEM;
  }
  cm::ConnectParams p;
  p.qp = qp;
  p.qpn = r.qpn;
  p.srq = r.srq != 0;
  p.remote_gid = r.remote_gid;
  p.sgid_index = r.sgid_index;
  p.service_id = r.service_id;
  p.mtu = static_cast<ibv_mtu>(r.mtu);
  p.responder_resources = r.responder_resources;
  p.initiator_depth = r.initiator_depth;
  p.retry_count = r.retry_count;
  p.rnr_retry_count = r.rnr_retry_count;
  p.timeout = r.timeout;
  p.private_data = bytes(r.private_data, r.private_data_len);
  p.ece_vendor_id = r.ece_vendor_id;
  p.ece_options = r.ece_options;
  if (const int e = manager_->connect(p, comm_id); e != 0) {
    why = "connect: the QP must be RC and in RESET or INIT (" + std::string(std::strerror(e)) + ")";
    return e;
  }
  conns_[comm_id] = client;
  c->conns.insert(comm_id);
  return 0;
}

int CmRelay::accept(std::uint32_t client, QueuePair* qp, const service::CmAccept& r, std::string& why) {
  if (client_cm(client, why) == nullptr) return EINVAL;
  if (const int e = owned(client, r.comm_id, why); e != 0) return e;
  cm::AcceptParams p;
  p.qp = qp;
  p.qpn = r.qpn;
  p.srq = r.srq != 0;
  p.responder_resources = r.responder_resources;
  p.initiator_depth = r.initiator_depth;
  p.rnr_retry_count = r.rnr_retry_count;
  p.timeout = r.timeout;
  p.private_data = bytes(r.private_data, r.private_data_len);
  p.ece_vendor_id = r.ece_vendor_id;
  p.ece_options = r.ece_options;
  if (const int e = manager_->accept(r.comm_id, p); e != 0) {
    why = e == ENOENT ? "connection " + std::to_string(r.comm_id) + " is not a request waiting for an answer"
                      : "accept: the QP must be RC and in RESET or INIT, its peer reachable "
                        "(a SIDR request's: UD, INIT or later)";
    return e;
  }
  if (sidr_requests_.count(r.comm_id) != 0) end(r.comm_id);  // answered: nothing follows
  return 0;
}

int CmRelay::sidr_request(std::uint32_t client, const service::CmSidrRequest& r, std::uint32_t& request_id,
                          std::string& why) {
  ClientCm* c = client_cm(client, why);
  if (c == nullptr) return EINVAL;
  if (c->conns.size() >= CmLimits::kConnections) {
    why = "this client holds " + std::to_string(c->conns.size()) + " connections, its limit";
    return ENOMEM;
  }
  cm::SidrParams p;
  p.remote_gid = r.remote_gid;
  p.service_id = r.service_id;
  p.private_data = bytes(r.private_data, r.private_data_len);
  if (const int e = manager_->sidr_request(p, request_id); e != 0) {
    why = "sidr_request: " + std::string(std::strerror(e));
    return e;
  }
  conns_[request_id] = client;
  c->conns.insert(request_id);
  return 0;
}

int CmRelay::reject(std::uint32_t client, const service::CmReject& r, std::string& why) {
  if (client_cm(client, why) == nullptr) return EINVAL;
  if (const int e = owned(client, r.comm_id, why); e != 0) return e;
  // A client names only the reasons a program may give (rdma_reject, rdma_reject_ece).
  wire::RejReason reason = wire::RejReason::kConsumerReject;
  if (r.reason == static_cast<std::uint16_t>(wire::RejReason::kVendorOptionNotSupported)) {
    reason = wire::RejReason::kVendorOptionNotSupported;
  } else if (r.reason != 0 && r.reason != static_cast<std::uint16_t>(wire::RejReason::kConsumerReject)) {
    why = "a reject's reason is 28 (consumer) or 35 (vendor option not supported), not " + std::to_string(r.reason);
    return EINVAL;
  }
  if (const int e = manager_->reject(r.comm_id, bytes(r.private_data, r.private_data_len), reason); e != 0) {
    why = "connection " + std::to_string(r.comm_id) + " is not a request waiting for an answer";
    return e;
  }
  end(r.comm_id);
  return 0;
}

int CmRelay::disconnect(std::uint32_t client, std::uint32_t comm_id, std::string& why) {
  if (client_cm(client, why) == nullptr) return EINVAL;
  if (const int e = owned(client, comm_id, why); e != 0) return e;
  if (const int e = manager_->disconnect(comm_id); e != 0) {
    why = "connection " + std::to_string(comm_id) + " is not established";
    return e;
  }
  return 0;
}

int CmRelay::init_qp_attr(std::uint32_t client, const service::CmInitQpAttr& r, service::CmInitQpAttrReply& out,
                          std::string& why) {
  if (client_cm(client, why) == nullptr) return EINVAL;
  if (const int e = owned(client, r.comm_id, why); e != 0) return e;
  const auto state = static_cast<ibv_qp_state>(r.qp_state);
  if (const int e = manager_->qp_attr(r.comm_id, state, out.attr, out.mask); e != 0) {
    why = "init_qp_attr: connection " + std::to_string(r.comm_id) + " has no attributes for QP state " +
          std::to_string(r.qp_state) + " yet (INIT, RTR, RTS; RTR and RTS once the REP is in)";
    return e;
  }
  return 0;
}

int CmRelay::establish(std::uint32_t client, std::uint32_t comm_id, std::string& why) {
  if (client_cm(client, why) == nullptr) return EINVAL;
  if (const int e = owned(client, comm_id, why); e != 0) return e;
  if (const int e = manager_->establish(comm_id); e != 0) {
    why = "establish: connection " + std::to_string(comm_id) + " does not wait for it (a connect response)";
    return e;
  }
  return 0;
}

int CmRelay::next_event(std::uint32_t client, service::CmEvent& out, std::string& why) {
  ClientCm* c = client_cm(client, why);
  if (c == nullptr) return EINVAL;
  if (c->events.empty()) {
    why = "no CM event waits";
    return ENOENT;
  }
  out = c->events.front();
  c->events.pop_front();
  out.remaining = static_cast<std::uint32_t>(c->events.size());
  return 0;
}

void CmRelay::end(std::uint32_t comm_id) {
  sidr_requests_.erase(comm_id);
  auto it = conns_.find(comm_id);
  if (it == conns_.end()) return;
  if (auto c = clients_.find(it->second); c != clients_.end()) c->second.conns.erase(comm_id);
  conns_.erase(it);
}

void CmRelay::route(const cm::Event& e) {
  std::uint32_t client = 0;
  if (e.type == cm::EventType::kRequest) {
    const auto service_id = reinterpret_cast<std::uint64_t>(e.listener);
    auto l = listeners_.find(service_id);
    auto c = l == listeners_.end() ? clients_.end() : clients_.find(l->second);
    // A request its listener's client cannot be told of (too many unread,
    // or too many connections): refused now, not left to time out.
    if (c == clients_.end() || c->second.events.size() >= CmLimits::kEvents ||
        c->second.conns.size() >= CmLimits::kConnections) {
      ++counters_.requests_refused_queue_full;
      manager_->reject(e.comm_id, {});
      return;
    }
    client = l->second;
    conns_[e.comm_id] = client;
    c->second.conns.insert(e.comm_id);
    if (e.sidr) sidr_requests_.insert(e.comm_id);
  } else {
    auto it = conns_.find(e.comm_id);
    if (it == conns_.end()) return;  // abandoned by a client that went, or rejected meanwhile
    client = it->second;
    // An answered SIDR request ends with its event; a connection goes on
    // after ESTABLISHED, and after CONNECT_RESPONSE (the program's own QP).
    const bool goes_on = (e.type == cm::EventType::kEstablished && !e.sidr) || e.type == cm::EventType::kConnectResponse;
    if (!goes_on) end(e.comm_id);
  }
  auto c = clients_.find(client);
  if (c == clients_.end() || c->second.events.size() >= CmLimits::kEvents) {
    // Its client reads none of its events: it learns of this one no more
    // than of any other it left unread.
    ++counters_.events_dropped;
    return;
  }
  service::CmEvent out;
  out.type = static_cast<std::uint32_t>(e.type);
  out.comm_id = e.comm_id;
  out.service_id = reinterpret_cast<std::uint64_t>(e.listener);
  out.peer_gid = e.peer_gid;
  out.reason = e.reason;
  out.active = e.active ? 1 : 0;
  out.sidr = e.sidr ? 1 : 0;
  out.qkey = e.rep.local_qkey;
  out.ece_vendor_id = e.ece_vendor_id;
  out.ece_options = e.ece_options;
  if (e.type == cm::EventType::kRequest) {
    out.responder_resources = e.req.responder_resources;
    out.initiator_depth = e.req.initiator_depth;
    out.flow_control = e.req.end_to_end_flow_control ? 1 : 0;
    out.retry_count = e.req.retry_count;
    out.rnr_retry_count = e.req.rnr_retry_count;
    out.srq = e.req.srq ? 1 : 0;
    out.qpn = e.req.local_qpn;
    std::memcpy(out.req_private_data, e.req.private_data.data(), sizeof out.req_private_data);
  } else if ((e.type == cm::EventType::kEstablished || e.type == cm::EventType::kConnectResponse) && e.active) {
    out.responder_resources = e.rep.responder_resources;
    out.initiator_depth = e.rep.initiator_depth;
    out.flow_control = e.rep.end_to_end_flow_control ? 1 : 0;
    out.rnr_retry_count = e.rep.rnr_retry_count;
    out.srq = e.rep.srq ? 1 : 0;
    out.qpn = e.rep.local_qpn;
  }
  out.private_data_len = static_cast<std::uint16_t>(std::min(e.private_data.size(), sizeof out.private_data));
  // copy_n, not memcpy: an event with no private data has an empty vector,
  // whose data() may be null (UBSan: memcpy's source must not be).
  std::copy_n(e.private_data.begin(), out.private_data_len, out.private_data);
  c->second.events.push_back(out);
  signal_fd(c->second.event_fd);
}

void CmRelay::poll() {
  if (!manager_) return;
  std::vector<cm::Event> events;
  manager_->poll(events);
  for (const cm::Event& e : events) route(e);
}

void CmRelay::forget_qp(QueuePair* qp) {
  if (manager_) manager_->forget_qp(qp);
}

void CmRelay::release(std::uint32_t client) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return;
  ClientCm& c = it->second;
  for (std::uint64_t service_id : c.listens) {
    manager_->unlisten(service_id);
    listeners_.erase(service_id);
  }
  // Requests refused, connections being made withdrawn, established ones
  // disconnected: the peers learn at once instead of by timeouts.
  for (std::uint32_t comm_id : c.conns) {
    manager_->abandon(comm_id);
    conns_.erase(comm_id);
  }
  if (!c.events.empty()) counters_.events_dropped += c.events.size();
  close(c.event_fd);
  clients_.erase(it);
}

// --- The requests (Server::kOps rows) ------------------------------------------------

QueuePair* Server::process_qp(const Client& c, std::uint32_t qpn) const {
  // The socket's peer pid (SO_PEERCRED, not the client's word) and uid: a
  // QP of another process is unknown here, as another client's handle is.
  // A peer whose pid the daemon's namespace cannot see has pid 0: it names
  // no QP (another such peer would have the same 0).
  if (c.pid <= 0) return nullptr;
  for (const auto& [sock, k] : clients_) {
    if (k->pid != c.pid || k->uid != c.uid) continue;
    for (const auto& [h, q] : k->qps) {
      if (q.qp->qp_num() == qpn) return q.qp;
    }
  }
  return nullptr;
}

void Server::op_cm_open(Client& c, const service::Request&, const int*, int, service::Reply& reply,
                        std::vector<int>& fds) {
  int fd = -1;
  std::string why;
  if (const int e = cm_->open(c.id, fd, why); e != 0) {
    fail(reply, e, why);
    return;
  }
  fds.push_back(fd);
}

void Server::op_cm_listen(Client& c, const service::Request& req, const int*, int, service::Reply& reply,
                          std::vector<int>&) {
  std::string why;
  if (const int e = cm_->listen(c.id, req.cm_listen.service_id, req.cm_listen.backlog, why); e != 0) fail(reply, e, why);
}

void Server::op_cm_unlisten(Client& c, const service::Request& req, const int*, int, service::Reply& reply,
                            std::vector<int>&) {
  std::string why;
  if (const int e = cm_->unlisten(c.id, req.cm_listen.service_id, why); e != 0) fail(reply, e, why);
}

void Server::op_cm_connect(Client& c, const service::Request& req, const int*, int, service::Reply& reply,
                           std::vector<int>&) {
  const service::CmConnect& r = req.cm_connect;
  if (r.private_data_len > sizeof r.private_data || r.mtu < IBV_MTU_256 || r.mtu > IBV_MTU_4096 || r.sgid_index > 1 ||
      r.retry_count > 7 || r.rnr_retry_count > 7 || r.timeout > 31) {
    fail(reply, EINVAL, "cm_connect: private data over 92 bytes, or an MTU, GID index, retry count or timeout out of range");
    return;
  }
  QueuePair* qp = process_qp(c, r.qpn);
  if (qp == nullptr) {
    fail(reply, EINVAL, "no QP " + std::to_string(r.qpn) + " of this process");
    return;
  }
  std::string why;
  std::uint32_t comm_id = 0;
  if (const int e = cm_->connect(c.id, r.program_qp != 0 ? nullptr : qp, r, comm_id, why); e != 0) {
    fail(reply, e, why);
    return;
  }
  reply.handle = comm_id;
}

void Server::op_cm_accept(Client& c, const service::Request& req, const int*, int, service::Reply& reply,
                          std::vector<int>&) {
  const service::CmAccept& r = req.cm_accept;
  if (r.private_data_len > sizeof r.private_data || r.rnr_retry_count > 7 ||
      (r.timeout > 31 && r.timeout != cm::kTimeoutOfReq)) {
    fail(reply, EINVAL,
         "cm_accept: private data over 196 bytes, an RNR retry count over 7 or a timeout over 31 (other than "
         "0xff, the REQ's)");
    return;
  }
  QueuePair* qp = process_qp(c, r.qpn);
  if (qp == nullptr) {
    fail(reply, EINVAL, "no QP " + std::to_string(r.qpn) + " of this process");
    return;
  }
  std::string why;
  if (const int e = cm_->accept(c.id, r.program_qp != 0 ? nullptr : qp, r, why); e != 0) fail(reply, e, why);
}

void Server::op_cm_init_qp_attr(Client& c, const service::Request& req, const int*, int, service::Reply& reply,
                                std::vector<int>&) {
  std::string why;
  reply.cm_init_qp_attr = service::CmInitQpAttrReply{};  // the reply's union was a HelloReply until now
  if (const int e = cm_->init_qp_attr(c.id, req.cm_init_qp_attr, reply.cm_init_qp_attr, why); e != 0) {
    fail(reply, e, why);
  }
}

void Server::op_cm_establish(Client& c, const service::Request& req, const int*, int, service::Reply& reply,
                             std::vector<int>&) {
  std::string why;
  if (const int e = cm_->establish(c.id, req.handle, why); e != 0) fail(reply, e, why);
}

void Server::op_cm_reject(Client& c, const service::Request& req, const int*, int, service::Reply& reply,
                          std::vector<int>&) {
  if (req.cm_reject.private_data_len > sizeof req.cm_reject.private_data) {
    fail(reply, EINVAL, "cm_reject: private data over 148 bytes");
    return;
  }
  std::string why;
  if (const int e = cm_->reject(c.id, req.cm_reject, why); e != 0) fail(reply, e, why);
}

void Server::op_cm_disconnect(Client& c, const service::Request& req, const int*, int, service::Reply& reply,
                              std::vector<int>&) {
  std::string why;
  if (const int e = cm_->disconnect(c.id, req.handle, why); e != 0) fail(reply, e, why);
}

void Server::op_cm_sidr_request(Client& c, const service::Request& req, const int*, int, service::Reply& reply,
                                std::vector<int>&) {
  const service::CmSidrRequest& r = req.cm_sidr_request;
  if (r.private_data_len > sizeof r.private_data) {
    fail(reply, EINVAL, "cm_sidr_request: private data over 216 bytes");
    return;
  }
  std::string why;
  std::uint32_t request_id = 0;
  if (const int e = cm_->sidr_request(c.id, r, request_id, why); e != 0) {
    fail(reply, e, why);
    return;
  }
  reply.handle = request_id;
}

void Server::op_cm_event(Client& c, const service::Request&, const int*, int, service::Reply& reply,
                         std::vector<int>&) {
  std::string why;
  reply.cm_event = service::CmEvent{};  // the reply's union was a HelloReply until now
  if (const int e = cm_->next_event(c.id, reply.cm_event, why); e != 0) fail(reply, e, why);
}

}  // namespace uroce::daemon
