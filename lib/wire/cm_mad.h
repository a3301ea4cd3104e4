// Communication Management MADs (IBTA 12.6, 13.4): the 256-byte messages
// two CMs exchange as UD datagrams to QP1 (Q_Key 0x80010000) to connect RC
// and UC QPs: REQ, MRA, REJ, REP, RTU, DREQ, DREP; and SIDR_REQ and
// SIDR_REP, which find a UD QP by service ID (12.11). Each decodes from and
// encodes to the exact bytes of the wire (big-endian, bit fields packed as
// the tables of 12.6 give them), so that decode then encode reproduces what
// Soft-RoCE sent. The rdma_cm header that rdma_cm puts at the start of a
// REQ's private data (its IP addresses and port) is here too, with the
// service ID rdma_cm derives from the port space and port.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

namespace uroce::wire {

inline constexpr std::size_t kMadBytes = 256;
inline constexpr std::uint32_t kGsiQpn = 1;
inline constexpr std::uint32_t kGsiQkey = 0x80010000;  // IBTA 13.4.6.4: the GSI's well-known Q_Key
inline constexpr std::uint8_t kMgmtClassCm = 0x07;
inline constexpr std::uint8_t kCmClassVersion = 2;
inline constexpr std::uint8_t kMadMethodSend = 0x03;

// Each message's layout is written once, as a field list below its struct:
// X(member, byte, shift, bits): the field is `bits` wide and its lowest bit
// sits `shift` bits above the lowest bit of the big-endian bytes from `byte`
// (as many as shift + bits need): REQ's X(transport, 43, 1, 2) is bits 2:1
// of byte 43, the path's X(flow_label, 36, 12, 20) the top 20 bits of the
// 32-bit word at 36. A byte array's bits are 8 times its size, a CmPath's
// 8 * kCmPathBytes. Bytes count from the start of the MAD for
// MadHeader, from the attribute (byte 24) for the messages, as IBTA's tables
// give them. cm_mad.cc derives decode and encode from these lists; what no
// field covers is reserved and encodes as zero.
inline constexpr std::size_t kMadHeaderBytes = 24;
inline constexpr std::size_t kCmAttrBytes = kMadBytes - kMadHeaderBytes;
inline constexpr std::size_t kCmPathBytes = 44;

// CM attribute IDs (IBTA table 106).
enum class CmAttr : std::uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001a,
};
// Its name as uroce-dump prints it ("ConnectRequest", ...; "CM" if unknown).
const char* cm_attr_name(std::uint16_t attr);

// The MAD common header (IBTA 13.4.2).
struct MadHeader {
  std::uint8_t base_version = 1;
  std::uint8_t mgmt_class = kMgmtClassCm;
  std::uint8_t class_version = kCmClassVersion;
  std::uint8_t method = kMadMethodSend;
  std::uint16_t status = 0;
  std::uint16_t class_specific = 0;
  std::uint64_t tid = 0;
  std::uint16_t attr_id = 0;
  std::uint32_t attr_modifier = 0;
  friend bool operator==(const MadHeader&, const MadHeader&) = default;
};
#define UROCE_MAD_HEADER_FIELDS(X) \
  X(base_version, 0, 0, 8)         \
  X(mgmt_class, 1, 0, 8)           \
  X(class_version, 2, 0, 8)        \
  X(method, 3, 0, 8)               \
  X(status, 4, 0, 16)              \
  X(class_specific, 6, 0, 16)      \
  X(tid, 8, 0, 64)                 \
  X(attr_id, 16, 0, 16)            \
  X(attr_modifier, 20, 0, 32)

// A path as REQ carries it (primary or alternate; IBTA table 99's path fields).
struct CmPath {
  std::uint16_t local_lid = 0xffff;   // RoCE: the permissive LID, as rxe sends
  std::uint16_t remote_lid = 0xffff;
  std::array<std::uint8_t, 16> local_gid{};
  std::array<std::uint8_t, 16> remote_gid{};
  std::uint32_t flow_label = 0;       // 20 bits
  std::uint8_t packet_rate = 0;       // 6 bits
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t sl = 0;                // 4 bits
  bool subnet_local = false;
  std::uint8_t local_ack_timeout = 0; // 5 bits
  friend bool operator==(const CmPath&, const CmPath&) = default;
};
// Its 44 bytes, from where REQ puts it (bytes 52 and 96).
#define UROCE_CM_PATH_FIELDS(X) \
  X(local_lid, 0, 0, 16)        \
  X(remote_lid, 2, 0, 16)       \
  X(local_gid, 4, 0, 16 * 8)    \
  X(remote_gid, 20, 0, 16 * 8)  \
  X(flow_label, 36, 12, 20)     \
  X(packet_rate, 39, 0, 6)      \
  X(traffic_class, 40, 0, 8)    \
  X(hop_limit, 41, 0, 8)        \
  X(sl, 42, 4, 4)               \
  X(subnet_local, 42, 3, 1)     \
  X(local_ack_timeout, 43, 3, 5)

// REQ (IBTA 12.6.5, table 99).
struct CmReq {
  std::uint32_t local_comm_id = 0;
  std::uint64_t service_id = 0;
  std::uint64_t local_ca_guid = 0;    // as on the wire (big-endian value)
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;        // 24 bits
  std::uint8_t responder_resources = 0;
  std::uint32_t local_eecn = 0;       // 24 bits
  std::uint8_t initiator_depth = 0;
  std::uint32_t remote_eecn = 0;      // 24 bits
  std::uint8_t remote_cm_response_timeout = 0;  // 5 bits
  std::uint8_t transport = 0;         // 2 bits: 0 RC, 1 UC, 3 RD (table 99)
  bool end_to_end_flow_control = false;
  std::uint32_t starting_psn = 0;     // 24 bits
  std::uint8_t local_cm_response_timeout = 0;   // 5 bits
  std::uint8_t retry_count = 0;       // 3 bits
  std::uint16_t pkey = 0xffff;
  std::uint8_t path_mtu = 0;          // 4 bits, ibv_mtu
  bool rdc_exists = false;
  std::uint8_t rnr_retry_count = 0;   // 3 bits
  std::uint8_t max_cm_retries = 0;    // 4 bits
  bool srq = false;
  std::uint8_t extended_transport = 0;  // 3 bits
  // ECE (rdma-core's enhanced connection establishment), where Linux's CM
  // puts it in a byte range IBTA's table reserves: the sender's vendor id
  // (0: no ECE); its options travel in the MAD header's attribute modifier.
  std::uint32_t vendor_id = 0;        // 24 bits
  CmPath primary;
  CmPath alternate;
  bool has_alternate = false;         // an alternate path (LIDs or GIDs non-zero)
  std::array<std::uint8_t, 92> private_data{};
  friend bool operator==(const CmReq&, const CmReq&) = default;
};
// has_alternate is no field: decode sets it when the alternate path is
// present, encode leaves the alternate path zero without it.
#define UROCE_CM_REQ_FIELDS(X)               \
  X(local_comm_id, 0, 0, 32)                 \
  X(vendor_id, 5, 0, 24)                     \
  X(service_id, 8, 0, 64)                    \
  X(local_ca_guid, 16, 0, 64)                \
  X(local_qkey, 28, 0, 32)                   \
  X(local_qpn, 32, 0, 24)                    \
  X(responder_resources, 35, 0, 8)           \
  X(local_eecn, 36, 0, 24)                   \
  X(initiator_depth, 39, 0, 8)               \
  X(remote_eecn, 40, 0, 24)                  \
  X(remote_cm_response_timeout, 43, 3, 5)    \
  X(transport, 43, 1, 2)                     \
  X(end_to_end_flow_control, 43, 0, 1)       \
  X(starting_psn, 44, 0, 24)                 \
  X(local_cm_response_timeout, 47, 3, 5)     \
  X(retry_count, 47, 0, 3)                   \
  X(pkey, 48, 0, 16)                         \
  X(path_mtu, 50, 4, 4)                      \
  X(rdc_exists, 50, 3, 1)                    \
  X(rnr_retry_count, 50, 0, 3)               \
  X(max_cm_retries, 51, 4, 4)                \
  X(srq, 51, 3, 1)                           \
  X(extended_transport, 51, 0, 3)            \
  X(primary, 52, 0, kCmPathBytes * 8)        \
  X(alternate, 96, 0, kCmPathBytes * 8)      \
  X(private_data, 140, 0, 92 * 8)

// REP (IBTA 12.6.8, table 103).
struct CmRep {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;        // 24 bits
  std::uint32_t local_eecn = 0;       // 24 bits
  std::uint32_t starting_psn = 0;     // 24 bits
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t target_ack_delay = 0;  // 5 bits
  std::uint8_t failover_accepted = 0; // 2 bits
  bool end_to_end_flow_control = false;
  std::uint8_t rnr_retry_count = 0;   // 3 bits
  bool srq = false;
  std::uint64_t local_ca_guid = 0;
  // ECE's vendor id (0: none), as Linux's CM splits it over three reserved
  // bytes (rep_vendor_id below); the options are in the attribute modifier.
  std::uint8_t vendor_id_high = 0, vendor_id_mid = 0, vendor_id_low = 0;
  std::array<std::uint8_t, 196> private_data{};
  friend bool operator==(const CmRep&, const CmRep&) = default;
};
inline std::uint32_t rep_vendor_id(const CmRep& r) {
  return std::uint32_t{r.vendor_id_high} << 16 | std::uint32_t{r.vendor_id_mid} << 8 | r.vendor_id_low;
}
inline void set_rep_vendor_id(CmRep& r, std::uint32_t vendor_id) {
  r.vendor_id_high = static_cast<std::uint8_t>(vendor_id >> 16);
  r.vendor_id_mid = static_cast<std::uint8_t>(vendor_id >> 8);
  r.vendor_id_low = static_cast<std::uint8_t>(vendor_id);
}
#define UROCE_CM_REP_FIELDS(X)            \
  X(local_comm_id, 0, 0, 32)              \
  X(remote_comm_id, 4, 0, 32)             \
  X(local_qkey, 8, 0, 32)                 \
  X(local_qpn, 12, 0, 24)                 \
  X(vendor_id_high, 15, 0, 8)             \
  X(local_eecn, 16, 0, 24)                \
  X(vendor_id_mid, 19, 0, 8)              \
  X(starting_psn, 20, 0, 24)              \
  X(vendor_id_low, 23, 0, 8)              \
  X(responder_resources, 24, 0, 8)        \
  X(initiator_depth, 25, 0, 8)            \
  X(target_ack_delay, 26, 3, 5)           \
  X(failover_accepted, 26, 1, 2)          \
  X(end_to_end_flow_control, 26, 0, 1)    \
  X(rnr_retry_count, 27, 5, 3)            \
  X(srq, 27, 4, 1)                        \
  X(local_ca_guid, 28, 0, 64)             \
  X(private_data, 36, 0, 196 * 8)

// RTU, DREP (IBTA 12.6.9, 12.6.11): the two comm IDs and private data.
struct CmRtu {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::array<std::uint8_t, 224> private_data{};
  friend bool operator==(const CmRtu&, const CmRtu&) = default;
};
using CmDrep = CmRtu;
#define UROCE_CM_RTU_FIELDS(X)  \
  X(local_comm_id, 0, 0, 32)    \
  X(remote_comm_id, 4, 0, 32)   \
  X(private_data, 8, 0, 224 * 8)

// DREQ (IBTA 12.6.10, table 104).
struct CmDreq {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t remote_qpn = 0;  // 24 bits: the receiver's QP (or EEC)
  std::array<std::uint8_t, 220> private_data{};
  friend bool operator==(const CmDreq&, const CmDreq&) = default;
};
#define UROCE_CM_DREQ_FIELDS(X) \
  X(local_comm_id, 0, 0, 32)    \
  X(remote_comm_id, 4, 0, 32)   \
  X(remote_qpn, 8, 0, 24)       \
  X(private_data, 12, 0, 220 * 8)

// REJ (IBTA 12.6.7, table 102) and its reasons (table 103).
enum class RejReason : std::uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupportedReq = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConn = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortCmRedirect = 24,
  kPortRedirect = 25,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerReject = 28,
  kRnrRetryCountReject = 29,
  kDuplicateLocalCommId = 30,
  kUnsupportedClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
  kVendorOptionNotSupported = 35,  // rdma_reject_ece: the REQ's ECE options are not taken
};
// Which message a REJ or MRA answers (2 bits).
enum class CmMsgKind : std::uint8_t { kReq = 0, kRep = 1, kOther = 2 };

struct CmRej {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  CmMsgKind rejected = CmMsgKind::kReq;
  std::uint8_t ari_length = 0;  // 7 bits
  std::uint16_t reason = 0;
  std::array<std::uint8_t, 72> ari{};
  std::array<std::uint8_t, 148> private_data{};
  friend bool operator==(const CmRej&, const CmRej&) = default;
};
#define UROCE_CM_REJ_FIELDS(X)  \
  X(local_comm_id, 0, 0, 32)    \
  X(remote_comm_id, 4, 0, 32)   \
  X(rejected, 8, 6, 2)          \
  X(ari_length, 9, 1, 7)        \
  X(reason, 10, 0, 16)          \
  X(ari, 12, 0, 72 * 8)         \
  X(private_data, 84, 0, 148 * 8)

// MRA (IBTA 12.6.6, table 100).
struct CmMra {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  CmMsgKind mraed = CmMsgKind::kReq;
  std::uint8_t service_timeout = 0;  // 5 bits
  std::array<std::uint8_t, 222> private_data{};
  friend bool operator==(const CmMra&, const CmMra&) = default;
};
#define UROCE_CM_MRA_FIELDS(X)  \
  X(local_comm_id, 0, 0, 32)    \
  X(remote_comm_id, 4, 0, 32)   \
  X(mraed, 8, 6, 2)             \
  X(service_timeout, 9, 3, 5)   \
  X(private_data, 10, 0, 222 * 8)

// SIDR_REQ (IBTA 12.11.1, table 119; the kernel's ibta_vol1_c12.h gives the
// same offsets): the request ID is the requester's, as a comm ID is.
inline constexpr std::size_t kSidrReqPrivateBytes = 216;
struct CmSidrReq {
  std::uint32_t request_id = 0;
  std::uint16_t pkey = 0xffff;
  std::uint64_t service_id = 0;
  std::array<std::uint8_t, kSidrReqPrivateBytes> private_data{};
  friend bool operator==(const CmSidrReq&, const CmSidrReq&) = default;
};
#define UROCE_CM_SIDR_REQ_FIELDS(X) \
  X(request_id, 0, 0, 32)           \
  X(pkey, 4, 0, 16)                 \
  X(service_id, 8, 0, 64)           \
  X(private_data, 16, 0, 216 * 8)

// SIDR_REP's status (IBTA 12.11.2, table 121).
enum class SidrStatus : std::uint8_t {
  kOk = 0,                      // the QPN and Q_Key are valid
  kUnsupportedServiceId = 1,    // nobody serves the service ID
  kReject = 2,                  // the service provider refused
  kNoQp = 3,                    // no QP available
  kRedirect = 4,                // ClassPortInfo says where (not sent by uroce)
  kUnsupportedClassVersion = 5,
};

// SIDR_REP (IBTA 12.11.2, table 120).
inline constexpr std::size_t kSidrRepPrivateBytes = 136;
struct CmSidrRep {
  std::uint32_t request_id = 0;
  std::uint8_t status = 0;            // SidrStatus
  std::uint8_t additional_info_length = 0;
  std::uint32_t qpn = 0;              // 24 bits
  std::uint64_t service_id = 0;
  std::uint32_t qkey = 0;
  std::array<std::uint8_t, 72> additional_info{};  // ClassPortInfo for a redirect
  std::array<std::uint8_t, kSidrRepPrivateBytes> private_data{};
  friend bool operator==(const CmSidrRep&, const CmSidrRep&) = default;
};
#define UROCE_CM_SIDR_REP_FIELDS(X)   \
  X(request_id, 0, 0, 32)             \
  X(status, 4, 0, 8)                  \
  X(additional_info_length, 5, 0, 8)  \
  X(qpn, 8, 0, 24)                    \
  X(service_id, 12, 0, 64)            \
  X(qkey, 20, 0, 32)                  \
  X(additional_info, 24, 0, 72 * 8)   \
  X(private_data, 96, 0, 136 * 8)

// rdma_cm's Q_Key for the UDP port space (rdma-core's RDMA_UDP_QKEY): the
// UD QPs of RDMA_PS_UDP IDs take it, and SIDR_REP carries it.
inline constexpr std::uint32_t kRdmaUdpQkey = 0x01234567;

// Why a MAD was refused (counted by its receiver).
enum class MadStatus : std::uint8_t {
  kOk,
  kTooShort,        // fewer than 256 bytes
  kNotCm,           // another management class or base version
  kBadClassVersion, // a CM class version other than 2
  kNotSend,         // a method other than Send (GET, responses: not for a CM)
  kUnknownAttr,     // an attribute this CM does not take (LAP, APR, ClassPortInfo)
};
const char* mad_status_name(MadStatus s);

// One decoded CM MAD.
struct CmMad {
  MadHeader header;
  CmReq req;
  CmRep rep;
  CmRtu rtu;  // also DREP
  CmDreq dreq;
  CmRej rej;
  CmMra mra;
  CmSidrReq sidr_req;
  CmSidrRep sidr_rep;
  CmAttr attr() const { return static_cast<CmAttr>(header.attr_id); }
};

// Decodes `mad` (the datagram's payload). kOk fills `out` for its attribute.
MadStatus decode_cm_mad(std::span<const std::uint8_t> mad, CmMad& out);
// Encodes the header and the attribute header.attr_id names into `out`.
// False for an attribute it cannot encode.
bool encode_cm_mad(const CmMad& mad, std::array<std::uint8_t, kMadBytes>& out);

// --- rdma_cm ---------------------------------------------------------------------

// rdma_cm's port spaces (rdma_port_space), the top of the service ID.
inline constexpr std::uint16_t kRdmaPsTcp = 0x0106;
inline constexpr std::uint16_t kRdmaPsUdp = 0x0111;
inline constexpr std::uint16_t kRdmaPsIpoib = 0x0002;
inline constexpr std::uint16_t kRdmaPsIb = 0x013f;
// rdma_cm's service ID for a port of a port space: 0x0000000001PPpppp.
constexpr std::uint64_t rdma_cm_service_id(std::uint16_t ps, std::uint16_t port) {
  return std::uint64_t{ps} << 16 | port;
}
// The port space and port of an rdma_cm service ID; nullopt when it is not one.
struct RdmaCmService {
  std::uint16_t ps = 0;
  std::uint16_t port = 0;
};
std::optional<RdmaCmService> rdma_cm_service(std::uint64_t service_id);

// The header rdma_cm puts in the first 36 bytes of a REQ's private data
// (the user's private data follows): version 0, the IP version in the top
// nibble of byte 1, the source port, then the source and destination
// addresses (IPv4 in the last 4 bytes of each 16).
struct RdmaCmHeader {
  std::uint8_t version = 0;
  std::uint8_t ip_version = 4;
  std::uint16_t src_port = 0;
  std::array<std::uint8_t, 16> src_addr{};
  std::array<std::uint8_t, 16> dst_addr{};
  friend bool operator==(const RdmaCmHeader&, const RdmaCmHeader&) = default;
};
inline constexpr std::size_t kRdmaCmHeaderBytes = 36;
// Bytes from the start of the private data.
#define UROCE_RDMA_CM_HEADER_FIELDS(X) \
  X(version, 0, 0, 8)                  \
  X(ip_version, 1, 4, 4)               \
  X(src_port, 2, 0, 16)                \
  X(src_addr, 4, 0, 16 * 8)            \
  X(dst_addr, 20, 0, 16 * 8)
// Decodes the header; nullopt when its version or IP version is not one
// rdma_cm sends (0; 4 or 6).
std::optional<RdmaCmHeader> decode_rdma_cm_header(std::span<const std::uint8_t> private_data);
void encode_rdma_cm_header(const RdmaCmHeader& h, std::span<std::uint8_t> private_data);

}  // namespace uroce::wire
