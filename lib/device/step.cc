#include "device/step.h"

#include "engine/engine.h"
#include "verbs/internal.h"

namespace uroce::device {

bool step_devices(sim::VirtualClock& clock, std::span<Context* const> devices, std::uint64_t next_delivery_ns) {
  std::size_t moved = 0;
  for (Context* d : devices) moved += d->progress();
  if (moved > 0) return true;
  std::uint64_t next = next_delivery_ns;
  for (Context* d : devices) {
    for (std::size_t e = 0; e < internal::engine_count(*d); ++e) {
      const std::uint64_t t = internal::engine_of(*d, e).next_timer_ns();
      if (t != 0 && (next == 0 || t < next)) next = t;
    }
  }
  if (next == 0) return false;
  if (next <= clock.now_ns()) clock.advance(1);
  else clock.advance_to(next);
  return true;
}

}  // namespace uroce::device
