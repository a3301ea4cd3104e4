// uroce-sim's scenarios: the four on one switch built in (fairness, incast,
// join-leave, victim), the two on a fabric (loss: pairs of hosts through a
// lossy last hop; leafspine: a collective's traffic on a leaf-spine fabric),
// and files of 'name = value' lines that start from one of them. A file's
// `transport` and (fabric) `loss` may list values: the file is then a sweep,
// one run per combination (sweep.h).
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
  // The file's `dcqcn` (on, off or a file); empty: not given (--dcqcn, or on).
  std::string dcqcn;
  // The file's `cc` (dcqcn, delay or off); empty: not given (--cc, or the
  // dcqcn key's choice).
  std::string cc;

  // The transport options of every scenario's RC QPs (the switch scenarios'
  // too). A sweep: the values of `transport` and `loss` in the order given,
  // one run per pair; a file with one value of each is one run, as before.
  bool selective_repeat = false; // transport = sr (gbn: go-back-N, RoCEv2's)
  int spray = 1;                 // paths (UDP source ports) per QP
  std::uint32_t bdp_packets = 0; // bdp: packets in flight at most; 0: the transport's window
  std::vector<std::string> transports;  // gbn | sr; empty: the one above
  std::vector<double> losses;           // empty: `loss` below
  bool sweep() const { return transports.size() > 1 || losses.size() > 1; }

  // The fabric scenarios (loss, leafspine; fabric_run.h).
  bool fabric = false;
  double rtt_us = 8;             // base round trip between two hosts (leafspine: on different leaves)
  std::uint64_t size = 65536;    // bytes per transfer (allreduce: the whole vector)
  std::uint32_t outstanding = 8; // loss: transfers in flight per flow
  double loss = 0;               // per packet each way (on the last hop towards a host)
  int spines = 2, leaves = 2, hosts_per_leaf = 2;
  std::string pattern = "alltoall";  // alltoall | allreduce (a ring all-reduce)
  std::uint64_t fail_link_us = 0;    // when leaf 0's link to spine 0 fails; 0: never
  std::uint64_t reroute_us = 0;      // ... and how long until ECMP leaves it out; 0: never
  double slow_link_gbps = 0;         // leaf 0's link to the last spine at this rate; 0: as the others
};

// The scenario named `name` (built in) or in the file at `name`, with
// `flows` flows (0: the scenario's own count) and their activity set.
// Throws std::invalid_argument (app::usage_error) for an unknown name or a
// bad file.
Scenario load_scenario(const std::string& name, int flows);

// One run of `s` per combination of its transports and losses (transport
// first, loss second, in the order the file gave them), each with one
// value and no lists; `s` itself (without lists) when it is not a sweep.
std::vector<Scenario> sweep_points(const Scenario& s);

// "gbn" or "sr".
inline const char* transport_name(const Scenario& s) { return s.selective_repeat ? "sr" : "gbn"; }

// Sets PFC on or off, with the lossless priority the scenario's data uses.
void set_pfc(Scenario& s, bool on);

}  // namespace uroce::simapp
