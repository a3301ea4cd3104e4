#include "rdmacm/cm_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "rdmacm/internal.h"

namespace uroce::rdmacm {

std::unique_ptr<ServiceCm> ServiceCm::open(const std::string& socket, std::string& error) {
  std::unique_ptr<ServiceCm> cm(new ServiceCm());
  cm->client_ = service::Client::connect(socket, error);
  if (!cm->client_) return nullptr;
  service::Request req;
  req.op = service::Op::kCmOpen;
  service::Reply reply;
  std::vector<int> fds;
  std::string why;
  if (const int e = cm->client_->call(req, reply, nullptr, 0, &fds, why); e != 0 || fds.size() != 1) {
    for (int fd : fds) close(fd);
    error = "uroced's CM: " + (e != 0 ? why : std::string("no eventfd in its reply"));
    return nullptr;
  }
  cm->event_fd_ = fds[0];
  return cm;
}

ServiceCm::~ServiceCm() {
  if (event_fd_ >= 0) close(event_fd_);
}

int ServiceCm::call(service::Request& req, service::Reply& reply, const char* what) {
  std::string why;
  const int e = client_->call(req, reply, nullptr, 0, nullptr, why);
  if (e != 0 && debug()) std::fprintf(stderr, "uroce librdmacm: uroced %s: %s\n", what, why.c_str());
  return e;
}

void ServiceCm::refresh(std::uint32_t comm_id, bool ended) {
  auto it = qps_.find(comm_id);
  if (it == qps_.end()) return;
  if (refresh_ != nullptr) refresh_(refresh_arg_, it->second);
  if (ended) qps_.erase(it);
}

int ServiceCm::listen(std::uint64_t service_id, void* owner, std::uint32_t backlog) {
  service::Request req;
  req.op = service::Op::kCmListen;
  req.cm_listen = service::CmListen{service_id, backlog};
  service::Reply reply;
  if (const int e = call(req, reply, "listen"); e != 0) return e;
  owners_[service_id] = owner;
  return 0;
}

int ServiceCm::unlisten(std::uint64_t service_id) {
  service::Request req;
  req.op = service::Op::kCmUnlisten;
  req.cm_listen = service::CmListen{service_id, 0};
  service::Reply reply;
  owners_.erase(service_id);
  return call(req, reply, "unlisten");
}

int ServiceCm::connect(const cm::ConnectParams& p, std::uint32_t& comm_id) {
  if ((p.qp == nullptr && p.qpn == 0) || p.private_data.size() > sizeof(service::CmConnect::private_data)) {
    return EINVAL;
  }
  service::Request req;
  req.op = service::Op::kCmConnect;
  service::CmConnect& r = req.cm_connect;
  r = service::CmConnect{};
  // The program's own QP (no p.qp): the daemon names it and never moves it.
  r.qpn = p.qp != nullptr ? p.qp->qp_num() : p.qpn;
  r.program_qp = p.qp == nullptr ? 1 : 0;
  r.srq = p.srq ? 1 : 0;
  r.remote_gid = p.remote_gid;
  r.service_id = p.service_id;
  r.mtu = static_cast<std::uint32_t>(p.mtu);
  r.sgid_index = p.sgid_index;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.retry_count = p.retry_count;
  r.rnr_retry_count = p.rnr_retry_count;
  r.timeout = p.timeout;
  r.private_data_len = static_cast<std::uint8_t>(p.private_data.size());
  std::copy(p.private_data.begin(), p.private_data.end(), r.private_data);
  r.ece_vendor_id = p.ece_vendor_id;
  r.ece_options = p.ece_options;
  service::Reply reply;
  if (const int e = call(req, reply, "connect"); e != 0) return e;
  comm_id = reply.handle;
  if (p.qp != nullptr) {
    qps_[comm_id] = p.qp;
    refresh(comm_id, false);  // INIT
  }
  return 0;
}

int ServiceCm::accept(std::uint32_t comm_id, const cm::AcceptParams& p) {
  if ((p.qp == nullptr && p.qpn == 0) || p.private_data.size() > sizeof(service::CmAccept::private_data)) {
    return EINVAL;
  }
  service::Request req;
  req.op = service::Op::kCmAccept;
  service::CmAccept& r = req.cm_accept;
  r = service::CmAccept{};
  r.comm_id = comm_id;
  r.qpn = p.qp != nullptr ? p.qp->qp_num() : p.qpn;
  r.program_qp = p.qp == nullptr ? 1 : 0;
  r.srq = p.srq ? 1 : 0;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.rnr_retry_count = p.rnr_retry_count;
  r.timeout = p.timeout;
  r.private_data_len = static_cast<std::uint8_t>(p.private_data.size());
  std::copy(p.private_data.begin(), p.private_data.end(), r.private_data);
  r.ece_vendor_id = p.ece_vendor_id;
  r.ece_options = p.ece_options;
  service::Reply reply;
  if (const int e = call(req, reply, "accept"); e != 0) return e;
  if (sidr_requests_.erase(comm_id) != 0) return 0;  // a UD QP, left as it was
  if (p.qp != nullptr) {
    qps_[comm_id] = p.qp;
    refresh(comm_id, false);  // RTS, as the REP left
  }
  return 0;
}

int ServiceCm::qp_attr(std::uint32_t comm_id, ibv_qp_state state, ibv_qp_attr& attr, int& mask) {
  service::Request req;
  req.op = service::Op::kCmInitQpAttr;
  req.cm_init_qp_attr = service::CmInitQpAttr{comm_id, static_cast<std::uint32_t>(state)};
  service::Reply reply;
  if (const int e = call(req, reply, "init_qp_attr"); e != 0) return e;
  attr = reply.cm_init_qp_attr.attr;
  mask = reply.cm_init_qp_attr.mask;
  return 0;
}

int ServiceCm::establish(std::uint32_t comm_id) {
  service::Request req;
  req.op = service::Op::kCmEstablish;
  req.handle = comm_id;
  service::Reply reply;
  return call(req, reply, "establish");
}

int ServiceCm::reject(std::uint32_t comm_id, const std::vector<std::uint8_t>& private_data, wire::RejReason reason) {
  service::Request req;
  req.op = service::Op::kCmReject;
  service::CmReject& r = req.cm_reject;
  r = service::CmReject{};
  r.comm_id = comm_id;
  r.private_data_len = static_cast<std::uint8_t>(std::min(private_data.size(), sizeof r.private_data));
  std::copy_n(private_data.begin(), r.private_data_len, r.private_data);
  r.reason = static_cast<std::uint16_t>(reason);
  service::Reply reply;
  sidr_requests_.erase(comm_id);
  return call(req, reply, "reject");
}

int ServiceCm::sidr_request(const cm::SidrParams& p, std::uint32_t& request_id) {
  if (p.private_data.size() > sizeof(service::CmSidrRequest::private_data)) return EINVAL;
  service::Request req;
  req.op = service::Op::kCmSidrRequest;
  service::CmSidrRequest& r = req.cm_sidr_request;
  r = service::CmSidrRequest{};
  r.remote_gid = p.remote_gid;
  r.service_id = p.service_id;
  r.private_data_len = static_cast<std::uint8_t>(p.private_data.size());
  std::copy(p.private_data.begin(), p.private_data.end(), r.private_data);
  service::Reply reply;
  if (const int e = call(req, reply, "sidr_request"); e != 0) return e;
  request_id = reply.handle;
  return 0;
}

int ServiceCm::disconnect(std::uint32_t comm_id) {
  service::Request req;
  req.op = service::Op::kCmDisconnect;
  req.handle = comm_id;
  service::Reply reply;
  if (const int e = call(req, reply, "disconnect"); e != 0) return e;
  // ERR now: the DISCONNECTED that follows needs no second look.
  refresh(comm_id, true);
  return 0;
}

void ServiceCm::forget_qp(QueuePair* qp) {
  // The daemon forgets it as the QP is destroyed there.
  for (auto it = qps_.begin(); it != qps_.end();) it = it->second == qp ? qps_.erase(it) : std::next(it);
}

std::size_t ServiceCm::poll(std::vector<cm::Event>& events) {
  std::uint64_t signalled = 0;
  if (read(event_fd_, &signalled, sizeof signalled) != static_cast<ssize_t>(sizeof signalled)) return 0;
  const std::size_t before = events.size();
  for (;;) {
    service::Request req;
    req.op = service::Op::kCmEvent;
    service::Reply reply;
    std::string why;
    if (client_->call(req, reply, nullptr, 0, nullptr, why) != 0) break;  // ENOENT: none left
    const service::CmEvent& in = reply.cm_event;
    cm::Event e;
    e.type = static_cast<cm::EventType>(in.type);
    e.comm_id = in.comm_id;
    e.peer_gid = in.peer_gid;
    e.reason = in.reason;
    e.active = in.active != 0;
    e.sidr = in.sidr != 0;
    e.ece_vendor_id = in.ece_vendor_id;
    e.ece_options = in.ece_options;
    e.private_data.assign(in.private_data, in.private_data + std::min<std::size_t>(in.private_data_len, sizeof in.private_data));
    if (e.type == cm::EventType::kRequest) {
      auto owner = owners_.find(in.service_id);
      if (owner == owners_.end()) {
        reject(in.comm_id, {});  // listened on no more
      } else {
        e.listener = owner->second;
        e.req.responder_resources = in.responder_resources;
        e.req.initiator_depth = in.initiator_depth;
        e.req.end_to_end_flow_control = in.flow_control != 0;
        e.req.retry_count = in.retry_count;
        e.req.rnr_retry_count = in.rnr_retry_count;
        e.req.srq = in.srq != 0;
        e.req.local_qpn = in.qpn;
        e.req.service_id = in.service_id;
        std::copy(std::begin(in.req_private_data), std::end(in.req_private_data), e.req.private_data.begin());
        if (e.sidr) sidr_requests_.insert(e.comm_id);
        events.push_back(std::move(e));
      }
    } else {
      const bool goes_on = e.type == cm::EventType::kEstablished || e.type == cm::EventType::kConnectResponse;
      if (goes_on && e.active) {
        e.rep.responder_resources = in.responder_resources;
        e.rep.initiator_depth = in.initiator_depth;
        e.rep.end_to_end_flow_control = in.flow_control != 0;
        e.rep.rnr_retry_count = in.rnr_retry_count;
        e.rep.srq = in.srq != 0;
        e.rep.local_qpn = in.qpn;
        e.rep.local_qkey = in.qkey;
        std::copy_n(in.private_data, std::min(e.private_data.size(), e.rep.private_data.size()), e.rep.private_data.begin());
      }
      if (e.type != cm::EventType::kEstablished) sidr_requests_.erase(e.comm_id);  // one that timed out
      // The daemon moved the QP (RTS, or ERR): the library sees it before the program does.
      refresh(e.comm_id, !goes_on);
      events.push_back(std::move(e));
    }
    if (in.remaining == 0) break;
  }
  return events.size() - before;
}

}  // namespace uroce::rdmacm
