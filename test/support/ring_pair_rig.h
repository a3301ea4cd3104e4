// Two devices on DPDK ports joined by net_ring (device::RingPair), each
// with a PD, a CQ and a registered buffer, and (unless asked not to) one
// QP pair per port queue, connected: the starting point of the tests that
// run the stack over real ethdev bursts. EAL must be running
// (support/eal_environment.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/ring_pair.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"

namespace uroce::test {

struct RingRigOptions {
  std::uint16_t queues = 1;  // port queues (engines) per device
  const cc::DcqcnParams* dcqcn = nullptr;  // on both devices; not owned
  int pfc_priority = -1;
  // Each device's engine on a worker thread of its own, started before
  // anything is set up (so every control call below goes through it):
  // the CPU (-1 any), or kNoWorker (the test's thread steps the engines).
  static constexpr int kNoWorker = -2;
  int worker_cpu_a = kNoWorker;
  int worker_cpu_b = kNoWorker;
  int cq_depth = 4096;
  std::size_t bytes = 1u << 20;  // each side's buffer, registered whole
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_qp_cap cap{64, 64, 1, 1, 0};  // of every QP the rig makes
  bool qps = true;      // one QP pair per queue (QP i on engine i at both ends)
  bool connect = true;  // and connect them at once
  ConnectParams connect_params = {.mtu = IBV_MTU_4096};
};

class RingPairRig {
 public:
  // Failures are test failures; `pair` is nullptr if the ports or devices
  // could not be set up.
  explicit RingPairRig(const std::string& name, const RingRigOptions& options = {}) : options_(options) {
    std::string error;
    pair = device::RingPair::create(name, error, options.queues, options.dcqcn, options.pfc_priority);
    EXPECT_NE(pair, nullptr) << error;
    if (!pair) return;
    if (options.worker_cpu_a != RingRigOptions::kNoWorker) {
      EXPECT_EQ(pair->a->start_worker(options.worker_cpu_a), 0);
    }
    if (options.worker_cpu_b != RingRigOptions::kNoWorker) {
      EXPECT_EQ(pair->b->start_worker(options.worker_cpu_b), 0);
    }
    pda = pair->a->alloc_pd();
    pdb = pair->b->alloc_pd();
    cqa = pair->a->create_cq(options.cq_depth);
    cqb = pair->b->create_cq(options.cq_depth);
    bufa = static_cast<std::uint8_t*>(pair->a->alloc_buffer(options.bytes));
    bufb = static_cast<std::uint8_t*>(pair->b->alloc_buffer(options.bytes));
    mra = pda->reg_mr(bufa, options.bytes, options.access);
    mrb = pdb->reg_mr(bufb, options.bytes, options.access);
    if (!options.qps) return;
    for (std::uint16_t q = 0; q < options.queues; ++q) {
      qps_a.push_back(create_qp(pda, cqa, IBV_QPT_RC, q));
      qps_b.push_back(create_qp(pdb, cqb, IBV_QPT_RC, q));
    }
    qa = qps_a[0];
    qb = qps_b[0];
    if (options.connect) {
      EXPECT_EQ(connect(), 0) << pair->a->last_error() << pair->b->last_error();
    }
  }

  // Everything made (QPs only if asked for).
  bool ready() const { return pair && mra && mrb && (!options_.qps || (qa && qb)); }

  // A QP of the rig's capabilities on `worker` (-1: the least loaded engine).
  QueuePair* create_qp(ProtectionDomain* pd, CompletionQueue* cq, ibv_qp_type type = IBV_QPT_RC, int worker = -1) {
    QpInitAttr init;
    init.qp_type = type;
    init.cap = options_.cap;
    init.worker = worker;
    init.send_cq = init.recv_cq = cq;
    return pd->create_qp(init);
  }

  // Connects each QP pair (qps_a[i] with qps_b[i]); the first failure.
  int connect() {
    for (std::size_t i = 0; i < qps_a.size(); ++i) {
      if (const int e = pair->connect(qps_a[i], qps_b[i], options_.connect_params); e != 0) return e;
    }
    return 0;
  }

  // Steps both engines until `n` completions have been polled from `cq`
  // (or `limit_ns` of real time passes); returns what was polled.
  std::vector<ibv_wc> wait(CompletionQueue* cq, std::size_t n, std::uint64_t limit_ns = 20'000'000'000ull) {
    std::vector<ibv_wc> got;
    ibv_wc wc[32];
    pair->run_until(
        [&] {
          for (int k; (k = cq->poll(32, wc)) > 0;) got.insert(got.end(), wc, wc + k);
          return got.size() >= n;
        },
        limit_ns);
    return got;
  }

  std::unique_ptr<device::RingPair> pair;
  ProtectionDomain* pda = nullptr;
  ProtectionDomain* pdb = nullptr;
  CompletionQueue* cqa = nullptr;
  CompletionQueue* cqb = nullptr;
  std::vector<QueuePair*> qps_a;  // one per queue, QP i on engine i
  std::vector<QueuePair*> qps_b;
  QueuePair* qa = nullptr;  // queue 0's pair
  QueuePair* qb = nullptr;
  std::uint8_t* bufa = nullptr;
  std::uint8_t* bufb = nullptr;
  MemoryRegion* mra = nullptr;
  MemoryRegion* mrb = nullptr;

 private:
  RingRigOptions options_;
};

}  // namespace uroce::test
