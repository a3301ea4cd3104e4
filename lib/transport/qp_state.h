// The QP state machine (IBTA 10.3.1, figure 124) and what each
// ibv_modify_qp transition requires and allows (IBTA table 91 for RC, UC, UD;
// the same rules the kernel's ib_modify_qp_is_ok applies).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace uroce::transport {

const char* qp_state_name(ibv_qp_state s);

struct TransitionRule {
  bool valid = false;
  int required = 0;  // IBV_QP_* bits that must be in the mask
  int optional = 0;  // bits that may be
};

// The rule for an RC QP going from `from` to `to`.
TransitionRule rc_transition(ibv_qp_state from, ibv_qp_state to);
// The same for a QP of `type` (RC, UC or UD: IBTA table 91's columns).
TransitionRule qp_transition(ibv_qp_type type, ibv_qp_state from, ibv_qp_state to);

struct ModifyLimits {
  std::uint32_t max_rd_atomic = 128;
  std::uint32_t max_dest_rd_atomic = 128;
  ibv_mtu port_mtu = IBV_MTU_4096;
};

struct ModifyCheck {
  int error = 0;              // 0 or EINVAL
  const char* why = "";       // for the user when error != 0
  ibv_qp_state next = IBV_QPS_RESET;
};

// Checks an ibv_modify_qp call on an RC QP in state `current`: the
// transition, the mask against the rule, IBV_QP_CUR_STATE, and each given
// attribute's range.
ModifyCheck check_modify(ibv_qp_type type, ibv_qp_state current, const ibv_qp_attr& attr, int mask,
                         const ModifyLimits& limits);
inline ModifyCheck check_modify(ibv_qp_state current, const ibv_qp_attr& attr, int mask, const ModifyLimits& limits) {
  return check_modify(IBV_QPT_RC, current, attr, mask, limits);
}

}  // namespace uroce::transport
