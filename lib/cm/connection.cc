// The connection protocol of the CM (IBTA 12.6-12.9): REQ, REP, RTU, REJ,
// MRA, DREQ and DREP as they arrive, and the QP moves each makes.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "cm/manager_impl.h"

namespace uroce::cm {

int Manager::Impl::to_init(QueuePair* qp) {
  if (qp == nullptr) return EINVAL;
  if (qp->state() == IBV_QPS_INIT) return 0;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = kAllAccess;
  return modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int Manager::Impl::rtr_rts_attr(const Conn& c, ibv_qp_state state, ibv_qp_attr& a) {
  a = ibv_qp_attr{};
  a.qp_state = state;
  if (state == IBV_QPS_RTR) {
    a.path_mtu = static_cast<ibv_mtu>(c.mtu);
    a.dest_qp_num = c.peer_qpn;
    a.rq_psn = c.rq_psn;
    a.max_dest_rd_atomic = c.responder;
    a.min_rnr_timer = kMinRnrTimer;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.dgid = to_gid(c.dgid);
    a.ah_attr.grh.sgid_index = c.sgid_index;
    a.ah_attr.grh.hop_limit = 64;
    return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  a.sq_psn = c.sq_psn;
  a.timeout = c.timeout;
  a.retry_cnt = c.retry;
  a.rnr_retry = c.rnr_retry;
  a.max_rd_atomic = c.initiator;
  return IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
         IBV_QP_MAX_QP_RD_ATOMIC;
}

int Manager::Impl::to_rtr(QueuePair* qp, const Conn& c) {
  if (qp == nullptr) return EINVAL;
  if (c.ece) {
    if (ece_fn != nullptr) {
      if (const int rc = ece_fn(ece_arg, qp, c.ece_vendor_id, c.ece_options); rc != 0) return rc;
    } else {
      // The agreement decides selective repeat; without it, one path.
      TransportOptions t = qp->transport_options();
      t.selective_repeat = (c.ece_options & kEceSelectiveRepeat) != 0;
      if (!t.selective_repeat) t.spray_paths = 1;
      const TransportOptions now = qp->transport_options();
      if (t.selective_repeat != now.selective_repeat || t.spray_paths != now.spray_paths) {
        if (const int rc = qp->set_transport_options(t); rc != 0) return rc;
      }
    }
  }
  ibv_qp_attr a;
  const int mask = rtr_rts_attr(c, IBV_QPS_RTR, a);
  return modify(qp, a, mask);
}

int Manager::Impl::to_rts(QueuePair* qp, const Conn& c) {
  if (qp == nullptr) return EINVAL;
  ibv_qp_attr a;
  const int mask = rtr_rts_attr(c, IBV_QPS_RTS, a);
  return modify(qp, a, mask);
}

std::uint8_t Manager::Impl::sgid_index_of(const Gid& g) const {
  for (std::uint8_t index = 0; index < 2; ++index) {
    ibv_gid ours{};
    if (ctx->query_gid(index, ours) == 0 && gid_bytes(ours) == g) return index;
  }
  return 0;
}

void Manager::Impl::send_rep_mra(const Conn& c) {
  wire::CmMad m = header_for(wire::CmAttr::kMra, c.tid);
  m.mra.local_comm_id = c.local_id;
  m.mra.remote_comm_id = c.remote_id;
  m.mra.mraed = wire::CmMsgKind::kRep;
  m.mra.service_timeout = kCmResponseTimeout;
  send_once(c.peer, m);
}

void Manager::Impl::to_err(QueuePair* qp) {
  if (qp == nullptr) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  modify(qp, a, IBV_QP_STATE);
}

void Manager::Impl::reject(const Gid& peer, std::uint64_t tid, std::uint32_t local_id, std::uint32_t remote_id,
                           wire::CmMsgKind what, wire::RejReason reason, const std::vector<std::uint8_t>& private_data) {
  wire::CmMad m = header_for(wire::CmAttr::kRej, tid);
  m.rej.local_comm_id = local_id;
  m.rej.remote_comm_id = remote_id;
  m.rej.rejected = what;
  m.rej.reason = static_cast<std::uint16_t>(reason);
  std::copy_n(private_data.begin(), std::min(private_data.size(), m.rej.private_data.size()),
              m.rej.private_data.begin());
  send_once(peer, m);
}

void Manager::Impl::on_req(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
  const wire::CmReq& req = m.req;
  if (Conn* c = find_remote(req.local_comm_id, peer)) {
    // The REQ again: our REP was lost (resend it) or is still to come.
    ++counters.duplicates;
    if (c->state == State::kRepSent || c->state == State::kEstablished) send(peer, c->last);
    return;
  }
  const auto l = listeners.find(req.service_id);
  if (l == listeners.end()) {
    if (!unsolicited_reply_allowed()) return;
    ++counters.rej_sent_no_service;
    reject(peer, m.header.tid, 0, req.local_comm_id, wire::CmMsgKind::kReq, wire::RejReason::kInvalidServiceId);
    return;
  }
  if (req.transport != 0) {  // RC only
    reject(peer, m.header.tid, 0, req.local_comm_id, wire::CmMsgKind::kReq, wire::RejReason::kInvalidTransportType);
    return;
  }
  // Requests are state any peer makes: bounded per listener (its backlog)
  // and overall. "No resources" (IBTA 12.6.7, table 103, reason 3): the peer
  // may try again later.
  Listener& listener = l->second;
  if (listener.pending >= listener.backlog || pending_requests >= timing.max_pending_requests) {
    ++(listener.pending >= listener.backlog ? counters.req_refused_backlog : counters.req_refused_full);
    reject(peer, m.header.tid, 0, req.local_comm_id, wire::CmMsgKind::kReq, wire::RejReason::kNoResources);
    return;
  }
  Conn c;
  c.state = State::kReqRcvd;
  c.local_id = new_comm_id();
  c.remote_id = req.local_comm_id;
  c.tid = m.header.tid;
  c.peer = peer;
  c.req = req;
  c.req_ece_options = m.header.attr_modifier;
  c.peer_qpn = req.local_qpn;
  // Until accept(): the REQ's values in our terms (Linux's cm_req_handler),
  // and the PSN our REP will carry, so the program can move a QP of its
  // own before it accepts.
  c.qp_path = true;
  c.dgid = req.primary.local_gid;
  c.sgid_index = sgid_index_of(req.primary.remote_gid);
  c.mtu = req.path_mtu;
  c.rq_psn = new_psn();
  c.sq_psn = req.starting_psn;
  c.responder = req.initiator_depth;
  c.initiator = req.responder_resources;
  c.retry = req.retry_count;
  c.rnr_retry = req.rnr_retry_count;
  c.timeout = req_ack_timeout(req);
  c.listen_service = req.service_id;
  c.listen_generation = listener.generation;
  ++listener.pending;
  ++pending_requests;
  Event e;
  e.type = EventType::kRequest;
  e.comm_id = c.local_id;
  e.listener = listener.owner;
  e.req = req;
  e.peer_gid = to_gid(peer);
  e.ece_vendor_id = req.vendor_id;
  e.ece_options = req.vendor_id != 0 ? m.header.attr_modifier : 0;
  // The consumer's private data: behind rdma_cm's header on its services.
  std::size_t skip = 0;
  if (wire::rdma_cm_service(req.service_id) && wire::decode_rdma_cm_header(req.private_data)) {
    skip = wire::kRdmaCmHeaderBytes;
  }
  e.private_data.assign(req.private_data.begin() + static_cast<std::ptrdiff_t>(skip), req.private_data.end());
  hold_request(std::move(c), std::move(e), events);
}

void Manager::Impl::on_rep(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
  const wire::CmRep& rep = m.rep;
  Conn* c = find(rep.remote_comm_id);
  if (c == nullptr || c->peer != peer) {
    // A REP for no connection of ours: REJ invalid comm ID (IBTA 12.9.8.x).
    if (!unsolicited_reply_allowed()) return;
    ++counters.rej_sent_unknown_conn;
    reject(peer, m.header.tid, rep.remote_comm_id, rep.local_comm_id, wire::CmMsgKind::kRep,
           wire::RejReason::kInvalidCommId);
    return;
  }
  if (c->state == State::kEstablished) {
    ++counters.duplicates;  // our RTU was lost: send it again
    send_rtu(*c);
    return;
  }
  if (c->state == State::kRepRcvd) {
    ++counters.duplicates;  // the program is still moving its QP: ask for more time again
    send_rep_mra(*c);
    return;
  }
  if (c->state != State::kReqSent) return;
  c->remote_id = rep.local_comm_id;
  index_remote(*c);
  c->peer_qpn = rep.local_qpn;
  const ConnectParams& p = c->params;
  // Each side's starting PSN is the one the other sends from: ours (the
  // REQ's) is what we receive, the REP's what we send (IBTA 12.6.5 and
  // 12.6.8; Linux's CM and Soft-RoCE in rping.pcap do the same).
  c->qp_path = true;
  c->dgid = c->peer;
  c->mtu = c->req.path_mtu;
  c->rq_psn = c->req.starting_psn;
  c->sq_psn = rep.starting_psn;
  c->responder = std::min(p.responder_resources, rep.initiator_depth);
  c->initiator = std::min(p.initiator_depth, rep.responder_resources);
  c->timeout = p.timeout;
  c->retry = p.retry_count;
  c->rnr_retry = rep.rnr_retry_count;
  // ECE: what we offered that the REP, of the same vendor, agrees to.
  const std::uint32_t rep_vendor = wire::rep_vendor_id(rep);
  const std::uint32_t rep_options = rep_vendor != 0 ? m.header.attr_modifier : 0;
  c->ece = p.ece_vendor_id != 0;
  c->ece_vendor_id = p.ece_vendor_id;
  c->ece_options = rep_vendor == p.ece_vendor_id ? p.ece_options & rep_options : 0;
  Event e;
  e.comm_id = c->local_id;
  e.rep = rep;
  e.active = true;
  e.ece_vendor_id = rep_vendor;
  e.ece_options = rep_options;
  e.private_data.assign(rep.private_data.begin(), rep.private_data.end());
  if (c->program_qp) {
    // The program's own QP: it moves it (qp_attr), then establish().
    c->state = State::kRepRcvd;
    arm(*c, now() + timing.request_ns);  // establish() within that, or REJ timeout
    send_rep_mra(*c);
    e.type = EventType::kConnectResponse;
    events.push_back(std::move(e));
    return;
  }
  if (to_rtr(c->qp, *c) != 0 || to_rts(c->qp, *c) != 0) {
    reject(peer, c->tid, c->local_id, c->remote_id, wire::CmMsgKind::kRep, wire::RejReason::kNoResources);
    Event r;
    r.type = EventType::kRejected;
    r.comm_id = c->local_id;
    r.reason = static_cast<std::uint16_t>(wire::RejReason::kNoResources);
    erase_conn(c->local_id);
    events.push_back(std::move(r));
    return;
  }
  send_rtu(*c);
  c->state = State::kEstablished;
  disarm(*c);
  e.type = EventType::kEstablished;
  events.push_back(std::move(e));
}

void Manager::Impl::send_rtu(const Conn& c) {
  wire::CmMad rtu = header_for(wire::CmAttr::kRtu, c.tid);
  rtu.rtu.local_comm_id = c.local_id;
  rtu.rtu.remote_comm_id = c.remote_id;
  send_once(c.peer, rtu);
}

void Manager::Impl::on_rtu(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
  Conn* c = find(m.rtu.remote_comm_id);
  if (c == nullptr || c->peer != peer || c->remote_id != m.rtu.local_comm_id) {
    ++counters.unknown_conn_dropped;
    return;
  }
  if (c->state != State::kRepSent) return;  // a duplicate RTU
  c->state = State::kEstablished;
  disarm(*c);
  Event e;
  e.type = EventType::kEstablished;
  e.comm_id = c->local_id;
  events.push_back(std::move(e));
}

void Manager::Impl::on_rej(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
  Conn* c = find(m.rej.remote_comm_id);
  // kReqRcvd: the peer withdraws a request not answered yet (its REQ
  // timed out): it stops counting against the backlog at once.
  const bool withdrawn = c != nullptr && c->state == State::kReqRcvd && c->remote_id == m.rej.local_comm_id;
  if (c == nullptr || c->peer != peer ||
      (c->state != State::kReqSent && c->state != State::kRepSent && c->state != State::kRepRcvd && !withdrawn)) {
    ++counters.unknown_conn_dropped;
    return;
  }
  if (c->state == State::kReqSent && m.rej.reason == static_cast<std::uint16_t>(wire::RejReason::kInvalidServiceId) &&
      c->no_service_retries < timing.no_service_retries) {
    // Perhaps not listening *yet*: the resend timer sends the REQ again.
    ++c->no_service_retries;
    ++counters.req_retried_no_service;
    c->sent_at = now();
    c->wait_ns = timing.no_service_wait_ns;
    arm(*c, c->sent_at + c->wait_ns);
    return;
  }
  Event e;
  e.type = EventType::kRejected;
  e.comm_id = c->local_id;
  e.reason = m.rej.reason;
  e.private_data.assign(m.rej.private_data.begin(), m.rej.private_data.end());
  if (!c->active) to_err(c->qp);
  erase_conn(c->local_id);
  events.push_back(std::move(e));
}

void Manager::Impl::on_mra(const wire::CmMad& m, const Gid& peer) {
  Conn* c = find(m.mra.remote_comm_id);
  if (c == nullptr || c->peer != peer) {
    ++counters.unknown_conn_dropped;
    return;
  }
  // The peer needs longer: wait its service timeout (4.096 us * 2^t) on top.
  c->wait_ns = timing.resend_ns + (4096ull << std::min<std::uint8_t>(m.mra.service_timeout, 31));
  const bool resending = c->state != State::kReqRcvd && c->state != State::kRepRcvd;
  if (resending && c->due != 0) arm(*c, c->sent_at + c->wait_ns);
}

void Manager::Impl::on_dreq(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
  wire::CmMad drep = header_for(wire::CmAttr::kDrep, m.header.tid);
  drep.rtu.local_comm_id = m.dreq.remote_comm_id;
  drep.rtu.remote_comm_id = m.dreq.local_comm_id;
  Conn* c = find(m.dreq.remote_comm_id);
  if (c == nullptr || c->peer != peer || c->remote_id != m.dreq.local_comm_id || sidr(c->state)) {
    // Gone already (or never ours): a DREP all the same, so the peer
    // stops asking (IBTA 12.9.8.x).
    if (!unsolicited_reply_allowed()) return;
    ++counters.drep_sent_unknown_conn;
    send_once(peer, drep);
    return;
  }
  send_once(peer, drep);
  to_err(c->qp);
  Event e;
  e.type = EventType::kDisconnected;
  e.comm_id = c->local_id;
  e.private_data.assign(m.dreq.private_data.begin(), m.dreq.private_data.end());
  erase_conn(c->local_id);
  events.push_back(std::move(e));
}

void Manager::Impl::on_drep(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
  Conn* c = find(m.rtu.remote_comm_id);
  if (c == nullptr || c->peer != peer || c->state != State::kDreqSent) {
    ++counters.unknown_conn_dropped;
    return;
  }
  Event e;
  e.type = EventType::kDisconnected;
  e.comm_id = c->local_id;
  erase_conn(c->local_id);
  events.push_back(std::move(e));
}

}  // namespace uroce::cm
