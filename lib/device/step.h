// One round of a simulation on virtual time, shared by the two-device pair
// and the switched fabric: every device polls once; if none moved a frame,
// the clock jumps to the next delivery or timer (of any engine).
#pragma once

#include <cstdint>
#include <span>

#include "sim/sim_link.h"
#include "uroce/verbs.h"

namespace uroce::device {

// False once nothing can happen (no frame on its way, no timer armed).
bool step_devices(sim::VirtualClock& clock, std::span<Context* const> devices, std::uint64_t next_delivery_ns);

}  // namespace uroce::device
