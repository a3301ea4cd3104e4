#include "transport/qp_state.h"

#include <array>

namespace uroce::transport {
namespace {

constexpr int kAllFlags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

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

namespace {

// IBTA table 91 (10.3.1, the kernel's qp_state_table): for each current
// state and next state, whether an ibv_modify_qp may make that transition,
// and the attributes it must carry and may carry, per service. Other QP
// types take RC's column.
enum Service { kRc, kUc, kUd, kServices };

struct Transition {
  bool valid = false;
  int required[kServices] = {};  // IBV_QP_* bits that must be in the mask
  int optional[kServices] = {};  // bits that may be
};

constexpr int kStates = IBV_QPS_ERR + 1;
using Table91 = std::array<std::array<Transition, kStates>, kStates>;

// The attributes of a port and its access rights (RC, UC) or Q_Key (UD).
constexpr int kInitRc = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kInitUd = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
// The path and the peer: RC adds its READ/atomic depth and RNR timer.
constexpr int kRtrUc = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
constexpr int kRtrRc = kRtrUc | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtrOptional = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
// The send side: RC adds its timers, retries and READ/atomic depth.
constexpr int kRtsRc = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
// What a modify may change into RTS (from RTR, SQD) or within it.
constexpr int kRtsUcOptional = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
constexpr int kRtsRcOptional = kRtsUcOptional | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsUdOptional = IBV_QP_CUR_STATE | IBV_QP_QKEY;
// What a drained QP may change (SQD to SQD).
constexpr int kSqdRcOptional = IBV_QP_PKEY_INDEX | IBV_QP_AV | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
                               IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | kRtsRcOptional;
constexpr int kSqdUcOptional = IBV_QP_PKEY_INDEX | IBV_QP_AV | kRtsUcOptional;

// Rows {valid, {required RC, UC, UD}, {optional RC, UC, UD}}.
constexpr Table91 kTable91 = [] {
  constexpr int kNotify = IBV_QP_EN_SQD_ASYNC_NOTIFY;
  constexpr int kUdKeys = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
  Table91 t{};
  // Any state may go to RESET or ERR, with no attribute besides the state.
  for (auto& from : t) from[IBV_QPS_RESET] = from[IBV_QPS_ERR] = Transition{true, {}, {}};
  t[IBV_QPS_RESET][IBV_QPS_INIT] = {true, {kInitRc, kInitRc, kInitUd}, {0, 0, 0}};
  t[IBV_QPS_INIT][IBV_QPS_INIT] = {true, {0, 0, 0}, {kInitRc, kInitRc, kInitUd}};
  t[IBV_QPS_INIT][IBV_QPS_RTR] = {true, {kRtrRc, kRtrUc, 0}, {kRtrOptional, kRtrOptional, kUdKeys}};
  t[IBV_QPS_RTR][IBV_QPS_RTS] = {true, {kRtsRc, IBV_QP_SQ_PSN, IBV_QP_SQ_PSN},
                                 {kRtsRcOptional, kRtsUcOptional, kRtsUdOptional}};
  t[IBV_QPS_RTS][IBV_QPS_RTS] = {true, {0, 0, 0}, {kRtsRcOptional, kRtsUcOptional, kRtsUdOptional}};
  t[IBV_QPS_RTS][IBV_QPS_SQD] = {true, {0, 0, 0}, {kNotify, kNotify, kNotify}};
  t[IBV_QPS_SQD][IBV_QPS_RTS] = {true, {0, 0, 0}, {kRtsRcOptional, kRtsUcOptional, kRtsUdOptional}};
  t[IBV_QPS_SQD][IBV_QPS_SQD] = {true, {0, 0, 0}, {kSqdRcOptional, kSqdUcOptional, kUdKeys}};
  // Out of the send queue error state (UC, UD: a WR completed in error).
  t[IBV_QPS_SQE][IBV_QPS_RTS] = {true, {0, 0, 0},
                                 {IBV_QP_CUR_STATE, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS, kRtsUdOptional}};
  return t;
}();

}  // namespace

TransitionRule qp_transition(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to) {
  if (static_cast<unsigned>(from) >= kStates || static_cast<unsigned>(to) >= kStates) return {};
  const int service = type == IBV_QPT_UC ? kUc : type == IBV_QPT_UD ? kUd : kRc;
  const Transition& t = kTable91[from][to];
  TransitionRule rule{t.valid, t.required[service], t.optional[service]};
  // XRC (IBTA annex A14, the kernel's table): RC's column but where one
  // side of the QP is missing. An initiator receives nothing, so its RTR
  // needs no responder resources or RNR timer; a target sends nothing, so
  // its RTS needs only the timeout and SQ PSN.
  constexpr int kRcOnlyRtr = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  constexpr int kRcOnlyRts = IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  if (type == IBV_QPT_XRC_SEND && from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    rule.required &= ~kRcOnlyRtr;
    rule.optional |= kRcOnlyRtr;
  } else if (type == IBV_QPT_XRC_RECV && from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    rule.required &= ~kRcOnlyRts;
    rule.optional |= kRcOnlyRts;
  }
  return rule;
}

TransitionRule rc_transition(ibv_qp_state from, ibv_qp_state to) { return qp_transition(IBV_QPT_RC, from, to); }

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
  // ON_DEMAND is a region's property, meaningless on a QP; rdma-core's ODP
  // tests pass their regions' flags here and the kernel ignores the bit.
  if ((mask & IBV_QP_ACCESS_FLAGS) && (attr.qp_access_flags & ~(kAllFlags | IBV_ACCESS_ON_DEMAND))) {
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
