// uroce-sim's fabric scenarios (Scenario::fabric): `loss` (flows pairs of
// hosts, each keeping `outstanding` transfers of `size` in flight through a
// lossy last hop) and `leafspine` (every host of a leaf-spine fabric in an
// all-to-all, or a ring all-reduce, repeated until duration_us). Every
// transfer is one RDMA WRITE on an RC QP with the scenario's transport
// options; every byte of it is checked at the receiver when it completes.
// timeseries.csv holds the goodput per sample; summary.json the goodput,
// flow completion times, the spine links' utilisation and data_intact.
#pragma once

#include <cstdint>
#include <string>

#include "cc/dcqcn.h"
#include "cc/delay.h"
#include "scenario.h"
#include "sweep.h"

namespace uroce::simapp {

// Runs `sc` (one point: no lists) and writes `out`/timeseries.csv and
// `out`/summary.json; its figures and outcome (RunResult::exit_status: 0
// ok; 1 the run failed, or the transport refused the scenario's options,
// said in one line on stderr; 2 a fabric that cannot be built).
// `delay`: delay-based congestion control instead of `dcqcn` (nullptr: off).
RunResult run_fabric(const Scenario& sc, std::uint64_t seed, const cc::DcqcnParams* dcqcn, const std::string& out,
                     const cc::DelayParams* delay = nullptr);

}  // namespace uroce::simapp
