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

#include "ibverbs/internal.h"

extern "C" {

// --- the public verbs still to implement, with verbs.h's prototypes -------

ibv_pd* ibv_alloc_pd(ibv_context*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
int ibv_dealloc_pd(ibv_pd*) { return EOPNOTSUPP; }
ibv_mr*(ibv_reg_mr)(ibv_pd*, void*, std::size_t, int) {
  errno = EOPNOTSUPP;
  return nullptr;
}
ibv_mr* ibv_reg_mr_iova2(ibv_pd*, void*, std::size_t, std::uint64_t, unsigned int) {
  errno = EOPNOTSUPP;
  return nullptr;
}
int ibv_dereg_mr(ibv_mr*) { return EOPNOTSUPP; }
ibv_comp_channel* ibv_create_comp_channel(ibv_context*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
int ibv_destroy_comp_channel(ibv_comp_channel*) { return EOPNOTSUPP; }
ibv_cq* ibv_create_cq(ibv_context*, int, void*, ibv_comp_channel*, int) {
  errno = EOPNOTSUPP;
  return nullptr;
}
int ibv_destroy_cq(ibv_cq*) { return EOPNOTSUPP; }
int ibv_get_cq_event(ibv_comp_channel*, ibv_cq**, void**) {
  errno = EOPNOTSUPP;
  return -1;
}
void ibv_ack_cq_events(ibv_cq*, unsigned int) {}
ibv_qp* ibv_create_qp(ibv_pd*, ibv_qp_init_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
int ibv_modify_qp(ibv_qp*, ibv_qp_attr*, int) { return EOPNOTSUPP; }
int ibv_destroy_qp(ibv_qp*) { return EOPNOTSUPP; }
// NULL: programs fall back to ops.post_send (perftest on unknown vendors).
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
int ibv_get_async_event(ibv_context*, ibv_async_event*) {
  errno = EOPNOTSUPP;
  return -1;
}
void ibv_ack_async_event(ibv_async_event*) {}
// No registered memory yet, so nothing to keep from a child.
int ibv_fork_init(void) { return 0; }
ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_DISABLED; }
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
  X(ibv_cmd_rereg_mr) X(ibv_cmd_resize_cq)

// The callers pass arguments; a function taking none ignores them (SysV ABI).
#define UROCE_DEFINE_INT_STUB(name) \
  int name(void) { return EOPNOTSUPP; }
UROCE_PRIVATE_INT_STUBS(UROCE_DEFINE_INT_STUB)
#undef UROCE_DEFINE_INT_STUB

}  // extern "C"
