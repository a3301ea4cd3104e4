// Responder (IBTA 9.7.5.1-9.7.5.2, 9.9.x): checks each request's PSN,
// executes new requests in order (after every key, bounds, access and PD
// check), answers duplicates without executing them twice, and queues its
// answers (ACKs, NAKs, READ responses, atomic ACKs) to leave in PSN order.
#include <cstring>

#include "transport/psn.h"
#include "transport/responder_parts.h"
#include "transport/rules.h"
#include "transport/sgl.h"
#include "wire/opcode.h"

namespace uroce::transport {
namespace {

using wire::AethKind;
using wire::NakCode;
using wire::Opcode;
using Msg = Qp::Responder::Msg;

constexpr std::uint8_t kAckSyndrome = 0x1f;  // ACK, no end-to-end credit count (as rxe sends)

bool out_full(const Qp& qp) { return qp.resp.out_tail - qp.resp.out_head >= qp.resp.out.limit(); }

Response plain_ack(std::uint32_t psn, std::uint32_t msn) {
  Response a;
  a.kind = Response::Kind::kAck;
  a.psn = psn;
  a.syndrome = kAckSyndrome;
  a.msn = msn;
  return a;
}

// The ACK held in the QP (Responder::ack_owed) goes into `out` ahead of
// what follows it, so answers still leave in PSN order.
Response* push(Qp& qp) {
  if (qp.resp.ack_owed) {
    // `out` is empty while an ACK is held, and holds at least 10.
    qp.resp.ack_owed = false;
    qp.resp.out[qp.resp.out_tail++] = plain_ack(qp.resp.ack_psn, qp.resp.ack_msn);
  }
  if (out_full(qp)) return nullptr;
  Response& r = qp.resp.out[qp.resp.out_tail++];
  r = Response{};
  return &r;
}

// ACKs coalesce (IBTA 9.7.5: one ACK may acknowledge many packets): a queued ACK
// not yet sent is moved forward rather than followed by another.
void queue_ack(Qp& qp, std::uint32_t psn) {
  if (qp.resp.out_tail == qp.resp.out_head && qp.sr == nullptr) {
    // Nothing else owed: held in the QP (selective repeat's ACKs carry a
    // SACK built from the queued answer, so they keep to `out`).
    qp.resp.ack_owed = true;
    qp.resp.ack_psn = psn;
    qp.resp.ack_msn = qp.resp.msn;
    return;
  }
  if (qp.resp.out_tail != qp.resp.out_head) {
    Response& tail = qp.resp.out[qp.resp.out_tail - 1];
    if (tail.kind == Response::Kind::kAck && tail.syndrome == kAckSyndrome) {
      tail.psn = psn;
      tail.msn = qp.resp.msn;
      return;
    }
  }
  if (Response* r = push(qp)) {
    *r = plain_ack(psn, qp.resp.msn);
  } else {
    // The requester's timer recovers what this ACK would have said.
    qp.counters.add(QpCounter::drop_answer_ring_full);
  }
}

// False: not queued (the queue is full), so not sent.
bool queue_nak(Qp& qp, std::uint32_t psn, std::uint8_t syndrome, bool fatal) {
  Response* r = push(qp);
  if (r == nullptr) {
    qp.counters.add(QpCounter::drop_answer_ring_full);
    return false;
  }
  r->kind = Response::Kind::kAck;
  r->psn = psn;
  r->syndrome = syndrome;
  r->msn = qp.resp.msn;
  r->fatal = fatal;
  return true;
}

// A request that executes no further: its exit's row (rules.h) says what
// is counted, what goes back and how the receive WQE in use ends. Returns
// ResponderStep::exit's successor.
struct Request {
  const wire::ParsedFrame& p;
  std::uint32_t psn;
  ResponderExit exit = ResponderExit::kCount;
  // Selective repeat: the packet lies ahead of the expected PSN; it was
  // taken (placed); a SACK should go back for it.
  bool ahead = false;
  bool taken = false;
  bool sack = false;
};

ResponderStep leave(Request& r, ResponderExit e) {
  r.exit = e;
  return ResponderStep::exit;
}

void count_nak_sent(Qp& qp, Answer a) {
  switch (a) {
    case Answer::kInvalidRequest: qp.counters.add(QpCounter::nak_inv_req_sent); break;
    case Answer::kRemoteAccess: qp.counters.add(QpCounter::nak_rem_access_sent); break;
    case Answer::kRemoteOperational: qp.counters.add(QpCounter::nak_rem_op_sent); break;
    default: break;
  }
}

constexpr NakCode nak_code(Answer a) {
  switch (a) {
    case Answer::kRemoteAccess: return NakCode::kRemoteAccessError;
    case Answer::kRemoteOperational: return NakCode::kRemoteOperationalError;
    default: return NakCode::kInvalidRequest;
  }
}

bool starts_message(const wire::OpcodeInfo& info) { return info.has(wire::kFirst); }  // First or Only (kOnly = kFirst | kLast)

// UC (IBTA 9.8.3, classes D and E of 9.9.3): the responder answers nothing.
// A request it cannot execute ends the message in progress silently: its
// receive WQE stays for the next message (taken from an SRQ, it completes
// with REM_INV_REQ_ERR if the SEND did not fit, as rxe does), and every
// packet up to the next First or Only is dropped. Only a receive WQE that
// fails its own checks is a local error that ends the QP (as for RC).
void take_unreliable_exit(Qp& qp, const Request& r) {
  const ExitRule& rule = rule_of(r.exit);
  if (r.exit == ResponderExit::not_receiving) {
    qp.counters.add(rule.counter);
    return;
  }
  // Counters of answers UC never sends stay untouched.
  if (rule.answer != Answer::kRnrNak && rule.answer != Answer::kSequenceNak) qp.counters.add(rule.counter);
  if (r.exit == ResponderExit::recv_bad_lkey || r.exit == ResponderExit::recv_revoked) {
    rq_sync(qp);  // recv_in_use sees every WQE posted, as a doorbell would have shown it
    if (recv_in_use(qp)) complete_recv(qp, rule.status, IBV_WC_RECV, qp.resp.offset, nullptr);
    qp.resp.in_msg = Msg::kNone;
    qp_enter_error(qp);
    return;
  }
  if (r.exit == ResponderExit::recv_too_short && qp.srq != nullptr && qp.srq_held) {
    complete_recv(qp, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, qp.resp.offset, nullptr);
  }
  if (qp.resp.in_msg != Msg::kNone || starts_message(*r.p.info)) qp.counters.add(QpCounter::messages_dropped);
  qp.resp.in_msg = Msg::kNone;
  qp.resp.offset = 0;
  qp.resp.psn = psn_add(r.psn, 1);
}

void take_exit(Qp& qp, const Request& r) {
  if (r.ahead) {
    // Selective repeat: a packet ahead that cannot be taken now is left
    // for the requester to send again; in order it is judged (and
    // answered) by the same rules as RC's.
    qp.counters.add(QpCounter::sr_ahead_refused);
    return;
  }
  if (!qp.reliable()) {
    take_unreliable_exit(qp, r);
    return;
  }
  const ExitRule& rule = rule_of(r.exit);
  // rnr_naks_sent counts RNR NAKs sent, as nak_*_sent do: only once queued
  // (one that finds the queue full is drop_answer_ring_full's).
  if (rule.answer != Answer::kRnrNak) qp.counters.add(rule.counter);
  switch (rule.answer) {
    case Answer::kNothing: return;
    case Answer::kSequenceNak:
      // One sequence NAK until the expected PSN arrives (9.7.5.1.1); one
      // that found no room is not that one: the next packet ahead tries again.
      if (qp.resp.nak_sent) return;
      if (!queue_nak(qp, qp.resp.psn, wire::make_syndrome(AethKind::kNak, 0), false)) return;
      qp.resp.nak_sent = true;
      qp.counters.add(QpCounter::nak_seq_sent);
      return;
    case Answer::kRnrNak:
      // The expected PSN stays: the retry after the timer is this packet again.
      if (queue_nak(qp, r.psn, wire::make_syndrome(AethKind::kRnrNak, qp.attr.min_rnr_timer), false)) {
        qp.counters.add(rule.counter);
      }
      return;
    case Answer::kInvalidRequest:
    case Answer::kRemoteAccess:
    case Answer::kRemoteOperational:
      // Classes B-D and J (IBTA 9.9.3): end the receive in use, ERR, NAK.
      // ERR first: it drops every answer still owed (none may leave after
      // a fatal NAK), so the NAK always finds room, even when a full queue
      // is why the request was refused (too_many_reads).
      rq_sync(qp);  // recv_in_use sees every WQE posted, as a doorbell would have shown it
      if (rule.status != kNoCompletion && recv_in_use(qp)) {
        complete_recv(qp, rule.status, IBV_WC_RECV, qp.resp.offset, nullptr);
      }
      qp_enter_error(qp);
      if (queue_nak(qp, r.psn, wire::make_syndrome(AethKind::kNak, static_cast<std::uint8_t>(nak_code(rule.answer))),
                    true)) {
        count_nak_sent(qp, rule.answer);
      }
      return;
  }
}

// The RETH's range under its rkey, for `need`. A zero-length transfer checks
// no key: it moves no byte, and the IBTA lets the responder skip the R_Key
// check for it (C9-88; rxe skips it too).
//
// `epoch`: the region table's epoch, read before the check, for the caller
// to cache what it resolved under (MrTable::epoch: another engine may move
// it during the check).
mem::AccessResult check_reth(Qp& qp, Env& env, const wire::Reth& reth, int need, std::uint8_t*& host,
                             std::int32_t& odp_pid, std::uint64_t& epoch) {
  host = nullptr;
  epoch = env.mrs->epoch();
  if (reth.dma_length.get() == 0) return mem::AccessResult::kOk;
  return env.mrs->check_remote(reth.rkey.get(), qp.pd, qp.qpn, reth.va.get(), reth.dma_length.get(), need, host,
                               odp_pid);
}

// The exit for a failed R_Key check: through a memory window it is counted
// apart (an unbound, invalidated or exceeded window), an MR's as before.
ResponderExit rkey_exit(const Env& env, std::uint32_t rkey, ResponderExit otherwise) {
  return env.mrs->names_window(rkey) ? ResponderExit::window_violation : otherwise;
}

// --- The checks, in order --------------------------------------------------------

ResponderStep check_state(const Qp& qp, Request& r) {
  if (!qp.receives()) return leave(r, ResponderExit::not_receiving);
  return qp.type == IBV_QPT_XRC_RECV ? ResponderStep::check_xrc_srq : ResponderStep::check_psn;
}

// An XRC target QP has no receive queue and no PD of its own (IBTA annex
// A14): each request names an XRC SRQ of the QP's domain, whose PD every
// key of the request is checked against and whose WQE and CQ a SEND (or
// WRITE with immediate) uses. A message keeps the SRQ it began with; a
// duplicate is answered with the PD its own XRCETH names.
ResponderStep check_xrc_srq(Qp& qp, Request& r) {
  Srq* srq = qp.xrcd != nullptr ? qp.xrcd->find(r.p.xrceth().srqn.get()) : nullptr;
  if (srq == nullptr) return leave(r, ResponderExit::xrc_bad_srq);
  if (srq != qp.srq) {
    // Only the expected packet may change it: one ahead is NAKed for its
    // PSN (check_psn), a duplicate executes nothing new.
    const bool expected = r.psn == qp.resp.psn;
    if (qp.srq_held && expected) return leave(r, ResponderExit::xrc_bad_srq);
    if (!qp.srq_held) {
      qp.srq = srq;
      qp.recv_cq = srq->cq;
    }
  }
  qp.pd = srq->pd;
  return ResponderStep::check_psn;
}

// Selective repeat (docs/transport.md): the expected PSN and the window's
// after it are taken, each once, whatever their order; what was taken is a
// duplicate; what lies beyond the window is dropped unanswered. Only SENDs
// and WRITEs are placed ahead: a READ or atomic runs in order, once.
ResponderStep sr_check_psn(Qp& qp, Request& r) {
  switch (qp.sr->window.classify(r.psn)) {
    case ReceiveWindow::Arrival::kOutside: return leave(r, ResponderExit::sr_out_of_window);
    case ReceiveWindow::Arrival::kDuplicate:
      if (psn_before(r.psn, qp.resp.psn)) return ResponderStep::duplicate;
      qp.counters.add(QpCounter::duplicate_requests);  // taken ahead already
      r.sack = true;
      return ResponderStep::done;
    case ReceiveWindow::Arrival::kAhead:
      r.ahead = true;
      r.sack = true;
      if (!r.p.info->has_any(wire::kSend | wire::kWrite)) return leave(r, ResponderExit::sr_ahead_deferred);
      break;
    case ReceiveWindow::Arrival::kInOrder: break;
  }
  return ResponderStep::check_sreth;
}

ResponderStep check_psn(Qp& qp, Request& r) {
  if (qp.sr != nullptr) return sr_check_psn(qp, r);
  const std::int32_t d = psn_diff(r.psn, qp.resp.psn);
  if (!qp.reliable()) {
    // UC (IBTA 9.8.3): nothing is resent, so any other PSN means packets
    // were lost. The message in progress is abandoned (its receive WQE is
    // used again); a First or Only starts the next one from its PSN, the
    // rest of a cut message is dropped.
    if (d == 0) return ResponderStep::check_op_sequence;
    qp.counters.add(QpCounter::out_of_sequence);
    if (qp.resp.in_msg != Msg::kNone) qp.counters.add(QpCounter::messages_dropped);
    qp.resp.in_msg = Msg::kNone;
    qp.resp.offset = 0;
    qp.resp.psn = r.psn;
    return starts_message(*r.p.info) ? ResponderStep::check_op_sequence : leave(r, ResponderExit::op_sequence);
  }
  if (d > 0) return leave(r, ResponderExit::psn_ahead);
  if (d < 0) return ResponderStep::duplicate;
  qp.resp.nak_sent = false;
  return ResponderStep::check_op_sequence;
}

// Middle and Last only inside a message of the same kind, First/Only only
// outside one.
ResponderStep check_op_sequence(Qp& qp, Request& r) {
  const wire::OpcodeInfo& info = *r.p.info;
  const bool continues = info.has_any(wire::kMiddle) || (info.has(wire::kLast) && !info.has(wire::kFirst));
  bool fits = false;
  switch (qp.resp.in_msg) {
    case Msg::kNone: fits = !continues; break;
    case Msg::kSend: fits = continues && info.has(wire::kSend); break;
    case Msg::kWrite: fits = continues && info.has(wire::kWrite); break;
  }
  if (!fits && !qp.reliable() && !continues) {
    // UC: a First or Only inside a message means the end of that one was
    // lost with no PSN gap (rxe: missing Last, class D1E): it is abandoned
    // and this one starts.
    qp.counters.add(QpCounter::messages_dropped);
    qp.resp.in_msg = Msg::kNone;
    qp.resp.offset = 0;
    return ResponderStep::check_op_allowed;
  }
  return fits ? ResponderStep::check_op_allowed : leave(r, ResponderExit::op_sequence);
}

// Selective repeat: a SEND's or WRITE's packet says where it belongs in its
// message (SRETH), and that must agree with its opcode (First at offset 0,
// Last with the last flag, at the message's end), its PSN (one path MTU per
// PSN from the message's first), its payload and a WRITE's RETH: in place
// of RC's opcode sequence, which packets out of order cannot keep.
ResponderStep check_sreth(const Qp& qp, Request& r) {
  const wire::ParsedFrame& p = r.p;
  const wire::OpcodeInfo& info = *p.info;
  if (!info.has_any(wire::kSend | wire::kWrite)) return ResponderStep::check_op_allowed;
  const wire::Sreth s = p.sreth();
  const std::uint32_t offset = s.offset.get();
  const std::uint32_t length = s.length.get();
  const bool last = (s.flags & wire::kSrethLast) != 0;
  bool ok = length <= (1u << 31) && offset <= length && p.payload_length <= length - offset &&
            offset % qp.mtu == 0 && ((r.psn - s.first_psn.get()) & kPsnMask) == offset / qp.mtu &&
            info.has(wire::kFirst) == (offset == 0) && info.has(wire::kLast) == last &&
            last == (offset + p.payload_length == length);
  if (ok && info.has(wire::kWrite)) ok = p.reth().dma_length.get() == length;
  return ok ? ResponderStep::check_op_allowed : leave(r, ResponderExit::sr_bad_header);
}

ResponderStep check_op_allowed(const Qp& qp, Request& r) {
  const wire::OpcodeInfo& info = *r.p.info;
  const int flags = qp.attr.qp_access_flags;
  bool allowed = true;
  if (info.has(wire::kWrite)) allowed = flags & IBV_ACCESS_REMOTE_WRITE;
  else if (info.has(wire::kReadRequest)) allowed = flags & IBV_ACCESS_REMOTE_READ;
  else if (info.has(wire::kAtomic)) allowed = flags & IBV_ACCESS_REMOTE_ATOMIC;
  else if (info.has(wire::kAtomicWriteOp)) allowed = flags & IBV_ACCESS_REMOTE_WRITE;  // IBA 1.5, as rxe
  else if (!info.has(wire::kSend)) return leave(r, ResponderExit::unsupported_opcode);  // FLUSH
  return allowed ? ResponderStep::check_resources : leave(r, ResponderExit::op_not_allowed);
}

ResponderStep check_resources(const Qp& qp, Request& r) {
  if (r.p.info->has_any(wire::kReadRequest | wire::kAtomic | wire::kAtomicWriteOp) && qp.attr.max_dest_rd_atomic == 0) {
    return leave(r, ResponderExit::no_resources);
  }
  return ResponderStep::check_length;
}

// Every packet of a multi-packet message but the last carries exactly the
// path MTU, the last 1 to PMTU bytes, an Only packet at most PMTU; a RETH's
// DMA length is at most 2^31.
ResponderStep check_length(const Qp& qp, Request& r) {
  const wire::ParsedFrame& p = r.p;
  const wire::OpcodeInfo& info = *p.info;
  bool fits = true;
  if (p.has(wire::ExtHdr::kReth) && p.reth().dma_length.get() > (1u << 31)) {
    fits = false;
  } else if (info.has(wire::kHasPayload)) {
    const std::uint32_t n = p.payload_length;
    if (info.has(wire::kOnly)) fits = n <= qp.mtu;
    else if (info.has(wire::kLast)) fits = n >= 1 && n <= qp.mtu;
    else fits = n == qp.mtu;  // First, Middle
  }
  if (!fits) return leave(r, ResponderExit::bad_length);
  if (info.has(wire::kSend)) return ResponderStep::execute_send;
  if (info.has(wire::kWrite)) return ResponderStep::execute_write;
  if (info.has(wire::kReadRequest)) return ResponderStep::execute_read;
  if (info.has(wire::kAtomicWriteOp)) return ResponderStep::execute_atomic_write;
  return ResponderStep::execute_atomic;
}

// --- Selective repeat -------------------------------------------------------------
// Each SEND or WRITE packet is placed on arrival where its SRETH (and a
// WRITE's RETH, which every packet carries) says, after the same key,
// bounds and receive checks as RC's; what its message completes (the MSN,
// a receive WQE) waits until every PSN before the message's last has come:
// completions follow the PSN order (sr_deliver).

// The immediate data of `p`, as the wire has it (ibv_wc keeps it so).
std::uint32_t imm_of(const wire::ParsedFrame& p) {
  std::uint32_t imm = 0;
  std::memcpy(&imm, &p.frame[p.bth_offset + p.info->offset_of(wire::ExtHdr::kImmDt)], sizeof imm);
  return imm;
}

// The receive WQE of ordinal `index` (SRETH), if posted: the one at rq_next
// is the QP's next receive-consuming message's.
RecvWqe* sr_recv_wqe(Qp& qp, std::uint32_t index) {
  const std::uint32_t after = (index - qp.sr->recv_base) & kPsnMask;
  return rq_has(qp, after + 1) ? &qp.rq[qp.rq_next + after] : nullptr;
}

// A message's last packet was taken: what completing it needs.
void sr_note_last(Qp& qp, const Request& r, SrLastPacket::Kind kind) {
  const wire::Sreth s = r.p.sreth();
  SrLastPacket& m = qp.sr->last[sr_slot(r.psn)];
  m = SrLastPacket{};
  m.kind = kind;
  m.psn = r.psn;
  m.byte_len = s.length.get();
  m.recv_index = s.recv_index.get();
  m.solicited = r.p.bth().se();
  if (r.p.has(wire::ExtHdr::kImmDt)) {
    m.imm = true;
    m.imm_data = imm_of(r.p);
  }
  if (r.p.has(wire::ExtHdr::kIeth)) {
    m.invalidate = true;
    m.inv_rkey = r.p.ieth().rkey.get();
  }
}

ResponderStep sr_taken(Qp& qp, Request& r) {
  SrState& sr = *qp.sr;
  sr.claim_psn[sr_slot(r.psn)] = r.psn;
  sr.claim_first[sr_slot(r.psn)] =
      r.p.sreth().first_psn.get() | (r.p.info->has(wire::kWrite) ? kSrClaimWrite : 0);
  r.taken = true;
  if (r.ahead) qp.counters.add(QpCounter::sr_ahead_placed);
  return ResponderStep::done;
}

ResponderStep sr_execute_send(Qp& qp, Env& env, Request& r) {
  const wire::ParsedFrame& p = r.p;
  const wire::Sreth s = p.sreth();
  qp.counters.add(QpCounter::rx_packets);
  RecvWqe* w = sr_recv_wqe(qp, s.recv_index.get());
  if (w == nullptr) return leave(r, ResponderExit::no_receive);
  const bool was_resolved = w->resolved;
  if (wqe_resolve(*w, *env.mrs, qp.pd, IBV_ACCESS_LOCAL_WRITE) != mem::AccessResult::kOk) [[unlikely]] {
    return leave(r, was_resolved ? ResponderExit::recv_revoked : ResponderExit::recv_bad_lkey);
  }
  if (s.offset.get() + p.payload_length > w->length) return leave(r, ResponderExit::recv_too_short);
  if (!wqe_scatter_payload(*w, s.offset.get(), p)) [[unlikely]] return leave(r, ResponderExit::recv_unmapped);
  qp.counters.add(QpCounter::rx_bytes, p.payload_length);
  if (p.info->has(wire::kLast)) sr_note_last(qp, r, SrLastPacket::Kind::kSend);
  return sr_taken(qp, r);
}

ResponderStep sr_execute_write(Qp& qp, Env& env, Request& r) {
  const wire::ParsedFrame& p = r.p;
  const wire::Sreth s = p.sreth();
  const wire::Reth reth = p.reth();
  qp.counters.add(QpCounter::rx_packets);
  std::uint8_t* host = nullptr;
  std::int32_t odp_pid = 0;
  // This packet's bytes only, under the message's key (a zero-length WRITE
  // checks none, as RC's).
  if (p.payload_length > 0 &&
      env.mrs->check_remote(reth.rkey.get(), qp.pd, qp.qpn, reth.va.get() + s.offset.get(), p.payload_length,
                            IBV_ACCESS_REMOTE_WRITE, host, odp_pid) != mem::AccessResult::kOk) {
    return leave(r, rkey_exit(env, reth.rkey.get(), ResponderExit::rkey_violation));
  }
  const bool imm = p.has(wire::ExtHdr::kImmDt);
  if (imm && sr_recv_wqe(qp, s.recv_index.get()) == nullptr) return leave(r, ResponderExit::no_receive);
  if (odp_pid == 0) [[likely]] {
    p.visit_payload([host](const std::uint8_t* data, std::size_t len, std::size_t at) { std::memcpy(host + at, data, len); });
  } else {
    bool placed = true;
    p.visit_payload([&](const std::uint8_t* data, std::size_t len, std::size_t at) {
      placed = placed && place(host + at, odp_pid, data, len);
    });
    if (!placed) return leave(r, ResponderExit::odp_unmapped);
  }
  qp.counters.add(QpCounter::rx_bytes, p.payload_length);
  if (p.info->has(wire::kLast)) sr_note_last(qp, r, imm ? SrLastPacket::Kind::kWriteImm : SrLastPacket::Kind::kWrite);
  return sr_taken(qp, r);
}

// The expected PSN moved from `from` on: every message whose last packet it
// passed completes, in PSN order (the MSN, the receive WQE: SENDs and
// WRITEs with immediate consume them in the order the requester numbered
// them). False if the QP ended in ERR on the way.
bool sr_deliver(Qp& qp, Env& env, std::uint32_t from, std::uint32_t to) {
  SrState& sr = *qp.sr;
  const wire::ParsedFrame none{};
  for (std::uint32_t psn = from; psn != to; psn = psn_add(psn, 1)) {
    // Each PSN of a message is a packet of it: a First opens it, the rest
    // name its first PSN and kind, and nothing else comes inside it (a
    // Last that claims another message's PSNs as its own is refused here,
    // as RC's opcode sequence refuses it).
    const std::uint32_t claimed = sr.claim_psn[sr_slot(psn)] == psn ? sr.claim_first[sr_slot(psn)] : kSrNoClaim;
    sr.claim_psn[sr_slot(psn)] = kSrNoClaim;
    const bool opens = claimed != kSrNoClaim && (claimed & kPsnMask) == psn;
    if (sr.in_message ? claimed != sr.message_first : claimed != kSrNoClaim && !opens) {
      take_exit(qp, Request{none, psn, ResponderExit::sr_bad_header});
      return false;
    }
    if (opens) {
      sr.in_message = true;
      sr.message_first = claimed;
    }
    SrLastPacket& slot = sr.last[sr_slot(psn)];
    if (slot.kind == SrLastPacket::Kind::kNone || slot.psn != psn) continue;
    const SrLastPacket m = slot;
    slot.kind = SrLastPacket::Kind::kNone;
    sr.in_message = false;
    qp.resp.psn = psn_add(psn, 1);
    if (m.kind == SrLastPacket::Kind::kWrite) {
      ++qp.resp.msn;
      continue;
    }
    // The requester numbers receive-consuming messages in PSN order: this
    // one's WQE is the next (a peer that numbers them otherwise broke the
    // protocol; the bytes it placed went to this QP's own receives only).
    if (m.recv_index != sr.recv_base || !rq_has(qp)) {
      take_exit(qp, Request{none, psn, ResponderExit::sr_bad_header});
      return false;
    }
    if (m.invalidate) {
      if (env.mrs->invalidate(m.inv_rkey, qp.pd) != mem::AccessResult::kOk) {
        take_exit(qp, Request{none, psn, ResponderExit::invalidate_refused});
        return false;
      }
      qp.counters.add(QpCounter::mw_invalidations);
    }
    ++qp.resp.msn;
    ibv_wc wc{};
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = m.kind == SrLastPacket::Kind::kSend ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM;
    wc.byte_len = m.byte_len;
    wc.src_qp = qp.attr.dest_qp_num;
    if (m.imm) {
      wc.wc_flags |= IBV_WC_WITH_IMM;
      wc.imm_data = m.imm_data;
    }
    if (m.invalidate) {
      wc.wc_flags |= IBV_WC_WITH_INV;
      wc.invalidated_rkey = m.inv_rkey;
    }
    finish_recv(qp, wc, m.solicited);
    sr.recv_base = (sr.recv_base + 1) & kPsnMask;
    if (qp.state == IBV_QPS_ERR) return false;
  }
  qp.resp.psn = to;
  return true;
}

// After a request was finished with: a packet taken moves the window (in
// order) or fills its place ahead; a READ or atomic that ran in order has
// moved the expected PSN past its own; then what completed is delivered and
// a SACK queued when the requester should hear at once (it asked, a packet
// came ahead, or a hole was filled).
void sr_settle(Qp& qp, Env& env, const Request& r) {
  SrState& sr = *qp.sr;
  const std::uint32_t from = sr.window.expected();
  if (r.taken) {
    sr.window.take(r.psn);
  } else if (psn_after(qp.resp.psn, from)) {
    sr.window.advance(qp.resp.psn);
  }
  const std::uint32_t to = sr.window.expected();
  if (to != from) {
    qp.resp.nak_sent = false;
    if (!sr_deliver(qp, env, from, to)) return;
  }
  const bool filled = psn_diff(to, from) > 1 && r.taken;
  if (r.sack || filled || (r.taken && r.p.bth().ack_req())) queue_ack(qp, psn_add(to, -1));
}

// --- Execution ---------------------------------------------------------------------

// The receive WQE in use may take bytes: its list resolved with local write,
// and again if a region was deregistered since.
bool recv_placeable(Qp& qp, Env& env, Request& r) {
  RecvWqe& w = recv_wqe(qp);
  const bool was_resolved = w.resolved;
  // An SRQ's WQE is checked against the SRQ's PD (an XRC SRQ's may differ
  // from the PD a duplicate set on its target QP meanwhile).
  const std::uint64_t pd = qp.srq != nullptr ? qp.srq->pd : qp.pd;
  if (wqe_resolve(w, *env.mrs, pd, IBV_ACCESS_LOCAL_WRITE) == mem::AccessResult::kOk) [[likely]] return true;
  leave(r, was_resolved ? ResponderExit::recv_revoked : ResponderExit::recv_bad_lkey);
  return false;
}

// A receive WQE for a SEND or WRITE with immediate (else the RNR exit).
bool take_recv(Qp& qp, Env& env, Request& r) {
  if (qp.srq != nullptr) {
    // A message's first packet takes a WQE from the SRQ; a retransmitted
    // first packet finds it still held (the message did not complete).
    if (!qp.srq_held && !srq_take(*qp.srq, *qp.srq_wqe)) {
      leave(r, ResponderExit::no_receive);
      return false;
    }
    qp.srq_held = true;
  } else if (!rq_has(qp)) {
    leave(r, ResponderExit::no_receive);
    return false;
  }
  return recv_placeable(qp, env, r);
}

ResponderStep execute_send(Qp& qp, Env& env, Request& r) {
  if (qp.sr != nullptr) return sr_execute_send(qp, env, r);
  const wire::ParsedFrame& p = r.p;
  const wire::OpcodeInfo& info = *p.info;
  qp.counters.add(QpCounter::rx_packets);
  if (info.has(wire::kFirst)) {
    if (!take_recv(qp, env, r)) return ResponderStep::exit;
    qp.resp.offset = 0;
  } else if (!recv_placeable(qp, env, r)) {
    return ResponderStep::exit;
  }
  RecvWqe& w = recv_wqe(qp);
  if (qp.resp.offset + p.payload_length > w.length) return leave(r, ResponderExit::recv_too_short);
  if (!wqe_scatter_payload(w, qp.resp.offset, p)) [[unlikely]] return leave(r, ResponderExit::recv_unmapped);
  qp.resp.offset += p.payload_length;
  qp.counters.add(QpCounter::rx_bytes, p.payload_length);
  qp.resp.in_msg = info.has(wire::kLast) ? Msg::kNone : Msg::kSend;
  if (info.has(wire::kLast)) {
    if (p.has(wire::ExtHdr::kIeth)) {
      // Only a type 2 window of the QP's PD (IBTA 10.6.7.2.4, o10-37.2.26);
      // unknown, another PD's, a type 1 window's or a reg_mr region's key
      // is refused (rxe: class J).
      if (env.mrs->invalidate(p.ieth().rkey.get(), qp.pd) != mem::AccessResult::kOk) {
        return leave(r, ResponderExit::invalidate_refused);
      }
      qp.counters.add(QpCounter::mw_invalidations);
    }
    ++qp.resp.msn;
    complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV, qp.resp.offset, &p);
  }
  qp.resp.psn = psn_add(r.psn, 1);
  if (p.bth().ack_req() && qp.reliable()) queue_ack(qp, r.psn);
  return ResponderStep::done;
}

ResponderStep execute_write(Qp& qp, Env& env, Request& r) {
  if (qp.sr != nullptr) return sr_execute_write(qp, env, r);
  const wire::ParsedFrame& p = r.p;
  const wire::OpcodeInfo& info = *p.info;
  qp.counters.add(QpCounter::rx_packets);
  if (info.has(wire::kFirst)) {
    const wire::Reth reth = p.reth();
    std::uint8_t* host = nullptr;
    std::int32_t odp_pid = 0;
    std::uint64_t epoch = 0;
    if (check_reth(qp, env, reth, IBV_ACCESS_REMOTE_WRITE, host, odp_pid, epoch) != mem::AccessResult::kOk) {
      return leave(r, rkey_exit(env, reth.rkey.get(), ResponderExit::rkey_violation));
    }
    qp.resp.write_dst = host;
    qp.resp.write_odp_pid = odp_pid;
    qp.resp.write_len = reth.dma_length.get();
    qp.resp.write_va = reth.va.get();
    qp.resp.write_rkey = reth.rkey.get();
    qp.resp.write_epoch = epoch;
    qp.resp.offset = 0;
  } else if (qp.resp.write_epoch != env.mrs->epoch()) [[unlikely]] {
    // A key stopped working since WRITE First: the rest of the message is
    // checked again (once deregistration has returned nothing reaches the
    // region; rxe looks the rkey up for every packet).
    std::uint8_t* host = nullptr;
    std::int32_t odp_pid = 0;
    const std::uint64_t epoch = env.mrs->epoch();  // before the check (MrTable::epoch)
    if (env.mrs->check_remote(qp.resp.write_rkey, qp.pd, qp.qpn, qp.resp.write_va, qp.resp.write_len,
                              IBV_ACCESS_REMOTE_WRITE, host, odp_pid) != mem::AccessResult::kOk) {
      return leave(r, ResponderExit::write_revoked);
    }
    qp.resp.write_dst = host;
    qp.resp.write_odp_pid = odp_pid;
    qp.resp.write_epoch = epoch;
  }
  if (qp.resp.offset + p.payload_length > qp.resp.write_len ||
      (info.has(wire::kLast) && qp.resp.offset + p.payload_length != qp.resp.write_len)) {
    return leave(r, ResponderExit::write_length_mismatch);
  }
  // WRITE with immediate consumes a receive WQE with its last packet.
  if (p.has(wire::ExtHdr::kImmDt) && !take_recv(qp, env, r)) return ResponderStep::exit;
  std::uint8_t* const dst = qp.resp.write_dst + qp.resp.offset;
  if (qp.resp.write_odp_pid == 0) [[likely]] {
    p.visit_payload([dst](const std::uint8_t* data, std::size_t len, std::size_t at) { std::memcpy(dst + at, data, len); });
  } else {
    bool placed = true;
    p.visit_payload([&](const std::uint8_t* data, std::size_t len, std::size_t at) {
      placed = placed && place(dst + at, qp.resp.write_odp_pid, data, len);
    });
    // The WRITE ends here: its pages are not all there (IBTA 10.6: an
    // access the region cannot take is a remote access error).
    if (!placed) return leave(r, ResponderExit::odp_unmapped);
  }
  qp.resp.offset += p.payload_length;
  qp.counters.add(QpCounter::rx_bytes, p.payload_length);
  qp.resp.in_msg = info.has(wire::kLast) ? Msg::kNone : Msg::kWrite;
  if (info.has(wire::kLast)) {
    ++qp.resp.msn;
    if (p.has(wire::ExtHdr::kImmDt)) complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qp.resp.write_len, &p);
  }
  qp.resp.psn = psn_add(r.psn, 1);
  if (p.bth().ack_req() && qp.reliable()) queue_ack(qp, r.psn);
  return ResponderStep::done;
}

ResponderResource& new_resource(Qp& qp) {
  auto& all = qp.resp.resources;
  ResponderResource& r = all[qp.resp.next_resource++ % all.size()];
  r = ResponderResource{};
  r.valid = true;
  return r;
}

// `epoch`: the region table's when `src` was resolved (check_reth's).
bool queue_read(Qp& qp, std::uint32_t psn, std::uint32_t first_psn, std::uint32_t last_psn,
                const wire::Reth& reth, const std::uint8_t* src, std::int32_t odp_pid, std::uint32_t msn,
                std::uint64_t epoch) {
  Response* r = push(qp);
  if (r == nullptr) return false;
  r->kind = Response::Kind::kRead;
  r->psn = psn;
  r->first_psn = first_psn;
  r->last_psn = last_psn;
  r->src = src;
  r->odp_pid = odp_pid;
  r->va = reth.va.get();
  r->rkey = reth.rkey.get();
  r->mr_epoch = epoch;
  r->remaining = reth.dma_length.get();
  r->msn = msn;
  return true;
}

// A queued READ response may go on reading its region: checked again once a
// key has stopped working since it was queued (rxe re-checks the MR for
// every response packet). False: the region is gone, so is the READ.
bool read_source_valid(Qp& qp, Env& env, Response& r) {
  const std::uint64_t epoch = env.mrs->epoch();  // before the check (MrTable::epoch)
  if (r.mr_epoch == epoch || r.remaining == 0) [[likely]] return true;
  std::uint8_t* host = nullptr;
  if (env.mrs->check_remote(r.rkey, qp.pd, qp.qpn, r.va, r.remaining, IBV_ACCESS_REMOTE_READ, host, r.odp_pid) !=
      mem::AccessResult::kOk) {
    return false;
  }
  r.src = host;
  r.mr_epoch = epoch;
  return true;
}

// too_many_reads: the requester keeps at most max_dest_rd_atomic READs and
// atomics outstanding (its max_rd_atomic is at most our max_dest_rd_atomic).
// A new one is refused when its answer finds no room in the queue: sized
// for that many READs and atomics and the ACKs between them, only a
// requester over the limit fills it. Counting the READs and atomics whose
// answers are unsent instead would refuse a requester within it: a retried
// READ is answered again although the first answers may have reached the
// requester meanwhile (the responder never learns when they arrive). rxe
// never refuses one (it reuses its oldest resource).
ResponderStep execute_read(Qp& qp, Env& env, Request& r) {
  qp.counters.add(QpCounter::rx_packets);
  const wire::Reth reth = r.p.reth();
  std::uint8_t* host = nullptr;
  std::int32_t odp_pid = 0;
  std::uint64_t epoch = 0;
  if (check_reth(qp, env, reth, IBV_ACCESS_REMOTE_READ, host, odp_pid, epoch) != mem::AccessResult::kOk) {
    return leave(r, rkey_exit(env, reth.rkey.get(), ResponderExit::rkey_violation));
  }
  // An on-demand source is all there now, or the READ is refused here with
  // its own PSN (a page unmapped while the responses leave ends it then).
  if (odp_pid != 0 && !mem::odp_readable(odp_pid, reinterpret_cast<std::uintptr_t>(host), reth.dma_length.get()))
      [[unlikely]] {
    return leave(r, ResponderExit::odp_unmapped);
  }
  // At most 2^31 bytes (check_length), so at most 2^23 packets at 256 bytes.
  const std::uint64_t len = reth.dma_length.get();
  const std::uint64_t npackets = len == 0 ? 1 : (len + qp.mtu - 1) / qp.mtu;
  const std::uint32_t last = psn_add(r.psn, static_cast<std::int64_t>(npackets) - 1);
  // The MSN moves only if it executes: a refused READ completes nothing.
  if (!queue_read(qp, r.psn, r.psn, last, reth, host, odp_pid, qp.resp.msn + 1, epoch)) {
    return leave(r, ResponderExit::too_many_reads);
  }
  ++qp.resp.msn;
  ResponderResource& res = new_resource(qp);
  res.first_psn = r.psn;
  res.last_psn = last;
  res.msn = qp.resp.msn;
  qp.resp.psn = psn_add(last, 1);
  return ResponderStep::done;
}

ResponderStep execute_atomic(Qp& qp, Env& env, Request& r) {
  qp.counters.add(QpCounter::rx_packets);
  const wire::AtomicEth a = r.p.atomic_eth();
  if (a.va.get() & 7) return leave(r, ResponderExit::misaligned_atomic);
  std::uint8_t* host = nullptr;
  std::int32_t odp_pid = 0;
  if (env.mrs->check_remote(a.rkey.get(), qp.pd, qp.qpn, a.va.get(), 8, IBV_ACCESS_REMOTE_ATOMIC, host, odp_pid) !=
      mem::AccessResult::kOk) {
    return leave(r, rkey_exit(env, a.rkey.get(), ResponderExit::rkey_violation));
  }
  if (out_full(qp)) return leave(r, ResponderExit::too_many_reads);
  auto* target = reinterpret_cast<std::uint64_t*>(host);
  std::uint64_t orig;
  const bool cas = (r.p.opcode & 0x1f) == static_cast<std::uint8_t>(Opcode::kRcCompareSwap);  // RC's or XRC's
  if (odp_pid != 0) [[unlikely]] {
    if (!mem::odp_atomic(odp_pid, reinterpret_cast<std::uintptr_t>(host), cas, cas ? a.compare.get() : a.swap_add.get(),
                         a.swap_add.get(), orig)) {
      return leave(r, ResponderExit::odp_unmapped);
    }
  } else if (cas) {
    orig = a.compare.get();
    __atomic_compare_exchange_n(target, &orig, a.swap_add.get(), false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  } else {
    orig = __atomic_fetch_add(target, a.swap_add.get(), __ATOMIC_SEQ_CST);
  }
  qp.counters.add(QpCounter::atomics_executed);
  ++qp.resp.msn;
  ResponderResource& res = new_resource(qp);
  res.atomic = true;
  res.first_psn = res.last_psn = r.psn;
  res.orig = orig;
  res.msn = qp.resp.msn;
  Response* out = push(qp);  // room checked above
  out->kind = Response::Kind::kAtomicAck;
  out->psn = r.psn;
  out->orig = orig;
  out->msn = qp.resp.msn;
  qp.resp.psn = psn_add(r.psn, 1);
  return ResponderStep::done;
}

// IBA 1.5 ATOMIC WRITE (Soft-RoCE's rxe_resp.c runs it the same way): the
// RETH names 8 aligned bytes the QP and the key allow to be written; they
// are stored in one 8-byte store, after everything placed before them
// (release order). It takes a responder resource like an atomic, so a
// duplicate is answered, never executed again; the answer is an RDMA READ
// response Only with no payload.
ResponderStep execute_atomic_write(Qp& qp, Env& env, Request& r) {
  qp.counters.add(QpCounter::rx_packets);
  const wire::Reth reth = r.p.reth();
  if (reth.dma_length.get() != 8 || r.p.payload_length != 8) return leave(r, ResponderExit::bad_length);
  if (reth.va.get() & 7) return leave(r, ResponderExit::misaligned_atomic);
  std::uint8_t* host = nullptr;
  std::int32_t odp_pid = 0;
  if (env.mrs->check_remote(reth.rkey.get(), qp.pd, qp.qpn, reth.va.get(), 8, IBV_ACCESS_REMOTE_WRITE, host,
                            odp_pid) != mem::AccessResult::kOk) {
    return leave(r, rkey_exit(env, reth.rkey.get(), ResponderExit::rkey_violation));
  }
  // Room for the answer first: nothing is placed that cannot be answered.
  if (out_full(qp)) return leave(r, ResponderExit::too_many_reads);
  std::uint8_t bytes[8];
  r.p.visit_payload([&bytes](const std::uint8_t* data, std::size_t len, std::size_t at) {
    std::memcpy(bytes + at, data, len);
  });
  std::uint64_t value;
  std::memcpy(&value, bytes, sizeof value);  // the wire's bytes as they are, as a WRITE places them
  if (odp_pid != 0) [[unlikely]] {
    if (!mem::odp_atomic_store(odp_pid, reinterpret_cast<std::uintptr_t>(host), value)) {
      return leave(r, ResponderExit::odp_unmapped);
    }
  } else {
    __atomic_store_n(reinterpret_cast<std::uint64_t*>(host), value, __ATOMIC_RELEASE);
  }
  qp.counters.add(QpCounter::atomic_writes_executed);
  qp.counters.add(QpCounter::rx_bytes, 8);
  ++qp.resp.msn;
  ResponderResource& res = new_resource(qp);
  res.atomic = true;
  res.atomic_write = true;
  res.first_psn = res.last_psn = r.psn;
  res.msn = qp.resp.msn;
  queue_read(qp, r.psn, r.psn, r.psn, wire::Reth{}, nullptr, 0, qp.resp.msn, 0);  // room checked above
  qp.resp.psn = psn_add(r.psn, 1);
  return ResponderStep::done;
}

// --- Duplicates ------------------------------------------------------------------

// Drops queued answers from `psn` on: the requester has gone back there and
// will ask again for everything after it. That includes the rest of a READ
// answer running through `psn` (IBTA 9.7.5.1.2: a duplicate READ is
// answered from its own PSN; rxe restarts the resource the same way).
// Sending that rest as well, ahead of the new answer, would pour the same
// bytes on the requester twice, just after a burst it could not take.
void drop_answers_from(Qp& qp, std::uint32_t psn) {
  if (qp.resp.ack_owed && !psn_before(qp.resp.ack_psn, psn)) qp.resp.ack_owed = false;
  std::uint32_t keep = qp.resp.out_head;
  for (std::uint32_t i = qp.resp.out_head; i != qp.resp.out_tail; ++i) {
    const Response& r = qp.resp.out[i];
    const std::uint32_t last = r.kind == Response::Kind::kRead ? r.last_psn : r.psn;
    if (psn_before(last, psn) || r.fatal) qp.resp.out[keep++] = r;
  }
  qp.resp.out_tail = keep;
}

ResponderStep duplicate(Qp& qp, Env& env, Request& r) {
  qp.counters.add(QpCounter::duplicate_requests);
  const wire::OpcodeInfo& info = *r.p.info;
  if (info.has(wire::kReadRequest)) {
    // A duplicate READ is executed again from its PSN, within the resource of
    // the original; it answers from that PSN (Middle if it is not the first,
    // as rxe does), with the data the duplicate's RETH names.
    for (const ResponderResource& res : qp.resp.resources) {
      if (!res.valid || res.atomic || psn_before(r.psn, res.first_psn) || psn_after(r.psn, res.last_psn)) continue;
      const wire::Reth reth = r.p.reth();
      std::uint8_t* host = nullptr;
      std::int32_t odp_pid = 0;
      std::uint64_t epoch = 0;
      if (check_reth(qp, env, reth, IBV_ACCESS_REMOTE_READ, host, odp_pid, epoch) != mem::AccessResult::kOk) {
        return leave(r, rkey_exit(env, reth.rkey.get(), ResponderExit::rkey_violation));
      }
      drop_answers_from(qp, r.psn);
      if (!queue_read(qp, r.psn, res.first_psn, res.last_psn, reth, host, odp_pid, res.msn, epoch)) {
        return leave(r, ResponderExit::duplicate_no_room);
      }
      return ResponderStep::done;
    }
    return leave(r, ResponderExit::duplicate_read_unknown);
  }
  if (info.has(wire::kAtomicWriteOp)) {
    // A duplicate ATOMIC WRITE is not executed again (a later WRITE may have
    // overwritten its bytes since); its empty READ response is sent again.
    for (const ResponderResource& res : qp.resp.resources) {
      if (!res.valid || !res.atomic_write || res.first_psn != r.psn) continue;
      drop_answers_from(qp, r.psn);
      if (!queue_read(qp, r.psn, r.psn, r.psn, wire::Reth{}, nullptr, 0, res.msn, 0)) {
        return leave(r, ResponderExit::duplicate_no_room);
      }
      qp.counters.add(QpCounter::atomics_replayed);
      return ResponderStep::done;
    }
    return leave(r, ResponderExit::duplicate_atomic_unknown);
  }
  if (info.has(wire::kAtomic)) {
    // A duplicate atomic is never executed again; the saved result is sent back.
    for (const ResponderResource& res : qp.resp.resources) {
      if (!res.valid || !res.atomic || res.atomic_write || res.first_psn != r.psn) continue;
      drop_answers_from(qp, r.psn);
      Response* out = push(qp);
      if (out == nullptr) return leave(r, ResponderExit::duplicate_no_room);
      out->kind = Response::Kind::kAtomicAck;
      out->psn = r.psn;
      out->orig = res.orig;
      out->msn = res.msn;
      qp.counters.add(QpCounter::atomics_replayed);
      return ResponderStep::done;
    }
    return leave(r, ResponderExit::duplicate_atomic_unknown);
  }
  // A duplicate SEND or WRITE is not executed; it is answered with an ACK for
  // the latest PSN received in order (as rxe does, for every duplicate packet).
  queue_ack(qp, psn_add(qp.resp.psn, -1));
  return ResponderStep::done;
}

// Selective repeat's ACK, NAK or RNR NAK carries the receive window as it is
// when it leaves (so a queued one says the latest): the expected PSN and
// which after it came. An ACK's PSN is the last one received in order, its
// MSN the latest.
void fill_sack(const Qp& qp, const Response& r, wire::TransportHeaders& th) {
  const ReceiveWindow& w = qp.sr->window;
  th.sacketh.expected.set(w.expected());
  th.sacketh.bits.fill(0);
  const SackBits& seen = w.seen();
  if (seen.any()) {
    for (std::size_t i = 0; i < kSackWindow; ++i) {
      if (seen[i]) th.sacketh.bits[i / 8] = static_cast<std::uint8_t>(th.sacketh.bits[i / 8] | (0x80u >> (i % 8)));
    }
  }
  if (r.syndrome == kAckSyndrome) {
    th.bth.psn.set(psn_add(w.expected(), -1));
    th.aeth.msn.set(qp.resp.msn);
  }
}

}  // namespace

// The responder's state machine (rules.h: UROCE_RESPONDER_STEPS): each step
// returns the next, until the packet is done with or leaves by an exit.
void responder_on_request(Qp& qp, Env& env, const wire::ParsedFrame& p) {
  Request r{p, p.bth().psn.get()};
  ResponderStep step = ResponderStep::check_state;
  for (;;) {
    switch (step) {
      case ResponderStep::check_state: step = check_state(qp, r); break;
      case ResponderStep::check_xrc_srq: step = check_xrc_srq(qp, r); break;
      case ResponderStep::check_psn: step = check_psn(qp, r); break;
      case ResponderStep::duplicate: step = duplicate(qp, env, r); break;
      case ResponderStep::check_op_sequence: step = check_op_sequence(qp, r); break;
      case ResponderStep::check_sreth: step = check_sreth(qp, r); break;
      case ResponderStep::check_op_allowed: step = check_op_allowed(qp, r); break;
      case ResponderStep::check_resources: step = check_resources(qp, r); break;
      case ResponderStep::check_length: step = check_length(qp, r); break;
      case ResponderStep::execute_send: step = execute_send(qp, env, r); break;
      case ResponderStep::execute_write: step = execute_write(qp, env, r); break;
      case ResponderStep::execute_read: step = execute_read(qp, env, r); break;
      case ResponderStep::execute_atomic: step = execute_atomic(qp, env, r); break;
      case ResponderStep::execute_atomic_write: step = execute_atomic_write(qp, env, r); break;
      case ResponderStep::exit: take_exit(qp, r); return;
      case ResponderStep::done:
        if (qp.sr != nullptr && qp.state != IBV_QPS_ERR) sr_settle(qp, env, r);
        return;
    }
  }
}

bool only_an_ack_queued(const Qp& qp) {
  if (qp.resp.ack_owed) return true;  // `out` is empty then, and this is a plain ACK
  if (qp.sr != nullptr || qp.resp.out_tail - qp.resp.out_head != 1) return false;
  const Response& r = qp.resp.out[qp.resp.out_head];
  return r.kind == Response::Kind::kAck && r.syndrome == kAckSyndrome && !r.fatal;
}

std::uint16_t responder_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room) {
  std::uint16_t n = 0;
  if (qp.resp.ack_owed && room > 0) {
    qp.resp.ack_owed = false;
    if (qp.receives()) {
      wire::TransportHeaders th;
      packet_bth(th.bth, qp, Opcode::kRcAcknowledge, qp.resp.ack_psn, false, false);
      th.bth.opcode = service_opcode(qp, Opcode::kRcAcknowledge);
      th.aeth.syndrome = kAckSyndrome;
      th.aeth.msn.set(qp.resp.ack_msn);
      qp.counters.add(QpCounter::acks_sent);
      wire::TxFrame& f = out[n++];
      f.npieces = 0;
      emit(qp, env, f, th, 0);
    }
  }
  while (n < room && qp.resp.out_head != qp.resp.out_tail) {
    Response& r = qp.resp.out[qp.resp.out_head];
    if (!qp.receives() && !r.fatal) {
      ++qp.resp.out_head;
      continue;
    }
    // READ response data is this QP's traffic: paced like requests; ACKs
    // are not held back.
    if (r.kind == Response::Kind::kRead && !pace_allows(qp, env)) break;
    wire::TransportHeaders th;
    wire::Bth& b = th.bth;
    packet_bth(b, qp, Opcode::kRcAcknowledge, r.psn, false, false);
    wire::TxFrame& f = out[n++];
    f.npieces = 0;
    std::uint32_t payload = 0;
    th.aeth.syndrome = r.kind == Response::Kind::kAck ? r.syndrome : kAckSyndrome;
    th.aeth.msn.set(r.msn);
    switch (r.kind) {
      case Response::Kind::kAck:
        b.opcode = service_opcode(qp, Opcode::kRcAcknowledge);
        if (qp.sr != nullptr) fill_sack(qp, r, th);
        qp.counters.add(QpCounter::acks_sent);
        ++qp.resp.out_head;
        break;
      case Response::Kind::kAtomicAck:
        b.opcode = service_opcode(qp, Opcode::kRcAtomicAcknowledge);
        th.atomic_ack_eth.orig_data.set(r.orig);
        ++qp.resp.out_head;
        break;
      case Response::Kind::kRead: {
        if (!read_source_valid(qp, env, r)) [[unlikely]] {
          // The region was deregistered mid-READ: nothing more is read; the
          // rest is refused with the exit's NAK at the next response's PSN.
          --n;
          const wire::ParsedFrame none{};
          Request gone{none, r.psn, ResponderExit::read_revoked};
          ++qp.resp.out_head;
          take_exit(qp, gone);
          continue;
        }
        const bool first = r.psn == r.first_psn;
        const bool last = r.psn == r.last_psn;
        payload = std::min(qp.mtu, r.remaining);
        b.opcode = service_opcode(qp, first && last ? Opcode::kRcReadResponseOnly
                                      : first       ? Opcode::kRcReadResponseFirst
                                      : last        ? Opcode::kRcReadResponseLast
                                                    : Opcode::kRcReadResponseMiddle);
        if (payload > 0 && r.odp_pid != 0) [[unlikely]] {
          // On demand: gathered through the kernel and copied into the head;
          // a page gone since the request ends the READ with a remote access
          // NAK at this PSN, as a deregistration does.
          if (!mem::odp_read(r.odp_pid, odp_bounce.data(), reinterpret_cast<std::uintptr_t>(r.src), payload)) {
            --n;
            const wire::ParsedFrame none{};
            Request gone{none, r.psn, ResponderExit::odp_unmapped};
            ++qp.resp.out_head;
            take_exit(qp, gone);
            continue;
          }
          f.pieces[0] = std::span<const std::uint8_t>(odp_bounce.data(), payload);
          f.npieces = 1;
        } else if (payload > 0) {
          f.pieces[0] = std::span<const std::uint8_t>(r.src, payload);
          f.npieces = 1;
        }
        r.src += payload;
        r.va += payload;
        r.remaining -= payload;
        r.psn = psn_add(r.psn, 1);
        qp.counters.add(QpCounter::read_responses_sent);
        if (last) ++qp.resp.out_head;
        break;
      }
    }
    if (r.kind == Response::Kind::kRead && r.odp_pid != 0) [[unlikely]] {
      emit_copied(qp.path, qp, env, f, th, payload);  // the bounce is reused by the next
    } else {
      emit(qp, env, f, th, payload);
    }
    if (r.kind == Response::Kind::kRead) paced_sent(qp, env, f.frame_bytes());
  }
  return n;
}

}  // namespace uroce::transport
