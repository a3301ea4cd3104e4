#include "dump/frame_printer.h"

#include <arpa/inet.h>

#include <cinttypes>
#include <cstdio>
#include <string_view>

#include "wire/cm_mad.h"
#include "wire/icrc.h"

namespace uroce::dump {
namespace {

using wire::ExtHdr;

// Appends printf-style text; the dump tool is control path, clarity wins.
template <typename... Args>
void append(std::string& s, const char* fmt, Args... args) {
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf, fmt, args...);
  if (n > 0) s.append(buf, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
}

std::string ip_string(const FrameReport& r, bool source) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (r.parsed.ip_version == 6) {
    const wire::Ipv6Hdr ip = r.parsed.ipv6();
    inet_ntop(AF_INET6, source ? ip.src.data() : ip.dst.data(), buf, sizeof buf);
  } else {
    const wire::Ipv4Hdr ip = r.parsed.ipv4();
    inet_ntop(AF_INET, source ? ip.src.data() : ip.dst.data(), buf, sizeof buf);
  }
  return buf;
}

const char* aeth_kind_name(wire::AethKind k) {
  switch (k) {
    case wire::AethKind::kAck: return "ACK";
    case wire::AethKind::kRnrNak: return "RNR_NAK";
    case wire::AethKind::kNak: return "NAK";
    case wire::AethKind::kReserved: break;
  }
  return "RESERVED";
}

// Minimum RNR NAK timer values in microseconds, by the 5-bit code (IBTA
// 9.7.5.2.8, table 45). Code 0 means 655.36 ms.
constexpr std::uint32_t kRnrTimerUs[32] = {
    655360, 10,    20,    30,    40,    60,    80,    120,   160,   240,   320,
    480,    640,   960,   1280,  1920,  2560,  3840,  5120,  7680,  10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

// A SACK's bitmap as 32 hex digits, bit 0 (PSN expected + 1) the first
// digit's most significant bit, as on the wire.
std::string sack_bits_hex(const wire::Sacketh& k) {
  std::string out;
  for (const std::uint8_t b : k.bits) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", b);
    out += two;
  }
  return out;
}

std::string aeth_text(const wire::Aeth& a) {
  std::string s;
  const std::uint8_t v = wire::aeth_value(a.syndrome);
  switch (wire::aeth_kind(a.syndrome)) {
    case wire::AethKind::kAck:
      if (v == wire::kAethCreditsInvalid) append(s, "ACK credits=invalid");
      else append(s, "ACK credits=%u", v);
      break;
    case wire::AethKind::kRnrNak:
      append(s, "RNR_NAK timer=%u (%.2f ms)", v, kRnrTimerUs[v] / 1000.0);
      break;
    case wire::AethKind::kNak:
      append(s, "NAK %s", wire::nak_code_name(v));
      break;
    case wire::AethKind::kReserved:
      append(s, "RESERVED syndrome=0x%02x", a.syndrome);
      break;
  }
  append(s, " msn=%u", a.msn.get());
  return s;
}

std::string non_roce_text(const FrameReport& r) {
  const auto& f = *r.frame;
  std::string s;
  if (f.data.size() < sizeof(wire::EthHdr)) return "non-RoCE (runt frame)";
  std::uint16_t et = r.parsed.eth().ether_type.get();
  if (r.parsed.has_vlan) et = r.parsed.at<wire::VlanTag>(sizeof(wire::EthHdr)).ether_type.get();
  if (r.status == wire::ParseStatus::kNotIp) {
    if (et == wire::kEtherTypeArp) return "non-RoCE ARP";
    append(s, "non-RoCE ethertype 0x%04x", et);
    return s;
  }
  const std::string src = ip_string(r, true);
  const std::string dst = ip_string(r, false);
  std::uint8_t proto = r.parsed.ip_version == 6 ? r.parsed.ipv6().next_header : r.parsed.ipv4().protocol;
  const std::size_t l4 = r.parsed.l3_offset + (r.parsed.ip_version == 6 ? 40u : r.parsed.ipv4().ihl() * 4u);
  if ((proto == 6 || proto == 17) && f.data.size() >= l4 + 4) {
    const auto sport = static_cast<unsigned>(f.data[l4] << 8 | f.data[l4 + 1]);
    const auto dport = static_cast<unsigned>(f.data[l4 + 2] << 8 | f.data[l4 + 3]);
    append(s, "non-RoCE %s %s:%u -> %s:%u", proto == 6 ? "TCP" : "UDP", src.c_str(), sport,
           dst.c_str(), dport);
  } else {
    append(s, "non-RoCE IP proto %u %s -> %s", proto, src.c_str(), dst.c_str());
  }
  return s;
}

void json_escape_into(std::string& out, std::string_view in) {
  for (char c : in) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
}

class JsonObject {
 public:
  JsonObject() { s_ = "{"; }
  void key(const char* k) {
    if (s_.size() > 1) s_ += ',';
    s_ += '"';
    s_ += k;
    s_ += "\":";
  }
  void num(const char* k, std::uint64_t v) { key(k); append(s_, "%" PRIu64, v); }
  void real(const char* k, double v) { key(k); append(s_, "%.6f", v); }
  void boolean(const char* k, bool v) { key(k); s_ += v ? "true" : "false"; }
  void null(const char* k) { key(k); s_ += "null"; }
  void str(const char* k, std::string_view v) {
    key(k);
    s_ += '"';
    json_escape_into(s_, v);
    s_ += '"';
  }
  std::string done() { return s_ + "}"; }

 private:
  std::string s_;
};

}  // namespace

FrameReport analyse(std::size_t index, const pcap::Frame& frame, std::int64_t first_ts_ns) {
  FrameReport r;
  r.index = index;
  r.frame = &frame;
  r.time_s = static_cast<double>(frame.ts_ns - first_ts_ns) / 1e9;
  r.cut_by_snaplen = frame.orig_len > frame.data.size();
  r.status = wire::parse_frame(frame.data, r.parsed);
  return r;
}

std::string cm_mad_name(const FrameReport& r) {
  if (!r.headers_valid() || r.parsed.info->transport != wire::Transport::kUd) return "";
  if (r.parsed.bth().dest_qp.get() != 1) return "";
  const auto p = r.parsed.payload();
  // MAD common header (IBTA 13.4.2): class at byte 1, attribute ID at 16..17.
  if (p.size() < 24 || p[1] != 0x07) return "";
  return wire::cm_attr_name(static_cast<std::uint16_t>(p[16] << 8 | p[17]));
}

std::string format_text(const FrameReport& r) {
  std::string s;
  append(s, "%5zu %11.6f ", r.index, r.time_s);
  if (!r.is_roce()) return s + non_roce_text(r);
  if (!r.headers_valid()) {
    append(s, "malformed RoCEv2: %s (%s)", wire::parse_status_description(r.status),
           wire::parse_status_name(r.status));
    if (r.cut_by_snaplen) append(s, " [capture cut at %zu of %u bytes]", r.frame->data.size(), r.frame->orig_len);
    return s;
  }
  const wire::ParsedFrame& p = r.parsed;
  const wire::Bth b = p.bth();
  s += ip_string(r, true) + " -> " + ip_string(r, false) + " ";
  append(s, "%s dqpn=0x%06x psn=%u", p.info->name, b.dest_qp.get(), b.psn.get());
  if (b.ack_req()) s += " AckReq";
  if (b.se()) s += " SE";
  if (b.fecn()) s += " FECN";
  if (b.becn()) s += " BECN";
  if (p.ecn() == 3) s += " ECN=CE";
  if (p.has(ExtHdr::kDeth)) {
    const wire::Deth d = p.deth();
    append(s, " DETH[qkey=0x%08x src_qp=0x%06x]", d.qkey.get(), d.src_qp.get());
  }
  if (p.has(ExtHdr::kFeth)) append(s, " FETH[0x%08x]", p.feth().bits.get());
  if (p.has(ExtHdr::kXrceth)) append(s, " XRCETH[srqn=0x%06x]", p.xrceth().srqn.get());
  if (p.has(ExtHdr::kSreth)) {
    const wire::Sreth e = p.sreth();
    append(s, " SRETH[offset=%u len=%u recv=%u first_psn=%u%s]", e.offset.get(), e.length.get(), e.recv_index.get(),
           e.first_psn.get(), (e.flags & wire::kSrethLast) != 0 ? " last" : "");
  }
  if (p.has(ExtHdr::kSacketh)) {
    append(s, " SACKETH[expected=%u held=%s]", p.sacketh().expected.get(), sack_bits_hex(p.sacketh()).c_str());
  }
  if (p.has(ExtHdr::kReth)) {
    const wire::Reth e = p.reth();
    append(s, " RETH[va=0x%016" PRIx64 " rkey=0x%08x len=%u]", e.va.get(), e.rkey.get(),
           e.dma_length.get());
  }
  if (p.has(ExtHdr::kAtomicEth)) {
    const wire::AtomicEth e = p.atomic_eth();
    append(s, " AtomicETH[va=0x%016" PRIx64 " rkey=0x%08x swap_add=0x%" PRIx64 " compare=0x%" PRIx64 "]",
           e.va.get(), e.rkey.get(), e.swap_add.get(), e.compare.get());
  }
  if (p.has(ExtHdr::kAeth)) s += " AETH[" + aeth_text(p.aeth()) + "]";
  if (p.has(ExtHdr::kAtomicAckEth)) {
    append(s, " AtomicAckETH[orig=0x%016" PRIx64 "]", p.atomic_ack_eth().orig_data.get());
  }
  if (p.has(ExtHdr::kImmDt)) append(s, " ImmDt[0x%08x]", p.immdt().imm.get());
  if (p.has(ExtHdr::kIeth)) append(s, " IETH[rkey=0x%08x]", p.ieth().rkey.get());
  append(s, " len=%u", p.payload_length);
  if (p.pad) append(s, " pad=%u", p.pad);
  if (const std::string cm = cm_mad_name(r); !cm.empty()) s += " CM:" + cm;
  s += r.status == wire::ParseStatus::kOk ? " ICRC ok" : " ICRC bad";
  if (r.status == wire::ParseStatus::kIcrcMismatch) {
    append(s, " (carried 0x%08x, computed 0x%08x)", p.icrc(),
           wire::icrc_compute(wire::crc32_default, p.icrc_covered()));
  }
  return s;
}

std::string format_json(const FrameReport& r) {
  JsonObject j;
  j.num("frame", r.index);
  j.real("time", r.time_s);
  j.num("frame_len", r.frame->data.size());
  j.boolean("roce", r.is_roce());
  j.str("status", wire::parse_status_name(r.status));
  if (r.cut_by_snaplen) j.num("orig_len", r.frame->orig_len);
  if (!r.is_roce()) {
    j.null("opcode");
    j.str("summary", non_roce_text(r));
    return j.done();
  }
  const wire::ParsedFrame& p = r.parsed;
  if (!r.headers_valid()) {
    if (p.info != nullptr) j.num("opcode", p.opcode);
    else j.null("opcode");
    j.str("error", wire::parse_status_description(r.status));
    return j.done();
  }
  const wire::Bth b = p.bth();
  j.num("ip_version", p.ip_version);
  j.str("src", ip_string(r, true));
  j.str("dst", ip_string(r, false));
  if (p.has_vlan) j.num("vlan_tci", p.vlan_tci);
  j.num("ecn", p.ecn());
  j.num("udp_sport", p.udp().src_port.get());
  j.num("opcode", b.opcode);
  j.str("opcode_name", p.info->name);
  j.str("transport", wire::transport_name(p.info->transport));
  j.num("dqpn", b.dest_qp.get());
  j.num("psn", b.psn.get());
  j.boolean("ack_req", b.ack_req());
  j.boolean("se", b.se());
  j.boolean("mig_req", b.mig_req());
  j.boolean("fecn", b.fecn());
  j.boolean("becn", b.becn());
  j.num("pkey", b.pkey.get());
  j.num("pad", p.pad);
  if (p.has(ExtHdr::kDeth)) {
    j.num("deth_qkey", p.deth().qkey.get());
    j.num("deth_src_qp", p.deth().src_qp.get());
  }
  if (p.has(ExtHdr::kFeth)) j.num("feth", p.feth().bits.get());
  if (p.has(ExtHdr::kXrceth)) j.num("xrceth_srqn", p.xrceth().srqn.get());
  if (p.has(ExtHdr::kSreth)) {
    const wire::Sreth e = p.sreth();
    j.num("sreth_offset", e.offset.get());
    j.num("sreth_len", e.length.get());
    j.num("sreth_recv_index", e.recv_index.get());
    j.num("sreth_first_psn", e.first_psn.get());
    j.boolean("sreth_last", (e.flags & wire::kSrethLast) != 0);
  }
  if (p.has(ExtHdr::kSacketh)) {
    j.num("sack_expected", p.sacketh().expected.get());
    j.str("sack_bits", sack_bits_hex(p.sacketh()));
  }
  if (p.has(ExtHdr::kReth)) {
    j.num("reth_va", p.reth().va.get());
    j.num("reth_rkey", p.reth().rkey.get());
    j.num("reth_len", p.reth().dma_length.get());
  }
  if (p.has(ExtHdr::kAtomicEth)) {
    const wire::AtomicEth e = p.atomic_eth();
    j.num("atomic_va", e.va.get());
    j.num("atomic_rkey", e.rkey.get());
    j.num("atomic_swap_add", e.swap_add.get());
    j.num("atomic_compare", e.compare.get());
  }
  if (p.has(ExtHdr::kAeth)) {
    const wire::Aeth a = p.aeth();
    j.num("aeth_syndrome", a.syndrome);
    j.str("aeth_kind", aeth_kind_name(wire::aeth_kind(a.syndrome)));
    j.num("aeth_value", wire::aeth_value(a.syndrome));
    if (wire::aeth_kind(a.syndrome) == wire::AethKind::kNak) {
      j.str("aeth_nak", wire::nak_code_name(wire::aeth_value(a.syndrome)));
    }
    j.num("aeth_msn", a.msn.get());
  }
  if (p.has(ExtHdr::kAtomicAckEth)) j.num("atomic_ack_orig", p.atomic_ack_eth().orig_data.get());
  if (p.has(ExtHdr::kImmDt)) j.num("imm", p.immdt().imm.get());
  if (p.has(ExtHdr::kIeth)) j.num("ieth_rkey", p.ieth().rkey.get());
  j.num("payload_len", p.payload_length);
  if (const std::string cm = cm_mad_name(r); !cm.empty()) j.str("cm_mad", cm);
  j.num("icrc", p.icrc());
  j.boolean("icrc_ok", r.status == wire::ParseStatus::kOk);
  return j.done();
}

void Totals::add(const FrameReport& r) {
  ++frames;
  ++by_status[static_cast<int>(r.status)];
  if (!r.is_roce()) {
    ++non_roce;
    return;
  }
  ++roce;
  if (r.status == wire::ParseStatus::kOk) ++icrc_ok;
}

std::string Totals::summary() const {
  std::string s;
  append(s, "%zu frames: %zu RoCEv2 (%zu ok, %zu bad), %zu non-RoCE", frames, roce, icrc_ok,
         malformed(), non_roce);
  for (int i = 0; i < wire::kParseStatusCount; ++i) {
    const auto st = static_cast<wire::ParseStatus>(i);
    if (st == wire::ParseStatus::kOk || wire::is_not_roce(st) || by_status[i] == 0) continue;
    append(s, "; %s: %zu", wire::parse_status_name(st), by_status[i]);
  }
  return s;
}

}  // namespace uroce::dump
