#include <algorithm>
#include <cstring>

#include "transport/qp.h"
#include "transport/rules.h"

namespace uroce::transport {

namespace {

// Writes the packet into a head taken from env.heads, copying payloads up
// to `copy_limit` bytes into it. `self_contained`: the frame may not point
// into the payload's buffer (the WR completes without an ACK). A frame that
// cannot be written so (no path, a head too small) goes out empty, which
// the port drops and counts.
void write_frame(const wire::PathHeader& path, Env& env, wire::TxFrame& f, wire::TransportHeaders& th,
                 std::uint32_t payload_bytes, std::uint32_t copy_limit, bool self_contained) {
  f.head = env.heads[--env.heads_left];
  wire::PacketOptions options{env.crc32, !env.ipv4_checksum_offload, copy_limit};
  options.defer_icrc = env.defer_icrc;
  if (!wire::write_packet(path, th, payload_bytes, f, options) || (self_contained && f.npieces != 0)) [[unlikely]] {
    f.head_len = 0;
    f.npieces = 0;
    f.trailer_len = 0;
  }
}

void count_sent(Qp& qp, std::uint32_t payload_bytes) {
  qp.counters.add(QpCounter::tx_packets);
  qp.counters.add(QpCounter::tx_bytes, payload_bytes);
}

}  // namespace

void emit_frame(const wire::PathHeader& path, Env& env, wire::TxFrame& f, wire::TransportHeaders& th,
                std::uint32_t payload_bytes) {
  write_frame(path, env, f, th, payload_bytes, env.copy_limit, false);
}

// Spraying (selective repeat, TransportOptions::spray_paths): each packet
// on the next of the QP's paths in turn, a packet sent again most likely
// on another path than the one that lost it.
const wire::PathHeader& next_path(Qp& qp) {
  if (qp.sr == nullptr || qp.sr->paths.size() <= 1) [[likely]] return qp.path;
  SrState& sr = *qp.sr;
  const wire::PathHeader& path = sr.paths[sr.next_path];
  if (++sr.next_path == sr.paths.size()) sr.next_path = 0;  // no division per packet
  return path;
}

void emit(Qp& qp, Env& env, wire::TxFrame& f, wire::TransportHeaders& th, std::uint32_t payload_bytes) {
  write_frame(next_path(qp), env, f, th, payload_bytes, env.copy_limit, false);
  count_sent(qp, payload_bytes);
}

// Every port's heads hold a whole packet at the port's MTU, so the copy
// always fits.
void emit_copied(const wire::PathHeader& path, Qp& qp, Env& env, wire::TxFrame& f, wire::TransportHeaders& th,
                 std::uint32_t payload_bytes) {
  write_frame(path, env, f, th, payload_bytes, UINT32_MAX, true);
  count_sent(qp, payload_bytes);
}

std::uint8_t service_opcode(const Qp& qp, wire::Opcode rc) {
  const auto op = static_cast<std::uint8_t>(rc);
  if (qp.sr != nullptr) return static_cast<std::uint8_t>(op + static_cast<std::uint8_t>(wire::Opcode::kSrSendFirst));
  switch (qp.type) {
    case IBV_QPT_UC: return static_cast<std::uint8_t>(op + static_cast<std::uint8_t>(wire::Opcode::kUcSendFirst));
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV: return static_cast<std::uint8_t>(op + static_cast<std::uint8_t>(wire::Opcode::kXrcSendFirst));
    default: return op;
  }
}

void packet_bth(wire::Bth& b, const Qp& qp, wire::Opcode op, std::uint32_t psn, bool ack_req, bool solicited) {
  // Built in a local, stored whole: write_packet's copy of it then loads
  // what single stores wrote (a load over several narrow stores waits).
  wire::Bth v = qp.bth_base;
  v.opcode = service_opcode(qp, op);
  v.set_flags(solicited, false, 0);
  v.set_ack_req(ack_req);
  v.psn.set(psn);
  std::memcpy(&b, &v, sizeof v);
}

// A connected QP takes packets from the one address it is connected to
// (IBTA 9.6.1: the header checks of connected services compare the source
// with the QP's path; rxe and RNICs drop the rest), so a third host that
// guesses a QPN and PSN cannot write into it, and a stray CNP cannot slow
// it down.
bool from_peer(const Qp& qp, const wire::ParsedFrame& p) {
  if (!qp.receives() || qp.type == IBV_QPT_UD) return true;  // datagrams come from anyone (the Q_Key guards)
  const wire::PathHeader& path = qp.path;
  if (p.ip_version != path.ip_version) return false;
  const auto same = [](std::span<const std::uint8_t> a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
  };
  if (p.ip_version == 4) {
    const wire::Ipv4Hdr h = p.ipv4();
    return same(path.ip_dst(), h.src) && same(path.ip_src(), h.dst);
  }
  const wire::Ipv6Hdr h = p.ipv6();
  return same(path.ip_dst(), h.src) && same(path.ip_src(), h.dst);
}

// The timeout an application sets is the shortest time the requester waits
// for an acknowledgement (IBTA 9.7.6.1.3); waiting longer is allowed, and is
// what an operator asks for with the floor on a path the stock programs'
// 67 ms (timeout 14) is too short for: a software peer on a loaded host, an
// emulated NIC.
std::uint8_t effective_ack_timeout(const Qp& qp, const Env& env) {
  const std::uint8_t t = qp.attr.timeout;
  return t == 0 ? 0 : std::max(t, env.min_ack_timeout);
}

std::uint64_t retransmit_deadline(const Qp& qp, const Env& env) {
  const std::uint64_t t = ack_timeout_ns(effective_ack_timeout(qp, env));
  return t == 0 ? 0 : env.now + t;
}

}  // namespace uroce::transport
