// Printing a device's counters for a person: the tools' --counters option.
#pragma once

namespace uroce {
class Context;
class QueuePair;
namespace dpdk {
struct PortIoCounters;
}

// The non-zero counters of `qp` (if given), the engine (drops by reason
// included) and the port (if given), one per line, with their meaning.
void print_counters(Context& ctx, QueuePair* qp, const dpdk::PortIoCounters* port);

}  // namespace uroce
