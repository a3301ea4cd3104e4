// --sr, --spray N and --bdp N: the TransportOptions (issue 30) a tool asks
// for on its RC QPs, given to both ends (they exchange QP numbers
// themselves, so nothing agrees on them but the user).
#pragma once

#include <string>

#include "common/args.h"
#include "uroce/verbs.h"

namespace uroce::app {

inline constexpr const char* kTransportUsage =
    "      --sr             selective repeat (both ends: uroce's own mode, docs/transport.md)\n"
    "      --spray N        each packet on one of N paths (UDP source ports), 1-64; needs --sr\n"
    "      --bdp N          at most N packets in flight per QP (the path's bandwidth-delay product;\n"
    "                       default 0: the transport's window)\n";

// Reads `a` if it is one of the three flags (true), its value from `reader`.
inline bool transport_flag(const std::string& a, ArgReader& reader, TransportOptions& t) {
  if (a == "--sr") {
    t.selective_repeat = true;
  } else if (a == "--spray") {
    const std::uint64_t n = reader.number("--spray");
    if (n < 1 || n > 64) usage_error("--spray takes 1 to 64 paths");
    t.spray_paths = static_cast<std::uint8_t>(n);
  } else if (a == "--bdp") {
    const std::uint64_t n = reader.number("--bdp");
    if (n > UINT32_MAX) usage_error("--bdp takes a number of packets up to 4294967295");
    t.bdp_packets = static_cast<std::uint32_t>(n);
  } else {
    return false;
  }
  return true;
}

// After the flags: usage_error for what the transport cannot have, so that
// asking for selective repeat never runs go-back-N in silence.
inline void check_transport_flags(const TransportOptions& t) {
  if (t.spray_paths > 1 && !t.selective_repeat) usage_error("--spray needs --sr (sprayed packets arrive out of order)");
  const TransportOptions can = QueuePair::transport_capabilities();
  if ((t.selective_repeat && !can.selective_repeat) || t.spray_paths > can.spray_paths) {
    usage_error("--sr and --spray: this build's transport does not run them");
  }
}

// Whether the user asked for anything beyond RoCEv2 (the tools then print
// what the QP runs, read back from it).
inline bool transport_asked(const TransportOptions& t) {
  return t.selective_repeat || t.spray_paths != 1 || t.bdp_packets != 0;
}

// "go-back-N", "selective repeat, 4 paths, BDP 64 packets": what a QP runs.
inline std::string describe_transport(const TransportOptions& t) {
  std::string s = t.selective_repeat ? "selective repeat" : "go-back-N";
  if (t.spray_paths > 1) s += ", " + std::to_string(t.spray_paths) + " paths";
  if (t.bdp_packets != 0) s += ", BDP " + std::to_string(t.bdp_packets) + " packets";
  return s;
}

}  // namespace uroce::app
