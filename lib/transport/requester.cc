// Requester (IBTA 9.7.2-9.7.4): turns send WQEs into request packets in
// order, one path MTU at a time, assigns PSNs, keeps within the window and
// max_rd_atomic, honours fences, and restarts from any PSN (go-back-N).
#include "transport/psn.h"
#include "transport/rnr.h"
#include "transport/sgl.h"
#include "wire/opcode.h"

namespace uroce::transport {
namespace {

using wire::Opcode;

std::uint32_t packets_for(const SendWqe& w, std::uint32_t mtu) {
  if (w.kind == WqeKind::kAtomic || w.kind == WqeKind::kAtomicWrite) return 1;
  // A zero-length message is one packet; a READ occupies one PSN per response.
  return w.length == 0 ? 1 : (w.length + mtu - 1) / mtu;
}

Opcode send_opcode(const SendWqe& w, bool first, bool last) {
  const bool imm = w.opcode == IBV_WR_SEND_WITH_IMM;
  const bool inv = w.opcode == IBV_WR_SEND_WITH_INV;
  if (first && last) return imm ? Opcode::kRcSendOnlyImm : inv ? Opcode::kRcSendOnlyInv : Opcode::kRcSendOnly;
  if (first) return Opcode::kRcSendFirst;
  if (!last) return Opcode::kRcSendMiddle;
  return imm ? Opcode::kRcSendLastImm : inv ? Opcode::kRcSendLastInv : Opcode::kRcSendLast;
}

Opcode write_opcode(const SendWqe& w, bool first, bool last) {
  const bool imm = w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (first && last) return imm ? Opcode::kRcWriteOnlyImm : Opcode::kRcWriteOnly;
  if (first) return Opcode::kRcWriteFirst;
  if (!last) return Opcode::kRcWriteMiddle;
  return imm ? Opcode::kRcWriteLastImm : Opcode::kRcWriteLast;
}

bool is_local_op(const SendWqe& w) { return w.kind == WqeKind::kBind || w.kind == WqeKind::kLocalInv; }

// A bind or LOCAL_INV (IBTA 10.6.7): executed on the region table once every
// WR before it has completed, so it takes effect in posting order (a WRITE
// posted before an invalidation never finds its window gone), then
// completed at once. A refusal ends it in error, which moves the QP to ERR
// (IBTA 10.6.7: a bind that breaks a rule completes in error).
void run_local_op(Qp& qp, Env& env, SendWqe& w) {
  if (w.kind == WqeKind::kBind) {
    mem::WindowBind b;
    b.window_key = w.invalidate_rkey;
    b.new_rkey = w.rkey;
    b.mr_key = w.imm_data;
    b.addr = w.remote_addr;
    b.length = w.compare_add;
    b.access = static_cast<int>(w.swap);
    if (env.mrs->bind_window(b, qp.pd, qp.qpn) != mem::WindowResult::kOk) {
      qp.counters.add(QpCounter::mw_bind_errors);
      complete_send(qp, IBV_WC_MW_BIND_ERR);
      return;
    }
    qp.counters.add(QpCounter::mw_binds);
    complete_send(qp, IBV_WC_SUCCESS);
    return;
  }
  if (env.mrs->invalidate_window(w.invalidate_rkey, qp.pd) != mem::WindowResult::kOk) {
    // No verbs status names a failed local invalidation; rxe reports it as
    // a local QP operation error too.
    qp.counters.add(QpCounter::local_inv_errors);
    complete_send(qp, IBV_WC_LOC_QP_OP_ERR);
    return;
  }
  qp.counters.add(QpCounter::mw_invalidations);
  complete_send(qp, IBV_WC_SUCCESS);
}

}  // namespace

// Packet `index` of `w`, at `psn`: its headers from the WQE alone (a first
// send and a selective resend build the same packet), its payload gathered
// from the WQE's list, emitted into `f`.
void build_request(Qp& qp, Env& env, SendWqe& w, std::uint32_t index, std::uint32_t psn, bool ack_req,
                   wire::TxFrame& f, Built& b) {
  b = Built{};
  f.npieces = 0;
  wire::TransportHeaders th;
  th.xrceth.srqn.set(w.remote_srqn);  // sent by XRC only (the opcode table says which carry it)
  const bool solicited = (w.send_flags & IBV_SEND_SOLICITED) != 0;
  // Selective repeat's SRETH: where the packet belongs in its message. Only
  // an SR QP's opcodes carry it; filled for the others too, its bytes were
  // packed in registers and stored wide over the narrow stores before them,
  // a store-forwarding stall on every RC packet.
  const auto sreth = [&](std::uint32_t offset, std::uint32_t length, bool last) {
    if (qp.sr == nullptr) return;
    th.sreth.offset.set(offset);
    th.sreth.length.set(length);
    th.sreth.recv_index.set(w.recv_index);
    th.sreth.flags = last ? wire::kSrethLast : 0;
    th.sreth.first_psn.set(w.first_psn);
  };
  switch (w.kind) {
    case WqeKind::kSend:
    case WqeKind::kWrite: {
      const std::uint32_t offset = index * qp.mtu;
      b.payload = std::min(qp.mtu, w.length - offset);
      // On demand: the packet's bytes are gathered through the kernel now
      // (every retransmission reads them anew) and copied into the head.
      if (w.odp_sges != 0 && !sgl_gather(w.sge.data(), w.num_sge, w.odp_sges, w.odp_pid, offset, b.payload,
                                         odp_bounce.data())) [[unlikely]] {
        b.unmapped = true;
        return;
      }
      const bool first = index == 0;
      const bool last = index + 1 == w.npackets;
      if (w.kind == WqeKind::kSend) {
        packet_bth(th.bth, qp, send_opcode(w, first, last), psn, ack_req, last && solicited);
        if (last) th.ieth.rkey.set(w.invalidate_rkey);
      } else {
        packet_bth(th.bth, qp, write_opcode(w, first, last), psn, ack_req, last && solicited);
        // RC's First carries the RETH; selective repeat's every packet.
        th.reth.va.set(w.remote_addr);
        th.reth.rkey.set(w.rkey);
        th.reth.dma_length.set(w.length);
      }
      sreth(offset, w.length, last);
      if (last) std::memcpy(th.immdt.imm.bytes.data(), &w.imm_data, sizeof w.imm_data);
      if (w.odp_sges != 0) [[unlikely]] {
        f.pieces[0] = std::span<const std::uint8_t>(odp_bounce.data(), b.payload);
        f.npieces = b.payload > 0 ? 1 : 0;
      } else {
        f.npieces = sgl_pieces(w.sge.data(), w.num_sge, offset, b.payload, f.pieces.data());
      }
      break;
    }
    case WqeKind::kRead: {
      // One request for the rest of the segment (read_segment_packets): a
      // restart at a later PSN asks only for the bytes from there on (IBTA
      // 9.7.5.1.2; rxe does the same), within the segment its first request
      // named, so a duplicate stays inside the responder's resource.
      const std::uint32_t end = read_segment_end(qp, w.npackets, index);
      const std::uint32_t offset = index * qp.mtu;
      const std::uint32_t stop = end == w.npackets ? w.length : end * qp.mtu;
      packet_bth(th.bth, qp, Opcode::kRcReadRequest, psn, true, false);
      th.reth.va.set(w.remote_addr + offset);
      th.reth.rkey.set(w.rkey);
      th.reth.dma_length.set(stop - std::min(offset, stop));
      sreth(offset, w.length, true);
      b.psns = end - index;
      break;
    }
    case WqeKind::kAtomicWrite: {
      // As Soft-RoCE sends it: BTH, RETH (DMA length 8), the 8 bytes; an
      // AckReq, answered by an RDMA READ response with no payload.
      packet_bth(th.bth, qp, Opcode::kRcAtomicWrite, psn, true, solicited);
      th.reth.va.set(w.remote_addr);
      th.reth.rkey.set(w.rkey);
      th.reth.dma_length.set(8);
      sreth(0, 8, true);
      b.payload = 8;
      f.npieces = sgl_pieces(w.sge.data(), w.num_sge, 0, b.payload, f.pieces.data());
      break;
    }
    case WqeKind::kBind:
    case WqeKind::kLocalInv: break;  // run by requester_fill; never reach here
    case WqeKind::kAtomic: {
      const bool cas = w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
      packet_bth(th.bth, qp, cas ? Opcode::kRcCompareSwap : Opcode::kRcFetchAdd, psn, true, false);
      th.atomic_eth.va.set(w.remote_addr);
      th.atomic_eth.rkey.set(w.rkey);
      th.atomic_eth.swap_add.set(cas ? w.swap : w.compare_add);
      th.atomic_eth.compare.set(cas ? w.compare_add : 0);
      sreth(0, 8, true);
      break;
    }
  }
  if (qp.reliable() && w.odp_sges == 0) [[likely]] {
    emit(qp, env, f, th, b.payload);
  } else {
    emit_copied(qp.path, qp, env, f, th, b.payload);
  }
}

void requester_rewind(Qp& qp, std::uint32_t psn) {
  // Never forward past what has been sent: the PSNs a requester sends stay
  // contiguous (IBTA 9.7.2), whatever a peer's NAK names.
  if (psn_after(psn, qp.req.high_psn)) return;
  delay_forget_from(qp, psn);  // Karn's rule: what goes again gives no RTT sample
  std::uint32_t i = qp.comp_next;
  std::uint32_t reads = 0;
  for (; i != qp.sq_posted && qp.sq[i].started; ++i) {
    const SendWqe& w = qp.sq[i];
    const std::int32_t d = psn_diff(psn, w.first_psn);
    if (d >= 0 && static_cast<std::uint32_t>(d) < w.npackets) {
      qp.req_next = i;
      qp.req.pkt_index = static_cast<std::uint32_t>(d);
      qp.req.psn = psn;
      qp.req.reads_outstanding = reads;
      qp.req.since_ack_req = 0;
      return;
    }
    reads += is_read_or_atomic(w);
  }
  // `psn` is just past every WQE begun: continue with the first not begun.
  if (i == qp.comp_next || psn == psn_add(qp.sq[i - 1].first_psn, qp.sq[i - 1].npackets)) {
    qp.req_next = i;
    qp.req.pkt_index = 0;
    qp.req.psn = psn;
    qp.req.reads_outstanding = reads;
  }
}

// --- RNR wait (IBTA 9.7.5.2.8) ---------------------------------------------------
// The requester's one wait state: entered by the completer on an RNR NAK,
// left when the NAK's timer has run (the engine's timer wheel wakes the QP
// at requester_wakeup()); the requester then resends from the NAKed PSN.

void requester_rnr_wait(Qp& qp, Env& env, std::uint32_t psn, std::uint8_t timer_code) {
  qp.req.rnr_wait = true;
  qp.req.rnr_until = env.now + rnr_timer_ns(timer_code);
  qp.req.rnr_psn = psn;
}

bool rnr_waiting(Qp& qp, const Env& env) {
  if (!qp.req.rnr_wait) return false;
  if (env.now < qp.req.rnr_until) return true;
  qp.req.rnr_wait = false;
  // Selective repeat marked the refused PSN lost instead: it alone goes again.
  if (qp.sr == nullptr) requester_rewind(qp, qp.req.rnr_psn);
  return false;
}

std::uint64_t requester_wakeup(const Qp& qp) {
  const std::uint64_t rnr = qp.req.rnr_wait ? qp.req.rnr_until : 0;
  const std::uint64_t sr = qp.sr != nullptr ? qp.sr->rto_at : 0;
  return rnr == 0 || (sr != 0 && sr < rnr) ? sr : rnr;
}

std::uint16_t requester_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room) {
  if (!qp.active()) return 0;
  if (qp.type == IBV_QPT_UD) return ud_requester_fill(qp, env, out, room);
  if (rnr_waiting(qp, env)) return 0;
  const bool reliable = qp.reliable();
  // Selective repeat: what is known lost goes first, each packet alone.
  std::uint16_t n = qp.sr != nullptr ? sr_resend(qp, env, out, room) : 0;
  while (n < room && qp.req_next != qp.sq_posted) {
    if (is_local_op(qp.sq[qp.req_next])) {
      if (qp.comp_next != qp.req_next) break;  // waits for the WRs before it
      if (qp.state == IBV_QPS_SQD) break;
      run_local_op(qp, env, qp.sq[qp.req_next]);
      if (qp.state == IBV_QPS_ERR) break;
      continue;
    }
    // UC keeps no window: nothing is acknowledged, nothing resent (IBTA 9.8.2).
    if (reliable && psn_diff(qp.req.psn, qp.comp.psn) >= static_cast<std::int32_t>(qp.comp.window)) break;
    if (!pace_allows(qp, env)) break;
    SendWqe& w = qp.sq[qp.req_next];
    if (!w.started) {
      if (qp.state == IBV_QPS_SQD) break;  // SQD: finish what has begun, begin nothing
      if ((w.send_flags & IBV_SEND_FENCE) && qp.req.reads_outstanding > 0) break;
      if (is_read_or_atomic(w) && qp.attr.max_rd_atomic == 0) {
        // No initiator depth: the QP may not issue READs or atomics at all.
        if (qp.comp_next == qp.req_next) complete_send(qp, IBV_WC_LOC_QP_OP_ERR);
        break;
      }
    }
    if (is_read_or_atomic(w) && qp.req.reads_outstanding >= qp.attr.max_rd_atomic) break;
    if (w.kind == WqeKind::kRead && reliable) {
      // Its next segment's answer must fit the window beside what is in
      // flight (all of it when nothing is).
      const std::uint32_t index = w.started ? qp.req.pkt_index : 0;
      const std::uint32_t total = w.started ? w.npackets : packets_for(w, qp.mtu);
      const std::int32_t in_flight = psn_diff(qp.req.psn, qp.comp.psn);
      const std::uint32_t ask = read_segment_end(qp, total, index) - index;
      if (in_flight > 0 && static_cast<std::uint32_t>(in_flight) + ask > qp.comp.window) break;
    }
    // Resolved once, and again after any deregistration (a retransmission
    // reads the region anew).
    const int need = w.kind == WqeKind::kRead || w.kind == WqeKind::kAtomic ? IBV_ACCESS_LOCAL_WRITE : 0;
    const bool was_resolved = w.resolved;
    if (wqe_resolve(w, *env.mrs, qp.pd, need) != mem::AccessResult::kOk) [[unlikely]] {
      // A bad local key ends the WR with a local protection error (IBTA 10.6, 11.6.2).
      if (was_resolved) qp.counters.add(QpCounter::mr_revoked_in_flight);
      if (qp.comp_next == qp.req_next) complete_send(qp, IBV_WC_LOC_PROT_ERR);
      break;
    }
    if (!w.started) {
      w.started = true;
      w.first_psn = qp.req.psn;
      w.npackets = packets_for(w, qp.mtu);
      if (qp.sr != nullptr) sr_number(qp, w);
    }

    const std::uint32_t psn = qp.req.psn;
    const std::uint32_t index = qp.req.pkt_index;
    bool ack_req = true;  // READs and atomics always ask
    if (w.kind == WqeKind::kSend || w.kind == WqeKind::kWrite) {
      // Also the packet that fills the window: its answer opens it. UC asks
      // for nothing.
      const bool last = index + 1 == w.npackets;
      // Selective repeat asks more often: its short timeout must not take
      // a paced QP's packets for lost while their ACK waits for the next ask.
      // Under a small window (a BDP cap) a quarter of it: an ask only at
      // the packet that fills the window would leave the link idle a whole
      // round trip per window, and the cap at one BDP would hold a QP alone
      // well below line rate.
      std::uint32_t every = qp.sr != nullptr ? kSrAckReqEvery : kAckReqEvery;
      if (qp.sr == nullptr && (qp.cc_window != 0 || qp.options.bdp_packets != 0 || qp.delay != nullptr)) {
        every = std::min(every, std::max<std::uint32_t>(1, window_cap(qp) / 4));
      }
      ack_req = reliable && (last || ++qp.req.since_ack_req >= every ||
                             psn_diff(psn_add(psn, 1), qp.comp.psn) >= static_cast<std::int32_t>(qp.comp.window));
      if (ack_req) qp.req.since_ack_req = 0;
    }
    wire::TxFrame& f = out[n];
    Built b;
    build_request(qp, env, w, index, psn, ack_req, f, b);
    if (b.unmapped) [[unlikely]] {
      // A page of an on-demand SGE is not mapped: a local protection error
      // (IBTA 11.6.2, as for an SGE its lkey does not cover), once the WRs
      // before it have completed.
      if (qp.comp_next == qp.req_next) {
        qp.counters.add(QpCounter::odp_unmapped);
        complete_send(qp, IBV_WC_LOC_PROT_ERR);
      }
      break;
    }
    qp.req.psn = psn_add(psn, b.psns);
    qp.req.pkt_index = index + b.psns;
    if (is_read_or_atomic(w)) ++qp.req.reads_outstanding;
    if (psn_before(psn, qp.req.high_psn)) qp.counters.add(QpCounter::retransmitted_packets);
    if (psn_after(qp.req.psn, qp.req.high_psn)) {
      if (qp.sr != nullptr) sr_sent_new(qp, env, w, psn, b.psns, ack_req);
      else if (ack_req) delay_sent(qp, env, psn);
      qp.req.high_psn = qp.req.psn;
    }
    paced_sent(qp, env, f.frame_bytes());
    ++n;
    // The local ACK timeout runs from the last packet that asked for a
    // response (rxe arms it on the first packet sent: a paced QP whose
    // message end leaves later than the timeout would then time out while
    // it is still sending).
    if (ack_req && reliable) {
      qp.comp.awaiting = true;
      qp.comp.awaited_psn = psn_add(qp.req.psn, -1);
      qp.comp.deadline = retransmit_deadline(qp, env);
    }
    if (qp.req.pkt_index >= w.npackets) {
      ++qp.req_next;
      qp.req.pkt_index = 0;
      // UC: the WR is done once its last packet is built (its payload
      // copied into the frames); no response will come (IBTA 9.8.2).
      if (!reliable) complete_send(qp, IBV_WC_SUCCESS);
    }
  }
  return n;
}

}  // namespace uroce::transport
