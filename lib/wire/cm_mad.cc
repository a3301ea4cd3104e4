#include "wire/cm_mad.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <type_traits>

namespace uroce::wire {
namespace {

template <std::size_t N>
using In = std::span<const std::uint8_t, N>;
template <std::size_t N>
using Out = std::span<std::uint8_t, N>;

template <typename T>
constexpr bool kIsBytes = false;
template <std::size_t N>
constexpr bool kIsBytes<std::array<std::uint8_t, N>> = true;

// How many bytes a field of the lists in cm_mad.h reads: those its shift and
// width reach into.
constexpr std::size_t span_bytes(unsigned shift, unsigned bits) { return (shift + bits + 7) / 8; }
constexpr std::uint64_t low_bits(unsigned bits) {
  return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
}

// A number field, checked at compile time to lie inside its N-byte message
// and to fit its member.
template <std::size_t At, unsigned Shift, unsigned Bits, std::size_t N, typename T>
consteval void check_number() {
  static_assert(Bits >= 1 && Shift + Bits <= 64);
  static_assert(At + span_bytes(Shift, Bits) <= N, "field past the end of its message");
  static_assert(Bits <= (std::is_same_v<T, bool> ? 1 : 8 * sizeof(T)), "field wider than its member");
}

// A byte array or path field: whole bytes, inside its message.
template <std::size_t At, unsigned Shift, unsigned Bits, std::size_t N, std::size_t Size>
consteval void check_bytes() {
  static_assert(Shift == 0 && Bits == 8 * Size, "a byte array's or path's bits are 8 times its bytes");
  static_assert(At + Size <= N, "field past the end of its message");
}

void get_fields(In<kCmPathBytes> m, CmPath& v);
void put_fields(const CmPath& v, Out<kCmPathBytes> m);

template <std::size_t At, unsigned Shift, unsigned Bits, std::size_t N, typename T>
void get_field(In<N> m, T& v) {
  if constexpr (std::is_same_v<T, CmPath>) {
    check_bytes<At, Shift, Bits, N, kCmPathBytes>();
    get_fields(m.template subspan<At, kCmPathBytes>(), v);
  } else if constexpr (kIsBytes<T>) {
    check_bytes<At, Shift, Bits, N, std::tuple_size_v<T>>();
    std::memcpy(v.data(), m.data() + At, v.size());
  } else {
    check_number<At, Shift, Bits, N, T>();
    std::uint64_t word = 0;
    for (std::size_t i = 0; i < span_bytes(Shift, Bits); ++i) word = word << 8 | m[At + i];
    v = static_cast<T>(word >> Shift & low_bits(Bits));
  }
}

// Writes only the field's bits: fields that share a byte go in one by one.
template <std::size_t At, unsigned Shift, unsigned Bits, std::size_t N, typename T>
void put_field(Out<N> m, const T& v) {
  if constexpr (std::is_same_v<T, CmPath>) {
    check_bytes<At, Shift, Bits, N, kCmPathBytes>();
    put_fields(v, m.template subspan<At, kCmPathBytes>());
  } else if constexpr (kIsBytes<T>) {
    check_bytes<At, Shift, Bits, N, std::tuple_size_v<T>>();
    std::memcpy(m.data() + At, v.data(), v.size());
  } else {
    check_number<At, Shift, Bits, N, T>();
    constexpr std::size_t n = span_bytes(Shift, Bits);
    constexpr std::uint64_t field = low_bits(Bits) << Shift;
    std::uint64_t word = 0;
    for (std::size_t i = 0; i < n; ++i) word = word << 8 | m[At + i];
    word = (word & ~field) | (static_cast<std::uint64_t>(v) << Shift & field);
    for (std::size_t i = n; i-- > 0; word >>= 8) m[At + i] = static_cast<std::uint8_t>(word);
  }
}

// A list's fields must not share a bit: one that did would decode what
// another encoded. Bits count from the message's first (most significant).
struct FieldBits {
  std::size_t at;
  unsigned shift;
  unsigned bits;
  constexpr std::size_t first() const { return 8 * (at + span_bytes(shift, bits)) - shift - bits; }
  constexpr std::size_t end() const { return first() + bits; }
};
template <std::size_t K>
constexpr bool disjoint(const FieldBits (&f)[K]) {
  for (std::size_t i = 0; i < K; ++i) {
    for (std::size_t j = i + 1; j < K; ++j) {
      if (f[i].first() < f[j].end() && f[j].first() < f[i].end()) return false;
    }
  }
  return true;
}

#define UROCE_GET_FIELD(member, at, shift, bits) get_field<at, shift, bits>(m, v.member);
#define UROCE_PUT_FIELD(member, at, shift, bits) put_field<at, shift, bits>(m, v.member);
#define UROCE_FIELD_BITS(member, at, shift, bits) FieldBits{at, shift, bits},
// One list of cm_mad.h gives both directions of a message of `bytes` bytes.
#define UROCE_CODEC(Type, bytes, FIELDS)                                             \
  void get_fields(In<bytes> m, Type& v) { FIELDS(UROCE_GET_FIELD) }                 \
  void put_fields(const Type& v, Out<bytes> m) { FIELDS(UROCE_PUT_FIELD) }          \
  constexpr FieldBits k##Type##Bits[] = {FIELDS(UROCE_FIELD_BITS)};                 \
  static_assert(disjoint(k##Type##Bits), #FIELDS " has fields that share bits");

UROCE_CODEC(MadHeader, kMadHeaderBytes, UROCE_MAD_HEADER_FIELDS)
UROCE_CODEC(CmPath, kCmPathBytes, UROCE_CM_PATH_FIELDS)
UROCE_CODEC(CmReq, kCmAttrBytes, UROCE_CM_REQ_FIELDS)
UROCE_CODEC(CmRep, kCmAttrBytes, UROCE_CM_REP_FIELDS)
UROCE_CODEC(CmRtu, kCmAttrBytes, UROCE_CM_RTU_FIELDS)
UROCE_CODEC(CmDreq, kCmAttrBytes, UROCE_CM_DREQ_FIELDS)
UROCE_CODEC(CmRej, kCmAttrBytes, UROCE_CM_REJ_FIELDS)
UROCE_CODEC(CmMra, kCmAttrBytes, UROCE_CM_MRA_FIELDS)
UROCE_CODEC(CmSidrReq, kCmAttrBytes, UROCE_CM_SIDR_REQ_FIELDS)
UROCE_CODEC(CmSidrRep, kCmAttrBytes, UROCE_CM_SIDR_REP_FIELDS)
UROCE_CODEC(RdmaCmHeader, kRdmaCmHeaderBytes, UROCE_RDMA_CM_HEADER_FIELDS)

#undef UROCE_CODEC
#undef UROCE_FIELD_BITS
#undef UROCE_PUT_FIELD
#undef UROCE_GET_FIELD

// No path: zero LIDs and GIDs (CmPath's defaults are the permissive LIDs).
constexpr CmPath kNoPath = [] {
  CmPath p;
  p.local_lid = 0;
  p.remote_lid = 0;
  return p;
}();

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
    case MadStatus::kUnknownAttr: return "CM attribute not handled (LAP, APR, ClassPortInfo)";
  }
  return "unknown";
}

MadStatus decode_cm_mad(std::span<const std::uint8_t> mad, CmMad& out) {
  if (mad.size() < kMadBytes) return MadStatus::kTooShort;
  const In<kMadBytes> m = mad.first<kMadBytes>();
  get_fields(m.first<kMadHeaderBytes>(), out.header);
  const MadHeader& h = out.header;
  if (h.base_version != 1 || h.mgmt_class != kMgmtClassCm) return MadStatus::kNotCm;
  if (h.class_version != kCmClassVersion) return MadStatus::kBadClassVersion;
  if (h.method != kMadMethodSend) return MadStatus::kNotSend;
  const In<kCmAttrBytes> attr = m.last<kCmAttrBytes>();
  switch (out.attr()) {
    case CmAttr::kReq:
      get_fields(attr, out.req);
      out.req.has_alternate = path_present(out.req.alternate);
      return MadStatus::kOk;
    case CmAttr::kRep: get_fields(attr, out.rep); return MadStatus::kOk;
    case CmAttr::kRtu:
    case CmAttr::kDrep: get_fields(attr, out.rtu); return MadStatus::kOk;
    case CmAttr::kDreq: get_fields(attr, out.dreq); return MadStatus::kOk;
    case CmAttr::kRej: get_fields(attr, out.rej); return MadStatus::kOk;
    case CmAttr::kMra: get_fields(attr, out.mra); return MadStatus::kOk;
    case CmAttr::kSidrReq: get_fields(attr, out.sidr_req); return MadStatus::kOk;
    case CmAttr::kSidrRep: get_fields(attr, out.sidr_rep); return MadStatus::kOk;
    default: return MadStatus::kUnknownAttr;
  }
}

bool encode_cm_mad(const CmMad& mad, std::array<std::uint8_t, kMadBytes>& bytes) {
  bytes.fill(0);
  const Out<kMadBytes> m{bytes};
  put_fields(mad.header, m.first<kMadHeaderBytes>());
  const Out<kCmAttrBytes> attr = m.last<kCmAttrBytes>();
  switch (mad.attr()) {
    case CmAttr::kReq: {
      if (mad.req.has_alternate) {
        put_fields(mad.req, attr);
        return true;
      }
      CmReq req = mad.req;  // control path: a copy to leave the alternate path zero
      req.alternate = kNoPath;
      put_fields(req, attr);
      return true;
    }
    case CmAttr::kRep: put_fields(mad.rep, attr); return true;
    case CmAttr::kRtu:
    case CmAttr::kDrep: put_fields(mad.rtu, attr); return true;
    case CmAttr::kDreq: put_fields(mad.dreq, attr); return true;
    case CmAttr::kRej: put_fields(mad.rej, attr); return true;
    case CmAttr::kMra: put_fields(mad.mra, attr); return true;
    case CmAttr::kSidrReq: put_fields(mad.sidr_req, attr); return true;
    case CmAttr::kSidrRep: put_fields(mad.sidr_rep, attr); return true;
    default: return false;
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
  get_fields(p.first<kRdmaCmHeaderBytes>(), h);
  if (h.version != 0 || (h.ip_version != 4 && h.ip_version != 6)) return std::nullopt;
  return h;
}

void encode_rdma_cm_header(const RdmaCmHeader& h, std::span<std::uint8_t> p) {
  const Out<kRdmaCmHeaderBytes> out = p.first<kRdmaCmHeaderBytes>();
  std::fill(out.begin(), out.end(), std::uint8_t{0});  // the reserved low nibble of byte 1
  put_fields(h, out);
}

}  // namespace uroce::wire
