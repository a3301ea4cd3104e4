// Printing a device's counters for a person: the tools' --counters option.
#pragma once

namespace uroce {
class Context;
class QueuePair;

// The non-zero counters of `qp` (if given) and of the device (engine
// counters, drops by reason, port counters: Context::stats(), summed over
// its engines), one per line as "  scope.name value  description". Not from
// a worker or inside a control call (it takes one).
void print_counters(Context& ctx, QueuePair* qp);

}  // namespace uroce
