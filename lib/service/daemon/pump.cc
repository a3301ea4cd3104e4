#include "service_daemon/pump.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace uroce::daemon {
namespace {

constexpr std::uint32_t kBurst = 32;  // requests or completions moved per ring per round

template <typename T>
void erase(std::vector<T*>& v, T* p) {
  v.erase(std::remove(v.begin(), v.end(), p), v.end());
}

}  // namespace

void Pump::add(PumpQp* q) { with_lock([&] { qps_.push_back(q); }); }
void Pump::remove(PumpQp* q) { with_lock([&] { erase(qps_, q); }); }
void Pump::add(PumpCq* c) { with_lock([&] { cqs_.push_back(c); }); }
void Pump::remove(PumpCq* c) { with_lock([&] { erase(cqs_, c); }); }
void Pump::add(PumpSrq* s) { with_lock([&] { srqs_.push_back(s); }); }
void Pump::remove(PumpSrq* s) { with_lock([&] { erase(srqs_, s); }); }

std::size_t Pump::run_requests() {
  if (lock_.exchange(true, std::memory_order_acquire)) return 0;
  std::size_t moved = 0;
  for (PumpSrq* s : srqs_) {
    moved += drain_srq(*s);
    publish_retired(*s);
  }
  for (PumpQp* q : qps_) {
    moved += drain_rq(*q) + drain_sq(*q);
    publish_retired(*q);  // rejected requests free their slots at once
  }
  lock_.store(false, std::memory_order_release);
  return moved;
}

std::size_t Pump::run_completions() {
  if (lock_.exchange(true, std::memory_order_acquire)) return 0;
  std::size_t moved = 0;
  // The slots of the work the poll completed are free before its
  // completions are seen: a client that polls a completion may post again
  // at once (verbs: at most max_send_wr outstanding, completions retire them).
  for (PumpQp* q : qps_) publish_retired(*q);
  for (PumpSrq* s : srqs_) publish_retired(*s);
  for (PumpCq* c : cqs_) moved += fill(*c);
  lock_.store(false, std::memory_order_release);
  return moved;
}

// The QP's work retired so far (completed, or rejected by the pump), told
// to the client: its ring slots are free again.
void Pump::publish_retired(PumpQp& q) {
  q.sq.consume_to(q.qp->send_retired() + q.sq_rejected);
  q.rq.consume_to(q.qp->recv_retired() + q.rq_rejected);
}

std::size_t Pump::drain_sq(PumpQp& q) {
  std::size_t moved = 0;
  bool wild = false;
  const std::uint32_t ahead = q.sq.ready_from(q.sq_next, &wild);
  if (wild) ++q.bad_cursor;
  for (std::uint32_t k = 0; k < std::min(ahead, kBurst); ++k) {
    service::SendSlot s;
    std::memcpy(&s, &q.sq[q.sq_next], sizeof s);  // once: the client may rewrite the slot meanwhile
    ibv_sge sge[service::kMaxSge];
    ibv_send_wr wr{};
    wr.wr_id = s.wr_id;
    wr.opcode = static_cast<ibv_wr_opcode>(s.opcode);
    wr.send_flags = s.send_flags & ~static_cast<unsigned>(IBV_SEND_INLINE);
    wr.sg_list = sge;
    int rc = EINVAL;
    if (s.send_flags & IBV_SEND_INLINE) {
      if (s.inline_len <= service::kMaxInline) {
        sge[0] = ibv_sge{reinterpret_cast<std::uint64_t>(s.inline_data), s.inline_len, 0};
        wr.num_sge = s.inline_len != 0 ? 1 : 0;
        wr.send_flags |= IBV_SEND_INLINE;
        rc = 0;
      }
    } else if (s.num_sge <= service::kMaxSge) {
      for (std::uint32_t i = 0; i < s.num_sge; ++i) sge[i] = ibv_sge{s.sge[i].addr, s.sge[i].length, s.sge[i].lkey};
      wr.num_sge = static_cast<int>(s.num_sge);
      rc = 0;
    }
    if (wr.opcode == IBV_WR_SEND_WITH_INV) {
      wr.invalidate_rkey = s.imm_data;
    } else {
      wr.imm_data = s.imm_data;
    }
    // Memory windows (protocol.h's SendSlot): the window and the region by
    // their keys only; the engine checks them against the QP's PD.
    ibv_mw window{};
    ibv_mr region{};
    if (wr.opcode == IBV_WR_BIND_MW) {
      window.rkey = s.imm_data;
      region.lkey = s.remote_qkey;
      wr.bind_mw.mw = &window;
      wr.bind_mw.rkey = s.rkey;
      wr.bind_mw.bind_info.mr = s.remote_qkey != 0 ? &region : nullptr;
      wr.bind_mw.bind_info.addr = s.remote_addr;
      wr.bind_mw.bind_info.length = s.compare_add;
      wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(s.swap);
      wr.num_sge = 0;
    }
    if (q.ahs != nullptr) {
      // UD: the AH by its number in this client's own table; none there
      // (destroyed, or never made) and the engine refuses the WR.
      wr.wr.ud.ah = q.ahs->find(s.ah);
      wr.wr.ud.remote_qpn = s.remote_qpn;
      wr.wr.ud.remote_qkey = s.remote_qkey;
    } else if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.qp_type.xrc.remote_srqn = s.remote_qpn;  // XRC_SEND's (0 and unread for RC)
      wr.wr.atomic.remote_addr = s.remote_addr;
      wr.wr.atomic.rkey = s.rkey;
      wr.wr.atomic.compare_add = s.compare_add;
      wr.wr.atomic.swap = s.swap;
    } else {
      wr.qp_type.xrc.remote_srqn = s.remote_qpn;  // XRC_SEND's (0 and unread for RC)
      wr.wr.rdma.remote_addr = s.remote_addr;
      wr.wr.rdma.rkey = s.rkey;
    }
    if (rc == 0) {
      ibv_send_wr* bad = nullptr;
      rc = q.qp->post_send(&wr, &bad);
      if (rc == ENOMEM) break;  // the engine's queue is full: the rest waits in the ring
    }
    if (rc != 0) ++q.sq_rejected;
    ++q.sq_next;
    ++moved;
  }
  return moved;
}

std::size_t Pump::drain_rq(PumpQp& q) {
  std::size_t moved = 0;
  bool wild = false;
  const std::uint32_t ahead = q.rq.ready_from(q.rq_next, &wild);
  if (wild) ++q.bad_cursor;
  for (std::uint32_t k = 0; k < std::min(ahead, kBurst); ++k) {
    service::RecvSlot s;
    std::memcpy(&s, &q.rq[q.rq_next], sizeof s);
    int rc = EINVAL;
    if (s.num_sge <= service::kMaxSge) {
      ibv_sge sge[service::kMaxSge];
      for (std::uint32_t i = 0; i < s.num_sge; ++i) sge[i] = ibv_sge{s.sge[i].addr, s.sge[i].length, s.sge[i].lkey};
      ibv_recv_wr wr{};
      wr.wr_id = s.wr_id;
      wr.sg_list = sge;
      wr.num_sge = static_cast<int>(s.num_sge);
      ibv_recv_wr* bad = nullptr;
      rc = q.qp->post_recv(&wr, &bad);
      if (rc == ENOMEM) break;
    }
    if (rc != 0) ++q.rq_rejected;
    ++q.rq_next;
    ++moved;
  }
  return moved;
}

// The SRQ's WQEs taken by its QPs (and those it refused) free their slots.
void Pump::publish_retired(PumpSrq& s) {
  s.ring.consume_to(s.posted - s.srq->count() + s.rejected);
}

std::size_t Pump::drain_srq(PumpSrq& s) {
  std::size_t moved = 0;
  bool wild = false;
  const std::uint32_t ahead = s.ring.ready_from(s.next, &wild);
  if (wild) ++s.bad_cursor;
  for (std::uint32_t k = 0; k < std::min(ahead, kBurst); ++k) {
    service::RecvSlot slot;
    std::memcpy(&slot, &s.ring[s.next], sizeof slot);
    int rc = EINVAL;
    if (slot.num_sge <= service::kMaxSge) {
      ibv_sge sge[service::kMaxSge];
      for (std::uint32_t i = 0; i < slot.num_sge; ++i) {
        sge[i] = ibv_sge{slot.sge[i].addr, slot.sge[i].length, slot.sge[i].lkey};
      }
      ibv_recv_wr wr{};
      wr.wr_id = slot.wr_id;
      wr.sg_list = sge;
      wr.num_sge = static_cast<int>(slot.num_sge);
      ibv_recv_wr* bad = nullptr;
      rc = s.srq->post_recv(&wr, &bad);
      if (rc == ENOMEM) break;  // full: the rest waits in the ring
    }
    ++(rc == 0 ? s.posted : s.rejected);
    ++s.next;
    ++moved;
  }
  return moved;
}

namespace {

void signal(int fd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(fd, &one, sizeof one);  // EAGAIN: a signal is already pending
}

}  // namespace

void PumpSrq::on_limit(void* self) { signal(static_cast<PumpSrq*>(self)->event_fd); }

std::size_t Pump::fill(PumpCq& c) {
  service::RingHeader& h = *c.ring.header;
  // A solicited event seen before the move has its completion in the CQ
  // already (the engine pushes, then fires), so it reaches the ring below.
  const bool solicited_fired = c.fire_due.exchange(false, std::memory_order_acq_rel);
  const std::uint32_t room = c.ring.room(kBurst);  // a wild tail: treated as full
  int n = 0;
  if (room != 0) {
    ibv_wc wc[kBurst];
    std::uint64_t stamps[kBurst];  // read only for a CQ that stamps (filled by its poll)
    n = c.cq->poll(static_cast<int>(std::min(room, kBurst)), wc, c.timestamps ? stamps : nullptr);
    if (n < 0) {
      // Overflowed (IBTA 11.4.2.1: the CQ is in error); told once.
      if (!c.overflow_told) {
        c.overflow_told = true;
        h.overflow.store(1, std::memory_order_seq_cst);
        if (h.armed.exchange(0) != 0) signal(c.event_fd);
      }
      return 0;
    }
    for (int i = 0; i < n; ++i) c.ring.slot(static_cast<std::uint32_t>(i)) = service::CqSlot{wc[i], c.timestamps ? stamps[i] : 0};
    if (n > 0) c.ring.publish(static_cast<std::uint32_t>(n), std::memory_order_seq_cst);
  }
  // The client stores armed, then loads head; this stores head, then loads
  // armed (both seq_cst): one of the two sees the other.
  // An event announces what the ring holds so far (RingHeader::covered).
  std::uint32_t armed = h.armed.load(std::memory_order_seq_cst);
  if (armed == 2 && n > 0) {
    if (h.armed.compare_exchange_strong(armed, 0)) {
      ring::advance_cursor(h.covered, c.ring.head());
      signal(c.event_fd);
    }
  } else if (armed == 1) {
    if (solicited_fired && c.solicited_armed) {
      c.solicited_armed = false;
      if (h.armed.compare_exchange_strong(armed, 0)) {
        ring::advance_cursor(h.covered, c.ring.head());
        signal(c.event_fd);
      }
    } else if (!c.solicited_armed) {
      c.solicited_armed = true;
      c.cq->arm(true);
    }
  }
  return static_cast<std::size_t>(n);
}

}  // namespace uroce::daemon
