// Why the parser accepted, set aside or rejected a frame. Declared once, as an
// X-macro list of (name, description), so counters, logs and tools share the
// same names.
#pragma once

#include <cstdint>

namespace uroce::wire {

// Frames that are simply not RoCEv2 (ARP, TCP, other UDP) are kNotIp,
// kNotUdp and kNotRoce: not errors, just not ours. Every other non-kOk status
// is a malformed or corrupted RoCEv2 frame and is a counted drop.
#define UROCE_PARSE_STATUS_LIST(X)                                                     \
  X(kOk, "ok", "frame parsed and, if asked, its ICRC verified")                      \
  X(kNotIp, "not_ip", "ether type is neither IPv4 nor IPv6 (not RoCEv2)")             \
  X(kNotUdp, "not_udp", "IP protocol / next header is not UDP (not RoCEv2)")         \
  X(kNotRoce, "not_roce", "UDP destination port is not 4791 (not RoCEv2)")           \
  X(kTruncatedL2, "truncated_l2", "frame shorter than its Ethernet/VLAN header")     \
  X(kTruncatedIp, "truncated_ip", "frame shorter than its IP header")                \
  X(kIpVersion, "ip_version", "IP version field does not match the ether type")      \
  X(kIpv4HeaderLength, "ipv4_ihl", "IPv4 header length below 20 bytes")              \
  X(kIpv4Options, "ipv4_options", "IPv4 options present (RoCEv2 senders use none)")  \
  X(kIpv4Checksum, "ipv4_checksum", "IPv4 header checksum does not verify")          \
  X(kIpLength, "ip_length", "IP length field disagrees with the frame")              \
  X(kIpFragment, "ip_fragment", "IP fragment (RoCEv2 is never fragmented)")          \
  X(kUdpLength, "udp_length", "UDP length field disagrees with the IP length")       \
  X(kTruncatedBth, "truncated_bth", "UDP payload shorter than BTH + ICRC")            \
  X(kBadTver, "bad_tver", "BTH transport header version is not 0")                   \
  X(kUnknownOpcode, "unknown_opcode", "BTH opcode is reserved or not known")          \
  X(kTruncatedHeaders, "truncated_headers", "extension headers run past the packet") \
  X(kPadCount, "pad_count", "payload + pad is not a multiple of 4 bytes")            \
  X(kBadPayloadLength, "payload_length", "payload length not allowed for the opcode") \
  X(kIcrcMismatch, "icrc_mismatch", "ICRC does not match the packet")

enum class ParseStatus : std::uint8_t {
#define UROCE_X(name, short_name, description) name,
  UROCE_PARSE_STATUS_LIST(UROCE_X)
#undef UROCE_X
      kCount
};

inline constexpr int kParseStatusCount = static_cast<int>(ParseStatus::kCount);

// Short snake_case name, for counters and JSON ("icrc_mismatch").
const char* parse_status_name(ParseStatus s);
// One-line description for people.
const char* parse_status_description(ParseStatus s);

// True for frames that are not RoCEv2 at all (not an error).
constexpr bool is_not_roce(ParseStatus s) {
  return s == ParseStatus::kNotIp || s == ParseStatus::kNotUdp || s == ParseStatus::kNotRoce;
}

}  // namespace uroce::wire
