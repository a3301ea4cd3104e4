// ECE over rdma_cm (rdma-core's enhanced connection establishment): the
// REQ offers the QP's ECE (ibv_query_ece) or, for an ID without a QP of
// rdma_create_qp's, rdma_set_local_ece's; the REP answers with what the
// passive side agrees to of it, echoing the REQ's vendor id, as Linux's CM
// and rdma-core's librdmacm do. The manager gives a QP it moves the
// agreement before RTR (ece_through_verbs in process, the daemon's QP
// itself through uroced); here the library's view of the QP learns it too,
// so that ibv_query_ece answers what was agreed.
#include <cerrno>

#include "ibverbs/internal.h"
#include "rdmacm/internal.h"

namespace uroce::rdmacm {

ibv_ece local_ece(ibv_qp* qp, const ibv_ece& set) {
  if (qp == nullptr) return set;
  ibv_ece ece{};
  if (ibv_query_ece(qp, &ece) != 0) return ibv_ece{};
  return ece;
}

void record_agreed_ece(ibv_qp* qp, const ibv_ece& remote) {
  ibverbs::Qp* q = ibverbs::qp_of(qp);
  if (q == nullptr || qp->qp_type != IBV_QPT_RC) return;
  ibv_ece ours{};
  if (ibv_query_ece(qp, &ours) != 0) return;
  // Another vendor's answer, or none (a peer without ECE): nothing agreed.
  q->ece_options = remote.vendor_id == ours.vendor_id ? ours.options & remote.options : 0;
  q->ece_set = true;
}

}  // namespace uroce::rdmacm
