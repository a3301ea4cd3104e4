// Hosts (one device each) on a simulated leaf-spine fabric
// (sim/leaf_spine.h), on one virtual clock, stepped together: the bed for
// multipath and loss scenarios.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/leaf_spine.h"
#include "uroce/verbs.h"

namespace uroce::device {

class LeafSpineFabric {
 public:
  // Every host of `config` (which must pass its check()) gets a device;
  // `dcqcn`: congestion control on every host (nullptr: off), not owned.
  // error() says what failed if a device could not be opened (its entry
  // in `hosts` is then null). `delay_cc`: delay-based congestion control
  // instead of dcqcn (nullptr: off).
  LeafSpineFabric(std::uint64_t seed, const sim::LeafSpineConfig& config, const cc::DcqcnParams* dcqcn,
                  const cc::DelayParams* delay_cc = nullptr);
  const std::string& error() const { return error_; }

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
  sim::LeafSpine net;
  std::vector<std::unique_ptr<Context>> hosts;

 private:
  std::vector<Context*> devices_;  // hosts, as step_devices takes them
  std::string error_;
};

}  // namespace uroce::device
