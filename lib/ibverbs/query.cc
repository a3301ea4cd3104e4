// The queries: device, port, GID table, P_Key table, with verbs' return
// conventions (ibv_query_device/port: 0 or an errno value; ibv_query_gid and
// ibv_query_pkey: 0 or -1 with errno, as their man pages say).
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "device/device.h"
#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

// Bytes of the ibv_port_attr that binaries built before port_cap_flags2
// (rdma-core's _compat_ibv_port_attr) pass to the exported ibv_query_port.
constexpr std::size_t kCompatPortAttrLen = offsetof(ibv_port_attr, port_cap_flags2);
static_assert(kCompatPortAttrLen == 48, "rdma-core v44 layout");

// Our device, and whether `port_num` is its one port; errno EINVAL if not.
Device* port_of(ibv_context* context, unsigned port_num) {
  Device* d = device_of(context);
  if (d != nullptr && port_num != 1) {
    errno = EINVAL;
    return nullptr;
  }
  return d;
}

void fill_port_attr(const Device& d, ibv_port_attr& a) {
  a = {};
  a.state = IBV_PORT_ACTIVE;  // the DPDK port was started when the device was opened
  a.max_mtu = d.active_mtu;
  a.active_mtu = d.active_mtu;
  a.gid_tbl_len = kGidTableLen;
  // RoCE: GIDs are IP addresses; CM_SUP: uroce has a communication manager
  // (lib/cm, through librdmacm), as rdma-core's devices say.
  a.port_cap_flags = IBV_PORT_IP_BASED_GIDS | IBV_PORT_CM_SUP;
  a.max_msg_sz = 1u << 31;                    // IBTA: 2^31 bytes per RC message
  a.pkey_tbl_len = 1;
  a.max_vl_num = 1;
  a.active_width = 1;   // 1X: the rate is nominal; the port's link speed is not reported yet
  a.active_speed = 32;  // EDR (25 Gb/s per lane)
  a.phys_state = 5;     // LinkUp
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
}

}  // namespace

int bad_gid_index(const char* verb, int index) {
  std::fprintf(stderr,
               "uroce libibverbs: %s: GID index %d does not exist: port 1 of %s has GID entries 0 (IPv6 "
               "link-local, fe80::) and 1 (IPv4-mapped, ::ffff:a.b.c.d), both RoCE v2 (perftest: -x 0 or -x 1)\n",
               verb, index, kDeviceName);
  return EINVAL;
}

int query_port_op(ibv_context* context, std::uint8_t port_num, ibv_port_attr* attr, std::size_t attr_len) {
  const Device* d = port_of(context, port_num);
  if (d == nullptr) return errno;
  if (attr == nullptr) return EINVAL;
  ibv_port_attr a;
  fill_port_attr(*d, a);
  // The caller's struct may be older (shorter) or newer (longer) than ours.
  std::memcpy(attr, &a, std::min(attr_len, sizeof a));
  if (attr_len > sizeof a) std::memset(reinterpret_cast<char*>(attr) + sizeof a, 0, attr_len - sizeof a);
  return 0;
}

int query_device_ex_op(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                       std::size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (attr == nullptr || attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex a{};
  if (const int rc = ibv_query_device(context, &a.orig_attr); rc != 0) return rc;
  const Device* d = device_of(context);
  // No TSO, RSS, packet pacing or tag matching (tm_caps: see stubs.cc):
  // their caps stay 0, so programs do not ask.
  a.phys_port_cnt_ex = 1;
  // Device memory: the most a context may hold (dm.cc).
  a.max_dm_size = d->ctx->limits().max_dm_size;
  // On-demand paging, implicit too, for every operation each QP type has
  // (the engines reach ODP pages through the kernel: docs/transport.md);
  // XRC's are RC's (its target QPs run RC's responder).
  a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  a.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                                              IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                                              IBV_ODP_SUPPORT_SRQ_RECV;
  a.xrc_odp_caps = a.odp_caps.per_transport_caps.rc_odp_caps;
  a.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE;
  a.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
  // The extended flags are the kernel's (ib_user_verbs.h): bit 40 is
  // IB_UVERBS_DEVICE_ATOMIC_WRITE (IBA 1.5 ATOMIC WRITE runs).
  a.device_cap_flags_ex = a.orig_attr.device_cap_flags | (1ull << 40);
  // Completion timestamps: the engines' clock counts nanoseconds (1 GHz,
  // in kHz here) in all 64 bits.
  a.completion_timestamp_mask = ~std::uint64_t{0};
  a.hca_core_clock = kClockKhz;
  std::memcpy(attr, &a, std::min(attr_size, sizeof a));
  if (attr_size > sizeof a) std::memset(reinterpret_cast<char*>(attr) + sizeof a, 0, attr_size - sizeof a);
  return 0;
}

// ibv_query_rt_values_ex: the raw clock (ns of the engines' clock, the one
// completions are stamped with; through uroced the daemon's).
int query_rt_values_op(ibv_context* context, ibv_values_ex* values) {
  const Device* d = device_of(context);
  if (d == nullptr) return ENODEV;
  if (values == nullptr) return EINVAL;
  const std::uint32_t asked = values->comp_mask;
  values->comp_mask = 0;
  if ((asked & IBV_VALUES_MASK_RAW_CLOCK) != 0) {
    uroce::ClockValues v;
    if (const int e = d->ctx->query_clock(v); e != 0) return e;
    values->raw_clock.tv_sec = static_cast<time_t>(v.raw_ns / 1000000000u);
    values->raw_clock.tv_nsec = static_cast<long>(v.raw_ns % 1000000000u);
    values->comp_mask |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  return 0;
}

}  // namespace uroce::ibverbs

using uroce::ibverbs::Device;
using uroce::ibverbs::device_of;
using uroce::ibverbs::kGidTableLen;

extern "C" {

// In rdma-core's driver.h (not installed); ibv_devinfo imports it.
enum UroceGidTypeSysfs { kGidTypeSysfsRoceV1 = 0, kGidTypeSysfsRoceV2 = 1 };
int ibv_query_gid_type(ibv_context* context, std::uint8_t port_num, unsigned int index, UroceGidTypeSysfs* type);
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, std::size_t size);
int ibv_get_pkey_index(ibv_context* context, std::uint8_t port_num, __be16 pkey);

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  const Device* d = device_of(context);
  if (d == nullptr) return ENODEV;
  if (attr == nullptr) return EINVAL;
  const uroce::DeviceLimits& l = d->ctx->limits();
  *attr = {};
  std::snprintf(attr->fw_ver, sizeof attr->fw_ver, "uroce %s", UROCE_VERSION);
  attr->node_guid = d->guid;
  attr->sys_image_guid = d->guid;
  attr->max_mr_size = ~0ull;
  attr->page_size_cap = ~0xfffull;  // any page size from 4 KiB up
  attr->vendor_id = uroce::ibverbs::kVendorId;
  attr->vendor_part_id = 0;  // in none of perftest's part-id tables
  attr->hw_ver = 0;
  attr->max_qp = static_cast<int>(l.max_qp);
  attr->max_qp_wr = static_cast<int>(l.max_qp_wr);
  // SYS_IMAGE_GUID: sys_image_guid above is set (the node GUID: one device
  // per system image). No IBV_DEVICE_SRQ_RESIZE: SRQs keep their size.
  // Memory windows of type 1 and 2B (IBTA 10.6.7: a type 2 window's rkey
  // works on the QP that bound it), as Soft-RoCE offers. XRC (annex A14).
  attr->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_MEM_WINDOW |
                           IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
  attr->max_sge = static_cast<int>(l.max_sge);
  attr->max_sge_rd = static_cast<int>(l.max_sge);
  attr->max_cq = static_cast<int>(l.max_qp) * 2;
  attr->max_cqe = static_cast<int>(l.max_cqe);
  attr->max_mr = static_cast<int>(l.max_mr);
  attr->max_mw = static_cast<int>(l.max_mr);  // windows take keys of the same table
  attr->max_pd = static_cast<int>(l.max_qp);
  // SRQs as QPs: one per QP at most, each as deep and wide as a QP's queue.
  attr->max_srq = static_cast<int>(l.max_qp);
  attr->max_srq_wr = static_cast<int>(l.max_qp_wr);
  attr->max_srq_sge = static_cast<int>(l.max_sge);
  // Address handles: as many as memory allows; a bound like rxe's.
  attr->max_ah = 1 << 15;
  attr->max_qp_rd_atom = static_cast<int>(l.max_qp_rd_atom);
  attr->max_qp_init_rd_atom = static_cast<int>(l.max_qp_init_rd_atom);
  attr->max_res_rd_atom = static_cast<int>(l.max_qp * l.max_qp_rd_atom);
  attr->atomic_cap = IBV_ATOMIC_HCA;
  attr->max_pkeys = 1;
  attr->local_ca_ack_delay = 15;
  attr->phys_port_cnt = 1;
  return 0;
}

int (ibv_query_port)(ibv_context* context, std::uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  return uroce::ibverbs::query_port_op(context, port_num, reinterpret_cast<ibv_port_attr*>(port_attr),
                                       uroce::ibverbs::kCompatPortAttrLen);
}

int ibv_query_gid(ibv_context* context, std::uint8_t port_num, int index, ibv_gid* gid) {
  const Device* d = uroce::ibverbs::port_of(context, port_num);
  if (d == nullptr) return -1;
  if (index < 0 || index >= kGidTableLen) {
    errno = uroce::ibverbs::bad_gid_index("ibv_query_gid", index);
    return -1;
  }
  if (gid == nullptr || d->ctx->query_gid(index, *gid) != 0) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

int _ibv_query_gid_ex(ibv_context* context, std::uint32_t port_num, std::uint32_t gid_index, ibv_gid_entry* entry,
                      std::uint32_t flags, std::size_t entry_size) {
  if (port_num > 255) return EINVAL;
  const Device* d = uroce::ibverbs::port_of(context, port_num);
  if (d == nullptr) return errno;
  if (flags != 0 || entry == nullptr || entry_size < offsetof(ibv_gid_entry, gid_type) + sizeof(std::uint32_t)) {
    return EINVAL;
  }
  if (gid_index >= static_cast<std::uint32_t>(kGidTableLen)) {
    return uroce::ibverbs::bad_gid_index("ibv_query_gid_ex", static_cast<int>(std::min<std::uint32_t>(gid_index, INT32_MAX)));
  }
  ibv_gid_entry e{};
  if (d->ctx->query_gid(static_cast<int>(gid_index), e.gid) != 0) return ENODATA;
  e.gid_index = gid_index;
  e.port_num = port_num;
  e.gid_type = IBV_GID_TYPE_ROCE_V2;
  e.ndev_ifindex = 0;  // no kernel netdev behind a DPDK port
  std::memcpy(entry, &e, std::min(entry_size, sizeof e));
  if (entry_size > sizeof e) std::memset(reinterpret_cast<char*>(entry) + sizeof e, 0, entry_size - sizeof e);
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, std::size_t max_entries,
                             std::uint32_t flags, std::size_t entry_size) {
  if (device_of(context) == nullptr) return -ENODEV;
  if (flags != 0 || entries == nullptr || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  if (max_entries < static_cast<std::size_t>(kGidTableLen)) return -EINVAL;
  for (int i = 0; i < kGidTableLen; ++i) {
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + static_cast<std::size_t>(i) * entry_size);
    if (const int rc = _ibv_query_gid_ex(context, 1, static_cast<std::uint32_t>(i), e, 0, entry_size); rc != 0) {
      return -rc;
    }
  }
  return kGidTableLen;
}

int ibv_query_gid_type(ibv_context* context, std::uint8_t port_num, unsigned int index, UroceGidTypeSysfs* type) {
  if (uroce::ibverbs::port_of(context, port_num) == nullptr) return -1;
  if (index >= static_cast<unsigned>(kGidTableLen)) {
    errno = uroce::ibverbs::bad_gid_index("ibv_query_gid_type", static_cast<int>(std::min<unsigned>(index, INT32_MAX)));
    return -1;
  }
  if (type == nullptr) {
    errno = EINVAL;
    return -1;
  }
  *type = kGidTypeSysfsRoceV2;  // both entries are RoCE v2 (UDP/IP)
  return 0;
}

int ibv_query_pkey(ibv_context* context, std::uint8_t port_num, int index, __be16* pkey) {
  if (uroce::ibverbs::port_of(context, port_num) == nullptr) return -1;
  if (pkey == nullptr || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htons(0xffff);  // the default full-member P_Key, the only one
  return 0;
}

int ibv_get_pkey_index(ibv_context* context, std::uint8_t port_num, __be16 pkey) {
  if (uroce::ibverbs::port_of(context, port_num) == nullptr) return -1;
  if ((ntohs(pkey) & 0x7fff) != 0x7fff) {  // the membership bit aside
    errno = ENOENT;
    return -1;
  }
  return 0;
}

// There is no sysfs behind a uroce device. Programs read optional files
// through this (ibv_devinfo: board_id) and skip what is missing.
int ibv_read_sysfs_file(const char* /*dir*/, const char* /*file*/, char* /*buf*/, std::size_t /*size*/) {
  errno = ENOENT;
  return -1;
}

}  // extern "C"
