// Unit tests of the transport's tables and rules: the QP state machine and
// its attribute masks, PSN arithmetic across the wrap, AETH encoding, the RNR
// timer table, and memory-region checks.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "mem/mr_table.h"
#include "support/rc_fixture.h"
#include "transport/psn.h"
#include "transport/qp_state.h"
#include "transport/rnr.h"
#include "transport/rules.h"
#include "wire/headers.h"

namespace uroce::test {
namespace {

using namespace uroce::transport;

// --- PSN ------------------------------------------------------------------------

TEST(Psn, AddWrapsAt24Bits) {
  EXPECT_EQ(psn_add(0xffffff, 1), 0u);
  EXPECT_EQ(psn_add(0xfffffe, 5), 3u);
  EXPECT_EQ(psn_add(3, -5), 0xfffffeu);
  EXPECT_EQ(psn_add(0, 0x1000000), 0u);
}

TEST(Psn, ComparisonsHoldAcrossTheWrap) {
  EXPECT_EQ(psn_diff(2, 0xfffffe), 4);
  EXPECT_EQ(psn_diff(0xfffffe, 2), -4);
  EXPECT_TRUE(psn_before(0xfffff0, 0x10));
  EXPECT_TRUE(psn_after(0x10, 0xfffff0));
  EXPECT_FALSE(psn_before(5, 5));
  // Half the space each way.
  EXPECT_EQ(psn_diff(0x7fffff, 0), 0x7fffff);
  EXPECT_EQ(psn_diff(0x800000, 0), -0x800000);
  for (std::uint32_t base : {0u, 1u, 0x7fffffu, 0xfffff0u, 0xffffffu}) {
    for (int delta : {-1000, -1, 0, 1, 1000, 0x7fffff}) {
      EXPECT_EQ(psn_diff(psn_add(base, delta), base), delta) << base << " " << delta;
    }
  }
}

// --- AETH -------------------------------------------------------------------------

TEST(Aeth, EncodingOfEveryKind) {
  EXPECT_EQ(wire::make_syndrome(wire::AethKind::kAck, 31), 0x1f);  // ACK, no credit count
  EXPECT_EQ(wire::make_syndrome(wire::AethKind::kRnrNak, 12), 0x2c);
  const std::map<wire::NakCode, std::uint8_t> naks = {
      {wire::NakCode::kPsnSequenceError, 0x60},
      {wire::NakCode::kInvalidRequest, 0x61},
      {wire::NakCode::kRemoteAccessError, 0x62},
      {wire::NakCode::kRemoteOperationalError, 0x63},
  };
  for (const auto& [code, syndrome] : naks) {
    EXPECT_EQ(wire::make_syndrome(wire::AethKind::kNak, static_cast<std::uint8_t>(code)), syndrome);
    EXPECT_EQ(wire::aeth_kind(syndrome), wire::AethKind::kNak);
    EXPECT_EQ(wire::aeth_value(syndrome), static_cast<std::uint8_t>(code));
  }
  for (std::uint8_t t = 0; t < 32; ++t) {
    const std::uint8_t s = wire::make_syndrome(wire::AethKind::kRnrNak, t);
    EXPECT_EQ(wire::aeth_kind(s), wire::AethKind::kRnrNak);
    EXPECT_EQ(wire::aeth_value(s), t);
  }
  wire::Aeth a;
  a.msn.set(0x1000001);  // MSN is 24 bits on the wire
  EXPECT_EQ(a.msn.get(), 1u);
}

// --- RNR timer and ACK timeout ---------------------------------------------------------

TEST(RnrTimer, TableMatchesIbta) {
  EXPECT_EQ(rnr_timer_ns(0), 655'360'000u);
  EXPECT_EQ(rnr_timer_ns(1), 10'000u);
  EXPECT_EQ(rnr_timer_ns(12), 640'000u);
  EXPECT_EQ(rnr_timer_ns(14), 1'280'000u);
  EXPECT_EQ(rnr_timer_ns(31), 491'520'000u);
  for (std::uint8_t c = 2; c < 32; ++c) EXPECT_GT(rnr_timer_ns(c), rnr_timer_ns(c - 1)) << int(c);
  for (std::uint8_t c = 1; c < 32; ++c) EXPECT_EQ(rnr_code_for_us(kRnrTimerUs[c]), c);
  EXPECT_EQ(rnr_code_for_us(11), 2);  // the smallest time at least 11 us is 20 us
}

TEST(AckTimeout, FourMicrosecondsTimesAPowerOfTwo) {
  EXPECT_EQ(ack_timeout_ns(0), 0u);  // infinite
  EXPECT_EQ(ack_timeout_ns(1), 8192u);
  EXPECT_EQ(ack_timeout_ns(14), 67'108'864u);
  EXPECT_EQ(ack_timeout_ns(31), 4096ull << 31);
}

// --- QP state machine --------------------------------------------------------------------

constexpr ibv_qp_state kStates[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                    IBV_QPS_SQD,   IBV_QPS_SQE,  IBV_QPS_ERR};

// IBTA 10.3.1 / table 91 for RC, written out independently of qp_state.cc.
bool legal(ibv_qp_state from, ibv_qp_state to) {
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return true;
  static const std::map<ibv_qp_state, std::vector<ibv_qp_state>> kNext = {
      {IBV_QPS_RESET, {IBV_QPS_INIT}},
      {IBV_QPS_INIT, {IBV_QPS_INIT, IBV_QPS_RTR}},
      {IBV_QPS_RTR, {IBV_QPS_RTS}},
      {IBV_QPS_RTS, {IBV_QPS_RTS, IBV_QPS_SQD}},
      {IBV_QPS_SQD, {IBV_QPS_RTS, IBV_QPS_SQD}},
      {IBV_QPS_SQE, {IBV_QPS_RTS}},
      {IBV_QPS_ERR, {}},
  };
  const auto& v = kNext.at(from);
  return std::find(v.begin(), v.end(), to) != v.end();
}

ibv_qp_attr valid_attr(ibv_qp_state to, ibv_qp_state from) {
  ibv_qp_attr a{};
  a.qp_state = to;
  a.cur_qp_state = from;
  a.port_num = 1;
  a.path_mtu = IBV_MTU_1024;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.min_rnr_timer = 12;
  a.max_rd_atomic = 4;
  a.max_dest_rd_atomic = 4;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.sgid_index = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  return a;
}

constexpr int kAllAttrBits[] = {IBV_QP_CUR_STATE, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX,
                                IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_TIMEOUT,
                                IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_MAX_QP_RD_ATOMIC,
                                IBV_QP_ALT_PATH, IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN, IBV_QP_MAX_DEST_RD_ATOMIC,
                                IBV_QP_PATH_MIG_STATE, IBV_QP_CAP, IBV_QP_DEST_QPN};

TEST(QpStateMachine, EveryTransitionIsLegalOrRejected) {
  for (ibv_qp_state from : kStates) {
    for (ibv_qp_state to : kStates) {
      const TransitionRule rule = rc_transition(from, to);
      EXPECT_EQ(rule.valid, legal(from, to)) << qp_state_name(from) << "->" << qp_state_name(to);
      const ibv_qp_attr a = valid_attr(to, from);
      const ModifyCheck c = check_modify(from, a, IBV_QP_STATE | rule.required, {});
      EXPECT_EQ(c.error, legal(from, to) ? 0 : EINVAL) << qp_state_name(from) << "->" << qp_state_name(to) << ": " << c.why;
    }
  }
}

TEST(QpStateMachine, EveryRequiredAttributeIsRequiredAndEveryOtherRefused) {
  for (ibv_qp_state from : kStates) {
    for (ibv_qp_state to : kStates) {
      const TransitionRule rule = rc_transition(from, to);
      if (!rule.valid) continue;
      const ibv_qp_attr a = valid_attr(to, from);
      for (int bit : kAllAttrBits) {
        const std::string where = std::string(qp_state_name(from)) + "->" + qp_state_name(to) + " bit 0x" +
                                  [bit] { char b[16]; std::snprintf(b, sizeof b, "%x", bit); return std::string(b); }();
        if (rule.required & bit) {
          EXPECT_EQ(check_modify(from, a, IBV_QP_STATE | (rule.required & ~bit), {}).error, EINVAL) << where << " missing";
        } else if (rule.optional & bit) {
          EXPECT_EQ(check_modify(from, a, IBV_QP_STATE | rule.required | bit, {}).error, 0) << where << " optional";
        } else {
          EXPECT_EQ(check_modify(from, a, IBV_QP_STATE | rule.required | bit, {}).error, EINVAL) << where << " not allowed";
        }
      }
    }
  }
}

// IBTA table 91 as the three switch functions (RC, UC, UD) said it before
// it became one [cur][next] table: every valid (service, cur, next) with
// its required and optional attributes, printed from the switches by a
// throwaway program. Every pair not listed is invalid.
struct Table91Row {
  ibv_qp_type type;
  ibv_qp_state from, to;
  int required, optional;
};
constexpr Table91Row kTable91Snapshot[] = {
    {IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT, 0},
    {IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT},
    {IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN | IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN,
     IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_ALT_PATH},
    {IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY},
    {IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_SQD, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER |
         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_RC, IBV_QPS_SQE, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_RC, IBV_QPS_SQE, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE},
    {IBV_QPT_RC, IBV_QPS_SQE, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_RC, IBV_QPS_ERR, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_RC, IBV_QPS_ERR, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UC, IBV_QPS_RESET, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UC, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT, 0},
    {IBV_QPT_UC, IBV_QPS_RESET, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT},
    {IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN | IBV_QP_DEST_QPN,
     IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_ALT_PATH},
    {IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_SQ_PSN,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UC, IBV_QPS_RTS, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UC, IBV_QPS_RTS, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_UC, IBV_QPS_RTS, IBV_QPS_SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY},
    {IBV_QPT_UC, IBV_QPS_RTS, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UC, IBV_QPS_SQD, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UC, IBV_QPS_SQD, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_UC, IBV_QPS_SQD, IBV_QPS_SQD, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_UC, IBV_QPS_SQD, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UC, IBV_QPS_SQE, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UC, IBV_QPS_SQE, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS},
    {IBV_QPT_UC, IBV_QPS_SQE, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UC, IBV_QPS_ERR, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UC, IBV_QPS_ERR, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0},
    {IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY},
    {IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY},
    {IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY},
    {IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY},
    {IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY},
    {IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UD, IBV_QPS_SQD, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UD, IBV_QPS_SQD, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY},
    {IBV_QPT_UD, IBV_QPS_SQD, IBV_QPS_SQD, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY},
    {IBV_QPT_UD, IBV_QPS_SQD, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY},
    {IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_UD, IBV_QPS_ERR, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UD, IBV_QPS_ERR, IBV_QPS_ERR, 0, 0},
};

TEST(QpStateMachine, Table91MatchesItsSnapshotForEveryServiceAndPair) {
  const std::string names[] = {"RC", "UC", "UD"};
  int i = 0;
  for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
    std::map<std::pair<int, int>, Table91Row> expected;
    for (const Table91Row& r : kTable91Snapshot) {
      if (r.type == type) expected[{r.from, r.to}] = r;
    }
    for (ibv_qp_state from : kStates) {
      for (ibv_qp_state to : kStates) {
        const std::string where = names[i] + " " + qp_state_name(from) + "->" + qp_state_name(to);
        const TransitionRule rule = qp_transition(type, from, to);
        const auto it = expected.find({from, to});
        if (it == expected.end()) {
          EXPECT_FALSE(rule.valid) << where;
          EXPECT_EQ(rule.required, 0) << where;
          EXPECT_EQ(rule.optional, 0) << where;
          continue;
        }
        EXPECT_TRUE(rule.valid) << where;
        EXPECT_EQ(rule.required, it->second.required) << where;
        EXPECT_EQ(rule.optional, it->second.optional) << where;
        if (type == IBV_QPT_RC) {
          const TransitionRule rc = rc_transition(from, to);
          EXPECT_TRUE(rc.valid && rc.required == rule.required && rc.optional == rule.optional) << where;
        }
        // Types without a column of their own follow RC's.
        const TransitionRule raw = qp_transition(IBV_QPT_RAW_PACKET, from, to);
        const TransitionRule rc = qp_transition(IBV_QPT_RC, from, to);
        EXPECT_TRUE(raw.valid == rc.valid && raw.required == rc.required && raw.optional == rc.optional) << where;
      }
    }
    ++i;
  }
  EXPECT_EQ(std::size(kTable91Snapshot), 3u * 23u);  // per service: 9 transitions + every state to RESET and ERR
  // A state outside the table is no transition (the table's bounds).
  EXPECT_FALSE(qp_transition(IBV_QPT_RC, IBV_QPS_UNKNOWN, IBV_QPS_RESET).valid);
  EXPECT_FALSE(qp_transition(IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_UNKNOWN).valid);
}

TEST(QpStateMachine, ModifyWithoutStateStaysAndNeedsALegalSelfTransition) {
  ibv_qp_attr a = valid_attr(IBV_QPS_RTS, IBV_QPS_RTS);
  EXPECT_EQ(check_modify(IBV_QPS_RTS, a, IBV_QP_MIN_RNR_TIMER, {}).error, 0);
  EXPECT_EQ(check_modify(IBV_QPS_RTS, a, IBV_QP_MIN_RNR_TIMER, {}).next, IBV_QPS_RTS);
  EXPECT_EQ(check_modify(IBV_QPS_RTR, a, IBV_QP_MIN_RNR_TIMER, {}).error, EINVAL);  // RTR->RTR is not a transition
  a.cur_qp_state = IBV_QPS_INIT;
  EXPECT_EQ(check_modify(IBV_QPS_RTS, a, IBV_QP_CUR_STATE, {}).error, EINVAL);  // cur_qp_state must match
}

TEST(QpStateMachine, AttributeRanges) {
  const int rtr = IBV_QP_STATE | rc_transition(IBV_QPS_INIT, IBV_QPS_RTR).required;
  const int rts = IBV_QP_STATE | rc_transition(IBV_QPS_RTR, IBV_QPS_RTS).required;
  const ModifyLimits lim{4, 4, IBV_MTU_2048};
  auto rtr_with = [&](auto change) {
    ibv_qp_attr a = valid_attr(IBV_QPS_RTR, IBV_QPS_INIT);
    change(a);
    return check_modify(IBV_QPS_INIT, a, rtr, lim).error;
  };
  auto rts_with = [&](auto change) {
    ibv_qp_attr a = valid_attr(IBV_QPS_RTS, IBV_QPS_RTR);
    change(a);
    return check_modify(IBV_QPS_RTR, a, rts, lim).error;
  };
  EXPECT_EQ(rtr_with([](ibv_qp_attr&) {}), 0);
  EXPECT_EQ(rtr_with([](ibv_qp_attr& a) { a.path_mtu = IBV_MTU_4096; }), EINVAL);  // above the port's MTU
  EXPECT_EQ(rtr_with([](ibv_qp_attr& a) { a.dest_qp_num = 0x1000000; }), EINVAL);
  EXPECT_EQ(rtr_with([](ibv_qp_attr& a) { a.rq_psn = 0x1000000; }), EINVAL);
  EXPECT_EQ(rtr_with([](ibv_qp_attr& a) { a.max_dest_rd_atomic = 5; }), EINVAL);
  EXPECT_EQ(rtr_with([](ibv_qp_attr& a) { a.min_rnr_timer = 32; }), EINVAL);
  EXPECT_EQ(rtr_with([](ibv_qp_attr& a) { a.ah_attr.is_global = 0; }), EINVAL);
  EXPECT_EQ(rts_with([](ibv_qp_attr&) {}), 0);
  EXPECT_EQ(rts_with([](ibv_qp_attr& a) { a.retry_cnt = 8; }), EINVAL);
  EXPECT_EQ(rts_with([](ibv_qp_attr& a) { a.rnr_retry = 8; }), EINVAL);
  EXPECT_EQ(rts_with([](ibv_qp_attr& a) { a.timeout = 32; }), EINVAL);
  EXPECT_EQ(rts_with([](ibv_qp_attr& a) { a.max_rd_atomic = 5; }), EINVAL);
  EXPECT_EQ(rts_with([](ibv_qp_attr& a) { a.sq_psn = 0x1000000; }), EINVAL);
  ibv_qp_attr init = valid_attr(IBV_QPS_INIT, IBV_QPS_RESET);
  const int to_init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  EXPECT_EQ(check_modify(IBV_QPS_RESET, init, to_init, lim).error, 0);
  init.port_num = 2;
  EXPECT_EQ(check_modify(IBV_QPS_RESET, init, to_init, lim).error, EINVAL);
  init.port_num = 1;
  init.qp_access_flags = 0x1000;
  EXPECT_EQ(check_modify(IBV_QPS_RESET, init, to_init, lim).error, EINVAL);
}

TEST(QpStateMachine, ThroughTheApiWithQueryAndDrain) {
  RcPair p(3, 1 << 16);
  ASSERT_EQ(p.connect_rc, 0);
  ibv_qp_attr q{};
  QpInitAttr init;
  ASSERT_EQ(p.qa->query(q, 0, &init), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(q.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(q.dest_qp_num, p.qb->qp_num());
  EXPECT_EQ(q.sq_psn, 0x100u);
  EXPECT_EQ(q.retry_cnt, 7);
  EXPECT_EQ(q.cap.max_send_wr, 1024u);
  EXPECT_EQ(init.send_cq, p.cqa);

  // RTS -> SQD: nothing new starts; SQD -> RTS resumes.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  ASSERT_EQ(p.qa->modify(a, IBV_QP_STATE), 0);
  ASSERT_EQ(p.post_recv_b(0, 64), 0);
  ASSERT_EQ(p.post_send(IBV_WR_SEND, 0, 64, 0), 0);
  p.net.run_until([] { return false; }, 1'000'000);
  ibv_wc wc;
  EXPECT_EQ(p.cqa->poll(1, &wc), 0);
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(p.qa->modify(a, IBV_QP_STATE), 0);
  EXPECT_EQ(p.wait(p.cqa, 1).size(), 1u);

  // An illegal transition leaves a message saying which and why.
  a.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(p.qa->modify(a, IBV_QP_STATE), EINVAL);
  EXPECT_NE(p.net.a->last_error().find("RTS->INIT"), std::string::npos) << p.net.a->last_error();
  // ERR, then RESET, then INIT again.
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(p.qa->modify(a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(p.qa->modify(a, IBV_QP_STATE), 0);
  EXPECT_EQ(p.qa->state(), IBV_QPS_RESET);
  EXPECT_EQ(p.post_send(IBV_WR_SEND, 0, 64, 0), EINVAL);  // not in RESET
}

// --- Memory regions -------------------------------------------------------------------------

TEST(MrTable, ChecksKeyPdBoundsAndAccess) {
  mem::MrTable t(8);
  std::vector<std::uint8_t> buf(4096);
  std::uint32_t key = 0;
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(t.add(1, buf.data(), 0x10000, 4096, rw, key), 0);
  std::uint8_t* host = nullptr;
  using R = mem::AccessResult;
  EXPECT_EQ(t.check(key, true, 1, 0x10000, 4096, IBV_ACCESS_REMOTE_WRITE, host), R::kOk);
  EXPECT_EQ(host, buf.data());
  EXPECT_EQ(t.check(key, true, 1, 0x10100, 16, IBV_ACCESS_REMOTE_WRITE, host), R::kOk);
  EXPECT_EQ(host, buf.data() + 0x100);
  EXPECT_EQ(t.check(key ^ 1, true, 1, 0x10000, 16, IBV_ACCESS_REMOTE_WRITE, host), R::kBadKey);
  EXPECT_EQ(t.check(key, true, 2, 0x10000, 16, IBV_ACCESS_REMOTE_WRITE, host), R::kBadPd);
  EXPECT_EQ(t.check(key, true, 1, 0xffff, 16, IBV_ACCESS_REMOTE_WRITE, host), R::kOutOfBounds);
  EXPECT_EQ(t.check(key, true, 1, 0x10000, 4097, IBV_ACCESS_REMOTE_WRITE, host), R::kOutOfBounds);
  EXPECT_EQ(t.check(key, true, 1, 0x10ff0, 17, IBV_ACCESS_REMOTE_WRITE, host), R::kOutOfBounds);
  EXPECT_EQ(t.check(key, true, 1, ~0ull - 4, 16, IBV_ACCESS_REMOTE_WRITE, host), R::kOutOfBounds);  // wraps
  EXPECT_EQ(t.check(key, true, 1, 0x10000, 16, IBV_ACCESS_REMOTE_READ, host), R::kNoAccess);
  EXPECT_EQ(t.check(key, true, 1, 0x10000, 16, IBV_ACCESS_REMOTE_ATOMIC, host), R::kNoAccess);
}

TEST(MrTable, RegistrationRulesAndStaleKeys) {
  mem::MrTable t(2);
  std::vector<std::uint8_t> buf(64);
  std::uint32_t k1 = 0;
  std::uint32_t k2 = 0;
  EXPECT_EQ(t.add(1, buf.data(), 0, 0, IBV_ACCESS_LOCAL_WRITE, k1), EINVAL);                 // zero length
  EXPECT_EQ(t.add(1, buf.data(), 0, 64, IBV_ACCESS_REMOTE_WRITE, k1), EINVAL);               // needs LOCAL_WRITE
  EXPECT_EQ(t.add(1, buf.data(), 0, 64, IBV_ACCESS_REMOTE_ATOMIC, k1), EINVAL);              // needs LOCAL_WRITE
  EXPECT_EQ(t.add(1, buf.data(), 0, 64, IBV_ACCESS_REMOTE_READ, k1), 0);
  EXPECT_EQ(t.add(1, buf.data(), 0, 64, IBV_ACCESS_REMOTE_READ, k2), 0);
  std::uint32_t k3 = 0;
  EXPECT_EQ(t.add(1, buf.data(), 0, 64, IBV_ACCESS_REMOTE_READ, k3), ENOMEM);  // table full
  EXPECT_EQ(t.regions_in_pd(1), 2u);
  ASSERT_EQ(t.remove(k1), 0);
  EXPECT_EQ(t.remove(k1), EINVAL);
  ASSERT_EQ(t.add(1, buf.data(), 0, 64, IBV_ACCESS_REMOTE_READ, k3), 0);
  EXPECT_NE(k3, k1) << "a reused slot gets a new key";
  std::uint8_t* host = nullptr;
  EXPECT_EQ(t.check(k1, true, 1, 0, 8, IBV_ACCESS_REMOTE_READ, host), mem::AccessResult::kBadKey);
  EXPECT_EQ(t.check(k3, true, 1, 0, 8, IBV_ACCESS_REMOTE_READ, host), mem::AccessResult::kOk);
}

// A reg_mr region may not be invalidated by a peer (review D7): only keys
// made to be invalidated may (memory windows, fast registration).
TEST(MrTable, OrdinaryRegionsRefuseRemoteInvalidation) {
  mem::MrTable t(4);
  std::vector<std::uint8_t> buf(64);
  std::uint32_t k = 0;
  ASSERT_EQ(t.add(3, buf.data(), 0, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, k), 0);
  EXPECT_EQ(t.invalidate(k, 4), mem::AccessResult::kBadPd);
  EXPECT_EQ(t.invalidate(k ^ 0x100, 3), mem::AccessResult::kBadKey);
  const std::uint64_t epoch = t.epoch();
  EXPECT_EQ(t.invalidate(k, 3), mem::AccessResult::kNoAccess);
  EXPECT_EQ(t.epoch(), epoch) << "nothing stopped working";
  std::uint8_t* host = nullptr;
  EXPECT_EQ(t.check(k, true, 3, 0, 8, IBV_ACCESS_REMOTE_WRITE, host), mem::AccessResult::kOk);
}

// Keys come back as late as the key space allows (review D8): slots are taken
// round the table, and a slot's key changes with each registration in it.
TEST(MrTable, KeysDoNotRepeatForManyRegistrations) {
  mem::MrTable t(65536);
  std::vector<std::uint8_t> buf(64);
  std::set<std::uint32_t> seen;
  std::uint32_t held = 0;
  ASSERT_EQ(t.add(1, buf.data(), 0, 64, 0, held), 0);  // one region stays registered throughout
  for (int i = 0; i < 300'000; ++i) {
    std::uint32_t k = 0;
    ASSERT_EQ(t.add(1, buf.data(), 0, 64, 0, k), 0);
    ASSERT_NE(k, 0u);
    ASSERT_TRUE(seen.insert(k).second) << "key 0x" << std::hex << k << " came back after " << std::dec << i;
    ASSERT_EQ(t.remove(k), 0);
  }
  // A slot that is reused at once (the table nearly full) still gets a new key
  // each time for 2^15 registrations.
  mem::MrTable small(2);
  std::uint32_t a = 0;
  ASSERT_EQ(small.add(1, buf.data(), 0, 64, 0, a), 0);
  std::set<std::uint32_t> keys;
  for (int i = 0; i < 1000; ++i) {
    std::uint32_t k = 0;
    ASSERT_EQ(small.add(1, buf.data(), 0, 64, 0, k), 0);
    ASSERT_TRUE(keys.insert(k).second);
    ASSERT_EQ(small.remove(k), 0);
  }
  // A removed key no longer resolves, whatever reuses its slot.
  std::uint8_t* host = nullptr;
  EXPECT_EQ(t.check(*seen.begin(), false, 1, 0, 8, 0, host), mem::AccessResult::kBadKey);
  EXPECT_EQ(t.check(held, false, 1, 0, 8, 0, host), mem::AccessResult::kOk);
}

}  // namespace
}  // namespace uroce::test
