#include "verbs/connect.h"

#include "log/log.h"

namespace uroce {

int connect_rc(QueuePair* qp, const ibv_gid& remote_gid, std::uint32_t remote_qpn, std::uint32_t send_psn,
               std::uint32_t recv_psn, const ConnectParams& p) {
  logger().debug("qp {:#x}: connecting to remote qp {:#x}, send PSN {:#x}, receive PSN {:#x}, path MTU {}",
                 qp->qp_num(), remote_qpn, send_psn, recv_psn, 128 << p.mtu);
  ibv_qp_attr a{};
  QpInitAttr init;
  if (int rc = qp->query(a, IBV_QP_STATE, &init)) return rc;
  const bool uc = init.qp_type == IBV_QPT_UC;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = p.access;
  if (int rc = qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return rc;
  const TransportOptions& t = p.transport;
  if (t.selective_repeat || t.spray_paths != 1 || t.bdp_packets != 0) {
    if (int rc = qp->set_transport_options(t)) return rc;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = recv_psn;
  a.max_dest_rd_atomic = p.max_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = remote_gid;
  a.ah_attr.grh.sgid_index = p.sgid_index;
  a.ah_attr.grh.hop_limit = p.hop_limit;
  a.ah_attr.grh.traffic_class = p.traffic_class;
  a.ah_attr.port_num = 1;
  if (uc) {
    if (int rc = qp->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)) return rc;
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = send_psn;
    return qp->modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  }
  if (int rc = qp->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return rc;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.sq_psn = send_psn;
  a.max_rd_atomic = p.max_rd_atomic;
  return qp->modify(a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

int ready_ud(QueuePair* qp, std::uint32_t qkey, std::uint32_t send_psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = qkey;
  if (int rc = qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return rc;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  if (int rc = qp->modify(a, IBV_QP_STATE)) return rc;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = send_psn;
  return qp->modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

}  // namespace uroce
