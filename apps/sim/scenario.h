// uroce-sim's scenarios: the three built in (fairness, incast, join-leave)
// and files of 'name = value' lines that start from one of them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/sim_switch.h"

namespace uroce::simapp {

struct Scenario {
  std::string name;
  int flows = 2;
  double gbps = 10;
  std::uint64_t duration_us = 20'000;
  std::uint64_t sample_us = 50;
  sim::EgressConfig bottleneck;
  // Per flow: when it starts and stops sending (us).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> active;
};

// The scenario named `name` (built in) or in the file at `name`, with
// `flows` flows (0: the scenario's own count) and their activity set.
// Throws std::invalid_argument (app::usage_error) for an unknown name or a
// bad file.
Scenario load_scenario(const std::string& name, int flows);

}  // namespace uroce::simapp
