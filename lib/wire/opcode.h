// The BTH opcode table: one constexpr row per opcode says which extension
// headers follow the BTH (and so their offsets), whether a payload follows,
// and what the opcode means. Parsing, building and dispatch all read this one
// table; adding an opcode is one row in kOpcodeRows below.
#pragma once

#include <array>
#include <cstdint>

namespace uroce::wire {

// Opcode values (IBTA 9.2.2, table 38; FLUSH and ATOMIC WRITE from IBTA 1.5;
// CNP from Annex A17.9.3). High 3 bits: transport; low 5 bits: operation.
// XRC's (101xxxxx) are RC's operations at 0xa0 on: only those the code
// names are listed here (the table below has them all).
enum class Opcode : std::uint8_t {
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastImm = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyImm = 0x05,
  kRcWriteFirst = 0x06,
  kRcWriteMiddle = 0x07,
  kRcWriteLast = 0x08,
  kRcWriteLastImm = 0x09,
  kRcWriteOnly = 0x0a,
  kRcWriteOnlyImm = 0x0b,
  kRcReadRequest = 0x0c,
  kRcReadResponseFirst = 0x0d,
  kRcReadResponseMiddle = 0x0e,
  kRcReadResponseLast = 0x0f,
  kRcReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastInv = 0x16,
  kRcSendOnlyInv = 0x17,
  kRcFlush = 0x1c,
  kRcAtomicWrite = 0x1d,
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastImm = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyImm = 0x25,
  kUcWriteFirst = 0x26,
  kUcWriteMiddle = 0x27,
  kUcWriteLast = 0x28,
  kUcWriteLastImm = 0x29,
  kUcWriteOnly = 0x2a,
  kUcWriteOnlyImm = 0x2b,
  kXrcSendFirst = 0xa0,
  kSrSendFirst = 0xc0,  // uroce's selective repeat: RC's operations moved here (docs/transport.md)
  kSrAcknowledge = 0xd1,
  kXrcAcknowledge = 0xb1,
  kXrcAtomicAcknowledge = 0xb2,
  kUdSendOnly = 0x64,
  kUdSendOnlyImm = 0x65,
  kCnp = 0x81,
};

// kSr: selective repeat, uroce's mode in the manufacturer-specific range
// 110xxxxx (docs/transport.md, "Selective repeat").
enum class Transport : std::uint8_t { kRc, kUc, kRd, kUd, kCnp, kXrc, kSr, kOther };

// Extension headers, in the order they follow the BTH (IBTA 9.2-9.3: the
// XRCETH right after it in every XRC request, IBTA annex A14; FETH
// precedes RETH in FLUSH, as IBTA 1.5 lays it out).
// Selective repeat's SRETH follows the BTH (and any XRCETH) in each of its
// requests, its SACKETH the AETH and atomic ACK ETH in its ACK.
enum class ExtHdr : std::uint8_t {
  kDeth, kXrceth, kSreth, kFeth, kReth, kAtomicEth, kAeth, kAtomicAckEth, kSacketh, kImmDt, kIeth, kCount
};

inline constexpr std::array<std::uint8_t, static_cast<int>(ExtHdr::kCount)> kExtHdrBytes = {
    8, 4, 16, 4, 16, 28, 4, 8, 20, 4, 4};

// What an opcode is. Bits, so a row reads as a short list.
enum OpFlag : std::uint32_t {
  kHasDeth = 1u << 0,
  kHasFeth = 1u << 1,
  kHasReth = 1u << 2,
  kHasAtomicEth = 1u << 3,
  kHasAeth = 1u << 4,
  kHasAtomicAckEth = 1u << 5,
  kHasImmDt = 1u << 6,
  kHasIeth = 1u << 7,
  kHasPayload = 1u << 8,    // a payload may follow (it may be 0 bytes long)
  kRequest = 1u << 9,       // sent by a requester
  kResponse = 1u << 10,     // sent by a responder (ACK, READ response, atomic ACK)
  kFirst = 1u << 11,
  kMiddle = 1u << 12,
  kLast = 1u << 13,
  kOnly = kFirst | kLast,
  kSend = 1u << 14,
  kWrite = 1u << 15,
  kReadRequest = 1u << 16,
  kReadResponse = 1u << 17,
  kAtomic = 1u << 18,       // CmpSwap and FetchAdd
  kAck = 1u << 19,
  kAtomicAck = 1u << 20,
  kCnpOp = 1u << 21,
  kFlushOp = 1u << 22,
  kAtomicWriteOp = 1u << 23,
  kFixedPayload8 = 1u << 24, // payload is exactly 8 bytes (ATOMIC WRITE)
  kFixedPayload16 = 1u << 25, // payload is exactly 16 bytes (CNP)
  kUnsupported = 1u << 26,  // known on the wire; the transport does not run it yet
  kHasXrceth = 1u << 27,
  kHasSreth = 1u << 28,
  kHasSacketh = 1u << 29,
};

struct OpcodeInfo {
  const char* name = nullptr;  // nullptr: unknown / reserved opcode
  std::uint32_t flags = 0;
  Transport transport = Transport::kOther;
  // Byte offset of each extension header from the start of the BTH; 0 = absent.
  std::array<std::uint8_t, static_cast<int>(ExtHdr::kCount)> offset{};
  std::uint8_t header_bytes = 0;  // BTH + extension headers: where the payload starts

  constexpr bool known() const { return name != nullptr; }
  constexpr bool has(std::uint32_t f) const { return (flags & f) == f; }
  constexpr bool has_any(std::uint32_t f) const { return (flags & f) != 0; }
  constexpr bool supported() const { return known() && !has(kUnsupported); }
  constexpr std::uint8_t offset_of(ExtHdr h) const { return offset[static_cast<int>(h)]; }
};

namespace detail {

struct OpcodeRow {
  std::uint8_t value;
  const char* name;
  std::uint32_t flags;
};

// The table. Header flags determine the offsets; nothing else is per-row.
inline constexpr OpcodeRow kOpcodeRows[] = {
    // RC (IBTA 9.2.2)
    {0x00, "RC_SEND_FIRST", kRequest | kSend | kFirst | kHasPayload},
    {0x01, "RC_SEND_MIDDLE", kRequest | kSend | kMiddle | kHasPayload},
    {0x02, "RC_SEND_LAST", kRequest | kSend | kLast | kHasPayload},
    {0x03, "RC_SEND_LAST_WITH_IMMEDIATE", kRequest | kSend | kLast | kHasImmDt | kHasPayload},
    {0x04, "RC_SEND_ONLY", kRequest | kSend | kOnly | kHasPayload},
    {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", kRequest | kSend | kOnly | kHasImmDt | kHasPayload},
    {0x06, "RC_RDMA_WRITE_FIRST", kRequest | kWrite | kFirst | kHasReth | kHasPayload},
    {0x07, "RC_RDMA_WRITE_MIDDLE", kRequest | kWrite | kMiddle | kHasPayload},
    {0x08, "RC_RDMA_WRITE_LAST", kRequest | kWrite | kLast | kHasPayload},
    {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kRequest | kWrite | kLast | kHasImmDt | kHasPayload},
    {0x0a, "RC_RDMA_WRITE_ONLY", kRequest | kWrite | kOnly | kHasReth | kHasPayload},
    {0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
     kRequest | kWrite | kOnly | kHasReth | kHasImmDt | kHasPayload},
    {0x0c, "RC_RDMA_READ_REQUEST", kRequest | kReadRequest | kOnly | kHasReth},
    {0x0d, "RC_RDMA_READ_RESPONSE_FIRST", kResponse | kReadResponse | kFirst | kHasAeth | kHasPayload},
    {0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", kResponse | kReadResponse | kMiddle | kHasPayload},
    {0x0f, "RC_RDMA_READ_RESPONSE_LAST", kResponse | kReadResponse | kLast | kHasAeth | kHasPayload},
    {0x10, "RC_RDMA_READ_RESPONSE_ONLY", kResponse | kReadResponse | kOnly | kHasAeth | kHasPayload},
    {0x11, "RC_ACKNOWLEDGE", kResponse | kAck | kOnly | kHasAeth},
    {0x12, "RC_ATOMIC_ACKNOWLEDGE", kResponse | kAtomicAck | kOnly | kHasAeth | kHasAtomicAckEth},
    {0x13, "RC_COMPARE_SWAP", kRequest | kAtomic | kOnly | kHasAtomicEth},
    {0x14, "RC_FETCH_ADD", kRequest | kAtomic | kOnly | kHasAtomicEth},
    {0x16, "RC_SEND_LAST_WITH_INVALIDATE", kRequest | kSend | kLast | kHasIeth | kHasPayload},
    {0x17, "RC_SEND_ONLY_WITH_INVALIDATE", kRequest | kSend | kOnly | kHasIeth | kHasPayload},
    // IBTA 1.5 additions: FLUSH known on the wire but not run by the transport yet.
    {0x1c, "RC_FLUSH", kRequest | kFlushOp | kOnly | kHasFeth | kHasReth | kUnsupported},
    {0x1d, "RC_ATOMIC_WRITE", kRequest | kAtomicWriteOp | kOnly | kHasReth | kHasPayload | kFixedPayload8},
    // UC: SEND and RDMA WRITE only.
    {0x20, "UC_SEND_FIRST", kRequest | kSend | kFirst | kHasPayload},
    {0x21, "UC_SEND_MIDDLE", kRequest | kSend | kMiddle | kHasPayload},
    {0x22, "UC_SEND_LAST", kRequest | kSend | kLast | kHasPayload},
    {0x23, "UC_SEND_LAST_WITH_IMMEDIATE", kRequest | kSend | kLast | kHasImmDt | kHasPayload},
    {0x24, "UC_SEND_ONLY", kRequest | kSend | kOnly | kHasPayload},
    {0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", kRequest | kSend | kOnly | kHasImmDt | kHasPayload},
    {0x26, "UC_RDMA_WRITE_FIRST", kRequest | kWrite | kFirst | kHasReth | kHasPayload},
    {0x27, "UC_RDMA_WRITE_MIDDLE", kRequest | kWrite | kMiddle | kHasPayload},
    {0x28, "UC_RDMA_WRITE_LAST", kRequest | kWrite | kLast | kHasPayload},
    {0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kRequest | kWrite | kLast | kHasImmDt | kHasPayload},
    {0x2a, "UC_RDMA_WRITE_ONLY", kRequest | kWrite | kOnly | kHasReth | kHasPayload},
    {0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
     kRequest | kWrite | kOnly | kHasReth | kHasImmDt | kHasPayload},
    // UD: SEND only, always with a DETH.
    {0x64, "UD_SEND_ONLY", kRequest | kSend | kOnly | kHasDeth | kHasPayload},
    {0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", kRequest | kSend | kOnly | kHasDeth | kHasImmDt | kHasPayload},
    // XRC (IBTA annex A14; table 38's 101xxxxx): RC's operations, each
    // request with an XRCETH naming the receiver's XRC SRQ; responses as RC's.
    {0xa0, "XRC_SEND_FIRST", kRequest | kSend | kFirst | kHasXrceth | kHasPayload},
    {0xa1, "XRC_SEND_MIDDLE", kRequest | kSend | kMiddle | kHasXrceth | kHasPayload},
    {0xa2, "XRC_SEND_LAST", kRequest | kSend | kLast | kHasXrceth | kHasPayload},
    {0xa3, "XRC_SEND_LAST_WITH_IMMEDIATE", kRequest | kSend | kLast | kHasXrceth | kHasImmDt | kHasPayload},
    {0xa4, "XRC_SEND_ONLY", kRequest | kSend | kOnly | kHasXrceth | kHasPayload},
    {0xa5, "XRC_SEND_ONLY_WITH_IMMEDIATE", kRequest | kSend | kOnly | kHasXrceth | kHasImmDt | kHasPayload},
    {0xa6, "XRC_RDMA_WRITE_FIRST", kRequest | kWrite | kFirst | kHasXrceth | kHasReth | kHasPayload},
    {0xa7, "XRC_RDMA_WRITE_MIDDLE", kRequest | kWrite | kMiddle | kHasXrceth | kHasPayload},
    {0xa8, "XRC_RDMA_WRITE_LAST", kRequest | kWrite | kLast | kHasXrceth | kHasPayload},
    {0xa9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
     kRequest | kWrite | kLast | kHasXrceth | kHasImmDt | kHasPayload},
    {0xaa, "XRC_RDMA_WRITE_ONLY", kRequest | kWrite | kOnly | kHasXrceth | kHasReth | kHasPayload},
    {0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
     kRequest | kWrite | kOnly | kHasXrceth | kHasReth | kHasImmDt | kHasPayload},
    {0xac, "XRC_RDMA_READ_REQUEST", kRequest | kReadRequest | kOnly | kHasXrceth | kHasReth},
    {0xad, "XRC_RDMA_READ_RESPONSE_FIRST", kResponse | kReadResponse | kFirst | kHasAeth | kHasPayload},
    {0xae, "XRC_RDMA_READ_RESPONSE_MIDDLE", kResponse | kReadResponse | kMiddle | kHasPayload},
    {0xaf, "XRC_RDMA_READ_RESPONSE_LAST", kResponse | kReadResponse | kLast | kHasAeth | kHasPayload},
    {0xb0, "XRC_RDMA_READ_RESPONSE_ONLY", kResponse | kReadResponse | kOnly | kHasAeth | kHasPayload},
    {0xb1, "XRC_ACKNOWLEDGE", kResponse | kAck | kOnly | kHasAeth},
    {0xb2, "XRC_ATOMIC_ACKNOWLEDGE", kResponse | kAtomicAck | kOnly | kHasAeth | kHasAtomicAckEth},
    {0xb3, "XRC_COMPARE_SWAP", kRequest | kAtomic | kOnly | kHasXrceth | kHasAtomicEth},
    {0xb4, "XRC_FETCH_ADD", kRequest | kAtomic | kOnly | kHasXrceth | kHasAtomicEth},
    {0xb6, "XRC_SEND_LAST_WITH_INVALIDATE", kRequest | kSend | kLast | kHasXrceth | kHasIeth | kHasPayload},
    {0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE", kRequest | kSend | kOnly | kHasXrceth | kHasIeth | kHasPayload},
    {0xbc, "XRC_FLUSH", kRequest | kFlushOp | kOnly | kHasXrceth | kHasFeth | kHasReth | kUnsupported},
    {0xbd, "XRC_ATOMIC_WRITE",
     kRequest | kAtomicWriteOp | kOnly | kHasXrceth | kHasReth | kHasPayload | kFixedPayload8},
    // Selective repeat (docs/transport.md): RC's operations at 0xc0, in the
    // manufacturer-specific range; each request with an SRETH, every WRITE
    // packet with a RETH, the ACK with a SACKETH. Not run yet.
    {0xc0, "SR_SEND_FIRST", kRequest | kHasSreth | kSend | kFirst | kHasPayload},
    {0xc1, "SR_SEND_MIDDLE", kRequest | kHasSreth | kSend | kMiddle | kHasPayload},
    {0xc2, "SR_SEND_LAST", kRequest | kHasSreth | kSend | kLast | kHasPayload},
    {0xc3, "SR_SEND_LAST_WITH_IMMEDIATE",
     kRequest | kHasSreth | kSend | kLast | kHasImmDt | kHasPayload},
    {0xc4, "SR_SEND_ONLY", kRequest | kHasSreth | kSend | kOnly | kHasPayload},
    {0xc5, "SR_SEND_ONLY_WITH_IMMEDIATE",
     kRequest | kHasSreth | kSend | kOnly | kHasImmDt | kHasPayload},
    {0xc6, "SR_RDMA_WRITE_FIRST", kRequest | kHasSreth | kWrite | kFirst | kHasReth | kHasPayload},
    {0xc7, "SR_RDMA_WRITE_MIDDLE", kRequest | kHasSreth | kWrite | kHasReth | kMiddle | kHasPayload},
    {0xc8, "SR_RDMA_WRITE_LAST", kRequest | kHasSreth | kWrite | kHasReth | kLast | kHasPayload},
    {0xc9, "SR_RDMA_WRITE_LAST_WITH_IMMEDIATE",
     kRequest | kHasSreth | kWrite | kHasReth | kLast | kHasImmDt | kHasPayload},
    {0xca, "SR_RDMA_WRITE_ONLY", kRequest | kHasSreth | kWrite | kOnly | kHasReth | kHasPayload},
    {0xcb, "SR_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
     kRequest | kHasSreth | kWrite | kOnly | kHasReth | kHasImmDt | kHasPayload},
    {0xcc, "SR_RDMA_READ_REQUEST", kRequest | kHasSreth | kReadRequest | kOnly | kHasReth},
    {0xcd, "SR_RDMA_READ_RESPONSE_FIRST", kResponse | kReadResponse | kFirst | kHasAeth | kHasPayload},
    {0xce, "SR_RDMA_READ_RESPONSE_MIDDLE", kResponse | kReadResponse | kMiddle | kHasPayload},
    {0xcf, "SR_RDMA_READ_RESPONSE_LAST", kResponse | kReadResponse | kLast | kHasAeth | kHasPayload},
    {0xd0, "SR_RDMA_READ_RESPONSE_ONLY", kResponse | kReadResponse | kOnly | kHasAeth | kHasPayload},
    {0xd1, "SR_ACKNOWLEDGE", kResponse | kAck | kOnly | kHasAeth | kHasSacketh},
    {0xd2, "SR_ATOMIC_ACKNOWLEDGE", kResponse | kAtomicAck | kOnly | kHasAeth | kHasAtomicAckEth},
    {0xd3, "SR_COMPARE_SWAP", kRequest | kHasSreth | kAtomic | kOnly | kHasAtomicEth},
    {0xd4, "SR_FETCH_ADD", kRequest | kHasSreth | kAtomic | kOnly | kHasAtomicEth},
    {0xd6, "SR_SEND_LAST_WITH_INVALIDATE",
     kRequest | kHasSreth | kSend | kLast | kHasIeth | kHasPayload},
    {0xd7, "SR_SEND_ONLY_WITH_INVALIDATE",
     kRequest | kHasSreth | kSend | kOnly | kHasIeth | kHasPayload},
    {0xdd, "SR_ATOMIC_WRITE",
     kRequest | kHasSreth | kAtomicWriteOp | kOnly | kHasReth | kHasPayload | kFixedPayload8},
    // RoCEv2 CNP (Annex A17.9.3): BTH, 16 reserved bytes, ICRC.
    {0x81, "CNP", kCnpOp | kHasPayload | kFixedPayload16},
};

constexpr Transport transport_of(std::uint8_t op) {
  switch (op >> 5) {
    case 0: return Transport::kRc;
    case 1: return Transport::kUc;
    case 2: return Transport::kRd;
    case 3: return Transport::kUd;
    case 4: return Transport::kCnp;
    case 5: return Transport::kXrc;
    case 6: return Transport::kSr;
    default: return Transport::kOther;
  }
}

constexpr std::array<OpcodeInfo, 256> make_opcode_table() {
  constexpr std::uint32_t kHeaderBit[] = {kHasDeth, kHasXrceth,       kHasSreth,   kHasFeth, kHasReth, kHasAtomicEth,
                                          kHasAeth, kHasAtomicAckEth, kHasSacketh, kHasImmDt, kHasIeth};
  static_assert(std::size(kHeaderBit) == static_cast<std::size_t>(ExtHdr::kCount));
  std::array<OpcodeInfo, 256> table{};
  for (const OpcodeRow& row : kOpcodeRows) {
    OpcodeInfo& info = table[row.value];
    info.name = row.name;
    info.flags = row.flags;
    info.transport = transport_of(row.value);
    std::uint8_t at = 12;  // sizeof(Bth)
    for (int h = 0; h < static_cast<int>(ExtHdr::kCount); ++h) {
      if (row.flags & kHeaderBit[h]) {
        info.offset[h] = at;
        at = static_cast<std::uint8_t>(at + kExtHdrBytes[h]);
      }
    }
    info.header_bytes = at;
  }
  return table;
}

}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_opcode_table();

constexpr const OpcodeInfo& opcode_info(std::uint8_t opcode) { return kOpcodeTable[opcode]; }
constexpr const OpcodeInfo& opcode_info(Opcode opcode) {
  return kOpcodeTable[static_cast<std::uint8_t>(opcode)];
}

// Layouts fixed by the spec, checked at compile time.
static_assert(opcode_info(Opcode::kRcWriteOnlyImm).offset_of(ExtHdr::kImmDt) == 28);
static_assert(opcode_info(Opcode::kRcAtomicAcknowledge).header_bytes == 24);
static_assert(opcode_info(Opcode::kRcCompareSwap).header_bytes == 40);
static_assert(opcode_info(Opcode::kUdSendOnlyImm).offset_of(ExtHdr::kImmDt) == 20);
static_assert(opcode_info(Opcode::kRcFlush).offset_of(ExtHdr::kReth) == 16);
static_assert(!opcode_info(Opcode::kRcFlush).supported());
static_assert(opcode_info(Opcode::kUcWriteOnlyImm).supported() && opcode_info(Opcode::kUdSendOnlyImm).supported());
static_assert(!opcode_info(0x15).known());
static_assert(opcode_info(0xb3).header_bytes == 44 && opcode_info(0xb3).offset_of(ExtHdr::kAtomicEth) == 16);
static_assert(opcode_info(0xab).offset_of(ExtHdr::kImmDt) == 32 && opcode_info(0xad).header_bytes == 16);
static_assert(opcode_info(0xc7).offset_of(ExtHdr::kReth) == 28 && opcode_info(0xd1).header_bytes == 36);

// "RC_SEND_FIRST", or "UNKNOWN" for an opcode the table does not know.
const char* opcode_name(std::uint8_t opcode);

const char* transport_name(Transport t);

}  // namespace uroce::wire
