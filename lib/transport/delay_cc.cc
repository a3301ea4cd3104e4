// Delay-based congestion control at the transport (cc = delay): what the
// requester and completer tell a QP's cc::DelayWindow (lib/cc/delay.h),
// and the RTT of each ACK. The window caps the packets in flight through
// window_cap (qp.h); below one packet congestion.cc paces the QP.
//
// The RTT of an ACK that acknowledges through PSN p is the time since the
// newest packet at or before p that asked for an ACK left, sent once: a
// packet sent again may be answered for either sending (Karn's rule), so
// a go-back-N rewind forgets the records from the PSN it goes back to.
#include <algorithm>

#include "transport/psn.h"
#include "transport/qp.h"

namespace uroce::transport {
namespace {

DelayState::SentAt& slot(DelayState& d, std::uint32_t i) { return d.sent[(d.first + i) % kDelaySendTimes]; }

// Counters after a window event: the gauges set, the events counted by
// what the window counted meanwhile.
void report(Qp& qp, std::uint64_t increases_before, std::uint64_t decreases_before) {
  const cc::DelayWindow& w = qp.delay->window;
  qp.counters.set(QpCounter::cc_cwnd, static_cast<std::uint64_t>(w.cwnd() * 1000 + 0.5));
  qp.counters.set(QpCounter::cc_rtt_us, (w.srtt_ns() + 500) / 1000);
  qp.counters.add(QpCounter::cc_increases, w.increases() - increases_before);
  qp.counters.add(QpCounter::cc_decreases, w.decreases() - decreases_before);
}

// The completer's window follows the cap: a QP at its cap stays there as
// the cap moves; one climbing back after a timeout (kWindowAfterTimeout)
// keeps its own pace below the cap.
template <typename Event>
void window_event(Qp& qp, Event event) {
  cc::DelayWindow& w = qp.delay->window;
  const std::uint32_t cap_before = window_cap(qp);
  const std::uint64_t inc = w.increases();
  const std::uint64_t dec = w.decreases();
  event(w);
  const std::uint32_t cap = window_cap(qp);
  qp.comp.window = qp.comp.window >= cap_before ? cap : std::min(qp.comp.window, cap);
  report(qp, inc, dec);
}

}  // namespace

void delay_start(Qp& qp, const cc::DelayParams* params) {
  if (params == nullptr || !qp.reliable()) {
    qp.delay.reset();
    return;
  }
  if (qp.delay == nullptr) qp.delay = std::make_unique<DelayState>();
  DelayState& d = *qp.delay;
  cc::DelayPath path;
  path.line_rate_bps = params->line_rate_bps;
  path.base_rtt_ns = params->base_rtt_ns;
  path.packet_bytes = qp.mtu;
  path.hops = 1;  // until the first response's TTL says (completer_on_response)
  d.window.reset(params, path);
  d.first = d.count = d.unsampled = 0;
  qp.counters.set(QpCounter::cc_cwnd, static_cast<std::uint64_t>(d.window.cwnd() * 1000 + 0.5));
  qp.counters.set(QpCounter::cc_rtt_us, 0);
}

void delay_sent(Qp& qp, const Env& env, std::uint32_t psn) {
  if (qp.delay == nullptr) return;
  DelayState& d = *qp.delay;
  if (d.count == kDelaySendTimes) {  // the oldest goes (an ACK for it would have a newer one to use)
    d.first = (d.first + 1) % kDelaySendTimes;
    --d.count;
  }
  slot(d, d.count) = DelayState::SentAt{psn, env.now};
  ++d.count;
}

void delay_forget_from(Qp& qp, std::uint32_t psn) {
  if (qp.delay == nullptr) return;
  DelayState& d = *qp.delay;
  while (d.count > 0 && !psn_before(slot(d, d.count - 1).psn, psn)) --d.count;
}

void delay_acked(Qp& qp, Env& env, std::uint32_t before, std::uint32_t after) {
  if (qp.delay == nullptr) return;
  const std::int32_t n = psn_diff(after, before);
  if (n <= 0) return;
  DelayState& d = *qp.delay;
  bool found = false;
  std::uint64_t sent_ns = 0;
  while (d.count > 0 && psn_before(slot(d, 0).psn, after)) {
    found = true;
    sent_ns = slot(d, 0).ns;
    d.first = (d.first + 1) % kDelaySendTimes;
    --d.count;
  }
  // A sample of 0 (sent and answered within one tick of the clock) is
  // still a sample: count it as 1 ns.
  const std::uint64_t rtt = found ? std::max<std::uint64_t>(env.now - std::min(sent_ns, env.now), 1) : 0;
  delay_ack(qp, env, static_cast<std::uint32_t>(n), rtt);
}

void delay_ack(Qp& qp, Env& env, std::uint32_t packets, std::uint64_t rtt_ns) {
  if (qp.delay == nullptr) return;
  DelayState& d = *qp.delay;
  if (rtt_ns == 0) {
    d.unsampled += packets;
    return;
  }
  const std::uint32_t n = packets + d.unsampled;
  d.unsampled = 0;
  window_event(qp, [&](cc::DelayWindow& w) { w.on_ack(env.now, n, rtt_ns); });
}

void delay_timeout(Qp& qp, Env& env) {
  if (qp.delay == nullptr) return;
  window_event(qp, [&](cc::DelayWindow& w) { w.on_timeout(env.now); });
}

void delay_loss(Qp& qp, Env& env) {
  if (qp.delay == nullptr) return;
  window_event(qp, [&](cc::DelayWindow& w) { w.on_loss(env.now); });
}

}  // namespace uroce::transport
