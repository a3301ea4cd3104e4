// The data path of a QP, by protocol role (IBTA 9.7; rxe's split): what
// each role's file offers the engine and the other roles. Everything here
// runs on the engine's thread, once per packet or per burst.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "cc/dcqcn.h"
#include "cc/delay.h"
#include "mem/mr_table.h"
#include "wire/crc32.h"
#include "wire/frame.h"
#include "wire/path_header.h"
#include "wire/tx_frame.h"

namespace uroce::transport {

struct Qp;
struct SendWqe;

// Everything the roles need from outside the QP, per engine.
struct Env {
  mem::MrTable* mrs = nullptr;
  wire::Crc32Fn crc32 = wire::crc32_default;
  std::uint64_t now = 0;
  bool ipv4_checksum_offload = false;  // the port fills IPv4 header checksums
  const cc::DcqcnParams* dcqcn = nullptr;  // congestion control; nullptr: off
  const cc::DelayParams* delay = nullptr;  // delay-based congestion control; nullptr: off (never with dcqcn)
  // A floor under every QP's local ACK timeout (PortConfig::min_ack_timeout;
  // 0: none): the exponent, as qp.attr.timeout.
  std::uint8_t min_ack_timeout = 0;
  // Writable heads for the frames the fill functions write, taken from the
  // top; the engine provides at least as many as the room it offers.
  wire::TxHead* heads = nullptr;
  std::uint16_t heads_left = 0;
  std::uint16_t copy_limit = 0;  // payloads up to this size go into the head (the port's choice)
  // Set (the engine): the fill functions write frames with their ICRC left
  // to the caller (wire::PacketOptions::defer_icrc). Unset: complete frames.
  bool defer_icrc = false;
};

// requester.cc: up to `room` request packets into `out`.
std::uint16_t requester_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room);
// Go back to `psn` (go-back-N): the next packet sent is the one with that PSN.
void requester_rewind(Qp& qp, std::uint32_t psn);
// RNR wait (IBTA 9.7.5.2.8): the completer enters it on an RNR NAK for
// `psn`; the requester sends nothing until the timer of `timer_code` has
// run, then resends from `psn`. The engine wakes the QP at
// requester_wakeup() (0: not waiting).
void requester_rnr_wait(Qp& qp, Env& env, std::uint32_t psn, std::uint8_t timer_code);
bool rnr_waiting(Qp& qp, const Env& env);
std::uint64_t requester_wakeup(const Qp& qp);
// Writes and emits packet `index` of `w` (PSN `psn`) into `f`: a packet
// sent the first time and one sent again are the same. `psns`: the PSNs it
// occupies (a READ request: its segment's responses). `b` is the caller's,
// read field by field: returned by value, its fields were stored one by one
// and loaded two at a time, a load that waits for the stores to retire.
struct Built {
  std::uint32_t payload = 0;
  std::uint32_t psns = 1;
  bool unmapped = false;  // an on-demand page is not mapped: nothing was built
};
void build_request(Qp& qp, Env& env, SendWqe& w, std::uint32_t index, std::uint32_t psn, bool ack_req,
                   wire::TxFrame& f, Built& b);

// selective_repeat.cc: the requester's side of selective repeat
// (docs/transport.md). sr_number gives a WQE that consumes a receive WQE
// at the peer its ordinal; sr_sent_new records PSNs sent the first time;
// sr_resend sends again, one by one, the PSNs found lost (up to `room`);
// sr_on_response takes the mode's ACKs (with their SACK), NAKs, READ
// responses and atomic ACKs; sr_on_timer runs its timers (the short one,
// RTO_low, and the local ACK timeout).
void sr_number(Qp& qp, SendWqe& w);
void sr_sent_new(Qp& qp, Env& env, const SendWqe& w, std::uint32_t psn, std::uint32_t psns, bool ack_req);
std::uint16_t sr_resend(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room);
void sr_on_response(Qp& qp, Env& env, const wire::ParsedFrame& pkt);
void sr_on_timer(Qp& qp, Env& env);

// completer.cc
void completer_on_response(Qp& qp, Env& env, const wire::ParsedFrame& pkt);
void completer_on_timer(Qp& qp, Env& env);
// Completes sq[comp_next] with `status` (and, if it is an error, moves the QP
// to ERR and flushes the rest).
void complete_send(Qp& qp, ibv_wc_status status);

// responder.cc (RC and UC; UD's datagrams go to ud_on_datagram): a
// request for this QP; up to `room` answers (ACKs, NAKs, READ responses,
// atomic ACKs) into `out`.
void responder_on_request(Qp& qp, Env& env, const wire::ParsedFrame& pkt);
std::uint16_t responder_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room);
// All the responder has to send is one plain ACK (no NAK, READ response or
// atomic ACK; not selective repeat's, whose SACKs keep their own timing):
// an answer the engine may hold back for one poll (Engine::poll).
bool only_an_ack_queued(const Qp& qp);

// ud.cc: a UD SEND for this QP (IBTA 9.8.x, 11.4.1.1): Q_Key and length
// checks, a receive WQE, the GRH then the payload.
void ud_on_datagram(Qp& qp, Env& env, const wire::ParsedFrame& pkt);
// UD requests (requester_fill's for a UD QP): up to `room` datagrams, each
// to its WR's address.
std::uint16_t ud_requester_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room);

// congestion.cc: DCQCN. A RoCE packet for this QP arrived marked CE (the
// notification point owes the sender a CNP, at most one per interval).
// True when a CNP has just become due (cnp_fill sends it).
bool np_on_ce(Qp& qp, Env& env);
// Up to `room` CNPs (0 or 1) into `out`: BTH opcode 0x81 with BECN to the
// peer QP, 16 reserved bytes, the ICRC (Annex A17.9.3).
std::uint16_t cnp_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room);
// A CNP for this QP arrived (reaction point).
void rp_on_cnp(Qp& qp, Env& env);
// Pacing at the QP's DCQCN rate: whether a data packet (request, READ
// response) may leave now, and the accounting once one of `frame_bytes`
// has. Always true with congestion control off.
bool pace_allows(Qp& qp, Env& env);
void paced_sent(Qp& qp, Env& env, std::uint32_t frame_bytes);
// When the QP, held back by pacing with packets to send, may send again; 0
// if it is not held back.
std::uint64_t paced_until(const Qp& qp, const Env& env);

// delay_cc.cc: delay-based congestion control (cc = delay, lib/cc/delay.h)
// for RC QPs. delay_start (control path, at RTR): the window at its cap on
// the path of `params` and the QP's MTU, or none (nullptr). The rest do
// nothing for a QP without it. delay_sent records a first send that asks
// for an ACK; delay_forget_from drops the records from `psn` on (those
// PSNs go again: Karn's rule, no sample from a packet sent twice);
// delay_acked takes the completer's move of its oldest unacknowledged PSN
// from `before` to `after`, with the RTT of the newest record before
// `after`; delay_ack feeds `packets` acknowledged with `rtt_ns` (0: no
// sample, held for the next); delay_timeout and delay_loss the timer and a
// loss found otherwise (a sequence NAK, a selective-repeat hole).
void delay_start(Qp& qp, const cc::DelayParams* params);
void delay_sent(Qp& qp, const Env& env, std::uint32_t psn);
void delay_forget_from(Qp& qp, std::uint32_t psn);
void delay_acked(Qp& qp, Env& env, std::uint32_t before, std::uint32_t after);
void delay_ack(Qp& qp, Env& env, std::uint32_t packets, std::uint64_t rtt_ns);
void delay_timeout(Qp& qp, Env& env);
void delay_loss(Qp& qp, Env& env);

// frames.cc: writes a packet of the QP into `f` (its head taken from
// env.heads), with the headers `th` (BTH and the extension headers its
// opcode carries) and the payload `f`'s pieces hold, then the pad and the
// ICRC. The fill functions below keep to the heads the engine provides.
void emit(Qp& qp, Env& env, wire::TxFrame& f, wire::TransportHeaders& th, std::uint32_t payload_bytes);
// The same on another path of the QP's, without counting it as a packet of
// the QP's traffic (CNPs).
void emit_frame(const wire::PathHeader& path, Env& env, wire::TxFrame& f, wire::TransportHeaders& th,
                std::uint32_t payload_bytes);
// A UC or UD packet, whose WR completes once it is built (no ACK comes):
// the payload is copied into the frame's head, so the application may
// reuse its buffer as soon as it sees the completion.
void emit_copied(const wire::PathHeader& path, Qp& qp, Env& env, wire::TxFrame& f, wire::TransportHeaders& th,
                 std::uint32_t payload_bytes);
// The opcode of RC operation `rc` in the QP's service: UC's and XRC's are
// RC's moved to their range (IBTA table 38: 001xxxxx and 101xxxxx for
// 000xxxxx); UD's are given as they are.
std::uint8_t service_opcode(const Qp& qp, wire::Opcode rc);
// `b`, the BTH of the QP's next packet: its fixed fields, and these (`op`
// as service_opcode takes it). Written where it goes: a BTH returned by
// value is packed in registers and copied, and the copy's wide load waits
// on the narrow stores before it (store forwarding fails; ~8 ns a packet).
void packet_bth(wire::Bth& b, const Qp& qp, wire::Opcode op, std::uint32_t psn, bool ack_req, bool solicited);

// Whether `p` comes from the connected QP's peer address to its own (IP
// source and destination against the path set at RTR). A QP not yet at RTR
// has no path: what arrives for it is judged by its state instead.
bool from_peer(const Qp& qp, const wire::ParsedFrame& p);

// The local ACK timeout the QP waits for: its own (qp.attr.timeout), or the
// device's floor (env.min_ack_timeout) when that is longer; 0 (infinite)
// stays infinite. The QP's attribute keeps what the application set.
std::uint8_t effective_ack_timeout(const Qp& qp, const Env& env);
// Deadline of the retransmit timer from env.now (0: the timeout is infinite).
std::uint64_t retransmit_deadline(const Qp& qp, const Env& env);

}  // namespace uroce::transport
