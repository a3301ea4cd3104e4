// uroce-sim's sweeps: a scenario file whose `transport` or (fabric) `loss`
// lists several values runs once per combination, each run into a
// directory of its own (timeseries.csv, summary.json as a single run), and
// the figures of all of them side by side in sweep.csv and sweep.json and
// printed as a table: goodput, its ratio to the same transport's lossless
// run, flow completion times, packets resent and dropped, data_intact, seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "scenario.h"

namespace uroce::simapp {

// What one run ended with, for its row of a sweep.
struct RunResult {
  enum class Outcome {
    ok,       // ran to the end, every byte checked and equal
    failed,   // ran, but a transfer failed or the data differs
    refused,  // the transport refused the scenario's options: no run
    unusable, // the scenario cannot be built (bad usage, exit status 2)
  };
  Outcome outcome = Outcome::failed;
  std::string message;  // refused, failed: why, in one line
  double goodput_bps = 0;
  double fct_p50_us = 0, fct_p99_us = 0, fct_max_us = 0;
  std::uint64_t transfers = 0;
  std::uint64_t retransmitted_packets = 0;
  std::uint64_t lost_packets = 0;  // to the scenario's random loss
  std::uint64_t queue_drops = 0;   // at full switch queues
  bool data_intact = false;

  // A single run's exit status: 0 ok; 1 failed or refused; 2 unusable.
  int exit_status() const {
    return outcome == Outcome::ok ? 0 : outcome == Outcome::unusable ? 2 : 1;
  }
};

// Runs one point of a sweep (a scenario without lists), writing its files
// into `out` (which exists).
using RunPoint = std::function<RunResult(const Scenario& point, const std::string& out)>;

// Runs every point of `sc` (sweep_points) with `run`, each into
// `out`/TRANSPORT (switch scenarios) or `out`/TRANSPORT-lossP (fabric), a
// point the transport refuses as a row saying so; then writes
// `out`/sweep.csv and `out`/sweep.json and prints the table. Returns 0 if
// every point ran with its data intact, 1 if any did not (the sweep is
// incomplete), 2 if a point cannot be built (bad usage; the sweep stops).
int run_sweep(const Scenario& sc, std::uint64_t seed, bool dcqcn, const std::string& out, const RunPoint& run);

// The value at fraction `p` (0 to 1) of the sorted `v` (nearest rank); 0
// for none. For flow completion times.
double percentile(std::vector<double> v, double p);

}  // namespace uroce::simapp
