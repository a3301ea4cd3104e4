// The IBTA rules the responder and the completer apply, one named row each
// (IBTA Vol. 1 chapter 9.7, 9.9; the C9-nn numbers are the compliance
// statements rxe cites). Each role runs as a state machine: an enum of steps
// with a name table, driven by a loop in which each step returns the next
// (responder.cc, completer.cc). A step that refuses a packet leaves through
// one of its role's exits; an exit's row says the rule, the counter it
// counts, what goes back to the peer and how the work request in use ends.
// The maps the roles share are here too, once: WR opcode to completion
// opcode, NAK code to completion status, the local ACK timeout.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "transport/counters.h"
#include "wire/headers.h"

namespace uroce::transport {

// --- Shared maps --------------------------------------------------------------

// The completion opcode of a send WR's opcode (ibv_wc.opcode).
constexpr ibv_wc_opcode wc_opcode_for(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    case IBV_WR_ATOMIC_WRITE: return IBV_WC_ATOMIC_WRITE;
    case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
    default: return IBV_WC_SEND;  // SEND, SEND_WITH_IMM, SEND_WITH_INV
  }
}

// Local ACK timeout (IBTA 9.7.6.1.3): 4.096 us * 2^timeout; 0 is infinite.
constexpr std::uint64_t ack_timeout_ns(std::uint8_t timeout) {
  return timeout == 0 ? 0 : (4096ull << (timeout & 0x1f));
}
static_assert(ack_timeout_ns(14) == 67'108'864);  // ~67 ms, rxe's and perftest's default

// What an exit sends back to the requester.
enum class Answer : std::uint8_t {
  kNothing,      // silently dropped (counted)
  kSequenceNak,  // NAK PSN sequence error, once until the expected PSN arrives
  kRnrNak,       // RNR NAK with our min_rnr_timer; the expected PSN stays
  kInvalidRequest,
  kRemoteAccess,
  kRemoteOperational,
};

// The exit completes no work request (a drop, or a NAK the QP survives).
inline constexpr ibv_wc_status kNoCompletion = IBV_WC_SUCCESS;

// --- Responder ---------------------------------------------------------------------

// The responder's steps for one request packet, in order (rxe's order:
// PSN, opcode sequence, operation, resources, length, then the keys as each
// operation executes).
#define UROCE_RESPONDER_STEPS(X)                                                             \
  X(check_state, "the QP receives requests in RTR, RTS, SQD and SQE")                        \
  X(check_xrc_srq, "annex A14: an XRC request's XRCETH names an XRC SRQ of the target QP's domain") \
  X(check_psn, "9.7.5.1.1: the expected PSN executes, a later one is NAKed, an earlier one is a duplicate") \
  X(duplicate, "9.7.5.1.2-3: a duplicate is answered, never executed twice")                \
  X(check_op_sequence, "9.7.4: Middle and Last only inside a message, First and Only outside") \
  X(check_sreth, "selective repeat: the SRETH places the packet in its message, as its opcode and PSN say") \
  X(check_op_allowed, "10.2.4.2: the QP's access flags allow the operation")                \
  X(check_resources, "9.7.5.2.4: READs and atomics need responder resources")               \
  X(check_length, "C9-92, C9-94: payloads fit the path MTU, DMA lengths 2^31 at most")      \
  X(execute_send, "9.7.5.2: a SEND fills the receive WQE in order")                         \
  X(execute_write, "9.7.5.2: a WRITE places at its RETH's address after the R_Key check")   \
  X(execute_read, "9.7.5.1.2: a READ is queued for its responses, one per PSN")             \
  X(execute_atomic, "9.7.5.1.3: an atomic executes once; its result is kept")               \
  X(execute_atomic_write, "IBA 1.5 9.4.7: ATOMIC WRITE places 8 bytes at once, answered by an empty READ response") \
  X(exit, "the packet leaves through one of the responder's exits")                        \
  X(done, "the packet is finished with")

enum class ResponderStep : std::uint8_t {
#define UROCE_X(name, rule) name,
  UROCE_RESPONDER_STEPS(UROCE_X)
#undef UROCE_X
};

// The responder's exits: (name, rule, counter, answer, how the receive WQE
// in use ends). A fatal answer (NAK Invalid Request, Remote Access, Remote
// Operational: IBTA 9.9.3 classes B-D, J) moves the QP to ERR, which flushes
// every receive WQE not completed here.
#define UROCE_RESPONDER_EXITS(X)                                                                                   \
  X(not_receiving, "the QP is not in a state that receives requests", drop_bad_state, kNothing, kNoCompletion)     \
  X(xrc_bad_srq, "annex A14: the XRCETH names no XRC SRQ of the target QP's domain, or not the message's own",  \
    drop_xrc_srq, kInvalidRequest, kNoCompletion)                                                                  \
  X(psn_ahead, "9.7.5.1.1: a PSN ahead of the expected one: packets were lost", out_of_sequence, kSequenceNak,     \
    kNoCompletion)                                                                                                 \
  X(sr_out_of_window, "selective repeat: a PSN beyond the receive window", sr_out_of_window, kNothing,           \
    kNoCompletion)                                                                                                 \
  X(sr_ahead_deferred, "selective repeat: a READ or atomic ahead of the expected PSN runs only in order",         \
    sr_ahead_refused, kNothing, kNoCompletion)                                                                     \
  X(sr_bad_header, "selective repeat: an SRETH disagreeing with the opcode, PSN, payload or RETH",               \
    drop_bad_sreth, kInvalidRequest, kNoCompletion)                                                                \
  X(no_receive, "9.7.5.2.8: no receive WQE for a SEND or WRITE with immediate", rnr_naks_sent, kRnrNak,            \
    kNoCompletion)                                                                                                 \
  X(duplicate_read_unknown, "9.7.5.1.2: a duplicate READ older than every responder resource",                     \
    drop_duplicate_unanswered, kNothing, kNoCompletion)                                                           \
  X(duplicate_atomic_unknown, "9.7.5.1.3: a duplicate atomic whose result is no longer kept",                      \
    drop_duplicate_unanswered, kNothing, kNoCompletion)                                                           \
  X(duplicate_no_room, "9.7.5.1.2-3: a duplicate READ or atomic with the response queue full",                     \
    drop_duplicate_unanswered, kNothing, kNoCompletion)                                                           \
  X(op_sequence, "9.7.4, C9-90: an opcode out of message order", drop_bad_opcode_sequence, kInvalidRequest,        \
    kNoCompletion)                                                                                                 \
  X(op_not_allowed, "10.2.4.2: the QP's access flags forbid the operation", drop_qp_access, kInvalidRequest,       \
    kNoCompletion)                                                                                                 \
  X(unsupported_opcode, "FLUSH (IBTA 1.5) is not supported", drop_unsupported_opcode,                              \
    kInvalidRequest, kNoCompletion)                                                                                \
  X(no_resources, "9.7.5.2.4: max_dest_rd_atomic = 0, no READ or atomic may execute", drop_no_resources,          \
    kInvalidRequest, kNoCompletion)                                                                                \
  X(too_many_reads, "9.7.5.2.4: more READs and atomics outstanding than max_dest_rd_atomic", drop_no_resources,   \
    kInvalidRequest, kNoCompletion)                                                                                \
  X(bad_length, "C9-92, C9-94: payload not fitting the path MTU, or a DMA length over 2^31", drop_bad_length,      \
    kInvalidRequest, kNoCompletion)                                                                                \
  X(write_length_mismatch, "9.7.5.2: WRITE payloads that disagree with the RETH's DMA length", drop_bad_length,    \
    kInvalidRequest, kNoCompletion)                                                                                \
  X(recv_too_short, "9.7.5.2: a SEND longer than the receive WQE's buffers", drop_recv_too_short,                  \
    kInvalidRequest, IBV_WC_LOC_LEN_ERR)                                                                           \
  X(recv_bad_lkey, "11.6.2: a receive WQE whose lkey fails its check", drop_recv_lkey, kRemoteOperational,         \
    IBV_WC_LOC_PROT_ERR)                                                                                           \
  X(recv_revoked, "10.6: the receive WQE's region was deregistered while the SEND arrived", mr_revoked_in_flight,  \
    kRemoteOperational, IBV_WC_LOC_PROT_ERR)                                                                       \
  X(invalidate_refused, "10.6.6.1, class J: SEND with Invalidate naming a key it may not invalidate",              \
    drop_invalidate_refused, kInvalidRequest, IBV_WC_REM_INV_REQ_ERR)                                              \
  X(rkey_violation, "10.6, C9-88: R_Key, bounds, access rights or PD check failed", drop_rkey_violation,           \
    kRemoteAccess, kNoCompletion)                                                                                  \
  X(window_violation, "10.6.7: a memory window's R_Key unbound, invalidated, of another QP, or its range or rights exceeded", \
    drop_window_rkey, kRemoteAccess, kNoCompletion)                                                                \
  X(write_revoked, "10.6: the WRITE's region was deregistered mid-message", mr_revoked_in_flight, kRemoteAccess,   \
    kNoCompletion)                                                                                                 \
  X(read_revoked, "10.6: the READ's region was deregistered while its responses left", mr_revoked_in_flight,       \
    kRemoteAccess, kNoCompletion)                                                                                  \
  X(misaligned_atomic, "9.4.5: an atomic's address must be 8-byte aligned", drop_misaligned_atomic,                \
    kInvalidRequest, kNoCompletion)                                                                                \
  X(odp_unmapped, "10.6: a page of an on-demand region the request reaches is not mapped", odp_unmapped,           \
    kRemoteAccess, kNoCompletion)                                                                                  \
  X(recv_unmapped, "11.6.2: a page of the receive WQE's on-demand buffers is not mapped", odp_unmapped,            \
    kRemoteOperational, IBV_WC_LOC_PROT_ERR)

enum class ResponderExit : std::uint8_t {
#define UROCE_X(name, rule, counter, answer, status) name,
  UROCE_RESPONDER_EXITS(UROCE_X)
#undef UROCE_X
      kCount
};

struct ExitRule {
  const char* name;
  const char* rule;
  QpCounter counter;
  Answer answer;
  ibv_wc_status status;
};

inline constexpr ExitRule kResponderExits[] = {
#define UROCE_X(name, rule, counter, answer, status) {#name, rule, QpCounter::counter, Answer::answer, status},
    UROCE_RESPONDER_EXITS(UROCE_X)
#undef UROCE_X
};

constexpr const ExitRule& rule_of(ResponderExit e) { return kResponderExits[static_cast<std::size_t>(e)]; }
inline constexpr const char* kResponderStepNames[] = {
#define UROCE_X(name, rule) #name,
    UROCE_RESPONDER_STEPS(UROCE_X)
#undef UROCE_X
};
inline constexpr const char* kResponderStepRules[] = {
#define UROCE_X(name, rule) rule,
    UROCE_RESPONDER_STEPS(UROCE_X)
#undef UROCE_X
};
constexpr const char* step_name(ResponderStep s) { return kResponderStepNames[static_cast<std::size_t>(s)]; }
constexpr const char* step_rule(ResponderStep s) { return kResponderStepRules[static_cast<std::size_t>(s)]; }

// --- Completer ------------------------------------------------------------------------

// The completer's steps for one response packet.
#define UROCE_COMPLETER_STEPS(X)                                                                     \
  X(check_state, "responses are taken in RTS, SQD and SQE")                                          \
  X(check_psn, "9.7.5.1: a response answers a PSN that was sent; older ones are stale")              \
  X(acknowledge_before, "9.7.5.1.6: a response acknowledges every PSN before its own (coalesced ACK)") \
  X(ack, "9.7.5.1.5: an ACK completes the SENDs and WRITEs it covers")                               \
  X(rnr_nak, "9.7.5.2.8: an RNR NAK pauses the requester for the NAK's timer, then it retries")     \
  X(nak, "9.7.5.2: a NAK names the PSN it refuses and why")                                          \
  X(read_response, "9.7.5.1.2: READ responses arrive in PSN order, each at its offset")              \
  X(atomic_ack, "9.7.5.1.3: an atomic ACK returns the original value")                               \
  X(implicit_nak, "9.7.5.1.6: a later PSN answered before a READ's or atomic's responses: they were lost") \
  X(retry, "9.7.6.1.3: a lost packet spends a retry; the requester goes back to the oldest PSN unanswered") \
  X(exit, "the packet leaves through one of the completer's exits")                                 \
  X(done, "the packet is finished with")

enum class CompleterStep : std::uint8_t {
#define UROCE_X(name, rule) name,
  UROCE_COMPLETER_STEPS(UROCE_X)
#undef UROCE_X
};

// The completer's exits: (name, rule, counter, how the oldest WR ends).
// Those that end a WR with an error move the QP to ERR, flushing the rest.
#define UROCE_COMPLETER_EXITS(X)                                                                                   \
  X(not_active, "the QP is not in a state that takes responses", drop_bad_state, kNoCompletion)                     \
  X(not_sent, "9.7.5.1: a PSN at or beyond the highest sent answers nothing", drop_response_not_sent, kNoCompletion) \
  X(stale, "9.7.5.1: a response older than every outstanding PSN (a duplicate)", duplicate_responses,              \
    kNoCompletion)                                                                                                 \
  X(unmatched, "9.7.5.1: a READ response or atomic ACK where no READ or atomic waits", duplicate_responses,        \
    kNoCompletion)                                                                                                 \
  X(reserved_syndrome, "9.7.5.1: AETH syndrome kind 0b10 is reserved", drop_reserved_syndrome, kNoCompletion)           \
  X(bad_read_response, "9.7.5.1.2: a READ response whose opcode or length does not fit its place",                 \
    drop_bad_opcode_sequence, kNoCompletion)                                                                       \
  X(retry_exceeded, "9.7.6.1.3: a timeout or sequence NAK with retry_cnt spent", retry_exceeded,                  \
    IBV_WC_RETRY_EXC_ERR)                                                                                          \
  X(rnr_retry_exceeded, "9.7.5.2.8: an RNR NAK with rnr_retry spent", rnr_retry_exceeded, IBV_WC_RNR_RETRY_EXC_ERR) \
  X(nak_invalid_request, "9.7.5.2.2: NAK Invalid Request", nak_inv_req_received, IBV_WC_REM_INV_REQ_ERR)          \
  X(nak_remote_access, "9.7.5.2.3: NAK Remote Access Error", nak_rem_access_received, IBV_WC_REM_ACCESS_ERR)       \
  X(nak_remote_operational, "9.7.5.2.4: NAK Remote Operational Error", nak_rem_op_received, IBV_WC_REM_OP_ERR)   \
  X(nak_other, "9.7.5.2: NAK Invalid RD Request or a reserved code (an RC peer never sends them)",                 \
    nak_inv_req_received, IBV_WC_REM_INV_REQ_ERR)                                                                  \
  X(local_revoked, "10.6: the READ or atomic WR's region was deregistered before its response",                   \
    mr_revoked_in_flight, IBV_WC_LOC_PROT_ERR)                                                                     \
  X(local_unmapped, "10.6: a page of the READ's or atomic's on-demand buffer is not mapped", odp_unmapped,         \
    IBV_WC_LOC_PROT_ERR)

enum class CompleterExit : std::uint8_t {
#define UROCE_X(name, rule, counter, status) name,
  UROCE_COMPLETER_EXITS(UROCE_X)
#undef UROCE_X
      kCount
};

struct CompleterRule {
  const char* name;
  const char* rule;
  QpCounter counter;
  ibv_wc_status status;
};

inline constexpr CompleterRule kCompleterExits[] = {
#define UROCE_X(name, rule, counter, status) {#name, rule, QpCounter::counter, status},
    UROCE_COMPLETER_EXITS(UROCE_X)
#undef UROCE_X
};

constexpr const CompleterRule& rule_of(CompleterExit e) { return kCompleterExits[static_cast<std::size_t>(e)]; }
inline constexpr const char* kCompleterStepNames[] = {
#define UROCE_X(name, rule) #name,
    UROCE_COMPLETER_STEPS(UROCE_X)
#undef UROCE_X
};
inline constexpr const char* kCompleterStepRules[] = {
#define UROCE_X(name, rule) rule,
    UROCE_COMPLETER_STEPS(UROCE_X)
#undef UROCE_X
};
constexpr const char* step_name(CompleterStep s) { return kCompleterStepNames[static_cast<std::size_t>(s)]; }
constexpr const char* step_rule(CompleterStep s) { return kCompleterStepRules[static_cast<std::size_t>(s)]; }

// The exit a NAK of this code takes (IBTA 9.7.5.2, table 44), hence the
// completion status the oldest WR ends with.
constexpr CompleterExit nak_exit(wire::NakCode code) {
  switch (code) {
    case wire::NakCode::kInvalidRequest: return CompleterExit::nak_invalid_request;
    case wire::NakCode::kRemoteAccessError: return CompleterExit::nak_remote_access;
    case wire::NakCode::kRemoteOperationalError: return CompleterExit::nak_remote_operational;
    default: return CompleterExit::nak_other;  // a sequence NAK is a retry, not an exit
  }
}
static_assert(rule_of(nak_exit(wire::NakCode::kRemoteAccessError)).status == IBV_WC_REM_ACCESS_ERR);

}  // namespace uroce::transport
