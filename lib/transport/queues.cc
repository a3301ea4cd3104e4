// The queues between the application and the engine: the completion ring,
// posting work requests (application side), the shared receive queue, and
// the engine's once-per-poll exchange of cursors.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "transport/qp.h"

namespace uroce::transport {

bool CompletionRing::push(const ibv_wc& wc, bool solicited) {
  if (ring_.room() == 0) {
    overflow_.store(true, std::memory_order_release);
    if (events_ != nullptr) events_->offer(true);  // the error wakes the waiter, who polls -EOVERFLOW
    return false;
  }
  ring_.slot() = wc;
  if (clock_ != nullptr) [[unlikely]] stamps_[ring_.index(ring_.head())] = clock_->now_ns();
  if (events_ == nullptr) {
    ring_.publish(1);
    return true;
  }
  // Sequentially consistent with the arming thread (CompletionQueue::arm):
  // either it sees this entry pending, or this sees it armed.
  ring_.publish(1, std::memory_order_seq_cst);
  // Covered before the event goes: the woken program may arm again at once.
  if (events_->take(solicited || wc.status != IBV_WC_SUCCESS)) {
    cover(ring_.head());
    events_->fire(events_->arg);
  }
  return true;
}

int CompletionRing::poll(int n, ibv_wc* out, std::uint64_t* stamps) {
  if (overflow_.load(std::memory_order_acquire)) return -EOVERFLOW;
  const std::uint32_t k = std::min<std::uint32_t>(ring_.ready(), n < 0 ? 0 : static_cast<std::uint32_t>(n));
  for (std::uint32_t i = 0; i < k; ++i) out[i] = ring_.at(i);
  if (stamps != nullptr) {
    for (std::uint32_t i = 0; i < k; ++i) stamps[i] = clock_ != nullptr ? stamps_[ring_.index(ring_.tail() + i)] : 0;
  }
  ring_.consume(k);
  return static_cast<int>(k);
}

void CompletionRing::stamp_with(Clock* clock) {
  clock_ = clock;
  stamps_.assign(clock != nullptr ? ring_.capacity() : 0, 0);
}

int CompletionRing::resize(std::uint32_t capacity) {
  if (capacity == 0 || ring_.ready() > capacity) return EINVAL;
  rebuild(capacity, 0);
  return 0;
}

std::uint32_t CompletionRing::remove_qp(std::uint32_t qpn) {
  const std::uint32_t before = ring_.ready();
  rebuild(ring_.limit(), qpn);
  return before - ring_.ready();
}

void CompletionRing::rebuild(std::uint32_t capacity, std::uint32_t drop_qpn) {
  const std::uint32_t waiting = ring_.ready();
  ring::SpscRing<ibv_wc> fresh(capacity);
  std::vector<std::uint64_t> stamps(clock_ != nullptr ? fresh.capacity() : 0, 0);
  std::uint32_t kept = 0;
  for (std::uint32_t i = 0; i < waiting; ++i) {
    const ibv_wc& wc = ring_.at(i);
    if (drop_qpn != 0 && wc.qp_num == drop_qpn) continue;
    fresh.slot(kept) = wc;
    if (clock_ != nullptr) stamps[fresh.index(kept)] = stamps_[ring_.index(ring_.tail() + i)];
    ++kept;
  }
  fresh.publish(kept);
  ring_ = std::move(fresh);
  stamps_ = std::move(stamps);
  covered_.store(0, std::memory_order_relaxed);  // those kept count as missed: one event too many at most
}

namespace {

// After publishing: an atomic read-modify-write, so the engine, which clears
// the word and then reads the cursors, never misses a post. The post that
// finds the word empty marks it in the summary after setting its bit (the
// engine clears the summary before the words it names, so a word with bits
// is always named by a summary bit set or still to be set).
void ring_doorbell(Qp& qp) {
  if (qp.doorbell == nullptr) return;
  if (qp.doorbell->fetch_or(qp.doorbell_bit, std::memory_order_acq_rel) == 0) {
    qp.doorbell_summary->fetch_or(qp.summary_bit, std::memory_order_acq_rel);
  }
}

// The operations each service carries (IBTA table 39): UC has SENDs and
// WRITEs, UD only SENDs (with immediate data or not); neither invalidates.
bool service_allows(ibv_qp_type type, ibv_wr_opcode op) {
  switch (type) {
    case IBV_QPT_UD: return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
    case IBV_QPT_XRC_RECV: return false;  // a target QP sends nothing (IBTA annex A14)
    case IBV_QPT_UC:
      return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE ||
             op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV;
    default: return true;
  }
}

}  // namespace

void qp_ring_doorbell(Qp& qp) { ring_doorbell(qp); }

int qp_post_send(Qp& qp, const ibv_send_wr& wr, const wire::PathHeader* ud, bool doorbell) {
  const ibv_qp_state state = qp.app_state.load(std::memory_order_acquire);
  if (state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_RTR) return EINVAL;
  if (qp.sq.room() == 0) return ENOMEM;
  const std::uint32_t slot = qp.sq.head();
  if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > qp.caps.max_send_sge) return EINVAL;
  if (!service_allows(qp.type, wr.opcode)) return EINVAL;
  if (qp.type == IBV_QPT_UD) {
    if (ud == nullptr || !ud->built()) return EINVAL;
    UdDest& d = qp.ud_dest[qp.sq.index(slot)];
    d.path = *ud;
    d.qpn = wr.wr.ud.remote_qpn & 0xffffff;
    d.qkey = wr.wr.ud.remote_qkey;
  }

  SendWqe& w = qp.sq.slot();
  reset_fields(w);  // the SGEs in use are written below
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.send_flags = wr.send_flags | (qp.caps.sq_sig_all ? IBV_SEND_SIGNALED : 0);
  if (qp.type == IBV_QPT_XRC_SEND) w.remote_srqn = wr.qp_type.xrc.remote_srqn & 0xffffff;
  switch (wr.opcode) {
    case IBV_WR_SEND: w.kind = WqeKind::kSend; break;
    case IBV_WR_SEND_WITH_IMM: w.kind = WqeKind::kSend; w.imm_data = wr.imm_data; break;
    case IBV_WR_SEND_WITH_INV: w.kind = WqeKind::kSend; w.invalidate_rkey = wr.invalidate_rkey; break;
    case IBV_WR_RDMA_WRITE: w.kind = WqeKind::kWrite; break;
    case IBV_WR_RDMA_WRITE_WITH_IMM: w.kind = WqeKind::kWrite; w.imm_data = wr.imm_data; break;
    case IBV_WR_RDMA_READ: w.kind = WqeKind::kRead; break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: w.kind = WqeKind::kAtomic; break;
    case IBV_WR_ATOMIC_WRITE: w.kind = WqeKind::kAtomicWrite; break;
    case IBV_WR_BIND_MW: {
      // The window by its key, the region by its lkey: the engine's bind
      // checks both against the QP's PD (a key of another PD binds nothing).
      if (wr.bind_mw.mw == nullptr) return EINVAL;
      const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
      w.kind = WqeKind::kBind;
      w.invalidate_rkey = wr.bind_mw.mw->rkey;
      w.rkey = wr.bind_mw.rkey;
      w.imm_data = b.mr != nullptr ? b.mr->lkey : 0;
      w.remote_addr = b.addr;
      w.compare_add = b.length;
      w.swap = static_cast<std::uint32_t>(b.mw_access_flags);
      break;
    }
    case IBV_WR_LOCAL_INV: w.kind = WqeKind::kLocalInv; w.invalidate_rkey = wr.invalidate_rkey; break;
    default: return EINVAL;
  }
  if (w.kind == WqeKind::kBind || w.kind == WqeKind::kLocalInv) {
    // No data: nothing else of the WR is read.
    qp.sq.publish(1);
    if (doorbell) ring_doorbell(qp);
    return 0;
  }
  if (w.kind == WqeKind::kAtomic) {
    w.remote_addr = wr.wr.atomic.remote_addr;
    w.rkey = wr.wr.atomic.rkey;
    w.compare_add = wr.wr.atomic.compare_add;
    w.swap = wr.wr.atomic.swap;
  } else if (w.kind != WqeKind::kSend) {  // WRITE, READ, ATOMIC WRITE: wr.rdma
    w.remote_addr = wr.wr.rdma.remote_addr;
    w.rkey = wr.wr.rdma.rkey;
  }

  std::uint64_t total = 0;
  for (int i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
  if ((wr.send_flags & IBV_SEND_INLINE) && w.kind == WqeKind::kAtomicWrite) {
    // Its 8 bytes (ibv_wr_atomic_write gives them by value) are kept in the
    // WQE itself, whatever max_inline_data is: a resend reads them there.
    if (total != 8) return EINVAL;
    auto* dst = reinterpret_cast<std::uint8_t*>(&w.compare_add);
    std::uint32_t at = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      std::memcpy(dst + at, reinterpret_cast<const void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
      at += wr.sg_list[i].length;
    }
    w.num_sge = 1;
    w.sge[0] = Sge{reinterpret_cast<std::uint64_t>(dst), 8, kInlineLkey, dst};
  } else if (wr.send_flags & IBV_SEND_INLINE) {
    // Inline data is copied now; the buffers may be reused on return.
    if (w.kind != WqeKind::kSend && w.kind != WqeKind::kWrite) return EINVAL;
    if (total > qp.caps.max_inline_data) return EINVAL;
    std::uint8_t* dst = qp.inline_buf.data() + static_cast<std::size_t>(qp.sq.index(slot)) * qp.caps.max_inline_data;
    std::uint32_t at = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      std::memcpy(dst + at, reinterpret_cast<const void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
      at += wr.sg_list[i].length;
    }
    w.num_sge = total ? 1 : 0;
    w.sge[0] = Sge{reinterpret_cast<std::uint64_t>(dst), at, kInlineLkey, dst};
  } else {
    w.num_sge = static_cast<std::uint8_t>(wr.num_sge);
    for (int i = 0; i < wr.num_sge; ++i) {
      w.sge[i] = Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey, nullptr};
    }
  }
  if (total > (1ull << 31)) return EINVAL;  // IBTA: messages up to 2^31 bytes
  w.length = static_cast<std::uint32_t>(total);
  if (w.kind == WqeKind::kAtomic && (w.num_sge != 1 || w.length != 8)) return EINVAL;
  if (w.kind == WqeKind::kAtomicWrite && w.length != 8) return EINVAL;  // IBA 1.5: exactly 8 bytes
  // A datagram is one packet (IBTA 9.8.x): at most the path MTU (rxe refuses
  // a longer one at post time too).
  if (qp.type == IBV_QPT_UD && w.length > qp.mtu) return EINVAL;
  // Posting to a QP in ERR is allowed: the engine flushes the WR at its
  // next poll (sync_from_app).
  qp.sq.publish(1);
  if (doorbell) ring_doorbell(qp);
  return 0;
}

namespace {

// A receive WR as the responder reads it (the QP's own queue or an SRQ).
// Every field but the SGEs past num_sge, written in place: assigning a
// zeroed RecvWqe cleared all kMaxSge SGEs (a rep stos of over 500 bytes),
// about 55 ns of each post.
void fill_recv_wqe(RecvWqe& w, const ibv_recv_wr& wr) {
  static_assert(offsetof(RecvWqe, sge) == 32, "a RecvWqe field was added or removed: set it here");
  w.wr_id = wr.wr_id;
  w.resolved = false;
  w.odp_sges = 0;
  w.odp_pid = 0;
  w.mr_epoch = 0;
  w.num_sge = static_cast<std::uint8_t>(wr.num_sge);
  std::uint64_t total = 0;
  for (int i = 0; i < wr.num_sge; ++i) {
    w.sge[i] = Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey, nullptr};
    total += wr.sg_list[i].length;
  }
  w.length = static_cast<std::uint32_t>(std::min<std::uint64_t>(total, 1ull << 31));
}

}  // namespace

int qp_post_recv(Qp& qp, const ibv_recv_wr& wr, bool doorbell) {
  if (qp.app_state.load(std::memory_order_acquire) == IBV_QPS_RESET) return EINVAL;
  if (qp.rq.room() == 0) return ENOMEM;
  if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > qp.caps.max_recv_sge) return EINVAL;
  fill_recv_wqe(qp.rq.slot(), wr);
  qp.rq.publish(1);
  if (doorbell) qp_recv_posted(qp);
  return 0;
}

void qp_recv_posted(Qp& qp) {
  // The head stored again, seq_cst, then the state loaded seq_cst: with
  // qp_enter_error's seq_cst store of ERR and load of the head, one of the
  // two loads sees the other side's store (no fence: ThreadSanitizer does
  // not model std::atomic_thread_fence).
  qp.rq.publish(0, std::memory_order_seq_cst);
  if (qp.app_state.load(std::memory_order_seq_cst) == IBV_QPS_ERR) ring_doorbell(qp);
}

int srq_post_recv(Srq& srq, const ibv_recv_wr& wr) {
  if (srq.ring.room() == 0) return ENOMEM;
  if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > srq.max_sge) return EINVAL;
  fill_recv_wqe(srq.ring.slot(), wr);
  srq.ring.publish(1);
  return 0;
}

bool srq_take(Srq& srq, RecvWqe& out) {
  const std::uint32_t posted = srq.ring.ready();
  if (posted == 0) return false;
  out = srq.ring.at();
  srq.ring.consume(1);
  // The limit event: once, when what is left falls below the armed limit.
  std::uint32_t limit = srq.limit.load(std::memory_order_relaxed);
  if (limit != 0 && posted - 1 < limit &&
      srq.limit.compare_exchange_strong(limit, 0, std::memory_order_acq_rel) && srq.on_limit != nullptr) {
    srq.on_limit(srq.arg);
  }
  return true;
}

std::uint32_t srq_count(const Srq& srq) {
  return srq.ring.published() - srq.ring.consumed();
}

void sync_from_app(Qp& qp) {
  qp.sq_posted += qp.sq.ready_from(qp.sq_posted);
  if (qp.req_next != qp.sq_posted) {
    // The WQE the requester sends next, on its way before requester_fill
    // reads it (with thousands of QPs it is cold).
    const auto* w = reinterpret_cast<const char*>(&qp.sq[qp.req_next]);
    __builtin_prefetch(w);
    __builtin_prefetch(w + 64);
  }
  // In ERR, work posted since is flushed at once. Outside ERR receives
  // ring no doorbell (qp_recv_posted): the responder takes them in when a
  // message needs one (rq_has), so a doorbell reads no receive-queue line.
  if (qp.state == IBV_QPS_ERR) {
    rq_sync(qp);
    if (qp.comp_next != qp.sq_posted || qp.rq_next != qp.rq_posted) qp_enter_error(qp);
  }
}

void publish_to_app(Qp& qp) {
  if (qp.comp_next != qp.sq_retired) {
    qp.sq.consume_to(qp.comp_next);
    qp.sq_retired = qp.comp_next;
  }
  if (qp.rq_next != qp.rq_retired) {
    qp.rq.consume_to(qp.rq_next);
    qp.rq_retired = qp.rq_next;
  }
}

}  // namespace uroce::transport
