#include "wire/path_header.h"

#include <cstring>

#include "wire/icrc.h"

namespace uroce::wire {
namespace {

constexpr std::size_t kIpv4Bytes = sizeof(Ipv4Hdr);
constexpr std::size_t kIpv6Bytes = sizeof(Ipv6Hdr);

void store_be16(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}

std::size_t ip_bytes(const PathHeader& path) { return path.ip_version == 6 ? kIpv6Bytes : kIpv4Bytes; }

}  // namespace

std::span<const std::uint8_t> PathHeader::ip_src() const {
  return ip_version == 6 ? std::span<const std::uint8_t>(bytes.data() + l3_offset + 8, 16)
                         : std::span<const std::uint8_t>(bytes.data() + l3_offset + 12, 4);
}

std::span<const std::uint8_t> PathHeader::ip_dst() const {
  return ip_version == 6 ? std::span<const std::uint8_t>(bytes.data() + l3_offset + 24, 16)
                         : std::span<const std::uint8_t>(bytes.data() + l3_offset + 16, 4);
}

PathHeader build_path_header(const FrameSpec& spec) {
  FrameSpec s = spec;
  s.bth = Bth{};
  s.bth.opcode = static_cast<std::uint8_t>(Opcode::kRcSendOnly);
  std::array<std::uint8_t, 128> scratch{};
  const HeaderLayout layout = build_headers(s, 0, scratch, false);
  PathHeader path;
  if (layout.header_bytes == 0) return path;
  path.l3_offset = static_cast<std::uint8_t>(layout.l3_offset);
  path.ip_version = s.ip_version == 6 ? 6 : 4;
  path.len = static_cast<std::uint8_t>(layout.l3_offset + ip_bytes(path) + sizeof(UdpHdr));
  std::memcpy(path.bytes.data(), scratch.data(), path.len);
  std::uint8_t* ip = path.bytes.data() + path.l3_offset;
  // Lengths (and the IPv4 checksum) are the packet's, written per packet.
  if (path.ip_version == 4) {
    store_be16(ip + 2, 0);
    store_be16(ip + 10, 0);
    for (std::size_t i = 0; i < kIpv4Bytes; i += 2) path.ipv4_sum += static_cast<std::uint32_t>(ip[i] << 8 | ip[i + 1]);
  } else {
    store_be16(ip + 4, 0);
  }
  store_be16(ip + ip_bytes(path) + 4, 0);
  return path;
}

bool write_packet(const PathHeader& path, TransportHeaders& th, std::uint32_t payload_bytes, TxFrame& f,
                  const PacketOptions& options) {
  const OpcodeInfo& info = opcode_info(th.bth.opcode);
  if (!info.known() || !path.built()) [[unlikely]] return false;
  const std::size_t l3 = path.l3_offset;
  const std::size_t headers = path.len + info.header_bytes;
  const auto pad = static_cast<std::uint8_t>((4 - payload_bytes % 4) % 4);
  const std::size_t frame = headers + payload_bytes + pad + kIcrcBytes;
  // Copied when the port asks for it and it fits; otherwise in pieces.
  const bool copy = payload_bytes <= options.copy_limit && frame <= f.head.room;
  if (f.head.room < headers || frame - l3 > 0xffff) [[unlikely]] return false;

  std::uint8_t* p = f.head.data;
  // The whole array where the head has room (the bytes past the path are
  // overwritten by the BTH and what follows): a copy of fixed size is a few
  // vector moves, one of the path's own length a `rep movs` that costs
  // more than the rest of the headers.
  if (f.head.room >= PathHeader::kMaxBytes) [[likely]] {
    std::memcpy(p, path.bytes.data(), PathHeader::kMaxBytes);
  } else {
    std::memcpy(p, path.bytes.data(), path.len);
  }
  std::uint8_t* ip = p + l3;
  const std::size_t udp_length = frame - l3 - ip_bytes(path);
  if (path.ip_version == 4) {
    const auto total = static_cast<std::uint32_t>(frame - l3);
    store_be16(ip + 2, total);
    if (options.ipv4_checksum) {
      std::uint32_t sum = path.ipv4_sum + total;
      sum = (sum & 0xffff) + (sum >> 16);
      sum = (sum & 0xffff) + (sum >> 16);
      store_be16(ip + 10, ~sum & 0xffff);
    }
  } else {
    store_be16(ip + 4, static_cast<std::uint32_t>(udp_length));
  }
  store_be16(ip + ip_bytes(path) + 4, static_cast<std::uint32_t>(udp_length));

  // The pad count set in the frame's copy, then in th: set in th first, its
  // copy's wide load would wait on that one-byte store.
  std::uint8_t* bth = p + path.len;
  std::memcpy(bth, &th.bth, sizeof th.bth);
  th.bth.set_pad_count(pad);
  bth[offsetof(Bth, flags)] = th.bth.flags;
  put_extension_headers(info, bth, th);
  f.l3_offset = static_cast<std::uint16_t>(l3);

  if (copy) {
    // One buffer: headers, payload, pad, ICRC; one CRC call over all of it.
    std::uint8_t* out = p + headers;
    for (int i = 0; i < f.npieces; ++i) {
      std::memcpy(out, f.pieces[i].data(), f.pieces[i].size());
      out += f.pieces[i].size();
    }
    for (int i = 0; i < pad; ++i) *out++ = 0;
    const std::size_t covered = static_cast<std::size_t>(out - ip);
    if (!options.defer_icrc) icrc_store(out, icrc_of(options.crc32, std::span<const std::uint8_t>(ip, covered)));
    f.head_len = static_cast<std::uint16_t>(frame);
    f.copied = static_cast<std::uint16_t>(payload_bytes);
    f.npieces = 0;
    f.trailer_len = 0;
    return true;
  }
  for (int i = 0; i < pad; ++i) f.trailer[static_cast<std::size_t>(i)] = 0;
  f.head_len = static_cast<std::uint16_t>(headers);
  f.copied = 0;
  f.trailer_len = static_cast<std::uint8_t>(pad + kIcrcBytes);
  if (options.defer_icrc) return true;
  // Zero copy: the CRC runs over the head, then on over the pieces where
  // they lie and the pad.
  std::uint32_t crc = icrc_of(options.crc32, std::span<const std::uint8_t>(ip, headers - l3));
  for (int i = 0; i < f.npieces; ++i) crc = options.crc32(crc, f.pieces[i].data(), f.pieces[i].size());
  if (pad != 0) crc = options.crc32(crc, f.trailer.data(), pad);
  icrc_store(f.trailer.data() + pad, crc);
  return true;
}

void finish_icrc_tx(TxFrame& f, Crc32Fn crc32) {
  if (f.head_len == 0) return;
  std::uint8_t* ip = f.head.data + f.l3_offset;
  if (f.trailer_len == 0) {
    // Copied: headers, payload and pad in the head, the ICRC after them.
    const std::span<const std::uint8_t> covered(ip, f.head_len - f.l3_offset - kIcrcBytes);
    icrc_store(ip + covered.size(), icrc_of(crc32, covered));
    return;
  }
  std::uint32_t crc = icrc_of(crc32, std::span<const std::uint8_t>(ip, f.head_len - f.l3_offset));
  for (int i = 0; i < f.npieces; ++i) crc = crc32(crc, f.pieces[i].data(), f.pieces[i].size());
  const std::size_t pad = f.trailer_len - kIcrcBytes;
  if (pad != 0) crc = crc32(crc, f.trailer.data(), pad);
  icrc_store(f.trailer.data() + pad, crc);
}

}  // namespace uroce::wire
