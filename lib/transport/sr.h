// Selective repeat's per-QP state (docs/transport.md, "Selective repeat"),
// allocated only for a QP that runs the mode (Qp::sr): a QP in plain
// RoCEv2 carries none of it.
//
// Both sides index their per-PSN records by the PSN modulo a power of two
// at least the window: the requester keeps kSackWindow PSNs in flight at
// most, the responder takes the expected PSN and kSackWindow after it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "transport/sack.h"
#include "wire/path_header.h"

namespace uroce::transport {

// What the responder keeps of a message's last packet taken ahead of the
// expected PSN, to complete the message once every PSN before it has come
// (completions and the MSN follow the PSN order).
struct SrLastPacket {
  enum class Kind : std::uint8_t { kNone, kWrite, kWriteImm, kSend };
  Kind kind = Kind::kNone;
  bool imm = false;        // SEND: with immediate data
  bool invalidate = false; // SEND with Invalidate
  bool solicited = false;
  std::uint32_t psn = 0;   // the slot is this PSN's (slots are reused modulo kSrSlots)
  std::uint32_t byte_len = 0;
  std::uint32_t imm_data = 0;  // as on the wire (big-endian), as ibv_wc has it
  std::uint32_t inv_rkey = 0;
  std::uint32_t recv_index = 0;  // the receive WQE's ordinal (24 bits)
};

inline constexpr std::uint32_t kSrSlots = 2 * kSackWindow;
inline constexpr std::uint32_t kSrNoClaim = 0xffffffff;  // no PSN (they are 24 bits)
inline constexpr std::uint32_t kSrClaimWrite = 1u << 31; // in claim_first: a WRITE's packet
constexpr std::uint32_t sr_slot(std::uint32_t psn) { return psn % kSrSlots; }

// The most paths a QP sprays over (TransportOptions::spray_paths).
inline constexpr std::uint32_t kMaxSprayPaths = 64;

struct SrState {
  // --- Responder ------------------------------------------------------------
  ReceiveWindow window;                        // its expected PSN is qp.resp.psn
  std::array<SrLastPacket, kSrSlots> last{};   // message ends taken, not yet completed
  // Every SEND or WRITE packet taken: its PSN and the first PSN of the
  // message it says it belongs to (SRETH), kSrClaimWrite set for a WRITE's.
  std::array<std::uint32_t, kSrSlots> claim_psn{};
  std::array<std::uint32_t, kSrSlots> claim_first{};
  // While the expected PSN is inside a message: its first PSN and kind.
  bool in_message = false;
  std::uint32_t message_first = 0;
  std::uint32_t recv_base = 0;                 // ordinal of the receive WQE at rq_next

  // --- Requester ------------------------------------------------------------
  SendScoreboard board;                        // what the responder holds
  std::uint32_t send_ordinal = 0;              // next receive-consuming message's ordinal
  std::array<std::uint64_t, kSrSlots> sent_ns{};  // when each PSN in flight last left
  std::array<std::uint8_t, kSrSlots> flags{};     // kSent* below, per PSN in flight
  std::uint64_t rack_ns = 0;   // the latest departure among the PSNs the peer holds or answered
  std::uint64_t srtt_ns = 0;   // smoothed round trip (0: no sample yet)
  std::uint64_t rttvar_ns = 0;
  std::uint64_t min_rtt_ns = 0;
  std::uint64_t rto_at = 0;    // the short retransmit timer (RTO_low); 0: disarmed
  std::uint32_t rto_backoff = 0;  // doublings since the last progress
  std::uint32_t lost = 0;      // PSNs marked kSentLost, to resend
  std::uint32_t next_path = 0; // spraying: the path of the next packet

  // One path header per UDP source port sprayed over (index 0 is qp.path).
  std::vector<wire::PathHeader> paths;
};

// The responder's side from `expected` on (RTR's rq_psn), nothing taken.
inline void sr_reset_responder(SrState& sr, std::uint32_t expected) {
  sr.window.reset(expected);
  sr.last.fill(SrLastPacket{});
  sr.claim_psn.fill(kSrNoClaim);
  sr.in_message = false;
  sr.recv_base = 0;
}

// The requester's side from `psn` on (RTS's sq_psn), nothing in flight.
inline void sr_reset_requester(SrState& sr, std::uint32_t psn) {
  sr.board.reset(psn);
  sr.send_ordinal = 0;
  sr.flags.fill(0);
  sr.rack_ns = sr.srtt_ns = sr.rttvar_ns = sr.min_rtt_ns = 0;
  sr.rto_at = 0;
  sr.rto_backoff = 0;
  sr.lost = 0;
  sr.next_path = 0;
}

// SrState::flags bits.
inline constexpr std::uint8_t kSentResent = 0x01;   // sent more than once (no RTT sample)
inline constexpr std::uint8_t kSentLost = 0x02;     // to be sent again
inline constexpr std::uint8_t kSentAnswer = 0x04;   // a READ/atomic PSN: done once answered, not once held
inline constexpr std::uint8_t kSentAnswered = 0x08; // its response arrived
inline constexpr std::uint8_t kSentAsked = 0x10;    // it asked for an ACK (AckReq; a READ's or atomic's PSNs)

}  // namespace uroce::transport
