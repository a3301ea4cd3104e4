// Queue pairs: ibv_create_qp(_ex), ibv_modify_qp, ibv_query_qp,
// ibv_destroy_qp, and the new post API (ibv_wr_*) on uroce's QueuePair.
// RC, UC and UD, on a receive queue of their own or an SRQ (srq.cc), and
// XRC initiator QPs; XRC target QPs are xrc.cc's. Raw packet QPs get
// EOPNOTSUPP with one line on stderr.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

const char* type_name(ibv_qp_type t) {
  switch (t) {
    // The port is the engines': they take every frame for RoCE or ARP and
    // hand none to a program, and send only frames they build.
    case IBV_QPT_RAW_PACKET:
      return "ibv_create_qp: raw packet QPs are not supported: the DPDK port is uroce's engines', which send "
             "only RoCE frames they build and deliver no Ethernet frames to programs (RC, UC and UD QPs work)";
    default: return "ibv_create_qp: this QP type is not supported (RC, UC, UD and XRC are)";
  }
}

// The operations ibv_wr_* can build (send_ops_flags).
constexpr std::uint64_t kSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                   IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                                   IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                                   IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_LOCAL_INV |
                                   IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_ATOMIC_WRITE;

// `granted`: the caps the QP has, written back as ibv_create_qp does.
ibv_qp* create(ibv_pd* ibv_pd, const ibv_qp_init_attr_ex& a, bool new_post_api, ibv_qp_cap& granted) {
  if (ibv_pd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  Ctx* x = ctx_of(ibv_pd->context, reinterpret_cast<Pd*>(ibv_pd)->born);
  if (x == nullptr) return nullptr;
  if (a.qp_type != IBV_QPT_RC && a.qp_type != IBV_QPT_UC && a.qp_type != IBV_QPT_UD && a.qp_type != IBV_QPT_XRC_SEND) {
    errno = unsupported(EOPNOTSUPP, type_name(a.qp_type));
    return nullptr;
  }
  Srq* srq = nullptr;
  if (a.srq != nullptr && (srq = srq_of(a.srq)) == nullptr) return nullptr;
  // An XRC initiator receives nothing: its recv_cq may be NULL.
  const bool recv_cq_needed = a.qp_type != IBV_QPT_XRC_SEND || a.recv_cq != nullptr;
  if (a.send_cq == nullptr || cq_of(a.send_cq) == nullptr ||
      (recv_cq_needed && (a.recv_cq == nullptr || cq_of(a.recv_cq) == nullptr))) {
    errno = EINVAL;
    return nullptr;
  }
  auto* qp = allocate<Qp>();
  if (qp == nullptr) return nullptr;
  uroce::QpInitAttr init;
  init.send_cq = cq_of(a.send_cq)->cq;
  init.recv_cq = a.recv_cq != nullptr ? cq_of(a.recv_cq)->cq : nullptr;
  init.cap = a.cap;
  init.qp_type = a.qp_type;
  init.sq_sig_all = a.sq_sig_all != 0;
  init.srq = srq != nullptr ? srq->srq : nullptr;
  auto* pd = reinterpret_cast<Pd*>(ibv_pd);
  qp->qp = pd->pd->create_qp(init);
  if (qp->qp == nullptr) {
    // Caps over the device's limits (EINVAL), no QP left (ENOMEM), a type
    // the service does not carry (EOPNOTSUPP).
    const std::string& why = x->ctx->last_error();
    errno = why.find("no QP") != std::string::npos        ? ENOMEM
            : why.find("not supported") != std::string::npos ? EOPNOTSUPP
                                                             : EINVAL;
    delete qp;
    return nullptr;
  }
  qp->ctx = x;
  qp->new_post_api = new_post_api;
  ibv_qp& b = qp->ex.qp_base;
  b.context = ibv_pd->context;
  b.qp_context = a.qp_context;
  b.pd = ibv_pd;
  b.send_cq = a.send_cq;
  b.recv_cq = a.recv_cq;
  b.srq = a.srq;
  b.handle = qp->qp->qp_num();
  b.qp_num = qp->qp->qp_num();
  b.state = IBV_QPS_RESET;
  b.qp_type = a.qp_type;
  pthread_mutex_init(&b.mutex, nullptr);
  pthread_cond_init(&b.cond, nullptr);
  if (new_post_api) fill_wr_ops(qp->ex);
  ibv_qp_attr qa{};
  if (qp->qp->query(qa, IBV_QP_CAP) == 0) granted = qa.cap;
  hold_domain(ibv_pd);
  std::lock_guard<std::mutex> lock(x->mutex);
  x->qps.push_back(qp);
  return &qp->ex.qp_base;
}

std::atomic<QpDestroyHook> g_qp_destroy_hook{nullptr};

}  // namespace

void set_qp_destroy_hook(QpDestroyHook hook) { g_qp_destroy_hook.store(hook); }

Qp* qp_of(ibv_qp* qp) {
  if (qp == nullptr || ctx_of(qp->context, reinterpret_cast<Qp*>(qp)->born) == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return reinterpret_cast<Qp*>(qp);
}

ibv_qp* create_qp_ex_op(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  if (attr == nullptr || ctx_of(context) == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  constexpr std::uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                                   IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
  if ((attr->comp_mask & ~kKnown) != 0) {
    errno = unsupported(EOPNOTSUPP, "ibv_create_qp_ex: RSS, indirection tables and source QPNs are not supported");
    return nullptr;
  }
  if (attr->qp_type == IBV_QPT_XRC_RECV) {
    // A target QP: of an XRC domain, with no PD, CQs or queues (annex A14).
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) == 0 || attr->xrcd == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    return create_xrc_target(context, *attr);
  }
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0) {
    errno = EINVAL;  // every other QP type needs a PD
    return nullptr;
  }
  if (((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && attr->create_flags != 0) ||
      ((attr->comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) != 0 && attr->max_tso_header != 0)) {
    errno = unsupported(EOPNOTSUPP, "ibv_create_qp_ex: create_flags and TSO are not supported");
    return nullptr;
  }
  const bool ops = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  if (ops && (attr->send_ops_flags & ~kSendOps) != 0) {
    errno = unsupported(EOPNOTSUPP, "ibv_create_qp_ex: send_ops_flags TSO is not supported");
    return nullptr;
  }
  if (attr->pd == nullptr || attr->pd->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  return create(attr->pd, *attr, ops, attr->cap);
}

}  // namespace uroce::ibverbs

using uroce::ibverbs::Qp;
using uroce::ibverbs::qp_of;

extern "C" {

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp_init_attr_ex a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  return uroce::ibverbs::create(pd, a, false, attr->cap);
}

int ibv_modify_qp(ibv_qp* ibv_qp, ibv_qp_attr* attr, int attr_mask) {
  Qp* qp = qp_of(ibv_qp);
  if (qp == nullptr || attr == nullptr) return EINVAL;
  if ((attr_mask & IBV_QP_AV) != 0 && attr->ah_attr.is_global != 0 &&
      attr->ah_attr.grh.sgid_index >= uroce::ibverbs::kGidTableLen) {
    errno = uroce::ibverbs::bad_gid_index("ibv_modify_qp", attr->ah_attr.grh.sgid_index);
    return errno;
  }
  const bool to_state = (attr_mask & IBV_QP_STATE) != 0;
  // The event monitor must not take a move to ERR the program asked for as
  // an error of the QP's own: ERR is published before the call.
  if (to_state && attr->qp_state == IBV_QPS_ERR) qp->requested_state.store(IBV_QPS_ERR);
  // uroce checks the transition, the required and allowed attributes
  // (IBTA table 91), and on Ethernet a GRH (is_global) in the address vector.
  // A move to RESET takes the QP's completions out of its CQs (uroce's
  // modify): no ibv_poll_cq of another thread reads them meanwhile.
  const bool reset = to_state && attr->qp_state == IBV_QPS_RESET;
  uroce::ibverbs::Cq* scq = reset ? reinterpret_cast<uroce::ibverbs::Cq*>(ibv_qp->send_cq) : nullptr;
  uroce::ibverbs::Cq* rcq = reset && ibv_qp->recv_cq != ibv_qp->send_cq
                                ? reinterpret_cast<uroce::ibverbs::Cq*>(ibv_qp->recv_cq)
                                : nullptr;
  // Transport options (UROCE_TRANSPORT, ECE's agreement) are set before RTR (ece.cc).
  if (to_state && attr->qp_state == IBV_QPS_RTR) {
    if (const int e = uroce::ibverbs::apply_transport(*qp); e != 0) return e;
  }
  if (scq != nullptr) scq->poll_lock.lock();
  if (rcq != nullptr) rcq->poll_lock.lock();
  const int rc = qp->qp->modify(*attr, attr_mask);
  if (rcq != nullptr) rcq->poll_lock.unlock();
  if (scq != nullptr) scq->poll_lock.unlock();
  const ibv_qp_state now = qp->qp->state();
  pthread_mutex_lock(&ibv_qp->mutex);
  ibv_qp->state = now;
  pthread_mutex_unlock(&ibv_qp->mutex);
  if (rc == 0 && to_state && attr->qp_state == IBV_QPS_RESET) {
    // A QP used again reports its events afresh.
    std::lock_guard<std::mutex> lock(qp->ctx->mutex);
    qp->fatal_reported = qp->established_reported = qp->last_wqe_reported = false;
    qp->ece_set = false;  // and agrees afresh (ece.cc)
    qp->ece_options = 0;
    qp->rx_base = qp->qp->counter("rx_packets");
    qp->nak_access_base = qp->qp->counter("nak_rem_access_sent");
    qp->nak_invalid_base = qp->qp->counter("nak_inv_req_sent");
  }
  qp->requested_state.store(rc == 0 && to_state ? attr->qp_state : now);
  // rdma-core's returns the errno value and leaves it in errno too (its
  // command's write(2) set it): UCX reports a failed modify with %m.
  if (rc != 0) errno = rc;
  return rc;
}

int ibv_query_qp(ibv_qp* ibv_qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
  Qp* qp = qp_of(ibv_qp);
  if (qp == nullptr || attr == nullptr) return EINVAL;
  uroce::QpInitAttr init;
  if (const int rc = qp->qp->query(*attr, attr_mask, &init); rc != 0) return rc;
  if ((attr_mask & IBV_QP_STATE) != 0) {
    // As rdma-core does: a program sees a QP that went to ERR on its own.
    pthread_mutex_lock(&ibv_qp->mutex);
    ibv_qp->state = attr->qp_state;
    pthread_mutex_unlock(&ibv_qp->mutex);
  }
  if (init_attr != nullptr) {
    *init_attr = {};
    init_attr->qp_context = ibv_qp->qp_context;
    init_attr->send_cq = ibv_qp->send_cq;
    init_attr->recv_cq = ibv_qp->recv_cq;
    init_attr->srq = ibv_qp->srq;
    init_attr->cap = attr->cap;
    init_attr->qp_type = ibv_qp->qp_type;
    init_attr->sq_sig_all = init.sq_sig_all ? 1 : 0;
  }
  return 0;
}

// 0: no in-order promise is made (the man page's conservative answer).
int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, std::uint32_t) { return 0; }

int ibv_destroy_qp(ibv_qp* ibv_qp) {
  Qp* qp = qp_of(ibv_qp);
  if (qp == nullptr) return EINVAL;
  // An XRC target QP opened again (ibv_open_qp): this handle only.
  if (qp->xrcd != nullptr && uroce::ibverbs::release_xrc_target(qp)) return 0;
  uroce::ibverbs::Ctx* x = qp->ctx;
  // Before any lock of ours: the hook takes librdmacm's, whose holder (its
  // CM thread) may be waiting for the context's mutex.
  if (const uroce::ibverbs::QpDestroyHook hook = uroce::ibverbs::g_qp_destroy_hook.load()) hook(qp->qp);
  {
    // Out of the event monitor's sight first, then gone from the engines.
    std::lock_guard<std::mutex> lock(x->mutex);
    std::erase(x->qps, qp);
    uroce::ibverbs::forget_events(x, ibv_qp);
    uroce::ibverbs::warn_if_ended_by_error(qp);
  }
  uroce::ibverbs::print_qp_counters_on_destroy(*qp->qp);
  uroce::ProtectionDomain* pd = qp->xrcd != nullptr ? uroce::ibverbs::xrc_target_pd(*qp)
                                                     : reinterpret_cast<uroce::ibverbs::Pd*>(ibv_qp->pd)->pd;
  if (const int rc = pd->destroy_qp(qp->qp); rc != 0) {
    std::lock_guard<std::mutex> lock(x->mutex);
    x->qps.push_back(qp);
    return rc;
  }
  uroce::ibverbs::await_acks(ibv_qp, qp->async_events.load());
  if (ibv_qp->pd != nullptr) uroce::ibverbs::release_domain(ibv_qp->pd);
  delete qp;
  return 0;
}

// The ibv_qp_ex of a QP created with send_ops_flags (ibv_create_qp_ex);
// NULL for others, which post with ibv_post_send (perftest on unknown
// vendors, rc_pingpong without --new_send).
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* ibv_qp) {
  Qp* qp = qp_of(ibv_qp);
  if (qp == nullptr || !qp->new_post_api) return nullptr;
  return &qp->ex;
}

}  // extern "C"
