/* RC traffic through our libibverbs.so.1 from a program built against
   rdma-core's stock <infiniband/verbs.h>: every verb a verbs program uses,
   the inline paths (ops, verbs_context, ibv_cq_ex, ibv_qp_ex), completion
   events through the channel fd, and the error values. What
   ibverbs_test.cc runs.

     ibverbs_rc loopback            two QPs of one device connected to each
                                    other (net_ring0 carries what the port
                                    sends back to it);
     ibverbs_rc memif server|client DIR
                                    one QP in each of two processes (a memif
                                    pair); they swap QPN, PSN, address and
                                    rkey through files in DIR.

   Exits 0 when every check holds, else prints the first failed check and
   exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "support/ibverbs_check.h"
#define RUN(call)                     \
  do {                                \
    if ((call) != 0) return 1;        \
  } while (0)

enum { kBuf = 1 << 20, kDepth = 64 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One completion from `cq`, busy-polling for up to 10 s. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) {
  const double end = now_s() + 10;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, wc);
    CHECK(n >= 0);
    if (n == 1) return 0;
    CHECK(now_s() < end);
  }
}

/* A completion of `opcode` with status `status` and `wr_id`. */
static int expect(struct ibv_cq *cq, enum ibv_wc_opcode opcode, enum ibv_wc_status status, uint64_t wr_id,
                  struct ibv_wc *out) {
  struct ibv_wc wc;
  RUN(poll_one(cq, &wc));
  if (wc.status != status || (status == IBV_WC_SUCCESS && wc.opcode != opcode) || wc.wr_id != wr_id) {
    fprintf(stderr, "completion: status %s opcode %d wr_id %llu; wanted %s opcode %d wr_id %llu\n",
            ibv_wc_status_str(wc.status), wc.opcode, (unsigned long long)wc.wr_id, ibv_wc_status_str(status), opcode,
            (unsigned long long)wr_id);
    return 1;
  }
  if (out != NULL) *out = wc;
  return 0;
}

struct side {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_comp_channel *channel;
  struct ibv_cq *scq; /* an ibv_create_cq_ex CQ, polled with ibv_start_poll */
  struct ibv_cq_ex *scq_ex;
  struct ibv_cq *rcq; /* an ibv_create_cq CQ on the channel */
  struct ibv_qp *qp;
  uint8_t *buf;       /* page-aligned */
  uint8_t *odd;       /* malloc'd, not page-aligned */
  struct ibv_mr *mr;
  struct ibv_mr *odd_mr;
  uint32_t psn;
};

struct peer {
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  union ibv_gid gid;
};

static int open_side(struct ibv_context *ctx, struct side *s, int new_post_api) {
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  CHECK((s->pd = ibv_alloc_pd(ctx)) != NULL);
  CHECK(posix_memalign((void **)&s->buf, 4096, kBuf) == 0);
  memset(s->buf, 0, kBuf);
  CHECK((s->odd = malloc(4096 + 13)) != NULL);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING;
  /* A non-constant access with an optional bit: verbs.h calls ibv_reg_mr_iova2. */
  CHECK((s->mr = ibv_reg_mr(s->pd, s->buf, kBuf, access)) != NULL);
  CHECK(s->mr->addr == s->buf && s->mr->length == kBuf && s->mr->pd == s->pd && s->mr->context == ctx);
  CHECK((s->odd_mr = ibv_reg_mr(s->pd, s->odd + 13, 4096, IBV_ACCESS_LOCAL_WRITE)) != NULL);

  CHECK((s->channel = ibv_create_comp_channel(ctx)) != NULL);
  CHECK(s->channel->fd >= 0);
  /* As UCX does: non-blocking, so that an empty channel says EAGAIN. */
  CHECK(fcntl(s->channel->fd, F_SETFL, fcntl(s->channel->fd, F_GETFL) | O_NONBLOCK) == 0);
  struct ibv_cq_init_attr_ex cqa = {.cqe = kDepth, .wc_flags = IBV_WC_STANDARD_FLAGS};
  CHECK((s->scq_ex = ibv_create_cq_ex(ctx, &cqa)) != NULL);
  s->scq = ibv_cq_ex_to_cq(s->scq_ex);
  CHECK((s->rcq = ibv_create_cq(ctx, kDepth, s, s->channel, 0)) != NULL);
  CHECK(s->rcq->cq_context == s && s->rcq->channel == s->channel && s->rcq->cqe >= kDepth);

  struct ibv_qp_init_attr_ex qa = {
      .send_cq = s->scq, .recv_cq = s->rcq, .qp_type = IBV_QPT_RC, .qp_context = s,
      .cap = {.max_send_wr = kDepth, .max_recv_wr = kDepth, .max_send_sge = 2, .max_recv_sge = 2,
              .max_inline_data = 64},
      .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = s->pd};
  if (new_post_api) {
    qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_IMM |
                        IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
                        IBV_QP_EX_WITH_SEND_WITH_INV;
  }
  CHECK((s->qp = ibv_create_qp_ex(ctx, &qa)) != NULL);
  CHECK(s->qp->state == IBV_QPS_RESET && s->qp->qp_type == IBV_QPT_RC && s->qp->qp_context == s);
  CHECK(s->qp->send_cq == s->scq && s->qp->recv_cq == s->rcq && s->qp->pd == s->pd);
  CHECK(qa.cap.max_send_wr >= kDepth && qa.cap.max_inline_data >= 64); /* granted caps written back */
  CHECK((ibv_qp_to_qp_ex(s->qp) != NULL) == (new_post_api != 0));

  /* A receive before INIT is refused; INIT accepts them. */
  struct ibv_sge sge = {(uintptr_t)s->buf, 64, s->mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
  CHECK(ibv_post_recv(s->qp, &rwr, &bad) == EINVAL && bad == &rwr);

  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC};
  CHECK(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  CHECK(s->qp->state == IBV_QPS_INIT);
  s->psn = (uint32_t)(lrand48() & 0xffffff);
  return 0;
}

static int describe(struct side *s, struct peer *me) {
  me->qpn = s->qp->qp_num;
  me->psn = s->psn;
  me->rkey = s->mr->rkey;
  me->addr = (uintptr_t)s->buf;
  CHECK(ibv_query_gid(s->ctx, 1, 1, &me->gid) == 0);
  return 0;
}

static int to_rts(struct side *s, const struct peer *p);

/* Wait up to 10 s for async event `type` on QP `qp` of `ctx` (async_fd made
   non-blocking), acknowledging every event on the way. */
static int wait_async(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_event_type type) {
  CHECK(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0);
  const double end = now_s() + 10;
  for (;;) {
    struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
    CHECK(poll(&pfd, 1, 10000) == 1 && now_s() < end);
    struct ibv_async_event ev;
    CHECK(ibv_get_async_event(ctx, &ev) == 0);
    const int found = ev.event_type == type && ev.element.qp == qp;
    ibv_ack_async_event(&ev);
    if (found) return 0;
  }
}

/* To RTR; to RTS as well unless `rtr_only`. */
static int connect_side2(struct side *s, const struct peer *p, int rtr_only);
static int connect_side(struct side *s, const struct peer *p) { return connect_side2(s, p, 0); }

static int connect_side2(struct side *s, const struct peer *p, int rtr_only) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = p->qpn,
                          .rq_psn = p->psn, .max_dest_rd_atomic = 4, .min_rnr_timer = 12};
  a.ah_attr.port_num = 1;
  const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  /* RoCE: an address vector without a GRH is refused. */
  CHECK(ibv_modify_qp(s->qp, &a, rtr) == EINVAL);
  CHECK(s->qp->state == IBV_QPS_INIT);
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = p->gid;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  CHECK(ibv_modify_qp(s->qp, &a, rtr) == 0);
  CHECK(s->qp->state == IBV_QPS_RTR);
  /* A send before RTS is refused. */
  struct ibv_send_wr wr = {.wr_id = 9, .opcode = IBV_WR_SEND}, *bad = NULL;
  CHECK(ibv_post_send(s->qp, &wr, &bad) == EINVAL && bad == &wr);
  return rtr_only ? 0 : to_rts(s, p);
}

static int to_rts(struct side *s, const struct peer *p) {
  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .sq_psn = s->psn,
                          .max_rd_atomic = 4};
  /* A transition that skips a required attribute is refused. */
  CHECK(ibv_modify_qp(s->qp, &r, IBV_QP_STATE) == EINVAL);
  CHECK(ibv_modify_qp(s->qp, &r, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                     IBV_QP_MAX_QP_RD_ATOMIC) == 0);
  CHECK(s->qp->state == IBV_QPS_RTS);

  struct ibv_qp_attr q;
  struct ibv_qp_init_attr qi;
  CHECK(ibv_query_qp(s->qp, &q, IBV_QP_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU, &qi) == 0);
  CHECK(q.qp_state == IBV_QPS_RTS && q.dest_qp_num == p->qpn && q.path_mtu == IBV_MTU_1024);
  CHECK(q.cap.max_send_wr >= kDepth && q.cap.max_inline_data >= 64);
  CHECK(qi.send_cq == s->scq && qi.recv_cq == s->rcq && qi.qp_type == IBV_QPT_RC && qi.qp_context == s);
  return 0;
}

static int post_recv(struct side *s, uint64_t wr_id, uint64_t offset, uint32_t len) {
  struct ibv_sge sge = {(uintptr_t)s->buf + offset, len, s->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
  CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0);
  return 0;
}

static void fill(uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 8));
}
static int same(const uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != (uint8_t)(seed * 131 + i * 7 + (i >> 8))) {
      fprintf(stderr, "byte %zu: %u, wanted %u\n", i, p[i], (uint8_t)(seed * 131 + i * 7 + (i >> 8)));
      return 0;
    }
  }
  return 1;
}

/* Waits for an event on rcq through the channel fd (poll, then a
   non-blocking ibv_get_cq_event), acknowledges it and re-arms. */
static int wait_event(struct side *s) {
  struct pollfd pfd = {.fd = s->channel->fd, .events = POLLIN};
  CHECK(poll(&pfd, 1, 10000) == 1);
  struct ibv_cq *ev_cq = NULL;
  void *ev_ctx = NULL;
  CHECK(ibv_get_cq_event(s->channel, &ev_cq, &ev_ctx) == 0);
  CHECK(ev_cq == s->rcq && ev_ctx == s);
  ibv_ack_cq_events(ev_cq, 1);
  /* Exactly one event per arm: nothing more to read. */
  errno = 0;
  CHECK(ibv_get_cq_event(s->channel, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN);
  return 0;
}

/* SEND/RECV: two SGEs from the unaligned region and the big one, received
   into one buffer; inline SEND; SEND with immediate; solicited events. */
static int sends(struct side *a, struct side *b) {
  fill(a->odd + 13, 100, 1);
  fill(a->buf + 4096, 3000, 2);
  RUN(post_recv(b, 100, 0, 8192));
  CHECK(ibv_req_notify_cq(b->rcq, 0) == 0);
  struct ibv_sge sg[2] = {{(uintptr_t)a->odd + 13, 100, a->odd_mr->lkey}, {(uintptr_t)a->buf + 4096, 3000, a->mr->lkey}};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = sg, .num_sge = 2, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED}, *bad = NULL;
  CHECK(ibv_post_send(a->qp, &wr, &bad) == 0);
  RUN(wait_event(b));
  struct ibv_wc wc;
  RUN(expect(b->rcq, IBV_WC_RECV, IBV_WC_SUCCESS, 100, &wc));
  CHECK(wc.byte_len == 3100 && wc.qp_num == b->qp->qp_num && wc.src_qp == a->qp->qp_num);
  CHECK(same(b->buf, 100, 1) && same(b->buf + 100, 3000, 2));

  /* The send side through ibv_start_poll / ibv_next_poll / ibv_end_poll. */
  struct ibv_poll_cq_attr pa = {0};
  const double end = now_s() + 10;
  int rc;
  while ((rc = ibv_start_poll(a->scq_ex, &pa)) == ENOENT) CHECK(now_s() < end);
  CHECK(rc == 0);
  CHECK(a->scq_ex->status == IBV_WC_SUCCESS && a->scq_ex->wr_id == 1);
  CHECK(ibv_wc_read_opcode(a->scq_ex) == IBV_WC_SEND && ibv_wc_read_qp_num(a->scq_ex) == a->qp->qp_num);
  CHECK(ibv_next_poll(a->scq_ex) == ENOENT);
  ibv_end_poll(a->scq_ex);

  /* Inline: the buffer may change as soon as the post returns. */
  char text[48] = "inline bytes, copied when posted";
  RUN(post_recv(b, 101, 0, 64));
  struct ibv_sge isg = {(uintptr_t)text, sizeof text, 0};
  struct ibv_send_wr iwr = {.wr_id = 2, .sg_list = &isg, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
                            .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_SOLICITED,
                            .imm_data = htobe32(0x1234abcd)};
  CHECK(ibv_req_notify_cq(b->rcq, 1) == 0); /* solicited only: this one has SE */
  CHECK(ibv_post_send(a->qp, &iwr, &bad) == 0);
  memset(text, 'x', sizeof text);
  RUN(wait_event(b));
  RUN(expect(b->rcq, IBV_WC_RECV, IBV_WC_SUCCESS, 101, &wc));
  CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(0x1234abcd) && wc.byte_len == sizeof text);
  CHECK(strcmp((const char *)b->buf, "inline bytes, copied when posted") == 0);
  RUN(expect(a->scq, IBV_WC_SEND, IBV_WC_SUCCESS, 2, NULL));

  /* Too much inline data is refused with *bad_wr at the request. */
  static uint8_t big[4096];
  struct ibv_sge bsg = {(uintptr_t)big, sizeof big, 0};
  struct ibv_send_wr bwr = {.wr_id = 3, .sg_list = &bsg, .num_sge = 1, .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_INLINE};
  CHECK(ibv_post_send(a->qp, &bwr, &bad) == EINVAL && bad == &bwr);
  return 0;
}

/* RDMA WRITE (with and without immediate), READ, and both atomics, with
   the data checked at both ends. */
static int one_sided(struct side *a, struct side *b) {
  const uint32_t len = 200000; /* 196 packets at MTU 1024 */
  fill(a->buf + 8192, len, 3);
  struct ibv_sge sg = {(uintptr_t)a->buf + 8192, len, a->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 10, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED}, *bad = NULL;
  wr.wr.rdma.remote_addr = (uintptr_t)b->buf + 300000;
  wr.wr.rdma.rkey = b->mr->rkey;
  CHECK(ibv_post_send(a->qp, &wr, &bad) == 0);
  RUN(expect(a->scq, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS, 10, NULL));
  CHECK(same(b->buf + 300000, len, 3));

  RUN(post_recv(b, 102, 0, 0));
  wr.wr_id = 11;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htobe32(77);
  sg.length = 5000;
  CHECK(ibv_post_send(a->qp, &wr, &bad) == 0);
  struct ibv_wc wc;
  RUN(expect(b->rcq, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_SUCCESS, 102, &wc));
  CHECK(wc.imm_data == htobe32(77) && (wc.wc_flags & IBV_WC_WITH_IMM));
  RUN(expect(a->scq, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS, 11, NULL));

  fill(b->buf + 600000, 70000, 4);
  struct ibv_sge rsg[2] = {{(uintptr_t)a->buf + 400000, 30000, a->mr->lkey},
                           {(uintptr_t)a->buf + 500000, 40000, a->mr->lkey}};
  struct ibv_send_wr rd = {.wr_id = 12, .sg_list = rsg, .num_sge = 2, .opcode = IBV_WR_RDMA_READ,
                           .send_flags = IBV_SEND_SIGNALED};
  rd.wr.rdma.remote_addr = (uintptr_t)b->buf + 600000;
  rd.wr.rdma.rkey = b->mr->rkey;
  CHECK(ibv_post_send(a->qp, &rd, &bad) == 0);
  RUN(expect(a->scq, IBV_WC_RDMA_READ, IBV_WC_SUCCESS, 12, &wc));
  CHECK(wc.byte_len == 70000);
  uint8_t *joined = malloc(70000);
  CHECK(joined != NULL);
  memcpy(joined, a->buf + 400000, 30000);
  memcpy(joined + 30000, a->buf + 500000, 40000);
  const int read_ok = same(joined, 70000, 4);
  free(joined);
  CHECK(read_ok);

  uint64_t *target = (uint64_t *)(b->buf + 700000);
  *target = 40;
  struct ibv_sge asg = {(uintptr_t)a->buf + 710000, 8, a->mr->lkey};
  struct ibv_send_wr at = {.wr_id = 13, .sg_list = &asg, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
                           .send_flags = IBV_SEND_SIGNALED};
  at.wr.atomic.remote_addr = (uintptr_t)target;
  at.wr.atomic.rkey = b->mr->rkey;
  at.wr.atomic.compare_add = 2;
  CHECK(ibv_post_send(a->qp, &at, &bad) == 0);
  RUN(expect(a->scq, IBV_WC_FETCH_ADD, IBV_WC_SUCCESS, 13, NULL));
  CHECK(*(uint64_t *)(a->buf + 710000) == 40 && *target == 42);
  at.wr_id = 14;
  at.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  at.wr.atomic.compare_add = 42;
  at.wr.atomic.swap = 7;
  CHECK(ibv_post_send(a->qp, &at, &bad) == 0);
  RUN(expect(a->scq, IBV_WC_COMP_SWAP, IBV_WC_SUCCESS, 14, NULL));
  CHECK(*(uint64_t *)(a->buf + 710000) == 42 && *target == 7);
  return 0;
}

/* The new post API: a batch of a WRITE, a SEND with inline data and an
   atomic, posted by ibv_wr_complete; an aborted batch posts nothing. */
static int new_post_api(struct side *a, struct side *b) {
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a->qp);
  CHECK(x != NULL);
  fill(a->buf + 800000, 10000, 5);
  RUN(post_recv(b, 103, 0, 64));
  uint64_t *target = (uint64_t *)(b->buf + 720000);
  *target = 1000;
  ibv_wr_start(x);
  x->wr_id = 20;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf + 820000);
  ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 800000, 10000);
  x->wr_id = 21;
  ibv_wr_send(x);
  ibv_wr_set_inline_data(x, "hello over qp_ex", 17);
  x->wr_id = 22;
  ibv_wr_atomic_fetch_add(x, b->mr->rkey, (uintptr_t)target, 5);
  ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 730000, 8);
  CHECK(ibv_wr_complete(x) == 0);
  RUN(expect(a->scq, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS, 20, NULL));
  RUN(expect(a->scq, IBV_WC_SEND, IBV_WC_SUCCESS, 21, NULL));
  RUN(expect(a->scq, IBV_WC_FETCH_ADD, IBV_WC_SUCCESS, 22, NULL));
  struct ibv_wc wc;
  RUN(expect(b->rcq, IBV_WC_RECV, IBV_WC_SUCCESS, 103, &wc));
  CHECK(wc.byte_len == 17 && strcmp((const char *)b->buf, "hello over qp_ex") == 0);
  CHECK(same(b->buf + 820000, 10000, 5));
  CHECK(*target == 1005 && *(uint64_t *)(a->buf + 730000) == 1000);

  ibv_wr_start(x);
  x->wr_id = 23;
  ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf + 820000);
  ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 100);
  ibv_wr_abort(x);
  struct ibv_wc none;
  usleep(20000);
  CHECK(ibv_poll_cq(a->scq, 1, &none) == 0);
  return 0;
}

/* Memory windows and ATOMIC WRITE: b binds a type 2 window over a region
   registered with MW_BIND (ibv_post_send's IBV_WR_BIND_MW), a writes 8
   bytes through it (ibv_wr_atomic_write) and revokes it (SEND with
   Invalidate: b's receive says which rkey); a type 1 window bound by
   ibv_bind_mw gets a new rkey; a region with a bound window stays. */
static int windows_and_atomic_write(struct side *a, struct side *b) {
  struct ibv_mr *region = ibv_reg_mr(b->pd, b->buf + 900000, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  CHECK(region != NULL);
  struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
  CHECK(mw != NULL);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  struct ibv_send_wr bind = {.wr_id = 30, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad = NULL;
  bind.bind_mw.mw = mw;
  bind.bind_mw.rkey = rkey;
  bind.bind_mw.bind_info.mr = region;
  bind.bind_mw.bind_info.addr = (uintptr_t)b->buf + 900000;
  bind.bind_mw.bind_info.length = 4096;
  bind.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  CHECK(ibv_post_send(b->qp, &bind, &bad) == 0);
  RUN(expect(b->scq, IBV_WC_BIND_MW, IBV_WC_SUCCESS, 30, NULL));
  CHECK(ibv_dereg_mr(region) == EBUSY);

  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a->qp);
  CHECK(x != NULL);
  const uint64_t value = 0x1122334455667788ull;
  ibv_wr_start(x);
  x->wr_id = 31;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(x, rkey, (uintptr_t)b->buf + 900000 + 64, &value);
  CHECK(ibv_wr_complete(x) == 0);
  RUN(expect(a->scq, IBV_WC_ATOMIC_WRITE, IBV_WC_SUCCESS, 31, NULL));
  CHECK(memcmp(b->buf + 900000 + 64, &value, 8) == 0);

  RUN(post_recv(b, 104, 0, 64));
  ibv_wr_start(x);
  x->wr_id = 32;
  ibv_wr_send_inv(x, rkey);
  ibv_wr_set_inline_data(x, "gone", 4);
  CHECK(ibv_wr_complete(x) == 0);
  RUN(expect(a->scq, IBV_WC_SEND, IBV_WC_SUCCESS, 32, NULL));
  struct ibv_wc wc;
  RUN(expect(b->rcq, IBV_WC_RECV, IBV_WC_SUCCESS, 104, &wc));
  CHECK((wc.wc_flags & IBV_WC_WITH_INV) != 0 && wc.invalidated_rkey == rkey);
  CHECK(ibv_dealloc_mw(mw) == 0);

  struct ibv_mw *one = ibv_alloc_mw(b->pd, IBV_MW_TYPE_1);
  CHECK(one != NULL);
  const uint32_t first = one->rkey;
  struct ibv_mw_bind mb = {.wr_id = 33, .send_flags = IBV_SEND_SIGNALED,
                           .bind_info = {.mr = region, .addr = (uintptr_t)b->buf + 900000, .length = 64,
                                         .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
  CHECK(ibv_bind_mw(b->qp, one, &mb) == 0);
  CHECK(one->rkey != first && (one->rkey >> 8) == (first >> 8));
  RUN(expect(b->scq, IBV_WC_BIND_MW, IBV_WC_SUCCESS, 33, NULL));
  CHECK(ibv_dealloc_mw(one) == 0);
  CHECK(ibv_dereg_mr(region) == 0);
  return 0;
}

/* Regions registered and deregistered while a stream of WRITEs flows. */
static int register_while_flowing(struct side *a, struct side *b) {
  struct ibv_sge sg = {(uintptr_t)a->buf, 4096, a->mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
                     *bad = NULL;
  wr.wr.rdma.remote_addr = (uintptr_t)b->buf + 900000;
  wr.wr.rdma.rkey = b->mr->rkey;
  int posted = 0, done = 0;
  for (int round = 0; round < 50; ++round) {
    for (; posted - done < 16; ++posted) {
      wr.wr_id = 1000 + (uint64_t)posted;
      CHECK(ibv_post_send(a->qp, &wr, &bad) == 0);
    }
    void *extra = malloc(10000 + (size_t)round);
    CHECK(extra != NULL);
    struct ibv_mr *mr = ibv_reg_mr(a->pd, extra, 10000 + (size_t)round, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr != NULL);
    CHECK(ibv_dereg_mr(mr) == 0);
    free(extra);
    struct ibv_wc wc[16];
    int n = ibv_poll_cq(a->scq, 16, wc);
    CHECK(n >= 0);
    for (int i = 0; i < n; ++i) CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == 1000 + (uint64_t)(done + i));
    done += n;
  }
  while (done < posted) {
    struct ibv_wc wc;
    RUN(poll_one(a->scq, &wc));
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1000 + (uint64_t)done);
    ++done;
  }
  return 0;
}

/* The error values of the control verbs. */
static int busy_and_bad(struct side *s) {
  CHECK(ibv_dealloc_pd(s->pd) == EBUSY);         /* regions and a QP use it */
  CHECK(ibv_destroy_cq(s->rcq) == EBUSY);        /* the QP uses it */
  CHECK(ibv_destroy_comp_channel(s->channel) == EBUSY);
  errno = 0;
  CHECK(ibv_reg_mr(s->pd, s->buf, 0, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(ibv_reg_mr(s->pd, s->buf, 4096, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL); /* no LOCAL_WRITE */
  errno = 0;
  CHECK(ibv_create_cq(s->ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL);
  return 0;
}

/* A WRITE with a wrong rkey: the requester's completion says remote access
   error, and the responder's QP, now in ERR, raises IBV_EVENT_QP_ACCESS_ERR.
   Both QPs are in ERR afterwards. */
static int remote_access_error(struct side *a, struct side *b) {
  struct ibv_sge sg = {(uintptr_t)a->buf, 64, a->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 30, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED}, *bad = NULL;
  wr.wr.rdma.remote_addr = (uintptr_t)b->buf;
  wr.wr.rdma.rkey = b->mr->rkey ^ 0x5a5a00;
  CHECK(ibv_post_send(a->qp, &wr, &bad) == 0);
  RUN(expect(a->scq, IBV_WC_RDMA_WRITE, IBV_WC_REM_ACCESS_ERR, 30, NULL));

  RUN(wait_async(b->ctx, b->qp, IBV_EVENT_QP_ACCESS_ERR));
  /* A posted receive on the QP in ERR completes flushed. */
  RUN(post_recv(b, 104, 0, 64));
  RUN(expect(b->rcq, IBV_WC_RECV, IBV_WC_WR_FLUSH_ERR, 104, NULL));
  return 0;
}

static int close_side(struct side *s) {
  CHECK(ibv_destroy_qp(s->qp) == 0);
  CHECK(ibv_destroy_cq(s->scq) == 0);
  CHECK(ibv_destroy_cq(s->rcq) == 0);
  CHECK(ibv_destroy_comp_channel(s->channel) == 0);
  CHECK(ibv_dereg_mr(s->mr) == 0);
  CHECK(ibv_dereg_mr(s->odd_mr) == 0);
  CHECK(ibv_dealloc_pd(s->pd) == 0);
  free(s->buf);
  free(s->odd);
  return 0;
}

static struct ibv_context *open_device(void) {
  int num = 0;
  struct ibv_device **list = ibv_get_device_list(&num);
  if (list == NULL || num != 1) return NULL;
  struct ibv_context *ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  return ctx;
}

/* --- shared receive queue (loopback) ----------------------------------- */

/* `qp` to RTS, connected to `remote_qpn` at `gid`, PSN 0 both ways. */
static int srq_connect(struct ibv_qp *qp, uint32_t remote_qpn, const union ibv_gid *gid) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = remote_qpn,
                          .max_dest_rd_atomic = 1, .min_rnr_timer = 1};
  r.ah_attr.is_global = 1;
  r.ah_attr.grh.dgid = *gid;
  r.ah_attr.grh.sgid_index = 1;
  r.ah_attr.grh.hop_limit = 64;
  r.ah_attr.port_num = 1;
  CHECK(ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
  struct ibv_qp_attr t = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1};
  CHECK(ibv_modify_qp(qp, &t, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC) == 0);
  return 0;
}

/* Two senders, each connected to a receiver QP; both receivers on one SRQ
   (ibv_create_srq, the inline ibv_post_srq_recv): the messages take the
   SRQ's receives in the order posted, the armed limit raises
   IBV_EVENT_SRQ_LIMIT_REACHED once on the async fd, and the verbs refuse
   what the spec forbids. */
static int shared_receive_queue(struct ibv_context *ctx) {
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd != NULL);
  uint8_t *buf = NULL;
  CHECK(posix_memalign((void **)&buf, 4096, 65536) == 0);
  memset(buf, 0, 65536);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr != NULL);
  struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  CHECK(scq != NULL && rcq != NULL);
  struct ibv_srq_init_attr sa = {.srq_context = buf, .attr = {.max_wr = 8, .max_sge = 1, .srq_limit = 2}};
  struct ibv_srq *srq = ibv_create_srq(pd, &sa);
  CHECK(srq != NULL && srq->context == ctx && srq->pd == pd && srq->srq_context == buf);
  struct ibv_srq_attr q;
  CHECK(ibv_query_srq(srq, &q) == 0 && q.max_wr == 8 && q.max_sge == 1 && q.srq_limit == 2);
  struct ibv_qp *tx[2], *rx[2];
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_init_attr ta = {.send_cq = scq, .recv_cq = scq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
    CHECK((tx[i] = ibv_create_qp(pd, &ta)) != NULL);
    struct ibv_qp_init_attr ra = {.send_cq = rcq, .recv_cq = rcq, .srq = srq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_send_sge = 1}};
    CHECK((rx[i] = ibv_create_qp(pd, &ra)) != NULL && rx[i]->srq == srq);
  }
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
  for (int i = 0; i < 2; ++i) {
    RUN(srq_connect(tx[i], rx[i]->qp_num, &gid));
    RUN(srq_connect(rx[i], tx[i]->qp_num, &gid));
  }
  /* A QP on an SRQ has no receive queue of its own. */
  struct ibv_sge sge = {(uintptr_t)buf, 1024, mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *rbad = NULL;
  CHECK(ibv_post_recv(rx[0], &rwr, &rbad) == EINVAL && rbad == &rwr);
  /* Three receives into 1 KiB slots 1..3, wr_id 1..3. */
  for (int i = 1; i <= 3; ++i) {
    struct ibv_sge g = {(uintptr_t)buf + 1024 * i, 1024, mr->lkey};
    struct ibv_recv_wr w = {.wr_id = (uint64_t)i, .sg_list = &g, .num_sge = 1};
    CHECK(ibv_post_srq_recv(srq, &w, &rbad) == 0);
  }
  /* Sender 1 first, then sender 0: receives 1 and 2, in that order. */
  for (int k = 0; k < 2; ++k) {
    const int from = 1 - k;
    buf[32768 + k] = (uint8_t)(0xa0 + k);
    struct ibv_sge g = {(uintptr_t)buf + 32768 + k, 1, mr->lkey};
    struct ibv_send_wr w = {.wr_id = 50 + (uint64_t)k, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED}, *sbad = NULL;
    CHECK(ibv_post_send(tx[from], &w, &sbad) == 0);
    struct ibv_wc wc;
    RUN(expect(rcq, IBV_WC_RECV, IBV_WC_SUCCESS, 1 + (uint64_t)k, &wc));
    CHECK(wc.qp_num == rx[from]->qp_num && wc.byte_len == 1 && buf[1024 * (1 + k)] == 0xa0 + k);
    RUN(expect(scq, IBV_WC_SEND, IBV_WC_SUCCESS, 50 + (uint64_t)k, NULL));
  }
  /* One receive left, under the limit of 2: the event, once, on the SRQ. */
  CHECK(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0);
  const double end = now_s() + 10;
  for (int found = 0; !found;) {
    struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
    CHECK(poll(&pfd, 1, 10000) == 1 && now_s() < end);
    struct ibv_async_event ev;
    CHECK(ibv_get_async_event(ctx, &ev) == 0);
    found = ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq;
    ibv_ack_async_event(&ev);
  }
  CHECK(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 0); /* the event disarmed it */
  struct ibv_srq_attr m = {.max_wr = 16, .srq_limit = 1};
  CHECK(ibv_modify_srq(srq, &m, IBV_SRQ_MAX_WR) == EINVAL); /* no resizing */
  CHECK(ibv_modify_srq(srq, &m, IBV_SRQ_LIMIT) == 0);
  CHECK(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 1);
  /* A QP on the SRQ moved to ERR: IBV_EVENT_QP_LAST_WQE_REACHED for it. */
  struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
  CHECK(ibv_modify_qp(rx[0], &err, IBV_QP_STATE) == 0);
  RUN(wait_async(ctx, rx[0], IBV_EVENT_QP_LAST_WQE_REACHED));
  CHECK(ibv_destroy_srq(srq) == EBUSY); /* QPs still use it */
  for (int i = 0; i < 2; ++i) CHECK(ibv_destroy_qp(tx[i]) == 0 && ibv_destroy_qp(rx[i]) == 0);
  CHECK(ibv_destroy_srq(srq) == 0);
  CHECK(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  free(buf);
  return 0;
}

static int loopback(void) {
  struct ibv_context *ctx = open_device();
  CHECK(ctx != NULL);
  struct side a, b;
  RUN(open_side(ctx, &a, 1));
  RUN(open_side(ctx, &b, 0));
  struct peer pa, pb;
  RUN(describe(&a, &pa));
  RUN(describe(&b, &pb));
  CHECK(memcmp(&pa.gid, &pb.gid, sizeof pa.gid) == 0); /* one device */
  RUN(connect_side(&a, &pb));
  RUN(connect_side2(&b, &pa, 1));
  /* A packet that reaches b while it is in RTR: IBV_EVENT_COMM_EST (IBTA
     11.6.3), then b goes on to RTS. */
  RUN(post_recv(&b, 99, 0, 64));
  struct ibv_sge esg = {(uintptr_t)a.buf, 8, a.mr->lkey};
  struct ibv_send_wr ewr = {.wr_id = 98, .sg_list = &esg, .num_sge = 1, .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED}, *ebad = NULL;
  CHECK(ibv_post_send(a.qp, &ewr, &ebad) == 0);
  RUN(expect(b.rcq, IBV_WC_RECV, IBV_WC_SUCCESS, 99, NULL));
  RUN(expect(a.scq, IBV_WC_SEND, IBV_WC_SUCCESS, 98, NULL));
  RUN(wait_async(ctx, b.qp, IBV_EVENT_COMM_EST));
  RUN(to_rts(&b, &pa));
  RUN(busy_and_bad(&a));
  RUN(sends(&a, &b));
  RUN(one_sided(&a, &b));
  RUN(new_post_api(&a, &b));
  RUN(windows_and_atomic_write(&a, &b));
  RUN(register_while_flowing(&a, &b));
  RUN(remote_access_error(&a, &b));
  RUN(close_side(&a));
  RUN(close_side(&b));
  RUN(shared_receive_queue(ctx));
  CHECK(ibv_close_device(ctx) == 0);
  return 0;
}

/* --- two processes ---------------------------------------------------- */

static int publish(const char *dir, const char *role, const struct peer *p) {
  char path[512], tmp[520];
  snprintf(path, sizeof path, "%s/%s", dir, role);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  CHECK(f != NULL);
  CHECK(fwrite(p, sizeof *p, 1, f) == 1);
  CHECK(fclose(f) == 0);
  CHECK(rename(tmp, path) == 0);
  return 0;
}

static int await(const char *dir, const char *role, struct peer *p) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, role);
  const double end = now_s() + 60;
  for (;;) {
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      const size_t n = fread(p, sizeof *p, 1, f);
      fclose(f);
      CHECK(n == 1);
      return 0;
    }
    CHECK(now_s() < end);
    usleep(10000);
  }
}

/* The client WRITEs 256 KiB into the server's region and SENDs 8 KiB; the
   server checks both, then READs them back from the client's. */
static int two_processes(const char *role, const char *dir) {
  const int server = strcmp(role, "server") == 0;
  struct ibv_context *ctx = open_device();
  CHECK(ctx != NULL);
  struct side s;
  RUN(open_side(ctx, &s, 0));
  struct peer me, other;
  RUN(describe(&s, &me));
  if (server) {
    RUN(post_recv(&s, 200, 0, 8192));
    /* Armed before the client can send: an arm fires on the next
       completion, not on one already there (ibv_req_notify_cq(3)). */
    CHECK(ibv_req_notify_cq(s.rcq, 0) == 0);
  }
  RUN(publish(dir, role, &me));
  RUN(await(dir, server ? "client" : "server", &other));
  RUN(connect_side(&s, &other));
  char done_name[32];
  if (server) {
    /* Wait for the client's SEND, which follows its WRITE. */
    RUN(wait_event(&s));
    RUN(expect(s.rcq, IBV_WC_RECV, IBV_WC_SUCCESS, 200, NULL));
    CHECK(same(s.buf, 8192, 7));
    CHECK(same(s.buf + 65536, 262144, 8));
    struct ibv_sge sg = {(uintptr_t)s.buf + 400000, 262144, s.mr->lkey};
    struct ibv_send_wr rd = {.wr_id = 201, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
                             .send_flags = IBV_SEND_SIGNALED}, *bad = NULL;
    rd.wr.rdma.remote_addr = other.addr + 65536;
    rd.wr.rdma.rkey = other.rkey;
    CHECK(ibv_post_send(s.qp, &rd, &bad) == 0);
    RUN(expect(s.scq, IBV_WC_RDMA_READ, IBV_WC_SUCCESS, 201, NULL));
    CHECK(same(s.buf + 400000, 262144, 8));
    snprintf(done_name, sizeof done_name, "server-done");
  } else {
    fill(s.buf + 65536, 262144, 8);
    fill(s.buf, 8192, 7);
    struct ibv_sge wsg = {(uintptr_t)s.buf + 65536, 262144, s.mr->lkey};
    struct ibv_send_wr w = {.wr_id = 300, .sg_list = &wsg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad = NULL;
    w.wr.rdma.remote_addr = other.addr + 65536;
    w.wr.rdma.rkey = other.rkey;
    struct ibv_sge ssg = {(uintptr_t)s.buf, 8192, s.mr->lkey};
    struct ibv_send_wr snd = {.wr_id = 301, .sg_list = &ssg, .num_sge = 1, .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED};
    w.next = &snd; /* one chain: an unsignaled WRITE, then the SEND */
    CHECK(ibv_post_send(s.qp, &w, &bad) == 0);
    RUN(expect(s.scq, IBV_WC_SEND, IBV_WC_SUCCESS, 301, NULL));
    snprintf(done_name, sizeof done_name, "client-done");
  }
  /* Stay until the other side is done too: its READ needs this one. */
  RUN(publish(dir, done_name, &me));
  RUN(await(dir, server ? "client-done" : "server-done", &other));
  RUN(close_side(&s));
  CHECK(ibv_close_device(ctx) == 0);
  return 0;
}

int main(int argc, char **argv) {
  srand48(getpid());
  int rc = 2;
  if (argc == 2 && strcmp(argv[1], "loopback") == 0) {
    rc = loopback();
  } else if (argc == 4 && strcmp(argv[1], "memif") == 0) {
    rc = two_processes(argv[2], argv[3]);
  } else {
    fprintf(stderr, "usage: %s loopback | memif server|client DIR\n", argv[0]);
    return 2;
  }
  if (rc == 0) printf("ibverbs_rc %s: all checks passed\n", argv[1]);
  return rc;
}
