// One case per exit row of lib/transport/rules.h: for every row of
// kResponderExits and kCompleterExits a scripted peer provokes that exit on a
// live QP, and the case checks what the row promises: its counter (read by
// name) went up by one and no other exit's counter moved, the answer on the
// wire (NAK syndrome and PSN, RNR NAK, sequence NAK, or nothing), how the
// work request in use ended (the row's status, or no completion but flushes)
// and whether the QP went to ERR. `provoke` switches over the exit enum with
// no default: a new row does not build until it has a scenario here. The
// tables' own check (TransportRules) is here too; the cases that push one
// rule further are in completer_rules_test.cc and responder_rules_test.cc.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "support/exit_rig.h"
#include "transport/rules.h"
#include "verbs/verbs_impl.h"

namespace uroce::transport {
// gtest prints a failing case's parameter with these (a uint8_t enum would
// come out as a byte dump).
void PrintTo(ResponderExit e, std::ostream* os) { *os << "responder." << rule_of(e).name; }
void PrintTo(CompleterExit e, std::ostream* os) { *os << "completer." << rule_of(e).name; }
}  // namespace uroce::transport

namespace uroce::test {
namespace {

using transport::Answer;
using transport::CompleterExit;
using transport::CompleterRule;
using transport::ExitRule;
using transport::kNoCompletion;
using transport::QpCounter;
using transport::ResponderExit;
using wire::NakCode;
using wire::Opcode;

// Every counter some exit row names: an exit moves its own and none of the others.
std::set<QpCounter> exit_counters() {
  std::set<QpCounter> s;
  for (const ExitRule& e : transport::kResponderExits) s.insert(e.counter);
  for (const CompleterRule& e : transport::kCompleterExits) s.insert(e.counter);
  return s;
}

// What a scenario learns by running: the PSN the answer names, the work
// request the exit ends, and how many frames sent after the mark answer the
// scenario's own earlier requests rather than the exit.
struct Provoked {
  std::uint32_t psn = 0;
  std::uint64_t wr_id = kInUse;
  std::size_t setup_frames = 0;
};

// --- Responder: the scenarios -------------------------------------------------------------

// Our QP is the responder; the peer's requests start at kRqPsn.
Provoked provoke(ExitRig& rig, ResponderExit e) {
  constexpr std::uint32_t p = kRqPsn;
  switch (e) {
    case ResponderExit::not_receiving: {
      rig.connect();
      rig.post_receives();
      rig.enter_error();  // flushes both receives (before the mark)
      rig.mark();
      rig.send_only(p);
      return {};
    }
    case ResponderExit::xrc_bad_srq: {
      // An XRC SEND naming an SRQ number the target QP's domain does not have.
      ScriptedRc& r = rig.connect();
      SharedReceiveQueue* srq = rig.make_xrc_target();
      rig.mark();
      wire::FrameSpec f = r.spec(static_cast<Opcode>(0xa4), p);  // XRC_SEND_ONLY
      f.bth.set_ack_req(true);
      f.xrceth.srqn.set(srq->srq_num() ^ 0x100);
      r.inject(f, std::vector<std::uint8_t>(64, 0x5e));
      return {p};
    }
    case ResponderExit::psn_ahead: {
      ScriptedRc& r = rig.connect();
      rig.post_receives();
      rig.mark();
      r.inject(rig.request(Opcode::kRcWriteOnly, p + 5, rig.va(), rig.mr->rkey, 64), std::vector<std::uint8_t>(64, 1));
      return {p};  // the NAK names the PSN expected
    }
    case ResponderExit::sr_out_of_window: {
      // Selective repeat: a WRITE further ahead than the receive window.
      ConnectParams params;
      params.transport.selective_repeat = true;
      ScriptedRc& r = rig.connect(params);
      rig.mark();
      r.inject(rig.sr_write_only(p + 200, rig.va(), 64), std::vector<std::uint8_t>(64, 1));
      return {};
    }
    case ResponderExit::sr_ahead_deferred: {
      // A READ ahead of the expected PSN waits to come in order.
      ConnectParams params;
      params.transport.selective_repeat = true;
      ScriptedRc& r = rig.connect(params);
      rig.mark();
      wire::FrameSpec f = rig.read(p + 1);
      f.bth.opcode = 0xcc;  // SR_RDMA_READ_REQUEST
      f.sreth.length.set(8);
      f.sreth.flags = wire::kSrethLast;
      f.sreth.first_psn.set(p + 1);
      r.inject(f);
      return {};
    }
    case ResponderExit::sr_bad_header: {
      // The expected PSN, a WRITE Only whose SRETH puts it 4 KiB into its message.
      ConnectParams params;
      params.transport.selective_repeat = true;
      ScriptedRc& r = rig.connect(params);
      rig.mark();
      wire::FrameSpec f = rig.sr_write_only(p, rig.va(), 64);
      f.sreth.offset.set(4096);
      r.inject(f, std::vector<std::uint8_t>(64, 1));
      return {p};
    }
    case ResponderExit::no_receive: {
      rig.connect();
      rig.mark();
      rig.send_only(p);
      return {p};
    }
    case ResponderExit::duplicate_read_unknown: {
      ConnectParams params;
      params.max_rd_atomic = 1;
      ScriptedRc& r = rig.connect(params);
      r.inject(rig.read(p));
      r.inject(rig.read(p + 1));  // takes the only resource
      r.run(2);
      rig.mark();
      r.inject(rig.read(p));
      return {};
    }
    case ResponderExit::duplicate_atomic_unknown: {
      ConnectParams params;
      params.max_rd_atomic = 1;
      ScriptedRc& r = rig.connect(params);
      r.inject(rig.fetch_add(p, rig.va()));
      r.inject(rig.fetch_add(p + 1, rig.va()));  // its result replaces the first one's
      r.run(2);
      rig.mark();
      r.inject(rig.fetch_add(p, rig.va()));
      return {};
    }
    case ResponderExit::duplicate_no_room: {
      // A duplicate READ drops the queued answers from its PSN on, the rest
      // of its own answer included, so only answers still owed before it
      // can leave it no room: a queue full of those is made by hand (RNR
      // NAKs for the PSN before the READ), as no requester can make one.
      ConnectParams params;
      params.max_rd_atomic = 1;
      ScriptedRc& r = rig.connect(params);
      r.inject(rig.read(p));
      r.run(2);
      transport::Qp& t = testing::transport_qp(r.dev.qp);
      std::size_t owed = 0;
      for (; t.resp.out_tail - t.resp.out_head < t.resp.out.limit(); ++owed) {
        transport::Response& a = t.resp.out[t.resp.out_tail++];
        a = transport::Response{};
        a.psn = p - 1;
        a.syndrome = wire::make_syndrome(wire::AethKind::kRnrNak, 1);
      }
      rig.mark();
      r.inject(rig.read(p));
      return {0, kInUse, owed};  // the answers owed before it
    }
    case ResponderExit::op_sequence: {
      ScriptedRc& r = rig.connect();
      rig.post_receives();
      rig.mark();
      r.inject(r.spec(Opcode::kRcWriteMiddle, p), std::vector<std::uint8_t>(1024, 2));  // no WRITE in progress
      return {p};
    }
    case ResponderExit::op_not_allowed: {
      ConnectParams params;
      params.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
      ScriptedRc& r = rig.connect(params);
      rig.post_receives();
      rig.mark();
      r.inject(rig.request(Opcode::kRcWriteOnly, p, rig.va(), rig.mr->rkey, 64), std::vector<std::uint8_t>(64, 3));
      return {p};
    }
    case ResponderExit::unsupported_opcode: {
      ScriptedRc& r = rig.connect();
      rig.post_receives();
      rig.mark();
      r.inject(rig.request(Opcode::kRcFlush, p, rig.va(), rig.mr->rkey, 64));
      return {p};
    }
    case ResponderExit::no_resources: {
      ConnectParams params;
      params.max_rd_atomic = 0;
      ScriptedRc& r = rig.connect(params);
      rig.post_receives();
      rig.mark();
      r.inject(rig.read(p));
      return {p};
    }
    case ResponderExit::too_many_reads: {
      // Eleven READs in one receive burst against one resource: the answer
      // queue (2 * 1 + 8) holds ten, the eleventh is refused, with the queue
      // full. Its NAK leaves all the same; the ten READs' answers do not
      // (nothing owed leaves after a fatal NAK).
      ConnectParams params;
      params.max_rd_atomic = 1;
      ScriptedRc& r = rig.connect(params);
      rig.post_receives();
      rig.mark();
      for (std::uint32_t i = 0; i <= 10; ++i) r.inject(rig.read(p + i));
      return {p + 10};
    }
    case ResponderExit::bad_length: {
      ScriptedRc& r = rig.connect();  // path MTU 1024
      rig.post_receives();
      rig.mark();
      r.inject(rig.request(Opcode::kRcWriteOnly, p, rig.va(), rig.mr->rkey, 2048), std::vector<std::uint8_t>(2048, 4));
      return {p};
    }
    case ResponderExit::write_length_mismatch: {
      ScriptedRc& r = rig.connect();
      rig.post_receives();
      rig.mark();
      r.inject(rig.request(Opcode::kRcWriteOnly, p, rig.va(), rig.mr->rkey, 128), std::vector<std::uint8_t>(64, 5));
      return {p};
    }
    case ResponderExit::recv_too_short: {
      rig.connect();
      rig.post_receives(64);
      rig.mark();
      rig.send_only(p, 128);
      return {p};
    }
    case ResponderExit::recv_bad_lkey: {
      rig.connect();
      rig.post_receives(64, rig.mr->lkey ^ 0x100);
      rig.mark();
      rig.send_only(p);
      return {p};
    }
    case ResponderExit::recv_revoked: {
      ScriptedRc& r = rig.connect();
      Doomed d(rig, IBV_ACCESS_LOCAL_WRITE);
      rig.post_receives(4096, d.mr->lkey, d.bytes.data());  // kInUse in the doomed region
      r.inject(r.spec(Opcode::kRcSendFirst, p), std::vector<std::uint8_t>(1024, 6));
      r.run(2);
      d.dereg();
      rig.mark();
      wire::FrameSpec last = r.spec(Opcode::kRcSendLast, p + 1);
      last.bth.set_ack_req(true);
      r.inject(last, std::vector<std::uint8_t>(64, 6));
      return {p + 1};
    }
    case ResponderExit::invalidate_refused: {
      ScriptedRc& r = rig.connect();
      rig.post_receives();
      rig.mark();
      wire::FrameSpec inv = r.spec(Opcode::kRcSendOnlyInv, p);
      inv.ieth.rkey.set(rig.mr->rkey);  // a reg_mr region's key: verbs cannot re-validate it
      inv.bth.set_ack_req(true);
      r.inject(inv, std::vector<std::uint8_t>(16, 7));
      return {p};
    }
    case ResponderExit::rkey_violation: {
      ScriptedRc& r = rig.connect();
      rig.post_receives();
      rig.mark();
      r.inject(rig.request(Opcode::kRcWriteOnly, p, rig.va(), rig.mr->rkey ^ 0x100, 64),
               std::vector<std::uint8_t>(64, 8));
      return {p};
    }
    case ResponderExit::window_violation: {
      // A memory window never bound: its rkey grants nothing (IBTA 10.6.7).
      ScriptedRc& r = rig.connect();
      rig.post_receives();
      MemoryWindow* mw = rig.mr->pd->alloc_mw(IBV_MW_TYPE_2);
      EXPECT_NE(mw, nullptr);
      rig.mark();
      r.inject(rig.request(Opcode::kRcWriteOnly, p, rig.va(), mw != nullptr ? mw->rkey() : 0, 64),
               std::vector<std::uint8_t>(64, 8));
      return {p};
    }
    case ResponderExit::write_revoked: {
      ScriptedRc& r = rig.connect();
      Doomed d(rig, kAll);
      rig.post_receives();
      wire::FrameSpec first =
          rig.request(Opcode::kRcWriteFirst, p, reinterpret_cast<std::uint64_t>(d.bytes.data()), d.mr->rkey, 3072);
      first.bth.set_ack_req(false);
      r.inject(first, std::vector<std::uint8_t>(1024, 9));
      r.run(2);
      d.dereg();
      rig.mark();
      r.inject(r.spec(Opcode::kRcWriteMiddle, p + 1), std::vector<std::uint8_t>(1024, 9));
      return {p + 1};
    }
    case ResponderExit::read_revoked: {
      // 64 responses; one poll sends a burst of them, then the region goes.
      ScriptedRc& r = rig.connect();
      Doomed d(rig, kAll);
      rig.post_receives();
      r.inject(rig.request(Opcode::kRcReadRequest, p, reinterpret_cast<std::uint64_t>(d.bytes.data()), d.mr->rkey,
                           kRegion));
      r.run(1);
      const std::size_t sent = r.dev.port.sent.size();
      EXPECT_GT(sent, 0u);
      EXPECT_LT(sent, kRegion / 1024) << "the READ must still be under way";
      d.dereg();
      rig.mark();
      return {p + static_cast<std::uint32_t>(sent)};  // the NAK takes the next response's PSN
    }
    case ResponderExit::misaligned_atomic: {
      ScriptedRc& r = rig.connect();
      rig.post_receives();
      rig.mark();
      r.inject(rig.fetch_add(p, rig.va(4)));
      return {p};
    }
    case ResponderExit::odp_unmapped: {
      ScriptedRc& r = rig.connect();
      Unmapped u(rig, kAll);
      rig.post_receives();
      rig.mark();
      r.inject(rig.request(Opcode::kRcWriteOnly, p, reinterpret_cast<std::uint64_t>(u.hole()), u.mr->rkey, 64),
               std::vector<std::uint8_t>(64, 8));
      return {p};
    }
    case ResponderExit::recv_unmapped: {
      rig.connect();
      Unmapped u(rig, IBV_ACCESS_LOCAL_WRITE);
      rig.post_receives(64, u.mr->lkey, u.hole());
      rig.mark();
      rig.send_only(p);
      return {p};
    }
    case ResponderExit::kCount: break;
  }
  ADD_FAILURE() << "not an exit";
  return {};
}

// The syndrome of an answer (IBTA 9.7.5.2, table 44), written out here
// rather than taken from the responder.
std::uint8_t syndrome_of(Answer a, std::uint8_t min_rnr_timer) {
  switch (a) {
    case Answer::kNothing: break;
    case Answer::kSequenceNak: return nak(NakCode::kPsnSequenceError);
    case Answer::kRnrNak: return wire::make_syndrome(wire::AethKind::kRnrNak, min_rnr_timer);
    case Answer::kInvalidRequest: return nak(NakCode::kInvalidRequest);
    case Answer::kRemoteAccess: return nak(NakCode::kRemoteAccessError);
    case Answer::kRemoteOperational: return nak(NakCode::kRemoteOperationalError);
  }
  return 0;
}

bool fatal(Answer a) {
  return a == Answer::kInvalidRequest || a == Answer::kRemoteAccess || a == Answer::kRemoteOperational;
}

// The counter, the others, the completions and the QP's state, for either role.
void expect_counted_and_completed(const ExitRig& rig, QpCounter counter, ibv_wc_status status, bool to_error,
                                  const Provoked& got) {
  const char* name = transport::qp_counter_name(counter);
  EXPECT_EQ(rig.delta(counter), 1u) << name;
  for (const QpCounter other : exit_counters()) {
    if (other != counter) {
      EXPECT_EQ(rig.delta(other), 0u) << transport::qp_counter_name(other) << " moved too";
    }
  }
  std::vector<ibv_wc> ended;  // completions other than flushes
  for (const ibv_wc& wc : rig.completions) {
    if (wc.status != IBV_WC_WR_FLUSH_ERR) ended.push_back(wc);
  }
  if (status == kNoCompletion) {
    EXPECT_TRUE(ended.empty()) << "the exit ends no work request; one ended with " << wc_status_str(ended[0].status);
    EXPECT_EQ(rig.delta(QpCounter::completion_errors), 0u);
  } else {
    ASSERT_EQ(ended.size(), 1u) << "the exit ends one work request";
    EXPECT_EQ(rig.completions.front().wr_id, got.wr_id) << "the oldest one, first";
    EXPECT_EQ(ended[0].wr_id, got.wr_id);
    EXPECT_EQ(ended[0].status, status) << wc_status_str(ended[0].status) << ", not " << wc_status_str(status);
    EXPECT_EQ(rig.delta(QpCounter::completion_errors), 1u);
  }
  EXPECT_EQ(rig.qp()->state(), to_error ? IBV_QPS_ERR : rig.state_at_mark);
}

// Checks what the responder's row `rule` promises after `got` was provoked.
void expect_responder_exit(const ExitRig& rig, const ExitRule& rule, const Provoked& got) {
  expect_counted_and_completed(rig, rule.counter, rule.status, fatal(rule.answer), got);
  std::vector<wire::ParsedFrame> sent = rig.rc->sent();
  ASSERT_GE(sent.size(), got.setup_frames);
  sent.erase(sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(got.setup_frames));
  // A fatal NAK is counted under its code once it is queued, and only then.
  const auto naks_counted = [&](Answer a) {
    switch (a) {
      case Answer::kInvalidRequest: return rig.delta(QpCounter::nak_inv_req_sent);
      case Answer::kRemoteAccess: return rig.delta(QpCounter::nak_rem_access_sent);
      case Answer::kRemoteOperational: return rig.delta(QpCounter::nak_rem_op_sent);
      default: return std::uint64_t{0};
    }
  };
  for (const Answer a : {Answer::kInvalidRequest, Answer::kRemoteAccess, Answer::kRemoteOperational}) {
    EXPECT_EQ(naks_counted(a), a == rule.answer ? 1u : 0u) << "NAKs sent of code " << int{syndrome_of(a, 0)};
  }
  EXPECT_EQ(rig.delta(QpCounter::drop_answer_ring_full), 0u) << "an answer was lost";
  if (rule.answer == Answer::kNothing) {
    EXPECT_TRUE(sent.empty()) << "nothing goes back; sent " << wire::opcode_name(sent[0].opcode);
    return;
  }
  ASSERT_EQ(sent.size(), 1u) << "one answer and nothing else";
  const Opcode ack = rig.xrcd != nullptr                           ? Opcode::kXrcAcknowledge
                    : rig.params.transport.selective_repeat ? Opcode::kSrAcknowledge
                                                            : Opcode::kRcAcknowledge;
  EXPECT_EQ(sent[0].opcode, static_cast<std::uint8_t>(ack)) << wire::opcode_name(sent[0].opcode);
  EXPECT_EQ(int{sent[0].aeth().syndrome}, int{syndrome_of(rule.answer, rig.params.min_rnr_timer)}) << "syndrome";
  EXPECT_EQ(sent[0].bth().psn.get(), got.psn);
}

class ResponderExits : public ::testing::TestWithParam<ResponderExit> {};

TEST_P(ResponderExits, ProvokedAndAnsweredAsItsRowSays) {
  ExitRig rig;
  const Provoked got = provoke(rig, GetParam());
  rig.settle();
  expect_responder_exit(rig, transport::rule_of(GetParam()), got);
}

std::vector<ResponderExit> all_responder_exits() {
  std::vector<ResponderExit> v;
  for (std::size_t i = 0; i < std::size(transport::kResponderExits); ++i) v.push_back(static_cast<ResponderExit>(i));
  return v;
}
static_assert(std::size(transport::kResponderExits) == static_cast<std::size_t>(ResponderExit::kCount));

INSTANTIATE_TEST_SUITE_P(Rows, ResponderExits, ::testing::ValuesIn(all_responder_exits()),
                         [](const auto& row) { return std::string(transport::rule_of(row.param).name); });

// --- Completer: the scenarios ---------------------------------------------------------------

// Our QP is the requester; its requests start at kSqPsn and the peer answers.
Provoked provoke(ExitRig& rig, CompleterExit e) {
  constexpr std::uint32_t s = kSqPsn;
  const auto nak_for = [&](NakCode code) {
    ScriptedRc& r = rig.connect();
    rig.post_sends(IBV_WR_RDMA_WRITE);
    rig.mark();
    r.inject(r.ack(s, nak(code)));
    return Provoked{};
  };
  switch (e) {
    case CompleterExit::not_active: {
      ScriptedRc& r = rig.connect();
      rig.post_sends(IBV_WR_RDMA_WRITE);
      rig.enter_error();  // flushes both (before the mark)
      rig.mark();
      r.inject(r.ack(s));
      return {};
    }
    case CompleterExit::not_sent: {
      ScriptedRc& r = rig.connect();  // nothing sent
      rig.mark();
      r.inject(r.ack(s));
      return {};
    }
    case CompleterExit::stale: {
      ScriptedRc& r = rig.connect();
      rig.post_sends(IBV_WR_RDMA_WRITE);
      r.inject(r.ack(s));  // kInUse done, kNext outstanding
      r.run(2);
      rig.mark();
      r.inject(r.ack(s - 1));
      return {};
    }
    case CompleterExit::unmatched: {
      ScriptedRc& r = rig.connect();
      rig.post_sends(IBV_WR_RDMA_WRITE);
      rig.mark();
      r.inject(r.spec(Opcode::kRcReadResponseOnly, s), std::vector<std::uint8_t>(64, 1));  // a WRITE waits
      return {};
    }
    case CompleterExit::reserved_syndrome: {
      ScriptedRc& r = rig.connect();
      rig.post_sends(IBV_WR_RDMA_WRITE);
      rig.mark();
      r.inject(r.ack(s, wire::make_syndrome(wire::AethKind::kReserved, 0x1f)));
      return {};
    }
    case CompleterExit::bad_read_response: {
      ScriptedRc& r = rig.connect();
      rig.post_sends(IBV_WR_RDMA_READ, 2048);  // kInUse: PSNs s and s + 1
      rig.mark();
      r.inject(r.spec(Opcode::kRcReadResponseOnly, s), std::vector<std::uint8_t>(1024, 2));  // Only, at a First's place
      return {};
    }
    case CompleterExit::retry_exceeded: {
      ConnectParams params;
      params.retry_cnt = 0;
      ScriptedRc& r = rig.connect(params);
      rig.post_sends(IBV_WR_RDMA_WRITE);
      rig.mark();
      r.inject(r.ack(s, nak(NakCode::kPsnSequenceError)));
      return {};
    }
    case CompleterExit::rnr_retry_exceeded: {
      ConnectParams params;
      params.rnr_retry = 0;
      ScriptedRc& r = rig.connect(params);
      rig.post_sends(IBV_WR_SEND);
      rig.mark();
      r.inject(r.ack(s, wire::make_syndrome(wire::AethKind::kRnrNak, 1)));
      return {};
    }
    case CompleterExit::nak_invalid_request: return nak_for(NakCode::kInvalidRequest);
    case CompleterExit::nak_remote_access: return nak_for(NakCode::kRemoteAccessError);
    case CompleterExit::nak_remote_operational: return nak_for(NakCode::kRemoteOperationalError);
    case CompleterExit::nak_other: return nak_for(NakCode::kInvalidRdRequest);
    case CompleterExit::local_revoked: {
      ScriptedRc& r = rig.connect();
      Doomed d(rig, IBV_ACCESS_LOCAL_WRITE);
      rig.post_sends(IBV_WR_RDMA_READ, 64, d.mr);  // kInUse reads into the doomed region
      d.dereg();
      rig.mark();
      r.inject(r.spec(Opcode::kRcReadResponseOnly, s), std::vector<std::uint8_t>(64, 3));
      return {};
    }
    case CompleterExit::local_unmapped: {
      ScriptedRc& r = rig.connect();
      Unmapped u(rig, IBV_ACCESS_LOCAL_WRITE);
      MemoryRegion hole = u.at_hole();
      rig.post_sends(IBV_WR_RDMA_READ, 64, &hole);  // kInUse reads into the unmapped page
      rig.mark();
      r.inject(r.spec(Opcode::kRcReadResponseOnly, s), std::vector<std::uint8_t>(64, 3));
      return {};
    }
    case CompleterExit::kCount: break;
  }
  ADD_FAILURE() << "not an exit";
  return {};
}

// Checks what the completer's row `rule` promises: the completer answers
// nothing, whatever the exit.
void expect_completer_exit(const ExitRig& rig, const CompleterRule& rule, const Provoked& got) {
  expect_counted_and_completed(rig, rule.counter, rule.status, rule.status != kNoCompletion, got);
  const std::vector<wire::ParsedFrame> sent = rig.rc->sent();
  EXPECT_TRUE(sent.empty()) << "the completer answers nothing; sent " << wire::opcode_name(sent[0].opcode);
}

class CompleterExits : public ::testing::TestWithParam<CompleterExit> {};

TEST_P(CompleterExits, ProvokedAndEndedAsItsRowSays) {
  ExitRig rig;
  const Provoked got = provoke(rig, GetParam());
  rig.settle();
  expect_completer_exit(rig, transport::rule_of(GetParam()), got);
}

std::vector<CompleterExit> all_completer_exits() {
  std::vector<CompleterExit> v;
  for (std::size_t i = 0; i < std::size(transport::kCompleterExits); ++i) v.push_back(static_cast<CompleterExit>(i));
  return v;
}
static_assert(std::size(transport::kCompleterExits) == static_cast<std::size_t>(CompleterExit::kCount));

INSTANTIATE_TEST_SUITE_P(Rows, CompleterExits, ::testing::ValuesIn(all_completer_exits()),
                         [](const auto& row) { return std::string(transport::rule_of(row.param).name); });


// --- Steps that count without leaving ---------------------------------------------------------

// A READ response past the next one due (9.7.5.1.2): those between were
// lost, an implicit NAK sends the READ again from its first PSN.
TEST(TransportSteps, AReadResponseAheadOfTheNextDueIsOutOfSequence) {
  ExitRig rig;
  ScriptedRc& r = rig.connect();
  ASSERT_EQ(rig.post_send(IBV_WR_RDMA_READ, 2048, kInUse), 0);
  r.run(2);
  rig.mark();
  r.inject(r.spec(Opcode::kRcReadResponseLast, kSqPsn + 1), std::vector<std::uint8_t>(1024, 1));
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::out_of_sequence_responses), 1u);
  EXPECT_EQ(rig.delta(QpCounter::implicit_naks), 1u);
  EXPECT_EQ(rig.delta(QpCounter::rx_bytes), 0u) << "nothing placed";
  EXPECT_TRUE(rig.completions.empty());
  const auto sent = r.sent();
  ASSERT_EQ(sent.size(), 1u) << "the READ again";
  EXPECT_EQ(sent[0].opcode, static_cast<std::uint8_t>(Opcode::kRcReadRequest));
  EXPECT_EQ(sent[0].bth().psn.get(), kSqPsn);
}

// An ACK for a WRITE behind a READ (9.7.5.1.6): the READ's responses were
// lost; both go again, no response was out of sequence.
TEST(TransportSteps, AnAckBeyondAReadIsAnImplicitNak) {
  ExitRig rig;
  ScriptedRc& r = rig.connect();
  ASSERT_EQ(rig.post_send(IBV_WR_RDMA_READ, 8, kInUse), 0);
  ASSERT_EQ(rig.post_send(IBV_WR_RDMA_WRITE, 64, kNext), 0);
  r.run(2);
  ASSERT_EQ(r.dev.port.sent.size(), 2u);
  rig.mark();
  r.inject(r.ack(kSqPsn + 1));
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::implicit_naks), 1u);
  EXPECT_EQ(rig.delta(QpCounter::out_of_sequence_responses), 0u);
  EXPECT_TRUE(rig.completions.empty()) << "the WRITE completes after the READ, not before";
  const auto sent = r.sent();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].opcode, static_cast<std::uint8_t>(Opcode::kRcReadRequest));
  EXPECT_EQ(sent[0].bth().psn.get(), kSqPsn);
  EXPECT_EQ(sent[1].bth().psn.get(), kSqPsn + 1);
}

// An atomic executes once (9.7.5.1.3): its duplicate is answered from the
// saved result and counted as replayed, not executed.
TEST(TransportSteps, AnAtomicIsExecutedOnceAndReplayedOnce) {
  ExitRig rig;
  ScriptedRc& r = rig.connect();
  const std::uint64_t five = 5;
  std::memcpy(rig.region.data(), &five, sizeof five);
  rig.mark();
  r.inject(rig.fetch_add(kRqPsn, rig.va()));
  r.run(2);
  r.inject(rig.fetch_add(kRqPsn, rig.va()));
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::atomics_executed), 1u);
  EXPECT_EQ(rig.delta(QpCounter::atomics_replayed), 1u);
  std::uint64_t now = 0;
  std::memcpy(&now, rig.region.data(), sizeof now);
  EXPECT_EQ(now, 6u);
  const auto sent = r.sent();
  ASSERT_EQ(sent.size(), 2u);
  for (const auto& f : sent) {
    EXPECT_EQ(f.opcode, static_cast<std::uint8_t>(Opcode::kRcAtomicAcknowledge));
    EXPECT_EQ(f.atomic_ack_eth().orig_data.get(), 5u);
  }
}

// too_many_reads refuses an atomic as it refuses a READ (9.7.5.2.4): with
// the answer queue full of ten READs' answers (one resource), the eleventh
// request is NAKed Invalid Request and not executed; the NAK's MSN counts
// the ten READs only.
TEST(TransportSteps, AReadOrAtomicBeyondTheResourcesIsNakedNotExecuted) {
  for (const bool atomic : {false, true}) {
    SCOPED_TRACE(atomic ? "atomic" : "READ");
    ExitRig rig;
    ConnectParams params;
    params.max_rd_atomic = 1;
    ScriptedRc& r = rig.connect(params);
    const std::uint64_t five = 5;
    std::memcpy(rig.region.data() + 64, &five, sizeof five);
    rig.mark();
    for (std::uint32_t i = 0; i < 10; ++i) r.inject(rig.read(kRqPsn + i));
    r.inject(atomic ? rig.fetch_add(kRqPsn + 10, rig.va(64)) : rig.read(kRqPsn + 10, 64));
    rig.settle();
    EXPECT_EQ(rig.delta(QpCounter::drop_no_resources), 1u);
    EXPECT_EQ(rig.delta(QpCounter::nak_inv_req_sent), 1u);
    EXPECT_EQ(rig.delta(QpCounter::atomics_executed), 0u);
    std::uint64_t now = 0;
    std::memcpy(&now, rig.region.data() + 64, sizeof now);
    EXPECT_EQ(now, 5u) << "the refused atomic executed";
    EXPECT_EQ(rig.qp()->state(), IBV_QPS_ERR);
    const auto sent = r.sent();
    ASSERT_EQ(sent.size(), 1u) << "the NAK alone (nothing owed leaves after it)";
    EXPECT_EQ(int{sent[0].aeth().syndrome}, int{nak(NakCode::kInvalidRequest)});
    EXPECT_EQ(sent[0].bth().psn.get(), kRqPsn + 10);
    EXPECT_EQ(sent[0].aeth().msn.get(), 10u);
  }
}

// A sequence NAK (9.7.5.1.1) that finds the answer queue full is not sent,
// so it is neither counted nor the one NAK owed until the expected PSN
// arrives: once the answers have left, the next packet ahead gets it.
TEST(TransportSteps, ASequenceNakThatFoundNoRoomIsSentLater) {
  ExitRig rig;
  ConnectParams params;
  params.max_rd_atomic = 1;
  ScriptedRc& r = rig.connect(params);
  const auto ahead = [&] {
    r.inject(rig.request(Opcode::kRcWriteOnly, kRqPsn + 12, rig.va(), rig.mr->rkey, 64),
             std::vector<std::uint8_t>(64, 1));
  };
  rig.mark();
  for (std::uint32_t i = 0; i < 10; ++i) r.inject(rig.read(kRqPsn + i));  // the queue's ten answers
  ahead();
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::out_of_sequence), 1u);
  EXPECT_EQ(rig.delta(QpCounter::drop_answer_ring_full), 1u);
  EXPECT_EQ(rig.delta(QpCounter::nak_seq_sent), 0u);
  EXPECT_EQ(r.sent().size(), 10u) << "the READs' responses";
  rig.mark();
  ahead();
  rig.settle();
  EXPECT_EQ(rig.delta(QpCounter::nak_seq_sent), 1u);
  const auto sent = r.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(int{sent[0].aeth().syndrome}, int{nak(NakCode::kPsnSequenceError)});
  EXPECT_EQ(sent[0].bth().psn.get(), kRqPsn + 10) << "the PSN expected";
}

// --- The tables themselves ----------------------------------------------------------------

// The rules tables: every step and exit has a name and a rule, names are
// unique, and each exit's counter exists by its name.
TEST(TransportRules, EveryStepAndExitIsNamedOnce) {
  std::set<std::string> names;
  for (const transport::ExitRule& e : transport::kResponderExits) {
    EXPECT_TRUE(names.insert(std::string("responder.") + e.name).second) << e.name;
    EXPECT_GT(std::strlen(e.rule), 10u) << e.name;
    EXPECT_NE(transport::qp_counter_by_name(transport::qp_counter_name(e.counter)), transport::QpCounter::kCount);
    const bool fatal = e.answer == transport::Answer::kInvalidRequest || e.answer == transport::Answer::kRemoteAccess ||
                       e.answer == transport::Answer::kRemoteOperational;
    if (!fatal) {
      EXPECT_EQ(e.status, transport::kNoCompletion) << e.name << ": only a fatal exit ends a receive";
    }
  }
  for (const transport::CompleterRule& e : transport::kCompleterExits) {
    EXPECT_TRUE(names.insert(std::string("completer.") + e.name).second) << e.name;
    EXPECT_GT(std::strlen(e.rule), 10u) << e.name;
  }
  for (const char* n : transport::kResponderStepNames) EXPECT_TRUE(names.insert(std::string("rstep.") + n).second);
  for (const char* n : transport::kCompleterStepNames) EXPECT_TRUE(names.insert(std::string("cstep.") + n).second);
  EXPECT_EQ(transport::rule_of(transport::nak_exit(wire::NakCode::kInvalidRequest)).status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(transport::rule_of(transport::nak_exit(wire::NakCode::kRemoteOperationalError)).status, IBV_WC_REM_OP_ERR);
  EXPECT_EQ(transport::wc_opcode_for(IBV_WR_RDMA_WRITE_WITH_IMM), IBV_WC_RDMA_WRITE);
  EXPECT_EQ(transport::wc_opcode_for(IBV_WR_SEND_WITH_INV), IBV_WC_SEND);
  EXPECT_EQ(transport::wc_opcode_for(IBV_WR_ATOMIC_CMP_AND_SWP), IBV_WC_COMP_SWAP);
}

// --- The checks can fail --------------------------------------------------------------------

// The failures `check` reports, intercepted (they do not fail this test).
template <typename Check>
std::size_t failures_of(Check check) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter intercept(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    check();
  }
  return static_cast<std::size_t>(results.size());
}

// The counter of the next row that counts under another one.
template <typename Rule, std::size_t N>
QpCounter neighbours_counter(const Rule (&rows)[N], std::size_t i) {
  for (std::size_t k = 1; k < N; ++k) {
    if (rows[(i + k) % N].counter != rows[i].counter) return rows[(i + k) % N].counter;
  }
  return QpCounter::kCount;
}

// Another answer of the same kind: nothing becomes a NAK, a NAK another NAK.
Answer another_answer(Answer a) {
  switch (a) {
    case Answer::kNothing: return Answer::kInvalidRequest;
    case Answer::kSequenceNak: return Answer::kRnrNak;
    case Answer::kRnrNak: return Answer::kSequenceNak;
    case Answer::kInvalidRequest: return Answer::kRemoteAccess;
    case Answer::kRemoteAccess: return Answer::kRemoteOperational;
    case Answer::kRemoteOperational: return Answer::kInvalidRequest;
  }
  return Answer::kNothing;
}

// Every row's scenario, checked against its row with the counter (the
// neighbouring row's), the answer or the completion status changed, fails:
// none of the three checks passes whatever happened.
TEST(TransportExitChecks, FailOnAnotherCounterAnswerOrStatus) {
  for (std::size_t i = 0; i < std::size(transport::kResponderExits); ++i) {
    const auto e = static_cast<ResponderExit>(i);
    SCOPED_TRACE(std::string("responder.") + transport::rule_of(e).name);
    for (int change = 0; change < 3; ++change) {
      ExitRule wrong = transport::rule_of(e);
      if (change == 0) wrong.counter = neighbours_counter(transport::kResponderExits, i);
      if (change == 1) wrong.answer = another_answer(wrong.answer);
      if (change == 2) wrong.status = IBV_WC_GENERAL_ERR;  // no row's
      ExitRig rig;
      const Provoked got = provoke(rig, e);
      rig.settle();
      EXPECT_EQ(failures_of([&] { expect_responder_exit(rig, transport::rule_of(e), got); }), 0u);
      EXPECT_GT(failures_of([&] { expect_responder_exit(rig, wrong, got); }), 0u) << "change " << change;
    }
  }
  for (std::size_t i = 0; i < std::size(transport::kCompleterExits); ++i) {
    const auto e = static_cast<CompleterExit>(i);
    SCOPED_TRACE(std::string("completer.") + transport::rule_of(e).name);
    for (int change = 0; change < 2; ++change) {
      CompleterRule wrong = transport::rule_of(e);
      if (change == 0) wrong.counter = neighbours_counter(transport::kCompleterExits, i);
      if (change == 1) wrong.status = IBV_WC_GENERAL_ERR;
      ExitRig rig;
      const Provoked got = provoke(rig, e);
      rig.settle();
      EXPECT_EQ(failures_of([&] { expect_completer_exit(rig, transport::rule_of(e), got); }), 0u);
      EXPECT_GT(failures_of([&] { expect_completer_exit(rig, wrong, got); }), 0u) << "change " << change;
    }
  }
}

}  // namespace
}  // namespace uroce::test
