// uroce-sim's scenarios: the four built in (fairness, incast, join-leave,
// victim) and files of 'name = value' lines that start from one of them.
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
  // PFC on the switch (--pfc, or the file's pfc keys); data in `dscp`,
  // whose priority (dscp >> 3) is the lossless one.
  sim::PfcConfig pfc;
  std::uint8_t dscp = 26;
  // One more flow, from flow 0's host to a host of its own: it shares an
  // ingress with the incast but not its egress (the victim scenario).
  bool victim = false;
  // Per flow: when it starts and stops sending (us).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> active;
};

// The scenario named `name` (built in) or in the file at `name`, with
// `flows` flows (0: the scenario's own count) and their activity set.
// Throws std::invalid_argument (app::usage_error) for an unknown name or a
// bad file.
Scenario load_scenario(const std::string& name, int flows);

// Sets PFC on or off, with the lossless priority the scenario's data uses.
void set_pfc(Scenario& s, bool on);

}  // namespace uroce::simapp
