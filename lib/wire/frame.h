// Parsing and building whole RoCEv2 frames: Ethernet (optionally 802.1Q
// tagged), IPv4 or IPv6, UDP/4791, BTH, the extension headers the opcode
// table names, payload, pad and ICRC.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "wire/crc32.h"
#include "wire/headers.h"
#include "wire/icrc.h"
#include "wire/opcode.h"
#include "wire/parse_status.h"

namespace uroce::wire {

// The largest payload one packet may carry: the largest IB path MTU (IBTA 9.7.5).
inline constexpr std::uint32_t kMaxPayload = 4096;

struct ParseOptions {
  bool verify_icrc = true;
  Crc32Fn crc32 = crc32_default;
};

// Offsets into a frame that parse_frame() accepted (or got as far as).
// Header accessors return copies: the structs are small, and a copy is
// well-defined at any alignment.
struct ParsedFrame {
  static constexpr int kMaxPayloadPieces = 4;

  std::span<const std::uint8_t> frame;
  bool has_vlan = false;
  std::uint16_t vlan_tci = 0;
  std::uint8_t ip_version = 0;  // 4 or 6; 0 if not IP
  std::uint16_t l3_offset = 0;
  std::uint16_t l3_end = 0;  // end of the IP packet (Ethernet padding follows)
  std::uint16_t udp_offset = 0;
  std::uint16_t bth_offset = 0;
  std::uint16_t payload_offset = 0;
  std::uint16_t payload_length = 0;  // without pad
  std::uint8_t pad = 0;
  std::uint16_t icrc_offset = 0;
  std::uint8_t opcode = 0;
  const OpcodeInfo* info = nullptr;  // set once the BTH has been read
  // A frame parsed in segments (parse_frame_scattered()): `frame` holds a
  // copy of its first bytes (every header), and the payload is left in the
  // segments, as these pieces in order. None for a contiguous frame.
  std::uint8_t npayload_pieces = 0;
  std::array<std::span<const std::uint8_t>, kMaxPayloadPieces> payload_pieces{};

  // Every field as a new ParsedFrame has it but the pieces past
  // npayload_pieces (never read): assigning ParsedFrame{} clears all 120
  // bytes with a `rep stos`, whose start-up cost is a parse's largest.
  void reset(std::span<const std::uint8_t> f) {
    frame = f;
    has_vlan = false;
    vlan_tci = 0;
    ip_version = 0;
    l3_offset = l3_end = udp_offset = bth_offset = payload_offset = payload_length = 0;
    pad = 0;
    icrc_offset = 0;
    opcode = 0;
    info = nullptr;
    npayload_pieces = 0;
  }

  template <typename H>
  H at(std::size_t offset) const {
    H h;
    std::memcpy(&h, frame.data() + offset, sizeof h);
    return h;
  }
  EthHdr eth() const { return at<EthHdr>(0); }
  Ipv4Hdr ipv4() const { return at<Ipv4Hdr>(l3_offset); }
  Ipv6Hdr ipv6() const { return at<Ipv6Hdr>(l3_offset); }
  UdpHdr udp() const { return at<UdpHdr>(udp_offset); }
  Bth bth() const { return at<Bth>(bth_offset); }
  bool has(ExtHdr h) const { return info != nullptr && info->offset_of(h) != 0; }
  // The extension header `h`; call only when has(h).
  template <typename H>
  H ext(ExtHdr h) const { return at<H>(bth_offset + info->offset_of(h)); }
  Reth reth() const { return ext<Reth>(ExtHdr::kReth); }
  Aeth aeth() const { return ext<Aeth>(ExtHdr::kAeth); }
  AtomicEth atomic_eth() const { return ext<AtomicEth>(ExtHdr::kAtomicEth); }
  AtomicAckEth atomic_ack_eth() const { return ext<AtomicAckEth>(ExtHdr::kAtomicAckEth); }
  ImmDt immdt() const { return ext<ImmDt>(ExtHdr::kImmDt); }
  Ieth ieth() const { return ext<Ieth>(ExtHdr::kIeth); }
  Deth deth() const { return ext<Deth>(ExtHdr::kDeth); }
  Xrceth xrceth() const { return ext<Xrceth>(ExtHdr::kXrceth); }
  Sreth sreth() const { return ext<Sreth>(ExtHdr::kSreth); }
  Sacketh sacketh() const { return ext<Sacketh>(ExtHdr::kSacketh); }
  Feth feth() const { return ext<Feth>(ExtHdr::kFeth); }

  std::uint8_t ecn() const { return ip_version == 6 ? ipv6().ecn() : ipv4().ecn(); }
  // The payload of a contiguous frame (npayload_pieces == 0); use
  // visit_payload() where the frame may have come in segments.
  std::span<const std::uint8_t> payload() const {
    return frame.subspan(payload_offset, payload_length);
  }
  // Calls visit(data, length, offset into the payload) for each run of
  // payload bytes, in order: one for a contiguous frame, one per piece for a
  // scattered one. Nothing for an empty payload.
  template <typename Visit>
  void visit_payload(Visit&& visit) const {
    if (npayload_pieces == 0) {
      if (payload_length > 0) visit(frame.data() + payload_offset, std::size_t{payload_length}, std::size_t{0});
      return;
    }
    std::size_t at = 0;
    for (int i = 0; i < npayload_pieces; ++i) {
      visit(payload_pieces[i].data(), payload_pieces[i].size(), at);
      at += payload_pieces[i].size();
    }
  }
  // From the IP header to the byte before the ICRC: what the ICRC covers.
  std::span<const std::uint8_t> icrc_covered() const {
    return frame.subspan(l3_offset, icrc_offset - l3_offset);
  }
  std::uint32_t icrc() const;  // as carried in a contiguous frame
};
// reset() names every field: one added to ParsedFrame goes there too.
static_assert(sizeof(ParsedFrame) == 120, "a ParsedFrame field changed: keep ParsedFrame::reset() in step");

// Parses `frame`. Returns kOk, one of the not-RoCE statuses (kNotIp, kNotUdp,
// kNotRoce) for other traffic, or the reason the frame is malformed. On
// kIcrcMismatch every header field of `out` is valid; on other errors, the
// fields read up to the failing check are.
ParseStatus parse_frame(std::span<const std::uint8_t> frame, ParsedFrame& out,
                        const ParseOptions& options = {});

// The fields of a frame: what build_frame() writes. Lengths, checksums, the
// pad count and the ICRC are derived; everything else is given.
struct FrameSpec {
  MacAddr eth_dst{};
  MacAddr eth_src{};
  std::optional<std::uint16_t> vlan_tci;
  std::uint8_t ip_version = 4;
  // IPv4
  std::uint8_t tos = 0;
  std::uint16_t ip_id = 0;
  std::uint16_t ip_frag = 0x4000;  // DF
  std::uint8_t ttl = 64;
  Ipv4Addr src4{};
  Ipv4Addr dst4{};
  // IPv6
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;
  std::uint8_t hop_limit = 64;
  Ipv6Addr src6{};
  Ipv6Addr dst6{};
  // UDP
  std::uint16_t udp_src_port = 0xc000;
  std::uint16_t udp_dst_port = kRoceV2Port;
  std::uint16_t udp_checksum = 0;  // RoCEv2 senders send 0 (A17.4.2)
  // Transport: the BTH (its pad count is derived) and whichever extension
  // headers the opcode table says the opcode carries.
  Bth bth{};
  Deth deth{};
  Xrceth xrceth{};
  Sreth sreth{};
  Sacketh sacketh{};
  Feth feth{};
  Reth reth{};
  AtomicEth atomic_eth{};
  Aeth aeth{};
  AtomicAckEth atomic_ack_eth{};
  ImmDt immdt{};
  Ieth ieth{};
};

// Writes the extension headers `info` says its opcode carries, from the
// fields of `h` (a FrameSpec or a TransportHeaders: the same names), behind
// the BTH at `bth`.
template <typename Headers>
void put_extension_headers(const OpcodeInfo& info, std::uint8_t* bth, const Headers& h) {
  if (info.header_bytes <= sizeof(Bth)) return;
  const auto put = [&](ExtHdr which, const auto& hdr) {
    if (const std::uint8_t off = info.offset_of(which); off != 0) std::memcpy(bth + off, &hdr, sizeof hdr);
  };
  put(ExtHdr::kDeth, h.deth);
  put(ExtHdr::kXrceth, h.xrceth);
  put(ExtHdr::kSreth, h.sreth);
  put(ExtHdr::kSacketh, h.sacketh);
  put(ExtHdr::kFeth, h.feth);
  put(ExtHdr::kReth, h.reth);
  put(ExtHdr::kAtomicEth, h.atomic_eth);
  put(ExtHdr::kAeth, h.aeth);
  put(ExtHdr::kAtomicAckEth, h.atomic_ack_eth);
  put(ExtHdr::kImmDt, h.immdt);
  put(ExtHdr::kIeth, h.ieth);
}

struct HeaderLayout {
  std::size_t header_bytes = 0;  // Ethernet through the last extension header
  std::size_t l3_offset = 0;
  std::uint8_t pad = 0;
  std::size_t frame_bytes = 0;  // headers + payload + pad + ICRC
};

// Writes the headers of a frame carrying `payload_length` bytes into `out`.
// Returns the layout, or header_bytes == 0 if the opcode is unknown or `out`
// is too small. The ICRC is not written: see build_frame() or icrc_compute().
// With ipv4_checksum false the IPv4 header checksum is left 0 for the port
// to fill (TX offload); the ICRC covers it as all ones either way.
HeaderLayout build_headers(const FrameSpec& spec, std::size_t payload_length,
                           std::span<std::uint8_t> out, bool ipv4_checksum = true);

// Writes a complete frame (headers, payload, zero pad, ICRC) into `out`.
// Returns its length, or 0 if the opcode is unknown or `out` is too small.
std::size_t build_frame(const FrameSpec& spec, std::span<const std::uint8_t> payload,
                        std::span<std::uint8_t> out, Crc32Fn crc32 = crc32_default);

// parse_frame() in two halves, for a burst: the headers of every
// frame checked first (parse_headers_of()), then the ICRC of those that
// passed (check_icrc(): kOk or kIcrcMismatch).
ParseStatus parse_headers_of(std::span<const std::uint8_t> frame, ParsedFrame& out);
ParseStatus check_icrc(std::span<const std::uint8_t> frame, const ParsedFrame& p, Crc32Fn crc32 = crc32_default);

// Every header of a RoCEv2 frame lies in its first kHeadCopyBytes bytes:
// Ethernet, VLAN, IPv6, UDP and the longest BTH + extension headers (56: a selective-repeat atomic).
inline constexpr std::size_t kHeadCopyBytes = 128;

// The same for a frame that arrived in segments (a chain of buffers, as a
// multi-segment mbuf), without gathering it: its first bytes (up to
// kHeadCopyBytes) are copied into `head`, which `out.frame` then refers to,
// the ICRC runs over the segments where they are, and the payload stays in
// them (out.payload_pieces). The caller passes at most
// ParsedFrame::kMaxPayloadPieces segments (RxFrame holds no more), none of
// them empty. `head` must outlive `out`.
ParseStatus parse_frame_scattered(std::span<const std::span<const std::uint8_t>> segments,
                                  std::array<std::uint8_t, kHeadCopyBytes>& head, ParsedFrame& out,
                                  const ParseOptions& options = {});

// The fields of a parsed RoCEv2 frame, so that build_frame() reproduces it.
FrameSpec spec_from_parsed(const ParsedFrame& parsed);

// RFC 1071 checksum of an IPv4 header (returns the value to store, or 0 when
// verifying a header that already carries a correct checksum).
std::uint16_t ipv4_header_checksum(const std::uint8_t* header, std::size_t len);

// Recomputes and stores the checksum of the IPv4 header at `header` (its
// length taken from the IHL field), as after rewriting TTL or ECN.
void ipv4_refresh_checksum(std::uint8_t* header);

}  // namespace uroce::wire
