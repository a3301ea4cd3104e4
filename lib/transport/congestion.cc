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

// cc = delay: below one packet of window the QP's packets leave one per
// rtt / cwnd (DelayWindow::pacing_gap_ns); at or above it the window alone
// holds the QP back. 0: not paced now.
std::uint64_t delay_gap(const Qp& qp, const Env& env) {
  return env.delay != nullptr && qp.delay != nullptr ? qp.delay->window.pacing_gap_ns() : 0;
}

void start_rate(Qp& qp, const Env& env) {
  if (!qp.congestion.started) {
    qp.congestion.rate.reset(env.dcqcn, env.now);
    qp.congestion.started = true;
  }
}

// The rate went from `before` to the current one: what is left of the wait
// for the next departure stretches or shrinks with it, as a token bucket's
// would. Without this, a cut took effect one packet late: at 1.25 Gb/s a
// 4 KiB frame's gap is 27 us, longer than the 12.5 KB above Kmax lasts
// once eight QPs overrun it.
void follow_rate(Qp::Congestion& c, double before, std::uint64_t now) {
  const double after = c.rate.rate_bps();
  if (after == before || c.next_send_ns <= now) return;
  const double left = static_cast<double>(c.next_send_ns - now) * before / after;
  c.next_send_ns = now + static_cast<std::uint64_t>(left);
}

}  // namespace

bool np_on_ce(Qp& qp, Env& env) {
  qp.counters.add(QpCounter::ce_marked_received);
  // A UD QP has no one path back to answer on: its marks are counted only
  // (a datagram's sender would need a CNP to its own address per source).
  if (env.dcqcn == nullptr || !env.dcqcn->enabled || !qp.receives() || qp.type == IBV_QPT_UD) return false;
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
  // The CNP's own path headers (its class and priority), the peer's QPN
  // as destination QP, BECN set, PSN 0, 16 reserved bytes.
  wire::TransportHeaders th;
  th.bth = qp.bth_base;
  th.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kCnp);
  th.bth.set_flags(false, false, 0);
  th.bth.fecn_becn = 0;
  th.bth.set_becn(true);
  th.bth.set_ack_req(false);
  th.bth.psn.set(0);
  wire::TxFrame& f = out[0];
  f.npieces = 1;
  f.pieces[0] = std::span<const std::uint8_t>(kCnpReserved);
  emit_frame(qp.cnp_path, env, f, th, static_cast<std::uint32_t>(kCnpReserved.size()));
  qp.counters.add(QpCounter::cnps_sent);
  return 1;
}

bool pace_allows(Qp& qp, Env& env) {
  if (delay_gap(qp, env) != 0) return qp.congestion.next_send_ns <= env.now;
  if (!paced(env)) return true;
  start_rate(qp, env);
  Qp::Congestion& c = qp.congestion;
  const double before = c.rate.rate_bps();
  c.rate.advance(env.now);
  follow_rate(c, before, env.now);
  return c.next_send_ns <= env.now;
}

void paced_sent(Qp& qp, Env& env, std::uint32_t frame_bytes) {
  if (const std::uint64_t gap = delay_gap(qp, env); gap != 0) {
    qp.congestion.next_send_ns = env.now + gap;
    return;
  }
  if (!paced(env)) return;
  Qp::Congestion& c = qp.congestion;
  c.rate.on_sent(frame_bytes);
  // Wire time at the current rate (preamble, IFG and FCS included).
  const auto ns = static_cast<std::uint64_t>(static_cast<double>(frame_bytes + 24) * 8e9 / c.rate.rate_bps());
  const std::uint64_t floor = env.now > kPacingBurstNs ? env.now - kPacingBurstNs : 0;
  c.next_send_ns = std::max(c.next_send_ns, floor) + ns;
}

std::uint64_t paced_until(const Qp& qp, const Env& env) {
  if ((!paced(env) && delay_gap(qp, env) == 0) || qp.congestion.next_send_ns <= env.now) return 0;
  const bool requests = qp.req_next != qp.sq_posted;
  const bool responses = qp.answers_owed();
  return requests || responses ? qp.congestion.next_send_ns : 0;
}

void rp_on_cnp(Qp& qp, Env& env) {
  qp.counters.add(QpCounter::cnps_received);
  if (env.dcqcn == nullptr || !env.dcqcn->enabled) return;
  start_rate(qp, env);
  Qp::Congestion& c = qp.congestion;
  const double before = c.rate.rate_bps();
  c.rate.on_cnp(env.now);
  follow_rate(c, before, env.now);
}

}  // namespace uroce::transport
