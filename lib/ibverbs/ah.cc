// Address handles for UD QPs: ibv_create_ah and ibv_destroy_ah on uroce's
// AddressHandle (whose ibv_ah is the one the program holds, so a WR's
// wr.ud.ah reaches uroce as it is), and the two that read a received
// datagram's GRH: ibv_init_ah_from_wc and ibv_create_ah_from_wc.
#include <cerrno>
#include <cstdio>
#include <string>
#include <cstring>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

// An IPv4 header's 20 bytes whose checksum holds (RFC 791).
bool valid_ipv4(const std::uint8_t* h) {
  if (h[0] != 0x45) return false;
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(h[i] << 8 | h[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return sum == 0xffff;
}

// The index in our GID table of `gid`; -1 if it is not ours.
int gid_index(ibv_context* context, const ibv_gid& gid) {
  for (int i = 0; i < kGidTableLen; ++i) {
    ibv_gid g{};
    if (ibv_query_gid(context, 1, i, &g) == 0 && std::memcmp(g.raw, gid.raw, 16) == 0) return i;
  }
  return -1;
}

}  // namespace
}  // namespace uroce::ibverbs

extern "C" {

ibv_ah* ibv_create_ah(ibv_pd* ibv_pd, ibv_ah_attr* attr) {
  if (ibv_pd == nullptr || attr == nullptr ||
      uroce::ibverbs::ctx_of(ibv_pd->context, reinterpret_cast<uroce::ibverbs::Pd*>(ibv_pd)->born) == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->is_global != 0 && attr->grh.sgid_index >= uroce::ibverbs::kGidTableLen) {
    errno = uroce::ibverbs::bad_gid_index("ibv_create_ah", attr->grh.sgid_index);
    return nullptr;
  }
  auto* pd = reinterpret_cast<uroce::ibverbs::Pd*>(ibv_pd);
  uroce::AddressHandle* ah = pd->pd->create_ah(*attr);
  if (ah == nullptr) {
    const std::string& why = pd->pd->context().last_error();
    std::fprintf(stderr, "uroce libibverbs: %s\n", why.c_str());
    errno = why.find("resolve") != std::string::npos ? EHOSTUNREACH
            : why.find("not supported") != std::string::npos ? EOPNOTSUPP
                                                             : EINVAL;
    return nullptr;
  }
  ibv_ah* out = ah->ibv();
  out->context = ibv_pd->context;
  out->pd = ibv_pd;
  uroce::ibverbs::hold_domain(ibv_pd);
  return out;
}

int ibv_destroy_ah(ibv_ah* ibv_ah) {
  uroce::AddressHandle* ah = uroce::AddressHandle::of(ibv_ah);
  if (ah == nullptr) return EINVAL;
  ibv_pd* pd = ibv_ah->pd;
  if (const int rc = ah->pd()->destroy_ah(ah); rc != 0) return rc;
  uroce::ibverbs::release_domain(pd);
  return 0;
}

// The address of a datagram's sender, from its completion and the 40
// bytes before its payload (RoCEv2: an IPv4 header in the last 20, or an
// IPv6 header): the GID it came from becomes dgid, the GID it was sent to
// picks sgid_index, as rdma-core's does.
int ibv_init_ah_from_wc(ibv_context* context, std::uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                        ibv_ah_attr* ah_attr) {
  if (context == nullptr || wc == nullptr || ah_attr == nullptr || uroce::ibverbs::ctx_of(context) == nullptr) {
    return EINVAL;
  }
  *ah_attr = {};
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  if ((wc->wc_flags & IBV_WC_GRH) == 0) return 0;  // no GRH: nothing to address on RoCE (create_ah says so)
  if (grh == nullptr) return EINVAL;
  const auto* raw = reinterpret_cast<const std::uint8_t*>(grh);
  ibv_gid sgid{};  // the sender's
  ibv_gid dgid{};  // ours, as the datagram named it
  ah_attr->is_global = 1;
  ah_attr->grh.hop_limit = 0xff;
  if (uroce::ibverbs::valid_ipv4(raw + 20)) {
    const std::uint8_t* ip = raw + 20;
    sgid = uroce::ipv4_gid({ip[12], ip[13], ip[14], ip[15]});
    dgid = uroce::ipv4_gid({ip[16], ip[17], ip[18], ip[19]});
    ah_attr->grh.traffic_class = ip[1];
  } else if ((raw[0] >> 4) == 6) {
    std::memcpy(sgid.raw, grh->sgid.raw, 16);
    std::memcpy(dgid.raw, grh->dgid.raw, 16);
    const std::uint32_t flow = static_cast<std::uint32_t>(raw[0] << 24 | raw[1] << 16 | raw[2] << 8 | raw[3]);
    ah_attr->grh.traffic_class = static_cast<std::uint8_t>(flow >> 20);
    ah_attr->grh.flow_label = flow & 0xfffff;
  } else {
    return EINVAL;  // neither header: not a datagram's GRH
  }
  const int index = uroce::ibverbs::gid_index(context, dgid);
  if (index < 0) return ENOENT;  // sent to an address that is not ours
  ah_attr->grh.dgid = sgid;
  ah_attr->grh.sgid_index = static_cast<std::uint8_t>(index);
  return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, std::uint8_t port_num) {
  if (pd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_ah_attr attr{};
  if (const int rc = ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr); rc != 0) {
    errno = rc;
    return nullptr;
  }
  return ibv_create_ah(pd, &attr);
}

}  // extern "C"
