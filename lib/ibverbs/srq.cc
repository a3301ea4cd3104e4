// Shared receive queues: ibv_create_srq, ibv_modify_srq, ibv_query_srq,
// ibv_destroy_srq and the post_srq_recv op behind the inline
// ibv_post_srq_recv, on uroce's SharedReceiveQueue; RC QPs made with
// ibv_qp_init_attr.srq receive from it (lib/transport/queues.cc), in process
// or through uroced (lib/service/daemon/srq_ah.cc).
#include <cerrno>
#include <new>
#include <string>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {

Srq* srq_of(ibv_srq* srq) {
  if (srq == nullptr || ctx_of(srq->context, reinterpret_cast<Srq*>(srq)->born) == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return reinterpret_cast<Srq*>(srq);
}

// No progress here, as ibv_post_recv (ops.cc) makes none.
int post_srq_recv(ibv_srq* ibv_srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Srq* srq = reinterpret_cast<Srq*>(ibv_srq);
  std::lock_guard<SpinLock> lock(srq->post_lock);
  return srq->srq->post_recv(wr, bad);
}

namespace {

// On the engine's thread: no lock, no allocation; the monitor reports it.
void on_limit(void* self) { static_cast<Srq*>(self)->limit_reached.store(true, std::memory_order_release); }

}  // namespace
}  // namespace uroce::ibverbs

using uroce::ibverbs::Srq;
using uroce::ibverbs::srq_of;

extern "C" {

ibv_srq* ibv_create_srq(ibv_pd* ibv_pd, ibv_srq_init_attr* attr) {
  if (ibv_pd == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  uroce::SrqInitAttr init;
  init.max_wr = attr->attr.max_wr;
  init.max_sge = attr->attr.max_sge;
  init.srq_limit = attr->attr.srq_limit;
  return uroce::ibverbs::make_srq(ibv_pd, init, attr->srq_context);
}

}  // extern "C"

ibv_srq* uroce::ibverbs::make_srq(ibv_pd* ibv_pd, const uroce::SrqInitAttr& init, void* srq_context) {
  uroce::ibverbs::Ctx* x =
      uroce::ibverbs::ctx_of(ibv_pd->context, reinterpret_cast<uroce::ibverbs::Pd*>(ibv_pd)->born);
  if (x == nullptr) return nullptr;
  auto* srq = uroce::ibverbs::allocate<Srq>();
  if (srq == nullptr) return nullptr;
  auto* pd = reinterpret_cast<uroce::ibverbs::Pd*>(ibv_pd);
  srq->srq = pd->pd->create_srq(init, uroce::ibverbs::on_limit, srq);
  if (srq->srq == nullptr) {
    const std::string why = x->ctx->last_error();
    errno = why.find("not supported") != std::string::npos ? EOPNOTSUPP : EINVAL;
    if (errno == EOPNOTSUPP) uroce::ibverbs::unsupported(EOPNOTSUPP, "ibv_create_srq: not through uroced yet");
    delete srq;
    return nullptr;
  }
  srq->ctx = x;
  ibv_srq& b = srq->ibv;
  b.context = ibv_pd->context;
  b.srq_context = srq_context;
  b.pd = ibv_pd;
  b.handle = 0;
  pthread_mutex_init(&b.mutex, nullptr);
  pthread_cond_init(&b.cond, nullptr);
  uroce::ibverbs::hold_domain(ibv_pd);
  std::lock_guard<std::mutex> lock(x->mutex);
  x->srqs.push_back(srq);
  return &srq->ibv;
}

extern "C" {

int ibv_modify_srq(ibv_srq* ibv_srq, ibv_srq_attr* attr, int attr_mask) {
  Srq* srq = srq_of(ibv_srq);
  if (srq == nullptr || attr == nullptr) return EINVAL;
  return srq->srq->modify(*attr, attr_mask);
}

int ibv_query_srq(ibv_srq* ibv_srq, ibv_srq_attr* attr) {
  Srq* srq = srq_of(ibv_srq);
  if (srq == nullptr || attr == nullptr) return EINVAL;
  return srq->srq->query(*attr);
}

int ibv_destroy_srq(ibv_srq* ibv_srq) {
  Srq* srq = srq_of(ibv_srq);
  if (srq == nullptr) return EINVAL;
  uroce::ibverbs::Ctx* x = srq->ctx;
  {
    std::lock_guard<std::mutex> lock(x->mutex);
    std::erase(x->srqs, srq);
    uroce::ibverbs::forget_events(x, ibv_srq);
  }
  if (const int rc = srq->srq->pd()->destroy_srq(srq->srq); rc != 0) {
    std::lock_guard<std::mutex> lock(x->mutex);
    x->srqs.push_back(srq);
    return rc;  // EBUSY: QPs still use it
  }
  uroce::ibverbs::await_acks(ibv_srq, srq->async_events.load());
  uroce::ibverbs::release_domain(ibv_srq->pd);
  delete srq;
  return 0;
}

}  // extern "C"
