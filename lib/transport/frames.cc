#include "transport/qp.h"
#include "transport/rules.h"
#include "wire/icrc.h"

namespace uroce::transport {

void emit_frame(Qp& qp, Env& env, wire::TxFrame& f, std::uint32_t payload_bytes) {
  if (env.dcqcn != nullptr && env.dcqcn->enabled) {
    // ECN-capable transport on everything we send, so congested switches
    // mark it instead of dropping it (RFC 3168).
    wire::FrameSpec& t = qp.tx_template;
    t.tos = static_cast<std::uint8_t>((t.tos & 0xfc) | env.dcqcn->data_ecn);
    t.traffic_class = static_cast<std::uint8_t>((t.traffic_class & 0xfc) | env.dcqcn->data_ecn);
  }
  const wire::HeaderLayout layout =
      wire::build_headers(qp.tx_template, payload_bytes, f.hdr, !env.ipv4_checksum_offload);
  f.hdr_len = static_cast<std::uint16_t>(layout.header_bytes);
  f.l3_offset = static_cast<std::uint16_t>(layout.l3_offset);
  for (int i = 0; i < layout.pad; ++i) f.trailer[i] = 0;

  std::array<std::span<const std::uint8_t>, wire::TxFrame::kMaxPieces + 1> pieces;
  for (int i = 0; i < f.npieces; ++i) pieces[i] = f.pieces[i];
  pieces[f.npieces] = std::span<const std::uint8_t>(f.trailer.data(), layout.pad);
  const auto headers = std::span<const std::uint8_t>(f.hdr).subspan(f.l3_offset, f.hdr_len - f.l3_offset);
  const std::uint32_t icrc =
      wire::icrc_compute(env.crc32, headers, std::span(pieces.data(), f.npieces + 1u));
  wire::icrc_store(f.trailer.data() + layout.pad, icrc);
  f.trailer_len = static_cast<std::uint8_t>(layout.pad + 4);
}

void emit(Qp& qp, Env& env, wire::TxFrame& f, std::uint32_t payload_bytes) {
  emit_frame(qp, env, f, payload_bytes);
  qp.counters.add(QpCounter::tx_packets);
  qp.counters.add(QpCounter::tx_bytes, payload_bytes);
}

// A connected QP takes packets from the one address it is connected to
// (IBTA 9.6.1: the header checks of connected services compare the source
// with the QP's path; rxe and RNICs drop the rest), so a third host that
// guesses a QPN and PSN cannot write into it, and a stray CNP cannot slow
// it down.
bool from_peer(const Qp& qp, const wire::ParsedFrame& p) {
  if (!qp.receives()) return true;
  const wire::FrameSpec& path = qp.tx_template;
  if (p.ip_version != path.ip_version) return false;
  if (p.ip_version == 4) {
    const wire::Ipv4Hdr h = p.ipv4();
    return h.src == path.dst4 && h.dst == path.src4;
  }
  const wire::Ipv6Hdr h = p.ipv6();
  return h.src == path.dst6 && h.dst == path.src6;
}

std::uint64_t retransmit_deadline(const Qp& qp, std::uint64_t now) {
  const std::uint64_t t = ack_timeout_ns(qp.attr.timeout);
  return t == 0 ? 0 : now + t;
}

}  // namespace uroce::transport
