// What the responder's files share (responder.cc for RC and UC, ud.cc for
// UD): ending the receive WQE in use with a completion.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>

#include "transport/qp.h"
#include "wire/frame.h"

namespace uroce::transport {

// Ends the receive WQE in use with `wc` (wr_id and qp_num filled here).
inline void finish_recv(Qp& qp, ibv_wc& wc, bool solicited) {
  wc.wr_id = recv_wqe(qp).wr_id;
  wc.qp_num = qp.qpn;
  if (qp.srq != nullptr) {
    qp.srq_held = false;
  } else {
    ++qp.rq_next;
  }
  qp.counters.add(QpCounter::completions);
  if (wc.status != IBV_WC_SUCCESS) qp.counters.add(QpCounter::completion_errors);
  publish_to_app(qp);  // the slot is free before the completion can be polled
  if (!qp.recv_cq->push(wc, solicited)) qp_enter_error(qp);
}

// Ends it with `status`, taking immediate data and an invalidated rkey
// from `p` (nullptr: none); the sender named is the connected peer.
inline void complete_recv(Qp& qp, ibv_wc_status status, ibv_wc_opcode opcode, std::uint32_t byte_len,
                          const wire::ParsedFrame* p) {
  ibv_wc wc{};
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.src_qp = qp.attr.dest_qp_num;
  if (p != nullptr && p->has(wire::ExtHdr::kImmDt)) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    std::memcpy(&wc.imm_data, &p->frame[p->bth_offset + p->info->offset_of(wire::ExtHdr::kImmDt)], 4);
  }
  if (p != nullptr && p->has(wire::ExtHdr::kIeth)) {
    wc.wc_flags |= IBV_WC_WITH_INV;
    wc.invalidated_rkey = p->ieth().rkey.get();
  }
  finish_recv(qp, wc, p != nullptr && p->bth().se());
}

}  // namespace uroce::transport
