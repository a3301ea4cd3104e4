// UD (IBTA 9.8.x, 11.4.1.1): datagrams both ways, each one packet. No ACK,
// no window, no retransmission, no RNR; nothing is ever answered.
#include <array>
#include <cstring>

#include "transport/psn.h"
#include "transport/responder_parts.h"
#include "transport/rules.h"
#include "transport/sgl.h"
#include "wire/opcode.h"

namespace uroce::transport {

// Each WR is one datagram, SEND Only with a DETH, to the address, QP and
// Q_Key of its WR; the WR completes once its packet is built.
std::uint16_t ud_requester_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room) {
  std::uint16_t n = 0;
  while (n < room && qp.req_next != qp.sq_posted) {
    SendWqe& w = qp.sq[qp.req_next];
    if (qp.state == IBV_QPS_SQD) break;
    if (wqe_resolve(w, *env.mrs, qp.pd, 0) != mem::AccessResult::kOk) [[unlikely]] {
      complete_send(qp, IBV_WC_LOC_PROT_ERR);
      break;
    }
    const UdDest& d = qp.ud_dest[qp.sq.index(qp.req_next)];
    wire::TxFrame& f = out[n];
    f.npieces = 0;
    wire::TransportHeaders th;
    const bool imm = w.opcode == IBV_WR_SEND_WITH_IMM;
    packet_bth(th.bth, qp, imm ? wire::Opcode::kUdSendOnlyImm : wire::Opcode::kUdSendOnly, qp.req.psn, false,
               (w.send_flags & IBV_SEND_SOLICITED) != 0);
    th.bth.dest_qp.set(d.qpn);
    th.deth = wire::Deth{};  // its reserved byte is 0 on the wire
    // A Q_Key with its high bit set means the QP's own (IBTA 10.2.5, C10-15).
    th.deth.qkey.set((d.qkey & 0x80000000u) ? qp.attr.qkey : d.qkey);
    th.deth.src_qp.set(qp.qpn);
    std::memcpy(th.immdt.imm.bytes.data(), &w.imm_data, sizeof w.imm_data);
    if (w.odp_sges != 0) [[unlikely]] {
      // On demand: gathered through the kernel (a UD payload fits one MTU).
      if (w.length > odp_bounce.size() ||
          !sgl_gather(w.sge.data(), w.num_sge, w.odp_sges, w.odp_pid, 0, w.length, odp_bounce.data())) {
        qp.counters.add(QpCounter::odp_unmapped);
        complete_send(qp, IBV_WC_LOC_PROT_ERR);
        break;
      }
      f.pieces[0] = std::span<const std::uint8_t>(odp_bounce.data(), w.length);
      f.npieces = w.length > 0 ? 1 : 0;
    } else {
      f.npieces = sgl_pieces(w.sge.data(), w.num_sge, 0, w.length, f.pieces.data());
    }
    emit_copied(d.path, qp, env, f, th, w.length);
    qp.req.psn = psn_add(qp.req.psn, 1);
    ++n;
    ++qp.req_next;
    complete_send(qp, IBV_WC_SUCCESS);
  }
  return n;
}

// A datagram (IBTA 9.8.x; C10-15: a Q_Key other than the QP's is dropped
// silently; classes D and E of 9.9.3 for the rest): no answer ever goes
// back. The receive WQE gets the 40-byte GRH, then the payload; the
// completion names the sender's QP and says a GRH is there.
void ud_on_datagram(Qp& qp, Env& env, const wire::ParsedFrame& p) {
  if (!qp.receives()) {
    qp.counters.add(QpCounter::drop_bad_state);
    return;
  }
  const wire::Deth deth = p.deth();
  if (deth.qkey.get() != qp.attr.qkey) {
    qp.counters.add(QpCounter::drop_bad_qkey);
    return;
  }
  if (p.payload_length > qp.mtu) {
    qp.counters.add(QpCounter::drop_bad_length);
    qp.counters.add(QpCounter::messages_dropped);
    return;
  }
  const bool have = qp.srq != nullptr ? (qp.srq_held || srq_take(*qp.srq, *qp.srq_wqe)) : rq_has(qp);
  if (!have) {
    qp.counters.add(QpCounter::messages_dropped);  // UD has no RNR: the datagram is gone
    return;
  }
  if (qp.srq != nullptr) qp.srq_held = true;
  RecvWqe& w = recv_wqe(qp);
  const bool was_resolved = w.resolved;
  if (wqe_resolve(w, *env.mrs, qp.pd, IBV_ACCESS_LOCAL_WRITE) != mem::AccessResult::kOk) [[unlikely]] {
    const ExitRule& rule = rule_of(was_resolved ? ResponderExit::recv_revoked : ResponderExit::recv_bad_lkey);
    qp.counters.add(rule.counter);
    complete_recv(qp, rule.status, IBV_WC_RECV, 0, nullptr);
    qp_enter_error(qp);
    return;
  }
  if (kGrhBytes + p.payload_length > w.length) {
    qp.counters.add(QpCounter::drop_recv_too_short);
    qp.counters.add(QpCounter::messages_dropped);
    // From an SRQ the WQE is ended (class E); a QP's own stays for the next.
    if (qp.srq != nullptr) complete_recv(qp, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, 0, nullptr);
    return;
  }
  std::array<std::uint8_t, kGrhBytes> grh{};
  if (p.ip_version == 4) {
    std::memcpy(grh.data() + kGrhBytes - 20, &p.frame[p.l3_offset], 20);
  } else {
    std::memcpy(grh.data(), &p.frame[p.l3_offset], kGrhBytes);
  }
  if (!sgl_scatter(w.sge.data(), w.num_sge, 0, grh.data(), kGrhBytes, w.odp_sges, w.odp_pid) ||
      !wqe_scatter_payload(w, kGrhBytes, p)) [[unlikely]] {
    // An on-demand page of the buffers is not mapped: a local protection
    // error on the receive WQE (11.6.2), the datagram lost.
    qp.counters.add(QpCounter::odp_unmapped);
    qp.counters.add(QpCounter::messages_dropped);
    complete_recv(qp, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, nullptr);
    return;
  }
  qp.counters.add(QpCounter::rx_packets);
  qp.counters.add(QpCounter::rx_bytes, p.payload_length);
  ibv_wc wc{};
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV;
  wc.byte_len = kGrhBytes + p.payload_length;
  wc.src_qp = deth.src_qp.get();
  wc.wc_flags = IBV_WC_GRH;
  // RoCE has no service level; like mlx5 (its PRM: the L3 header type of a
  // UD datagram over RoCE), sl says which header the GRH holds: 2 IPv4, 1
  // IPv6. UCX's UD transport reads it to find the destination GID in the GRH.
  wc.sl = p.ip_version == 4 ? 2 : 1;
  if (p.has(wire::ExtHdr::kImmDt)) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    std::memcpy(&wc.imm_data, &p.frame[p.bth_offset + p.info->offset_of(wire::ExtHdr::kImmDt)], 4);
  }
  finish_recv(qp, wc, p.bth().se());
}

}  // namespace uroce::transport
