#include "wire/cm_mad.h"

#include <algorithm>
#include <cstring>

namespace uroce::wire {
namespace {

// The attribute starts behind the 24-byte common header; offsets below are
// from there, as IBTA's tables give them.
constexpr std::size_t kAttr = 24;

struct Reader {
  std::span<const std::uint8_t> m;
  std::uint64_t be(std::size_t at, std::size_t bytes) const {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes; ++i) v = v << 8 | m[kAttr + at + i];
    return v;
  }
  std::uint8_t u8(std::size_t at) const { return m[kAttr + at]; }
  std::uint16_t u16(std::size_t at) const { return static_cast<std::uint16_t>(be(at, 2)); }
  std::uint32_t u24(std::size_t at) const { return static_cast<std::uint32_t>(be(at, 3)); }
  std::uint32_t u32(std::size_t at) const { return static_cast<std::uint32_t>(be(at, 4)); }
  template <std::size_t N>
  void bytes(std::size_t at, std::array<std::uint8_t, N>& out) const {
    std::memcpy(out.data(), m.data() + kAttr + at, N);
  }
};

struct Writer {
  std::array<std::uint8_t, kMadBytes>& m;
  void be(std::size_t at, std::size_t bytes, std::uint64_t v) {
    for (std::size_t i = bytes; i-- > 0; v >>= 8) m[kAttr + at + i] = static_cast<std::uint8_t>(v);
  }
  void u8(std::size_t at, unsigned v) { m[kAttr + at] = static_cast<std::uint8_t>(v); }
  template <std::size_t N>
  void bytes(std::size_t at, const std::array<std::uint8_t, N>& in) {
    std::memcpy(m.data() + kAttr + at, in.data(), N);
  }
};

// A path of REQ: 44 bytes at `at` (IBTA table 99).
void read_path(const Reader& r, std::size_t at, CmPath& p) {
  p.local_lid = r.u16(at);
  p.remote_lid = r.u16(at + 2);
  r.bytes(at + 4, p.local_gid);
  r.bytes(at + 20, p.remote_gid);
  const std::uint32_t w = r.u32(at + 36);
  p.flow_label = w >> 12;
  p.packet_rate = w & 0x3f;
  p.traffic_class = r.u8(at + 40);
  p.hop_limit = r.u8(at + 41);
  p.sl = r.u8(at + 42) >> 4;
  p.subnet_local = (r.u8(at + 42) >> 3) & 1;
  p.local_ack_timeout = r.u8(at + 43) >> 3;
}

void write_path(Writer& w, std::size_t at, const CmPath& p) {
  w.be(at, 2, p.local_lid);
  w.be(at + 2, 2, p.remote_lid);
  w.bytes(at + 4, p.local_gid);
  w.bytes(at + 20, p.remote_gid);
  w.be(at + 36, 4, std::uint64_t{p.flow_label & 0xfffff} << 12 | (p.packet_rate & 0x3f));
  w.u8(at + 40, p.traffic_class);
  w.u8(at + 41, p.hop_limit);
  w.u8(at + 42, (p.sl & 0xf) << 4 | (p.subnet_local ? 1u : 0u) << 3);
  w.u8(at + 43, (p.local_ack_timeout & 0x1f) << 3);
}

bool path_present(const CmPath& p) {
  const auto zero = [](const std::array<std::uint8_t, 16>& g) {
    return std::all_of(g.begin(), g.end(), [](std::uint8_t b) { return b == 0; });
  };
  return p.local_lid != 0 || p.remote_lid != 0 || !zero(p.local_gid) || !zero(p.remote_gid);
}

}  // namespace

const char* cm_attr_name(std::uint16_t attr) {
  switch (static_cast<CmAttr>(attr)) {
    case CmAttr::kClassPortInfo: return "ClassPortInfo";
    case CmAttr::kReq: return "ConnectRequest";
    case CmAttr::kMra: return "MRA";
    case CmAttr::kRej: return "Reject";
    case CmAttr::kRep: return "ConnectReply";
    case CmAttr::kRtu: return "ReadyToUse";
    case CmAttr::kDreq: return "DisconnectRequest";
    case CmAttr::kDrep: return "DisconnectReply";
    case CmAttr::kSidrReq: return "SIDRRequest";
    case CmAttr::kSidrRep: return "SIDRReply";
    case CmAttr::kLap: return "LoadAlternatePath";
    case CmAttr::kApr: return "AlternatePathResponse";
  }
  return "CM";
}

const char* mad_status_name(MadStatus s) {
  switch (s) {
    case MadStatus::kOk: return "ok";
    case MadStatus::kTooShort: return "shorter than 256 bytes";
    case MadStatus::kNotCm: return "not a CM MAD (base version 1, class 0x07)";
    case MadStatus::kBadClassVersion: return "CM class version other than 2";
    case MadStatus::kNotSend: return "method other than Send";
    case MadStatus::kUnknownAttr: return "CM attribute not handled (SIDR, LAP, APR, ClassPortInfo)";
  }
  return "unknown";
}

MadStatus decode_cm_mad(std::span<const std::uint8_t> mad, CmMad& out) {
  if (mad.size() < kMadBytes) return MadStatus::kTooShort;
  MadHeader& h = out.header;
  h.base_version = mad[0];
  h.mgmt_class = mad[1];
  h.class_version = mad[2];
  h.method = mad[3];
  h.status = static_cast<std::uint16_t>(mad[4] << 8 | mad[5]);
  h.class_specific = static_cast<std::uint16_t>(mad[6] << 8 | mad[7]);
  h.tid = 0;
  for (int i = 8; i < 16; ++i) h.tid = h.tid << 8 | mad[static_cast<std::size_t>(i)];
  h.attr_id = static_cast<std::uint16_t>(mad[16] << 8 | mad[17]);
  h.attr_modifier = static_cast<std::uint32_t>(mad[20] << 24 | mad[21] << 16 | mad[22] << 8 | mad[23]);
  if (h.base_version != 1 || h.mgmt_class != kMgmtClassCm) return MadStatus::kNotCm;
  if (h.class_version != kCmClassVersion) return MadStatus::kBadClassVersion;
  if (h.method != kMadMethodSend) return MadStatus::kNotSend;
  const Reader r{mad};
  switch (out.attr()) {
    case CmAttr::kReq: {
      CmReq& q = out.req;
      q.local_comm_id = r.u32(0);
      q.service_id = r.be(8, 8);
      q.local_ca_guid = r.be(16, 8);
      q.local_qkey = r.u32(28);
      q.local_qpn = r.u24(32);
      q.responder_resources = r.u8(35);
      q.local_eecn = r.u24(36);
      q.initiator_depth = r.u8(39);
      q.remote_eecn = r.u24(40);
      q.remote_cm_response_timeout = r.u8(43) >> 3;
      q.transport = (r.u8(43) >> 1) & 3;
      q.end_to_end_flow_control = r.u8(43) & 1;
      q.starting_psn = r.u24(44);
      q.local_cm_response_timeout = r.u8(47) >> 3;
      q.retry_count = r.u8(47) & 7;
      q.pkey = r.u16(48);
      q.path_mtu = r.u8(50) >> 4;
      q.rdc_exists = (r.u8(50) >> 3) & 1;
      q.rnr_retry_count = r.u8(50) & 7;
      q.max_cm_retries = r.u8(51) >> 4;
      q.srq = (r.u8(51) >> 3) & 1;
      q.extended_transport = r.u8(51) & 7;
      read_path(r, 52, q.primary);
      read_path(r, 96, q.alternate);
      q.has_alternate = path_present(q.alternate);
      r.bytes(140, q.private_data);
      return MadStatus::kOk;
    }
    case CmAttr::kRep: {
      CmRep& p = out.rep;
      p.local_comm_id = r.u32(0);
      p.remote_comm_id = r.u32(4);
      p.local_qkey = r.u32(8);
      p.local_qpn = r.u24(12);
      p.local_eecn = r.u24(16);
      p.starting_psn = r.u24(20);
      p.responder_resources = r.u8(24);
      p.initiator_depth = r.u8(25);
      p.target_ack_delay = r.u8(26) >> 3;
      p.failover_accepted = (r.u8(26) >> 1) & 3;
      p.end_to_end_flow_control = r.u8(26) & 1;
      p.rnr_retry_count = r.u8(27) >> 5;
      p.srq = (r.u8(27) >> 4) & 1;
      p.local_ca_guid = r.be(28, 8);
      r.bytes(36, p.private_data);
      return MadStatus::kOk;
    }
    case CmAttr::kRtu:
    case CmAttr::kDrep:
      out.rtu.local_comm_id = r.u32(0);
      out.rtu.remote_comm_id = r.u32(4);
      r.bytes(8, out.rtu.private_data);
      return MadStatus::kOk;
    case CmAttr::kDreq:
      out.dreq.local_comm_id = r.u32(0);
      out.dreq.remote_comm_id = r.u32(4);
      out.dreq.remote_qpn = r.u24(8);
      r.bytes(12, out.dreq.private_data);
      return MadStatus::kOk;
    case CmAttr::kRej:
      out.rej.local_comm_id = r.u32(0);
      out.rej.remote_comm_id = r.u32(4);
      out.rej.rejected = static_cast<CmMsgKind>(r.u8(8) >> 6);
      out.rej.ari_length = r.u8(9) >> 1;
      out.rej.reason = r.u16(10);
      r.bytes(12, out.rej.ari);
      r.bytes(84, out.rej.private_data);
      return MadStatus::kOk;
    case CmAttr::kMra:
      out.mra.local_comm_id = r.u32(0);
      out.mra.remote_comm_id = r.u32(4);
      out.mra.mraed = static_cast<CmMsgKind>(r.u8(8) >> 6);
      out.mra.service_timeout = r.u8(9) >> 3;
      r.bytes(10, out.mra.private_data);
      return MadStatus::kOk;
    default:
      return MadStatus::kUnknownAttr;
  }
}

bool encode_cm_mad(const CmMad& mad, std::array<std::uint8_t, kMadBytes>& m) {
  m.fill(0);
  const MadHeader& h = mad.header;
  m[0] = h.base_version;
  m[1] = h.mgmt_class;
  m[2] = h.class_version;
  m[3] = h.method;
  m[4] = static_cast<std::uint8_t>(h.status >> 8);
  m[5] = static_cast<std::uint8_t>(h.status);
  m[6] = static_cast<std::uint8_t>(h.class_specific >> 8);
  m[7] = static_cast<std::uint8_t>(h.class_specific);
  for (int i = 0; i < 8; ++i) m[static_cast<std::size_t>(8 + i)] = static_cast<std::uint8_t>(h.tid >> (56 - 8 * i));
  m[16] = static_cast<std::uint8_t>(h.attr_id >> 8);
  m[17] = static_cast<std::uint8_t>(h.attr_id);
  for (int i = 0; i < 4; ++i) {
    m[static_cast<std::size_t>(20 + i)] = static_cast<std::uint8_t>(h.attr_modifier >> (24 - 8 * i));
  }
  Writer w{m};
  switch (mad.attr()) {
    case CmAttr::kReq: {
      const CmReq& q = mad.req;
      w.be(0, 4, q.local_comm_id);
      w.be(8, 8, q.service_id);
      w.be(16, 8, q.local_ca_guid);
      w.be(28, 4, q.local_qkey);
      w.be(32, 3, q.local_qpn);
      w.u8(35, q.responder_resources);
      w.be(36, 3, q.local_eecn);
      w.u8(39, q.initiator_depth);
      w.be(40, 3, q.remote_eecn);
      w.u8(43, (q.remote_cm_response_timeout & 0x1f) << 3 | (q.transport & 3) << 1 | (q.end_to_end_flow_control ? 1 : 0));
      w.be(44, 3, q.starting_psn);
      w.u8(47, (q.local_cm_response_timeout & 0x1f) << 3 | (q.retry_count & 7));
      w.be(48, 2, q.pkey);
      w.u8(50, (q.path_mtu & 0xf) << 4 | (q.rdc_exists ? 1u : 0u) << 3 | (q.rnr_retry_count & 7));
      w.u8(51, (q.max_cm_retries & 0xf) << 4 | (q.srq ? 1u : 0u) << 3 | (q.extended_transport & 7));
      write_path(w, 52, q.primary);
      if (q.has_alternate) write_path(w, 96, q.alternate);
      w.bytes(140, q.private_data);
      return true;
    }
    case CmAttr::kRep: {
      const CmRep& p = mad.rep;
      w.be(0, 4, p.local_comm_id);
      w.be(4, 4, p.remote_comm_id);
      w.be(8, 4, p.local_qkey);
      w.be(12, 3, p.local_qpn);
      w.be(16, 3, p.local_eecn);
      w.be(20, 3, p.starting_psn);
      w.u8(24, p.responder_resources);
      w.u8(25, p.initiator_depth);
      w.u8(26, (p.target_ack_delay & 0x1f) << 3 | (p.failover_accepted & 3) << 1 | (p.end_to_end_flow_control ? 1 : 0));
      w.u8(27, (p.rnr_retry_count & 7) << 5 | (p.srq ? 1u : 0u) << 4);
      w.be(28, 8, p.local_ca_guid);
      w.bytes(36, p.private_data);
      return true;
    }
    case CmAttr::kRtu:
    case CmAttr::kDrep:
      w.be(0, 4, mad.rtu.local_comm_id);
      w.be(4, 4, mad.rtu.remote_comm_id);
      w.bytes(8, mad.rtu.private_data);
      return true;
    case CmAttr::kDreq:
      w.be(0, 4, mad.dreq.local_comm_id);
      w.be(4, 4, mad.dreq.remote_comm_id);
      w.be(8, 3, mad.dreq.remote_qpn);
      w.bytes(12, mad.dreq.private_data);
      return true;
    case CmAttr::kRej:
      w.be(0, 4, mad.rej.local_comm_id);
      w.be(4, 4, mad.rej.remote_comm_id);
      w.u8(8, static_cast<unsigned>(mad.rej.rejected) << 6);
      w.u8(9, (mad.rej.ari_length & 0x7f) << 1);
      w.be(10, 2, mad.rej.reason);
      w.bytes(12, mad.rej.ari);
      w.bytes(84, mad.rej.private_data);
      return true;
    case CmAttr::kMra:
      w.be(0, 4, mad.mra.local_comm_id);
      w.be(4, 4, mad.mra.remote_comm_id);
      w.u8(8, static_cast<unsigned>(mad.mra.mraed) << 6);
      w.u8(9, (mad.mra.service_timeout & 0x1f) << 3);
      w.bytes(10, mad.mra.private_data);
      return true;
    default:
      return false;
  }
}

std::optional<RdmaCmService> rdma_cm_service(std::uint64_t service_id) {
  if ((service_id >> 32) != 0) return std::nullopt;
  const auto ps = static_cast<std::uint16_t>(service_id >> 16);
  if (ps != kRdmaPsTcp && ps != kRdmaPsUdp && ps != kRdmaPsIpoib && ps != kRdmaPsIb) return std::nullopt;
  return RdmaCmService{ps, static_cast<std::uint16_t>(service_id)};
}

std::optional<RdmaCmHeader> decode_rdma_cm_header(std::span<const std::uint8_t> p) {
  if (p.size() < kRdmaCmHeaderBytes) return std::nullopt;
  RdmaCmHeader h;
  h.version = p[0];
  h.ip_version = p[1] >> 4;
  if (h.version != 0 || (h.ip_version != 4 && h.ip_version != 6)) return std::nullopt;
  h.src_port = static_cast<std::uint16_t>(p[2] << 8 | p[3]);
  std::memcpy(h.src_addr.data(), p.data() + 4, 16);
  std::memcpy(h.dst_addr.data(), p.data() + 20, 16);
  return h;
}

void encode_rdma_cm_header(const RdmaCmHeader& h, std::span<std::uint8_t> p) {
  p[0] = h.version;
  p[1] = static_cast<std::uint8_t>(h.ip_version << 4);
  p[2] = static_cast<std::uint8_t>(h.src_port >> 8);
  p[3] = static_cast<std::uint8_t>(h.src_port);
  std::memcpy(p.data() + 4, h.src_addr.data(), 16);
  std::memcpy(p.data() + 20, h.dst_addr.data(), 16);
}

}  // namespace uroce::wire
