// ibv_context.ops: the slots the stock inline verbs call through without a
// NULL check (verbs.h: ibv_post_send, ibv_poll_cq, ibv_bind_mw, ...). The
// data path goes straight to uroce's QueuePair and CompletionQueue; memory
// windows are mw.cc's.
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <vector>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

constexpr std::uint32_t kEmptyPollsBeforeYield = 256;

// The data path trusts its arguments, as every provider does: a pointer
// that is not one of our objects is the program's bug.
int post_send(ibv_qp* ibv_qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Qp* qp = reinterpret_cast<Qp*>(ibv_qp);
  std::lock_guard<SpinLock> lock(qp->send_lock);
  return qp->qp->post_send(wr, bad);
}
int post_recv(ibv_qp* ibv_qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp* qp = reinterpret_cast<Qp*>(ibv_qp);
  std::lock_guard<SpinLock> lock(qp->recv_lock);
  return qp->qp->post_recv(wr, bad);
}
// ibv_poll_cq: the number of completions, or negative on error (an
// overflowed CQ).
int poll_cq(ibv_cq* ibv_cq, int n, ibv_wc* wc) {
  Cq* cq = reinterpret_cast<Cq*>(ibv_cq);
  std::lock_guard<SpinLock> lock(cq->poll_lock);
  const int got = cq->cq->poll(n, wc);
  // A program that spins on an empty CQ offers its CPU now and then, so
  // that the engine's worker runs where cores are fewer than busy threads;
  // on a machine with cores to spare sched_yield returns at once.
  if (got == 0 && ++cq->empty_polls >= kEmptyPollsBeforeYield) {
    cq->empty_polls = 0;
    sched_yield();
  } else if (got != 0) {
    cq->empty_polls = 0;
  }
  return got >= 0 ? got : -1;
}
int req_notify_cq(ibv_cq* ibv_cq, int solicited_only) {
  Cq* cq = reinterpret_cast<Cq*>(ibv_cq);
  if (cq->channel == nullptr) return 0;  // armed, but no channel to tell: as RNICs, nothing comes
  return cq->cq->arm(solicited_only != 0);
}

// The _compat_* slots of libibverbs 1.0's table: nothing in v44 calls them.
void* compat_unsupported() {
  errno = EOPNOTSUPP;
  return nullptr;
}

}  // namespace

void fill_data_ops(ibv_context_ops& o) {
  o = {};
  o._compat_alloc_pd = o._compat_dealloc_pd = o._compat_reg_mr = o._compat_rereg_mr = o._compat_dereg_mr =
      compat_unsupported;
  o._compat_create_cq = o._compat_cq_event = o._compat_resize_cq = o._compat_destroy_cq = compat_unsupported;
  o._compat_create_srq = o._compat_modify_srq = o._compat_query_srq = o._compat_destroy_srq = compat_unsupported;
  o._compat_create_qp = o._compat_query_qp = o._compat_modify_qp = o._compat_destroy_qp = compat_unsupported;
  o._compat_create_ah = o._compat_destroy_ah = o._compat_attach_mcast = o._compat_detach_mcast =
      o._compat_async_event = compat_unsupported;
  o.alloc_mw = alloc_mw;
  o.bind_mw = bind_mw;
  o.dealloc_mw = dealloc_mw;
  o.poll_cq = poll_cq;
  o.req_notify_cq = req_notify_cq;
  o.post_srq_recv = post_srq_recv;
  o.post_send = post_send;
  o.post_recv = post_recv;
}

int unsupported(int err, const char* what) {
  // Once per message: a program that retries in a loop does not flood.
  static std::mutex mutex;
  static std::vector<const char*> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (std::find(said.begin(), said.end(), what) == said.end()) {
    said.push_back(what);
    std::fprintf(stderr, "uroce libibverbs: %s\n", what);
  }
  return err;
}

}  // namespace uroce::ibverbs
