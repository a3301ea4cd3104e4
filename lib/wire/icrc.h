// The RoCEv2 Invariant CRC (IBTA Annex A17.3.3).
//
// CRC-32 over: 8 bytes of 0xFF standing in for the LRH of native InfiniBand,
// then the IP header, UDP header and BTH with the fields that may change in
// flight masked to all ones (IPv4: TOS, TTL, header checksum; IPv6: traffic
// class, flow label, hop limit; UDP checksum; BTH byte 4, "resv8a", which
// holds FECN/BECN), then the extension headers, payload and pad bytes.
// The ICRC is the CRC sent least significant byte first.
//
// Headers and payload may sit in different buffers (zero-copy TX keeps the
// payload in the registered region), so the CRC runs over a list of pieces in
// one pass, never gathering them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/crc32.h"

namespace uroce::wire {

// Bytes of IP + UDP + BTH that get masked: IPv4 without options, or IPv6.
inline constexpr std::size_t kIcrcMaskedBytesV4 = 20 + 8 + 12;
inline constexpr std::size_t kIcrcMaskedBytesV6 = 40 + 8 + 12;

// ICRC of a packet whose headers, from the first byte of the IP header through
// the last extension header, are `headers` (IPv4 without options or IPv6, as
// the first nibble says), followed by `payload` pieces (payload and pad bytes,
// not the ICRC): icrc_of() the headers, then on over the pieces where they lie.
// `headers` must hold at least IP + UDP + BTH.
std::uint32_t icrc_compute(Crc32Fn crc32, std::span<const std::uint8_t> headers,
                           std::span<const std::span<const std::uint8_t>> payload = {});

// ICRC of a contiguous packet (IP header to the byte before the ICRC, at
// least IP + UDP + BTH), in one CRC call up to 128 bytes, two beyond. The
// packet is only read: its masked copy is built aside, 16 bytes at a time,
// so each of the CRC kernel's wide loads is forwarded from one store of the
// same width. (Masking the packet's own bytes in place, as this code did,
// made those loads wait for one-byte stores to retire: 26.7 ns for the ICRC
// of a 120-byte packet against 15.5 ns now and 7.5 ns for a plain CRC of the
// same bytes, uroce-bench-icrc; 45-75 ns off a stock ib_write_lat or
// ib_send_lat one-way trip, whose bursts carry an ACK and a request.)
std::uint32_t icrc_of(Crc32Fn crc32, std::span<const std::uint8_t> packet);

inline void icrc_store(std::uint8_t* dst, std::uint32_t icrc) {
  for (int i = 0; i < 4; ++i) dst[i] = static_cast<std::uint8_t>(icrc >> (8 * i));
}

inline std::uint32_t icrc_load(const std::uint8_t* src) {
  return static_cast<std::uint32_t>(src[0]) | static_cast<std::uint32_t>(src[1]) << 8 |
         static_cast<std::uint32_t>(src[2]) << 16 | static_cast<std::uint32_t>(src[3]) << 24;
}

}  // namespace uroce::wire
