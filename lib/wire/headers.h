// Wire headers of RoCEv2 frames: Ethernet (+802.1Q), IPv4, IPv6, UDP, the
// InfiniBand BTH and its extension headers, and the CNP payload.
//
// One struct per header, byte-exact (sizes pinned below), big-endian fields
// converted at the accessor. Field names follow the IBTA specification
// (Volume 1, chapter 9.2-9.3, and Annex A17 for RoCEv2).
#pragma once

#include <array>
#include <cstdint>

#include "wire/byteorder.h"

namespace uroce::wire {

using MacAddr = std::array<std::uint8_t, 6>;
using Ipv4Addr = std::array<std::uint8_t, 4>;
using Ipv6Addr = std::array<std::uint8_t, 16>;

inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherTypeIpv6 = 0x86dd;
inline constexpr std::uint16_t kEtherTypeVlan = 0x8100;
inline constexpr std::uint16_t kEtherTypeArp = 0x0806;
inline constexpr std::uint8_t kIpProtoUdp = 17;
inline constexpr std::uint16_t kRoceV2Port = 4791;  // IANA, RoCEv2 Annex A17.2
inline constexpr std::uint32_t kIcrcBytes = 4;

struct EthHdr {
  MacAddr dst;
  MacAddr src;
  Be16 ether_type;
};

// The 4 bytes that follow a 0x8100 ether_type: tag control, then the real type.
struct VlanTag {
  Be16 tci;
  Be16 ether_type;
  std::uint16_t vid() const { return tci.get() & 0x0fff; }
  std::uint8_t pcp() const { return static_cast<std::uint8_t>(tci.get() >> 13); }
};

struct Ipv4Hdr {
  std::uint8_t version_ihl;
  std::uint8_t tos;  // DSCP (6) | ECN (2)
  Be16 total_length;
  Be16 id;
  Be16 frag;  // flags (3) | fragment offset (13)
  std::uint8_t ttl;
  std::uint8_t protocol;
  Be16 checksum;
  Ipv4Addr src;
  Ipv4Addr dst;

  std::uint8_t version() const { return version_ihl >> 4; }
  std::uint8_t ihl() const { return version_ihl & 0x0f; }
  std::uint8_t ecn() const { return tos & 0x03; }
  std::uint8_t dscp() const { return tos >> 2; }
  bool more_fragments() const { return (frag.get() & 0x2000) != 0; }
  std::uint16_t fragment_offset() const { return frag.get() & 0x1fff; }
};

struct Ipv6Hdr {
  Be32 vtc_flow;  // version (4) | traffic class (8) | flow label (20)
  Be16 payload_length;
  std::uint8_t next_header;
  std::uint8_t hop_limit;
  Ipv6Addr src;
  Ipv6Addr dst;

  std::uint8_t version() const { return static_cast<std::uint8_t>(vtc_flow.get() >> 28); }
  std::uint8_t traffic_class() const {
    return static_cast<std::uint8_t>(vtc_flow.get() >> 20);
  }
  std::uint32_t flow_label() const { return vtc_flow.get() & 0xfffff; }
  std::uint8_t ecn() const { return traffic_class() & 0x03; }
};

struct UdpHdr {
  Be16 src_port;
  Be16 dst_port;
  Be16 length;
  Be16 checksum;
};

// Base Transport Header (IBTA 9.2). Byte 1: SE | MigReq | PadCnt(2) | TVer(4).
// Byte 4: FECN | BECN | resv6 ("resv8a" in the ICRC mask). Byte 8: AckReq | resv7.
struct Bth {
  std::uint8_t opcode;
  std::uint8_t flags;
  Be16 pkey;
  std::uint8_t fecn_becn;
  Be24 dest_qp;
  std::uint8_t ack_req_byte;
  Be24 psn;

  bool se() const { return (flags & 0x80) != 0; }
  bool mig_req() const { return (flags & 0x40) != 0; }
  std::uint8_t pad_count() const { return (flags >> 4) & 0x03; }
  std::uint8_t tver() const { return flags & 0x0f; }
  bool fecn() const { return (fecn_becn & 0x80) != 0; }
  bool becn() const { return (fecn_becn & 0x40) != 0; }
  bool ack_req() const { return (ack_req_byte & 0x80) != 0; }

  void set_flags(bool solicited, bool mig, std::uint8_t pad, std::uint8_t version = 0) {
    flags = static_cast<std::uint8_t>((solicited ? 0x80 : 0) | (mig ? 0x40 : 0) |
                                      ((pad & 0x03) << 4) | (version & 0x0f));
  }
  void set_pad_count(std::uint8_t pad) {
    flags = static_cast<std::uint8_t>((flags & ~0x30) | ((pad & 0x03) << 4));
  }
  void set_ack_req(bool a) { ack_req_byte = a ? 0x80 : 0; }
  void set_becn(bool b) {
    fecn_becn = static_cast<std::uint8_t>((fecn_becn & ~0x40) | (b ? 0x40 : 0));
  }
};

// RDMA Extended Transport Header (9.3.3).
struct Reth {
  Be64 va;
  Be32 rkey;
  Be32 dma_length;
};

// ACK Extended Transport Header (9.3.5). Syndrome bit 7 is reserved, bits 6:5
// give the kind, bits 4:0 the credit count, RNR timer code or NAK code.
struct Aeth {
  std::uint8_t syndrome;
  Be24 msn;
};

// Atomic Extended Transport Header (9.3.4).
struct AtomicEth {
  Be64 va;
  Be32 rkey;
  Be64 swap_add;
  Be64 compare;
};

// Atomic Acknowledge Extended Transport Header (9.3.6).
struct AtomicAckEth {
  Be64 orig_data;
};

// Immediate Data Extended Transport Header (9.3.7).
struct ImmDt {
  Be32 imm;
};

// Invalidate Extended Transport Header (9.3.8): the rkey to invalidate.
struct Ieth {
  Be32 rkey;
};

// Datagram Extended Transport Header (9.3.2).
struct Deth {
  Be32 qkey;
  std::uint8_t reserved;
  Be24 src_qp;
};

// XRC Extended Transport Header (IBTA annex A14): the XRC SRQ at the
// receiver a request is for, 8 reserved bits then its 24-bit number.
struct Xrceth {
  std::uint8_t reserved;
  Be24 srqn;
};

// Selective repeat's request header (uroce's; docs/transport.md): where the
// packet's bytes go in its message, whatever came before it.
struct Sreth {
  Be32 offset;          // the packet's first byte in its message
  Be32 length;          // the message's length
  Be24 recv_index;      // the receive WQE it consumes: its ordinal among the QP's receive-consuming messages
  std::uint8_t flags;   // kSrethLast: the message's last packet
  std::uint8_t reserved;
  Be24 first_psn;       // the message's first PSN
};
inline constexpr std::uint8_t kSrethLast = 0x01;

// Selective repeat's SACK (uroce's): the PSN the responder expects, and
// bit i (bits[i / 8], most significant bit first) for PSN expected + 1 + i
// that it holds.
struct Sacketh {
  std::uint8_t reserved;
  Be24 expected;
  std::array<std::uint8_t, 16> bits;
};

// FLUSH Extended Transport Header (IBTA 1.5, 9.3.9): selectivity level and
// placement type in the low bits.
struct Feth {
  Be32 bits;
};

// Congestion Notification Packet payload (Annex A17.9.3): 16 reserved bytes
// between the BTH and the ICRC.
struct CnpPayload {
  std::array<std::uint8_t, 16> reserved;
};

static_assert(sizeof(EthHdr) == 14);
static_assert(sizeof(VlanTag) == 4);
static_assert(sizeof(Ipv4Hdr) == 20);
static_assert(sizeof(Ipv6Hdr) == 40);
static_assert(sizeof(UdpHdr) == 8);
static_assert(sizeof(Bth) == 12);
static_assert(sizeof(Reth) == 16);
static_assert(sizeof(Aeth) == 4);
static_assert(sizeof(AtomicEth) == 28);
static_assert(sizeof(AtomicAckEth) == 8);
static_assert(sizeof(ImmDt) == 4);
static_assert(sizeof(Ieth) == 4);
static_assert(sizeof(Deth) == 8);
static_assert(sizeof(Feth) == 4);
static_assert(sizeof(Xrceth) == 4);
static_assert(sizeof(Sreth) == 16);
static_assert(sizeof(Sacketh) == 20);
static_assert(sizeof(CnpPayload) == 16);

// The IPv6 link-local address of an interface: fe80::/64 and the MAC's
// modified EUI-64 (RFC 4291 appendix A). A RoCEv2 port's GID index 0.
inline Ipv6Addr ipv6_link_local(const std::uint8_t mac[6]) {
  return {0xfe, 0x80, 0, 0, 0, 0, 0, 0, static_cast<std::uint8_t>(mac[0] ^ 0x02), mac[1], mac[2], 0xff, 0xfe,
          mac[3], mac[4], mac[5]};
}

// ARP for IPv4 over Ethernet (RFC 826).
struct ArpHdr {
  Be16 htype;  // 1: Ethernet
  Be16 ptype;  // 0x0800: IPv4
  std::uint8_t hlen;
  std::uint8_t plen;
  Be16 oper;   // 1 request, 2 reply
  MacAddr sha;
  Ipv4Addr spa;
  MacAddr tha;
  Ipv4Addr tpa;
};
static_assert(sizeof(ArpHdr) == 28);
inline constexpr std::uint16_t kArpRequest = 1;
inline constexpr std::uint16_t kArpReply = 2;

// AETH syndrome decoding (IBTA 9.3.5, table 44).
enum class AethKind : std::uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };

enum class NakCode : std::uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};

inline constexpr std::uint8_t kAethCreditsInvalid = 31;  // "no credit count" (9.7.5.1)

constexpr AethKind aeth_kind(std::uint8_t syndrome) {
  return static_cast<AethKind>((syndrome >> 5) & 0x03);
}
constexpr std::uint8_t aeth_value(std::uint8_t syndrome) { return syndrome & 0x1f; }
constexpr std::uint8_t make_syndrome(AethKind kind, std::uint8_t value) {
  return static_cast<std::uint8_t>((static_cast<std::uint8_t>(kind) << 5) | (value & 0x1f));
}

const char* nak_code_name(std::uint8_t code);

}  // namespace uroce::wire
