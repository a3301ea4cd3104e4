// Delay-based congestion control after Swift (Kumar et al., "Swift: Delay is
// Simple and Effective for Congestion Control in the Datacenter", SIGCOMM
// 2020): a congestion window per QP driven by the round trip of each ACK,
// needing nothing from the switches. Pure arithmetic on an injected clock:
// no I/O, no allocation; the engine feeds it ACKs (with their RTT), losses
// and timeouts, and reads back how much it may send.
//
// Per QP: cwnd (packets, a double; below 1 the QP sends one packet per
// rtt / cwnd), the time of the last decrease, and a count of retransmit
// timeouts in a row. `rtt` below is the latest RTT sample (the path's base
// RTT before the first); the smoothed RTT is for counters only.
//
//   target(cwnd) = base_target + hops * per_hop
//                  + clamp(alpha / sqrt(cwnd) + beta, 0, fs_range)
//       alpha = fs_range / (1/sqrt(fs_min_cwnd) - 1/sqrt(fs_max_cwnd)),
//       beta  = -alpha / sqrt(fs_max_cwnd):
//       the flow-scaling term is fs_range at cwnd = fs_min_cwnd and 0 at
//       fs_max_cwnd; the fewer packets a QP has in flight (the more flows
//       share its bottleneck) the larger its target, so small windows grow
//       and large ones give way, and many flows converge on fair shares.
//   can_decrease  = no decrease yet, or now - t_last_decrease >= rtt
//                   (at most one decrease per round trip).
//   start:        cwnd = max_cwnd (line rate at once; max_cwnd, the path's
//                 BDP unless configured, keeps simultaneous starts from
//                 putting more than their BDPs in flight).
//   ACK of n packets with delay d (d becomes rtt first; the target is
//   computed at the cwnd before the ACK):
//       retransmit count = 0;
//       d <  target:  additive increase, ai packets per round trip:
//                     cwnd += ai * n / cwnd  when cwnd >= 1,
//                     cwnd += ai * n         when cwnd <  1;
//       d >= target:  if can_decrease and m >= target,
//                     cwnd *= max(1 - beta_md * (m - target) / m, 1 - max_mdf);
//                     otherwise nothing (counted as held).
//       m: with round_least (the default) the least RTT of the round, the
//       samples since the last decrease or, when no decrease came, since
//       one round trip (the latest RTT) ago; without it m = d (Swift).
//       A queue in the fabric raises every sample of a round trip; a host
//       kept off its CPU for a while (a software peer on a busy machine)
//       raises the samples that waited for it, not the others, and should
//       not take the window to its floor. In uroce-sim's scenarios the two
//       rules give the same shares (docs/congestion.md).
//   retransmit timeout: retransmit count += 1; at retx_reset_threshold (or
//                 more) cwnd = min_cwnd; otherwise, if can_decrease,
//                 cwnd *= 1 - max_mdf.
//   loss found otherwise (a NAK sequence error, a selective-ACK hole;
//                 Swift's fast recovery): retransmit count = 0 (the peer
//                 answered), and if can_decrease, cwnd *= 1 - max_mdf.
//   Every rule ends with cwnd = clamp(cwnd, min_cwnd, max_cwnd). A decrease
//   rule that ran (even one a clamp turned into no change) sets
//   t_last_decrease = now; an increase never does. (Swift's Algorithm 1
//   sets it whenever cwnd <= its previous value, which includes an increase
//   held at max_cwnd: a QP sitting at its cap would then never be allowed a
//   decrease until a round trip after its last ACK below target.)
//   Sending: when cwnd >= 1 at most floor(cwnd) packets in flight
//   (window_packets()); when cwnd < 1 one packet in flight and a gap of
//   rtt / cwnd between packets, at most the floor's gap on an RTT at the
//   largest target, (base_target + hops * per_hop + fs_range) / min_cwnd
//   (pacing_gap_ns(); Swift has no such bound, and a host delay of
//   milliseconds made its gap seconds).
//
// Swift runs two such windows, one on the fabric's share of the delay and
// one on the hosts', and sends on the smaller; this is one window on the
// whole RTT the engine measures (which includes both hosts' queues).
#pragma once

#include <cstdint>
#include <string>

namespace uroce::cc {

// Defaults for a 100 Gb/s fabric with a base RTT of about 10 us; conf/delay.conf
// gives each one's source. Times in ns, windows in packets.
struct DelayParams {
  std::uint64_t base_target_ns = 12'000;  // target on a one-hop path with few flows
  std::uint64_t per_hop_ns = 1'500;       // added per switch on the path
  std::uint64_t fs_range_ns = 10'000;     // flow scaling: the most it adds
  double fs_min_cwnd = 0.1;               // ... reached at this window
  double fs_max_cwnd = 100;               // ... and 0 from this window up
  double ai = 1;                          // additive increase, packets per round trip
  double beta_md = 0.8;                   // multiplicative decrease per unit of excess delay
  double max_mdf = 0.5;                   // the largest cut in one decrease
  double min_cwnd = 0.001;                // the floor
  double max_cwnd = 0;                    // the cap; 0 = the path's BDP (DelayPath)
  std::uint32_t retx_reset_threshold = 5; // timeouts in a row that reset cwnd to min_cwnd
  double srtt_weight = 0.125;             // srtt += w * (rtt - srtt) per sample
  bool round_least = true;                // a decrease compares the round's least RTT (false: the ACK's, Swift)
  // The path the transport gives each QP's window (DelayPath, with the
  // QP's path MTU): the port's line rate (the sender's; no port reports it
  // to the transport, so it is configured, as DCQCN's rp_line_rate_gbps)
  // and the round trip with empty queues.
  double line_rate_bps = 100e9;
  std::uint64_t base_rtt_ns = 10'000;
};

// Reads `name = value` lines (# comments) into `p`, names as in
// conf/delay.conf (times in us there). Returns "" or a one-line error
// naming the line: a line that is not `name = value`, an unknown name, a
// value that is not a finite number, or one outside the name's range
// (the message says the range). Keys the text does not name keep their
// value in `p`; on an error `p` may hold the lines before it.
std::string parse_delay_params(const std::string& text, DelayParams& p);

// What the caller knows of a QP's path.
struct DelayPath {
  double line_rate_bps = 100e9;     // the sender's port
  std::uint64_t base_rtt_ns = 10'000;  // round trip with empty queues
  std::uint32_t packet_bytes = 4096;   // bytes per full packet (the path MTU's payload, or on the wire)
  std::uint32_t hops = 1;              // switches between the two hosts
};

// The path's bandwidth-delay product in packets, rounded up (a window of it
// fills the line), at least 1.
double bdp_packets(const DelayPath& path);

// The target delay (ns) at window `cwnd` on a path of `hops` switches.
double target_delay_ns(const DelayParams& p, std::uint32_t hops, double cwnd);

// The switches an IP packet crossed, from the TTL (or IPv6 hop limit) it
// arrived with, as Swift counts them: the initial value is taken to be the
// smallest of 64, 128 and 255 at or above it (what hosts send), and each
// router on the way took one. A path of switches that forward without
// routing (a layer-2 fabric) shows none: it counts as one switch, the
// single-switch case. More than kMaxHops is no datacenter path but a
// sender with an initial TTL of its own (ibv_rc_pingpong's address handles
// say 1; the GRH hop limit is the program's): also 1.
inline constexpr std::uint32_t kMaxHops = 16;
std::uint32_t hops_from_ttl(std::uint8_t ttl);

class DelayWindow {
 public:
  DelayWindow() = default;
  DelayWindow(const DelayParams* params, const DelayPath& path) { reset(params, path); }
  // cwnd at its cap, the counters at 0, no RTT sample yet (rtt_ns() is the
  // path's base RTT, srtt_ns() 0). `params` must outlive the window.
  void reset(const DelayParams* params, const DelayPath& path);

  // An ACK (or READ response) that acknowledged `packets` packets, the
  // newest of them sent `rtt_ns` ago (the newest: an ACK that waited at the
  // receiver for more packets to cover is not a queue).
  void on_ack(std::uint64_t now_ns, std::uint32_t packets, std::uint64_t rtt_ns);
  // The retransmit timer expired.
  void on_timeout(std::uint64_t now_ns);
  // A loss found without a timeout: a NAK sequence error, a selective-ACK hole.
  void on_loss(std::uint64_t now_ns);

  double cwnd() const { return cwnd_; }
  // Packets the QP may have in flight: floor(cwnd), at least 1.
  std::uint32_t window_packets() const;
  // Time between two packets' departures: rtt / cwnd (rounded to ns) when
  // cwnd < 1, else 0 (the window alone limits the QP).
  std::uint64_t pacing_gap_ns() const;
  // The target an ACK arriving now is compared with.
  double target_ns() const { return target_delay_ns(*p_, hops_, cwnd_); }
  // The switches on the path, as the latest ACK's TTL gives them (hops_from_ttl).
  void set_hops(std::uint32_t hops) { hops_ = hops; }
  std::uint32_t hops() const { return hops_; }
  double min_cwnd() const { return p_->min_cwnd; }
  double max_cwnd() const { return max_cwnd_; }

  std::uint64_t rtt_ns() const { return rtt_ns_; }
  // EWMA of the samples with DelayParams::srtt_weight; 0 before the first.
  std::uint64_t srtt_ns() const { return static_cast<std::uint64_t>(srtt_ns_ + 0.5); }
  std::uint32_t retransmit_count() const { return retx_; }

  // Counters for the operator.
  std::uint64_t increases() const { return increases_; }  // ACKs below target
  std::uint64_t decreases() const { return decreases_; }  // decreases applied (ACK, loss, timeout, reset)
  std::uint64_t decreases_held() const { return held_; }  // ACKs above target within a round trip of a decrease
  std::uint64_t timeouts() const { return timeouts_; }
  std::uint64_t losses() const { return losses_; }        // on_loss calls
  std::uint64_t resets() const { return resets_; }        // cwnd set to min_cwnd by retx_reset_threshold

 private:
  bool can_decrease(std::uint64_t now_ns) const;
  // Multiplies cwnd by `factor`, clamps, and starts the round trip in which
  // no other decrease may follow.
  void decrease(std::uint64_t now_ns, double factor);
  void clamp();

  const DelayParams* p_ = nullptr;
  std::uint32_t hops_ = 0;
  double max_cwnd_ = 1;
  double cwnd_ = 1;
  std::uint64_t rtt_ns_ = 0;
  double srtt_ns_ = 0;
  bool decreased_ = false;          // a decrease happened (t_last_decrease_ is valid)
  std::uint64_t t_last_decrease_ = 0;
  std::uint64_t round_start_ns_ = 0;  // round_least: when the round began
  std::uint64_t round_least_ns_ = 0;  // ... and its least RTT so far (0: no sample yet)
  std::uint32_t retx_ = 0;
  std::uint64_t increases_ = 0;
  std::uint64_t decreases_ = 0;
  std::uint64_t held_ = 0;
  std::uint64_t timeouts_ = 0;
  std::uint64_t losses_ = 0;
  std::uint64_t resets_ = 0;
};

}  // namespace uroce::cc
