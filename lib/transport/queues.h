// Where the application's thread and the engine's meet: the completion
// ring, the WQEs the application posts and the rings that carry them, the
// shared receive queue, and the functions each side calls (ibv_post_send,
// ibv_post_recv, ibv_post_srq_recv on one side; sync_from_app,
// publish_to_app, srq_take on the other). Each ring has one producer and
// one consumer; its cursors are the only fields both threads touch.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "ring/spsc_ring.h"
#include "uroce/port.h"
#include "wire/path_header.h"
#include "wire/tx_frame.h"

namespace uroce::transport {

struct Qp;

inline constexpr std::uint32_t kMaxSge = wire::TxFrame::kMaxPieces;
inline constexpr std::uint32_t kInlineLkey = 0;  // marks an SGE holding inline data (0 is never an MR key)

// Completion events of one CQ (ibv_req_notify_cq), shared by its rings:
// armed once, fired once, by the first completion that matches the arming
// (IBTA 11.4.2.2: "next" is any completion; "solicited" is a receive with
// the SE bit, or any completion in error).
struct CqEvents {
  enum : int { kDisarmed = 0, kSolicited = 1, kNext = 2 };
  std::atomic<int> armed{kDisarmed};
  void (*fire)(void* arg) = nullptr;  // on the thread that pushed the completion
  void* arg = nullptr;
  // Disarms if armed for a completion of this kind; whether it did (the
  // caller then fires, once it has noted what the event covers).
  bool take(bool solicited) {
    int a = armed.load(std::memory_order_seq_cst);
    if (a == kDisarmed || (a == kSolicited && !solicited)) return false;
    return armed.compare_exchange_strong(a, kDisarmed);
  }
  // take(), and fires if it did.
  void offer(bool solicited) {
    if (take(solicited)) fire(arg);
  }
};

// A completion queue's ring: the engine produces, the application polls.
// Holds exactly `capacity` (cqe) completions; the one after overflows it.
class CompletionRing {
 public:
  explicit CompletionRing(std::uint32_t capacity, CqEvents* events = nullptr) : events_(events) { ring_.init(capacity); }
  // False (and the ring is marked overflowed) when full. `solicited`: a
  // receive whose last packet had the SE bit.
  bool push(const ibv_wc& wc, bool solicited = false);
  // -EOVERFLOW once overflowed. With `stamps` (a CQ stamped by
  // stamp_with), each completion's time goes there too.
  int poll(int n, ibv_wc* out, std::uint64_t* stamps = nullptr);
  std::uint32_t capacity() const { return ring_.limit(); }
  // Completion timestamps (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP): each push
  // from now on reads `clock` (the engine's), so a completion carries the
  // time the engine completed its work. Control path, before the first
  // push; a ring never stamped reads no clock.
  void stamp_with(Clock* clock);
  // ibv_resize_cq: holds `capacity` completions from now on, those waiting
  // kept in order. 0, or EINVAL (more than `capacity` wait; nothing
  // changed). Control path, neither side running.
  int resize(std::uint32_t capacity);
  // Takes out the waiting completions of QP `qpn`, the others kept in
  // order (a QP moved to RESET: see remove_qp's caller). How many went.
  // Control path, neither side running.
  std::uint32_t remove_qp(std::uint32_t qpn);
  // Completions waiting to be polled (a snapshot; the control path's is exact).
  std::uint32_t waiting() const { return ring_.ready(); }
  bool overflowed() const { return overflow_.load(std::memory_order_acquire); }
  // Events and completions already waiting. An arm fires at once only for
  // completions no event announced (they came while nothing was armed, so a
  // program that polled before arming missed them: the window every RNIC
  // closes at its arm), never again for one an event announced (perftest's
  // -e latency loops re-arm before they poll the completion that woke
  // them). `covered_` is the producer's head as of the last event.
  // missed(): the application's thread, arming; `head` gets the head seen.
  bool missed(std::uint32_t& head) const {
    const std::uint32_t tail = ring_.tail();
    head = tail + ring_.ready(std::memory_order_seq_cst);
    return head != tail && ring::cursor_after(head, covered_.load(std::memory_order_acquire));
  }
  // An event announced the completions before `head` (any thread).
  void cover(std::uint32_t head) { ring::advance_cursor(covered_, head); }
  std::uint32_t users = 0;  // QPs attached (control path)

 private:
  ring::SpscRing<ibv_wc> ring_;
  std::atomic<bool> overflow_{false};
  std::atomic<std::uint32_t> covered_{0};  // see missed()
  CqEvents* events_;  // nullptr: nobody waits for events
  // The waiting completions but those of `drop_qpn` (0: none dropped)
  // into a new ring of `capacity`. Control path.
  void rebuild(std::uint32_t capacity, std::uint32_t drop_qpn);

  Clock* clock_ = nullptr;              // stamp_with's; nullptr: not stamped
  std::vector<std::uint64_t> stamps_;   // with clock_: the time of each slot's completion
};

struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
  std::uint8_t* host = nullptr;  // resolved when the WQE is first processed
};

// kBind and kLocalInv are local operations (IBTA 10.6.7: memory windows):
// they send nothing and complete in order once every WR before them has.
// kAtomicWrite: IBA 1.5's ATOMIC WRITE, 8 bytes placed atomically.
enum class WqeKind : std::uint8_t { kSend, kWrite, kRead, kAtomic, kBind, kLocalInv, kAtomicWrite };

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
  // Selective repeat: the receive WQE a SEND or WRITE with immediate
  // consumes at the peer (its ordinal), fixed when it is first sent.
  std::uint32_t recv_index = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t remote_srqn = 0;  // XRC: the XRC SRQ at the receiver (wr.qp_type.xrc.remote_srqn)
  // kBind reuses these: remote_addr the bind's address, rkey its new rkey,
  // invalidate_rkey the window's key, imm_data the region's key,
  // compare_add the length, swap the access flags. kLocalInv:
  // invalidate_rkey the rkey to invalidate.
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  std::uint32_t length = 0;
  std::uint8_t num_sge = 0;
  bool resolved = false;
  std::uint16_t odp_sges = 0;  // bit i: sge[i] lies in an on-demand region (mem/odp.h)
  std::uint64_t mr_epoch = 0;  // MrTable::epoch() when resolved
  // Requester: the PSNs this WQE occupies, fixed when it is first sent.
  bool started = false;
  std::uint32_t first_psn = 0;
  std::uint32_t npackets = 0;
  std::int32_t odp_pid = 0;  // whose memory the odp_sges are in
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
  w.recv_index = 0;
  w.remote_addr = 0;
  w.rkey = 0;
  w.remote_srqn = 0;
  w.compare_add = 0;
  w.swap = 0;
  w.length = 0;
  w.num_sge = 0;
  w.resolved = false;
  w.odp_sges = 0;
  w.mr_epoch = 0;
  w.started = false;
  w.first_psn = 0;
  w.npackets = 0;
  w.odp_pid = 0;
}

struct RecvWqe {
  std::uint64_t wr_id = 0;
  std::uint32_t length = 0;
  std::uint8_t num_sge = 0;
  bool resolved = false;
  std::uint16_t odp_sges = 0;  // as SendWqeFields
  std::int32_t odp_pid = 0;
  std::uint64_t mr_epoch = 0;  // MrTable::epoch() when resolved
  std::array<Sge, kMaxSge> sge{};
};

// A shared receive queue (IBTA 10.2.9.5, 11.2.3): receive WQEs any RC QP
// attached to it consumes, one per incoming message, in the order posted.
// The application posts (one producer); the engine that serves every QP on
// it takes (one consumer: lib/verbs puts those QPs on one engine), so it is
// a single-producer single-consumer ring like a QP's own receive queue.
struct Srq {
  std::uint64_t pd = 0;  // ProtectionDomain::id()
  // An XRC SRQ (IBTA annex A14): its number, which requests name in their
  // XRCETH, and the CQ its completions go to (a basic SRQ's go to the
  // receiving QP's recv_cq). Set at creation.
  std::uint32_t srqn = 0;
  CompletionRing* cq = nullptr;
  std::uint32_t max_sge = 0;
  // Head: the application's next free slot; tail: the WQEs the engine took.
  ring::SpscRing<RecvWqe> ring;
  // srq_limit (ibv_modify_srq): when fewer WQEs than this remain after a
  // take, the engine calls on_limit once and disarms it (sets 0), as
  // IBV_EVENT_SRQ_LIMIT_REACHED works. 0: not armed.
  std::atomic<std::uint32_t> limit{0};
  void (*on_limit)(void* arg) = nullptr;
  void* arg = nullptr;
};

// An XRC domain's SRQs, by number, as its target QPs find them (IBTA annex
// A14: an XRC request names its SRQ; one of another domain is refused).
// Changed on the control path only, while no engine runs.
struct XrcDomain {
  std::vector<Srq*> srqs;
  Srq* find(std::uint32_t srqn) const {
    for (Srq* s : srqs) {
      if (s->srqn == srqn) return s;
    }
    return nullptr;
  }
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

// ibv_post_send / ibv_post_recv for one WR, on the application's side of
// the queues: 0, ENOMEM or EINVAL. The engine sees the WR at its next poll.
// A UD QP's WR goes to `ud` (the headers of its wr.ud.ah; required).
// `doorbell` false: the WR is published but the engine not told; the last
// WR of a list rings it, or qp_ring_doorbell() after a WR of the list
// failed (one atomic per list instead of one per WR).
int qp_post_send(Qp& qp, const ibv_send_wr& wr, const wire::PathHeader* ud = nullptr, bool doorbell = true);
// A receive WR rings no doorbell unless the QP is in ERR: the engine takes
// receive WQEs when a message needs one (rq_sync), and needs telling only
// to flush them (qp_recv_posted).
int qp_post_recv(Qp& qp, const ibv_recv_wr& wr, bool doorbell = true);
// Tells the engine this QP has work (what the posts above do unless told not).
void qp_ring_doorbell(Qp& qp);
// After receive WRs were published (the last of a list, or one before a
// WR that failed): rings the doorbell if the QP is in ERR, so that they
// are flushed. The head is stored (seq_cst) before the state is read, as
// qp_enter_error stores ERR before it reads the head: either the engine
// takes the WRs in as it flushes, or this sees ERR.
void qp_recv_posted(Qp& qp);
// The engine's side, once per poll: take in what the application posted
// (flushing it at once in ERR), and publish what has been retired.
void sync_from_app(Qp& qp);
void publish_to_app(Qp& qp);

}  // namespace uroce::transport
