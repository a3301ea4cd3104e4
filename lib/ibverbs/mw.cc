// Memory windows (IBTA 10.6.7): ibv_alloc_mw, ibv_bind_mw (type 1) and
// ibv_dealloc_mw, through ibv_context.ops as rdma-core's inline verbs call
// them, on uroce's MemoryWindow. Type 2 windows are bound by IBV_WR_BIND_MW
// work requests (ibv_post_send, ibv_wr_bind_mw), which carry our ibv_mw.
#include <cerrno>
#include <mutex>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {

ibv_mw* alloc_mw(ibv_pd* ibv_pd, ibv_mw_type type) {
  if (ibv_pd == nullptr || ctx_of(ibv_pd->context, reinterpret_cast<Pd*>(ibv_pd)->born) == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    // rdma-core's tests (test_reg_mw_wrong_type) expect a refusal other
    // than EOPNOTSUPP for a type that does not exist.
    errno = EINVAL;
    return nullptr;
  }
  auto* m = allocate<Mw>();
  if (m == nullptr) return nullptr;
  m->mw = reinterpret_cast<Pd*>(ibv_pd)->pd->alloc_mw(type);
  if (m->mw == nullptr) {
    delete m;
    errno = ENOMEM;  // out of keys (the type was checked above)
    return nullptr;
  }
  m->ibv.context = ibv_pd->context;
  m->ibv.pd = ibv_pd;
  m->ibv.rkey = m->mw->rkey();
  m->ibv.handle = m->mw->handle();
  m->ibv.type = type;
  return &m->ibv;
}

// ibv_bind_mw has checked the type (1), and the region's PD against the
// window's; the bind is a work request on `qp`'s send queue.
int bind_mw(ibv_qp* ibv_qp, ibv_mw* ibv_mw, ibv_mw_bind* bind) {
  if (ibv_qp == nullptr || ibv_mw == nullptr || bind == nullptr || qp_of(ibv_qp) == nullptr ||
      ctx_of(ibv_mw->context, reinterpret_cast<Mw*>(ibv_mw)->born) == nullptr) {
    return EINVAL;
  }
  Qp* qp = reinterpret_cast<Qp*>(ibv_qp);
  Mw* m = reinterpret_cast<Mw*>(ibv_mw);
  int rc;
  {
    std::lock_guard<SpinLock> lock(qp->send_lock);
    rc = qp->qp->bind_mw(m->mw, *bind);
  }
  if (rc == 0) ibv_mw->rkey = m->mw->rkey();  // the new rkey, as ibv_bind_mw promises
  return rc;
}

int dealloc_mw(ibv_mw* ibv_mw) {
  if (ibv_mw == nullptr || ctx_of(ibv_mw->context, reinterpret_cast<Mw*>(ibv_mw)->born) == nullptr) return EINVAL;
  Mw* m = reinterpret_cast<Mw*>(ibv_mw);
  if (const int rc = m->mw->pd()->dealloc_mw(m->mw); rc != 0) return rc;
  delete m;
  return 0;
}

}  // namespace uroce::ibverbs
