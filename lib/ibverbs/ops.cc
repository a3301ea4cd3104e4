// ibv_context.ops: the slots the stock inline verbs call through without a
// NULL check (verbs.h: ibv_post_send, ibv_poll_cq, ibv_bind_mw, ...). Until
// the data path comes, each answers as a device without the verb would:
// EOPNOTSUPP, with *bad_wr at the first request, never a NULL jump.
#include <cerrno>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

ibv_mw* alloc_mw_unsupported(ibv_pd*, ibv_mw_type) {
  errno = EOPNOTSUPP;
  return nullptr;
}
int bind_mw_unsupported(ibv_qp*, ibv_mw*, ibv_mw_bind*) { return EOPNOTSUPP; }
int dealloc_mw_unsupported(ibv_mw*) { return EOPNOTSUPP; }
// ibv_poll_cq: a negative count is an error.
int poll_cq_unsupported(ibv_cq*, int, ibv_wc*) {
  errno = EOPNOTSUPP;
  return -EOPNOTSUPP;
}
int req_notify_cq_unsupported(ibv_cq*, int) { return EOPNOTSUPP; }
int post_srq_recv_unsupported(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  if (bad != nullptr) *bad = wr;
  return EOPNOTSUPP;
}
int post_send_unsupported(ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (bad != nullptr) *bad = wr;
  return EOPNOTSUPP;
}
int post_recv_unsupported(ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  if (bad != nullptr) *bad = wr;
  return EOPNOTSUPP;
}
// The _compat_* slots of libibverbs 1.0's table: nothing in v44 calls them.
void* compat_unsupported() {
  errno = EOPNOTSUPP;
  return nullptr;
}

}  // namespace

void fill_unsupported_ops(ibv_context_ops& o) {
  o = {};
  o._compat_alloc_pd = o._compat_dealloc_pd = o._compat_reg_mr = o._compat_rereg_mr = o._compat_dereg_mr =
      compat_unsupported;
  o._compat_create_cq = o._compat_cq_event = o._compat_resize_cq = o._compat_destroy_cq = compat_unsupported;
  o._compat_create_srq = o._compat_modify_srq = o._compat_query_srq = o._compat_destroy_srq = compat_unsupported;
  o._compat_create_qp = o._compat_query_qp = o._compat_modify_qp = o._compat_destroy_qp = compat_unsupported;
  o._compat_create_ah = o._compat_destroy_ah = o._compat_attach_mcast = o._compat_detach_mcast =
      o._compat_async_event = compat_unsupported;
  o.alloc_mw = alloc_mw_unsupported;
  o.bind_mw = bind_mw_unsupported;
  o.dealloc_mw = dealloc_mw_unsupported;
  o.poll_cq = poll_cq_unsupported;
  o.req_notify_cq = req_notify_cq_unsupported;
  o.post_srq_recv = post_srq_recv_unsupported;
  o.post_send = post_send_unsupported;
  o.post_recv = post_recv_unsupported;
}

}  // namespace uroce::ibverbs
