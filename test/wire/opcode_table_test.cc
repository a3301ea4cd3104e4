// The opcode table against an independent listing of IBTA table 38 and the
// header layouts of chapter 9.
#include <gtest/gtest.h>

#include <map>

#include "wire/opcode.h"

namespace uroce::test {
namespace {

using namespace uroce::wire;

// opcode -> bytes from the start of the BTH to the payload.
const std::map<int, int> kHeaderBytes = {
    {0x00, 12}, {0x01, 12}, {0x02, 12}, {0x03, 16}, {0x04, 12}, {0x05, 16}, {0x06, 28},
    {0x07, 12}, {0x08, 12}, {0x09, 16}, {0x0a, 28}, {0x0b, 32}, {0x0c, 28}, {0x0d, 16},
    {0x0e, 12}, {0x0f, 16}, {0x10, 16}, {0x11, 16}, {0x12, 24}, {0x13, 40}, {0x14, 40},
    {0x16, 16}, {0x17, 16}, {0x1c, 32}, {0x1d, 28},
    {0x20, 12}, {0x21, 12}, {0x22, 12}, {0x23, 16}, {0x24, 12}, {0x25, 16}, {0x26, 28},
    {0x27, 12}, {0x28, 12}, {0x29, 16}, {0x2a, 28}, {0x2b, 32},
    {0x64, 20}, {0x65, 24}, {0x81, 12},
    // XRC (annex A14): each request carries a 4-byte XRCETH; responses as RC's.
    {0xa0, 16}, {0xa1, 16}, {0xa2, 16}, {0xa3, 20}, {0xa4, 16}, {0xa5, 20}, {0xa6, 32},
    {0xa7, 16}, {0xa8, 16}, {0xa9, 20}, {0xaa, 32}, {0xab, 36}, {0xac, 32}, {0xad, 16},
    {0xae, 12}, {0xaf, 16}, {0xb0, 16}, {0xb1, 16}, {0xb2, 24}, {0xb3, 44}, {0xb4, 44},
    {0xb6, 20}, {0xb7, 20}, {0xbc, 36}, {0xbd, 32},
    // Selective repeat (uroce's, in the manufacturer-specific range): a
    // 16-byte SRETH in each request, a RETH in every WRITE packet, a
    // 20-byte SACKETH in the ACK.
    {0xc0, 28}, {0xc1, 28}, {0xc2, 28}, {0xc3, 32}, {0xc4, 28}, {0xc5, 32}, {0xc6, 44},
    {0xc7, 44}, {0xc8, 44}, {0xc9, 48}, {0xca, 44}, {0xcb, 48}, {0xcc, 44}, {0xcd, 16},
    {0xce, 12}, {0xcf, 16}, {0xd0, 16}, {0xd1, 36}, {0xd2, 24}, {0xd3, 56}, {0xd4, 56},
    {0xd6, 32}, {0xd7, 32}, {0xdd, 44},
};

TEST(OpcodeTable, KnowsExactlyTheListedOpcodes) {
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(static_cast<std::uint8_t>(op));
    const auto it = kHeaderBytes.find(op);
    if (it == kHeaderBytes.end()) {
      EXPECT_FALSE(info.known()) << "opcode 0x" << std::hex << op << " is reserved";
      EXPECT_STREQ(opcode_name(static_cast<std::uint8_t>(op)), "UNKNOWN");
      continue;
    }
    ASSERT_TRUE(info.known()) << std::hex << op;
    EXPECT_EQ(info.header_bytes, it->second) << info.name;
  }
}

TEST(OpcodeTable, TransportFollowsTheHighBits) {
  for (const auto& [op, bytes] : kHeaderBytes) {
    const OpcodeInfo& info = opcode_info(static_cast<std::uint8_t>(op));
    const std::string name = info.name;
    const std::string transport = op < 0x20 ? "RC" : op < 0x40 ? "UC" : op < 0x80 ? "UD" : op < 0xa0 ? "CNP" : op < 0xc0 ? "XRC" : "SR";
    EXPECT_EQ(name.rfind(transport, 0), 0u) << name;
    EXPECT_EQ(transport_name(info.transport), transport) << name;
  }
}

TEST(OpcodeTable, HeaderOffsetsFollowIbtaOrder) {
  const auto& w = opcode_info(Opcode::kRcWriteOnlyImm);
  EXPECT_EQ(w.offset_of(ExtHdr::kReth), 12);
  EXPECT_EQ(w.offset_of(ExtHdr::kImmDt), 28);
  const auto& aa = opcode_info(Opcode::kRcAtomicAcknowledge);
  EXPECT_EQ(aa.offset_of(ExtHdr::kAeth), 12);
  EXPECT_EQ(aa.offset_of(ExtHdr::kAtomicAckEth), 16);
  const auto& ud = opcode_info(Opcode::kUdSendOnlyImm);
  EXPECT_EQ(ud.offset_of(ExtHdr::kDeth), 12);
  EXPECT_EQ(ud.offset_of(ExtHdr::kImmDt), 20);
  const auto& inv = opcode_info(Opcode::kRcSendOnlyInv);
  EXPECT_EQ(inv.offset_of(ExtHdr::kIeth), 12);
  EXPECT_EQ(inv.offset_of(ExtHdr::kImmDt), 0);
  const auto& fl = opcode_info(Opcode::kRcFlush);
  EXPECT_EQ(fl.offset_of(ExtHdr::kFeth), 12);
  EXPECT_EQ(fl.offset_of(ExtHdr::kReth), 16);
  const auto& rr = opcode_info(Opcode::kRcReadResponseMiddle);
  EXPECT_EQ(rr.offset_of(ExtHdr::kAeth), 0) << "READ response Middle carries no AETH";
  // XRC: the XRCETH right behind the BTH, the rest after it; none in responses.
  const auto& xw = opcode_info(0xab);  // XRC RDMA WRITE Only with immediate
  EXPECT_EQ(xw.offset_of(ExtHdr::kXrceth), 12);
  EXPECT_EQ(xw.offset_of(ExtHdr::kReth), 16);
  EXPECT_EQ(xw.offset_of(ExtHdr::kImmDt), 32);
  const auto& xa = opcode_info(0xb3);  // XRC CmpSwap
  EXPECT_EQ(xa.offset_of(ExtHdr::kXrceth), 12);
  EXPECT_EQ(xa.offset_of(ExtHdr::kAtomicEth), 16);
  for (const int response : {0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2}) {
    EXPECT_EQ(opcode_info(static_cast<std::uint8_t>(response)).offset_of(ExtHdr::kXrceth), 0) << response;
  }
  EXPECT_EQ(opcode_info(Opcode::kXrcAtomicAcknowledge).offset_of(ExtHdr::kAtomicAckEth), 16);
  // Selective repeat: the SRETH behind the BTH, a WRITE Middle's RETH after
  // it, the ACK's SACKETH after the AETH.
  EXPECT_EQ(opcode_info(0xc7).offset_of(ExtHdr::kSreth), 12);
  EXPECT_EQ(opcode_info(0xc7).offset_of(ExtHdr::kReth), 28);
  EXPECT_EQ(opcode_info(0xd1).offset_of(ExtHdr::kAeth), 12);
  EXPECT_EQ(opcode_info(0xd1).offset_of(ExtHdr::kSacketh), 16);
  EXPECT_EQ(opcode_info(0xd3).offset_of(ExtHdr::kAtomicEth), 28);
}

TEST(OpcodeTable, MeaningFlags) {
  int with_payload = 0;
  for (const auto& [op, bytes] : kHeaderBytes) {
    const OpcodeInfo& info = opcode_info(static_cast<std::uint8_t>(op));
    with_payload += info.has(kHasPayload);
    if (info.transport == Transport::kCnp) continue;
    EXPECT_NE(info.has(kRequest), info.has(kResponse)) << info.name;
    EXPECT_TRUE(info.has_any(kFirst | kMiddle | kLast)) << info.name;
  }
  EXPECT_EQ(with_payload, 72);  // not: READ request, ACK, atomic ACK, CmpSwap, FetchAdd, FLUSH (RC's, XRC's, SR's)
  EXPECT_FALSE(opcode_info(Opcode::kRcReadRequest).has(kHasPayload));
  EXPECT_TRUE(opcode_info(Opcode::kRcReadResponseOnly).has(kOnly));
  EXPECT_TRUE(opcode_info(Opcode::kRcSendLastImm).has(kLast | kHasImmDt | kSend));
  EXPECT_TRUE(opcode_info(Opcode::kRcCompareSwap).has(kAtomic | kRequest));
  EXPECT_TRUE(opcode_info(Opcode::kCnp).has(kCnpOp | kFixedPayload16));
}

TEST(OpcodeTable, FlushIsKnownButUnsupportedAtomicWriteRuns) {
  EXPECT_TRUE(opcode_info(Opcode::kRcFlush).known());
  EXPECT_FALSE(opcode_info(Opcode::kRcFlush).supported());
  EXPECT_TRUE(opcode_info(Opcode::kRcAtomicWrite).known());
  EXPECT_TRUE(opcode_info(Opcode::kRcAtomicWrite).supported());
  // As Soft-RoCE lays it out: BTH, RETH, then the 8 bytes.
  EXPECT_EQ(opcode_info(Opcode::kRcAtomicWrite).offset_of(ExtHdr::kReth), 12);
  EXPECT_EQ(opcode_info(Opcode::kRcAtomicWrite).header_bytes, 28);
  EXPECT_TRUE(opcode_info(Opcode::kRcSendOnly).supported());
  EXPECT_TRUE(opcode_info(Opcode::kRcCompareSwap).supported());
  EXPECT_TRUE(opcode_info(Opcode::kRcAtomicWrite).has(kFixedPayload8));
  EXPECT_TRUE(opcode_info(Opcode::kUcSendFirst).supported());
  EXPECT_TRUE(opcode_info(Opcode::kUdSendOnly).supported());
}

// UC, UD, XRC and selective repeat run end to end (ud_uc_test, xrc_test,
// selective_repeat_test): no row of theirs is flagged unsupported; FLUSH
// (RC's and XRC's) is.
TEST(OpcodeTable, OnlyFlushIsUnsupported) {
  for (const auto& [op, bytes] : kHeaderBytes) {
    const OpcodeInfo& info = opcode_info(static_cast<std::uint8_t>(op));
    const bool unsupported = op == 0x1c || op == 0xbc;
    EXPECT_EQ(info.supported(), !unsupported) << info.name;
  }
}

}  // namespace
}  // namespace uroce::test
