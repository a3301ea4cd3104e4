#include "wire/frame.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "wire/icrc.h"

namespace uroce::wire {
namespace {

constexpr std::size_t kEthBytes = sizeof(EthHdr);
constexpr std::size_t kVlanBytes = sizeof(VlanTag);

// First and Middle packets carry exactly one path MTU of payload (IBTA
// 9.7.2), and a path MTU is one of these.
ParseStatus check_payload(const OpcodeInfo& info, std::uint32_t area, std::uint8_t pad,
                          std::uint32_t payload) {
  if (area % 4 != 0 || pad > area) return ParseStatus::kPadCount;
  if (!info.has(kHasPayload)) {
    return area == 0 ? ParseStatus::kOk : ParseStatus::kBadPayloadLength;
  }
  if (info.has(kFixedPayload8) && payload != 8) return ParseStatus::kBadPayloadLength;
  if (info.has(kFixedPayload16) && payload != 16) return ParseStatus::kBadPayloadLength;
  if (payload > kMaxPayload) return ParseStatus::kBadPayloadLength;
  // Whether a First or Middle packet carries exactly the path MTU is the
  // responder's (and the completer's) check, against the QP's path MTU: a
  // wrong length there is answered with a NAK Invalid Request (C9-92), not
  // dropped here in silence.
  return ParseStatus::kOk;
}

}  // namespace

std::uint16_t ipv4_header_checksum(const std::uint8_t* header, std::size_t len) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < len; i += 2) sum += static_cast<std::uint32_t>(header[i] << 8 | header[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

void ipv4_refresh_checksum(std::uint8_t* header) {
  header[10] = 0;
  header[11] = 0;
  const std::uint16_t sum = ipv4_header_checksum(header, (header[0] & 0x0fu) * 4u);
  header[10] = static_cast<std::uint8_t>(sum >> 8);
  header[11] = static_cast<std::uint8_t>(sum);
}

std::uint32_t ParsedFrame::icrc() const { return icrc_load(frame.data() + icrc_offset); }

namespace {

// Everything parse_frame() checks but the ICRC, on a frame of `size` bytes
// whose first frame.size() bytes are at hand: all of them, or at least
// kHeadCopyBytes, which hold every header this reads.
ParseStatus parse_headers(std::span<const std::uint8_t> frame, std::size_t size, ParsedFrame& out) {
  out.reset(frame);
  if (size < kEthBytes) return ParseStatus::kTruncatedL2;

  std::size_t l3 = kEthBytes;
  std::uint16_t ether_type = out.at<EthHdr>(0).ether_type.get();
  if (ether_type == kEtherTypeVlan) {
    if (size < kEthBytes + kVlanBytes) return ParseStatus::kTruncatedL2;
    const VlanTag tag = out.at<VlanTag>(kEthBytes);
    out.has_vlan = true;
    out.vlan_tci = tag.tci.get();
    ether_type = tag.ether_type.get();
    l3 += kVlanBytes;
  }
  out.l3_offset = static_cast<std::uint16_t>(l3);

  std::size_t l4 = 0;
  std::size_t l3_end = 0;
  if (ether_type == kEtherTypeIpv4) {
    out.ip_version = 4;
    if (size < l3 + sizeof(Ipv4Hdr)) return ParseStatus::kTruncatedIp;
    const Ipv4Hdr ip = out.ipv4();
    if (ip.version() != 4) return ParseStatus::kIpVersion;
    const std::size_t ihl_bytes = ip.ihl() * 4u;
    if (ihl_bytes < sizeof(Ipv4Hdr)) return ParseStatus::kIpv4HeaderLength;
    const std::size_t total = ip.total_length.get();
    if (total < ihl_bytes || l3 + total > size) return ParseStatus::kIpLength;
    if (ipv4_header_checksum(frame.data() + l3, ihl_bytes) != 0) {
      return ParseStatus::kIpv4Checksum;
    }
    if (ip.protocol != kIpProtoUdp) return ParseStatus::kNotUdp;
    if (ip.more_fragments() || ip.fragment_offset() != 0) return ParseStatus::kIpFragment;
    l4 = l3 + ihl_bytes;
    l3_end = l3 + total;
    if (l3_end < l4 + sizeof(UdpHdr)) return ParseStatus::kUdpLength;
    if (out.at<UdpHdr>(l4).dst_port.get() != kRoceV2Port) return ParseStatus::kNotRoce;
    // The ICRC mask (A17.3.3) is defined for a 20-byte header; RoCEv2 senders
    // use no options, so a header with options is not a RoCEv2 packet we trust.
    if (ihl_bytes != sizeof(Ipv4Hdr)) return ParseStatus::kIpv4Options;
  } else if (ether_type == kEtherTypeIpv6) {
    out.ip_version = 6;
    if (size < l3 + sizeof(Ipv6Hdr)) return ParseStatus::kTruncatedIp;
    const Ipv6Hdr ip = out.ipv6();
    if (ip.version() != 6) return ParseStatus::kIpVersion;
    l4 = l3 + sizeof(Ipv6Hdr);
    l3_end = l4 + ip.payload_length.get();
    if (l3_end > size) return ParseStatus::kIpLength;
    // RoCEv2 puts UDP right after the fixed header; an extension header chain
    // (or a jumbogram) is not RoCEv2 traffic.
    if (ip.next_header != kIpProtoUdp) return ParseStatus::kNotUdp;
    if (l3_end < l4 + sizeof(UdpHdr)) return ParseStatus::kUdpLength;
    if (out.at<UdpHdr>(l4).dst_port.get() != kRoceV2Port) return ParseStatus::kNotRoce;
  } else {
    return ParseStatus::kNotIp;
  }
  out.l3_end = static_cast<std::uint16_t>(l3_end);
  out.udp_offset = static_cast<std::uint16_t>(l4);

  // The UDP checksum is not verified: RoCEv2 senders send 0 (A17.4.2), a
  // switch may rewrite it, and the ICRC, which masks it, covers the bytes.
  const UdpHdr udp = out.udp();
  if (udp.length.get() != l3_end - l4) return ParseStatus::kUdpLength;

  const std::size_t bth = l4 + sizeof(UdpHdr);
  out.bth_offset = static_cast<std::uint16_t>(bth);
  if (l3_end < bth + sizeof(Bth) + kIcrcBytes) return ParseStatus::kTruncatedBth;
  const Bth b = out.bth();
  out.opcode = b.opcode;
  if (b.tver() != 0) return ParseStatus::kBadTver;  // IBTA 9.2: TVer 0 only
  const OpcodeInfo& info = opcode_info(b.opcode);
  if (!info.known()) return ParseStatus::kUnknownOpcode;
  out.info = &info;

  const std::size_t icrc = l3_end - kIcrcBytes;
  if (bth + info.header_bytes > icrc) return ParseStatus::kTruncatedHeaders;
  const auto area = static_cast<std::uint32_t>(icrc - bth - info.header_bytes);
  const std::uint8_t pad = b.pad_count();
  out.payload_offset = static_cast<std::uint16_t>(bth + info.header_bytes);
  out.icrc_offset = static_cast<std::uint16_t>(icrc);
  out.pad = pad;
  out.payload_length = static_cast<std::uint16_t>(area >= pad ? area - pad : 0);
  return check_payload(info, area, pad, out.payload_length);
}

}  // namespace

ParseStatus parse_frame(std::span<const std::uint8_t> frame, ParsedFrame& out,
                        const ParseOptions& options) {
  const ParseStatus s = parse_headers(frame, frame.size(), out);
  return s == ParseStatus::kOk && options.verify_icrc ? check_icrc(frame, out, options.crc32) : s;
}

ParseStatus parse_headers_of(std::span<const std::uint8_t> frame, ParsedFrame& out) {
  return parse_headers(frame, frame.size(), out);
}

ParseStatus check_icrc(std::span<const std::uint8_t> frame, const ParsedFrame& p, Crc32Fn crc32) {
  const std::uint32_t icrc = icrc_of(crc32, frame.subspan(p.l3_offset, p.icrc_offset - p.l3_offset));
  return icrc == p.icrc() ? ParseStatus::kOk : ParseStatus::kIcrcMismatch;
}

namespace {

// Bytes [from, to) of the frame in `segments`, as non-empty pieces of them
// (at most `max`); returns how many (0 for an empty range).
int pieces_of(std::span<const std::span<const std::uint8_t>> segments, std::size_t from, std::size_t to,
              std::span<const std::uint8_t>* out, int max) {
  int n = 0;
  std::size_t start = 0;
  for (const std::span<const std::uint8_t> seg : segments) {
    const std::size_t end = start + seg.size();
    const std::size_t a = std::max(from, start);
    const std::size_t b = std::min(to, end);
    if (b > a && n < max) out[n++] = seg.subspan(a - start, b - a);  // no empty pieces
    start = end;
  }
  return n;
}

}  // namespace

ParseStatus parse_frame_scattered(std::span<const std::span<const std::uint8_t>> segments,
                                  std::array<std::uint8_t, kHeadCopyBytes>& head, ParsedFrame& out,
                                  const ParseOptions& options) {
  constexpr int kMax = ParsedFrame::kMaxPayloadPieces;
  std::size_t size = 0;
  std::size_t copied = 0;
  for (const std::span<const std::uint8_t> seg : segments) {
    const std::size_t take = std::min(seg.size(), head.size() - copied);
    std::memcpy(head.data() + copied, seg.data(), take);
    copied += take;
    size += seg.size();
  }
  const ParseStatus s = parse_headers(std::span<const std::uint8_t>(head.data(), copied), size, out);
  if (s != ParseStatus::kOk) return s;
  out.npayload_pieces = static_cast<std::uint8_t>(
      pieces_of(segments, out.payload_offset, out.payload_offset + out.payload_length, out.payload_pieces.data(), kMax));
  if (!options.verify_icrc) return s;
  // The masked headers from the copy, the rest where it lies.
  const std::size_t split = std::min<std::size_t>(copied, out.icrc_offset);
  std::array<std::span<const std::uint8_t>, kMax> rest;
  const int nrest = pieces_of(segments, split, out.icrc_offset, rest.data(), kMax);
  const std::uint32_t icrc = icrc_compute(options.crc32, out.frame.subspan(out.l3_offset, split - out.l3_offset),
                                          std::span<const std::span<const std::uint8_t>>(rest.data(), nrest));
  std::array<std::span<const std::uint8_t>, kMax> at;
  const int nat = pieces_of(segments, out.icrc_offset, out.icrc_offset + kIcrcBytes, at.data(), kMax);
  std::uint32_t carried = 0;
  if (nat == 1) {
    carried = icrc_load(at[0].data());  // the usual case: all four bytes in one segment
  } else {
    std::size_t k = 0;  // split across segments, byte by byte, least significant first
    for (int i = 0; i < nat; ++i) {
      for (const std::uint8_t b : at[static_cast<std::size_t>(i)]) carried |= std::uint32_t{b} << (8 * k++);
    }
  }
  return icrc == carried ? ParseStatus::kOk : ParseStatus::kIcrcMismatch;
}

HeaderLayout build_headers(const FrameSpec& spec, std::size_t payload_length,
                           std::span<std::uint8_t> out, bool ipv4_checksum) {
  HeaderLayout layout;
  const OpcodeInfo& info = opcode_info(spec.bth.opcode);
  if (!info.known()) return layout;

  const std::size_t l3 = kEthBytes + (spec.vlan_tci ? kVlanBytes : 0);
  const std::size_t ip_bytes = spec.ip_version == 6 ? sizeof(Ipv6Hdr) : sizeof(Ipv4Hdr);
  const std::size_t bth = l3 + ip_bytes + sizeof(UdpHdr);
  const std::size_t header_bytes = bth + info.header_bytes;
  const auto pad = static_cast<std::uint8_t>((4 - payload_length % 4) % 4);
  const std::size_t frame_bytes = header_bytes + payload_length + pad + kIcrcBytes;
  if (out.size() < header_bytes || frame_bytes - l3 > 0xffff) return layout;
  std::uint8_t* p = out.data();

  EthHdr eth{spec.eth_dst, spec.eth_src, {}};
  const std::uint16_t ip_type = spec.ip_version == 6 ? kEtherTypeIpv6 : kEtherTypeIpv4;
  if (spec.vlan_tci) {
    eth.ether_type.set(kEtherTypeVlan);
    VlanTag tag;
    tag.tci.set(*spec.vlan_tci);
    tag.ether_type.set(ip_type);
    std::memcpy(p + kEthBytes, &tag, sizeof tag);
  } else {
    eth.ether_type.set(ip_type);
  }
  std::memcpy(p, &eth, sizeof eth);

  const std::size_t udp_bytes = frame_bytes - l3 - ip_bytes;
  if (spec.ip_version == 6) {
    Ipv6Hdr ip{};
    ip.vtc_flow.set(6u << 28 | static_cast<std::uint32_t>(spec.traffic_class) << 20 |
                    (spec.flow_label & 0xfffff));
    ip.payload_length.set(static_cast<std::uint16_t>(udp_bytes));
    ip.next_header = kIpProtoUdp;
    ip.hop_limit = spec.hop_limit;
    ip.src = spec.src6;
    ip.dst = spec.dst6;
    std::memcpy(p + l3, &ip, sizeof ip);
  } else {
    Ipv4Hdr ip{};
    ip.version_ihl = 0x45;
    ip.tos = spec.tos;
    ip.total_length.set(static_cast<std::uint16_t>(frame_bytes - l3));
    ip.id.set(spec.ip_id);
    ip.frag.set(spec.ip_frag);
    ip.ttl = spec.ttl;
    ip.protocol = kIpProtoUdp;
    ip.src = spec.src4;
    ip.dst = spec.dst4;
    std::memcpy(p + l3, &ip, sizeof ip);
    if (ipv4_checksum) ipv4_refresh_checksum(p + l3);
  }

  UdpHdr udp;
  udp.src_port.set(spec.udp_src_port);
  udp.dst_port.set(spec.udp_dst_port);
  udp.length.set(static_cast<std::uint16_t>(udp_bytes));
  udp.checksum.set(spec.udp_checksum);
  std::memcpy(p + l3 + ip_bytes, &udp, sizeof udp);

  Bth b = spec.bth;
  b.set_pad_count(pad);
  std::memcpy(p + bth, &b, sizeof b);
  put_extension_headers(info, p + bth, spec);

  layout.header_bytes = header_bytes;
  layout.l3_offset = l3;
  layout.pad = pad;
  layout.frame_bytes = frame_bytes;
  return layout;
}

std::size_t build_frame(const FrameSpec& spec, std::span<const std::uint8_t> payload,
                        std::span<std::uint8_t> out, Crc32Fn crc32) {
  const HeaderLayout layout = build_headers(spec, payload.size(), out);
  if (layout.header_bytes == 0 || out.size() < layout.frame_bytes) return 0;
  std::uint8_t* p = out.data();
  if (!payload.empty()) std::memcpy(p + layout.header_bytes, payload.data(), payload.size());
  std::memset(p + layout.header_bytes + payload.size(), 0, layout.pad);
  const std::size_t icrc_at = layout.frame_bytes - kIcrcBytes;
  icrc_store(p + icrc_at,
             icrc_of(crc32, out.subspan(layout.l3_offset, icrc_at - layout.l3_offset)));
  return layout.frame_bytes;
}

FrameSpec spec_from_parsed(const ParsedFrame& parsed) {
  FrameSpec spec;
  const EthHdr eth = parsed.eth();
  spec.eth_dst = eth.dst;
  spec.eth_src = eth.src;
  if (parsed.has_vlan) spec.vlan_tci = parsed.vlan_tci;
  spec.ip_version = parsed.ip_version;
  if (parsed.ip_version == 6) {
    const Ipv6Hdr ip = parsed.ipv6();
    spec.traffic_class = ip.traffic_class();
    spec.flow_label = ip.flow_label();
    spec.hop_limit = ip.hop_limit;
    spec.src6 = ip.src;
    spec.dst6 = ip.dst;
  } else {
    const Ipv4Hdr ip = parsed.ipv4();
    spec.tos = ip.tos;
    spec.ip_id = ip.id.get();
    spec.ip_frag = ip.frag.get();
    spec.ttl = ip.ttl;
    spec.src4 = ip.src;
    spec.dst4 = ip.dst;
  }
  const UdpHdr udp = parsed.udp();
  spec.udp_src_port = udp.src_port.get();
  spec.udp_dst_port = udp.dst_port.get();
  spec.udp_checksum = udp.checksum.get();
  spec.bth = parsed.bth();
  if (parsed.has(ExtHdr::kDeth)) spec.deth = parsed.deth();
  if (parsed.has(ExtHdr::kXrceth)) spec.xrceth = parsed.xrceth();
  if (parsed.has(ExtHdr::kSreth)) spec.sreth = parsed.sreth();
  if (parsed.has(ExtHdr::kSacketh)) spec.sacketh = parsed.sacketh();
  if (parsed.has(ExtHdr::kFeth)) spec.feth = parsed.feth();
  if (parsed.has(ExtHdr::kReth)) spec.reth = parsed.reth();
  if (parsed.has(ExtHdr::kAtomicEth)) spec.atomic_eth = parsed.atomic_eth();
  if (parsed.has(ExtHdr::kAeth)) spec.aeth = parsed.aeth();
  if (parsed.has(ExtHdr::kAtomicAckEth)) spec.atomic_ack_eth = parsed.atomic_ack_eth();
  if (parsed.has(ExtHdr::kImmDt)) spec.immdt = parsed.immdt();
  if (parsed.has(ExtHdr::kIeth)) spec.ieth = parsed.ieth();
  return spec;
}

}  // namespace uroce::wire
