#include "cm/manager.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <utility>

#include "cm/manager_impl.h"

namespace uroce::cm {

const char* event_name(EventType t) {
  switch (t) {
    case EventType::kRequest: return "connect request";
    case EventType::kEstablished: return "established";
    case EventType::kRejected: return "rejected";
    case EventType::kUnreachable: return "unreachable";
    case EventType::kDisconnected: return "disconnected";
    case EventType::kConnectResponse: return "connect response";
  }
  return "unknown";
}

int Manager::Impl::post_recv(std::uint32_t i) {
  ibv_sge sge{reinterpret_cast<std::uint64_t>(recv_slot(i)), kRecvBytes, mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = i;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return qp1->post_recv(&wr, &bad);
}

bool Manager::Impl::peer_in_use(const Gid& peer) const {
  for (const auto& [id, c] : conns) {
    if (c.peer == peer) return true;
  }
  return false;
}

void Manager::Impl::evict_ah() {
  auto victim = std::prev(ah_lru.end());
  auto cand = victim;
  for (int k = 0; k < 8; ++k) {
    if (!peer_in_use(*cand)) {
      victim = cand;
      break;
    }
    if (cand == ah_lru.begin()) break;
    --cand;
  }
  const auto it = ahs.find(*victim);
  pd->destroy_ah(it->second.ah);
  ahs.erase(it);
  ah_lru.erase(victim);
  ++counters.ahs_evicted;
}

AddressHandle* Manager::Impl::ah_to(const Gid& peer) {
  if (auto it = ahs.find(peer); it != ahs.end()) {
    ah_lru.splice(ah_lru.begin(), ah_lru, it->second.lru);
    return it->second.ah;
  }
  ibv_ah_attr a{};
  a.is_global = 1;
  a.port_num = 1;
  a.grh.dgid = to_gid(peer);
  a.grh.sgid_index = is_ipv4_gid(a.grh.dgid) ? 1 : 0;
  a.grh.hop_limit = 64;
  if (ahs.size() >= kMaxAhs) evict_ah();
  AddressHandle* ah = pd->create_ah(a);
  if (ah == nullptr) return nullptr;
  ah_lru.push_front(peer);
  ahs.emplace(peer, CachedAh{ah, ah_lru.begin()});
  return ah;
}

bool Manager::Impl::post(const Gid& peer, const std::array<std::uint8_t, wire::kMadBytes>& mad) {
  AddressHandle* ah = ah_to(peer);
  if (ah == nullptr) return false;
  const std::uint32_t slot = next_send++ % kSlots;
  std::memcpy(send_slot(slot), mad.data(), mad.size());
  ibv_sge sge{reinterpret_cast<std::uint64_t>(send_slot(slot)), wire::kMadBytes, mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1000 + slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah->ibv();
  wr.wr.ud.remote_qpn = wire::kGsiQpn;
  wr.wr.ud.remote_qkey = wire::kGsiQkey;
  ibv_send_wr* bad = nullptr;
  if (qp1->post_send(&wr, &bad) != 0) return false;
  // Under caller progress nothing else may poll the engines soon (the
  // program may close its device right after rdma_disconnect): the helper
  // sends it now.
  ctx->hand_to_helper();
  ++counters.mads_sent;
  return true;
}

bool Manager::Impl::send(const Gid& peer, const std::array<std::uint8_t, wire::kMadBytes>& mad) {
  if (ahs.count(peer) == 0) {
    // Waiting on kMaxQueuedPeers already: a new one is sent to only if
    // its address is known (no resolution is started for it).
    const bool may_wait = held_peers.count(peer) != 0 || held_peers.size() < kMaxQueuedPeers;
    switch (may_wait ? ctx->resolve_gid(to_gid(peer)) : internal::lookup_gid(*ctx, to_gid(peer))) {
      case Reach::kKnown: break;
      case Reach::kPending: hold(peer, mad); return false;
      case Reach::kUnreachable: ++counters.mads_dropped_unreachable; return false;
    }
  }
  return post(peer, mad);
}

void Manager::Impl::hold(const Gid& peer, const std::array<std::uint8_t, wire::kMadBytes>& mad) {
  const auto it = held_peers.find(peer);
  const std::size_t for_peer = it == held_peers.end() ? 0 : it->second;
  if (held.size() >= kMaxQueued || for_peer >= kMaxQueuedPerPeer ||
      (for_peer == 0 && held_peers.size() >= kMaxQueuedPeers)) {
    ++counters.mads_dropped_queue_full;
    return;
  }
  held.push_back(Held{peer, mad, now() + kQueuedDeadlineNs});
  ++held_peers[peer];
  ++counters.mads_queued_unresolved;
}

void Manager::Impl::send_held() {
  if (held.empty()) return;
  const std::uint64_t t = now();
  // Each look asks the resolver once per held MAD: not at every poll (a
  // program's CM thread polls every 200 us).
  if (t - held_checked_at < 1'000'000) return;
  held_checked_at = t;
  for (auto it = held.begin(); it != held.end();) {
    const Reach r = ahs.count(it->peer) != 0 ? Reach::kKnown : ctx->resolve_gid(to_gid(it->peer));
    if (r == Reach::kPending && t < it->deadline) {
      ++it;
      continue;
    }
    if (r == Reach::kKnown) post(it->peer, it->mad);
    else ++(r == Reach::kUnreachable ? counters.mads_dropped_unreachable : counters.mads_dropped_unresolved);
    if (auto p = held_peers.find(it->peer); p != held_peers.end() && --p->second == 0) held_peers.erase(p);
    it = held.erase(it);
  }
}

bool Manager::Impl::unsolicited_reply_allowed() {
  const std::uint64_t t = now();
  reply_credit_ns = std::min(kUnsolicitedBurstNs, reply_credit_ns + (t - reply_credit_at));
  reply_credit_at = t;
  if (reply_credit_ns < kUnsolicitedReplyNs) {
    ++counters.unsolicited_replies_limited;
    return false;
  }
  reply_credit_ns -= kUnsolicitedReplyNs;
  return true;
}

wire::CmMad Manager::Impl::header_for(wire::CmAttr attr, std::uint64_t tid) {
  wire::CmMad m;
  m.header.tid = tid;
  m.header.attr_id = static_cast<std::uint16_t>(attr);
  return m;
}

void Manager::Impl::send_tracked(Conn& c, const wire::CmMad& m) {
  wire::encode_cm_mad(m, c.last);
  c.sent_at = c.first_sent_at = now();
  c.wait_ns = timing.resend_ns;
  c.resends = 0;
  arm(c, c.sent_at + c.wait_ns);
  send(c.peer, c.last);
}

void Manager::Impl::arm(Conn& c, std::uint64_t due) {
  disarm(c);
  c.due = due == 0 ? 1 : due;
  timers.emplace(c.due, c.local_id);
}

void Manager::Impl::disarm(Conn& c) {
  if (c.due != 0) timers.erase({c.due, c.local_id});
  c.due = 0;
}

void Manager::Impl::leave_req_rcvd(Conn& c) {
  if (c.state != State::kReqRcvd && c.state != State::kSidrReqRcvd) return;
  --pending_requests;
  auto l = listeners.find(c.listen_service);
  if (l != listeners.end() && l->second.generation == c.listen_generation) --l->second.pending;
  c.state = State::kRepSent;  // the caller sets the state that follows
}

void Manager::Impl::erase_conn(std::uint32_t local_id) {
  auto it = conns.find(local_id);
  if (it == conns.end()) return;
  Conn& c = it->second;
  leave_req_rcvd(c);
  disarm(c);
  if (auto r = by_remote.find({c.peer, c.remote_id}); r != by_remote.end() && r->second == local_id) {
    by_remote.erase(r);
  }
  conns.erase(it);
}

void Manager::Impl::send_once(const Gid& peer, const wire::CmMad& m) {
  std::array<std::uint8_t, wire::kMadBytes> bytes{};
  wire::encode_cm_mad(m, bytes);
  send(peer, bytes);
}

std::uint32_t Manager::Impl::random_u32() {
  std::uint32_t x = 0;
  internal::random_bytes(&x, sizeof x);
  return x;
}

std::uint32_t Manager::Impl::new_comm_id() {
  for (;;) {
    const std::uint32_t id = random_u32();
    if (id != 0 && !conns.count(id)) return id;
  }
}

bool Manager::Impl::is_ours(const Gid& g) const {
  for (int index = 0; index < 2; ++index) {
    ibv_gid ours{};
    if (ctx->query_gid(index, ours) == 0 && gid_bytes(ours) == g) return true;
  }
  return false;
}

void Manager::Impl::receive(const ibv_wc& wc, std::vector<Event>& events) {
  ++counters.mads_received;
  const std::uint8_t* slot = recv_slot(static_cast<std::uint32_t>(wc.wr_id));
  Gid peer{};
  // The sender's address from the GRH: IPv4 in its last 20 bytes, or IPv6.
  if (slot[20] == 0x45) {
    peer[10] = peer[11] = 0xff;
    std::memcpy(peer.data() + 12, slot + 32, 4);
  } else {
    std::memcpy(peer.data(), slot + 8, 16);
  }
  Gid dest{};
  if (slot[20] == 0x45) {
    dest[10] = dest[11] = 0xff;
    std::memcpy(dest.data() + 12, slot + 36, 4);
  } else {
    std::memcpy(dest.data(), slot + 24, 16);
  }
  if (!is_ours(dest)) {
    ++counters.mads_dropped_not_ours;
    return;
  }
  wire::CmMad m;
  const std::size_t len = wc.byte_len > 40 ? wc.byte_len - 40 : 0;
  if (wc.status != IBV_WC_SUCCESS || wire::decode_cm_mad(std::span(slot + 40, len), m) != wire::MadStatus::kOk) {
    ++counters.mads_refused;
    return;
  }
  switch (m.attr()) {
    case wire::CmAttr::kReq: on_req(m, peer, events); break;
    case wire::CmAttr::kRep: on_rep(m, peer, events); break;
    case wire::CmAttr::kRtu: on_rtu(m, peer, events); break;
    case wire::CmAttr::kRej: on_rej(m, peer, events); break;
    case wire::CmAttr::kMra: on_mra(m, peer); break;
    case wire::CmAttr::kDreq: on_dreq(m, peer, events); break;
    case wire::CmAttr::kDrep: on_drep(m, peer, events); break;
    case wire::CmAttr::kSidrReq: on_sidr_req(m, peer, events); break;
    case wire::CmAttr::kSidrRep: on_sidr_rep(m, peer, events); break;
    default: ++counters.mads_refused; break;
  }
}

void Manager::Impl::hold_request(Conn&& c, Event&& e, std::vector<Event>& events) {
  auto [it, inserted] = conns.emplace(c.local_id, std::move(c));
  (void)inserted;
  index_remote(it->second);
  // Unanswered, it goes after request_ns (REJ timeout, or gone for SIDR).
  arm(it->second, now() + timing.request_ns);
  events.push_back(std::move(e));
}

std::string Manager::Impl::why_unanswered(const Conn& c, std::uint64_t t) {
  char peer[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, c.peer.data(), peer, sizeof peer);
  const char* what = c.state == State::kReqSent ? "REQ" : c.state == State::kRepSent ? "REP" : "MAD";
  char head[160];
  std::snprintf(head, sizeof head, "the %s to %s went unanswered: sent %d times over %.1f s; ", what, peer,
                c.resends + 1, static_cast<double>(t - c.first_sent_at) / 1e9);
  std::string why = head;
  if (ahs.count(c.peer) != 0) {
    why += "the peer's Ethernet address was resolved, so they left, and its CM did not answer (nothing there, or a "
           "link losing every frame)";
  } else if (internal::lookup_gid(*ctx, to_gid(c.peer)) == Reach::kUnreachable) {
    why += "the peer's Ethernet address did not resolve (no answer to ARP/ND), so none of them left: is it up, on "
           "this link?";
  } else {
    why += "the peer's Ethernet address was never resolved, so none of them left";
  }
  return why;
}

void Manager::Impl::resend_overdue(std::vector<Event>& events) {
  const std::uint64_t t = now();
  while (!timers.empty() && timers.begin()->first <= t) {
    const std::uint32_t id = timers.begin()->second;
    timers.erase(timers.begin());
    Conn* c = find(id);
    if (c == nullptr) continue;
    c->due = 0;
    if (c->state == State::kSidrRepSent) {  // kept long enough for the peer's resends
      erase_conn(id);
      continue;
    }
    if (c->state == State::kSidrReqRcvd) {
      // Unanswered: SIDR has no "timeout" answer; the requester's own
      // resends run out. The owner is told it is gone.
      ++counters.req_timed_out;
      Event e;
      e.type = EventType::kUnreachable;
      e.comm_id = c->local_id;
      e.sidr = true;
      erase_conn(id);
      events.push_back(std::move(e));
      continue;
    }
    if (c->state == State::kReqRcvd) {
      // Nobody answered it: refuse it (REJ timeout, IBTA 12.6.7, reason 4) so the
      // peer stops asking, and tell the owner it is gone.
      ++counters.req_timed_out;
      reject(c->peer, c->tid, c->local_id, c->remote_id, wire::CmMsgKind::kReq, wire::RejReason::kTimeout);
      Event e;
      e.type = EventType::kUnreachable;
      e.comm_id = c->local_id;
      erase_conn(id);
      events.push_back(std::move(e));
      continue;
    }
    if (c->state == State::kRepRcvd) {
      // The program never called establish(): refuse the REP (REJ
      // timeout, IBTA 12.6.7) so the peer stops waiting.
      reject(c->peer, c->tid, c->local_id, c->remote_id, wire::CmMsgKind::kRep, wire::RejReason::kTimeout);
      Event e;
      e.type = EventType::kUnreachable;
      e.comm_id = c->local_id;
      erase_conn(id);
      events.push_back(std::move(e));
      continue;
    }
    const bool waiting = c->state == State::kReqSent || c->state == State::kRepSent ||
                         c->state == State::kDreqSent || c->state == State::kSidrReqSent;
    if (!waiting) continue;
    if (c->resends < timing.max_resends) {
      ++c->resends;
      ++counters.mads_resent;
      c->sent_at = t;
      c->wait_ns = timing.resend_ns;
      arm(*c, t + c->wait_ns);
      send(c->peer, c->last);
      continue;
    }
    Event e;
    e.type = c->state == State::kDreqSent ? EventType::kDisconnected : EventType::kUnreachable;
    e.comm_id = c->local_id;
    e.sidr = c->state == State::kSidrReqSent;
    if (e.type == EventType::kUnreachable && !e.sidr) e.why = why_unanswered(*c, t);
    if (c->state == State::kRepSent) to_err(c->qp);
    erase_conn(id);
    events.push_back(std::move(e));
  }
}

Manager::Manager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Manager::~Manager() {
  if (!impl_ || impl_->pd == nullptr) return;
  ProtectionDomain* pd = impl_->pd;
  if (impl_->qp1 != nullptr) pd->destroy_qp(impl_->qp1);
  for (auto& [gid, cached] : impl_->ahs) pd->destroy_ah(cached.ah);
  if (impl_->mr != nullptr) pd->dereg_mr(impl_->mr);
  if (impl_->cq != nullptr) impl_->ctx->destroy_cq(impl_->cq);
  if (impl_->buffer != nullptr) impl_->ctx->free_buffer(impl_->buffer);
  impl_->ctx->dealloc_pd(pd);
}

std::unique_ptr<Manager> Manager::open(Context& ctx, std::string& error, Timing timing) {
  return open(ctx, error, timing, nullptr, nullptr);
}

std::unique_ptr<Manager> Manager::open(Context& ctx, std::string& error, Timing timing, void (*on_mad)(void*),
                                       void* arg) {
  auto impl = std::make_unique<Impl>();
  impl->ctx = &ctx;
  impl->timing = timing;
  impl->reply_credit_at = internal::now_ns(ctx);
  impl->tid_counter = Impl::random_u32();
  std::unique_ptr<Manager> m(new Manager(std::move(impl)));
  Impl& i = *m->impl_;
  i.pd = ctx.alloc_pd();
  i.cq = i.pd != nullptr ? ctx.create_cq(4 * kSlots, on_mad, arg) : nullptr;
  i.armed = on_mad != nullptr;
  const std::size_t bytes = std::size_t{kSlots} * (kRecvBytes + wire::kMadBytes);
  i.buffer = i.cq != nullptr ? static_cast<std::uint8_t*>(ctx.alloc_buffer(bytes)) : nullptr;
  i.mr = i.buffer != nullptr ? i.pd->reg_mr(i.buffer, bytes, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  if (i.mr == nullptr) {
    error = "CM: cannot set up QP1's PD, CQ and buffers: " + ctx.last_error();
    return nullptr;
  }
  QpInitAttr init;
  init.send_cq = init.recv_cq = i.cq;
  init.cap = ibv_qp_cap{kSlots, kSlots, 1, 1, 0};
  i.qp1 = internal::create_gsi_qp(i.pd, init);
  if (i.qp1 == nullptr) {
    error = "CM: cannot create QP1: " + ctx.last_error();
    return nullptr;
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = wire::kGsiQkey;
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  if (i.qp1->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) != 0 ||
      i.qp1->modify(rtr, IBV_QP_STATE) != 0) {
    error = "CM: cannot ready QP1: " + ctx.last_error();
    return nullptr;
  }
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  if (i.qp1->modify(rts, IBV_QP_STATE | IBV_QP_SQ_PSN) != 0) {
    error = "CM: cannot ready QP1: " + ctx.last_error();
    return nullptr;
  }
  for (std::uint32_t s = 0; s < kSlots; ++s) {
    if (i.post_recv(s) != 0) {
      error = "CM: cannot post QP1's receives: " + ctx.last_error();
      return nullptr;
    }
  }
  // Our CA GUID: the EUI-64 in the link-local GID's low half.
  ibv_gid ll{};
  if (ctx.query_gid(0, ll) == 0) {
    for (int b = 8; b < 16; ++b) i.guid = i.guid << 8 | ll.raw[b];
  }
  return m;
}

const Counters& Manager::counters() const { return impl_->counters; }
std::size_t Manager::address_handles() const { return impl_->ahs.size(); }

void Manager::set_modify(ModifyFn fn, void* arg) {
  impl_->modify_fn = fn;
  impl_->modify_arg = arg;
}

void Manager::set_ece(EceFn fn, void* arg) {
  impl_->ece_fn = fn;
  impl_->ece_arg = arg;
}

std::size_t Manager::connections() const { return impl_->conns.size(); }
std::size_t Manager::pending_requests() const { return impl_->pending_requests; }

int Manager::listen(std::uint64_t service_id, void* owner, std::uint32_t backlog) {
  Impl::Listener l;
  l.owner = owner;
  l.backlog = backlog == 0 || backlog > kMaxBacklog ? kMaxBacklog : backlog;
  l.generation = ++impl_->listen_generation;
  if (!impl_->listeners.emplace(service_id, l).second) return EADDRINUSE;
  return 0;
}

int Manager::unlisten(std::uint64_t service_id) { return impl_->listeners.erase(service_id) ? 0 : ENOENT; }

int Manager::connect(const ConnectParams& p, std::uint32_t& comm_id) {
  Impl& i = *impl_;
  if ((p.qp == nullptr && (p.qpn == 0 || p.qpn > 0xffffff)) || p.private_data.size() > 92 || p.mtu < IBV_MTU_256 ||
      p.mtu > IBV_MTU_4096) {
    return EINVAL;
  }
  bool srq = p.srq;
  if (p.qp != nullptr) {
    ibv_qp_attr qa{};
    QpInitAttr init;
    if (p.qp->query(qa, IBV_QP_STATE, &init) != 0 || init.qp_type != IBV_QPT_RC) return EINVAL;
    srq = init.srq != nullptr;
    if (p.qp->state() != IBV_QPS_RESET && p.qp->state() != IBV_QPS_INIT) return EINVAL;
    if (const int rc = i.to_init(p.qp); rc != 0) return rc;
  }
  ibv_gid local{};
  if (i.ctx->query_gid(p.sgid_index, local) != 0) return EINVAL;
  Impl::Conn c;
  c.state = Impl::State::kReqSent;
  c.active = true;
  c.local_id = i.new_comm_id();
  c.tid = std::uint64_t{++i.tid_counter} | std::uint64_t{c.local_id} << 32;
  c.qp = p.qp;
  c.program_qp = p.qp == nullptr;
  c.peer = gid_bytes(p.remote_gid);
  c.sgid_index = p.sgid_index;
  c.params = p;
  wire::CmReq& q = c.req;
  q.local_comm_id = c.local_id;
  q.service_id = p.service_id;
  q.local_ca_guid = i.guid;
  q.local_qpn = p.qp != nullptr ? p.qp->qp_num() : p.qpn;
  q.srq = srq;
  q.responder_resources = p.responder_resources;
  q.initiator_depth = p.initiator_depth;
  q.remote_cm_response_timeout = kCmResponseTimeout;
  q.transport = 0;
  q.starting_psn = i.new_psn();
  q.local_cm_response_timeout = kCmResponseTimeout;
  q.retry_count = p.retry_count;
  q.path_mtu = static_cast<std::uint8_t>(std::min(p.mtu, i.ctx->active_mtu()));
  q.rnr_retry_count = p.rnr_retry_count;
  q.max_cm_retries = 15;
  q.primary.local_gid = gid_bytes(local);
  q.primary.remote_gid = c.peer;
  q.primary.hop_limit = 64;
  q.primary.local_ack_timeout = p.timeout;
  std::copy(p.private_data.begin(), p.private_data.end(), q.private_data.begin());
  q.vendor_id = p.ece_vendor_id & 0xffffff;
  wire::CmMad m = i.header_for(wire::CmAttr::kReq, c.tid);
  m.req = q;
  if (q.vendor_id != 0) m.header.attr_modifier = p.ece_options;
  comm_id = c.local_id;
  auto [it, inserted] = i.conns.emplace(c.local_id, std::move(c));
  (void)inserted;
  i.send_tracked(it->second, m);
  return 0;
}

int Manager::accept(std::uint32_t comm_id, const AcceptParams& p) {
  Impl& i = *impl_;
  Impl::Conn* c = i.find(comm_id);
  if (c != nullptr && c->state == Impl::State::kSidrReqRcvd) {
    // The UD QP's own number and Q_Key (IBTA 12.11.2: what a datagram to it must carry).
    ibv_qp_attr qa{};
    QpInitAttr init;
    if (p.qp == nullptr || p.private_data.size() > wire::kSidrRepPrivateBytes ||
        p.qp->query(qa, IBV_QP_STATE | IBV_QP_QKEY, &init) != 0 || init.qp_type != IBV_QPT_UD ||
        qa.qp_state == IBV_QPS_RESET) {
      return EINVAL;
    }
    i.sidr_reply(c->peer, c->tid, c->remote_id, c->req.service_id, wire::SidrStatus::kOk, &c->last, p.qp->qp_num(),
                 qa.qkey, p.private_data);
    i.keep_sidr_answer(*c);
    return 0;
  }
  if (c == nullptr || c->state != Impl::State::kReqRcvd) return ENOENT;
  if ((p.qp == nullptr && (p.qpn == 0 || p.qpn > 0xffffff)) || p.private_data.size() > 196 ||
      (p.timeout > 31 && p.timeout != kTimeoutOfReq)) {
    return EINVAL;
  }
  const wire::CmReq& req = c->req;
  // The REQ's values (on_req) settled by the answer; kept only if the QP
  // moves (a failed accept leaves the request as it was).
  Impl::Conn settled = *c;
  settled.responder = std::min(p.responder_resources, req.initiator_depth);
  settled.initiator = std::min(p.initiator_depth, req.responder_resources);
  settled.timeout = p.timeout != kTimeoutOfReq ? p.timeout : req_ack_timeout(req);
  settled.rnr_retry = p.rnr_retry_count;
  // ECE (this side takes part: p.ece_vendor_id): what the answer agrees to
  // of what the REQ offered; another vendor's REQ, or one without, nothing.
  settled.ece = p.ece_vendor_id != 0;
  settled.ece_vendor_id = p.ece_vendor_id;
  settled.ece_options = p.ece_vendor_id == req.vendor_id ? p.ece_options & c->req_ece_options : 0;
  if (p.qp != nullptr && (i.to_init(p.qp) != 0 || i.to_rtr(p.qp, settled) != 0 || i.to_rts(p.qp, settled) != 0)) {
    return EINVAL;
  }
  c->responder = settled.responder;
  c->initiator = settled.initiator;
  c->timeout = settled.timeout;
  c->rnr_retry = settled.rnr_retry;
  c->ece = settled.ece;
  c->ece_vendor_id = settled.ece_vendor_id;
  c->ece_options = settled.ece_options;
  c->qp = p.qp;
  c->program_qp = p.qp == nullptr;
  wire::CmMad m = i.header_for(wire::CmAttr::kRep, c->tid);
  wire::CmRep& rep = m.rep;
  rep.local_comm_id = c->local_id;
  rep.remote_comm_id = c->remote_id;
  rep.local_qpn = p.qp != nullptr ? p.qp->qp_num() : p.qpn;
  rep.starting_psn = c->rq_psn;
  rep.responder_resources = c->responder;
  rep.initiator_depth = c->initiator;
  rep.target_ack_delay = kTargetAckDelay;
  rep.rnr_retry_count = c->rnr_retry;
  rep.srq = p.qp == nullptr && p.srq;
  rep.local_ca_guid = i.guid;
  // As rdma-core's librdmacm over Linux's CM: the REP echoes the REQ's
  // vendor id (0 when it had none), with the options agreed.
  if (settled.ece) {
    wire::set_rep_vendor_id(rep, req.vendor_id);
    if (req.vendor_id != 0) m.header.attr_modifier = settled.ece_options;
  }
  std::copy(p.private_data.begin(), p.private_data.end(), rep.private_data.begin());
  i.leave_req_rcvd(*c);
  c->state = Impl::State::kRepSent;
  i.send_tracked(*c, m);
  return 0;
}

int Manager::qp_attr(std::uint32_t comm_id, ibv_qp_state state, ibv_qp_attr& attr, int& mask) {
  Impl& i = *impl_;
  const Impl::Conn* c = i.find(comm_id);
  if (c == nullptr) return ENOENT;
  attr = ibv_qp_attr{};
  switch (state) {
    case IBV_QPS_INIT:
      // As Linux's CM (cm_init_qp_init_attr): remote writes always, reads
      // and atomics only if we take some (responder resources).
      attr.qp_state = IBV_QPS_INIT;
      attr.port_num = 1;
      attr.pkey_index = 0;
      attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
      // Before the REP (active): what the REQ offers.
      if ((c->qp_path ? c->responder : c->params.responder_resources) > 0) {
        attr.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      }
      mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      return 0;
    case IBV_QPS_RTR:
    case IBV_QPS_RTS:
      if (!c->qp_path) return EINVAL;  // active: the REP is not in yet
      mask = Impl::rtr_rts_attr(*c, state, attr);
      return 0;
    default:
      return EINVAL;
  }
}

int Manager::establish(std::uint32_t comm_id) {
  Impl& i = *impl_;
  Impl::Conn* c = i.find(comm_id);
  if (c == nullptr || c->state != Impl::State::kRepRcvd) return EINVAL;
  i.send_rtu(*c);
  c->state = Impl::State::kEstablished;
  i.disarm(*c);
  return 0;
}

int Manager::reject(std::uint32_t comm_id, const std::vector<std::uint8_t>& private_data, wire::RejReason reason) {
  Impl& i = *impl_;
  Impl::Conn* c = i.find(comm_id);
  if (c != nullptr && c->state == Impl::State::kSidrReqRcvd) {
    i.sidr_reply(c->peer, c->tid, c->remote_id, c->req.service_id, wire::SidrStatus::kReject, &c->last, 0, 0,
                 private_data);
    i.keep_sidr_answer(*c);
    return 0;
  }
  // A request, or (active, the program's own QP) a REP the program refuses.
  const bool rep_in = c != nullptr && c->state == Impl::State::kRepRcvd;
  if (c == nullptr || (c->state != Impl::State::kReqRcvd && !rep_in)) return ENOENT;
  i.reject(c->peer, c->tid, c->local_id, c->remote_id, rep_in ? wire::CmMsgKind::kRep : wire::CmMsgKind::kReq,
           reason, private_data);
  i.erase_conn(comm_id);
  return 0;
}

int Manager::disconnect(std::uint32_t comm_id) {
  Impl& i = *impl_;
  Impl::Conn* c = i.find(comm_id);
  if (c == nullptr || (c->state != Impl::State::kEstablished && c->state != Impl::State::kRepSent)) return ENOENT;
  wire::CmMad m = i.header_for(wire::CmAttr::kDreq, c->tid);
  m.dreq.local_comm_id = c->local_id;
  m.dreq.remote_comm_id = c->remote_id;
  m.dreq.remote_qpn = c->peer_qpn;
  i.to_err(c->qp);
  c->state = Impl::State::kDreqSent;
  i.send_tracked(*c, m);
  return 0;
}

int Manager::abandon(std::uint32_t comm_id) {
  Impl& i = *impl_;
  Impl::Conn* c = i.find(comm_id);
  if (c == nullptr) return ENOENT;
  switch (c->state) {
    case Impl::State::kSidrReqRcvd: return reject(comm_id, {});
    case Impl::State::kSidrRepSent: return 0;  // its timer ends it
    case Impl::State::kSidrReqSent:
      i.erase_conn(comm_id);  // nothing to withdraw: the peer's answer is dropped
      return 0;
    case Impl::State::kReqRcvd: return reject(comm_id, {});
    case Impl::State::kEstablished: return disconnect(comm_id);
    case Impl::State::kDreqSent: return 0;  // its DREP (or the resends running out) ends it
    case Impl::State::kReqSent:
    case Impl::State::kRepSent:
    case Impl::State::kRepRcvd:
      i.reject(c->peer, c->tid, c->local_id, c->remote_id,
               c->state == Impl::State::kReqSent ? wire::CmMsgKind::kReq : wire::CmMsgKind::kRep,
               wire::RejReason::kTimeout);
      i.to_err(c->qp);
      i.erase_conn(comm_id);
      return 0;
  }
  return 0;
}

void Manager::forget_qp(QueuePair* qp) {
  for (auto& [id, c] : impl_->conns) {
    if (c.qp == qp) c.qp = nullptr;
    if (c.params.qp == qp) c.params.qp = nullptr;  // connect()'s copy: no pointer to it is left
  }
}

std::size_t Manager::poll(std::vector<Event>& events) {
  Impl& i = *impl_;
  const std::size_t before = events.size();
  ibv_wc wc[16];
  // Armed before the CQ is read, so a MAD that lands after the read still
  // wakes the owner (ibv_req_notify_cq's rule).
  if (i.armed) i.cq->arm(false);
  // A bounded share per call: under a flood the caller (librdmacm's thread,
  // holding the library's mutex) gets out between shares, and what QP1
  // cannot take meanwhile is dropped by its engine (no receive posted).
  int budget = 4 * static_cast<int>(kSlots);
  for (int n; budget > 0 && (n = i.cq->poll(16, wc)) > 0; budget -= n) {
    for (int k = 0; k < n; ++k) {
      if (wc[k].wr_id >= 1000) continue;  // a send of ours completed
      if (wc[k].status == IBV_WC_WR_FLUSH_ERR) continue;
      i.receive(wc[k], events);
      i.post_recv(static_cast<std::uint32_t>(wc[k].wr_id));
    }
  }
  i.send_held();
  i.resend_overdue(events);
  return events.size() - before;
}

}  // namespace uroce::cm
