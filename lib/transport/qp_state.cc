#include "transport/qp_state.h"

namespace uroce::transport {
namespace {

constexpr int kAllFlags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// Attributes a modify may carry when staying in RTS or going RTR->RTS / SQD->RTS.
constexpr int kRtsOptional = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                             IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;

}  // namespace

const char* qp_state_name(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    case IBV_QPS_UNKNOWN: break;
  }
  return "UNKNOWN";
}

TransitionRule rc_transition(ibv_qp_state from, ibv_qp_state to) {
  // Any state may go to RESET or ERR, with no attributes besides the state.
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return {true, 0, 0};
  switch (from) {
    case IBV_QPS_RESET:
      if (to == IBV_QPS_INIT) return {true, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0};
      break;
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT) return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS};
      if (to == IBV_QPS_RTR) {
        return {true,
                IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
      }
      break;
    case IBV_QPS_RTR:
      if (to == IBV_QPS_RTS) {
        return {true,
                IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                    IBV_QP_MAX_QP_RD_ATOMIC,
                kRtsOptional};
      }
      break;
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS) return {true, 0, kRtsOptional};
      if (to == IBV_QPS_SQD) return {true, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
      break;
    case IBV_QPS_SQD:
      if (to == IBV_QPS_RTS) return {true, 0, kRtsOptional};
      if (to == IBV_QPS_SQD) {
        return {true, 0,
                IBV_QP_PKEY_INDEX | IBV_QP_AV | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
                    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE |
                    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER};
      }
      break;
    case IBV_QPS_SQE:
      if (to == IBV_QPS_RTS) return {true, 0, IBV_QP_CUR_STATE};
      break;
    case IBV_QPS_ERR:
    case IBV_QPS_UNKNOWN:
      break;
  }
  return {};
}

namespace {

// UC: RC's states with what a connection without ACKs needs (no timeouts,
// retries, RNR timer or READ/atomic depth).
TransitionRule uc_transition(ibv_qp_state from, ibv_qp_state to) {
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return {true, 0, 0};
  constexpr int kRts = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
  switch (from) {
    case IBV_QPS_RESET:
      if (to == IBV_QPS_INIT) return {true, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0};
      break;
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT) return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS};
      if (to == IBV_QPS_RTR) {
        return {true, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
      }
      break;
    case IBV_QPS_RTR:
      if (to == IBV_QPS_RTS) return {true, IBV_QP_SQ_PSN, kRts};
      break;
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS) return {true, 0, kRts};
      if (to == IBV_QPS_SQD) return {true, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
      break;
    case IBV_QPS_SQD:
      if (to == IBV_QPS_RTS) return {true, 0, kRts};
      if (to == IBV_QPS_SQD) return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_AV | kRts};
      break;
    case IBV_QPS_SQE:
      if (to == IBV_QPS_RTS) return {true, 0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS};
      break;
    default: break;
  }
  return {};
}

// UD: no path and no peer; a Q_Key instead, set at INIT, changeable later.
TransitionRule ud_transition(ibv_qp_state from, ibv_qp_state to) {
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return {true, 0, 0};
  switch (from) {
    case IBV_QPS_RESET:
      if (to == IBV_QPS_INIT) return {true, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0};
      break;
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT) return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY};
      if (to == IBV_QPS_RTR) return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
      break;
    case IBV_QPS_RTR:
      if (to == IBV_QPS_RTS) return {true, IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      break;
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS) return {true, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      if (to == IBV_QPS_SQD) return {true, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
      break;
    case IBV_QPS_SQD:
      if (to == IBV_QPS_RTS) return {true, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      if (to == IBV_QPS_SQD) return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
      break;
    case IBV_QPS_SQE:
      if (to == IBV_QPS_RTS) return {true, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      break;
    default: break;
  }
  return {};
}

}  // namespace

TransitionRule qp_transition(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to) {
  switch (type) {
    case IBV_QPT_UC: return uc_transition(from, to);
    case IBV_QPT_UD: return ud_transition(from, to);
    default: return rc_transition(from, to);
  }
}

ModifyCheck check_modify(ibv_qp_type type, ibv_qp_state current, const ibv_qp_attr& attr, int mask,
                         const ModifyLimits& limits) {
  ModifyCheck c;
  c.next = (mask & IBV_QP_STATE) ? attr.qp_state : current;
  auto fail = [&c](const char* why) {
    c.error = EINVAL;
    c.why = why;
    return c;
  };
  if (c.next > IBV_QPS_ERR) return fail("qp_state is not a QP state");
  if ((mask & IBV_QP_CUR_STATE) && attr.cur_qp_state != current) {
    return fail("cur_qp_state does not match the QP's current state");
  }
  const TransitionRule rule = qp_transition(type, current, c.next);
  if (!rule.valid) return fail("this state transition is not allowed for a QP of this type (IBTA 10.3.1)");
  const int given = mask & ~IBV_QP_STATE;
  if ((given & rule.required) != rule.required) {
    return fail("the attribute mask lacks an attribute this transition requires (IBTA table 91)");
  }
  if (given & ~(rule.required | rule.optional)) {
    return fail("the attribute mask has an attribute this transition does not allow (IBTA table 91)");
  }
  if ((mask & IBV_QP_ACCESS_FLAGS) && (attr.qp_access_flags & ~kAllFlags)) {
    // (UC takes the same bits, as the kernel does; only REMOTE_WRITE and
    // LOCAL_WRITE matter to it.)
    return fail("qp_access_flags has bits other than REMOTE_READ/WRITE/ATOMIC and LOCAL_WRITE");
  }
  if ((mask & IBV_QP_PORT) && attr.port_num != 1) return fail("port_num must be 1");
  if ((mask & IBV_QP_PKEY_INDEX) && attr.pkey_index != 0) {
    return fail("pkey_index must be 0 (the default P_Key 0xffff)");
  }
  if ((mask & IBV_QP_PATH_MTU) && (attr.path_mtu < IBV_MTU_256 || attr.path_mtu > limits.port_mtu)) {
    return fail("path_mtu must be between IBV_MTU_256 and the port's active MTU");
  }
  if ((mask & IBV_QP_DEST_QPN) && attr.dest_qp_num > 0xffffff) return fail("dest_qp_num exceeds 24 bits");
  if ((mask & IBV_QP_RQ_PSN) && attr.rq_psn > 0xffffff) return fail("rq_psn exceeds 24 bits");
  if ((mask & IBV_QP_SQ_PSN) && attr.sq_psn > 0xffffff) return fail("sq_psn exceeds 24 bits");
  if ((mask & IBV_QP_TIMEOUT) && attr.timeout > 31) return fail("timeout must be 0..31");
  if ((mask & IBV_QP_RETRY_CNT) && attr.retry_cnt > 7) return fail("retry_cnt must be 0..7");
  if ((mask & IBV_QP_RNR_RETRY) && attr.rnr_retry > 7) return fail("rnr_retry must be 0..7");
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr.min_rnr_timer > 31) return fail("min_rnr_timer must be 0..31");
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > limits.max_rd_atomic) {
    return fail("max_rd_atomic exceeds the device's max_qp_init_rd_atom");
  }
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > limits.max_dest_rd_atomic) {
    return fail("max_dest_rd_atomic exceeds the device's max_qp_rd_atom");
  }
  if ((mask & IBV_QP_AV) && !attr.ah_attr.is_global) {
    return fail("ah_attr.is_global must be 1: RoCEv2 addresses the peer by its GID");
  }
  if ((mask & IBV_QP_AV) && attr.ah_attr.grh.sgid_index > 1) {
    return fail("ah_attr.grh.sgid_index must be 0 or 1 (the port's GIDs)");
  }
  return c;
}

}  // namespace uroce::transport
