// Selective repeat, the requester's side (docs/transport.md, "Selective
// repeat"): the mode's ACKs carry a SACK (the responder's expected PSN and
// which PSNs after it it holds), so only what is missing is sent again,
// each packet alone, without moving the requester's cursor.
//
// A PSN is found lost in two ways. When the peer acknowledges a PSN that
// left later than a missing one by more than a reordering allowance, the
// missing one was lost (RACK's rule, RFC 8985: time, not PSN distance, so
// packets sprayed over paths of different delays are not taken for lost,
// and a resent packet that is lost again is found the same way). A lost
// tail, which no later acknowledgement can show, is found by a short
// timeout of a few round trips (IRN's RTO_low) that spends no retry. The
// local ACK timeout (IBTA 9.7.6.1.3) still runs beside it and spends
// retry_cnt as in RC: a peer that stopped answering ends the QP as before.
//
// Completions keep posting order: a SEND or WRITE completes once every PSN
// up to its last is acknowledged cumulatively, a READ or atomic once all
// its responses came (they are placed as they arrive, each at its offset).
#include <algorithm>

#include "transport/psn.h"
#include "transport/rules.h"
#include "transport/sgl.h"
#include "wire/opcode.h"

namespace uroce::transport {
namespace {

using wire::AethKind;

// RTO_low before any round trip was measured (IRN's figure), and its floor.
constexpr std::uint64_t kRtoLowInitialNs = 100'000;
constexpr std::uint64_t kRtoLowFloorNs = 5'000;
// The least reordering allowed for (RACK's window is a quarter of the
// smallest round trip; a simulated fabric may have no jitter at all).
constexpr std::uint64_t kReorderFloorNs = 500;

std::uint32_t end_psn(const SendWqe& w) { return psn_add(w.first_psn, w.npackets); }

bool outstanding(const Qp& qp) { return qp.comp_next != qp.req_next || qp.req.pkt_index != 0; }

bool consumes_recv(const SendWqe& w) {
  return w.kind == WqeKind::kSend || (w.kind == WqeKind::kWrite && w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
}

std::uint8_t& flags_of(SrState& sr, std::uint32_t psn) { return sr.flags[sr_slot(psn)]; }

void mark_lost(SrState& sr, std::uint32_t psn) {
  std::uint8_t& f = flags_of(sr, psn);
  if ((f & kSentLost) == 0) {
    f = static_cast<std::uint8_t>(f | kSentLost);
    ++sr.lost;
  }
}

void clear_lost(SrState& sr, std::uint32_t psn) {
  std::uint8_t& f = flags_of(sr, psn);
  if ((f & kSentLost) != 0) {
    f = static_cast<std::uint8_t>(f & ~kSentLost);
    --sr.lost;
  }
}

// Nothing more is needed for `psn`: the peer holds it, or, a READ's or
// atomic's, its response came.
bool psn_done(const SrState& sr, std::uint32_t psn) {
  const std::uint8_t f = sr.flags[sr_slot(psn)];
  return (f & kSentAnswer) != 0 ? (f & kSentAnswered) != 0 : sr.board.has(psn);
}

// The same, cumulatively: what lets the completion point move past it.
bool psn_settled(const SrState& sr, std::uint32_t psn) {
  const std::uint8_t f = sr.flags[sr_slot(psn)];
  return (f & kSentAnswer) != 0 ? (f & kSentAnswered) != 0 : psn_before(psn, sr.board.una());
}

std::uint64_t rto_low(const Qp& qp, const Env& env) {
  const SrState& sr = *qp.sr;
  std::uint64_t t = kRtoLowInitialNs;
  if (sr.srtt_ns != 0) t = std::max({sr.srtt_ns + 4 * sr.rttvar_ns, 2 * sr.min_rtt_ns, kRtoLowFloorNs});
  t <<= std::min<std::uint32_t>(sr.rto_backoff, 16);
  const std::uint64_t rc = ack_timeout_ns(effective_ack_timeout(qp, env));
  return rc != 0 ? std::min(t, rc) : t;
}

void arm_rto(Qp& qp, const Env& env) { qp.sr->rto_at = outstanding(qp) ? env.now + rto_low(qp, env) : 0; }

void apply_exit(Qp& qp, CompleterExit e) {
  const CompleterRule& rule = rule_of(e);
  qp.counters.add(rule.counter);
  if (rule.status != kNoCompletion) complete_send(qp, rule.status);
}

// Forward progress (IBTA 9.7.6): the retry counters start over, both timers
// restart from now while anything is outstanding.
void progress(Qp& qp, Env& env) {
  qp.comp.retry_left = qp.attr.retry_cnt;
  qp.comp.rnr_left = qp.attr.rnr_retry;
  qp.sr->rto_backoff = 0;
  qp.comp.awaiting = qp.comp.awaiting && outstanding(qp) && !psn_after(qp.comp.psn, qp.comp.awaited_psn);
  qp.comp.deadline = qp.comp.awaiting ? retransmit_deadline(qp, env) : 0;
  arm_rto(qp, env);
}

// The started WQE whose PSNs include `psn`, from the oldest not completed.
SendWqe* wqe_of(Qp& qp, std::uint32_t psn) {
  for (std::uint32_t i = qp.comp_next; i != qp.sq_posted; ++i) {
    SendWqe& w = qp.sq[i];
    if (!w.started) {
      if (w.kind == WqeKind::kBind || w.kind == WqeKind::kLocalInv) continue;
      return nullptr;
    }
    if (psn_before(psn, w.first_psn)) return nullptr;
    if (psn_before(psn, end_psn(w))) return &w;
  }
  return nullptr;
}

// Moves the completion point over what is settled and completes, in posting
// order, every WQE it passes the end of. True if it moved.
bool complete_settled(Qp& qp) {
  SrState& sr = *qp.sr;
  bool moved = false;
  while (qp.comp_next != qp.sq_posted && qp.state != IBV_QPS_ERR) {
    SendWqe& w = qp.sq[qp.comp_next];
    if (!w.started) break;
    const std::uint32_t end = end_psn(w);
    while (psn_before(qp.comp.psn, end) && psn_before(qp.comp.psn, qp.req.high_psn) && psn_settled(sr, qp.comp.psn)) {
      qp.comp.psn = psn_add(qp.comp.psn, 1);
      moved = true;
      // A READ segment's request leaves max_rd_atomic's count once its
      // answer is complete, in posting order like the WR's own (at
      // completion): the responder reuses its oldest resource for the next
      // READ, so a segment retired out of order would cost an older READ,
      // still missing responses, the resource that answers it again.
      const auto index = static_cast<std::uint32_t>(psn_diff(qp.comp.psn, w.first_psn));
      if (w.kind == WqeKind::kRead && index < w.npackets && index % read_segment_packets(qp) == 0 &&
          qp.req.reads_outstanding > 0) {
        --qp.req.reads_outstanding;
      }
    }
    if (qp.comp.psn != end) break;
    complete_send(qp, IBV_WC_SUCCESS);
  }
  // A response proves the responder has every request before it: the
  // scoreboard follows if no ACK said so yet (they may all have been lost).
  if (psn_after(qp.comp.psn, sr.board.una())) sr.board.on_sack(qp.comp.psn, SackBits{}, qp.req.high_psn);
  return moved;
}

// A round-trip sample (RFC 6298's smoothing) from a PSN sent once.
void rtt_sample(SrState& sr, std::uint64_t rtt) {
  if (sr.srtt_ns == 0) {
    sr.srtt_ns = rtt;
    sr.rttvar_ns = rtt / 2;
  } else {
    const std::uint64_t dev = sr.srtt_ns > rtt ? sr.srtt_ns - rtt : rtt - sr.srtt_ns;
    sr.rttvar_ns = (3 * sr.rttvar_ns + dev) / 4;
    sr.srtt_ns = (7 * sr.srtt_ns + rtt) / 8;
  }
  if (sr.min_rtt_ns == 0 || rtt < sr.min_rtt_ns) sr.min_rtt_ns = rtt;
}

// RACK: every PSN not held that left more than the reordering allowance
// before the latest one the peer holds or answered is lost.
void detect_losses(Qp& qp) {
  SrState& sr = *qp.sr;
  const std::uint64_t reorder = std::max(sr.min_rtt_ns / 4, kReorderFloorNs);
  if (sr.rack_ns < reorder) return;
  const std::uint64_t before = sr.rack_ns - reorder;
  for (std::uint32_t psn = sr.board.una(); psn_before(psn, qp.req.high_psn); psn = psn_add(psn, 1)) {
    const std::uint8_t f = sr.flags[sr_slot(psn)];
    if ((f & (kSentLost | kSentAnswered)) != 0 || sr.board.has(psn)) continue;
    if (sr.sent_ns[sr_slot(psn)] <= before) mark_lost(sr, psn);
  }
}

// A NAK or response names a PSN: it must have been sent and not be settled
// (else its exit is taken and false returned).
bool names_outstanding(Qp& qp, std::uint32_t psn) {
  if (!psn_before(psn, qp.req.high_psn)) {
    apply_exit(qp, CompleterExit::not_sent);
    return false;
  }
  if (psn_before(psn, qp.comp.psn)) {
    apply_exit(qp, CompleterExit::stale);
    return false;
  }
  return true;
}

// The response for `psn` (READ/atomic) came and was placed: the PSN is
// done, RACK learns its departure, and what it settles completes.
void answered(Qp& qp, Env& env, std::uint32_t psn) {
  SrState& sr = *qp.sr;
  qp.counters.add(QpCounter::rx_packets);
  std::uint8_t& f = flags_of(sr, psn);
  f = static_cast<std::uint8_t>(f | kSentAnswered);
  clear_lost(sr, psn);
  sr.rack_ns = std::max(sr.rack_ns, sr.sent_ns[sr_slot(psn)]);
  const std::uint64_t sent = sr.sent_ns[sr_slot(psn)];
  delay_ack(qp, env, 1, (f & kSentResent) == 0 && env.now > sent ? env.now - sent : 0);
  complete_settled(qp);
  if (qp.state != IBV_QPS_ERR) progress(qp, env);
}

enum class SackResult { kFresh, kNothingNew, kStale, kRefused };

// Takes a SACK into the scoreboard: what it newly holds gives a round-trip
// sample (from a PSN sent once) and the latest departure for RACK.
SackResult take_sack(Qp& qp, Env& env, const wire::Sacketh& s) {
  SrState& sr = *qp.sr;
  const std::uint32_t expected = s.expected.get();
  // Older than what is known (ACKs sprayed over paths overtake each other).
  if (psn_before(expected, sr.board.una())) return SackResult::kStale;
  SackBits bits;
  for (std::size_t i = 0; i < kSackWindow; ++i) {
    if ((s.bits[i / 8] & (0x80u >> (i % 8))) != 0) bits.set(i);
  }
  const std::uint32_t old_una = sr.board.una();
  const SackBits old = sr.board.sacked();
  if (!sr.board.on_sack(expected, bits, qp.req.high_psn)) return SackResult::kRefused;
  std::uint64_t newest = 0;
  std::uint64_t sampled = 0;
  std::uint32_t fresh_psns = 0;
  bool fresh = false;
  const std::uint32_t end = sr.board.highest_held();
  for (std::uint32_t psn = old_una; psn_before(psn, end); psn = psn_add(psn, 1)) {
    const auto d = static_cast<std::uint32_t>(psn_diff(psn, old_una));
    if ((d < kSackWindow && old[d]) || !sr.board.has(psn)) continue;
    fresh = true;
    ++fresh_psns;
    clear_lost(sr, psn);
    const std::uint64_t sent = sr.sent_ns[sr_slot(psn)];
    newest = std::max(newest, sent);
    if ((sr.flags[sr_slot(psn)] & kSentResent) == 0) sampled = std::max(sampled, sent);
  }
  if (!fresh) return SackResult::kNothingNew;
  if (sampled != 0 && env.now > sampled) rtt_sample(sr, env.now - sampled);
  delay_ack(qp, env, fresh_psns, sampled != 0 && env.now > sampled ? env.now - sampled : 0);
  sr.rack_ns = std::max(sr.rack_ns, newest);
  return SackResult::kFresh;
}

void on_ack(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  SrState& sr = *qp.sr;
  qp.counters.add(QpCounter::acks_received);
  const std::uint8_t syndrome = p.aeth().syndrome;
  const AethKind kind = wire::aeth_kind(syndrome);
  if (kind == AethKind::kReserved) {
    apply_exit(qp, CompleterExit::reserved_syndrome);
    return;
  }
  switch (take_sack(qp, env, p.sacketh())) {
    case SackResult::kRefused: qp.counters.add(QpCounter::sr_sack_refused); return;
    case SackResult::kStale: qp.counters.add(QpCounter::duplicate_responses); return;
    case SackResult::kNothingNew: break;
    case SackResult::kFresh: {
      const std::uint32_t lost_before = sr.lost;
      detect_losses(qp);
      if (sr.lost > lost_before) delay_loss(qp, env);
      complete_settled(qp);
      if (qp.state != IBV_QPS_ERR) progress(qp, env);
      break;
    }
  }
  if (qp.state == IBV_QPS_ERR || kind == AethKind::kAck || !names_outstanding(qp, psn)) return;
  if (kind == AethKind::kRnrNak) {
    // The PSN alone goes again once the NAK's timer has run (9.7.5.2.8).
    qp.counters.add(QpCounter::rnr_naks_received);
    if (qp.attr.rnr_retry != 7) {
      if (qp.comp.rnr_left == 0) {
        apply_exit(qp, CompleterExit::rnr_retry_exceeded);
        return;
      }
      --qp.comp.rnr_left;
    }
    mark_lost(sr, psn);
    requester_rnr_wait(qp, env, psn, wire::aeth_value(syndrome));
    qp.comp.deadline = 0;  // waiting is not a timeout
    return;
  }
  const auto code = static_cast<wire::NakCode>(wire::aeth_value(syndrome));
  if (code == wire::NakCode::kPsnSequenceError) {
    // Not this mode's: a hole travels in the SACK (taken above).
    qp.counters.add(QpCounter::nak_seq_received);
    return;
  }
  apply_exit(qp, nak_exit(code));
}

void on_read_response(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  SrState& sr = *qp.sr;
  SendWqe* w = wqe_of(qp, psn);
  if (w == nullptr || (w->kind != WqeKind::kRead && w->kind != WqeKind::kAtomicWrite)) {
    apply_exit(qp, CompleterExit::unmatched);
    return;
  }
  if ((flags_of(sr, psn) & kSentAnswered) != 0) {
    qp.counters.add(QpCounter::duplicate_responses);
    return;
  }
  const auto index = static_cast<std::uint32_t>(psn_diff(psn, w->first_psn));
  if (w->kind == WqeKind::kAtomicWrite) {
    if (!p.info->has(wire::kOnly) || p.payload_length != 0) {
      apply_exit(qp, CompleterExit::bad_read_response);
      return;
    }
  } else {
    const std::uint32_t offset = index * qp.mtu;
    const std::uint32_t expect = std::min(qp.mtu, w->length - offset);
    const std::uint32_t seg_end = read_segment_end(qp, w->npackets, index);
    // Last or Only ends each segment's answer; First or Middle before it
    // (a re-asked answer may begin with either).
    if (p.info->has(wire::kLast) != (index + 1 == seg_end) || p.payload_length != expect) {
      apply_exit(qp, CompleterExit::bad_read_response);
      return;
    }
    if (wqe_resolve(*w, *env.mrs, qp.pd, IBV_ACCESS_LOCAL_WRITE) != mem::AccessResult::kOk) [[unlikely]] {
      apply_exit(qp, CompleterExit::local_revoked);
      return;
    }
    if (!wqe_scatter_payload(*w, offset, p)) [[unlikely]] {
      apply_exit(qp, CompleterExit::local_unmapped);
      return;
    }
    qp.counters.add(QpCounter::rx_bytes, expect);
  }
  answered(qp, env, psn);
}

void on_atomic_ack(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  SrState& sr = *qp.sr;
  SendWqe* w = wqe_of(qp, psn);
  if (w == nullptr || w->kind != WqeKind::kAtomic) {
    apply_exit(qp, CompleterExit::unmatched);
    return;
  }
  if ((flags_of(sr, psn) & kSentAnswered) != 0) {
    qp.counters.add(QpCounter::duplicate_responses);
    return;
  }
  if (wqe_resolve(*w, *env.mrs, qp.pd, IBV_ACCESS_LOCAL_WRITE) != mem::AccessResult::kOk) [[unlikely]] {
    apply_exit(qp, CompleterExit::local_revoked);
    return;
  }
  const std::uint64_t orig = p.atomic_ack_eth().orig_data.get();
  if (!sgl_scatter(w->sge.data(), 1, 0, reinterpret_cast<const std::uint8_t*>(&orig), sizeof orig, w->odp_sges,
                   w->odp_pid)) [[unlikely]] {
    apply_exit(qp, CompleterExit::local_unmapped);
    return;
  }
  answered(qp, env, psn);
}

// Marks lost every PSN in flight not done that left at or before `before`
// and whose ACK is overdue: one that asked for it (AckReq) left after it,
// but also at or before `before`. A packet that did not ask is acknowledged
// with the next that does: a QP paced slowly may send that one much later.
// `first_only`: the oldest such PSN alone, a probe (RFC 8985's tail loss
// probe): its SACK shows the rest, which RACK then finds lost; a peer that
// was only slow (its process off the CPU) costs one duplicate, not a window.
void mark_unfinished(Qp& qp, std::uint64_t before, bool first_only = false) {
  SrState& sr = *qp.sr;
  std::uint32_t limit = qp.comp.psn;
  for (std::uint32_t psn = qp.comp.psn; psn_before(psn, qp.req.high_psn); psn = psn_add(psn, 1)) {
    if ((sr.flags[sr_slot(psn)] & kSentAsked) != 0 && sr.sent_ns[sr_slot(psn)] <= before) limit = psn_add(psn, 1);
  }
  for (std::uint32_t psn = qp.comp.psn; psn_before(psn, limit); psn = psn_add(psn, 1)) {
    if (!psn_done(sr, psn) && sr.sent_ns[sr_slot(psn)] <= before) {
      mark_lost(sr, psn);
      if (first_only) return;
    }
  }
}

}  // namespace

void sr_number(Qp& qp, SendWqe& w) {
  SrState& sr = *qp.sr;
  if (!consumes_recv(w)) return;
  w.recv_index = sr.send_ordinal;
  sr.send_ordinal = (sr.send_ordinal + 1) & kPsnMask;
}

void sr_sent_new(Qp& qp, Env& env, const SendWqe& w, std::uint32_t psn, std::uint32_t psns, bool ack_req) {
  SrState& sr = *qp.sr;
  const std::uint8_t f = is_read_or_atomic(w) ? kSentAnswer | kSentAsked : ack_req ? kSentAsked : 0;
  for (std::uint32_t i = 0; i < psns; ++i) {
    const std::uint32_t slot = sr_slot(psn_add(psn, i));
    sr.flags[slot] = f;
    sr.sent_ns[slot] = env.now;
  }
  if (sr.rto_at == 0) sr.rto_at = env.now + rto_low(qp, env);
}

std::uint16_t sr_resend(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room) {
  SrState& sr = *qp.sr;
  std::uint16_t n = 0;
  for (std::uint32_t psn = qp.comp.psn; n < room && sr.lost != 0 && psn_before(psn, qp.req.high_psn);) {
    if ((flags_of(sr, psn) & kSentLost) == 0) {
      psn = psn_add(psn, 1);
      continue;
    }
    SendWqe* w = wqe_of(qp, psn);
    if (w == nullptr) {  // completed meanwhile: nothing to send
      clear_lost(sr, psn);
      psn = psn_add(psn, 1);
      continue;
    }
    if (!pace_allows(qp, env)) break;
    // Read from the WQE's list anew: a region deregistered since ends the
    // WR as a first send's would.
    const int need = w->kind == WqeKind::kRead || w->kind == WqeKind::kAtomic ? IBV_ACCESS_LOCAL_WRITE : 0;
    const bool oldest = w == &qp.sq[qp.comp_next];
    if (wqe_resolve(*w, *env.mrs, qp.pd, need) != mem::AccessResult::kOk) [[unlikely]] {
      qp.counters.add(QpCounter::mr_revoked_in_flight);
      if (oldest) complete_send(qp, IBV_WC_LOC_PROT_ERR);
      break;
    }
    const auto index = static_cast<std::uint32_t>(psn_diff(psn, w->first_psn));
    Built b;
    build_request(qp, env, *w, index, psn, true, out[n], b);
    if (b.unmapped) [[unlikely]] {
      if (oldest) {
        qp.counters.add(QpCounter::odp_unmapped);
        complete_send(qp, IBV_WC_LOC_PROT_ERR);
      }
      break;
    }
    for (std::uint32_t i = 0; i < b.psns; ++i) {
      const std::uint32_t p = psn_add(psn, i);
      clear_lost(sr, p);
      std::uint8_t& f = flags_of(sr, p);
      f = static_cast<std::uint8_t>(f | kSentResent | kSentAsked);
      sr.sent_ns[sr_slot(p)] = env.now;
    }
    qp.counters.add(QpCounter::retransmitted_packets);
    paced_sent(qp, env, out[n].frame_bytes());
    ++n;
    if (!qp.comp.awaiting) {
      qp.comp.awaiting = true;
      qp.comp.awaited_psn = psn_add(psn, b.psns - 1);
      qp.comp.deadline = retransmit_deadline(qp, env);
    }
    if (sr.rto_at == 0) arm_rto(qp, env);
    psn = psn_add(psn, b.psns);
  }
  return n;
}

void sr_on_response(Qp& qp, Env& env, const wire::ParsedFrame& p) {
  if (!qp.active() && qp.state != IBV_QPS_SQE) {
    apply_exit(qp, CompleterExit::not_active);
    return;
  }
  const std::uint32_t psn = p.bth().psn.get();
  if (p.info->has(wire::kAck)) {
    on_ack(qp, env, p, psn);
    return;
  }
  if (!names_outstanding(qp, psn)) return;
  if (p.info->has(wire::kReadResponse)) {
    on_read_response(qp, env, p, psn);
  } else {
    on_atomic_ack(qp, env, p, psn);
  }
}

void sr_on_timer(Qp& qp, Env& env) {
  if (!qp.active()) return;
  SrState& sr = *qp.sr;
  if (qp.comp.deadline != 0 && env.now >= qp.comp.deadline) {
    qp.comp.deadline = 0;
    qp.comp.awaiting = false;
    if (outstanding(qp)) {
      // The local ACK timeout: a retry spent, everything unfinished again.
      qp.counters.add(QpCounter::timeouts);
      delay_timeout(qp, env);
      if (qp.comp.retry_left == 0) {
        apply_exit(qp, CompleterExit::retry_exceeded);
        return;
      }
      --qp.comp.retry_left;
      mark_unfinished(qp, env.now);
      arm_rto(qp, env);
      return;
    }
  }
  if (sr.rto_at != 0 && env.now >= sr.rto_at) {
    sr.rto_at = 0;
    if (!outstanding(qp)) return;
    // RTO_low: the oldest PSN whose ACK is that late goes again as a probe
    // (a tail no later PSN can show missing); no retry is spent. It backs
    // off until progress.
    qp.counters.add(QpCounter::sr_rto_low);
    const std::uint64_t rto = rto_low(qp, env);
    mark_unfinished(qp, env.now > rto ? env.now - rto : 0, true);
    ++sr.rto_backoff;
    arm_rto(qp, env);
  }
}

}  // namespace uroce::transport
