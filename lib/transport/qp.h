// A queue pair: its attributes and state, its send and receive queues,
// and the state of its three protocol roles (IBTA chapter 9.7):
//   requester (requester.cc): turns send WQEs into request packets;
//   completer (completer.cc): takes ACKs, NAKs and responses, completes WQEs,
//     runs the retransmit and RNR timers and go-back-N;
//   responder (responder.cc): executes requests, answers them in PSN order;
//   UD (ud.cc): datagrams both ways.
// The queues it shares with the application are in queues.h, the roles'
// functions in roles.h. Everything here is sized at creation; the data path
// allocates nothing.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "cc/dcqcn.h"
#include "cc/delay.h"
#include "transport/counters.h"
#include "transport/queues.h"
#include "transport/roles.h"
#include "transport/sr.h"
#include "wire/frame.h"
#include "wire/path_header.h"

namespace uroce::transport {

// Request packets in flight (sent, not yet acknowledged) per QP.
inline constexpr std::uint32_t kWindowPackets = 256;  // 1 MiB at 4 KiB MTU: far above any BDP here
// After a local ACK timeout the requester starts again with this many
// packets in flight, and doubles it with each acknowledgement that moves
// forward, up to kWindowPackets (as TCP's slow start after a retransmission
// timeout): a responder that was away (a software peer kept off its CPU,
// its receive ring full) is not met by a whole window at once, which it
// would drop again, spending the next retry the same way.
inline constexpr std::uint32_t kWindowAfterTimeout = 16;
// A request packet carries AckReq at a message's end and at least this often.
inline constexpr std::uint32_t kAckReqEvery = 32;
inline constexpr std::uint32_t kSrAckReqEvery = 8;  // selective repeat's
// A READ is asked for in segments of this many response packets, one READ
// request each, so that its answer in flight stays within the window too:
// the responder sends an answer at once and whole, and a receiver that
// cannot take it (an af_packet ring of 512 frames and a 4 MiB READ of 1024
// packets) loses its tail, which only the local ACK timeout finds (there is
// no later packet to show the gap). Two segments fill the window.
inline constexpr std::uint32_t kReadSegmentPackets = kWindowPackets / 2;

// A READ or atomic the responder has executed, kept for duplicates
// (IBTA 9.7.5.1.2-3: max_dest_rd_atomic responder resources).
struct ResponderResource {
  bool valid = false;
  bool atomic = false;
  bool atomic_write = false;  // ATOMIC WRITE (atomic is set too: no READ is answered from it)
  std::uint32_t first_psn = 0;
  std::uint32_t last_psn = 0;
  std::uint64_t orig = 0;  // atomic: the value returned
  std::uint32_t msn = 0;
};

// What the responder owes the requester, sent strictly in PSN order.
// Fields ordered by size: 64 bytes, one cache line (a QP's ring of them is
// most of an idle QP's memory).
struct Response {
  enum class Kind : std::uint8_t { kAck, kRead, kAtomicAck };
  Kind kind = Kind::kAck;
  std::uint8_t syndrome = 0;
  bool fatal = false;          // a NAK after which the QP is in ERR
  std::uint32_t psn = 0;       // ACK/NAK, atomic ACK: the BTH PSN; READ: next to send
  std::uint32_t msn = 0;
  // READ: the next bytes to send, at `va` under `rkey`; `src` is their host
  // address as resolved at `mr_epoch` (checked again once the epoch moves)
  std::uint32_t rkey = 0;
  std::uint32_t remaining = 0;
  std::uint32_t first_psn = 0;  // of the resource: decides First vs Middle
  std::uint32_t last_psn = 0;
  std::int32_t odp_pid = 0;  // `src` is on demand, in that process (mem/odp.h)
  const std::uint8_t* src = nullptr;
  std::uint64_t va = 0;
  std::uint64_t mr_epoch = 0;
  std::uint64_t orig = 0;  // atomic ACK
};
static_assert(sizeof(Response) == 64);

// Delay-based congestion control's state per RC QP (delay_cc.cc),
// allocated at RTR on a port that runs it (Env::delay): the window, and
// the departure times of the packets that asked for an ACK (first sends
// only, Karn's rule), oldest first, for the RTT of each ACK. Selective
// repeat keeps its own departure times (SrState::sent_ns) and leaves the
// ring empty.
inline constexpr std::uint32_t kDelaySendTimes = kWindowPackets;  // one per packet in flight at most
struct DelayState {
  struct SentAt {
    std::uint32_t psn = 0;
    std::uint64_t ns = 0;
  };
  cc::DelayWindow window;
  std::array<SentAt, kDelaySendTimes> sent{};
  std::uint32_t first = 0;  // the oldest entry's slot
  std::uint32_t count = 0;
  // Packets acknowledged since the last RTT sample (a READ's later
  // responses, an ACK whose packet was sent again): fed with the next one.
  std::uint32_t unsampled = 0;
};

struct QpCaps {
  std::uint32_t max_send_wr = 0;
  std::uint32_t max_recv_wr = 0;
  std::uint32_t max_send_sge = 0;
  std::uint32_t max_recv_sge = 0;
  std::uint32_t max_inline_data = 0;
  bool sq_sig_all = false;
};

struct Qp {
  // The members are in three groups, each together in memory: what the
  // engine reads or writes for a packet (so that a packet touches few
  // cache lines of a QP: with 10,000 QPs every QP is cold), what the
  // application's posts touch (the queues, their doorbell), and the
  // control path's own (the frame spec, the CNP headers).

  // --- The data path's --------------------------------------------------
  std::uint32_t qpn = 0;
  // RC, UC (requests without ACKs, IBTA 9.8) or UD (datagrams, 9.8.x):
  // the roles below branch on it where the rules differ.
  ibv_qp_type type = IBV_QPT_RC;
  ibv_qp_state state = IBV_QPS_RESET;
  std::uint32_t mtu = 1024;     // path MTU in bytes
  std::uint64_t pd = 0;  // ProtectionDomain::id(): the memory-region table's PD check
  CompletionRing* send_cq = nullptr;
  CompletionRing* recv_cq = nullptr;
  // The shared receive queue, for a QP that receives from one instead of
  // its own `rq`: a message's WQE is taken from it at its first packet and
  // held (srq_wqe) until the message completes.
  Srq* srq = nullptr;
  bool srq_held = false;
  // TransportOptions (include/uroce/verbs.h): selective repeat, spraying
  // and the BDP cap, set before RTR (control path).
  struct Options {
    bool selective_repeat = false;
    std::uint8_t spray_paths = 1;
    std::uint32_t bdp_packets = 0;
  } options;
  // Selective repeat's state (sr.h): allocated when the option is set.
  std::unique_ptr<SrState> sr;
  // Congestion control's cap on request packets in flight: the path's
  // bandwidth-delay product (cc::window_packets), set at RTR; 0: none.
  // Sender-side only, so it holds against any peer.
  std::uint32_t cc_window = 0;
  // Delay-based congestion control (cc = delay): allocated at RTR when the
  // port runs it; its window is a cap as cc_window is.
  std::unique_ptr<DelayState> delay;
  // XRC (IBTA annex A14): an initiator QP (XRC_SEND) only sends, a target
  // QP (XRC_RECV) only receives, each request into the SRQ of `xrcd` its
  // XRCETH names; both run RC's protocol.
  XrcDomain* xrcd = nullptr;  // XRC_RECV: its domain
  // The path, set with the address vector (RTR): the BTH's fixed fields
  // (P_Key, destination QP) and the headers (immutable on the data path);
  // path_spec below is what they are built from.
  wire::Bth bth_base{};
  wire::PathHeader path;
  ibv_qp_attr attr{};  // the attributes as last set
  // The engine's bookkeeping (lib/engine): the QP's doorbell slot, whether
  // it is on the engine's list of QPs to serve this poll, and the deadline
  // its timer-wheel entry was made for (0: none).
  struct Sched {
    std::uint32_t slot = 0;
    bool active = false;
    // Sent all it could in this poll's burst, with room to spare: it leaves
    // the engine's active list even while bursts fill (set by the engine).
    bool sated = false;
    // Its ACK was held back by the last poll (engine::Poll::kHoldingAcks):
    // the next poll sends it, holding or not.
    bool ack_held = false;
    std::uint64_t timer_at = 0;
  } sched;
  struct Requester {
    std::uint32_t psn = 0;        // next PSN to send
    std::uint32_t high_psn = 0;   // one past the highest PSN ever sent
    std::uint32_t pkt_index = 0;  // packets of sq[req_next] already sent
    std::uint32_t reads_outstanding = 0;  // READ/atomic WQEs sent, not completed
    std::uint32_t since_ack_req = 0;
    bool rnr_wait = false;
    std::uint64_t rnr_until = 0;
    std::uint32_t rnr_psn = 0;
  } req;
  struct Completer {
    std::uint32_t psn = 0;         // oldest PSN not yet acknowledged / answered
    std::uint32_t window = kWindowPackets;  // request packets the requester may have in flight
    std::uint8_t retry_left = 0;
    std::uint8_t rnr_left = 0;
    std::uint64_t deadline = 0;    // retransmit timer; 0 = disarmed
    // The last PSN sent that asks for a response (AckReq; a READ's last
    // response PSN): the timer runs only while such a PSN is unanswered.
    bool awaiting = false;
    std::uint32_t awaited_psn = 0;
    bool rewound = false;          // rewound since the last progress
    std::uint32_t rewound_psn = 0;
    // While rewound: the highest READ response PSN seen beyond `psn` (the
    // tail of the answer cut short rises; a resent answer starts lower).
    std::uint32_t rewound_seen = 0;
  } comp;
  // The engine's cursors of the queues (below): the next send WQE slot the
  // application fills as last taken in, the one the requester is sending,
  // the oldest not completed; the receive queue's as last taken in, and the
  // one the next SEND consumes.
  std::uint32_t sq_posted = 0;
  std::uint32_t req_next = 0;
  std::uint32_t comp_next = 0;
  std::uint32_t rq_posted = 0;
  std::uint32_t rq_next = 0;
  // comp_next and rq_next as last handed back to the application (the
  // rings' tails): publish_to_app writes a tail only when its cursor moved,
  // and reads no ring line to find out (with thousands of QPs, each a miss).
  std::uint32_t sq_retired = 0;
  std::uint32_t rq_retired = 0;
  struct Responder {
    std::uint32_t psn = 0;  // expected PSN
    std::uint32_t msn = 0;  // messages completed (24 bits on the wire)
    bool nak_sent = false;  // a sequence NAK was sent and the expected PSN has not come
    enum class Msg : std::uint8_t { kNone, kSend, kWrite } in_msg = Msg::kNone;
    // A plain ACK owed while `out` is empty (go-back-N only), held here on
    // the line the packet already touched instead of in a slot of `out`:
    // with thousands of QPs each slot is a cold line per message. Anything
    // queued after it first moves it into `out`, so it still leaves first.
    bool ack_owed = false;
    std::uint32_t ack_psn = 0;
    std::uint32_t ack_msn = 0;
    std::uint32_t offset = 0;             // bytes of the current message placed
    // A WRITE in progress: the host address of its RETH va, its DMA length,
    // and the RETH itself, checked again when the MR epoch moves (the
    // 32-bit members side by side: no padding in the data-path group).
    std::uint8_t* write_dst = nullptr;
    std::uint32_t write_len = 0;
    std::uint32_t write_rkey = 0;
    std::uint64_t write_va = 0;
    std::uint64_t write_epoch = 0;
    std::int32_t write_odp_pid = 0;       // write_dst is on demand, in that process
    std::uint32_t next_resource = 0;
    std::vector<ResponderResource> resources;
    ring::Slots<Response> out;
    std::uint32_t out_head = 0;
    std::uint32_t out_tail = 0;
  } resp;
  // Congestion control (congestion.cc): DCQCN's reaction point (the rate
  // of what this QP sends) and its notification point (CNPs for marked
  // packets it receives).
  struct Congestion {
    cc::DcqcnRate rate;
    bool started = false;           // rate reset at the first packet sent or CNP
    bool cnp_due = false;           // a CNP waits to go out
    bool cnp_sent = false;          // one has gone (last_cnp_ns is meaningful)
    std::uint64_t last_cnp_ns = 0;
    std::uint64_t next_send_ns = 0;  // pacing: the earliest departure of the next data packet
  } congestion;
  // Its counters; the ones every packet moves share the first line
  // (transport/counters.h).
  QpCounters counters;

  // --- The application's posts' -----------------------------------------
  // The application thread and the engine exchange work through the queues
  // (sq, rq below) as single-producer single-consumer rings: the application
  // fills slots and publishes the head; the engine takes it in at each poll
  // (sync_from_app) and publishes what it has retired as the tail. Nothing
  // else of the QP is touched by both (control operations run between bursts).
  alignas(64) std::atomic<ibv_qp_state> app_state{IBV_QPS_RESET};  // `state`, for post_send/post_recv
  // Rung after each post: the bit of this QP in its engine's doorbell
  // words, so the engine finds the QPs with new work without looking at
  // every QP. Set by the engine before the application can post.
  std::atomic<std::uint64_t>* doorbell = nullptr;
  std::uint64_t doorbell_bit = 0;
  // The summary word with one bit per doorbell word: set by the post that
  // finds its doorbell word empty, so a poll reads one summary word per 64
  // doorbell words (10,000 idle QPs: 3 words, not 157).
  std::atomic<std::uint64_t>* doorbell_summary = nullptr;
  std::uint64_t summary_bit = 0;
  QpCaps caps;
  std::vector<std::uint8_t> inline_buf;  // max_inline_data bytes per SQ slot
  std::vector<UdDest> ud_dest;           // UD: the destination of each SQ slot
  // Send queue: head published by the application, tail retired by the
  // engine (comp_next). The engine's own cursors run free; a slot is sq[i].
  ring::SpscRing<SendWqe> sq;
  // Receive queue: as the send queue (tail: rq_next).
  ring::SpscRing<RecvWqe> rq;

  // --- The control path's -----------------------------------------------
  // Allocated by attach_srq() for QPs on an SRQ only: a WQE is 408 bytes,
  // a fifth of a QP's own size.
  std::unique_ptr<RecvWqe> srq_wqe;
  // The fields `path` is built from, and its variant for CNPs (the CNP's
  // own traffic class and priority).
  wire::FrameSpec path_spec;
  wire::PathHeader cnp_path;
  bool reliable() const { return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV; }
  bool active() const { return state == IBV_QPS_RTS || state == IBV_QPS_SQD; }
  // Posted WQEs the requester has not sent (a go-back-N restart moves
  // req_next back, so a retransmission counts too).
  bool requests_unsent() const { return req_next != sq_posted; }
  // The responder owes the requester something: an ACK, NAK or response.
  bool answers_owed() const { return resp.ack_owed || resp.out_head != resp.out_tail; }
  bool receives() const {
    return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD || state == IBV_QPS_SQE;
  }
};

// Asks for the cache lines from `from` up to `to`, two members of one QP
// (their addresses, not offsetof: Qp is not standard-layout, and clang
// refuses offsetof on it).
inline void prefetch_lines(const void* from, const void* to) {
  const auto* first = static_cast<const char*>(from);
  const auto bytes = static_cast<std::size_t>(static_cast<const char*>(to) - first);
  for (std::size_t off = 0; off < bytes; off += 64) __builtin_prefetch(first + off);
}

// Asks for the lines a received packet reads (the data-path group and the
// first counter line) ahead of processing it.
inline void prefetch_data_path(const Qp& qp) {
  prefetch_lines(&qp, reinterpret_cast<const char*>(&qp.counters) + 64);
}

// Asks for the lines taking in a post reads (the application's group, the
// send queue's cursors) and those sending it reads (the data-path group).
inline void prefetch_posts(const Qp& qp) {
  prefetch_lines(&qp.app_state, &qp.rq);
  prefetch_data_path(qp);
}

// The most request packets the QP may have in flight: the window, or a
// BDP cap when one is smaller (TransportOptions::bdp_packets, the QP's own;
// cc_window, congestion control's). Selective repeat keeps at most
// kSackWindow (what a SACK can name).
inline std::uint32_t window_cap(const Qp& qp) {
  std::uint32_t most = qp.sr != nullptr ? kSackWindow : kWindowPackets;
  if (qp.options.bdp_packets != 0 && qp.options.bdp_packets < most) most = qp.options.bdp_packets;
  if (qp.cc_window != 0 && qp.cc_window < most) most = qp.cc_window;
  if (qp.delay != nullptr) most = std::min(most, qp.delay->window.window_packets());
  return most;
}

// The response packets one READ request asks for: half the window, so that
// two segments fill it (at least one packet under a small BDP cap).
inline std::uint32_t read_segment_packets(const Qp& qp) {
  return qp.options.bdp_packets == 0 && qp.cc_window == 0 && qp.sr == nullptr && qp.delay == nullptr
             ? kReadSegmentPackets
             : std::max<std::uint32_t>(1, window_cap(qp) / 2);
}

// One past the last packet (index from the WQE's first PSN) of the READ
// segment that packet `index` of a READ of `npackets` belongs to.
inline std::uint32_t read_segment_end(const Qp& qp, std::uint32_t npackets, std::uint32_t index) {
  const std::uint32_t seg = read_segment_packets(qp);
  const std::uint32_t end = (index / seg + 1) * seg;
  return end < npackets ? end : npackets;
}

// --- qp.cc: control path -----------------------------------------------------

// The engine's side: takes in the receive WQEs posted since it last looked
// (receives ring no doorbell outside ERR, qp_recv_posted: a message that
// needs one and finds none yet looks again first).
inline void rq_sync(Qp& qp, std::memory_order order = std::memory_order_acquire) {
  qp.rq_posted += qp.rq.ready_from(qp.rq_posted, nullptr, order);
}
// Whether at least `n` receive WQEs of the QP's own queue are at hand,
// taking in those posted since (rq_sync) when fewer were.
inline bool rq_has(Qp& qp, std::uint32_t n = 1) {
  if (qp.rq_posted - qp.rq_next < n) rq_sync(qp);
  return qp.rq_posted - qp.rq_next >= n;
}
// The receive WQE of the message in progress, or of the next one: the QP's
// own queue's, or the one held from its SRQ.
inline RecvWqe& recv_wqe(Qp& qp) { return qp.srq != nullptr ? *qp.srq_wqe : qp.rq[qp.rq_next]; }

// Puts `qp` on `srq` (at creation, before it receives).
inline void attach_srq(Qp& qp, Srq* srq) {
  qp.srq = srq;
  qp.srq_wqe = std::make_unique<RecvWqe>();
}
// Whether a receive WQE is at hand without taking one from an SRQ.
inline bool recv_in_use(const Qp& qp) { return qp.srq != nullptr ? qp.srq_held : qp.rq_next != qp.rq_posted; }

// Sizes the queues; the QP starts in RESET.
void qp_init(Qp& qp, std::uint32_t qpn, std::uint64_t pd, const QpCaps& caps, CompletionRing* send_cq,
             CompletionRing* recv_cq, ibv_qp_type type = IBV_QPT_RC);
// Applies an ibv_modify_qp that check_modify() accepted. `peer_mac` and
// `local` fill the frame template when the mask has IBV_QP_AV.
void qp_apply(Qp& qp, const ibv_qp_attr& attr, int mask, ibv_qp_state next, const std::uint8_t peer_mac[6],
              const std::uint8_t local_mac[6], const ibv_gid& local_gid, const cc::DcqcnParams* dcqcn = nullptr,
              const cc::DelayParams* delay = nullptr);
// The frame fields of an address vector (ibv_ah_attr with its GRH: the
// peer's GID, traffic class, hop limit, flow label), from `local_gid` and
// `local_mac` to `peer_mac`; `flow` picks the UDP source port.
wire::FrameSpec av_frame_spec(const ibv_ah_attr& ah, const std::uint8_t peer_mac[6], const std::uint8_t local_mac[6],
                              const ibv_gid& local_gid, std::uint32_t flow);
// The headers data packets on `spec` carry (ECN-capable with congestion
// control on).
wire::PathHeader data_path(wire::FrameSpec spec, const cc::DcqcnParams* dcqcn);
// Builds qp.path and qp.cnp_path from qp.path_spec: with congestion control
// on, data carries ECN-capable transport and CNPs their own DSCP and 802.1p
// priority. Control path.
void qp_build_paths(Qp& qp, const cc::DcqcnParams* dcqcn);
// The QP enters ERR: every outstanding and later WR completes with WR_FLUSH_ERR.
void qp_enter_error(Qp& qp);

}  // namespace uroce::transport
