/* A verbs program in C, built against rdma-core's stock <infiniband/verbs.h>
   and linked to our libibverbs.so.1 (lib/ibverbs): what ibverbs_test.cc
   runs. argv[1] "unconfigured": the environment names no device;
   "configured": UROCE_EAL and UROCE_IP=10.0.0.1/24 name one. Exits 0 when
   every check holds, else prints the first failed check and exits 1.
   "open-at-exit": opens the device and a PD and returns from main without
   closing them, as a program that gives up after a failure does. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rdma-core's driver.h, not installed: its private GID-type query. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, int *type);

#include "support/ibverbs_check.h"

/* RFC 791: the header checksum of a 20-byte IPv4 header. */
static void set_ipv4_checksum(unsigned char *ip) {
  ip[10] = ip[11] = 0;
  unsigned sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (unsigned)(ip[i] << 8 | ip[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  ip[10] = (unsigned char)((~sum >> 8) & 0xff);
  ip[11] = (unsigned char)(~sum & 0xff);
}

static int ours(void) {
  /* Which file ibv_get_device_list came from (ISO C has no function to
     object pointer cast, so copy the bits). */
  struct ibv_device **(*fn)(int *) = ibv_get_device_list;
  void *addr;
  memcpy(&addr, &fn, sizeof addr);
  Dl_info info;
  CHECK(dladdr(addr, &info) != 0);
  CHECK(strstr(info.dli_fname, "lib/ibverbs/libibverbs.so.1") != NULL);
  return 0;
}

static int unconfigured(void) {
  int num = -1;
  struct ibv_device **list = ibv_get_device_list(&num);
  CHECK(list != NULL);
  CHECK(num == 0);
  CHECK(list[0] == NULL);
  ibv_free_device_list(list);
  return 0;
}

static int strings(void) {
  CHECK(strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0);
  CHECK(strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "PORT_ACTIVE") == 0);
  CHECK(strcmp(ibv_port_state_str((enum ibv_port_state)99), "unknown") == 0);
  CHECK(strcmp(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter") == 0);
  CHECK(strcmp(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown") == 0);
  CHECK(strcmp(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active") == 0);
  CHECK(strcmp(ibv_event_type_str((enum ibv_event_type)-1), "unknown") == 0);
  return 0;
}

static int configured(void) {
  int num = -1;
  struct ibv_device **list = ibv_get_device_list(&num);
  CHECK(list != NULL);
  CHECK(num == 1);
  CHECK(list[1] == NULL);
  struct ibv_device *dev = list[0];
  CHECK(strcmp(ibv_get_device_name(dev), "uroce0") == 0);
  CHECK(dev->node_type == IBV_NODE_CA);
  CHECK(dev->transport_type == IBV_TRANSPORT_IB);
  __be64 guid = ibv_get_device_guid(dev);
  CHECK(guid != 0);

  struct ibv_context *ctx = ibv_open_device(dev);
  CHECK(ctx != NULL);
  CHECK(ctx->device == dev);
  CHECK(verbs_get_ctx(ctx) != NULL); /* extended: abi_compat == UINTPTR_MAX */
  CHECK(ctx->async_fd >= 0);

  struct ibv_device_attr da;
  CHECK(ibv_query_device(ctx, &da) == 0);
  CHECK(da.phys_port_cnt == 1);
  CHECK(da.node_guid == guid);
  CHECK(da.max_qp > 0 && da.max_qp_wr > 0 && da.max_cqe > 0 && da.max_mr > 0);
  CHECK(da.max_qp_rd_atom == 128 && da.max_qp_init_rd_atom == 128);
  CHECK(da.atomic_cap == IBV_ATOMIC_HCA);
  CHECK(da.max_pkeys >= 1);
  CHECK(da.vendor_id != 0xffffff);

  /* The stock inline ibv_query_device_ex falls back to ibv_query_device. */
  struct ibv_device_attr_ex dax;
  CHECK(ibv_query_device_ex(ctx, NULL, &dax) == 0);
  CHECK(dax.orig_attr.max_qp == da.max_qp);

  /* The stock inline ibv_query_port: verbs_context.query_port. */
  struct ibv_port_attr pa;
  memset(&pa, 0xa5, sizeof pa);
  CHECK(ibv_query_port(ctx, 1, &pa) == 0);
  CHECK(pa.state == IBV_PORT_ACTIVE);
  CHECK(pa.link_layer == IBV_LINK_LAYER_ETHERNET);
  CHECK(pa.gid_tbl_len == 2);
  CHECK(pa.active_mtu >= IBV_MTU_1024 && pa.active_mtu <= IBV_MTU_4096);
  CHECK(pa.max_mtu == pa.active_mtu);
  CHECK(pa.pkey_tbl_len == 1);
  CHECK(pa.port_cap_flags2 == 0);
  CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL);
  /* The exported call old binaries reach: writes the 48-byte compat struct. */
  struct ibv_port_attr old;
  memset(&old, 0xa5, sizeof old);
  CHECK((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)&old) == 0);
  CHECK(old.state == IBV_PORT_ACTIVE && old.link_layer == IBV_LINK_LAYER_ETHERNET);
  CHECK(old.port_cap_flags2 == 0xa5a5); /* past the compat struct: untouched */

  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0);
  CHECK(gid.raw[0] == 0xfe && gid.raw[1] == 0x80);
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
  static const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  CHECK(memcmp(gid.raw, v4, 16) == 0);
  errno = 0;
  CHECK(ibv_query_gid(ctx, 1, 2, &gid) == -1);
  CHECK(errno == EINVAL);
  CHECK(ibv_query_gid(ctx, 2, 0, &gid) == -1);

  int type = -1;
  CHECK(ibv_query_gid_type(ctx, 1, 1, &type) == 0);
  CHECK(type == 1); /* IBV_GID_TYPE_SYSFS_ROCE_V2 */
  CHECK(ibv_query_gid_type(ctx, 1, 2, &type) != 0);

  struct ibv_gid_entry entry;
  CHECK(ibv_query_gid_ex(ctx, 1, 1, &entry, 0) == 0);
  CHECK(entry.gid_type == IBV_GID_TYPE_ROCE_V2);
  CHECK(entry.gid_index == 1 && entry.port_num == 1);
  CHECK(memcmp(entry.gid.raw, v4, 16) == 0);
  CHECK(ibv_query_gid_ex(ctx, 1, 5, &entry, 0) != 0);
  struct ibv_gid_entry table[4];
  CHECK(ibv_query_gid_table(ctx, table, 4, 0) == 2);

  __be16 pkey = 0;
  CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0);
  CHECK(pkey == 0xffff);
  CHECK(ibv_query_pkey(ctx, 1, 1, &pkey) == -1);

  /* UD and UC QPs exist; XRC and raw packet QPs answer EOPNOTSUPP,
     through the exported calls and the inline ops alike. */
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd != NULL && pd->context == ctx);
  struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
  CHECK(cq != NULL);
  struct ibv_qp_init_attr ud = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
                                .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *udqp = ibv_create_qp(pd, &ud);
  CHECK(udqp != NULL && udqp->qp_type == IBV_QPT_UD);
  struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
  CHECK(ibv_modify_qp(udqp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
  struct ibv_qp_init_attr got_init;
  CHECK(ibv_query_qp(udqp, &qa, IBV_QP_QKEY, &got_init) == 0);
  CHECK(qa.qkey == 0x11111111 && got_init.qp_type == IBV_QPT_UD);
  CHECK(ibv_destroy_qp(udqp) == 0);
  ud.qp_type = IBV_QPT_UC;
  struct ibv_qp *ucqp = ibv_create_qp(pd, &ud);
  CHECK(ucqp != NULL && ucqp->qp_type == IBV_QPT_UC);
  CHECK(ibv_destroy_qp(ucqp) == 0);
  ud.qp_type = IBV_QPT_RAW_PACKET;
  errno = 0;
  CHECK(ibv_create_qp(pd, &ud) == NULL);
  CHECK(errno == EOPNOTSUPP);
  /* SRQs exist (ibverbs_rc.c drives them); one of no depth is refused. */
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 0, .max_sge = 1}};
  errno = 0;
  CHECK(ibv_create_srq(pd, &sa) == NULL);
  CHECK(errno == EINVAL);
  sa.attr.max_wr = 4;
  struct ibv_srq *srq = ibv_create_srq(pd, &sa);
  CHECK(srq != NULL);
  CHECK(ibv_destroy_srq(srq) == 0);
  /* Address handles: RoCE needs the GRH. */
  struct ibv_ah_attr ah = {.is_global = 0, .port_num = 1};
  errno = 0;
  CHECK(ibv_create_ah(pd, &ah) == NULL);
  CHECK(errno == EINVAL);
  /* The address of a datagram's sender from its GRH: an IPv4 header in
     the last 20 bytes, 10.0.0.9 -> our own address (GID index 1). */
  union ibv_gid ours;
  CHECK(ibv_query_gid(ctx, 1, 1, &ours) == 0);
  unsigned char grh[40] = {0};
  unsigned char *ip = grh + 20;
  ip[0] = 0x45, ip[1] = 0x08, ip[3] = 60, ip[8] = 64, ip[9] = 17;
  ip[12] = 10, ip[15] = 9;
  memcpy(ip + 16, ours.raw + 12, 4);
  set_ipv4_checksum(ip);
  struct ibv_wc wc = {.wc_flags = IBV_WC_GRH, .src_qp = 0x42};
  struct ibv_ah_attr from;
  CHECK(ibv_init_ah_from_wc(ctx, 1, &wc, (struct ibv_grh *)grh, &from) == 0);
  CHECK(from.is_global == 1 && from.grh.sgid_index == 1 && from.grh.traffic_class == 0x08);
  CHECK(from.grh.dgid.raw[10] == 0xff && from.grh.dgid.raw[11] == 0xff && from.grh.dgid.raw[12] == 10 &&
        from.grh.dgid.raw[15] == 9);
  ip[19] ^= 1; /* sent to an address that is not ours */
  set_ipv4_checksum(ip);
  CHECK(ibv_init_ah_from_wc(ctx, 1, &wc, (struct ibv_grh *)grh, &from) == ENOENT);
  /* Memory windows (rdma-core's test_mr.MWTest drives their traffic): made
     through the inline ibv_alloc_mw, a type that does not exist refused, a
     PD with a window busy, advertised. */
  struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  CHECK(mw != NULL && mw->type == IBV_MW_TYPE_2 && mw->pd == pd && mw->context == ctx);
  errno = 0;
  CHECK(ibv_alloc_mw(pd, (enum ibv_mw_type)3) == NULL);
  CHECK(errno == EINVAL);
  CHECK(ibv_dealloc_pd(pd) == EBUSY);
  CHECK(ibv_dealloc_mw(mw) == 0);
  struct ibv_device_attr mw_attr;
  CHECK(ibv_query_device(ctx, &mw_attr) == 0);
  CHECK((mw_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0 && mw_attr.max_mw > 0);
  /* ibv_rereg_mr keeps the keys and answers rdma-core's error codes:
     INPUT for what libibverbs refuses, CMD for what the device does. */
  char *rbuf = aligned_alloc(4096, 8192);
  CHECK(rbuf != NULL);
  struct ibv_mr *mr = ibv_reg_mr(pd, rbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr != NULL);
  const uint32_t lkey = mr->lkey, rkey = mr->rkey;
  CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, NULL, rbuf + 4096, 4096,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0);
  CHECK(mr->lkey == lkey && mr->rkey == rkey && mr->addr == rbuf + 4096 && mr->length == 4096 && mr->pd == pd);
  errno = 0;
  CHECK(ibv_rereg_mr(mr, 1 << 5, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
  errno = 0;
  CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
  errno = 0;
  CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_INPUT);
  errno = 0;
  CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL);
  errno = 0;
  CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD &&
        errno == EINVAL);
  CHECK(mr->addr == rbuf + 4096 && mr->lkey == lkey);
  CHECK(ibv_dereg_mr(mr) == 0);
  free(rbuf);
  /* ibv_resize_cq; the clock completions are stamped with. */
  CHECK(ibv_resize_cq(cq, 0) == EINVAL);
  CHECK(ibv_resize_cq(cq, 16) == 0 && cq->cqe == 16);
  struct ibv_values_ex rt = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
  CHECK(ibv_query_rt_values_ex(ctx, &rt) == 0 && rt.comp_mask == IBV_VALUES_MASK_RAW_CLOCK);
  CHECK(rt.raw_clock.tv_sec != 0 || rt.raw_clock.tv_nsec != 0);
  struct ibv_device_attr_ex ax;
  CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0);
  CHECK(ax.hca_core_clock == 1000000 && ax.completion_timestamp_mask == UINT64_MAX);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);

  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);

  /* A second list after the first was freed: the same device, EAL once. */
  list = ibv_get_device_list(&num);
  CHECK(list != NULL && num == 1 && list[0] == dev);
  ibv_free_device_list(list);
  return 0;
}

/* The device opened, a PD allocated, nothing closed. */
static int open_at_exit(void) {
  struct ibv_device **list = ibv_get_device_list(NULL);
  CHECK(list != NULL && list[0] != NULL);
  struct ibv_context *ctx = ibv_open_device(list[0]);
  CHECK(ctx != NULL);
  CHECK(ibv_alloc_pd(ctx) != NULL);
  printf("ibverbs_client open-at-exit: leaving with the context open\n");
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s unconfigured|configured|open-at-exit\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "open-at-exit") == 0) return open_at_exit();
  if (ours() != 0 || strings() != 0) return 1;
  int rc = strcmp(argv[1], "configured") == 0 ? configured() : unconfigured();
  if (rc == 0) printf("ibverbs_client %s: all checks passed\n", argv[1]);
  return rc;
}
