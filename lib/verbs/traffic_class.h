// The traffic class an address vector's frames carry when the fabric has a
// lossless priority (PortConfig::pfc_priority). The byte is the IPv4 ToS /
// IPv6 traffic class: DSCP in its top six bits, ECN in the low two. NICs
// trusting DSCP (ConnectX "trust dscp") and common switch defaults map a
// DSCP to the 802.1p priority DSCP >> 3, which PFC then pauses or not.
#pragma once

#include <cstdint>

namespace uroce::internal {

constexpr int dscp_priority(std::uint8_t dscp) { return dscp >> 3; }

struct SentClass {
  std::uint8_t traffic_class = 0;  // what the IP header carries
  bool outside_pfc = false;        // an explicit DSCP of a priority PFC does not protect
};

// `asked` (ah.grh.traffic_class) on a fabric whose lossless priority is
// `pfc_priority` (-1: none, `asked` as it is). DSCP 0 is the verbs default,
// "no class chosen": it becomes pfc_priority << 3, as the kernel's per-device
// default RoCE ToS fills in a class nobody chose, so a program that never
// heard of PFC is lossless. An explicit DSCP is the program's choice and is
// kept, flagged when its priority is not the lossless one (its packets may
// be dropped under congestion, and a lost packet costs an RC QP a go-back-N
// retransmission).
constexpr SentClass sent_traffic_class(std::uint8_t asked, int pfc_priority) {
  if (pfc_priority < 0) return {asked, false};
  const auto dscp = static_cast<std::uint8_t>(asked >> 2);
  if (dscp == 0) return {static_cast<std::uint8_t>(pfc_priority << 5 | (asked & 3)), false};
  return {asked, dscp_priority(dscp) != pfc_priority};
}

}  // namespace uroce::internal
