// Service ID Resolution (IBTA 12.11): a UD QP's number and Q_Key for a
// service ID, asked with a SIDR_REQ and answered with a SIDR_REP; no
// connection is made. A request sent is resent until answered; one
// received waits for the owner's accept() or reject(), and the answer is
// kept a while for a duplicate request whose sender missed it.
#include <algorithm>
#include <cerrno>
#include <utility>

#include "cm/manager_impl.h"

namespace uroce::cm {

void Manager::Impl::sidr_reply(const Gid& peer, std::uint64_t tid, std::uint32_t request_id, std::uint64_t service_id,
                               wire::SidrStatus status, std::array<std::uint8_t, wire::kMadBytes>* keep,
                               std::uint32_t qpn, std::uint32_t qkey, const std::vector<std::uint8_t>& private_data) {
  wire::CmMad m = header_for(wire::CmAttr::kSidrRep, tid);
  m.sidr_rep.request_id = request_id;
  m.sidr_rep.status = static_cast<std::uint8_t>(status);
  m.sidr_rep.service_id = service_id;
  if (status == wire::SidrStatus::kOk) {
    m.sidr_rep.qpn = qpn;
    m.sidr_rep.qkey = qkey;
  }
  std::copy_n(private_data.begin(), std::min(private_data.size(), m.sidr_rep.private_data.size()),
              m.sidr_rep.private_data.begin());
  std::array<std::uint8_t, wire::kMadBytes> bytes{};
  wire::encode_cm_mad(m, bytes);
  if (keep != nullptr) *keep = bytes;
  send(peer, bytes);
}

void Manager::Impl::keep_sidr_answer(Conn& c) {
  leave_req_rcvd(c);
  c.state = State::kSidrRepSent;
  arm(c, now() + timing.resend_ns * static_cast<std::uint64_t>(timing.max_resends + 1));
}

void Manager::Impl::on_sidr_req(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
  const wire::CmSidrReq& req = m.sidr_req;
  if (Conn* c = find_remote(req.request_id, peer)) {
    // Again: our answer was lost (send it again) or is still to come.
    ++counters.duplicates;
    if (c->state == State::kSidrRepSent) send(peer, c->last);
    return;
  }
  // rdma_cm's connected port spaces (TCP, IB) are not resolved by SIDR.
  const auto rdma_cm = wire::rdma_cm_service(req.service_id);
  const bool datagram = !rdma_cm || rdma_cm->ps == wire::kRdmaPsUdp || rdma_cm->ps == wire::kRdmaPsIpoib;
  const auto l = datagram ? listeners.find(req.service_id) : listeners.end();
  if (l == listeners.end()) {
    if (!unsolicited_reply_allowed()) return;
    ++counters.sidr_rep_sent_no_service;
    sidr_reply(peer, m.header.tid, req.request_id, req.service_id, wire::SidrStatus::kUnsupportedServiceId);
    return;
  }
  Listener& listener = l->second;
  if (listener.pending >= listener.backlog || pending_requests >= timing.max_pending_requests) {
    ++counters.sidr_req_refused;
    sidr_reply(peer, m.header.tid, req.request_id, req.service_id, wire::SidrStatus::kNoQp);
    return;
  }
  Conn c;
  c.state = State::kSidrReqRcvd;
  c.local_id = new_comm_id();
  c.remote_id = req.request_id;
  c.tid = m.header.tid;
  c.peer = peer;
  c.req.service_id = req.service_id;
  c.listen_service = req.service_id;
  c.listen_generation = listener.generation;
  ++listener.pending;
  ++pending_requests;
  Event e;
  e.type = EventType::kRequest;
  e.sidr = true;
  e.comm_id = c.local_id;
  e.listener = listener.owner;
  e.req.service_id = req.service_id;
  std::copy_n(req.private_data.begin(), e.req.private_data.size(), e.req.private_data.begin());
  e.peer_gid = to_gid(peer);
  std::size_t skip = 0;
  if (rdma_cm && wire::decode_rdma_cm_header(req.private_data)) skip = wire::kRdmaCmHeaderBytes;
  e.private_data.assign(req.private_data.begin() + static_cast<std::ptrdiff_t>(skip), req.private_data.end());
  hold_request(std::move(c), std::move(e), events);
}

void Manager::Impl::on_sidr_rep(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
  const wire::CmSidrRep& rep = m.sidr_rep;
  Conn* c = find(rep.request_id);
  if (c == nullptr || c->peer != peer || c->state != State::kSidrReqSent) {
    ++counters.unknown_conn_dropped;  // a late duplicate, or never ours
    return;
  }
  if (rep.status == static_cast<std::uint8_t>(wire::SidrStatus::kUnsupportedServiceId) &&
      c->no_service_retries < timing.no_service_retries) {
    // Perhaps not listening *yet*, as for a REJ "invalid service ID".
    ++c->no_service_retries;
    ++counters.req_retried_no_service;
    c->sent_at = now();
    c->wait_ns = timing.no_service_wait_ns;
    arm(*c, c->sent_at + c->wait_ns);
    return;
  }
  Event e;
  e.sidr = true;
  e.comm_id = c->local_id;
  e.peer_gid = to_gid(peer);
  e.private_data.assign(rep.private_data.begin(), rep.private_data.end());
  if (rep.status == static_cast<std::uint8_t>(wire::SidrStatus::kOk)) {
    e.type = EventType::kEstablished;
    e.active = true;
    e.rep.local_qpn = rep.qpn;
    e.rep.local_qkey = rep.qkey;
  } else {
    e.type = EventType::kUnreachable;
    e.reason = rep.status;
  }
  erase_conn(c->local_id);
  events.push_back(std::move(e));
}

int Manager::sidr_request(const SidrParams& p, std::uint32_t& request_id) {
  Impl& i = *impl_;
  if (p.private_data.size() > wire::kSidrReqPrivateBytes) return EINVAL;
  Impl::Conn c;
  c.state = Impl::State::kSidrReqSent;
  c.active = true;
  c.local_id = i.new_comm_id();
  c.tid = std::uint64_t{++i.tid_counter} | std::uint64_t{c.local_id} << 32;
  c.peer = gid_bytes(p.remote_gid);
  c.req.service_id = p.service_id;
  wire::CmMad m = i.header_for(wire::CmAttr::kSidrReq, c.tid);
  m.sidr_req.request_id = c.local_id;
  m.sidr_req.service_id = p.service_id;
  std::copy(p.private_data.begin(), p.private_data.end(), m.sidr_req.private_data.begin());
  request_id = c.local_id;
  auto [it, inserted] = i.conns.emplace(c.local_id, std::move(c));
  (void)inserted;
  i.send_tracked(it->second, m);
  return 0;
}

}  // namespace uroce::cm
