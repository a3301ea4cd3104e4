/* What device_attrs_test.cc runs: a verbs program in C, built against
   rdma-core's stock <infiniband/verbs.h> and <rdma/rdma_cma.h> and linked
   to our libibverbs.so.1 and librdmacm.so.1 (issue 27, items 5, 8, 10, 15).
     attrs                 the device's attributes and refusals (configured)
     nodevice              the device lists with no device (unconfigured)
     exit-in-verb MODE N   a thread loops control verbs; after a delay
                           picked by N a signal whose handler calls exit(0)
                           goes to that thread (MODE thread), to the main
                           thread (main), or to the process with the main
                           thread blocking it (process: any thread that
                           takes it, as a process-directed alarm)
   Exits 0 when every check holds, else prints the first failed check and
   exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "support/ibverbs_check.h"

/* uroce's vendor id (lib/ibverbs/internal.h, kVendorId). */
#define UROCE_VENDOR_ID 0x020000

static struct ibv_context *open_first(void) {
  int num = 0;
  struct ibv_device **list = ibv_get_device_list(&num);
  if (list == NULL || num != 1) return NULL;
  struct ibv_context *ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  return ctx;
}

static int attrs(void) {
  struct ibv_context *ctx = open_first();
  CHECK(ctx != NULL);

  /* Item 8: a vendor id no vendor has, not 0 (rdma-core's tests) and not
     Soft-RoCE's 0xffffff; vendor_part_id 0, in none of perftest's tables. */
  struct ibv_device_attr da;
  CHECK(ibv_query_device(ctx, &da) == 0);
  CHECK(da.vendor_id == UROCE_VENDOR_ID);
  CHECK(da.vendor_part_id == 0);
  /* Item 10: SYS_IMAGE_GUID, and the GUID it promises. */
  CHECK((da.device_cap_flags & IBV_DEVICE_SYS_IMAGE_GUID) != 0);
  CHECK((da.device_cap_flags & IBV_DEVICE_XRC) != 0); /* XRC runs (annex A14) */
  CHECK(da.sys_image_guid != 0 && da.sys_image_guid == da.node_guid);
  struct ibv_device_attr_ex dax;
  CHECK(ibv_query_device_ex(ctx, NULL, &dax) == 0);
  CHECK(dax.orig_attr.vendor_id == UROCE_VENDOR_ID);
  CHECK((dax.orig_attr.device_cap_flags & IBV_DEVICE_SYS_IMAGE_GUID) != 0);
  /* Item 10: CM_SUP (uroce has a CM), beside IP_BASED_GIDS; through the
     inline query and the exported compat one. */
  struct ibv_port_attr pa;
  CHECK(ibv_query_port(ctx, 1, &pa) == 0);
  CHECK((pa.port_cap_flags & IBV_PORT_CM_SUP) != 0);
  CHECK((pa.port_cap_flags & IBV_PORT_IP_BASED_GIDS) != 0);
  CHECK((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)&pa) == 0);
  CHECK((pa.port_cap_flags & IBV_PORT_CM_SUP) != 0);

  /* Item 8: one completion vector per CPU; a CQ on one beyond is refused,
     through ibv_create_cq and ibv_create_cq_ex alike. */
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  CHECK(ctx->num_comp_vectors == (cpus > 0 ? cpus : 1));
  struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors - 1);
  CHECK(cq != NULL);
  errno = 0;
  CHECK(ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors) == NULL);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(ibv_create_cq(ctx, 4, NULL, NULL, -1) == NULL);
  CHECK(errno == EINVAL);
  struct ibv_cq_init_attr_ex cqa = {.cqe = 4, .comp_vector = (uint32_t)ctx->num_comp_vectors,
                                    .wc_flags = IBV_WC_STANDARD_FLAGS};
  errno = 0;
  CHECK(ibv_create_cq_ex(ctx, &cqa) == NULL);
  CHECK(errno == EINVAL);
  cqa.comp_vector = 0;
  struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cqa);
  CHECK(cqx != NULL);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0);

  /* Item 8: fork needs nothing of uroce, before ibv_fork_init and after. */
  CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);
  CHECK(ibv_fork_init() == 0);
  CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);

  /* Item 10: a GID index beyond the two entries: EINVAL, and a line on
     stderr that names them (the test reads it), from each verb that takes
     one. */
  union ibv_gid gid;
  fprintf(stderr, "--- query_gid 3\n");
  errno = 0;
  CHECK(ibv_query_gid(ctx, 1, 3, &gid) == -1);
  CHECK(errno == EINVAL);
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd != NULL);
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *qp = ibv_create_qp(pd, &qi);
  CHECK(qp != NULL);
  struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                           .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  memset(&qa, 0, sizeof qa);
  qa.qp_state = IBV_QPS_RTR;
  qa.path_mtu = IBV_MTU_1024;
  qa.dest_qp_num = 0x11;
  qa.max_dest_rd_atomic = 1;
  qa.min_rnr_timer = 12;
  qa.ah_attr.is_global = 1;
  qa.ah_attr.port_num = 1;
  qa.ah_attr.grh.dgid = gid;
  qa.ah_attr.grh.hop_limit = 64;
  qa.ah_attr.grh.sgid_index = 3;
  fprintf(stderr, "--- modify_qp 3\n");
  errno = 0;
  CHECK(ibv_modify_qp(qp, &qa,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == EINVAL);
  CHECK(errno == EINVAL);
  struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .sgid_index = 3, .hop_limit = 64}};
  fprintf(stderr, "--- create_ah 3\n");
  errno = 0;
  CHECK(ibv_create_ah(pd, &ah) == NULL);
  CHECK(errno == EINVAL);
  CHECK(ibv_destroy_qp(qp) == 0);

  /* XRC through the inline verbs (annex A14): a private domain (fd -1), an
     XRC SRQ of it with its number, a target QP by ibv_create_qp_ex and a
     second handle of it by ibv_open_qp; the domain stays while they do. */
  fprintf(stderr, "--- xrc\n");
  struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1,
                                  .oflags = O_CREAT};
  struct ibv_xrcd *xrcd = ibv_open_xrcd(ctx, &xa);
  CHECK(xrcd != NULL);
  struct ibv_srq_init_attr_ex sx = {.attr = {.max_wr = 4, .max_sge = 1},
                                    .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                                 IBV_SRQ_INIT_ATTR_CQ,
                                    .srq_type = IBV_SRQT_XRC, .pd = pd, .cq = cq};
  errno = 0;
  CHECK(ibv_create_srq_ex(ctx, &sx) == NULL); /* an XRC SRQ needs its domain */
  CHECK(errno == EINVAL);
  sx.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD;
  sx.xrcd = xrcd;
  struct ibv_srq *xsrq = ibv_create_srq_ex(ctx, &sx);
  CHECK(xsrq != NULL);
  uint32_t srqn = 0;
  CHECK(ibv_get_srq_num(xsrq, &srqn) == 0 && srqn != 0);
  struct ibv_qp_init_attr_ex tx = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xrcd};
  struct ibv_qp *target = ibv_create_qp_ex(ctx, &tx);
  CHECK(target != NULL && target->pd == NULL && target->send_cq == NULL);
  struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE, .qp_num = target->qp_num,
                                .qp_type = IBV_QPT_XRC_RECV};
  errno = 0;
  CHECK(ibv_open_qp(ctx, &oa) == NULL); /* no domain named */
  CHECK(errno == EINVAL);
  oa.comp_mask |= IBV_QP_OPEN_ATTR_XRCD;
  oa.xrcd = xrcd;
  CHECK(ibv_open_qp(ctx, &oa) == target);
  oa.qp_num = target->qp_num ^ 1;
  CHECK(ibv_open_qp(ctx, &oa) == NULL); /* no target QP of that number */
  CHECK(ibv_close_xrcd(xrcd) == EBUSY);
  CHECK(ibv_destroy_qp(target) == 0); /* the second handle */
  CHECK(ibv_destroy_qp(target) == 0); /* the QP */
  CHECK(ibv_destroy_srq(xsrq) == 0);
  CHECK(ibv_close_xrcd(xrcd) == 0);
  /* A domain on a file is every open's of that file (by its inode). */
  char path[] = "/tmp/uroce-xrcd-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  xa.fd = fd;
  xa.oflags = 0;
  errno = 0;
  CHECK(ibv_open_xrcd(ctx, &xa) == NULL); /* none yet, and no O_CREAT */
  CHECK(errno == EINVAL);
  xa.oflags = O_CREAT;
  struct ibv_xrcd *shared = ibv_open_xrcd(ctx, &xa);
  CHECK(shared != NULL);
  int fd2 = open(path, O_RDONLY);
  CHECK(fd2 >= 0);
  xa.fd = fd2;
  CHECK(ibv_open_xrcd(ctx, &xa) == shared);
  xa.oflags = O_CREAT | O_EXCL;
  errno = 0;
  CHECK(ibv_open_xrcd(ctx, &xa) == NULL);
  CHECK(errno == EEXIST);
  CHECK(ibv_close_xrcd(shared) == 0);
  CHECK(ibv_close_xrcd(shared) == 0);
  close(fd2);
  close(fd);
  unlink(path);
  /* A basic SRQ through ibv_create_srq_ex still works, with a CQ named
     (our op) or not (the inline's ibv_create_srq). */
  sx.srq_type = IBV_SRQT_BASIC;
  sx.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
  struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sx);
  CHECK(srq != NULL);
  CHECK(ibv_destroy_srq(srq) == 0);
  sx.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  srq = ibv_create_srq_ex(ctx, &sx);
  CHECK(srq != NULL);
  CHECK(ibv_destroy_srq(srq) == 0);

  /* Issue 29: raw packet QPs and tag matching answer EOPNOTSUPP with a line
     that says why, and advertise no capability. */
  CHECK(dax.raw_packet_caps == 0);
  CHECK(dax.tm_caps.max_num_tags == 0 && dax.tm_caps.max_ops == 0);
  fprintf(stderr, "--- raw\n");
  qi.qp_type = IBV_QPT_RAW_PACKET;
  errno = 0;
  CHECK(ibv_create_qp(pd, &qi) == NULL);
  CHECK(errno == EOPNOTSUPP);
  qi.qp_type = IBV_QPT_RC;
  struct ibv_srq_init_attr_ex tm = {.attr = {.max_wr = 4, .max_sge = 1},
                                    .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                                 IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM,
                                    .srq_type = IBV_SRQT_TM, .pd = pd, .cq = cq,
                                    .tm_cap = {.max_num_tags = 4, .max_ops = 4}};
  errno = 0;
  CHECK(ibv_create_srq_ex(ctx, &tm) == NULL);
  CHECK(errno == EOPNOTSUPP);

  /* Issue 29: device memory, as ibv_alloc_dm(3) and rdma-core's tests ask. */
  CHECK(dax.max_dm_size >= 4096);
  struct ibv_alloc_dm_attr dma = {.length = dax.max_dm_size + 1};
  errno = 0;
  CHECK(ibv_alloc_dm(ctx, &dma) == NULL);
  CHECK(errno == ENOMEM);
  dma.length = 100;
  dma.comp_mask = 1;
  errno = 0;
  CHECK(ibv_alloc_dm(ctx, &dma) == NULL);
  CHECK(errno == EINVAL);
  dma.comp_mask = 0;
  dma.log_align_req = 6;
  struct ibv_dm *dm = ibv_alloc_dm(ctx, &dma);
  CHECK(dm != NULL);
  char word[8] = "abcdefg", back[8] = {0};
  CHECK(ibv_memcpy_to_dm(dm, 96, word, 4) == 0);
  CHECK(ibv_memcpy_from_dm(back, dm, 96, 4) == 0 && memcmp(back, word, 4) == 0);
  CHECK(ibv_memcpy_to_dm(dm, 3, word, 4) != 0);
  CHECK(ibv_memcpy_from_dm(back, dm, 4, 3) != 0);
  CHECK(ibv_memcpy_to_dm(dm, 100, word, 4) != 0);
  const unsigned zb = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE;
  errno = 0;
  CHECK(ibv_reg_dm_mr(pd, dm, 0, 100, IBV_ACCESS_LOCAL_WRITE) == NULL);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(ibv_reg_dm_mr(pd, dm, 0, 100, zb | IBV_ACCESS_MW_BIND) == NULL);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(ibv_reg_dm_mr(pd, dm, 0, 104, zb) == NULL);
  CHECK(errno == EINVAL);
  struct ibv_mr *dmr = ibv_reg_dm_mr(pd, dm, 4, 96, zb | IBV_ACCESS_REMOTE_WRITE);
  CHECK(dmr != NULL);
  CHECK(dmr->addr == NULL && dmr->length == 96 && dmr->lkey != 0);
  CHECK(ibv_free_dm(dm) == EBUSY);
  CHECK(ibv_dereg_mr(dmr) == 0);
  CHECK(ibv_free_dm(dm) == 0);

  /* Issue 29: thread and parent domains. A parent domain stands for its PD
     in every verb; it holds the PD and its TD, and is held by what is made
     on it; a CQ names a parent domain only. */
  struct ibv_td_init_attr tda = {0};
  struct ibv_td *td = ibv_alloc_td(ctx, &tda);
  CHECK(td != NULL);
  struct ibv_parent_domain_init_attr pda = {.pd = pd, .td = td,
                                            .comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
                                            .pd_context = &tda};
  struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pda);
  CHECK(parent != NULL);
  pda.pd = parent;
  errno = 0;
  CHECK(ibv_alloc_parent_domain(ctx, &pda) == NULL);
  CHECK(errno == EINVAL);
  pda.pd = pd;
  pda.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  errno = 0;
  CHECK(ibv_alloc_parent_domain(ctx, &pda) == NULL);
  CHECK(errno == EINVAL);
  CHECK(ibv_dealloc_td(td) == EBUSY);
  CHECK(ibv_dealloc_pd(pd) == EBUSY);
  qp = ibv_create_qp(parent, &qi);
  CHECK(qp != NULL && qp->pd == parent);
  char buf[64];
  struct ibv_mr *pmr = ibv_reg_mr(parent, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(pmr != NULL);
  struct ibv_srq_init_attr psa = {.attr = {.max_wr = 4, .max_sge = 1}};
  struct ibv_srq *psrq = ibv_create_srq(parent, &psa);
  CHECK(psrq != NULL && psrq->pd == parent);
  cqa.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  cqa.parent_domain = pd;
  errno = 0;
  CHECK(ibv_create_cq_ex(ctx, &cqa) == NULL);
  CHECK(errno == EINVAL);
  cqa.parent_domain = parent;
  cqx = ibv_create_cq_ex(ctx, &cqa);
  CHECK(cqx != NULL);
  CHECK(ibv_dealloc_pd(parent) == EBUSY);
  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_dereg_mr(pmr) == 0);
  CHECK(ibv_destroy_srq(psrq) == 0);
  CHECK(ibv_dealloc_pd(parent) == EBUSY);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0);
  CHECK(ibv_dealloc_pd(parent) == 0);
  CHECK(ibv_dealloc_td(td) == 0);
  fprintf(stderr, "--- end\n");

  /* On-demand paging: advertised in odp_caps; an ODP region over memory
     not mapped yet, the implicit one (NULL, SIZE_MAX), and NULL with any
     other length refused; ibv_advise_mr through the inline's context op. */
  CHECK((dax.odp_caps.general_caps & (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT)) ==
        (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
  CHECK((dax.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_ATOMIC) != 0);
  CHECK(dax.xrc_odp_caps == dax.odp_caps.per_transport_caps.rc_odp_caps); /* XRC runs RC's responder */
  const int odp = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND;
  char *pages = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(pages != MAP_FAILED);
  CHECK(munmap(pages + 4096, 4096) == 0);
  struct ibv_mr *omr = ibv_reg_mr(pd, pages, 2 * 4096, odp);
  CHECK(omr != NULL);
  struct ibv_mr *imr = ibv_reg_mr(pd, NULL, SIZE_MAX, odp);
  CHECK(imr != NULL);
  struct ibv_mr *hmr = ibv_reg_mr(pd, pages, 4096, odp | IBV_ACCESS_HUGETLB); /* a hint, dropped */
  CHECK(hmr != NULL);
  CHECK(ibv_dereg_mr(hmr) == 0);
  CHECK(ibv_reg_mr(pd, NULL, 4096, odp) == NULL && errno == EINVAL);
  struct ibv_sge psge = {(uintptr_t)pages, 4096, omr->lkey};
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &psge, 1) == 0);
  psge.addr = (uintptr_t)(pages + 4096);
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &psge, 1) == EFAULT); /* not mapped */
  psge.lkey ^= 0x100;
  CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &psge, 1) == EFAULT); /* no such region */
  CHECK(ibv_dereg_mr(imr) == 0);
  CHECK(ibv_dereg_mr(omr) == 0);
  munmap(pages, 4096);

  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(ctx) == 0);
  return 0;
}

/* Item 15, with no device configured: ibv_get_device_list gives an empty
   list (as rdma-core's), rdma_get_devices NULL with ENODEV (as
   rdma-core's). */
static int nodevice(void) {
  int num = -1;
  struct ibv_device **list = ibv_get_device_list(&num);
  CHECK(list != NULL);
  CHECK(num == 0 && list[0] == NULL);
  ibv_free_device_list(list);
  num = -1;
  errno = 0;
  struct ibv_context **devs = rdma_get_devices(&num);
  CHECK(devs == NULL);
  CHECK(errno == ENODEV);
  CHECK(num == 0);
  CHECK(rdma_get_devices(NULL) == NULL);
  return 0;
}

/* --- item 5: exit() from a signal handler while a thread is inside a
   control verb ------------------------------------------------------- */

static struct ibv_qp *loop_qp;
static atomic_int looping;

static void on_signal(int sig) {
  (void)sig;
  exit(0);
}

/* Create/modify/query/destroy, each a control call holding the workers. */
static void *control_loop(void *arg) {
  (void)arg;
  struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  struct ibv_qp_attr reset = {.qp_state = IBV_QPS_RESET};
  struct ibv_qp_attr got;
  struct ibv_qp_init_attr got_init;
  for (;;) {
    if (ibv_modify_qp(loop_qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
      fprintf(stderr, "modify to INIT failed\n");
      _exit(3);
    }
    ibv_query_qp(loop_qp, &got, IBV_QP_STATE, &got_init);
    ibv_modify_qp(loop_qp, &reset, IBV_QP_STATE);
    atomic_store(&looping, 1);
  }
  return NULL;
}

static int exit_in_verb(const char *mode, unsigned n) {
  struct ibv_context *ctx = open_first();
  CHECK(ctx != NULL);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd != NULL);
  struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
  CHECK(cq != NULL);
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
  loop_qp = ibv_create_qp(pd, &qi);
  CHECK(loop_qp != NULL);

  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, control_loop, NULL) == 0);
  while (!atomic_load(&looping)) sched_yield();
  /* A delay of 0-2 ms that differs from run to run: the signal lands at
     varied points of the loop, inside a control call most of the time. */
  struct timespec delay = {.tv_nsec = (long)((n * 7919u) % 2000u) * 1000};
  nanosleep(&delay, NULL);
  printf("exit-in-verb %s %u: signalling\n", mode, n);
  fflush(stdout);
  if (strcmp(mode, "thread") == 0) {
    CHECK(pthread_kill(t, SIGUSR1) == 0);
  } else if (strcmp(mode, "main") == 0) {
    CHECK(raise(SIGUSR1) == 0);
  } else {
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR1);
    CHECK(pthread_sigmask(SIG_BLOCK, &one, NULL) == 0);
    CHECK(kill(getpid(), SIGUSR1) == 0);
  }
  /* The handler ends the process; this thread only waits. */
  for (;;) pause();
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "attrs") == 0) {
    const int rc = attrs();
    if (rc == 0) printf("device_attrs attrs: all checks passed\n");
    return rc;
  }
  if (argc >= 2 && strcmp(argv[1], "nodevice") == 0) {
    const int rc = nodevice();
    if (rc == 0) printf("device_attrs nodevice: all checks passed\n");
    return rc;
  }
  if (argc == 4 && strcmp(argv[1], "exit-in-verb") == 0) return exit_in_verb(argv[2], (unsigned)atoi(argv[3]));
  fprintf(stderr, "usage: %s attrs | nodevice | exit-in-verb thread|main|process N\n", argv[0]);
  return 2;
}
