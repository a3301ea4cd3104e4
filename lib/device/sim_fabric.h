// Hosts (one device each) on one simulated switch, on one virtual clock,
// stepped together: the bed for congestion scenarios (N senders into one
// receiver's port). Host i has MAC 02:00:00:00:01:i and GID ::ffff:10.98.1.i.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sim/sim_switch.h"
#include "uroce/verbs.h"

namespace uroce::device {

class SimFabric {
 public:
  // `dcqcn`: congestion control on every host (nullptr: off); not owned.
  // `delay_cc`: delay-based congestion control instead (nullptr: off).
  SimFabric(std::uint64_t seed, const cc::DcqcnParams* dcqcn, const cc::DelayParams* delay_cc = nullptr);

  // A host on a new switch port whose egress (towards the host) is `egress`.
  Context& add_host(const sim::EgressConfig& egress);

  // Every host polls once; if none moved a frame, virtual time jumps to the
  // next delivery or timer. False once nothing can happen.
  bool step();
  template <typename Done>
  bool run_until(Done done, std::uint64_t limit_ns) {
    const std::uint64_t start = clock.now_ns();
    while (!done()) {
      if (clock.now_ns() - start > limit_ns) return false;
      if (!step()) return done();
    }
    return true;
  }

  sim::VirtualClock clock;
  sim::SimSwitch sw;
  std::vector<std::unique_ptr<Context>> hosts;

 private:
  const cc::DcqcnParams* dcqcn_;
  const cc::DelayParams* delay_cc_;
  std::vector<Context*> devices_;  // hosts, as step_devices takes them
};

}  // namespace uroce::device
