// The communication manager of one Context (IBTA chapter 12): QP1, and the
// IB CM protocol that connects RC QPs with MADs to the peer's QP1 as RoCEv2
// peers send them (REQ -> REP -> RTU; DREQ -> DREP; REJ, MRA), with
// rdma_cm's service IDs and private-data header so that Linux's rdma_cm
// (rping, perftest -R, over Soft-RoCE or an RNIC) talks to it.
//
// Single-threaded: the owner calls poll() often (it takes in MADs, resends
// unanswered ones, and reports events); every other call is from the same
// thread. The QPs it connects move through their states here, as the
// kernel's CM moves them for rdma_cm: INIT at connect(), RTR and RTS when
// the REP is in (active side) or at accept() (passive: RTR, then RTS at the
// RTU), ERR at a disconnect. A QP the program made and moves itself
// (rdma_connect or rdma_accept with conn_param->qp_num, no rdma_create_qp)
// is never moved here: qp_attr() tells the program its attributes, and on
// the active side establish() sends the RTU once it has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "uroce/verbs.h"
#include "wire/cm_mad.h"

namespace uroce::cm {

// What poll() reports.
enum class EventType {
  kRequest,       // passive: a REQ (or SIDR_REQ) for a service we listen on (accept() or reject() it)
  kEstablished,   // both: the connection is up (active: REP taken, RTU sent; passive: RTU in);
                  // SIDR: the SIDR_REP said "valid QP" (active side only)
  kRejected,      // active or passive: a REJ came (reason, private data); passive: also
                  // for a request not answered yet, which the peer withdrew
  kUnreachable,   // a REQ, REP or DREQ went unanswered through every retry, or a
                  // kRequest was not answered within Timing::request_ns (REJ timeout sent);
                  // SIDR: the SIDR_REQ went unanswered, or the SIDR_REP refused (reason)
  kDisconnected,  // a DREQ came (answered with DREP), or our DREQ's DREP did, or it timed out
  kConnectResponse,  // active, the QP the program's own (ConnectParams::qp null): the REP
                     // came (rep is set); the program moves its QP (qp_attr), then
                     // establish() sends the RTU. No kEstablished follows on this side.
};
const char* event_name(EventType t);

struct Event {
  EventType type = EventType::kRequest;
  std::uint32_t comm_id = 0;   // ours: the handle for accept(), reject(), disconnect()
  void* listener = nullptr;    // kRequest: the owner given to listen()
  wire::CmReq req;             // kRequest: the REQ as it came
  wire::CmRep rep;             // kEstablished on the active side, kConnectResponse: the REP as it came
  bool active = false;         // kEstablished, kConnectResponse: ours was the REQ (rep is set)
  ibv_gid peer_gid{};          // kRequest: the address it came from
  std::uint16_t reason = 0;    // kRejected: the REJ's reason (wire::RejReason); kUnreachable
                               // of a SIDR request: the SIDR_REP's status (0: no answer)
  std::vector<std::uint8_t> private_data;  // REQ (after rdma_cm's header), REP, REJ, DREQ; SIDR
                                           // REQ (after the header), SIDR REP
  // kUnreachable of a REQ, REP or DREQ that went unanswered: why, in words
  // (how many were sent, and whether the peer's Ethernet address was ever
  // resolved), for librdmacm to print under UROCE_RDMACM_DEBUG or
  // UROCE_COUNTERS: a program only says "unexpected CM event 7".
  std::string why;
  // SIDR (IBTA 12.11): no connection, only the peer's UD QP. kRequest: the
  // SIDR_REQ's service ID and the first bytes of its private data (rdma_cm's
  // header) in req; kEstablished (active): the SIDR_REP's QPN and Q_Key in
  // rep.local_qpn and rep.local_qkey, the peer's GID in peer_gid.
  bool sidr = false;
  // ECE (rdma-core's enhanced connection establishment): the peer's vendor
  // id (0: none) and options. kRequest: the REQ's; kEstablished (active),
  // kConnectResponse: the REP's.
  std::uint32_t ece_vendor_id = 0, ece_options = 0;
};

// The counters of the manager, for tests and telemetry.
struct Counters {
  std::uint64_t mads_received = 0;
  std::uint64_t mads_sent = 0;
  std::uint64_t mads_resent = 0;
  std::uint64_t mads_refused = 0;         // malformed or not for a CM (wire::MadStatus)
  std::uint64_t rej_sent_no_service = 0;  // REQ for a service nobody listens on
  std::uint64_t rej_sent_unknown_conn = 0;// REP for a connection we do not know
  std::uint64_t drep_sent_unknown_conn = 0;  // DREQ for a connection we do not know
  std::uint64_t unknown_conn_dropped = 0; // RTU, DREP, REJ, MRA for one we do not know
  std::uint64_t duplicates = 0;           // a REQ, REP or DREQ seen again (answered again)
  std::uint64_t req_retried_no_service = 0;  // REQs sent again after a REJ invalid service ID
  std::uint64_t req_refused_backlog = 0;  // REQ beyond its listener's backlog (REJ no resources)
  std::uint64_t req_refused_full = 0;     // REQ beyond Timing::max_pending_requests (REJ no resources)
  std::uint64_t req_timed_out = 0;        // kRequest not answered within Timing::request_ns (REJ timeout)
  // The address path (the peer's Ethernet address, its address handle):
  // nothing here waits for a resolution, and what spoofed sources can make
  // it hold is bounded.
  std::uint64_t mads_queued_unresolved = 0;     // held until the peer's address is known
  std::uint64_t mads_dropped_unreachable = 0;   // the peer's GID did not resolve (now or recently)
  std::uint64_t mads_dropped_unresolved = 0;    // held past their deadline (2 s) without an answer
  std::uint64_t mads_dropped_queue_full = 0;    // more held for the peer (4), in all (256), or peers (16)
  std::uint64_t ahs_evicted = 0;                // address handles destroyed to make room (1,024 kept)
  std::uint64_t unsolicited_replies_limited = 0;  // REJ/DREP to unknown connections over the rate (100/s)
  // MADs sent to an address that is not one of our GIDs (a kernel address
  // on the same link, another host's): dropped unanswered, since the host
  // that owns the address answers for it.
  std::uint64_t mads_dropped_not_ours = 0;
  // SIDR (IBTA 12.11).
  std::uint64_t sidr_rep_sent_no_service = 0;  // SIDR_REQ for a service nobody listens on
                                               // (SIDR_REP "service ID not supported")
  std::uint64_t sidr_req_refused = 0;          // beyond a backlog or max_pending_requests
                                               // (SIDR_REP "no QP")
};

// rdma_listen's backlog when none (or more) is asked: Linux's default
// net.rdma_ucm.max_backlog.
constexpr std::uint32_t kMaxBacklog = 1024;

struct Timing {
  std::uint64_t resend_ns = 200'000'000;  // a REQ, REP or DREQ unanswered this long is sent again
  int max_resends = 10;
  // A REQ refused with "invalid service ID" is sent again this many times,
  // this far apart, before the refusal is reported: a peer's listener may be
  // a moment behind its own client (perftest -R's server re-listens after a
  // handshake its client has already passed, and perftest 4.5's retry of a
  // refused connection does not work). Linux's CM reports it at once.
  int no_service_retries = 5;
  std::uint64_t no_service_wait_ns = 100'000'000;
  // Requests (kRequest) are state a peer makes at will: each lives at most
  // this long unanswered (then REJ timeout, kUnreachable), and at most this
  // many wait at once over all listeners (each listener: its backlog).
  std::uint64_t request_ns = 10'000'000'000;
  std::uint32_t max_pending_requests = 4096;
};

// What a connection request names (Backend::connect).
struct ConnectParams {
  // RC, in RESET or INIT: the manager moves it. nullptr: the program's own
  // QP, numbered `qpn`, which the program moves itself (rdma_connect with
  // conn_param->qp_num on an ID with no QP): the manager never touches it.
  QueuePair* qp = nullptr;
  std::uint32_t qpn = 0;       // with no `qp`: the number the REQ names
  bool srq = false;            // with no `qp`: it receives from an SRQ
  ibv_gid remote_gid{};
  std::uint8_t sgid_index = 1; // our GID of the remote's family
  std::uint64_t service_id = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  std::uint8_t responder_resources = 16;  // READs/atomics we take
  std::uint8_t initiator_depth = 16;      // READs/atomics we issue
  std::uint8_t retry_count = 7;
  std::uint8_t rnr_retry_count = 7;
  std::uint8_t timeout = 14;
  std::vector<std::uint8_t> private_data;  // up to 92 bytes (rdma_cm's header first, if any)
  // ECE offered in the REQ (vendor id 0: none). With `qp`, what the REP
  // agrees to (the same vendor id, the options both name) is applied to it
  // before RTR (set_ece); a REP of another vendor, or none, agrees to none.
  std::uint32_t ece_vendor_id = 0, ece_options = 0;
};

// What a SIDR request names (Backend::sidr_request): no QP of ours, the
// peer's is what comes back.
struct SidrParams {
  ibv_gid remote_gid{};
  std::uint64_t service_id = 0;
  std::vector<std::uint8_t> private_data;  // up to 216 bytes (rdma_cm's header first, if any)
};

// What an answer to a kRequest names (Backend::accept).
// AcceptParams::timeout: the REQ's Local ACK Timeout (at least 1, as Linux
// takes it: its path's packet life time plus one).
inline constexpr std::uint8_t kTimeoutOfReq = 0xff;

struct AcceptParams {
  QueuePair* qp = nullptr;  // RC, in RESET or INIT; nullptr: the program's own, as in ConnectParams
  std::uint32_t qpn = 0;
  bool srq = false;
  std::uint8_t responder_resources = 16;
  std::uint8_t initiator_depth = 16;
  std::uint8_t rnr_retry_count = 7;
  // The QP's local ACK timeout (4.096 us * 2^timeout), or kTimeoutOfReq:
  // the one the REQ names (its primary path's Local ACK Timeout), as
  // Linux's CM sets the passive side's QP.
  std::uint8_t timeout = 14;
  std::vector<std::uint8_t> private_data;  // up to 196 bytes (a SIDR request's answer: 136)
  // ECE the REP answers with (vendor id 0: none): what this side agrees to,
  // applied to `qp` before RTR (set_ece) if the REQ named the same vendor.
  std::uint32_t ece_vendor_id = 0, ece_options = 0;
};

// What librdmacm drives: the manager of a Context in process (Manager), or
// the one of uroced through its socket (lib/rdmacm/cm_backend.h), with the
// same calls and events. Each call as Manager's says.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int listen(std::uint64_t service_id, void* owner, std::uint32_t backlog = kMaxBacklog) = 0;
  virtual int unlisten(std::uint64_t service_id) = 0;
  virtual int connect(const ConnectParams& p, std::uint32_t& comm_id) = 0;
  virtual int accept(std::uint32_t comm_id, const AcceptParams& p) = 0;
  // `reason`: kConsumerReject, or kVendorOptionNotSupported (rdma_reject_ece).
  virtual int reject(std::uint32_t comm_id, const std::vector<std::uint8_t>& private_data,
                     wire::RejReason reason = wire::RejReason::kConsumerReject) = 0;
  virtual int disconnect(std::uint32_t comm_id) = 0;
  virtual void forget_qp(QueuePair* qp) = 0;
  virtual std::size_t poll(std::vector<Event>& events) = 0;
  virtual int sidr_request(const SidrParams& p, std::uint32_t& request_id) = 0;
  virtual int qp_attr(std::uint32_t comm_id, ibv_qp_state state, ibv_qp_attr& attr, int& mask) = 0;
  virtual int establish(std::uint32_t comm_id) = 0;
};

class Manager final : public Backend {
 public:
  // QP1 on `ctx`: a UD QP with the GSI Q_Key, its receives posted. nullptr
  // and `error` if the context has a QP1 already or is attached to uroced.
  static std::unique_ptr<Manager> open(Context& ctx, std::string& error, Timing timing = {});
  // The same, and `on_mad(arg)` is called (on an engine's thread: a short
  // call, an eventfd write) when QP1 completes something after a poll():
  // an owner that sleeps between polls (uroced's loop) wakes for MADs.
  static std::unique_ptr<Manager> open(Context& ctx, std::string& error, Timing timing, void (*on_mad)(void*),
                                       void* arg);
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // REQs for `service_id` become kRequest events carrying `owner`; while
  // `backlog` of them (1..kMaxBacklog; 0: kMaxBacklog) wait for accept() or
  // reject(), more are refused with REJ "no resources". EADDRINUSE if
  // someone listens on it already.
  int listen(std::uint64_t service_id, void* owner, std::uint32_t backlog = kMaxBacklog) override;
  int unlisten(std::uint64_t service_id) override;

  using ConnectParams = cm::ConnectParams;
  using AcceptParams = cm::AcceptParams;

  // Sends a REQ; `comm_id` names the connection in later events. EINVAL
  // for a QP not RC or in another state, too much private data.
  int connect(const ConnectParams& p, std::uint32_t& comm_id) override;

  // Answers a kRequest: the QP goes to RTR with the REQ's path and PSN, a
  // REP goes back; kEstablished follows the RTU. ENOENT for no such request.
  // A SIDR request: a SIDR_REP "valid QP" with the QP's number and Q_Key
  // (a UD QP, in INIT or later; else EINVAL), and nothing follows.
  int accept(std::uint32_t comm_id, const AcceptParams& p) override;
  // Answers a kRequest with a REJ (`reason`: consumer reject, or vendor
  // option not supported for rdma_reject_ece), and refuses the
  // REP of a kConnectResponse the same way; a SIDR request with a SIDR_REP
  // "rejected" (12.11.2), its private data cut to 136 bytes.
  int reject(std::uint32_t comm_id, const std::vector<std::uint8_t>& private_data,
             wire::RejReason reason = wire::RejReason::kConsumerReject) override;
  // Sends a DREQ and moves the QP to ERR; kDisconnected follows the DREP.
  int disconnect(std::uint32_t comm_id) override;
  // Ends connection `comm_id` whatever its state, its owner gone (uroced's
  // client that held it): a request is refused (REJ consumer reject), one
  // being made withdrawn (REJ timeout, as Linux's CM when an ID is
  // destroyed), an established one disconnected (DREQ, resent until its
  // DREP). Events that still come for it (that DREP's kDisconnected) are
  // for nobody: the caller drops them. ENOENT for no such connection.
  int abandon(std::uint32_t comm_id);
  // `qp` is being destroyed: the connections it served go on without it
  // (a later DREQ or DREP moves no QP).
  void forget_qp(QueuePair* qp) override;

  // Sends a SIDR_REQ (IBTA 12.11.1) for `service_id` to the peer's CM;
  // `request_id` names it in the kEstablished (the peer's QPN and Q_Key) or
  // kUnreachable that follows. Resent as a REQ is (Timing), and, refused
  // with "service ID not supported", tried again as a REQ is after "invalid
  // service ID". EINVAL for more than 216 bytes of private data.
  int sidr_request(const SidrParams& p, std::uint32_t& request_id) override;
  // What a QP of connection `comm_id` is given to move to `state` (INIT,
  // RTR or RTS) as the manager would move it, from what the connection
  // knows (rdma_init_qp_attr; Linux's ib_cm_init_qp_attr): INIT the port,
  // P_Key index and access (remote READ and atomics only with responder
  // resources); RTR the path, MTU, peer's QPN, receive PSN, responder
  // resources, RNR timer; RTS the send PSN, ACK timeout, retry counts,
  // initiator depth. On the passive side the values hold before accept()
  // (the REQ's, and the PSN the REP will carry), on the active side INIT
  // after connect() and the rest once the REP is in. EINVAL for a state
  // not yet known (RTR before the REP) or not one of the three; ENOENT for
  // no such connection.
  int qp_attr(std::uint32_t comm_id, ibv_qp_state state, ibv_qp_attr& attr, int& mask) override;
  // kConnectResponse taken and the program's QP moved: sends the RTU, the
  // connection is up (no event). EINVAL unless it waits for that.
  int establish(std::uint32_t comm_id) override;

  // Takes in the MADs that arrived, resends what is overdue, and appends
  // what happened to `events`. Returns the number of events added. The
  // engines run elsewhere (workers, or the caller's progress()). Each MAD
  // and each timer costs O(log n) in the connections held, never O(n).
  std::size_t poll(std::vector<Event>& events) override;

  const Counters& counters() const;
  // Connections held, and those of them waiting as kRequest (for tests).
  std::size_t connections() const;
  std::size_t pending_requests() const;
  // Address handles held for peers' QP1 (at most 1,024, least recently used
  // destroyed first).
  std::size_t address_handles() const;

  // How the manager moves the QPs it connects through their states:
  // QueuePair::modify by default; a verbs library sets its own
  // (ibv_modify_qp, which keeps its own view of the QP's state in step).
  using ModifyFn = int (*)(void* arg, QueuePair* qp, ibv_qp_attr& attr, int mask);
  void set_modify(ModifyFn fn, void* arg);
  // How the manager gives a QP the ECE agreed (before it moves it to RTR):
  // by default it sets the QP's selective_repeat to the agreement's
  // kEceSelectiveRepeat (QueuePair::set_transport_options); a verbs library
  // sets its own (ibv_set_ece, which keeps the QP's ECE for ibv_query_ece).
  using EceFn = int (*)(void* arg, QueuePair* qp, std::uint32_t vendor_id, std::uint32_t options);
  void set_ece(EceFn fn, void* arg);

 private:
  struct Impl;
  explicit Manager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace uroce::cm
