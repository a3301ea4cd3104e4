// Verbs that are exported but not implemented yet, so that every object a
// process loads beside this library finds the symbols it was linked with.
// That includes more than the program: EAL dlopen()s every PMD in its plugin
// folder (RTLD_NOW), and Debian's mlx4/mlx5 PMDs link libibverbs.so.1,
// libmlx4.so.1 and libmlx5.so.1, which import rdma-core's private provider
// ABI (IBVERBS_PRIVATE_34). Without these, rte_eal_init fails with
// "Cannot init plugins" in any program that runs on this library.
//
// Each answers as a device without the verb: NULL or an errno value
// (EOPNOTSUPP), never a crash. Nothing calls the private ones unless a
// Mellanox provider finds a device, which it never does here: the only
// device is ours.
#include <cerrno>
#include <cstdint>

#include "ibverbs/internal.h"

extern "C" {

// --- public verbs uroce does not have: EOPNOTSUPP, with one line on stderr
// the first time ----------------------------------------------------------

int ibv_attach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) {
  return uroce::ibverbs::unsupported(EOPNOTSUPP, "ibv_attach_mcast: multicast is not supported");
}
int ibv_detach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) { return EOPNOTSUPP; }
ibv_mr* ibv_import_mr(ibv_pd*, std::uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void ibv_unimport_mr(ibv_mr*) {}
ibv_dm* ibv_import_dm(ibv_context*, std::uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void ibv_unimport_dm(ibv_dm*) {}

// rdma-core's sysfs root (SYSFS_PATH aside). Nothing under it describes a
// uroce device: Open MPI's btl_openib looks for <path>/class/infiniband and
// steps aside; perftest and the pingpongs never read it.
const char* ibv_get_sysfs_path(void) { return "/sys"; }

// The kernel-ABI converters: only librdmacm calls them, on answers from the
// kernel's rdma_cm, which a uroce process never gets (rdma_cm over uroce is
// a later issue). They leave `dst` as it is.
void ibv_copy_qp_attr_from_kern(ibv_qp_attr*, void*) {}
void ibv_copy_ah_attr_from_kern(ibv_ah_attr*, void*) {}
void ibv_copy_path_rec_from_kern(void*, void*) {}
void ibv_copy_path_rec_to_kern(void*, void*) {}

// uroce's regions are not DMA targets of a kernel driver: a forked child
// copies them as any memory, so there is nothing to protect (and nothing
// madvise()d away). UNNEEDED is what rdma-core answers, before and after
// ibv_fork_init, on a kernel that copies pinned pages into a child.
int ibv_fork_init(void) { return 0; }
ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
int ibv_dofork_range(void*, std::size_t) { return 0; }
int ibv_dontfork_range(void*, std::size_t) { return 0; }
ibv_context* ibv_import_device(int) {
  errno = EOPNOTSUPP;
  return nullptr;
}
ibv_pd* ibv_import_pd(ibv_context*, std::uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void ibv_unimport_pd(ibv_pd*) {}
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, std::uint8_t*, std::uint16_t*) { return EOPNOTSUPP; }

}  // extern "C"


extern "C" {

// --- IBVERBS_PRIVATE_34: rdma-core's provider ABI (driver.h, not installed) --

// Read by libmlx5; false as in rdma-core's default.
bool verbs_allow_disassociate_destroy = false;

// Called from libmlx4's and libmlx5's constructors: accepted and ignored.
void verbs_register_driver_34(const void*) {}
void verbs_set_ops(void*, const void*) {}
void verbs_uninit_context(void*) {}
void* _verbs_init_and_alloc_context(void*, int, std::size_t, void*, std::uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}

// The command helpers a provider calls once it has a device: each returns
// an errno value, as rdma-core's do.
#define UROCE_PRIVATE_INT_STUBS(X)                                                                              \
  X(execute_ioctl) X(verbs_init_cq) X(verbs_open_device) X(ibv_cmd_advise_mr) X(ibv_cmd_alloc_dm)              \
  X(ibv_cmd_alloc_mw) X(ibv_cmd_alloc_pd) X(ibv_cmd_attach_mcast) X(ibv_cmd_close_xrcd) X(ibv_cmd_create_ah)   \
  X(ibv_cmd_create_counters) X(ibv_cmd_create_cq) X(ibv_cmd_create_cq_ex) X(ibv_cmd_create_flow)               \
  X(ibv_cmd_create_flow_action_esp) X(ibv_cmd_create_qp_ex2) X(ibv_cmd_create_qp_ex)                           \
  X(ibv_cmd_create_rwq_ind_table) X(ibv_cmd_create_srq) X(ibv_cmd_create_srq_ex) X(ibv_cmd_create_wq)          \
  X(ibv_cmd_dealloc_mw) X(ibv_cmd_dealloc_pd) X(ibv_cmd_dereg_mr) X(ibv_cmd_destroy_ah)                        \
  X(ibv_cmd_destroy_counters) X(ibv_cmd_destroy_cq) X(ibv_cmd_destroy_flow) X(ibv_cmd_destroy_flow_action)     \
  X(ibv_cmd_destroy_qp) X(ibv_cmd_destroy_rwq_ind_table) X(ibv_cmd_destroy_srq) X(ibv_cmd_destroy_wq)          \
  X(ibv_cmd_detach_mcast) X(ibv_cmd_free_dm) X(ibv_cmd_get_context) X(ibv_cmd_modify_cq)                       \
  X(ibv_cmd_modify_flow_action_esp) X(ibv_cmd_modify_qp) X(ibv_cmd_modify_qp_ex) X(ibv_cmd_modify_srq)         \
  X(ibv_cmd_modify_wq) X(ibv_cmd_open_qp) X(ibv_cmd_open_xrcd) X(ibv_cmd_query_context)                        \
  X(ibv_cmd_query_device_any) X(ibv_cmd_query_mr) X(ibv_cmd_query_port) X(ibv_cmd_query_qp)                   \
  X(ibv_cmd_query_srq) X(ibv_cmd_read_counters) X(ibv_cmd_reg_dm_mr) X(ibv_cmd_reg_dmabuf_mr) X(ibv_cmd_reg_mr) \
  X(ibv_cmd_rereg_mr) X(ibv_cmd_resize_cq) X(ibv_cmd_create_qp) X(ibv_cmd_poll_cq) X(ibv_cmd_post_recv)           \
  X(ibv_cmd_post_send) X(ibv_cmd_post_srq_recv) X(ibv_cmd_req_notify_cq) X(__ioctl_final_num_attrs)

// The callers pass arguments; a function taking none ignores them (SysV ABI).
#define UROCE_DEFINE_INT_STUB(name) \
  int name(void) { return EOPNOTSUPP; }
UROCE_PRIVATE_INT_STUBS(UROCE_DEFINE_INT_STUB)
#undef UROCE_DEFINE_INT_STUB

// A provider's log line (libefa): there is no provider device to log about.
void __verbs_log(void*, const char*, ...) {}

// A provider's sysfs read: no sysfs behind a uroce device.
int ibv_read_ibdev_sysfs_file(char*, std::size_t, void*, const char*, ...) {
  errno = ENOENT;
  return -1;
}

}  // extern "C"
