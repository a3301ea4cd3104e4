// DCQCN at the transport: the notification point (CNPs for CE-marked
// packets) and the reaction point's inputs (CNPs received). The rate
// machine itself is lib/cc/dcqcn.h.
#include <algorithm>
#include <array>
#include <optional>

#include "transport/qp.h"
#include "wire/opcode.h"

namespace uroce::transport {
namespace {

constexpr std::array<std::uint8_t, 16> kCnpReserved{};  // Annex A17.9.3: 16 reserved bytes, zero

// Pacing lets a QP that has been quiet send this much time's worth of
// packets at once, so that bursts of a poll loop keep line rate; beyond it,
// departures follow the rate.
constexpr std::uint64_t kPacingBurstNs = 8'000;

bool paced(const Env& env) { return env.dcqcn != nullptr && env.dcqcn->enabled; }

void start_rate(Qp& qp, const Env& env) {
  if (!qp.congestion.started) {
    qp.congestion.rate.reset(env.dcqcn, env.now);
    qp.congestion.started = true;
  }
}

}  // namespace

bool np_on_ce(Qp& qp, Env& env) {
  qp.counters.add(QpCounter::ce_marked_received);
  if (env.dcqcn == nullptr || !env.dcqcn->enabled || !qp.receives()) return false;
  Qp::Congestion& c = qp.congestion;
  // At most one CNP per QP per interval, counted from the mark that asked
  // for the last one.
  if (c.cnp_due || (c.cnp_sent && env.now - c.last_cnp_ns < env.dcqcn->cnp_interval_ns)) return false;
  c.cnp_due = true;
  c.cnp_sent = true;
  c.last_cnp_ns = env.now;
  return true;
}

std::uint16_t cnp_fill(Qp& qp, Env& env, wire::TxFrame* out, std::uint16_t room) {
  if (!qp.congestion.cnp_due || room == 0) return 0;
  qp.congestion.cnp_due = false;
  if (!qp.receives()) return 0;
  // The template is the QP's: addresses, P_Key and the peer's QPN as dest
  // QP. A CNP sets the rest; the next request or response sets them again,
  // and the IP class is put back here.
  wire::FrameSpec& t = qp.tx_template;
  const std::uint8_t tos = t.tos;
  const std::uint8_t traffic_class = t.traffic_class;
  const std::optional<std::uint16_t> vlan = t.vlan_tci;
  const auto cnp_class = static_cast<std::uint8_t>(env.dcqcn->cnp_dscp << 2);
  t.tos = cnp_class;
  t.traffic_class = cnp_class;
  // On a VLAN-tagged path the CNP's 802.1p priority too (PCP, the top 3 bits).
  if (vlan) t.vlan_tci = static_cast<std::uint16_t>((*vlan & 0x1fff) | (env.dcqcn->cnp_priority & 7) << 13);
  wire::Bth& b = t.bth;
  b.opcode = static_cast<std::uint8_t>(wire::Opcode::kCnp);
  b.set_flags(false, false, 0);
  b.fecn_becn = 0;
  b.set_becn(true);
  b.set_ack_req(false);
  b.psn.set(0);
  wire::TxFrame& f = out[0];
  f.npieces = 1;
  f.pieces[0] = std::span<const std::uint8_t>(kCnpReserved);
  emit_frame(qp, env, f, static_cast<std::uint32_t>(kCnpReserved.size()));
  b.set_becn(false);
  t.tos = tos;
  t.traffic_class = traffic_class;
  t.vlan_tci = vlan;
  qp.counters.add(QpCounter::cnps_sent);
  return 1;
}

bool pace_allows(Qp& qp, Env& env) {
  if (!paced(env)) return true;
  start_rate(qp, env);
  qp.congestion.rate.advance(env.now);
  return qp.congestion.next_send_ns <= env.now;
}

void paced_sent(Qp& qp, Env& env, std::uint32_t frame_bytes) {
  if (!paced(env)) return;
  Qp::Congestion& c = qp.congestion;
  c.rate.on_sent(frame_bytes);
  // Wire time at the current rate (preamble, IFG and FCS included).
  const auto ns = static_cast<std::uint64_t>(static_cast<double>(frame_bytes + 24) * 8e9 / c.rate.rate_bps());
  const std::uint64_t floor = env.now > kPacingBurstNs ? env.now - kPacingBurstNs : 0;
  c.next_send_ns = std::max(c.next_send_ns, floor) + ns;
}

std::uint64_t paced_until(const Qp& qp, const Env& env) {
  if (!paced(env) || qp.congestion.next_send_ns <= env.now) return 0;
  const bool requests = qp.req_next != qp.sq_posted;
  const bool responses = qp.resp.out_head != qp.resp.out_tail;
  return requests || responses ? qp.congestion.next_send_ns : 0;
}

void rp_on_cnp(Qp& qp, Env& env) {
  qp.counters.add(QpCounter::cnps_received);
  if (env.dcqcn == nullptr || !env.dcqcn->enabled) return;
  start_rate(qp, env);
  qp.congestion.rate.on_cnp(env.now);
}

}  // namespace uroce::transport
