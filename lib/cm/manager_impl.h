// The communication manager's insides (cm/manager.h), shared by its three
// files: the connection's state and the QP1 plumbing, the address path and
// timers (manager.cc), the connection protocol (connection.cc: REQ, REP,
// RTU, REJ, MRA, DREQ, DREP and the QP moves they make) and Service ID
// Resolution (sidr.cc). Nothing outside lib/cm includes it.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "cm/manager.h"
#include "verbs/internal.h"

namespace uroce::cm {

inline constexpr std::uint32_t kSlots = 64;               // receive and send buffers of QP1
inline constexpr std::uint32_t kRecvBytes = 40 + wire::kMadBytes;  // GRH + MAD
inline constexpr std::uint8_t kMinRnrTimer = 12;          // 0.64 ms, as rdma_cm's default
inline constexpr std::uint8_t kTargetAckDelay = 15;       // as rxe's REPs say
inline constexpr std::uint8_t kCmResponseTimeout = 20;    // 4.3 s, as rxe's REQs say
// The address path (H5, M5 of the security review): a MAD to a peer whose
// Ethernet address is not known yet waits in a bounded queue, never in a
// blocking resolution; address handles are a bounded LRU; replies to MADs
// for connections we do not know (which anyone can send from any source)
// are rate-limited.
inline constexpr std::size_t kMaxAhs = 1024;
inline constexpr std::size_t kMaxQueuedPerPeer = 4;
inline constexpr std::size_t kMaxQueued = 256;
// Peers held MADs wait for at once: a quarter of the resolver's slots
// (Resolver::kMaxPending), so spoofed sources cannot take them all from the
// program's own modify_qp and create_ah.
inline constexpr std::size_t kMaxQueuedPeers = 16;
inline constexpr std::uint64_t kQueuedDeadlineNs = 2'000'000'000;  // past the resolver's own second
inline constexpr std::uint64_t kUnsolicitedReplyNs = 10'000'000;   // 100 a second...
inline constexpr std::uint64_t kUnsolicitedBurstNs = 64 * kUnsolicitedReplyNs;  // ...after a burst of 64
inline constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC;

using Gid = std::array<std::uint8_t, 16>;

inline Gid gid_bytes(const ibv_gid& g) {
  Gid b;
  std::memcpy(b.data(), g.raw, 16);
  return b;
}
// The passive side's local ACK timeout from a REQ: its primary path's
// Local ACK Timeout, at least 1 (Linux's CM takes the path's packet life
// time as that minus one, then adds one back, so 0 does not mean infinite).
inline std::uint8_t req_ack_timeout(const wire::CmReq& req) {
  return req.primary.local_ack_timeout == 0 ? 1 : req.primary.local_ack_timeout;
}

inline ibv_gid to_gid(const Gid& b) {
  ibv_gid g;
  std::memcpy(g.raw, b.data(), 16);
  return g;
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
    std::uint64_t sent_at = 0;       // the last send of `last`
    std::uint64_t first_sent_at = 0; // its first
    std::uint64_t wait_ns = 0;       // extended by an MRA
    int resends = 0;
    int no_service_retries = 0;      // REJ invalid service ID taken so far (Timing)
    std::uint64_t due = 0;           // its entry in `timers` (0: none)
    std::uint64_t listen_service = 0;     // kReqRcvd: the listener it counts against
    std::uint64_t listen_generation = 0;
    // ECE: the REQ's options (passive), and once known what was agreed,
    // which to_rtr gives the QP first.
    std::uint32_t req_ece_options = 0;
    bool ece = false;
    std::uint32_t ece_vendor_id = 0, ece_options = 0;
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
  EceFn ece_fn = nullptr;
  void* ece_arg = nullptr;
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

  int post_recv(std::uint32_t i);

  // Whether a connection talks to `peer` (its handle is kept, if it can be).
  bool peer_in_use(const Gid& peer) const;

  // Destroys one cached handle: the least recently used among the last 8
  // that no connection uses, else the least recently used. Destroying one a
  // connection uses is safe all the same (a posted UD WR carries a copy of
  // the path), it is only made again at its next MAD.
  void evict_ah();

  // The AH to `peer`'s QP1, whose address the port knows already (a
  // resolution is not waited for here); our GID of its family.
  AddressHandle* ah_to(const Gid& peer);

  // Posts `mad` to `peer`'s QP1, whose address is known. False when it
  // could not go (a full queue): the resend timer covers it.
  bool post(const Gid& peer, const std::array<std::uint8_t, wire::kMadBytes>& mad);

  // Sends `mad` to `peer`'s QP1 without ever waiting for its address: at
  // once when it is known, else held until the port has it (poll() sends
  // it then; dropped at kQueuedDeadlineNs), dropped when it is unreachable.
  // False when it did not go now: a tracked MAD's resend timer covers it.
  bool send(const Gid& peer, const std::array<std::uint8_t, wire::kMadBytes>& mad);

  void hold(const Gid& peer, const std::array<std::uint8_t, wire::kMadBytes>& mad);

  // The held MADs whose peer resolved (or failed, or ran out of time).
  void send_held();
  // Event::why of `c`'s kUnreachable at time `t`.
  std::string why_unanswered(const Conn& c, std::uint64_t t);

  // A reply to a MAD for a connection we do not know (REJ, DREP): anyone
  // may send those from any source, so at most kUnsolicitedReplyNs apart
  // on average. False (counted) when over the rate.
  bool unsolicited_reply_allowed();

  wire::CmMad header_for(wire::CmAttr attr, std::uint64_t tid);

  // Sends and remembers it for resending until answered.
  void send_tracked(Conn& c, const wire::CmMad& m);

  // --- connection bookkeeping: timers, the remote index, request counts --------

  void arm(Conn& c, std::uint64_t due);
  void disarm(Conn& c);
  void index_remote(const Conn& c) { by_remote[{c.peer, c.remote_id}] = c.local_id; }
  // A connection stops waiting as kReqRcvd (answered, refused, withdrawn).
  void leave_req_rcvd(Conn& c);
  void erase_conn(std::uint32_t local_id);

  void send_once(const Gid& peer, const wire::CmMad& m);

  // Comm IDs and starting PSNs from the kernel's CSPRNG, not a seeded
  // generator: a peer on the link who could predict them could forge a DREQ
  // or inject into the connection (only the PSN guards an RC QP's receive
  // side against a spoofed source address).
  static std::uint32_t random_u32();

  std::uint32_t new_comm_id();

  std::uint32_t new_psn() { return random_u32() & 0xffffff; }

  // RC QP transitions as rdma_cm makes them.
  int to_init(QueuePair* qp);
  // The attributes of `c`'s QP for RTR or RTS (its qp_path values).
  static int rtr_rts_attr(const Conn& c, ibv_qp_state state, ibv_qp_attr& a);
  int to_rtr(QueuePair* qp, const Conn& c);
  int to_rts(QueuePair* qp, const Conn& c);
  // Our GID index whose GID is `g` (the one a REQ was sent to); 0 if none.
  std::uint8_t sgid_index_of(const Gid& g) const;
  // An MRA for `c`'s REP: the program moves its own QP before the RTU
  // (Linux's rdma_cm sends one on each REP of an ID without a QP).
  void send_rep_mra(const Conn& c);
  void to_err(QueuePair* qp);

  Conn* find(std::uint32_t local_id) {
    auto it = conns.find(local_id);
    return it == conns.end() ? nullptr : &it->second;
  }
  Conn* find_remote(std::uint32_t remote_id, const Gid& peer) {
    auto it = by_remote.find({peer, remote_id});
    return it == by_remote.end() ? nullptr : find(it->second);
  }

  void reject(const Gid& peer, std::uint64_t tid, std::uint32_t local_id, std::uint32_t remote_id,
              wire::CmMsgKind what, wire::RejReason reason, const std::vector<std::uint8_t>& private_data = {});

  // --- what arrives --------------------------------------------------------------

  void on_req(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events);

  void on_rep(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events);

  void send_rtu(const Conn& c);

  void on_rtu(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events);

  void on_rej(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events);

  void on_mra(const wire::CmMad& m, const Gid& peer);

  void on_dreq(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events);

  void on_drep(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events);

  // --- Service ID Resolution (IBTA 12.11) ------------------------------------------

  void sidr_reply(const Gid& peer, std::uint64_t tid, std::uint32_t request_id, std::uint64_t service_id,
                  wire::SidrStatus status, std::array<std::uint8_t, wire::kMadBytes>* keep = nullptr,
                  std::uint32_t qpn = 0, std::uint32_t qkey = 0, const std::vector<std::uint8_t>& private_data = {});

  // A SIDR answer was sent: kept (kSidrRepSent) for duplicates of the
  // request until the requester's resends would have run out.
  void keep_sidr_answer(Conn& c);

  void on_sidr_req(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events);

  void on_sidr_rep(const wire::CmMad& m, const Gid& peer, std::vector<Event>& events);

  // Whether `g` is one of our GIDs (the link-local one, the IPv4 one). The
  // port hands up every RoCEv2 frame it sees, and on a shared link (a veth
  // whose kernel has an address too) some are for another host's address:
  // that host answers for it, we must not.
  bool is_ours(const Gid& g) const;

  void receive(const ibv_wc& wc, std::vector<Event>& events);

  // What is due: a resend, a connection that gave up, an unanswered request.
  // Only the due entries of `timers` are visited.
  void resend_overdue(std::vector<Event>& events);

  // A request received (REQ, SIDR_REQ) that waits for the owner's answer:
  // kept, found by the peer's ID, timed out after request_ns, reported.
  void hold_request(Conn&& c, Event&& e, std::vector<Event>& events);
};

}  // namespace uroce::cm
