// Completer (IBTA 9.7.5.x, requester side): ACKs, NAKs, READ responses and
// atomic ACKs retire send WQEs in posting order, exactly once; sequence
// errors, timeouts and missing responses send the requester back to the
// first PSN not answered (go-back-N); RNR NAKs pause it for the NAK's timer.
#include "transport/psn.h"
#include "transport/rnr.h"
#include "transport/sgl.h"
#include "wire/opcode.h"

namespace uroce::transport {
namespace {

using wire::AethKind;

ibv_wc_opcode wc_opcode(const SendWqe& w) {
  switch (w.kind) {
    case WqeKind::kSend: return IBV_WC_SEND;
    case WqeKind::kWrite: return IBV_WC_RDMA_WRITE;
    case WqeKind::kRead: return IBV_WC_RDMA_READ;
    case WqeKind::kAtomic: return w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD;
  }
  return IBV_WC_SEND;
}

std::uint32_t last_psn(const SendWqe& w) { return psn_add(w.first_psn, static_cast<std::int64_t>(w.npackets) - 1); }

bool outstanding(const Qp& qp) { return qp.comp_next != qp.req_next || qp.req.pkt_index != 0; }

// Forward progress (IBTA 9.7.6): the retry counters start over, and the
// timer restarts from now if a packet that asked for a response is still
// unanswered. Otherwise it stops until the next such packet leaves: packets
// sent since carry no AckReq yet (a paced QP may take longer than the
// timeout to reach the message end), and any gap among them is NAKed when
// the next one arrives.
void progress(Qp& qp, Env& env) {
  qp.comp.retry_left = qp.attr.retry_cnt;
  qp.comp.rnr_left = qp.attr.rnr_retry;
  qp.comp.rewound = false;
  qp.comp.awaiting = qp.comp.awaiting && outstanding(qp) && !psn_after(qp.comp.psn, qp.comp.awaited_psn);
  qp.comp.deadline = qp.comp.awaiting ? retransmit_deadline(qp, env.now) : 0;
}

// The requester must not lag behind what the responder has acknowledged
// (acknowledgements can complete WQEs a rewind had meant to send again).
void catch_up(Qp& qp) {
  const bool behind_wqe = static_cast<std::int32_t>(qp.req_next - qp.comp_next) < 0;
  if (behind_wqe || psn_before(qp.req.psn, qp.comp.psn)) requester_rewind(qp, qp.comp.psn);
}

// Spends one transport retry (sequence NAK, timeout, missing responses):
// false when none was left, and the oldest WQE has ended with RETRY_EXC_ERR.
bool spend_retry(Qp& qp) {
  if (qp.comp.retry_left == 0) {
    qp.counters.add(QpCounter::retry_exceeded);
    complete_send(qp, IBV_WC_RETRY_EXC_ERR);
    return false;
  }
  --qp.comp.retry_left;
  return true;
}

// Resends from `psn`; the timer starts again with the first resent packet
// that asks for a response.
void go_back(Qp& qp, std::uint32_t psn) {
  requester_rewind(qp, psn);
  qp.comp.rewound = true;
  qp.comp.rewound_psn = psn;
  qp.comp.awaiting = false;
  qp.comp.deadline = 0;
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

void read_missing(Qp& qp) {
  qp.counters.add(QpCounter::implicit_naks);
  if (qp.comp.rewound) return;  // already going back; the timer covers a second loss
  if (spend_retry(qp)) go_back(qp, qp.comp.psn);
}

void on_ack(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  const wire::Aeth aeth = p.aeth();
  const std::uint8_t value = wire::aeth_value(aeth.syndrome);
  qp.counters.add(QpCounter::acks_received);
  switch (wire::aeth_kind(aeth.syndrome)) {
    case AethKind::kAck:
      if (psn_before(psn, psn_add(qp.comp.psn, -1))) qp.counters.add(QpCounter::duplicate_responses);
      if (ack_through(qp, env, psn, false) == AckResult::kReadMissing) read_missing(qp);
      return;
    case AethKind::kRnrNak: {
      qp.counters.add(QpCounter::rnr_naks_received);
      // An RNR NAK acknowledges every PSN before its own (an implicit ACK, IBTA 9.7.5).
      if (ack_through(qp, env, psn_add(psn, -1), false) == AckResult::kReadMissing) {
        read_missing(qp);
        return;
      }
      if (qp.state == IBV_QPS_ERR || psn != qp.comp.psn) return;  // stale
      if (qp.attr.rnr_retry != 7) {  // 7: retry for ever (IBTA 9.7.5.2.8)
        if (qp.comp.rnr_left == 0) {
          qp.counters.add(QpCounter::rnr_retry_exceeded);
          complete_send(qp, IBV_WC_RNR_RETRY_EXC_ERR);
          return;
        }
        --qp.comp.rnr_left;
      }
      qp.req.rnr_wait = true;
      qp.req.rnr_until = env.now + rnr_timer_ns(value);
      qp.req.rnr_psn = psn;
      qp.comp.deadline = 0;  // waiting is not a timeout
      return;
    }
    case AethKind::kNak: {
      if (ack_through(qp, env, psn_add(psn, -1), false) == AckResult::kReadMissing) {
        read_missing(qp);
        return;
      }
      if (qp.state == IBV_QPS_ERR || psn_before(psn, qp.comp.psn)) return;  // stale
      switch (static_cast<wire::NakCode>(value)) {
        case wire::NakCode::kPsnSequenceError:
          qp.counters.add(QpCounter::nak_seq_received);
          if (qp.comp.rewound && psn == qp.comp.rewound_psn) return;  // already going back there
          if (spend_retry(qp)) go_back(qp, psn);
          return;
        case wire::NakCode::kInvalidRequest:
          qp.counters.add(QpCounter::nak_inv_req_received);
          complete_send(qp, IBV_WC_REM_INV_REQ_ERR);
          return;
        case wire::NakCode::kRemoteAccessError:
          qp.counters.add(QpCounter::nak_rem_access_received);
          complete_send(qp, IBV_WC_REM_ACCESS_ERR);
          return;
        case wire::NakCode::kRemoteOperationalError:
          qp.counters.add(QpCounter::nak_rem_op_received);
          complete_send(qp, IBV_WC_REM_OP_ERR);
          return;
        case wire::NakCode::kInvalidRdRequest:
          break;
      }
      qp.counters.add(QpCounter::nak_inv_req_received);
      complete_send(qp, IBV_WC_REM_INV_REQ_ERR);
      return;
    }
    case AethKind::kReserved:
      return;
  }
}

// The READ or atomic WQE a response with `psn` answers, after acknowledging
// what precedes it; nullptr if the response is stale or out of order.
SendWqe* answered_wqe(Qp& qp, Env& env, std::uint32_t psn, WqeKind kind) {
  if (psn_before(psn, qp.comp.psn)) {
    qp.counters.add(QpCounter::duplicate_responses);
    return nullptr;
  }
  if (ack_through(qp, env, psn_add(psn, -1), true) == AckResult::kReadMissing) {
    read_missing(qp);
    return nullptr;
  }
  if (qp.state == IBV_QPS_ERR || qp.comp_next == qp.sq_posted) return nullptr;
  SendWqe& w = qp.sq[qp.comp_next];
  if (!w.started || w.kind != kind || psn_before(psn, w.first_psn) || psn_after(psn, last_psn(w))) {
    qp.counters.add(QpCounter::duplicate_responses);
    return nullptr;
  }
  if (psn != qp.comp.psn) {
    // A response beyond the next one due: the ones between were lost.
    qp.counters.add(QpCounter::out_of_sequence_responses);
    read_missing(qp);
    return nullptr;
  }
  return &w;
}

// The READ or atomic WQE's list may take the response: resolved again if a
// region was deregistered since (a local protection error then ends it).
bool may_place(Qp& qp, Env& env, SendWqe& w) {
  if (wqe_resolve(w, *env.mrs, qp.pd, IBV_ACCESS_LOCAL_WRITE) == mem::AccessResult::kOk) [[likely]] return true;
  qp.counters.add(QpCounter::mr_revoked_in_flight);
  complete_send(qp, IBV_WC_LOC_PROT_ERR);
  return false;
}

void on_read_response(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  SendWqe* w = answered_wqe(qp, env, psn, WqeKind::kRead);
  if (w == nullptr) return;
  const std::uint32_t index = static_cast<std::uint32_t>(psn_diff(psn, w->first_psn));
  const std::uint32_t offset = index * qp.mtu;
  const std::uint32_t expect = std::min(qp.mtu, w->length - offset);
  const bool last = psn == last_psn(*w);
  // The opcode must fit the position: Last/Only end the READ. A restarted
  // READ may begin with First (a fresh request) or Middle (rxe), so either
  // is accepted before the last packet.
  const bool says_last = p.info->has(wire::kLast);
  if (says_last != last || p.payload_length != expect) {
    qp.counters.add(QpCounter::drop_bad_opcode_sequence);
    return;
  }
  if (!may_place(qp, env, *w)) return;
  sgl_scatter(w->sge.data(), w->num_sge, offset, p.payload().data(), expect);
  qp.counters.add(QpCounter::rx_packets);
  qp.counters.add(QpCounter::rx_bytes, expect);
  qp.comp.psn = psn_add(psn, 1);
  if (last) complete_send(qp, IBV_WC_SUCCESS);
  if (qp.state != IBV_QPS_ERR) {
    catch_up(qp);
    progress(qp, env);
  }
}

void on_atomic_ack(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  SendWqe* w = answered_wqe(qp, env, psn, WqeKind::kAtomic);
  if (w == nullptr || !may_place(qp, env, *w)) return;
  const std::uint64_t orig = p.atomic_ack_eth().orig_data.get();
  std::memcpy(w->sge[0].host, &orig, sizeof orig);  // host byte order, as verbs returns it
  qp.counters.add(QpCounter::rx_packets);
  qp.comp.psn = psn_add(psn, 1);
  complete_send(qp, IBV_WC_SUCCESS);
  if (qp.state != IBV_QPS_ERR) {
    catch_up(qp);
    progress(qp, env);
  }
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
  bool cq_ok = true;
  if (status != IBV_WC_SUCCESS || (w.send_flags & IBV_SEND_SIGNALED)) {
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status = status;
    wc.opcode = wc_opcode(w);
    wc.qp_num = qp.qpn;
    if (w.kind == WqeKind::kRead || w.kind == WqeKind::kAtomic) wc.byte_len = w.length;
    cq_ok = qp.send_cq->push(wc);
    qp.counters.add(QpCounter::completions);
  }
  if (qp.comp_next == qp.req_next) {
    ++qp.req_next;
    qp.req.pkt_index = 0;
  }
  ++qp.comp_next;
  if (status != IBV_WC_SUCCESS) {
    qp.counters.add(QpCounter::completion_errors);
    qp_enter_error(qp);
  } else if (!cq_ok) {
    qp_enter_error(qp);  // CQ overrun: a catastrophic error for the QPs on it
  }
}

void completer_on_response(Qp& qp, Env& env, const wire::ParsedFrame& p) {
  if (!qp.active() && qp.state != IBV_QPS_SQE) {
    qp.counters.add(QpCounter::drop_bad_state);
    return;
  }
  const std::uint32_t psn = p.bth().psn.get();
  // IBTA 9.7.5.1: an ACK, NAK or response answers a request packet that was
  // sent. One whose PSN lies at or beyond the highest PSN sent (high_psn is
  // one past it) answers nothing: it must neither complete a WR (a WRITE
  // would report SUCCESS with packets never sent) nor move the requester
  // (a sequence NAK ahead of everything would wedge it). Older ones are
  // stale duplicates, judged below. With nothing outstanding every PSN from
  // comp.psn on is beyond.
  if (!psn_before(psn, qp.req.high_psn)) [[unlikely]] {
    qp.counters.add(QpCounter::drop_response_not_sent);
    return;
  }
  if (p.info->has(wire::kAck)) {
    on_ack(qp, env, p, psn);
  } else if (p.info->has(wire::kReadResponse)) {
    // First, Last and Only carry an AETH; its syndrome is an ACK for this PSN.
    on_read_response(qp, env, p, psn);
  } else if (p.info->has(wire::kAtomicAck)) {
    on_atomic_ack(qp, env, p, psn);
  }
}

void completer_on_timer(Qp& qp, Env& env) {
  if (qp.comp.deadline == 0 || env.now < qp.comp.deadline || !qp.active()) return;
  if (!outstanding(qp)) {
    qp.comp.deadline = 0;
    return;
  }
  qp.counters.add(QpCounter::timeouts);
  // IBTA 9.7.6: a local ACK timeout spends a retry and resends from the oldest
  // PSN not acknowledged. retry_cnt 7 means seven, not infinite (unlike rnr_retry).
  if (spend_retry(qp)) go_back(qp, qp.comp.psn);
}

}  // namespace uroce::transport
