#include "cm/manager.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <iterator>
#include <list>
#include <set>
#include <utility>

#include "verbs/internal.h"

namespace uroce::cm {
namespace {

constexpr std::uint32_t kSlots = 64;               // receive and send buffers of QP1
constexpr std::uint32_t kRecvBytes = 40 + wire::kMadBytes;  // GRH + MAD
constexpr std::uint8_t kMinRnrTimer = 12;          // 0.64 ms, as rdma_cm's default
constexpr std::uint8_t kTargetAckDelay = 15;       // as rxe's REPs say
constexpr std::uint8_t kCmResponseTimeout = 20;    // 4.3 s, as rxe's REQs say
// The address path (H5, M5 of the security review): a MAD to a peer whose
// Ethernet address is not known yet waits in a bounded queue, never in a
// blocking resolution; address handles are a bounded LRU; replies to MADs
// for connections we do not know (which anyone can send from any source)
// are rate-limited.
constexpr std::size_t kMaxAhs = 1024;
constexpr std::size_t kMaxQueuedPerPeer = 4;
constexpr std::size_t kMaxQueued = 256;
// Peers held MADs wait for at once: a quarter of the resolver's slots
// (Resolver::kMaxPending), so spoofed sources cannot take them all from the
// program's own modify_qp and create_ah.
constexpr std::size_t kMaxQueuedPeers = 16;
constexpr std::uint64_t kQueuedDeadlineNs = 2'000'000'000;  // past the resolver's own second
constexpr std::uint64_t kUnsolicitedReplyNs = 10'000'000;   // 100 a second...
constexpr std::uint64_t kUnsolicitedBurstNs = 64 * kUnsolicitedReplyNs;  // ...after a burst of 64
constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

using Gid = std::array<std::uint8_t, 16>;

Gid gid_bytes(const ibv_gid& g) {
  Gid b;
  std::memcpy(b.data(), g.raw, 16);
  return b;
}
ibv_gid to_gid(const Gid& b) {
  ibv_gid g;
  std::memcpy(g.raw, b.data(), 16);
  return g;
}

}  // namespace

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

struct Manager::Impl {
  // The kSidr states are Service ID Resolution's (IBTA 12.11), which makes
  // no connection: a SIDR_REQ is sent and resent until its SIDR_REP
  // (kSidrReqSent); one received waits for accept() or reject()
  // (kSidrReqRcvd), and their answer is kept a while (kSidrRepSent) to be
  // sent again to a duplicate SIDR_REQ, whose sender did not get it.
  // kRepRcvd: active, the program's own QP: the REP is in, establish() sends the RTU.
  enum class State {
    kReqSent, kReqRcvd, kRepSent, kEstablished, kDreqSent, kRepRcvd, kSidrReqSent, kSidrReqRcvd, kSidrRepSent
  };
  struct Conn {
    State state = State::kReqSent;
    bool active = false;
    std::uint32_t local_id = 0;
    std::uint32_t remote_id = 0;
    std::uint64_t tid = 0;
    QueuePair* qp = nullptr;
    Gid peer{};
    std::uint8_t sgid_index = 1;
    wire::CmReq req;                 // ours (active) or theirs (passive)
    std::uint32_t peer_qpn = 0;
    ConnectParams params;            // active side
    // The QP's RTR and RTS values (IBTA 12.6.5, 12.6.8): on the passive side
    // from the REQ (and the PSN our REP carries) until accept() settles
    // them, on the active side once the REP is in (qp_path set). What the
    // manager moves its QPs with, and what qp_attr() answers.
    bool qp_path = false;
    bool program_qp = false;         // the QP is the program's (qp stays null): never moved here
    Gid dgid{};
    std::uint8_t mtu = IBV_MTU_1024;
    std::uint32_t rq_psn = 0, sq_psn = 0;
    std::uint8_t responder = 0, initiator = 0;  // max_dest_rd_atomic, max_rd_atomic
    std::uint8_t timeout = 14, retry = 7, rnr_retry = 7;
    std::array<std::uint8_t, wire::kMadBytes> last{};  // what to send again
    std::uint64_t sent_at = 0;
    std::uint64_t wait_ns = 0;       // extended by an MRA
    int resends = 0;
    int no_service_retries = 0;      // REJ invalid service ID taken so far (Timing)
    std::uint64_t due = 0;           // its entry in `timers` (0: none)
    std::uint64_t listen_service = 0;     // kReqRcvd: the listener it counts against
    std::uint64_t listen_generation = 0;
  };
  struct Listener {
    void* owner = nullptr;
    std::uint32_t backlog = kMaxBacklog;
    std::uint32_t pending = 0;      // its connections in kReqRcvd
    std::uint64_t generation = 0;   // which listen() (a service listened on again starts afresh)
  };
  using RemoteKey = std::pair<Gid, std::uint32_t>;  // the peer and its comm ID

  Context* ctx = nullptr;
  Timing timing;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  QueuePair* qp1 = nullptr;
  std::uint8_t* buffer = nullptr;  // kSlots receive buffers, then kSlots send buffers
  MemoryRegion* mr = nullptr;
  std::uint32_t next_send = 0;
  // Address handles by the peer's GID (its family picks our sgid), the
  // most recently used first in `ah_lru`; at most kMaxAhs.
  struct CachedAh {
    AddressHandle* ah = nullptr;
    std::list<Gid>::iterator lru;
  };
  std::map<Gid, CachedAh> ahs;
  std::list<Gid> ah_lru;
  // MADs whose peer is being resolved (Context::resolve_gid: kPending).
  struct Held {
    Gid peer{};
    std::array<std::uint8_t, wire::kMadBytes> mad{};
    std::uint64_t deadline = 0;
  };
  std::deque<Held> held;
  std::map<Gid, std::uint32_t> held_peers;  // MADs held for each peer
  std::uint64_t held_checked_at = 0;  // send_held() looks once a millisecond at most
  // Token bucket for replies to unknown connections, in nanoseconds of
  // credit (kUnsolicitedReplyNs a reply).
  std::uint64_t reply_credit_ns = kUnsolicitedBurstNs;
  std::uint64_t reply_credit_at = 0;
  std::map<std::uint64_t, Listener> listeners;
  std::uint64_t listen_generation = 0;
  std::map<std::uint32_t, Conn> conns;  // by our comm ID
  // Every connection whose peer comm ID is known, by (peer, its comm ID):
  // a REQ is matched to its connection without a scan.
  std::map<RemoteKey, std::uint32_t> by_remote;
  // (when, our comm ID) of each connection waiting for something: the
  // resend or expiry due first is the first entry.
  std::set<std::pair<std::uint64_t, std::uint32_t>> timers;
  std::uint32_t pending_requests = 0;  // connections in kReqRcvd
  std::uint32_t tid_counter = 0;
  std::uint64_t guid = 0;
  Counters counters;
  ModifyFn modify_fn = nullptr;
  void* modify_arg = nullptr;
  bool armed = false;  // QP1's CQ has an on_mad callback: armed at every poll()

  static bool sidr(State s) {
    return s == State::kSidrReqSent || s == State::kSidrReqRcvd || s == State::kSidrRepSent;
  }

  int modify(QueuePair* qp, ibv_qp_attr& a, int mask) {
    return modify_fn != nullptr ? modify_fn(modify_arg, qp, a, mask) : qp->modify(a, mask);
  }

  std::uint64_t now() { return internal::now_ns(*ctx); }

  std::uint8_t* recv_slot(std::uint32_t i) { return buffer + std::size_t{i} * kRecvBytes; }
  std::uint8_t* send_slot(std::uint32_t i) { return buffer + std::size_t{kSlots} * kRecvBytes + std::size_t{i} * wire::kMadBytes; }

  int post_recv(std::uint32_t i) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(recv_slot(i)), kRecvBytes, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return qp1->post_recv(&wr, &bad);
  }

  // Whether a connection talks to `peer` (its handle is kept, if it can be).
  bool peer_in_use(const Gid& peer) const {
    for (const auto& [id, c] : conns) {
      if (c.peer == peer) return true;
    }
    return false;
  }

  // Destroys one cached handle: the least recently used among the last 8
  // that no connection uses, else the least recently used. Destroying one a
  // connection uses is safe all the same (a posted UD WR carries a copy of
  // the path), it is only made again at its next MAD.
  void evict_ah() {
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

  // The AH to `peer`'s QP1, whose address the port knows already (a
  // resolution is not waited for here); our GID of its family.
  AddressHandle* ah_to(const Gid& peer) {
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

  // Posts `mad` to `peer`'s QP1, whose address is known. False when it
  // could not go (a full queue): the resend timer covers it.
  bool post(const Gid& peer, const std::array<std::uint8_t, wire::kMadBytes>& mad) {
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
    ++counters.mads_sent;
    return true;
  }

  // Sends `mad` to `peer`'s QP1 without ever waiting for its address: at
  // once when it is known, else held until the port has it (poll() sends
  // it then; dropped at kQueuedDeadlineNs), dropped when it is unreachable.
  // False when it did not go now: a tracked MAD's resend timer covers it.
  bool send(const Gid& peer, const std::array<std::uint8_t, wire::kMadBytes>& mad) {
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

  void hold(const Gid& peer, const std::array<std::uint8_t, wire::kMadBytes>& mad) {
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

  // The held MADs whose peer resolved (or failed, or ran out of time).
  void send_held() {
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

  // A reply to a MAD for a connection we do not know (REJ, DREP): anyone
  // may send those from any source, so at most kUnsolicitedReplyNs apart
  // on average. False (counted) when over the rate.
  bool unsolicited_reply_allowed() {
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

  wire::CmMad header_for(wire::CmAttr attr, std::uint64_t tid) {
    wire::CmMad m;
    m.header.tid = tid;
    m.header.attr_id = static_cast<std::uint16_t>(attr);
    return m;
  }

  // Sends and remembers it for resending until answered.
  void send_tracked(Conn& c, const wire::CmMad& m) {
    wire::encode_cm_mad(m, c.last);
    c.sent_at = now();
    c.wait_ns = timing.resend_ns;
    c.resends = 0;
    arm(c, c.sent_at + c.wait_ns);
    send(c.peer, c.last);
  }

  // --- connection bookkeeping: timers, the remote index, request counts --------

  void arm(Conn& c, std::uint64_t due) {
    disarm(c);
    c.due = due == 0 ? 1 : due;
    timers.emplace(c.due, c.local_id);
  }
  void disarm(Conn& c) {
    if (c.due != 0) timers.erase({c.due, c.local_id});
    c.due = 0;
  }
  void index_remote(const Conn& c) { by_remote[{c.peer, c.remote_id}] = c.local_id; }
  // A connection stops waiting as kReqRcvd (answered, refused, withdrawn).
  void leave_req_rcvd(Conn& c) {
    if (c.state != State::kReqRcvd && c.state != State::kSidrReqRcvd) return;
    --pending_requests;
    auto l = listeners.find(c.listen_service);
    if (l != listeners.end() && l->second.generation == c.listen_generation) --l->second.pending;
    c.state = State::kRepSent;  // the caller sets the state that follows
  }
  void erase_conn(std::uint32_t local_id) {
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

  void send_once(const Gid& peer, const wire::CmMad& m) {
    std::array<std::uint8_t, wire::kMadBytes> bytes{};
    wire::encode_cm_mad(m, bytes);
    send(peer, bytes);
  }

  // Comm IDs and starting PSNs from the kernel's CSPRNG, not a seeded
  // generator: a peer on the link who could predict them could forge a DREQ
  // or inject into the connection (only the PSN guards an RC QP's receive
  // side against a spoofed source address).
  static std::uint32_t random_u32() {
    std::uint32_t x = 0;
    internal::random_bytes(&x, sizeof x);
    return x;
  }

  std::uint32_t new_comm_id() {
    for (;;) {
      const std::uint32_t id = random_u32();
      if (id != 0 && !conns.count(id)) return id;
    }
  }

  std::uint32_t new_psn() { return random_u32() & 0xffffff; }

  // RC QP transitions as rdma_cm makes them.
  int to_init(QueuePair* qp) {
    if (qp == nullptr) return EINVAL;
    if (qp->state() == IBV_QPS_INIT) return 0;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = kAllAccess;
    return modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }
  // The attributes of `c`'s QP for RTR or RTS (its qp_path values).
  static int rtr_rts_attr(const Conn& c, ibv_qp_state state, ibv_qp_attr& a) {
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
  int to_rtr(QueuePair* qp, const Conn& c) {
    if (qp == nullptr) return EINVAL;
    ibv_qp_attr a;
    const int mask = rtr_rts_attr(c, IBV_QPS_RTR, a);
    return modify(qp, a, mask);
  }
  int to_rts(QueuePair* qp, const Conn& c) {
    if (qp == nullptr) return EINVAL;
    ibv_qp_attr a;
    const int mask = rtr_rts_attr(c, IBV_QPS_RTS, a);
    return modify(qp, a, mask);
  }
  // Our GID index whose GID is `g` (the one a REQ was sent to); 0 if none.
  std::uint8_t sgid_index_of(const Gid& g) const {
    for (std::uint8_t index = 0; index < 2; ++index) {
      ibv_gid ours{};
      if (ctx->query_gid(index, ours) == 0 && gid_bytes(ours) == g) return index;
    }
    return 0;
  }
  // An MRA for `c`'s REP: the program moves its own QP before the RTU
  // (Linux's rdma_cm sends one on each REP of an ID without a QP).
  void send_rep_mra(const Conn& c) {
    wire::CmMad m = header_for(wire::CmAttr::kMra, c.tid);
    m.mra.local_comm_id = c.local_id;
    m.mra.remote_comm_id = c.remote_id;
    m.mra.mraed = wire::CmMsgKind::kRep;
    m.mra.service_timeout = kCmResponseTimeout;
    send_once(c.peer, m);
  }
  void to_err(QueuePair* qp) {
    if (qp == nullptr) return;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    modify(qp, a, IBV_QP_STATE);
  }

  Conn* find(std::uint32_t local_id) {
    auto it = conns.find(local_id);
    return it == conns.end() ? nullptr : &it->second;
  }
  Conn* find_remote(std::uint32_t remote_id, const Gid& peer) {
    auto it = by_remote.find({peer, remote_id});
    return it == by_remote.end() ? nullptr : find(it->second);
  }

  void reject(const Gid& peer, std::uint64_t tid, std::uint32_t local_id, std::uint32_t remote_id,
              wire::CmMsgKind what, wire::RejReason reason, const std::vector<std::uint8_t>& private_data = {}) {
    wire::CmMad m = header_for(wire::CmAttr::kRej, tid);
    m.rej.local_comm_id = local_id;
    m.rej.remote_comm_id = remote_id;
    m.rej.rejected = what;
    m.rej.reason = static_cast<std::uint16_t>(reason);
    std::copy_n(private_data.begin(), std::min(private_data.size(), m.rej.private_data.size()),
                m.rej.private_data.begin());
    send_once(peer, m);
  }

  // --- what arrives --------------------------------------------------------------

  void on_req(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
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
    // The consumer's private data: behind rdma_cm's header on its services.
    std::size_t skip = 0;
    if (wire::rdma_cm_service(req.service_id) && wire::decode_rdma_cm_header(req.private_data)) {
      skip = wire::kRdmaCmHeaderBytes;
    }
    e.private_data.assign(req.private_data.begin() + static_cast<std::ptrdiff_t>(skip), req.private_data.end());
    auto [it, inserted] = conns.emplace(c.local_id, std::move(c));
    (void)inserted;
    index_remote(it->second);
    // Unanswered, it goes after request_ns (REJ timeout).
    arm(it->second, now() + timing.request_ns);
    events.push_back(std::move(e));
  }

  void on_rep(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
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
    Event e;
    e.comm_id = c->local_id;
    e.rep = rep;
    e.active = true;
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

  void send_rtu(const Conn& c) {
    wire::CmMad rtu = header_for(wire::CmAttr::kRtu, c.tid);
    rtu.rtu.local_comm_id = c.local_id;
    rtu.rtu.remote_comm_id = c.remote_id;
    send_once(c.peer, rtu);
  }

  void on_rtu(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
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

  void on_rej(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
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

  void on_mra(const wire::CmMad& m, const Gid& peer) {
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

  void on_dreq(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
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

  void on_drep(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
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

  // --- Service ID Resolution (IBTA 12.11) ------------------------------------------

  void sidr_reply(const Gid& peer, std::uint64_t tid, std::uint32_t request_id, std::uint64_t service_id,
                  wire::SidrStatus status, std::array<std::uint8_t, wire::kMadBytes>* keep = nullptr,
                  std::uint32_t qpn = 0, std::uint32_t qkey = 0, const std::vector<std::uint8_t>& private_data = {}) {
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

  // A SIDR answer was sent: kept (kSidrRepSent) for duplicates of the
  // request until the requester's resends would have run out.
  void keep_sidr_answer(Conn& c) {
    leave_req_rcvd(c);
    c.state = State::kSidrRepSent;
    arm(c, now() + timing.resend_ns * static_cast<std::uint64_t>(timing.max_resends + 1));
  }

  void on_sidr_req(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
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
    auto [it, inserted] = conns.emplace(c.local_id, std::move(c));
    (void)inserted;
    index_remote(it->second);
    arm(it->second, now() + timing.request_ns);
    events.push_back(std::move(e));
  }

  void on_sidr_rep(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events) {
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

  // Whether `g` is one of our GIDs (the link-local one, the IPv4 one). The
  // port hands up every RoCEv2 frame it sees, and on a shared link (a veth
  // whose kernel has an address too) some are for another host's address:
  // that host answers for it, we must not.
  bool is_ours(const Gid& g) const {
    for (int index = 0; index < 2; ++index) {
      ibv_gid ours{};
      if (ctx->query_gid(index, ours) == 0 && gid_bytes(ours) == g) return true;
    }
    return false;
  }

  void receive(const ibv_wc& wc, std::vector<Event>& events) {
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

  // What is due: a resend, a connection that gave up, an unanswered request.
  // Only the due entries of `timers` are visited.
  void resend_overdue(std::vector<Event>& events) {
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
      if (c->state == State::kRepSent) to_err(c->qp);
      erase_conn(id);
      events.push_back(std::move(e));
    }
  }
};

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
  wire::CmMad m = i.header_for(wire::CmAttr::kReq, c.tid);
  m.req = q;
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
  if ((p.qp == nullptr && (p.qpn == 0 || p.qpn > 0xffffff)) || p.private_data.size() > 196) return EINVAL;
  const wire::CmReq& req = c->req;
  // The REQ's values (on_req) settled by the answer; kept only if the QP
  // moves (a failed accept leaves the request as it was).
  Impl::Conn settled = *c;
  settled.responder = std::min(p.responder_resources, req.initiator_depth);
  settled.initiator = std::min(p.initiator_depth, req.responder_resources);
  settled.timeout = p.timeout;
  settled.rnr_retry = p.rnr_retry_count;
  if (p.qp != nullptr && (i.to_init(p.qp) != 0 || i.to_rtr(p.qp, settled) != 0 || i.to_rts(p.qp, settled) != 0)) {
    return EINVAL;
  }
  c->responder = settled.responder;
  c->initiator = settled.initiator;
  c->timeout = settled.timeout;
  c->rnr_retry = settled.rnr_retry;
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

int Manager::reject(std::uint32_t comm_id, const std::vector<std::uint8_t>& private_data) {
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
           wire::RejReason::kConsumerReject, private_data);
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
