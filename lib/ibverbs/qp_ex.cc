// The new post API (ibv_wr_start ... ibv_wr_complete, man ibv_wr_post):
// each ibv_wr_<op> starts a work request from qp_ex->wr_id and wr_flags,
// the ibv_wr_set_* calls give it its data, and ibv_wr_complete posts them
// all as one chain through uroce's QueuePair::post_send. ibv_wr_abort
// forgets them.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

constexpr std::size_t kNoInline = std::numeric_limits<std::size_t>::max();

Qp* of(ibv_qp_ex* ex) { return reinterpret_cast<Qp*>(ex); }

ibv_send_wr& begin(ibv_qp_ex* ex, ibv_wr_opcode opcode) {
  Qp* qp = of(ex);
  Qp::Pending& p = qp->pending.emplace_back();
  p.wr = ibv_send_wr{};
  p.wr.wr_id = ex->wr_id;
  p.wr.send_flags = ex->wr_flags;
  p.wr.opcode = opcode;
  p.first_sge = qp->sges.size();
  p.sges = 0;
  p.inline_at = kNoInline;
  p.inline_len = 0;
  return p.wr;
}

// The request the ibv_wr_set_* calls apply to; nullptr (and the batch
// fails at ibv_wr_complete) when no ibv_wr_<op> came first.
Qp::Pending* current(ibv_qp_ex* ex) {
  Qp* qp = of(ex);
  if (qp->pending.empty()) {
    qp->pending_error = EINVAL;
    return nullptr;
  }
  return &qp->pending.back();
}

void clear(Qp* qp) {
  qp->pending.clear();
  qp->sges.clear();
  qp->bytes.clear();
  qp->pending_error = 0;
}

// ibv_wr_start .. ibv_wr_complete / ibv_wr_abort is a critical section on
// the QP's send queue (man ibv_wr_post, CONCURRENCY): its lock is held in
// between, ibv_post_send on the same QP waits.
void wr_start(ibv_qp_ex* ex) {
  Qp* qp = of(ex);
  qp->send_lock.lock();
  clear(qp);
}

int wr_complete(ibv_qp_ex* ex) {
  Qp* qp = of(ex);
  int rc = qp->pending_error;
  if (rc == 0 && !qp->pending.empty()) {
    // Addresses are fixed now that the vectors have stopped growing.
    qp->chain.resize(qp->pending.size());
    for (std::size_t i = 0; i < qp->pending.size(); ++i) {
      Qp::Pending& p = qp->pending[i];
      if (p.inline_at != kNoInline) {
        qp->sges[p.first_sge].addr = reinterpret_cast<std::uintptr_t>(qp->bytes.data() + p.inline_at);
      }
      ibv_send_wr& w = qp->chain[i];
      w = p.wr;
      w.sg_list = p.sges != 0 ? &qp->sges[p.first_sge] : nullptr;
      w.num_sge = static_cast<int>(p.sges);
      w.next = i + 1 < qp->pending.size() ? &qp->chain[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    rc = qp->qp->post_send(qp->chain.data(), &bad);
  }
  clear(qp);
  qp->send_lock.unlock();
  return rc;
}

void wr_abort(ibv_qp_ex* ex) {
  Qp* qp = of(ex);
  clear(qp);
  qp->send_lock.unlock();
}

void wr_send(ibv_qp_ex* ex) { begin(ex, IBV_WR_SEND); }
void wr_send_imm(ibv_qp_ex* ex, __be32 imm) { begin(ex, IBV_WR_SEND_WITH_IMM).imm_data = imm; }
void wr_send_inv(ibv_qp_ex* ex, std::uint32_t rkey) { begin(ex, IBV_WR_SEND_WITH_INV).invalidate_rkey = rkey; }
void wr_rdma_write(ibv_qp_ex* ex, std::uint32_t rkey, std::uint64_t addr) {
  ibv_send_wr& w = begin(ex, IBV_WR_RDMA_WRITE);
  w.wr.rdma.rkey = rkey;
  w.wr.rdma.remote_addr = addr;
}
void wr_rdma_write_imm(ibv_qp_ex* ex, std::uint32_t rkey, std::uint64_t addr, __be32 imm) {
  ibv_send_wr& w = begin(ex, IBV_WR_RDMA_WRITE_WITH_IMM);
  w.wr.rdma.rkey = rkey;
  w.wr.rdma.remote_addr = addr;
  w.imm_data = imm;
}
void wr_rdma_read(ibv_qp_ex* ex, std::uint32_t rkey, std::uint64_t addr) {
  ibv_send_wr& w = begin(ex, IBV_WR_RDMA_READ);
  w.wr.rdma.rkey = rkey;
  w.wr.rdma.remote_addr = addr;
}
void wr_atomic_cmp_swp(ibv_qp_ex* ex, std::uint32_t rkey, std::uint64_t addr, std::uint64_t compare,
                       std::uint64_t swap) {
  ibv_send_wr& w = begin(ex, IBV_WR_ATOMIC_CMP_AND_SWP);
  w.wr.atomic.rkey = rkey;
  w.wr.atomic.remote_addr = addr;
  w.wr.atomic.compare_add = compare;
  w.wr.atomic.swap = swap;
}
void wr_atomic_fetch_add(ibv_qp_ex* ex, std::uint32_t rkey, std::uint64_t addr, std::uint64_t add) {
  ibv_send_wr& w = begin(ex, IBV_WR_ATOMIC_FETCH_AND_ADD);
  w.wr.atomic.rkey = rkey;
  w.wr.atomic.remote_addr = addr;
  w.wr.atomic.compare_add = add;
}

// A memory window bound by a work request (type 2; the man page's
// ibv_wr_bind_mw), with the rkey it will answer to.
void wr_bind_mw(ibv_qp_ex* ex, ibv_mw* mw, std::uint32_t rkey, const ibv_mw_bind_info* info) {
  if (mw == nullptr || info == nullptr) {
    of(ex)->pending_error = EINVAL;
    return;
  }
  ibv_send_wr& w = begin(ex, IBV_WR_BIND_MW);
  w.bind_mw.mw = mw;
  w.bind_mw.rkey = rkey;
  w.bind_mw.bind_info = *info;
}
void wr_local_inv(ibv_qp_ex* ex, std::uint32_t rkey) { begin(ex, IBV_WR_LOCAL_INV).invalidate_rkey = rkey; }

void wr_set_inline_data(ibv_qp_ex* ex, void* addr, std::size_t length);

// IBA 1.5 ATOMIC WRITE: its 8 bytes are given by value, so they go inline
// (the engine keeps them in the WQE, whatever max_inline_data is).
void wr_atomic_write(ibv_qp_ex* ex, std::uint32_t rkey, std::uint64_t addr, const void* data) {
  ibv_send_wr& w = begin(ex, IBV_WR_ATOMIC_WRITE);
  w.wr.rdma.rkey = rkey;
  w.wr.rdma.remote_addr = addr;
  wr_set_inline_data(ex, const_cast<void*>(data), 8);
}

// What send_ops_flags cannot ask for: the batch fails with EOPNOTSUPP.
void refuse(ibv_qp_ex* ex) { of(ex)->pending_error = EOPNOTSUPP; }
void wr_send_tso(ibv_qp_ex* ex, void*, std::uint16_t, std::uint16_t) { refuse(ex); }
void wr_set_xrc_srqn(ibv_qp_ex* ex, std::uint32_t remote_srqn) {
  Qp::Pending* p = current(ex);
  if (p != nullptr) p->wr.qp_type.xrc.remote_srqn = remote_srqn;
}

void wr_set_ud_addr(ibv_qp_ex* ex, ibv_ah* ah, std::uint32_t remote_qpn, std::uint32_t remote_qkey) {
  Qp::Pending* p = current(ex);
  if (p == nullptr) return;
  p->wr.wr.ud.ah = ah;
  p->wr.wr.ud.remote_qpn = remote_qpn;
  p->wr.wr.ud.remote_qkey = remote_qkey;
}

void wr_set_sge(ibv_qp_ex* ex, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) {
  Qp::Pending* p = current(ex);
  if (p == nullptr) return;
  Qp* qp = of(ex);
  p->first_sge = qp->sges.size();
  p->sges = 1;
  qp->sges.push_back(ibv_sge{addr, length, lkey});
}

void wr_set_sge_list(ibv_qp_ex* ex, std::size_t n, const ibv_sge* list) {
  Qp::Pending* p = current(ex);
  if (p == nullptr) return;
  Qp* qp = of(ex);
  p->first_sge = qp->sges.size();
  p->sges = n;
  qp->sges.insert(qp->sges.end(), list, list + n);
}

// Inline data is copied now, as the man page allows the buffer to be
// reused once the call returns; uroce copies it again at post.
void wr_set_inline_data_list(ibv_qp_ex* ex, std::size_t n, const ibv_data_buf* list) {
  Qp::Pending* p = current(ex);
  if (p == nullptr) return;
  Qp* qp = of(ex);
  p->inline_at = qp->bytes.size();
  p->inline_len = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto* b = static_cast<const std::uint8_t*>(list[i].addr);
    qp->bytes.insert(qp->bytes.end(), b, b + list[i].length);
    p->inline_len += list[i].length;
  }
  p->first_sge = qp->sges.size();
  p->sges = 1;
  qp->sges.push_back(ibv_sge{0, static_cast<std::uint32_t>(p->inline_len), 0});  // addr fixed at complete
  p->wr.send_flags |= IBV_SEND_INLINE;
}

void wr_set_inline_data(ibv_qp_ex* ex, void* addr, std::size_t length) {
  const ibv_data_buf one{addr, length};
  wr_set_inline_data_list(ex, 1, &one);
}

}  // namespace

void fill_wr_ops(ibv_qp_ex& e) {
  e.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  e.wr_atomic_fetch_add = wr_atomic_fetch_add;
  e.wr_bind_mw = wr_bind_mw;
  e.wr_local_inv = wr_local_inv;
  e.wr_rdma_read = wr_rdma_read;
  e.wr_rdma_write = wr_rdma_write;
  e.wr_rdma_write_imm = wr_rdma_write_imm;
  e.wr_send = wr_send;
  e.wr_send_imm = wr_send_imm;
  e.wr_send_inv = wr_send_inv;
  e.wr_send_tso = wr_send_tso;
  e.wr_set_ud_addr = wr_set_ud_addr;
  e.wr_set_xrc_srqn = wr_set_xrc_srqn;
  e.wr_set_inline_data = wr_set_inline_data;
  e.wr_set_inline_data_list = wr_set_inline_data_list;
  e.wr_set_sge = wr_set_sge;
  e.wr_set_sge_list = wr_set_sge_list;
  e.wr_start = wr_start;
  e.wr_complete = wr_complete;
  e.wr_abort = wr_abort;
  e.wr_atomic_write = wr_atomic_write;
}

}  // namespace uroce::ibverbs
