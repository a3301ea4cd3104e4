// Responder (IBTA 9.7.5.1-9.7.5.2, 9.9.x): checks each request's PSN,
// executes new requests in order (after every key, bounds, access and PD
// check), answers duplicates without executing them twice, and queues its
// answers (ACKs, NAKs, READ responses, atomic ACKs) to leave in PSN order.
#include "transport/psn.h"
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

Response* push(Qp& qp) {
  if (out_full(qp)) return nullptr;
  Response& r = qp.resp.out[qp.resp.out_tail++];
  r = Response{};
  return &r;
}

// ACKs coalesce (IBTA 9.7.5: one ACK may acknowledge many packets): a queued ACK
// not yet sent is moved forward rather than followed by another.
void queue_ack(Qp& qp, std::uint32_t psn) {
  if (qp.resp.out_tail != qp.resp.out_head) {
    Response& tail = qp.resp.out[qp.resp.out_tail - 1];
    if (tail.kind == Response::Kind::kAck && tail.syndrome == kAckSyndrome) {
      tail.psn = psn;
      tail.msn = qp.resp.msn;
      return;
    }
  }
  if (Response* r = push(qp)) {
    r->kind = Response::Kind::kAck;
    r->psn = psn;
    r->syndrome = kAckSyndrome;
    r->msn = qp.resp.msn;
  }
}

void queue_nak(Qp& qp, std::uint32_t psn, std::uint8_t syndrome, bool fatal) {
  if (Response* r = push(qp)) {
    r->kind = Response::Kind::kAck;
    r->psn = psn;
    r->syndrome = syndrome;
    r->msn = qp.resp.msn;
    r->fatal = fatal;
  }
}

void complete_recv(Qp& qp, ibv_wc_status status, ibv_wc_opcode opcode, std::uint32_t byte_len,
                   const wire::ParsedFrame* p) {
  const RecvWqe& w = qp.rq[qp.rq_next];
  ibv_wc wc{};
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.qp_num = qp.qpn;
  wc.src_qp = qp.attr.dest_qp_num;
  if (p != nullptr && p->has(wire::ExtHdr::kImmDt)) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    std::memcpy(&wc.imm_data, &p->frame[p->bth_offset + p->info->offset_of(wire::ExtHdr::kImmDt)], 4);
  }
  if (p != nullptr && p->has(wire::ExtHdr::kIeth)) {
    wc.wc_flags |= IBV_WC_WITH_INV;
    wc.invalidated_rkey = p->ieth().rkey.get();
  }
  ++qp.rq_next;
  qp.counters.add(QpCounter::completions);
  if (status != IBV_WC_SUCCESS) qp.counters.add(QpCounter::completion_errors);
  if (!qp.recv_cq->push(wc)) qp_enter_error(qp);
}

// A class B/C/D error (IBTA 9.9.3): NAK the request with `code`, end the
// receive WQE in use (if any) with `recv_status`, and enter ERR.
void fail(Qp& qp, std::uint32_t psn, NakCode code, ibv_wc_status recv_status = IBV_WC_SUCCESS) {
  switch (code) {
    case NakCode::kInvalidRequest: qp.counters.add(QpCounter::nak_inv_req_sent); break;
    case NakCode::kRemoteAccessError: qp.counters.add(QpCounter::nak_rem_access_sent); break;
    case NakCode::kRemoteOperationalError: qp.counters.add(QpCounter::nak_rem_op_sent); break;
    default: break;
  }
  queue_nak(qp, psn, wire::make_syndrome(AethKind::kNak, static_cast<std::uint8_t>(code)), true);
  if (recv_status != IBV_WC_SUCCESS && qp.rq_next != qp.rq_posted) {
    complete_recv(qp, recv_status, IBV_WC_RECV, qp.resp.offset, nullptr);
  }
  qp_enter_error(qp);
}

// The RETH's range under its rkey, for `need`. A zero-length transfer checks
// no key: it moves no byte, and the IBTA lets the responder skip the R_Key
// check for it (rxe skips it too).
mem::AccessResult check_reth(Qp& qp, Env& env, const wire::Reth& reth, int need, std::uint8_t*& host) {
  host = nullptr;
  if (reth.dma_length.get() == 0) return mem::AccessResult::kOk;
  return env.mrs->check(reth.rkey.get(), true, qp.pd, reth.va.get(), reth.dma_length.get(), need, host);
}

// Does the opcode fit where the current message is (IBTA 9.7.4: Middle and
// Last only inside a message of the same kind, First/Only only outside one)?
bool in_order(const Qp& qp, const wire::OpcodeInfo& info) {
  const bool continues = info.has_any(wire::kMiddle) || (info.has(wire::kLast) && !info.has(wire::kFirst));
  switch (qp.resp.in_msg) {
    case Msg::kNone: return !continues;
    case Msg::kSend: return continues && info.has(wire::kSend);
    case Msg::kWrite: return continues && info.has(wire::kWrite);
  }
  return false;
}

// C9-92 and C9-94, as rxe applies them: every packet of a multi-packet
// message but the last carries exactly the path MTU, the last 1 to PMTU
// bytes, an Only packet at most PMTU; a RETH's DMA length is at most 2^31.
// Anything else is an Invalid Request.
bool length_fits(const Qp& qp, const wire::ParsedFrame& p) {
  const wire::OpcodeInfo& info = *p.info;
  if (p.has(wire::ExtHdr::kReth) && p.reth().dma_length.get() > (1u << 31)) return false;
  if (!info.has(wire::kHasPayload)) return true;
  const std::uint32_t n = p.payload_length;
  if (info.has(wire::kOnly)) return n <= qp.mtu;
  if (info.has(wire::kLast)) return n >= 1 && n <= qp.mtu;
  return n == qp.mtu;  // First, Middle
}

// QP-level permission for the operation (qp_access_flags, IBTA 10.2.4.2).
bool qp_allows(const Qp& qp, const wire::OpcodeInfo& info) {
  const int flags = qp.attr.qp_access_flags;
  if (info.has(wire::kWrite)) return flags & IBV_ACCESS_REMOTE_WRITE;
  if (info.has(wire::kReadRequest)) return flags & IBV_ACCESS_REMOTE_READ;
  if (info.has(wire::kAtomic)) return flags & IBV_ACCESS_REMOTE_ATOMIC;
  return true;
}

// The receive WQE in use may take bytes: its list resolved with local write,
// and again if a region was deregistered since. A bad lkey is the
// responder's local error: NAK Remote Operational Error, the receive ends
// with a local protection error (IBTA 9.9.3, 11.6.2).
bool recv_placeable(Qp& qp, Env& env, std::uint32_t psn) {
  RecvWqe& w = qp.rq[qp.rq_next];
  const bool was_resolved = w.resolved;
  if (wqe_resolve(w, *env.mrs, qp.pd, IBV_ACCESS_LOCAL_WRITE) == mem::AccessResult::kOk) [[likely]] return true;
  if (was_resolved) qp.counters.add(QpCounter::mr_revoked_in_flight);
  fail(qp, psn, NakCode::kRemoteOperationalError, IBV_WC_LOC_PROT_ERR);
  return false;
}

// A receive WQE for a SEND or WRITE with immediate; false after an RNR NAK.
bool take_recv(Qp& qp, Env& env, std::uint32_t psn) {
  if (qp.rq_next == qp.rq_posted) {
    // IBTA 9.7.5.2: no receive WQE: RNR NAK with our min_rnr_timer; the expected
    // PSN stays, so the retry after the timer is this packet again.
    qp.counters.add(QpCounter::rnr_naks_sent);
    queue_nak(qp, psn, wire::make_syndrome(AethKind::kRnrNak, qp.attr.min_rnr_timer), false);
    return false;
  }
  return recv_placeable(qp, env, psn);
}

void execute_send(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  const wire::OpcodeInfo& info = *p.info;
  if (info.has(wire::kFirst)) {
    if (!take_recv(qp, env, psn)) return;
    qp.resp.offset = 0;
  } else if (!recv_placeable(qp, env, psn)) {
    return;
  }
  RecvWqe& w = qp.rq[qp.rq_next];
  if (qp.resp.offset + p.payload_length > w.length) {
    // IBTA 9.7.5.2: a message longer than the receive buffers is an Invalid Request; the
    // receive ends with a local length error.
    fail(qp, psn, NakCode::kInvalidRequest, IBV_WC_LOC_LEN_ERR);
    return;
  }
  sgl_scatter(w.sge.data(), w.num_sge, qp.resp.offset, p.payload().data(), p.payload_length);
  qp.resp.offset += p.payload_length;
  qp.counters.add(QpCounter::rx_bytes, p.payload_length);
  qp.resp.in_msg = info.has(wire::kLast) ? Msg::kNone : Msg::kSend;
  if (info.has(wire::kLast)) {
    if (p.has(wire::ExtHdr::kIeth) &&
        env.mrs->invalidate(p.ieth().rkey.get(), qp.pd) != mem::AccessResult::kOk) {
      // Class J: an rkey that may not be invalidated (unknown, another PD's,
      // or a reg_mr region's, which only memory windows and fast-registered
      // regions are not). rxe ends the receive with REM_INV_REQ_ERR; the
      // requester learns it from NAK Invalid Request.
      fail(qp, psn, NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
      return;
    }
    ++qp.resp.msn;
    complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV, qp.resp.offset, &p);
  }
  qp.resp.psn = psn_add(psn, 1);
  if (p.bth().ack_req()) queue_ack(qp, psn);
}

void execute_write(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  const wire::OpcodeInfo& info = *p.info;
  if (info.has(wire::kFirst)) {
    const wire::Reth reth = p.reth();
    std::uint8_t* host = nullptr;
    if (check_reth(qp, env, reth, IBV_ACCESS_REMOTE_WRITE, host) != mem::AccessResult::kOk) {
      fail(qp, psn, NakCode::kRemoteAccessError);
      return;
    }
    qp.resp.write_dst = host;
    qp.resp.write_len = reth.dma_length.get();
    qp.resp.write_va = reth.va.get();
    qp.resp.write_rkey = reth.rkey.get();
    qp.resp.write_epoch = env.mrs->epoch();
    qp.resp.offset = 0;
  } else if (qp.resp.write_epoch != env.mrs->epoch()) [[unlikely]] {
    // A key stopped working since WRITE First: the rest of the message is
    // checked again (IBTA 10.6: once deregistration has returned, nothing
    // reaches the region; rxe looks the rkey up for every packet).
    std::uint8_t* host = nullptr;
    if (env.mrs->check(qp.resp.write_rkey, true, qp.pd, qp.resp.write_va, qp.resp.write_len,
                       IBV_ACCESS_REMOTE_WRITE, host) != mem::AccessResult::kOk) {
      qp.counters.add(QpCounter::mr_revoked_in_flight);
      fail(qp, psn, NakCode::kRemoteAccessError);
      return;
    }
    qp.resp.write_dst = host;
    qp.resp.write_epoch = env.mrs->epoch();
  }
  if (qp.resp.offset + p.payload_length > qp.resp.write_len ||
      (info.has(wire::kLast) && qp.resp.offset + p.payload_length != qp.resp.write_len)) {
    fail(qp, psn, NakCode::kInvalidRequest);  // payload disagrees with the RETH's DMA length
    return;
  }
  // WRITE with immediate consumes a receive WQE with its last packet.
  if (p.has(wire::ExtHdr::kImmDt) && !take_recv(qp, env, psn)) return;
  if (p.payload_length > 0) {
    std::memcpy(qp.resp.write_dst + qp.resp.offset, p.payload().data(), p.payload_length);
  }
  qp.resp.offset += p.payload_length;
  qp.counters.add(QpCounter::rx_bytes, p.payload_length);
  qp.resp.in_msg = info.has(wire::kLast) ? Msg::kNone : Msg::kWrite;
  if (info.has(wire::kLast)) {
    ++qp.resp.msn;
    if (p.has(wire::ExtHdr::kImmDt)) complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qp.resp.write_len, &p);
  }
  qp.resp.psn = psn_add(psn, 1);
  if (p.bth().ack_req()) queue_ack(qp, psn);
}

ResponderResource& new_resource(Qp& qp) {
  auto& all = qp.resp.resources;
  ResponderResource& r = all[qp.resp.next_resource++ % all.size()];
  r = ResponderResource{};
  r.valid = true;
  return r;
}

bool queue_read(Qp& qp, Env& env, std::uint32_t psn, std::uint32_t first_psn, std::uint32_t last_psn,
                const wire::Reth& reth, const std::uint8_t* src, std::uint32_t msn) {
  Response* r = push(qp);
  if (r == nullptr) return false;
  r->kind = Response::Kind::kRead;
  r->psn = psn;
  r->first_psn = first_psn;
  r->last_psn = last_psn;
  r->src = src;
  r->va = reth.va.get();
  r->rkey = reth.rkey.get();
  r->mr_epoch = env.mrs->epoch();
  r->remaining = reth.dma_length.get();
  r->msn = msn;
  return true;
}

// A queued READ response may go on reading its region: checked again once a
// key has stopped working since it was queued (rxe re-checks the MR for
// every response packet). False: the region is gone, so is the READ.
bool read_source_valid(Qp& qp, Env& env, Response& r) {
  if (r.mr_epoch == env.mrs->epoch() || r.remaining == 0) [[likely]] return true;
  std::uint8_t* host = nullptr;
  if (env.mrs->check(r.rkey, true, qp.pd, r.va, r.remaining, IBV_ACCESS_REMOTE_READ, host) !=
      mem::AccessResult::kOk) {
    return false;
  }
  r.src = host;
  r.mr_epoch = env.mrs->epoch();
  return true;
}

void execute_read(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  const wire::Reth reth = p.reth();
  std::uint8_t* host = nullptr;
  if (check_reth(qp, env, reth, IBV_ACCESS_REMOTE_READ, host) != mem::AccessResult::kOk) {
    fail(qp, psn, NakCode::kRemoteAccessError);
    return;
  }
  // At most 2^31 bytes (checked before), so at most 2^23 packets at 256 bytes.
  const std::uint64_t len = reth.dma_length.get();
  const std::uint64_t npackets = len == 0 ? 1 : (len + qp.mtu - 1) / qp.mtu;
  const std::uint32_t last = psn_add(psn, static_cast<std::int64_t>(npackets) - 1);
  ++qp.resp.msn;
  if (!queue_read(qp, env, psn, psn, last, reth, host, qp.resp.msn)) {
    // More READs/atomics outstanding than max_dest_rd_atomic (IBTA 9.7.5.2: Invalid Request).
    fail(qp, psn, NakCode::kInvalidRequest);
    return;
  }
  ResponderResource& res = new_resource(qp);
  res.first_psn = psn;
  res.last_psn = last;
  res.msn = qp.resp.msn;
  qp.resp.psn = psn_add(last, 1);
}

void execute_atomic(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  const wire::AtomicEth a = p.atomic_eth();
  if (a.va.get() & 7) {
    // An atomic's address must be 8-byte aligned (IBTA 9.4.5); rxe and this
    // stack answer Invalid Request.
    fail(qp, psn, NakCode::kInvalidRequest);
    return;
  }
  std::uint8_t* host = nullptr;
  if (env.mrs->check(a.rkey.get(), true, qp.pd, a.va.get(), 8, IBV_ACCESS_REMOTE_ATOMIC, host) !=
      mem::AccessResult::kOk) {
    fail(qp, psn, NakCode::kRemoteAccessError);
    return;
  }
  if (out_full(qp)) {
    fail(qp, psn, NakCode::kInvalidRequest);
    return;
  }
  auto* target = reinterpret_cast<std::uint64_t*>(host);
  std::uint64_t orig;
  if (p.opcode == static_cast<std::uint8_t>(Opcode::kRcCompareSwap)) {
    orig = a.compare.get();
    __atomic_compare_exchange_n(target, &orig, a.swap_add.get(), false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  } else {
    orig = __atomic_fetch_add(target, a.swap_add.get(), __ATOMIC_SEQ_CST);
  }
  qp.counters.add(QpCounter::atomics_executed);
  ++qp.resp.msn;
  ResponderResource& res = new_resource(qp);
  res.atomic = true;
  res.first_psn = res.last_psn = psn;
  res.orig = orig;
  res.msn = qp.resp.msn;
  Response* r = push(qp);
  r->kind = Response::Kind::kAtomicAck;
  r->psn = psn;
  r->orig = orig;
  r->msn = qp.resp.msn;
  qp.resp.psn = psn_add(psn, 1);
}

// Drops queued answers from `psn` on: the requester has gone back there and
// will ask again for everything after it.
void drop_answers_from(Qp& qp, std::uint32_t psn) {
  std::uint32_t keep = qp.resp.out_head;
  for (std::uint32_t i = qp.resp.out_head; i != qp.resp.out_tail; ++i) {
    const Response& r = qp.resp.out[i];
    const std::uint32_t at = r.kind == Response::Kind::kRead ? r.first_psn : r.psn;
    if (psn_before(at, psn) || r.fatal) qp.resp.out[keep++] = r;
  }
  qp.resp.out_tail = keep;
}

void on_duplicate(Qp& qp, Env& env, const wire::ParsedFrame& p, std::uint32_t psn) {
  qp.counters.add(QpCounter::duplicate_requests);
  const wire::OpcodeInfo& info = *p.info;
  if (info.has(wire::kReadRequest)) {
    // IBTA 9.7.5.1: a duplicate READ is executed again from its PSN, within the
    // resource of the original; it answers from that PSN (Middle if it is not
    // the first, as rxe does), with the data the duplicate's RETH names.
    for (const ResponderResource& res : qp.resp.resources) {
      if (!res.valid || res.atomic || psn_before(psn, res.first_psn) || psn_after(psn, res.last_psn)) continue;
      const wire::Reth reth = p.reth();
      std::uint8_t* host = nullptr;
      if (check_reth(qp, env, reth, IBV_ACCESS_REMOTE_READ, host) != mem::AccessResult::kOk) {
        fail(qp, psn, NakCode::kRemoteAccessError);
        return;
      }
      drop_answers_from(qp, psn);
      queue_read(qp, env, psn, res.first_psn, res.last_psn, reth, host, res.msn);
      return;
    }
    return;  // no resource holds it: too old to answer, dropped
  }
  if (info.has(wire::kAtomic)) {
    // IBTA 9.7.5.1: a duplicate atomic is never executed again; the saved result
    // is sent back.
    for (const ResponderResource& res : qp.resp.resources) {
      if (!res.valid || !res.atomic || res.first_psn != psn) continue;
      drop_answers_from(qp, psn);
      if (Response* r = push(qp)) {
        r->kind = Response::Kind::kAtomicAck;
        r->psn = psn;
        r->orig = res.orig;
        r->msn = res.msn;
        qp.counters.add(QpCounter::atomics_replayed);
      }
      return;
    }
    return;
  }
  // IBTA 9.7.5.1: a duplicate SEND or WRITE is not executed; it is answered
  // with an ACK for the latest PSN received in order (as rxe does, for every
  // duplicate packet).
  queue_ack(qp, psn_add(qp.resp.psn, -1));
}

}  // namespace

void responder_on_request(Qp& qp, Env& env, const wire::ParsedFrame& p) {
  if (!qp.receives()) {
    qp.counters.add(QpCounter::drop_bad_state);
    return;
  }
  const std::uint32_t psn = p.bth().psn.get();
  const std::int32_t d = psn_diff(psn, qp.resp.psn);
  if (d > 0) {
    // IBTA 9.7.5.1: ahead of the expected PSN: one sequence NAK until it arrives.
    qp.counters.add(QpCounter::out_of_sequence);
    if (!qp.resp.nak_sent) {
      qp.resp.nak_sent = true;
      qp.counters.add(QpCounter::nak_seq_sent);
      queue_nak(qp, qp.resp.psn, wire::make_syndrome(AethKind::kNak, 0), false);
    }
    return;
  }
  if (d < 0) {
    on_duplicate(qp, env, p, psn);
    return;
  }
  qp.resp.nak_sent = false;
  const wire::OpcodeInfo& info = *p.info;
  if (!in_order(qp, info)) {
    qp.counters.add(QpCounter::drop_bad_opcode_sequence);
    fail(qp, psn, NakCode::kInvalidRequest);
    return;
  }
  if (!qp_allows(qp, info)) {
    fail(qp, psn, NakCode::kInvalidRequest);
    return;
  }
  if (info.has_any(wire::kReadRequest | wire::kAtomic) && qp.attr.max_dest_rd_atomic == 0) {
    // No responder resources: no READ or atomic may be executed (IBTA
    // 9.7.5.2.4; rxe answers Invalid Request too).
    fail(qp, psn, NakCode::kInvalidRequest);
    return;
  }
  if (!length_fits(qp, p)) {
    qp.counters.add(QpCounter::drop_bad_length);
    fail(qp, psn, NakCode::kInvalidRequest);
    return;
  }
  qp.counters.add(QpCounter::rx_packets);
  if (info.has(wire::kSend)) execute_send(qp, env, p, psn);
  else if (info.has(wire::kWrite)) execute_write(qp, env, p, psn);
  else if (info.has(wire::kReadRequest)) execute_read(qp, env, p, psn);
  else if (info.has(wire::kAtomic)) execute_atomic(qp, env, p, psn);
  else fail(qp, psn, NakCode::kInvalidRequest);  // FLUSH, ATOMIC WRITE: not supported yet
}

std::uint16_t responder_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room) {
  std::uint16_t n = 0;
  while (n < room && qp.resp.out_head != qp.resp.out_tail) {
    Response& r = qp.resp.out[qp.resp.out_head];
    if (!qp.receives() && !r.fatal) {
      ++qp.resp.out_head;
      continue;
    }
    // READ response data is this QP's traffic: paced like requests; ACKs
    // are not held back.
    if (r.kind == Response::Kind::kRead && !pace_allows(qp, env)) break;
    wire::Bth& b = qp.tx_template.bth;
    b.set_flags(false, false, 0);
    b.fecn_becn = 0;
    b.set_ack_req(false);
    b.psn.set(r.psn);
    wire::TxFrame& f = out[n++];
    f.npieces = 0;
    std::uint32_t payload = 0;
    qp.tx_template.aeth.syndrome = r.kind == Response::Kind::kAck ? r.syndrome : kAckSyndrome;
    qp.tx_template.aeth.msn.set(r.msn);
    switch (r.kind) {
      case Response::Kind::kAck:
        b.opcode = static_cast<std::uint8_t>(Opcode::kRcAcknowledge);
        qp.counters.add(QpCounter::acks_sent);
        ++qp.resp.out_head;
        break;
      case Response::Kind::kAtomicAck:
        b.opcode = static_cast<std::uint8_t>(Opcode::kRcAtomicAcknowledge);
        qp.tx_template.atomic_ack_eth.orig_data.set(r.orig);
        ++qp.resp.out_head;
        break;
      case Response::Kind::kRead: {
        if (!read_source_valid(qp, env, r)) [[unlikely]] {
          // The region was deregistered mid-READ: the rest is refused with
          // NAK Remote Access Error at the next response's PSN, and the QP
          // enters ERR (IBTA 9.9.3, class D), with nothing more read.
          qp.counters.add(QpCounter::mr_revoked_in_flight);
          qp.counters.add(QpCounter::nak_rem_access_sent);
          b.opcode = static_cast<std::uint8_t>(Opcode::kRcAcknowledge);
          qp.tx_template.aeth.syndrome =
              wire::make_syndrome(AethKind::kNak, static_cast<std::uint8_t>(NakCode::kRemoteAccessError));
          ++qp.resp.out_head;
          emit(qp, env, f, 0);
          qp_enter_error(qp);
          return n;
        }
        const bool first = r.psn == r.first_psn;
        const bool last = r.psn == r.last_psn;
        payload = std::min(qp.mtu, r.remaining);
        b.opcode = static_cast<std::uint8_t>(first && last ? Opcode::kRcReadResponseOnly
                                             : first       ? Opcode::kRcReadResponseFirst
                                             : last        ? Opcode::kRcReadResponseLast
                                                           : Opcode::kRcReadResponseMiddle);
        if (payload > 0) {
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
    emit(qp, env, f, payload);
    if (r.kind == Response::Kind::kRead) paced_sent(qp, env, f.frame_bytes());
  }
  return n;
}

}  // namespace uroce::transport
