// Two connected RC QPs on a simulated link, with a registered buffer on each
// side: the starting point of the transport tests.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "device/sim_pair.h"
#include "verbs/verbs_impl.h"
#include "support/work_requests.h"

namespace uroce::test {

// Steps `net` until `n` completions have been polled from `cq` (or the
// virtual time limit passes); returns what was polled.
inline std::vector<ibv_wc> wait_completions(device::SimPair& net, CompletionQueue* cq, std::size_t n,
                                            std::uint64_t limit_ns) {
  std::vector<ibv_wc> got;
  ibv_wc wc[64];
  net.run_until(
      [&] {
        for (int k; (k = cq->poll(64, wc)) > 0;) got.insert(got.end(), wc, wc + k);
        return got.size() >= n;
      },
      limit_ns);
  return got;
}

struct RcPair {
  RcPair(std::uint64_t seed, std::size_t bytes, const ConnectParams& params = {},
         sim::Impairments a_to_b = {}, sim::Impairments b_to_a = {}, std::uint32_t depth = 1024,
         const cc::DcqcnParams* dcqcn = nullptr, std::uint8_t min_ack_timeout = 0,
         const cc::DelayParams* delay_cc = nullptr)
      : net(seed, a_to_b, b_to_a, dcqcn, min_ack_timeout, delay_cc), size(bytes) {
    pda = net.a->alloc_pd();
    pdb = net.b->alloc_pd();
    cqa = net.a->create_cq(65536);
    cqb = net.b->create_cq(65536);
    QpInitAttr init;
    init.cap.max_send_wr = depth;
    init.cap.max_recv_wr = depth;
    init.cap.max_send_sge = 16;
    init.cap.max_recv_sge = 16;
    init.cap.max_inline_data = 256;
    init.send_cq = init.recv_cq = cqa;
    qa = pda->create_qp(init);
    init.send_cq = init.recv_cq = cqb;
    qb = pdb->create_qp(init);
    bufa = static_cast<std::uint8_t*>(net.a->alloc_buffer(bytes));
    bufb = static_cast<std::uint8_t*>(net.b->alloc_buffer(bytes));
    const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                    IBV_ACCESS_REMOTE_ATOMIC;
    mra = pda->reg_mr(bufa, bytes, all);
    mrb = pdb->reg_mr(bufb, bytes, all);
    connect_rc = net.connect(qa, qb, params);
  }

  // Steps the link until `n` completions have been polled from `cq` (or the
  // virtual time limit passes); returns what was polled.
  std::vector<ibv_wc> wait(CompletionQueue* cq, std::size_t n, std::uint64_t limit_ns = 60'000'000'000ull) {
    return wait_completions(net, cq, n, limit_ns);
  }

  int post_send(ibv_wr_opcode op, std::uint64_t local_off, std::uint32_t len, std::uint64_t remote_off,
                std::uint64_t wr_id = 1, unsigned flags = IBV_SEND_SIGNALED) {
    return post_rdma(qa, op, bufa + local_off, len, mra->lkey, bufb + remote_off, mrb->rkey, wr_id, flags);
  }

  int post_recv_b(std::uint64_t off, std::uint32_t len, std::uint64_t wr_id = 2) {
    return post_recv_one(qb, bufb + off, len, mrb->lkey, wr_id);
  }

  device::SimPair net;
  std::size_t size;
  ProtectionDomain* pda;
  ProtectionDomain* pdb;
  CompletionQueue* cqa;
  CompletionQueue* cqb;
  QueuePair* qa;
  QueuePair* qb;
  std::uint8_t* bufa;
  std::uint8_t* bufb;
  MemoryRegion* mra;
  MemoryRegion* mrb;
  int connect_rc;
};

inline void fill_pattern(std::uint8_t* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
}

}  // namespace uroce::test
