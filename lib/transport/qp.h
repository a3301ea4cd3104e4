// An RC queue pair: its attributes and state, its send and receive queues,
// and the state of its three protocol roles (IBTA chapter 9.7):
//   requester (requester.cc): turns send WQEs into request packets;
//   completer (completer.cc): takes ACKs, NAKs and responses, completes WQEs,
//     runs the retransmit and RNR timers and go-back-N;
//   responder (responder.cc): executes requests, answers them in PSN order.
// Everything here is sized at creation; the data path allocates nothing.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "cc/dcqcn.h"
#include "mem/mr_table.h"
#include "transport/counters.h"
#include "wire/crc32.h"
#include "wire/frame.h"
#include "wire/path_header.h"
#include "wire/tx_frame.h"

namespace uroce::transport {

inline constexpr std::uint32_t kMaxSge = wire::TxFrame::kMaxPieces;
inline constexpr std::uint32_t kInlineLkey = 0;  // marks an SGE holding inline data (0 is never an MR key)
// Request packets in flight (sent, not yet acknowledged) per QP.
inline constexpr std::uint32_t kWindowPackets = 256;  // 1 MiB at 4 KiB MTU: far above any BDP here
// A request packet carries AckReq at a message's end and at least this often.
inline constexpr std::uint32_t kAckReqEvery = 32;

// Completion events of one CQ (ibv_req_notify_cq), shared by its rings:
// armed once, fired once, by the first completion that matches the arming
// (IBTA 11.4.2.2: "next" is any completion; "solicited" is a receive with
// the SE bit, or any completion in error).
struct CqEvents {
  enum : int { kDisarmed = 0, kSolicited = 1, kNext = 2 };
  std::atomic<int> armed{kDisarmed};
  void (*fire)(void* arg) = nullptr;  // on the thread that pushed the completion
  void* arg = nullptr;
  // Fires if armed for a completion of this kind, disarming.
  void offer(bool solicited) {
    int a = armed.load(std::memory_order_seq_cst);
    if (a == kDisarmed || (a == kSolicited && !solicited)) return;
    if (armed.compare_exchange_strong(a, kDisarmed)) fire(arg);
  }
};

// A completion queue's ring: the engine produces, the application polls.
// Single producer, single consumer, lock-free.
class CompletionRing {
 public:
  explicit CompletionRing(std::uint32_t capacity, CqEvents* events = nullptr)
      : ring_(capacity), capacity_(capacity), events_(events) {}
  // False (and the ring is marked overflowed) when full. `solicited`: a
  // receive whose last packet had the SE bit.
  bool push(const ibv_wc& wc, bool solicited = false);
  int poll(int n, ibv_wc* out);  // -EOVERFLOW once overflowed
  std::uint32_t capacity() const { return capacity_; }
  bool overflowed() const { return overflow_.load(std::memory_order_acquire); }
  // Whether completions wait to be polled (the application's thread).
  bool pending() const {
    return head_.load(std::memory_order_seq_cst) != tail_.load(std::memory_order_relaxed);
  }
  std::uint32_t users = 0;  // QPs attached (control path)

 private:
  std::vector<ibv_wc> ring_;
  std::uint32_t capacity_;
  std::atomic<std::uint64_t> head_{0};  // next to write
  std::atomic<std::uint64_t> tail_{0};  // next to read
  std::atomic<bool> overflow_{false};
  CqEvents* events_;  // nullptr: nobody waits for events
};

struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
  std::uint8_t* host = nullptr;  // resolved when the WQE is first processed
};

enum class WqeKind : std::uint8_t { kSend, kWrite, kRead, kAtomic };

// A send WQE's fields but its SGE list: what post_send resets (the whole
// WQE is 480 bytes; zeroing it per post was a fifth of an 8-byte WRITE's
// posting cost).
struct SendWqeFields {
  std::uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  WqeKind kind = WqeKind::kSend;
  std::uint32_t send_flags = 0;
  std::uint32_t imm_data = 0;         // as in ibv_send_wr: already big-endian
  std::uint32_t invalidate_rkey = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  std::uint32_t length = 0;
  std::uint8_t num_sge = 0;
  bool resolved = false;
  std::uint64_t mr_epoch = 0;  // MrTable::epoch() when resolved
  // Requester: the PSNs this WQE occupies, fixed when it is first sent.
  bool started = false;
  std::uint32_t first_psn = 0;
  std::uint32_t npackets = 0;
};

struct SendWqe : SendWqeFields {
  std::array<Sge, kMaxSge> sge{};  // num_sge of them in use
};

// Every field of SendWqeFields to its default, written in place: assigning
// a zeroed temporary made the compiler fill one on the stack and copy it,
// a store-forwarding stall on every post.
inline void reset_fields(SendWqe& w) {
  static_assert(sizeof(SendWqeFields) == 96, "a field was added or removed: reset it here");
  w.wr_id = 0;
  w.opcode = IBV_WR_SEND;
  w.kind = WqeKind::kSend;
  w.send_flags = 0;
  w.imm_data = 0;
  w.invalidate_rkey = 0;
  w.remote_addr = 0;
  w.rkey = 0;
  w.compare_add = 0;
  w.swap = 0;
  w.length = 0;
  w.num_sge = 0;
  w.resolved = false;
  w.mr_epoch = 0;
  w.started = false;
  w.first_psn = 0;
  w.npackets = 0;
}

struct RecvWqe {
  std::uint64_t wr_id = 0;
  std::uint32_t length = 0;
  std::uint8_t num_sge = 0;
  bool resolved = false;
  std::uint64_t mr_epoch = 0;  // MrTable::epoch() when resolved
  std::array<Sge, kMaxSge> sge{};
};

// A READ or atomic the responder has executed, kept for duplicates
// (IBTA 9.7.5.1.2-3: max_dest_rd_atomic responder resources).
struct ResponderResource {
  bool valid = false;
  bool atomic = false;
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
  const std::uint8_t* src = nullptr;
  std::uint64_t va = 0;
  std::uint64_t mr_epoch = 0;
  std::uint64_t orig = 0;  // atomic ACK
};
static_assert(sizeof(Response) == 64);

template <typename T>
class FixedRing {
 public:
  void init(std::uint32_t capacity) {
    std::uint32_t c = 1;
    while (c < capacity) c <<= 1;
    slots_.assign(c, T{});
    mask_ = c - 1;
    limit_ = capacity;
  }
  T& operator[](std::uint32_t i) { return slots_[i & mask_]; }
  const T& operator[](std::uint32_t i) const { return slots_[i & mask_]; }
  std::uint32_t limit() const { return limit_; }
  std::uint32_t capacity() const { return mask_ + 1; }
  std::uint32_t slot(std::uint32_t i) const { return i & mask_; }

 private:
  std::vector<T> slots_;
  std::uint32_t mask_ = 0;
  std::uint32_t limit_ = 0;
};

// A shared receive queue (IBTA 10.2.9.5, 11.2.3): receive WQEs any RC QP
// attached to it consumes, one per incoming message, in the order posted.
// The application posts (one producer); the engine that serves every QP on
// it takes (one consumer: lib/verbs puts those QPs on one engine), so it is
// a single-producer single-consumer ring like a QP's own receive queue.
struct Srq {
  std::uint64_t pd = 0;  // ProtectionDomain::id()
  std::uint32_t max_sge = 0;
  FixedRing<RecvWqe> ring;
  std::atomic<std::uint32_t> published{0};  // application -> engine: the next free slot
  std::atomic<std::uint32_t> taken{0};      // engine -> application: WQEs taken so far
  // srq_limit (ibv_modify_srq): when fewer WQEs than this remain after a
  // take, the engine calls on_limit once and disarms it (sets 0), as
  // IBV_EVENT_SRQ_LIMIT_REACHED works. 0: not armed.
  std::atomic<std::uint32_t> limit{0};
  void (*on_limit)(void* arg) = nullptr;
  void* arg = nullptr;
};

// ibv_post_srq_recv for one WR (application side): 0, ENOMEM (full) or
// EINVAL (too many SGEs).
int srq_post_recv(Srq& srq, const ibv_recv_wr& wr);
// The engine takes the oldest WQE into `out`; false when none is posted.
bool srq_take(Srq& srq, RecvWqe& out);
// WQEs posted and not yet taken (either side may ask; a snapshot).
std::uint32_t srq_count(const Srq& srq);

// Where a UD send goes (ibv_send_wr.wr.ud): the address handle's headers,
// copied at post time (the AH may be destroyed once the post returns, as
// RNICs copy the address vector into the WQE), the destination QP and Q_Key.
struct UdDest {
  wire::PathHeader path;
  std::uint32_t qpn = 0;
  std::uint32_t qkey = 0;  // as given: the high bit set means "the QP's own Q_Key" (IBTA 10.2.5)
};

// The 40 bytes a UD receive places before the payload (IBTA 11.4.1.1: the
// GRH). RoCEv2 carries an IP header instead: IPv6's fills them, IPv4's 20
// bytes go in the last 20 (as rdma-core's ibv_init_ah_from_wc reads them).
inline constexpr std::uint32_t kGrhBytes = 40;

struct QpCaps {
  std::uint32_t max_send_wr = 0;
  std::uint32_t max_recv_wr = 0;
  std::uint32_t max_send_sge = 0;
  std::uint32_t max_recv_sge = 0;
  std::uint32_t max_inline_data = 0;
  bool sq_sig_all = false;
};

struct Qp {
  // Identity and configuration (control path).
  std::uint32_t qpn = 0;
  // RC, UC (requests without ACKs, IBTA 9.8) or UD (datagrams, 9.8.x):
  // the roles below branch on it where the rules differ.
  ibv_qp_type type = IBV_QPT_RC;
  std::uint64_t pd = 0;  // ProtectionDomain::id(): the memory-region table's PD check
  QpCaps caps;
  ibv_qp_state state = IBV_QPS_RESET;
  ibv_qp_attr attr{};  // the attributes as last set
  CompletionRing* send_cq = nullptr;
  CompletionRing* recv_cq = nullptr;
  // The path, set with the address vector (RTR): the fields the headers
  // are built from (control path only), the headers themselves (immutable on
  // the data path), their variant for CNPs (the CNP's own traffic class and
  // priority), and the BTH's fixed fields (P_Key, destination QP).
  wire::FrameSpec path_spec;
  wire::PathHeader path;
  wire::PathHeader cnp_path;
  wire::Bth bth_base{};
  std::uint32_t mtu = 1024;     // path MTU in bytes
  QpCounters counters;

  // The application thread and the engine exchange work through the queues
  // as single-producer single-consumer rings: the application fills slots
  // and publishes its producer cursor; the engine takes it in at each poll
  // (sync_from_app) and publishes what it has retired. Nothing else of the
  // QP is touched by both (control operations run between bursts).
  std::atomic<std::uint32_t> sq_published{0};  // application -> engine: next free SQ slot
  std::atomic<std::uint32_t> sq_retired{0};    // engine -> application: comp_next
  std::atomic<std::uint32_t> rq_published{0};
  std::atomic<std::uint32_t> rq_retired{0};
  std::atomic<ibv_qp_state> app_state{IBV_QPS_RESET};  // `state`, for post_send/post_recv
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

  // The engine's bookkeeping (lib/engine): the QP's doorbell slot, whether
  // it is on the engine's list of QPs to serve this poll, and the deadline
  // its timer-wheel entry was made for (0: none).
  struct Sched {
    std::uint32_t slot = 0;
    bool active = false;
    // Sent all it could in this poll's burst, with room to spare: it leaves
    // the engine's active list even while bursts fill (set by the engine).
    bool sated = false;
    std::uint64_t timer_at = 0;
    // What publish_to_app last stored in sq_retired / rq_retired: a cursor
    // that has not moved is not stored again (the application thread's
    // cache line stays put).
    std::uint32_t sq_retired = 0;
    std::uint32_t rq_retired = 0;
  } sched;

  // Send queue. Cursors run free; a slot is sq[i].
  FixedRing<SendWqe> sq;
  std::vector<std::uint8_t> inline_buf;  // max_inline_data bytes per SQ slot
  std::vector<UdDest> ud_dest;           // UD: the destination of each SQ slot
  std::uint32_t sq_posted = 0;  // next slot the application fills
  std::uint32_t req_next = 0;   // the WQE the requester is sending
  std::uint32_t comp_next = 0;  // the oldest WQE not completed

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
    std::uint8_t retry_left = 0;
    std::uint8_t rnr_left = 0;
    std::uint64_t deadline = 0;    // retransmit timer; 0 = disarmed
    // The last PSN sent that asks for a response (AckReq; a READ's last
    // response PSN): the timer runs only while such a PSN is unanswered.
    bool awaiting = false;
    std::uint32_t awaited_psn = 0;
    bool rewound = false;          // rewound since the last progress
    std::uint32_t rewound_psn = 0;
  } comp;

  // Receive queue.
  FixedRing<RecvWqe> rq;
  std::uint32_t rq_posted = 0;
  std::uint32_t rq_next = 0;  // the WQE the next SEND consumes
  // Or a shared one: a message's WQE is taken from it at its first packet
  // and held here until the message completes.
  Srq* srq = nullptr;
  bool srq_held = false;
  // Allocated by attach_srq() for QPs on an SRQ only: a WQE is 408 bytes,
  // a fifth of a QP's own size.
  std::unique_ptr<RecvWqe> srq_wqe;

  struct Responder {
    std::uint32_t psn = 0;  // expected PSN
    std::uint32_t msn = 0;  // messages completed (24 bits on the wire)
    bool nak_sent = false;  // a sequence NAK was sent and the expected PSN has not come
    enum class Msg : std::uint8_t { kNone, kSend, kWrite } in_msg = Msg::kNone;
    std::uint32_t offset = 0;             // bytes of the current message placed
    std::uint8_t* write_dst = nullptr;    // WRITE in progress: host address of its RETH va
    std::uint32_t write_len = 0;          // its DMA length
    std::uint64_t write_va = 0;           // its RETH, checked again when the MR epoch moves
    std::uint32_t write_rkey = 0;
    std::uint64_t write_epoch = 0;
    std::vector<ResponderResource> resources;
    std::uint32_t next_resource = 0;
    FixedRing<Response> out;
    std::uint32_t out_head = 0;
    std::uint32_t out_tail = 0;
  } resp;

  bool reliable() const { return type == IBV_QPT_RC; }
  bool active() const { return state == IBV_QPS_RTS || state == IBV_QPS_SQD; }
  // Posted WQEs the requester has not sent (a go-back-N restart moves
  // req_next back, so a retransmission counts too).
  bool requests_unsent() const { return req_next != sq_posted; }
  bool receives() const {
    return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD || state == IBV_QPS_SQE;
  }
};

// Everything the roles need from outside the QP, per engine.
struct Env {
  mem::MrTable* mrs = nullptr;
  wire::Crc32Fn crc32 = wire::crc32_default;
  std::uint64_t now = 0;
  bool ipv4_checksum_offload = false;  // the port fills IPv4 header checksums
  const cc::DcqcnParams* dcqcn = nullptr;  // congestion control; nullptr: off
  // Writable heads for the frames the fill functions write, taken from the
  // top; the engine provides at least as many as the room it offers.
  wire::TxHead* heads = nullptr;
  std::uint16_t heads_left = 0;
  std::uint16_t copy_limit = 0;  // payloads up to this size go into the head (the port's choice)
};

// --- qp.cc: control path -----------------------------------------------------

// Sizes the queues; the QP starts in RESET.
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

void qp_init(Qp& qp, std::uint32_t qpn, std::uint64_t pd, const QpCaps& caps, CompletionRing* send_cq,
             CompletionRing* recv_cq, ibv_qp_type type = IBV_QPT_RC);
// Applies an ibv_modify_qp that check_modify() accepted. `peer_mac` and
// `local` fill the frame template when the mask has IBV_QP_AV.
void qp_apply(Qp& qp, const ibv_qp_attr& attr, int mask, ibv_qp_state next, const std::uint8_t peer_mac[6],
              const std::uint8_t local_mac[6], const ibv_gid& local_gid, const cc::DcqcnParams* dcqcn = nullptr);
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
// ibv_post_send / ibv_post_recv for one WR, on the application's side of
// the queues: 0, ENOMEM or EINVAL. The engine sees the WR at its next poll.
// A UD QP's WR goes to `ud` (the headers of its wr.ud.ah; required).
int qp_post_send(Qp& qp, const ibv_send_wr& wr, const wire::PathHeader* ud = nullptr);
int qp_post_recv(Qp& qp, const ibv_recv_wr& wr);
// The engine's side, once per poll: take in what the application posted
// (flushing it at once in ERR), and publish what has been retired.
void sync_from_app(Qp& qp);
void publish_to_app(Qp& qp);

// --- data path ---------------------------------------------------------------

// requester.cc: up to `room` request packets into `out`.
std::uint16_t requester_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room);
// Go back to `psn` (go-back-N): the next packet sent is the one with that PSN.
void requester_rewind(Qp& qp, std::uint32_t psn);
// RNR wait (IBTA 9.7.5.2.8): the completer enters it on an RNR NAK for
// `psn`; the requester sends nothing until the timer of `timer_code` has
// run, then resends from `psn`. The engine wakes the QP at
// requester_wakeup() (0: not waiting).
void requester_rnr_wait(Qp& qp, Env& env, std::uint32_t psn, std::uint8_t timer_code);
bool rnr_waiting(Qp& qp, const Env& env);
std::uint64_t requester_wakeup(const Qp& qp);

// completer.cc
void completer_on_response(Qp& qp, Env& env, const wire::ParsedFrame& pkt);
void completer_on_timer(Qp& qp, Env& env);
// Completes sq[comp_next] with `status` (and, if it is an error, moves the QP
// to ERR and flushes the rest).
void complete_send(Qp& qp, ibv_wc_status status);

// responder.cc (RC and UC; UD's datagrams go to ud_on_datagram)
void responder_on_request(Qp& qp, Env& env, const wire::ParsedFrame& pkt);
// datagram.cc: a UD SEND for this QP (IBTA 9.8.x, 11.4.1.1): Q_Key and
// length checks, a receive WQE, the GRH then the payload.
void ud_on_datagram(Qp& qp, Env& env, const wire::ParsedFrame& pkt);
// UD requests: up to `room` datagrams, each to its WR's address.
std::uint16_t ud_requester_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room);
std::uint16_t responder_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room);

// congestion.cc: DCQCN. A RoCE packet for this QP arrived marked CE (the
// notification point owes the sender a CNP, at most one per interval).
// True when a CNP has just become due (cnp_fill sends it).
bool np_on_ce(Qp& qp, Env& env);
// Up to `room` CNPs (0 or 1) into `out`: BTH opcode 0x81 with BECN to the
// peer QP, 16 reserved bytes, the ICRC (Annex A17.9.3).
std::uint16_t cnp_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room);
// A CNP for this QP arrived (reaction point).
void rp_on_cnp(Qp& qp, Env& env);
// Pacing at the QP's DCQCN rate: whether a data packet (request, READ
// response) may leave now, and the accounting once one of `frame_bytes`
// has. Always true with congestion control off.
bool pace_allows(Qp& qp, Env& env);
void paced_sent(Qp& qp, Env& env, std::uint32_t frame_bytes);
// When the QP, held back by pacing with packets to send, may send again; 0
// if it is not held back.
std::uint64_t paced_until(const Qp& qp, const Env& env);

// frames.cc: writes a packet of the QP into `f` (its head taken from
// env.heads), with the headers `th` (BTH and the extension headers its
// opcode carries) and the payload `f`'s pieces hold, then the pad and the
// ICRC. The fill functions below keep to the heads the engine provides.
void emit(Qp& qp, Env& env, wire::TxFrame& f, wire::TransportHeaders& th, std::uint32_t payload_bytes);
// The same on another path of the QP's, without counting it as a packet of
// the QP's traffic (CNPs).
void emit_frame(const wire::PathHeader& path, Env& env, wire::TxFrame& f, wire::TransportHeaders& th,
                std::uint32_t payload_bytes);
// A UC or UD packet, whose WR completes once it is built (no ACK comes):
// the payload is copied into the frame's head, so the application may
// reuse its buffer as soon as it sees the completion.
void emit_copied(const wire::PathHeader& path, Qp& qp, Env& env, wire::TxFrame& f, wire::TransportHeaders& th,
                 std::uint32_t payload_bytes);
// The BTH of the QP's next packet: its fixed fields, and these.
wire::Bth packet_bth(const Qp& qp, wire::Opcode op, std::uint32_t psn, bool ack_req, bool solicited);

// Whether `p` comes from the connected QP's peer address to its own (IP
// source and destination against the path set at RTR). A QP not yet at RTR
// has no path: what arrives for it is judged by its state instead.
bool from_peer(const Qp& qp, const wire::ParsedFrame& p);

// Deadline of the retransmit timer from now (0: the QP's timeout is infinite).
std::uint64_t retransmit_deadline(const Qp& qp, std::uint64_t now);

}  // namespace uroce::transport
