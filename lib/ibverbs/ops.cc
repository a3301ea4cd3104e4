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
  int rc;
  {
    std::lock_guard<SpinLock> lock(qp->send_lock);
    rc = qp->qp->post_send(wr, bad);
  }
  // Caller progress: the request goes out now, not at the next poll (a
  // program may post, then wait on memory for the answer).
  if (caller_progress(qp->ctx)) qp->ctx->ctx->progress(uroce::Context::ProgressFor::kPosted);
  return rc;
}
// No progress here: a receive matters only to a SEND that comes, and the
// next poll takes new receives (doorbells) before it takes frames. A
// ping-pong that reposts its receive between polling the peer's SEND and
// sending its own must not send the ACK that poll held (poll_cq) on its own.
int post_recv(ibv_qp* ibv_qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp* qp = reinterpret_cast<Qp*>(ibv_qp);
  std::lock_guard<SpinLock> lock(qp->recv_lock);
  return qp->qp->post_recv(wr, bad);
}

// Caller progress, after a poll that returned completions: the program may
// now wait for data that no completion announces (an RDMA WRITE into its
// memory: ib_write_lat spins on its buffer's last byte), with no verbs call
// to run the engines meanwhile; the helper thread would run them only after
// the program's time slice.
// - A request came since the last poll that returned completions (with
//   them, often: a uroce peer's ACK rides with its next request, see
//   poll_cq): the program has what it waits for; no linger.
// - Else the poll goes on running the engines until a request comes (the
//   peer's WRITE, usually within a round trip) or kLinger passes. A
//   linger that ends with none skips the next 1, 2, 4, ... up to kOffMax
//   completing polls (one that saw a request starts again at 0): a
//   program that computes after its completions, or only sends, loses
//   kLinger once in kOffMax of them, a ping-pong that missed one answer
//   lingers again soon.
constexpr std::uint64_t kLinger = 20'000;  // ns
constexpr std::uint32_t kOffMax = 1024;

void linger(Cq* cq) {  // poll_lock held
  uroce::Context& ctx = *cq->ctx->ctx;
  const std::uint64_t seen = ctx.requests_received();
  const bool came = seen != cq->requests_seen;
  cq->requests_seen = seen;
  if (came) return;
  if (cq->linger_off > 0) {
    --cq->linger_off;
    return;
  }
  const std::uint64_t start = monotonic_ns();
  for (std::uint32_t i = 1;; ++i) {
    if (ctx.progress(uroce::Context::ProgressFor::kPolling) != 0 && ctx.requests_received() != seen) {
      cq->requests_seen = ctx.requests_received();
      cq->linger_backoff = 0;
      return;
    }
    if (i % 16 == 0 && monotonic_ns() - start > kLinger) break;
  }
  cq->linger_off = cq->linger_backoff;
  cq->linger_backoff = cq->linger_backoff == 0 ? 1 : std::min(cq->linger_backoff * 2, kOffMax);
}

// ibv_poll_cq: the number of completions, or negative on error (an
// overflowed CQ).
int poll_cq(ibv_cq* ibv_cq, int n, ibv_wc* wc) {
  Cq* cq = reinterpret_cast<Cq*>(ibv_cq);
  std::lock_guard<SpinLock> lock(cq->poll_lock);
  int got = cq->cq->poll(n, wc);
  if (caller_progress(cq->ctx)) {
    // What waits first, then the engines, then what they completed. The
    // ACKs they queue wait for the next poll (Context::ProgressFor::kPolling):
    // a program that answers at once sends them with its answer.
    if (got == 0 && cq->ctx->ctx->progress(uroce::Context::ProgressFor::kPolling) != 0) got = cq->cq->poll(n, wc);
    if (got > 0) linger(cq);
  }
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
