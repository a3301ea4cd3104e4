// TX headers built once per path, patched per packet.
//
// A connected QP sends every packet to one address with one traffic class:
// its Ethernet, VLAN, IP and UDP headers differ from packet to packet only in
// the lengths and the IPv4 checksum. PathHeader holds them, built on the
// control path (at RTR) from a FrameSpec; write_packet() copies them into
// the frame's head, adds the BTH and the extension headers the opcode
// carries, patches the lengths and the checksum, copies a short payload
// behind the headers, and runs the ICRC in one pass over the head and the
// pieces.
#pragma once

#include <array>
#include <cstdint>

#include "wire/crc32.h"
#include "wire/frame.h"
#include "wire/headers.h"
#include "wire/icrc.h"
#include "wire/tx_frame.h"

namespace uroce::wire {

struct PathHeader {
  // Ethernet [+ VLAN] + IPv6 + UDP at most: 14 + 4 + 40 + 8.
  static constexpr std::size_t kMaxBytes = 66;

  std::array<std::uint8_t, kMaxBytes> bytes{};
  std::uint8_t len = 0;        // through the UDP header: where the BTH goes
  std::uint8_t l3_offset = 0;  // where the IP header starts
  std::uint8_t ip_version = 0; // 0: not built
  // IPv4: the one's-complement sum of the header's 16-bit words with the
  // total length and the checksum 0; the packet's length is added to it.
  std::uint32_t ipv4_sum = 0;

  bool built() const { return ip_version != 0; }
  // The IP source and destination, as they stand in the header (4 or 16 bytes).
  std::span<const std::uint8_t> ip_src() const;
  std::span<const std::uint8_t> ip_dst() const;
};

// The path part of `spec` (Ethernet through UDP; its BTH and extension
// headers are ignored), with lengths and checksum left to write_packet().
PathHeader build_path_header(const FrameSpec& spec);

// The BTH and the extension headers of one packet. Only the BTH and the
// extension headers its opcode carries are read.
struct TransportHeaders {
  Bth bth{};
  Deth deth;
  Xrceth xrceth;
  Sreth sreth;
  Sacketh sacketh;
  Feth feth;
  Reth reth;
  AtomicEth atomic_eth;
  Aeth aeth;
  AtomicAckEth atomic_ack_eth;
  ImmDt immdt;
  Ieth ieth;
};

struct PacketOptions {
  Crc32Fn crc32 = crc32_default;
  bool ipv4_checksum = true;     // false: left 0 for the port to fill (TX offload)
  std::uint32_t copy_limit = 0;  // payloads up to this size are copied into the head
  // Set: the ICRC is left for finish_icrc_tx(), its bytes unwritten.
  bool defer_icrc = false;
};

// Writes one packet into `f`, whose head the caller has set and whose
// pieces (f.pieces, f.npieces) hold the `payload_bytes` of payload. The pad
// count in th.bth is set here. Returns false (nothing usable written) if the
// opcode is unknown or the head is too small.
bool write_packet(const PathHeader& path, TransportHeaders& th, std::uint32_t payload_bytes, TxFrame& f,
                  const PacketOptions& options);

// The ICRC of a frame write_packet() wrote with PacketOptions::defer_icrc:
// computed and stored. Nothing for a frame with no head (one that goes out
// empty). For a burst: every frame written first, then every ICRC; a CRC
// right behind its own frame's header stores would wait for them.
void finish_icrc_tx(TxFrame& f, Crc32Fn crc32);

}  // namespace uroce::wire
