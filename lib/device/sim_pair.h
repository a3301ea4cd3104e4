// Two devices joined by a simulated link on one virtual clock, stepped
// together: the test bed for the transport and for uroce-perf --sim.
#pragma once

#include <cstdint>
#include <memory>

#include "sim/sim_link.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"

namespace uroce::device {

class SimPair {
 public:
  // `dcqcn`: congestion control on both devices (nullptr: off);
  // `min_ack_timeout`: both devices' floor under the local ACK timeout
  // (PortConfig; 0 none); `delay_cc`: delay-based congestion control on
  // both (nullptr: off; not with dcqcn).
  explicit SimPair(std::uint64_t seed, sim::Impairments a_to_b = {}, sim::Impairments b_to_a = {},
                   const cc::DcqcnParams* dcqcn = nullptr, std::uint8_t min_ack_timeout = 0,
                   const cc::DelayParams* delay_cc = nullptr);

  // Connects qa (on a) and qb (on b) to each other.
  int connect(QueuePair* qa, QueuePair* qb, const ConnectParams& p = {});

  // One round: both engines poll; if neither moved a frame, virtual time
  // jumps to the next delivery or timer. False once nothing can happen.
  bool step();

  // Steps until `done()` holds (true) or `limit_ns` of virtual time passes or
  // nothing is left to happen (false).
  template <typename Done>
  bool run_until(Done done, std::uint64_t limit_ns = 10'000'000'000ull) {
    const std::uint64_t start = clock.now_ns();
    while (!done()) {
      if (clock.now_ns() - start > limit_ns) return false;
      if (!step()) return done();
    }
    return true;
  }

  std::uint64_t frames_sent() const { return link.stats(0).sent + link.stats(1).sent; }

  sim::VirtualClock clock;
  sim::SimLink link;
  std::unique_ptr<Context> a;
  std::unique_ptr<Context> b;
};

}  // namespace uroce::device
