// DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
// SIGCOMM 2015): the reaction point's rate machine, one per QP, and the
// parameters of both ends. Pure arithmetic on an injected clock: no I/O, no
// allocation; the engine feeds it CNPs, bytes sent and the time.
//
// Reaction point, per QP: current rate Rc, target rate Rt, and alpha.
//   start:        Rc = Rt = start_rate_fraction * line_rate (1: line rate,
//                 as ConnectX; the transport caps the QP's packets in
//                 flight at the path's BDP, window_packets, so that QPs
//                 starting together do not overrun a buffer).
//   CNP:          Rt = Rc if clamp_tgt_rate, or if an increase event came
//                 since the last cut (a byte-counter one; a timer one too
//                 with clamp_tgt_rate_after_time_inc), as ConnectX does; the
//                 paper clamps on every CNP (clamp_tgt_rate = 1). Then
//                 Rc = Rc * (1 - alpha/2); alpha = (1 - g) * alpha + g;
//                 the increase counters and timers restart.
//   alpha timer:  every alpha_period without a CNP, alpha = (1 - g) * alpha.
//   increase:     each time the rate timer (rate_period) or the byte counter
//                 (byte_counter bytes sent) expires, its counter T or BC goes
//                 up by one, then
//                   max(T, BC) <= F:  fast recovery    Rc = (Rt + Rc) / 2
//                   min(T, BC) >  F:  hyper increase   Rt += i * R_HAI, i = min(T, BC) - F;
//                                                      Rc = (Rt + Rc) / 2
//                   otherwise:        additive increase Rt += R_AI; Rc = (Rt + Rc) / 2
//                 R_AI and R_HAI scale with line_rate / increase_reference.
//   Rates stay within [min_rate, line_rate].
#pragma once

#include <cstdint>
#include <string>

namespace uroce::cc {

struct DcqcnParams {
  bool enabled = true;
  // Reaction point (ConnectX: rp_*).
  double line_rate_bps = 100e9;     // the cap (ConnectX: rp_max_rate, 0 = port speed)
  double min_rate_bps = 10e6;       // the floor (rp_min_rate)
  double g = 1.0 / 256;             // alpha gain (rp_dce_tcp_g as a fraction)
  double initial_alpha = 1.0;       // (rp_initial_alpha_value / 1023)
  std::uint64_t alpha_period_ns = 55'000;  // (rp_dce_tcp_rtt)
  std::uint64_t rate_period_ns = 55'000;   // rate-increase timer T (rp_time_reset)
  std::uint64_t byte_counter = 10'000'000; // bytes per byte-counter expiry B (rp_byte_reset)
  std::uint32_t fast_recovery_steps = 5;   // F (rp_threshold)
  // R_AI, R_HAI: half the paper's 40 Mb/s (chosen for 40 Gb/s links);
  // conf/dcqcn.conf says why.
  double ai_rate_bps = 20e6;        // R_AI (rp_ai_rate)
  double hai_rate_bps = 200e6;      // R_HAI (rp_hai_rate)
  // The rate a QP starts at, current and target, as a fraction of
  // line_rate_bps: 1, as ConnectX (rp_max_rate). An eighth was uroce's
  // default until the BDP cap below: without it N QPs starting together
  // at line rate overran a buffer of Kmax + one BDP before the port could
  // mark a packet of each, and with it a QP alone needed ~0.25 s to reach
  // 100 Gb/s.
  double start_rate_fraction = 1.0;
  // The path's base round trip, for the cap on each QP's packets in flight:
  // line_rate * window_rtt (window_packets), so that N QPs starting
  // together at line rate put at most N bandwidth-delay products into the
  // fabric before the first CNP can reach them (HPCC's evaluation runs
  // DCQCN with such a window, "dcqcn_vwin"). 0: no cap.
  std::uint64_t window_rtt_ns = 16'000;
  // R_AI and R_HAI are for this line rate and scale with line_rate_bps, so
  // a QP recovers the same share of the line in the same time at any rate
  // (HPCC's evaluation scales them too); 0: as given.
  double increase_reference_bps = 10e9;
  // A CNP sets Rt = Rc always (the paper), or only as the first cut after
  // an increase event (ConnectX's default), so a QP cut several times in a
  // row recovers towards the rate before the series.
  bool clamp_tgt_rate = false;                // (rp_clamp_tgt_rate)
  bool clamp_tgt_rate_after_time_inc = true;  // timer increases count as events (rp_clamp_tgt_rate_after_time_inc)
  // Notification point (ConnectX: np_*).
  // At most one CNP per QP per interval (np_min_time_between_cnps: 4 us in
  // NVIDIA's note; the paper: 50 us, which let a QP that was cut just
  // before the queue passed Kmax go 50 us uncut above it).
  std::uint64_t cnp_interval_ns = 4'000;
  std::uint8_t cnp_dscp = 48;       // (np_cnp_dscp)
  std::uint8_t cnp_priority = 6;    // 802.1p priority of CNPs when VLAN-tagged (np_cnp_prio)
  std::uint8_t data_ecn = 2;        // ECN codepoint on our data packets: 2 = ECT(0), 1 = ECT(1)
};

// Reads `key = value` lines (# comments) into `p`, names as in
// conf/dcqcn.conf. Returns "" or a one-line error naming the line.
std::string parse_dcqcn_params(const std::string& text, DcqcnParams& p);

// The most request packets in flight that keep a QP at line rate over
// window_rtt_ns with frames of `mtu` bytes of payload (headers, preamble
// and inter-frame gap counted: 98 bytes), at least 1; 0 when there is no
// cap (window_rtt_ns = 0).
std::uint32_t window_packets(const DcqcnParams& p, std::uint32_t mtu);

class DcqcnRate {
 public:
  DcqcnRate() = default;
  DcqcnRate(const DcqcnParams* params, std::uint64_t now_ns) { reset(params, now_ns); }
  // The start rate, alpha at its initial value, timers starting at `now_ns`.
  void reset(const DcqcnParams* params, std::uint64_t now_ns);

  // A CNP arrived for this QP.
  void on_cnp(std::uint64_t now_ns);
  // `bytes` left this QP (payload and headers on the wire).
  void on_sent(std::uint64_t bytes);
  // Runs the alpha and rate timers up to `now_ns` (every period that has
  // passed, in order). Call it whenever the time moves.
  void advance(std::uint64_t now_ns);

  double rate_bps() const { return rc_; }
  double target_bps() const { return rt_; }
  double alpha() const { return alpha_; }
  std::uint32_t timer_count() const { return t_; }
  std::uint32_t byte_count() const { return bc_; }
  std::uint64_t cnps() const { return cnps_; }

 private:
  void increase();
  void bound_rates();
  // R_AI's and R_HAI's factor: line rate over increase_reference_bps.
  double scale() const {
    return p_->increase_reference_bps > 0 ? p_->line_rate_bps / p_->increase_reference_bps : 1.0;
  }
  // An increase event since the last cut that lets the next cut set Rt = Rc.
  bool clamps_target() const;

  const DcqcnParams* p_ = nullptr;
  double rc_ = 0;
  double rt_ = 0;
  double alpha_ = 1;
  std::uint32_t t_ = 0;   // rate-timer expiries since the last CNP
  std::uint32_t bc_ = 0;  // byte-counter expiries since the last CNP
  std::uint64_t bytes_ = 0;  // sent since the byte counter last expired
  std::uint64_t alpha_due_ = 0;
  std::uint64_t rate_due_ = 0;
  std::uint64_t cnps_ = 0;
};

}  // namespace uroce::cc
