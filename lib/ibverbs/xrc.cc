// XRC (IBTA annex A14) for stock programs, on uroce's XrcDomain:
// ibv_open_xrcd and ibv_close_xrcd, XRC SRQs (ibv_create_srq_ex,
// ibv_get_srq_num), XRC target QPs (ibv_create_qp_ex with an XRCD, and
// ibv_open_qp). A domain opened on a file is shared by every open of the
// same file (its inode) in this process, as the kernel shares it between
// processes; uroce does not share one between processes (docs/ibverbs.md).
// A target QP has no PD and no CQs of its own: uroce's are the domain's,
// which nothing is checked against and nothing completes on.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <vector>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {

struct Xrcd {
  ibv_xrcd ibv;  // the program's handle
  Ctx* ctx = nullptr;
  uroce::XrcDomain* domain = nullptr;
  uroce::ProtectionDomain* pd = nullptr;  // owns the target QPs
  uroce::CompletionQueue* cq = nullptr;   // theirs, never written
  bool on_file = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint32_t opens = 1;    // ibv_open_xrcd calls not yet closed
  std::vector<Qp*> targets;   // its target QPs (ibv_open_qp finds them)
  Born born;                  // a parent's (before a fork) is not the child's
};

namespace {

std::mutex g_mutex;  // guards g_xrcds and every Xrcd's opens and targets
std::vector<Xrcd*> g_xrcds;

// The domain behind `xrcd`, if it is one of this process's (a forked
// child's copy of its parent's is not: ENODEV, as for the parent's other
// objects); nullptr with errno set otherwise.
Xrcd* xrcd_of(ibv_xrcd* xrcd) {
  for (Xrcd* x : g_xrcds) {
    if (&x->ibv != xrcd) continue;
    return ctx_of(xrcd->context, x->born) != nullptr ? x : nullptr;
  }
  errno = EINVAL;
  return nullptr;
}

}  // namespace

ibv_xrcd* open_xrcd_op(ibv_context* context, ibv_xrcd_init_attr* attr) {
  Ctx* x = ctx_of(context);
  if (x == nullptr) return nullptr;
  constexpr std::uint32_t kNeeded = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  if (attr == nullptr || (attr->comp_mask & kNeeded) != kNeeded || (attr->oflags & ~(O_CREAT | O_EXCL)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  struct stat st {};
  const bool on_file = attr->fd != -1;
  if (on_file && fstat(attr->fd, &st) != 0) {
    errno = EBADF;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (on_file) {
    for (Xrcd* d : g_xrcds) {
      if (!d->on_file || d->ctx->ctx != x->ctx || d->dev != st.st_dev || d->ino != st.st_ino) continue;
      if ((attr->oflags & O_EXCL) != 0) {
        errno = EEXIST;  // O_CREAT | O_EXCL: the file has a domain already
        return nullptr;
      }
      ++d->opens;
      return &d->ibv;
    }
    if ((attr->oflags & O_CREAT) == 0) {
      errno = EINVAL;  // no domain on this file yet, and none to be made
      return nullptr;
    }
  }
  auto* d = allocate<Xrcd>();
  if (d == nullptr) return nullptr;
  d->ctx = x;
  d->on_file = on_file;
  d->dev = st.st_dev;
  d->ino = st.st_ino;
  d->domain = x->ctx->open_xrcd();
  d->pd = d->domain != nullptr ? x->ctx->alloc_pd() : nullptr;
  d->cq = d->pd != nullptr ? x->ctx->create_cq(1) : nullptr;
  if (d->cq == nullptr) {
    if (d->pd != nullptr) x->ctx->dealloc_pd(d->pd);
    if (d->domain != nullptr) x->ctx->close_xrcd(d->domain);
    delete d;
    errno = ENOMEM;
    return nullptr;
  }
  d->ibv.context = context;
  g_xrcds.push_back(d);
  return &d->ibv;
}

int close_xrcd_op(ibv_xrcd* xrcd) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Xrcd* d = xrcd_of(xrcd);
  if (d == nullptr) return errno;
  if (d->opens > 1) {
    --d->opens;
    return 0;
  }
  // EBUSY while its XRC SRQs or target QPs remain (rdma-core's answer).
  if (const int e = d->ctx->ctx->close_xrcd(d->domain); e != 0) return e;
  d->ctx->ctx->destroy_cq(d->cq);
  d->ctx->ctx->dealloc_pd(d->pd);
  std::erase(g_xrcds, d);
  delete d;
  return 0;
}

ibv_qp* create_xrc_target(ibv_context* context, ibv_qp_init_attr_ex& a) {
  Ctx* x = ctx_of(context);
  if (x == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  Xrcd* d = xrcd_of(a.xrcd);
  if (d == nullptr) return nullptr;
  if (d->ctx->ctx != x->ctx) {
    errno = EINVAL;
    return nullptr;
  }
  auto* qp = allocate<Qp>();
  if (qp == nullptr) return nullptr;
  uroce::QpInitAttr init;
  init.send_cq = init.recv_cq = d->cq;
  init.qp_type = IBV_QPT_XRC_RECV;
  init.xrcd = d->domain;
  qp->qp = d->pd->create_qp(init);
  if (qp->qp == nullptr) {
    errno = x->ctx->last_error().find("no QP") != std::string::npos ? ENOMEM : EINVAL;
    delete qp;
    return nullptr;
  }
  qp->ctx = x;
  qp->xrcd = d;
  ibv_qp& b = qp->ex.qp_base;
  b.context = context;
  b.qp_context = a.qp_context;
  b.handle = b.qp_num = qp->qp->qp_num();
  b.state = IBV_QPS_RESET;
  b.qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&b.mutex, nullptr);
  pthread_cond_init(&b.cond, nullptr);
  a.cap = ibv_qp_cap{};  // it has no queues
  d->targets.push_back(qp);
  std::lock_guard<std::mutex> qps(x->mutex);
  x->qps.push_back(qp);
  return &b;
}

// Another handle of a target QP, by number in the same domain. The handle
// is the same ibv_qp (uroce keeps no per-handle state); each
// ibv_destroy_qp of it counts one down.
ibv_qp* open_qp_op(ibv_context* context, ibv_qp_open_attr* attr) {
  constexpr std::uint32_t kNeeded = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (ctx_of(context) == nullptr || attr == nullptr || (attr->comp_mask & kNeeded) != kNeeded ||
      attr->qp_type != IBV_QPT_XRC_RECV) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  Xrcd* d = xrcd_of(attr->xrcd);
  if (d == nullptr) return nullptr;
  for (Qp* qp : d->targets) {
    if (qp->ex.qp_base.qp_num != attr->qp_num) continue;
    ++qp->opens;
    return &qp->ex.qp_base;
  }
  errno = EINVAL;  // no target QP of that number in this domain
  return nullptr;
}

bool release_xrc_target(Qp* qp) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--qp->opens > 0) return true;
  std::erase(qp->xrcd->targets, qp);
  return false;
}

uroce::ProtectionDomain* xrc_target_pd(const Qp& qp) { return qp.xrcd->pd; }

ibv_srq* create_srq_ex_op(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  Ctx* x = ctx_of(context);
  if (x == nullptr) return nullptr;
  if (attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  const bool typed = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) != 0;
  if ((typed && attr->srq_type == IBV_SRQT_TM) || (attr->comp_mask & IBV_SRQ_INIT_ATTR_TM) != 0) {
    // tm_caps stay 0 (query.cc): programs that check them do not ask.
    errno = unsupported(EOPNOTSUPP, "ibv_create_srq_ex: tag-matching SRQs are not supported: uroce's engines do "
                                    "not match MPI tags on receive (tm_caps are 0; basic and XRC SRQs work)");
    return nullptr;
  }
  constexpr std::uint32_t kBasic = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
  constexpr std::uint32_t kXrc = kBasic | IBV_SRQ_INIT_ATTR_XRCD;
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) == 0 || attr->pd == nullptr || attr->pd->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  if (!(typed && attr->srq_type == IBV_SRQT_XRC)) {
    if ((attr->comp_mask & ~kBasic) != 0 || (typed && attr->srq_type != IBV_SRQT_BASIC)) {
      errno = EINVAL;  // an XRCD without the XRC type, or an attribute uroce does not know
      return nullptr;
    }
    // A basic SRQ (its CQ, which only XRC and tag-matching SRQs use, ignored
    // as the kernel does): ibv_srq_init_attr_ex begins as ibv_srq_init_attr.
    return ibv_create_srq(attr->pd, reinterpret_cast<ibv_srq_init_attr*>(attr));
  }
  // An XRC SRQ: of a domain and a CQ of this context.
  if ((attr->comp_mask & kXrc) != kXrc || (attr->comp_mask & ~kXrc) != 0 || attr->cq == nullptr ||
      cq_of(attr->cq) == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  uroce::XrcDomain* domain = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    Xrcd* d = xrcd_of(attr->xrcd);
    if (d == nullptr) return nullptr;
    if (d->ctx->ctx != x->ctx) {
      errno = EINVAL;
      return nullptr;
    }
    domain = d->domain;
  }
  uroce::SrqInitAttr init;
  init.max_wr = attr->attr.max_wr;
  init.max_sge = attr->attr.max_sge;
  init.srq_limit = attr->attr.srq_limit;
  init.xrcd = domain;
  init.cq = cq_of(attr->cq)->cq;
  return make_srq(attr->pd, init, attr->srq_context);
}

int get_srq_num_op(ibv_srq* ibv_srq, std::uint32_t* srq_num) {
  Srq* srq = srq_of(ibv_srq);
  if (srq == nullptr || srq_num == nullptr) return EINVAL;
  const std::uint32_t n = srq->srq->srq_num();
  if (n == 0) return EINVAL;  // a basic SRQ has no number
  *srq_num = n;
  return 0;
}

}  // namespace uroce::ibverbs
