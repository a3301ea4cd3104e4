// Completer (IBTA 9.7.5.x, requester side): ACKs, NAKs, READ responses and
// atomic ACKs retire send WQEs in posting order, exactly once; sequence
// errors, timeouts and missing responses send the requester back to the
// first PSN not answered (go-back-N); RNR NAKs pause it for the NAK's timer.
#include <algorithm>

#include "transport/psn.h"
#include "transport/rules.h"
#include "transport/sgl.h"
#include "wire/opcode.h"

namespace uroce::transport {
namespace {

using wire::AethKind;

std::uint32_t last_psn(const SendWqe& w) { return psn_add(w.first_psn, static_cast<std::int64_t>(w.npackets) - 1); }

bool outstanding(const Qp& qp) { return qp.comp_next != qp.req_next || qp.req.pkt_index != 0; }

// Forward progress (IBTA 9.7.6): the retry counters start over, and the
// timer restarts from now if a packet that asked for a response is still
// unanswered. Otherwise it stops until the next such packet leaves: packets
// sent since carry no AckReq yet (a paced QP may take longer than the
// timeout to reach the message end), and any gap among them is NAKed when
// the next one arrives.
void progress(Qp& qp, Env& env) {
  qp.comp.window = std::min(window_cap(qp), qp.comp.window * 2);
  qp.comp.retry_left = qp.attr.retry_cnt;
  qp.comp.rnr_left = qp.attr.rnr_retry;
  qp.comp.rewound = false;
  qp.comp.awaiting = qp.comp.awaiting && outstanding(qp) && !psn_after(qp.comp.psn, qp.comp.awaited_psn);
  qp.comp.deadline = qp.comp.awaiting ? retransmit_deadline(qp, env) : 0;
}

// The requester must not lag behind what the responder has acknowledged
// (acknowledgements can complete WQEs a rewind had meant to send again).
void catch_up(Qp& qp) {
  const bool behind_wqe = static_cast<std::int32_t>(qp.req_next - qp.comp_next) < 0;
  if (behind_wqe || psn_before(qp.req.psn, qp.comp.psn)) requester_rewind(qp, qp.comp.psn);
}

// Resends from `psn`; the timer starts again with the first resent packet
// that asks for a response.
void go_back(Qp& qp, std::uint32_t psn) {
  requester_rewind(qp, psn);
  qp.comp.rewound = true;
  qp.comp.rewound_psn = psn;
  qp.comp.rewound_seen = psn_add(psn, -1);
  qp.comp.awaiting = false;
  qp.comp.deadline = 0;
}

void apply_exit(Qp& qp, CompleterExit e) {
  const CompleterRule& rule = rule_of(e);
  qp.counters.add(rule.counter);
  if (rule.status != kNoCompletion) complete_send(qp, rule.status);
}

// Spends one transport retry and goes back to `psn`; false when none was
// left and the oldest WR has ended (retry_exceeded).
bool spend_retry(Qp& qp, std::uint32_t psn) {
  if (qp.comp.retry_left == 0) {
    apply_exit(qp, CompleterExit::retry_exceeded);
    return false;
  }
  --qp.comp.retry_left;
  go_back(qp, psn);
  return true;
}

enum class AckResult { kDone, kReadMissing };

// Completes the SEND and WRITE WQEs that `psn` acknowledges (all of their
// packets at or before it). A READ or atomic in the way stops the walk: if
// `psn` lies at or beyond it, its responses were lost (IBTA 9.7.5.1.6, an
// implicit NAK); a response for it (`for_response`) is handled by the caller.
AckResult ack_through(Qp& qp, Env& env, std::uint32_t psn, bool for_response) {
  bool moved = false;
  AckResult result = AckResult::kDone;
  while (qp.comp_next != qp.sq_posted && qp.state != IBV_QPS_ERR) {
    SendWqe& w = qp.sq[qp.comp_next];
    if (!w.started || psn_before(psn, w.first_psn)) break;
    if (is_read_or_atomic(w)) {
      // Its responses through `psn` have all arrived: nothing is missing (a
      // NAK at the next response's PSN acknowledges no more than that).
      if (psn_before(psn, qp.comp.psn)) break;
      const bool inside = !psn_after(psn, last_psn(w));
      if (!(for_response && inside)) result = AckResult::kReadMissing;
      break;
    }
    if (psn_before(psn, last_psn(w))) {
      if (psn_after(psn_add(psn, 1), qp.comp.psn)) {
        qp.comp.psn = psn_add(psn, 1);
        moved = true;
      }
      break;
    }
    qp.comp.psn = psn_add(last_psn(w), 1);
    complete_send(qp, IBV_WC_SUCCESS);
    moved = true;
  }
  if (moved && qp.state != IBV_QPS_ERR) {
    catch_up(qp);
    progress(qp, env);
  }
  return result;
}

// One response packet on its way through the completer.
struct Reply {
  const wire::ParsedFrame& p;
  std::uint32_t psn;
  CompleterExit exit = CompleterExit::kCount;
  std::uint32_t retry_from = 0;  // retry: where to go back to
  bool ahead = false;            // a READ response beyond the next one due
  SendWqe* wqe = nullptr;        // read_response, atomic_ack: the WR answered
};

CompleterStep leave(Reply& r, CompleterExit e) {
  r.exit = e;
  return CompleterStep::exit;
}

// --- The steps ---------------------------------------------------------------------

CompleterStep check_state(const Qp& qp, Reply& r) {
  return qp.active() || qp.state == IBV_QPS_SQE ? CompleterStep::check_psn : leave(r, CompleterExit::not_active);
}

// A response answers a request packet that was sent: one whose PSN lies at
// or beyond the highest PSN sent (high_psn is one past it) answers nothing.
// It must neither complete a WR (a WRITE would report SUCCESS with packets
// never sent) nor move the requester (a sequence NAK ahead of everything
// would wedge it). With nothing outstanding every PSN from comp.psn on is
// beyond. Older ones are stale, judged by each kind.
CompleterStep check_psn(Qp& qp, Reply& r) {
  if (!psn_before(r.psn, qp.req.high_psn)) [[unlikely]] return leave(r, CompleterExit::not_sent);
  const wire::OpcodeInfo& info = *r.p.info;
  if (info.has(wire::kReadResponse) || info.has(wire::kAtomicAck)) return CompleterStep::acknowledge_before;
  qp.counters.add(QpCounter::acks_received);
  switch (wire::aeth_kind(r.p.aeth().syndrome)) {
    case AethKind::kAck: return CompleterStep::ack;
    case AethKind::kRnrNak:
      qp.counters.add(QpCounter::rnr_naks_received);
      return CompleterStep::acknowledge_before;
    case AethKind::kNak: return CompleterStep::acknowledge_before;
    case AethKind::kReserved: break;
  }
  return leave(r, CompleterExit::reserved_syndrome);
}

// A NAK, an RNR NAK or a response acknowledges every PSN before its own.
CompleterStep acknowledge_before(Qp& qp, Env& env, Reply& r) {
  if (psn_before(r.psn, qp.comp.psn)) return leave(r, CompleterExit::stale);
  const wire::OpcodeInfo& info = *r.p.info;
  const bool response = info.has(wire::kReadResponse) || info.has(wire::kAtomicAck);
  if (ack_through(qp, env, psn_add(r.psn, -1), response) == AckResult::kReadMissing) {
    return CompleterStep::implicit_nak;
  }
  if (qp.state == IBV_QPS_ERR) return CompleterStep::done;
  if (info.has(wire::kReadResponse)) return CompleterStep::read_response;
  if (info.has(wire::kAtomicAck)) return CompleterStep::atomic_ack;
  return wire::aeth_kind(r.p.aeth().syndrome) == AethKind::kRnrNak ? CompleterStep::rnr_nak : CompleterStep::nak;
}

CompleterStep ack(Qp& qp, Env& env, Reply& r) {
  // An ACK for comp.psn - 1 repeats the last one; anything older is stale.
  if (psn_before(r.psn, psn_add(qp.comp.psn, -1))) return leave(r, CompleterExit::stale);
  return ack_through(qp, env, r.psn, false) == AckResult::kReadMissing ? CompleterStep::implicit_nak
                                                                        : CompleterStep::done;
}

CompleterStep rnr_nak(Qp& qp, Env& env, Reply& r) {
  if (r.psn != qp.comp.psn) return leave(r, CompleterExit::stale);
  if (qp.attr.rnr_retry != 7) {  // 7: retry for ever (IBTA 9.7.5.2.8)
    if (qp.comp.rnr_left == 0) return leave(r, CompleterExit::rnr_retry_exceeded);
    --qp.comp.rnr_left;
  }
  requester_rnr_wait(qp, env, r.psn, wire::aeth_value(r.p.aeth().syndrome));
  qp.comp.deadline = 0;  // waiting is not a timeout
  return CompleterStep::done;
}

CompleterStep nak(Qp& qp, Reply& r) {
  const auto code = static_cast<wire::NakCode>(wire::aeth_value(r.p.aeth().syndrome));
  if (code != wire::NakCode::kPsnSequenceError) return leave(r, nak_exit(code));
  qp.counters.add(QpCounter::nak_seq_received);
  if (qp.comp.rewound && r.psn == qp.comp.rewound_psn) return CompleterStep::done;  // already going back there
  r.retry_from = r.psn;
  return CompleterStep::retry;
}

// Responses were lost behind a later answer: go back (IBTA 9.7.5.1.6),
// unless already going back. Then READ responses beyond the next one due
// are at first the tail of the answer that was cut short, in rising PSN
// order; one at or below the highest of them belongs to the answer to the
// request sent again, whose first packets were lost as well (a burst that
// overflowed the receiver's ring once tends to do so again). That loss is
// known now: asking again at once spends the same retry as the local ACK
// timeout would, without the timeout's wait (UCX's is about a second).
// Any other second loss is still left to the timer.
CompleterStep implicit_nak(Qp& qp, Reply& r) {
  qp.counters.add(QpCounter::implicit_naks);
  if (qp.comp.rewound) {
    if (!r.ahead) return CompleterStep::done;
    if (psn_after(r.psn, qp.comp.rewound_seen)) {
      qp.comp.rewound_seen = r.psn;
      return CompleterStep::done;
    }
    qp.counters.add(QpCounter::read_restart_lost);
  }
  r.retry_from = qp.comp.psn;
  return CompleterStep::retry;
}

CompleterStep retry(Qp& qp, Env& env, Reply& r) {
  delay_loss(qp, env);  // a sequence NAK or missing responses: a loss found without the timer
  if (spend_retry(qp, r.retry_from) && r.ahead) qp.comp.rewound_seen = r.psn;
  return CompleterStep::done;
}

// The READ or atomic WQE the response answers (after acknowledge_before has
// acknowledged what precedes it); the list it places into resolved again if
// a region was deregistered since.
CompleterStep match(Qp& qp, Env& env, Reply& r, WqeKind kind) {
  if (qp.comp_next == qp.sq_posted) return leave(r, CompleterExit::unmatched);
  SendWqe& w = qp.sq[qp.comp_next];
  if (!w.started || w.kind != kind || psn_before(r.psn, w.first_psn) || psn_after(r.psn, last_psn(w))) {
    return leave(r, CompleterExit::unmatched);
  }
  if (r.psn != qp.comp.psn) {
    // A response beyond the next one due: the ones between were lost.
    qp.counters.add(QpCounter::out_of_sequence_responses);
    r.ahead = kind == WqeKind::kRead;
    return CompleterStep::implicit_nak;
  }
  const int need = kind == WqeKind::kAtomicWrite ? 0 : IBV_ACCESS_LOCAL_WRITE;  // ATOMIC WRITE's list is its source
  if (wqe_resolve(w, *env.mrs, qp.pd, need) != mem::AccessResult::kOk) [[unlikely]] {
    return leave(r, CompleterExit::local_revoked);
  }
  r.wqe = &w;
  return CompleterStep::done;
}

// `last`: the WR's last response; `segment_last`: a READ segment's (its
// request no longer outstanding; the WR's own counts in complete_send). A
// segment asked for before a go-back and not since is put right by
// catch_up, which counts the requests again.
void answered(Qp& qp, Env& env, std::uint32_t psn, bool last, bool segment_last = false) {
  qp.counters.add(QpCounter::rx_packets);
  qp.comp.psn = psn_add(psn, 1);
  if (last) complete_send(qp, IBV_WC_SUCCESS);
  else if (segment_last && qp.req.reads_outstanding > 0) --qp.req.reads_outstanding;
  if (qp.state != IBV_QPS_ERR) {
    catch_up(qp);
    progress(qp, env);
  }
}

// ATOMIC WRITE's answer (IBA 1.5; Soft-RoCE sends the same): an RDMA READ
// response Only with no payload.
CompleterStep atomic_write_response(Qp& qp, Env& env, Reply& r) {
  if (const CompleterStep s = match(qp, env, r, WqeKind::kAtomicWrite); r.wqe == nullptr) return s;
  if (!r.p.info->has(wire::kOnly) || r.p.payload_length != 0) return leave(r, CompleterExit::bad_read_response);
  answered(qp, env, r.psn, true);
  return CompleterStep::done;
}

CompleterStep read_response(Qp& qp, Env& env, Reply& r) {
  if (qp.comp_next != qp.sq_posted && qp.sq[qp.comp_next].kind == WqeKind::kAtomicWrite) {
    return atomic_write_response(qp, env, r);
  }
  if (const CompleterStep s = match(qp, env, r, WqeKind::kRead); r.wqe == nullptr) return s;
  SendWqe& w = *r.wqe;
  const std::uint32_t index = static_cast<std::uint32_t>(psn_diff(r.psn, w.first_psn));
  const std::uint32_t offset = index * qp.mtu;
  const std::uint32_t expect = std::min(qp.mtu, w.length - offset);
  const bool last = r.psn == last_psn(w);
  const bool segment_last = index + 1 == read_segment_end(qp, w.npackets, index);
  // The opcode must fit the position: Last/Only end each segment's answer
  // (the READ's own at its last). A restarted READ may begin with First (a
  // fresh request) or Middle (rxe), so either is accepted before the last
  // packet.
  if (r.p.info->has(wire::kLast) != segment_last || r.p.payload_length != expect) {
    return leave(r, CompleterExit::bad_read_response);
  }
  if (!wqe_scatter_payload(w, offset, r.p)) [[unlikely]] return leave(r, CompleterExit::local_unmapped);
  qp.counters.add(QpCounter::rx_bytes, expect);
  answered(qp, env, r.psn, last, segment_last);
  return CompleterStep::done;
}

CompleterStep atomic_ack(Qp& qp, Env& env, Reply& r) {
  if (const CompleterStep s = match(qp, env, r, WqeKind::kAtomic); r.wqe == nullptr) return s;
  const std::uint64_t orig = r.p.atomic_ack_eth().orig_data.get();
  // Host byte order, as verbs returns it.
  if (!sgl_scatter(r.wqe->sge.data(), 1, 0, reinterpret_cast<const std::uint8_t*>(&orig), sizeof orig,
                   r.wqe->odp_sges, r.wqe->odp_pid)) [[unlikely]] {
    return leave(r, CompleterExit::local_unmapped);
  }
  answered(qp, env, r.psn, true);
  return CompleterStep::done;
}

}  // namespace

void complete_send(Qp& qp, ibv_wc_status status) {
  // Only a posted WR completes (the responses that reach here all answer
  // PSNs sent, so some WR is outstanding; this keeps the invariant anyway).
  if (qp.comp_next == qp.sq_posted) [[unlikely]] return;
  SendWqe& w = qp.sq[qp.comp_next];
  // A READ/atomic whose request went out in the current pass is counted.
  if (is_read_or_atomic(w) && qp.comp_next != qp.req_next && qp.req.reads_outstanding > 0) {
    --qp.req.reads_outstanding;
  }
  const bool signaled = status != IBV_WC_SUCCESS || (w.send_flags & IBV_SEND_SIGNALED);
  ibv_wc wc{};
  if (signaled) {
    wc.wr_id = w.wr_id;
    wc.status = status;
    wc.opcode = wc_opcode_for(w.opcode);
    wc.qp_num = qp.qpn;
    if (w.kind == WqeKind::kRead || w.kind == WqeKind::kAtomic) wc.byte_len = w.length;
  }
  if (qp.comp_next == qp.req_next) {
    ++qp.req_next;
    qp.req.pkt_index = 0;
  }
  ++qp.comp_next;
  bool cq_ok = true;
  if (signaled) {
    // The WQE's slot is free before its completion can be polled: an
    // application that posts again on seeing it (max_send_wr 1, as
    // ibv_rc_pingpong) must not find the queue full.
    publish_to_app(qp);
    cq_ok = qp.send_cq->push(wc);
    qp.counters.add(QpCounter::completions);
  }
  if (status != IBV_WC_SUCCESS) {
    qp.counters.add(QpCounter::completion_errors);
    qp_enter_error(qp);
  } else if (!cq_ok) {
    qp_enter_error(qp);  // CQ overrun: a catastrophic error for the QPs on it
  }
}

namespace {

// The completer's state machine (rules.h: UROCE_COMPLETER_STEPS): each step
// returns the next, until the packet is done with or leaves by an exit.
void run_completer(Qp& qp, Env& env, const wire::ParsedFrame& p) {
  Reply r{p, p.bth().psn.get()};
  CompleterStep step = CompleterStep::check_state;
  for (;;) {
    switch (step) {
      case CompleterStep::check_state: step = check_state(qp, r); break;
      case CompleterStep::check_psn: step = check_psn(qp, r); break;
      case CompleterStep::acknowledge_before: step = acknowledge_before(qp, env, r); break;
      case CompleterStep::ack: step = ack(qp, env, r); break;
      case CompleterStep::rnr_nak: step = rnr_nak(qp, env, r); break;
      case CompleterStep::nak: step = nak(qp, r); break;
      case CompleterStep::read_response: step = read_response(qp, env, r); break;
      case CompleterStep::atomic_ack: step = atomic_ack(qp, env, r); break;
      case CompleterStep::implicit_nak: step = implicit_nak(qp, r); break;
      case CompleterStep::retry: step = retry(qp, env, r); break;
      case CompleterStep::exit: apply_exit(qp, r.exit); return;
      case CompleterStep::done: return;
    }
  }
}

}  // namespace

void completer_on_response(Qp& qp, Env& env, const wire::ParsedFrame& p) {
  // The path's switches for the delay target, from this response's TTL:
  // the way back is taken to be as long as the way there (Swift's rule).
  if (qp.delay != nullptr) {
    qp.delay->window.set_hops(cc::hops_from_ttl(p.ip_version == 6 ? p.ipv6().hop_limit : p.ipv4().ttl));
  }
  if (qp.sr != nullptr) {
    sr_on_response(qp, env, p);
    return;
  }
  const std::uint32_t before = qp.comp.psn;
  run_completer(qp, env, p);
  // What the response acknowledged, with its RTT (cc = delay).
  if (qp.delay != nullptr && qp.state != IBV_QPS_ERR) delay_acked(qp, env, before, qp.comp.psn);
}

void completer_on_timer(Qp& qp, Env& env) {
  if (qp.sr != nullptr) {
    sr_on_timer(qp, env);
    return;
  }
  if (qp.comp.deadline == 0 || env.now < qp.comp.deadline || !qp.active()) return;
  if (!outstanding(qp)) {
    qp.comp.deadline = 0;
    return;
  }
  qp.counters.add(QpCounter::timeouts);
  delay_timeout(qp, env);
  // A local ACK timeout spends a retry and resends from the oldest PSN not
  // acknowledged, a small window first. retry_cnt 7 means seven, not
  // infinite (unlike rnr_retry).
  qp.comp.window = std::min(window_cap(qp), kWindowAfterTimeout);
  spend_retry(qp, qp.comp.psn);
}

}  // namespace uroce::transport
