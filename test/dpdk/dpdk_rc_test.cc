// The RC transport over DPDK ports: two devices on net_ring ports in one
// process (EAL with --no-huge --no-shconf --no-pci), every verb with its
// data verified; and ARP: a port answers for its address and learns peers.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <tuple>

#include "cc/dcqcn.h"
#include "support/eal_environment.h"
#include "support/port_resolve.h"
#include "support/ring_pair_rig.h"
#include "support/telemetry_client.h"
#include "engine/engine.h"
#include "support/test_seed.h"
#include "support/frame_helpers.h"
#include "verbs/internal.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

// Two devices on net_ring, a connected QP pair (qa, qb) and 8 MiB regions.
struct Devices : RingPairRig {
  // With `workers`, each device's engine runs on a thread of its own (CPUs 0
  // and 1) before anything is set up: every control call below goes through
  // the worker, and this thread only posts and polls.
  explicit Devices(const std::string& name, bool workers = false, const cc::DcqcnParams* dcqcn = nullptr)
      : RingPairRig(name, {.dcqcn = dcqcn,
                           .worker_cpu_a = workers ? 0 : RingRigOptions::kNoWorker,
                           .worker_cpu_b = workers ? 1 : RingRigOptions::kNoWorker,
                           .bytes = kBytes,
                           .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                     IBV_ACCESS_REMOTE_ATOMIC,
                           .cap = ibv_qp_cap{256, 256, 4, 4, 64},
                           .connect_params = {.mtu = IBV_MTU_4096, .timeout = workers ? kWorkerTimeout : std::uint8_t{14}}}) {
    if (workers && pair) {
      EXPECT_EQ(pair->a->start_worker(0), EBUSY);
    }
  }

  // One signaled WRITE of `len` bytes from bufa to bufb, waited for.
  std::size_t write(std::uint32_t len) {
    if (post_rdma(qa, IBV_WR_RDMA_WRITE, bufa, len, mra->lkey, bufb, mrb->rkey) != 0) return 0;
    return wait(cqa, 1).size();
  }

  static constexpr std::size_t kBytes = 8u << 20;
  // On worker threads the engines run only when the scheduler lets them: a
  // loaded machine kept one off its CPU for longer than the default's 0.54 s
  // retry budget (67 ms, 8 tries), and the QP failed with nothing lost.
  // 4.096 us * 2^18 (about 1.07 s) gives 8.6 s; these tests check what
  // arrives, not how long a peer may stall.
  static constexpr std::uint8_t kWorkerTimeout = 18;
};

class DpdkRc : public ::testing::TestWithParam<std::tuple<ibv_wr_opcode, bool>> {};

TEST_P(DpdkRc, EveryMessageArrivesWhole) {
  ASSERT_EQ(EalEnvironment::error(), "");
  const ibv_wr_opcode op = std::get<0>(GetParam());
  const bool workers = std::get<1>(GetParam());
  Devices d("rc" + std::to_string(static_cast<int>(op)) + (workers ? "w" : ""), workers);
  ASSERT_NE(d.pair, nullptr);
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const bool atomic = op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP;
  std::uint64_t model = 1000;
  std::memcpy(d.bufb + Devices::kBytes - 8, &model, 8);
  for (int i = 0; i < 200; ++i) {
    const std::uint32_t len = atomic ? 8 : static_cast<std::uint32_t>(rng() % (256u << 10));
    const std::uint64_t src = 0;
    const std::uint64_t dst = 1u << 20;
    std::uint8_t* from = op == IBV_WR_RDMA_READ ? d.bufb + dst : d.bufa + src;
    for (std::uint32_t k = 0; k < len; ++k) from[k] = static_cast<std::uint8_t>(rng());
    if (op == IBV_WR_SEND) {
      ibv_sge rs{reinterpret_cast<std::uint64_t>(d.bufb + dst), len, d.mrb->lkey};
      ibv_recv_wr rw{};
      rw.sg_list = &rs;
      rw.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      ASSERT_EQ(d.qb->post_recv(&rw, &bad), 0);
    }
    ibv_sge sge{reinterpret_cast<std::uint64_t>(d.bufa + (op == IBV_WR_RDMA_READ ? dst : src)), len, d.mra->lkey};
    ibv_send_wr wr{};
    wr.wr_id = static_cast<std::uint64_t>(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (atomic) {
      wr.wr.atomic.remote_addr = reinterpret_cast<std::uint64_t>(d.bufb + Devices::kBytes - 8);
      wr.wr.atomic.rkey = d.mrb->rkey;
      wr.wr.atomic.compare_add = op == IBV_WR_ATOMIC_CMP_AND_SWP ? model : 3;
      wr.wr.atomic.swap = model + 7;
    } else {
      wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(d.bufb + dst);
      wr.wr.rdma.rkey = d.mrb->rkey;
    }
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(d.qa->post_send(&wr, &bad), 0);
    const auto wc = d.wait(d.cqa, 1);
    ASSERT_EQ(wc.size(), 1u) << "message " << i;
    ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS) << wc_status_str(wc[0].status);
    if (atomic) {
      std::uint64_t orig;
      std::memcpy(&orig, d.bufa, 8);
      ASSERT_EQ(orig, model);
      model = op == IBV_WR_ATOMIC_CMP_AND_SWP ? model + 7 : model + 3;
    } else if (op == IBV_WR_RDMA_READ) {
      ASSERT_EQ(std::memcmp(d.bufa + dst, d.bufb + dst, len), 0) << "message " << i;
    } else {
      if (op == IBV_WR_SEND) {
        const auto r = d.wait(d.cqb, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].byte_len, len);
      }
      ASSERT_EQ(std::memcmp(d.bufa + src, d.bufb + dst, len), 0) << "message " << i;
    }
  }
  std::uint64_t final_value;
  std::memcpy(&final_value, d.bufb + Devices::kBytes - 8, 8);
  if (atomic) {
    EXPECT_EQ(final_value, model);
  }
  // The regions were registered with DPDK (net_ring needs no DMA mapping).
  EXPECT_EQ(d.pair->io_a->counters().regions_registered, 1u);
  EXPECT_EQ(d.pair->io_a->counters().regions_register_failed, 0u);
  // The frames went through the ports; large payloads leave the region
  // itself (zero copy) wherever the port takes multi-segment frames.
  EXPECT_GT(d.pair->frames_sent(), 200u);
  const dpdk::PortIo& sender = op == IBV_WR_RDMA_READ ? *d.pair->io_b : *d.pair->io_a;
  if (!atomic && d.pair->port_a->multi_seg_tx()) {
    EXPECT_GT(sender.counters().tx_zero_copy_frames, 0u);
    // net_ring delivers those chains as they are: the receiver parses them in
    // segments and places the payload from them, gathering none.
    const dpdk::PortIo& receiver = op == IBV_WR_RDMA_READ ? *d.pair->io_a : *d.pair->io_b;
    EXPECT_EQ(receiver.counters().rx_in_segments, sender.counters().tx_zero_copy_frames);
    EXPECT_EQ(receiver.counters().rx_linearized, 0u);
  } else {
    EXPECT_EQ(sender.counters().tx_zero_copy_frames, 0u);
  }
  EXPECT_EQ(internal::engine_of(*d.pair->a).parse_drops(wire::ParseStatus::kIcrcMismatch), 0u);
}

INSTANTIATE_TEST_SUITE_P(Verbs, DpdkRc,
                         ::testing::Combine(::testing::Values(IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ,
                                                              IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP),
                                            ::testing::Bool()),
                         [](const auto& param_info) {
                           std::string name;
                           switch (std::get<0>(param_info.param)) {
                             case IBV_WR_SEND: name = "send"; break;
                             case IBV_WR_RDMA_WRITE: name = "write"; break;
                             case IBV_WR_RDMA_READ: name = "read"; break;
                             case IBV_WR_ATOMIC_FETCH_AND_ADD: name = "fetch_add"; break;
                             default: name = "cmp_swap"; break;
                           }
                           return name + (std::get<1>(param_info.param) ? "_on_worker_cores" : "_one_thread");
                         });

// Several engines per device: ports with two queue pairs joined by net_ring
// (queue i of one port sends to queue i of the other), one engine per queue.
struct Queued : RingPairRig {
  static constexpr std::size_t kQps = 4;
  static constexpr std::size_t kBytes = 4u << 20;  // per QP: source half, target half

  // A's QPs are placed by the context (the least loaded engine); B's QP i
  // is pinned to the engine that A's QP i is not on, so that every packet
  // arrives on the queue of the engine that does not serve its QP.
  explicit Queued(const std::string& name)
      : RingPairRig(name, {.queues = 2,
                           .cq_depth = 8192,
                           .bytes = kQps * kBytes,
                           .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                     IBV_ACCESS_REMOTE_ATOMIC,
                           .cap = ibv_qp_cap{512, 512, 1, 1, 0},
                           .qps = false}) {
    if (!pair) return;
    for (std::size_t i = 0; i < kQps; ++i) {
      qps_a.push_back(create_qp(pda, cqa));
      qps_b.push_back(create_qp(pdb, cqb, IBV_QPT_RC, static_cast<int>(engine_of(*pair->a, qps_a[i]) ^ 1)));
    }
    EXPECT_EQ(connect(), 0) << pair->a->last_error() << pair->b->last_error();
  }

  static std::size_t engine_of(Context& ctx, QueuePair* qp) {
    for (std::size_t e = 0; e < internal::engine_count(ctx); ++e) {
      if (internal::engine_of(ctx, e).find_qp(qp->qp_num()) != nullptr) return e;
    }
    return ~std::size_t{0};
  }

  std::uint64_t total(Context& ctx, engine::EngineCounter c) {
    std::uint64_t n = 0;
    for (std::size_t e = 0; e < internal::engine_count(ctx); ++e) n += internal::engine_of(ctx, e).counter(c);
    return n;
  }

  // Posts `per_qp` messages of `op` on every QP at once (SENDs with their
  // receives), waits for every completion and checks each QP's come in
  // order and whole, then the data.
  void transfer(ibv_wr_opcode op, int per_qp, std::mt19937_64& rng) {
    const std::uint32_t len = static_cast<std::uint32_t>(kBytes / 2 / static_cast<std::size_t>(per_qp));
    for (std::size_t q = 0; q < kQps; ++q) {
      std::uint8_t* src = (op == IBV_WR_RDMA_READ ? bufb : bufa) + q * kBytes;
      for (std::size_t k = 0; k < kBytes / 2; ++k) src[k] = static_cast<std::uint8_t>(rng());
    }
    for (std::size_t q = 0; q < kQps; ++q) {
      for (int m = 0; m < per_qp; ++m) {
        const std::size_t off = q * kBytes + static_cast<std::size_t>(m) * len;
        if (op == IBV_WR_SEND) {
          ibv_sge rs{reinterpret_cast<std::uint64_t>(bufb + off + kBytes / 2), len, mrb->lkey};
          ibv_recv_wr rw{};
          rw.wr_id = static_cast<std::uint64_t>(m);
          rw.sg_list = &rs;
          rw.num_sge = 1;
          ibv_recv_wr* bad = nullptr;
          ASSERT_EQ(qps_b[q]->post_recv(&rw, &bad), 0);
        }
        // WRITE/SEND: A's source half to B's target half; READ: B's source
        // half into A's target half.
        std::uint8_t* local = bufa + off + (op == IBV_WR_RDMA_READ ? kBytes / 2 : 0);
        std::uint8_t* remote = bufb + off + (op == IBV_WR_RDMA_READ ? 0 : kBytes / 2);
        ibv_sge sge{reinterpret_cast<std::uint64_t>(local), len, mra->lkey};
        ibv_send_wr wr{};
        wr.wr_id = q << 32 | static_cast<std::uint64_t>(m);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = op;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(remote);
        wr.wr.rdma.rkey = mrb->rkey;
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(qps_a[q]->post_send(&wr, &bad), 0);
      }
    }
    const std::size_t expected = kQps * static_cast<std::size_t>(per_qp);
    std::vector<ibv_wc> got;
    std::vector<ibv_wc> received;
    ibv_wc wc[64];
    pair->run_until(
        [&] {
          for (int k; (k = cqa->poll(64, wc)) > 0;) got.insert(got.end(), wc, wc + k);
          for (int k; op == IBV_WR_SEND && (k = cqb->poll(64, wc)) > 0;) received.insert(received.end(), wc, wc + k);
          return got.size() >= expected && (op != IBV_WR_SEND || received.size() >= expected);
        },
        60'000'000'000ull);
    ASSERT_EQ(got.size(), expected);
    std::vector<std::uint64_t> next(kQps, 0);
    for (const ibv_wc& c : got) {
      ASSERT_EQ(c.status, IBV_WC_SUCCESS) << wc_status_str(c.status);
      const std::size_t q = c.wr_id >> 32;
      ASSERT_LT(q, kQps);
      EXPECT_EQ(c.qp_num, qps_a[q]->qp_num());
      EXPECT_EQ(c.wr_id & 0xffffffff, next[q]++) << "QP " << q << ": completions out of order";
    }
    if (op == IBV_WR_SEND) {
      ASSERT_EQ(received.size(), expected);
      for (const ibv_wc& c : received) EXPECT_EQ(c.byte_len, len);
    }
    for (std::size_t q = 0; q < kQps; ++q) {
      const std::uint8_t* a = bufa + q * kBytes;
      const std::uint8_t* b = bufb + q * kBytes;
      if (op == IBV_WR_RDMA_READ) {
        EXPECT_EQ(std::memcmp(a + kBytes / 2, b, kBytes / 2), 0) << "QP " << q;
      } else {
        EXPECT_EQ(std::memcmp(a, b + kBytes / 2, kBytes / 2), 0) << "QP " << q;
      }
    }
  }
};

TEST(DpdkQueues, QpsSpreadOverEnginesAndPacketsReachTheirEngine) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Queued d("mq");
  ASSERT_NE(d.pair, nullptr);
  ASSERT_EQ(internal::engine_count(*d.pair->a), 2u);
  // Placed on the least loaded engine: two QPs each.
  EXPECT_EQ(internal::engine_of(*d.pair->a, 0).qps().size(), 2u);
  EXPECT_EQ(internal::engine_of(*d.pair->a, 1).qps().size(), 2u);
  for (std::size_t q = 0; q < Queued::kQps; ++q) {
    EXPECT_NE(Queued::engine_of(*d.pair->a, d.qps_a[q]), Queued::engine_of(*d.pair->b, d.qps_b[q]));
  }
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_SEND, IBV_WR_RDMA_READ}) {
    SCOPED_TRACE(op);
    d.transfer(op, 64, rng);
  }
  // Every RoCE packet arrived on the queue of the engine that does not serve
  // its QP: each was handed over once, and nothing was lost or unknown.
  for (Context* ctx : {d.pair->a.get(), d.pair->b.get()}) {
    const std::uint64_t rx = d.total(*ctx, engine::EngineCounter::rx_frames);
    EXPECT_GT(rx, 1000u);
    EXPECT_EQ(d.total(*ctx, engine::EngineCounter::rx_handed_over), rx);
    EXPECT_EQ(d.total(*ctx, engine::EngineCounter::rx_handed_in), rx);
    EXPECT_EQ(d.total(*ctx, engine::EngineCounter::rx_unknown_qp), 0u);
    EXPECT_EQ(d.total(*ctx, engine::EngineCounter::rx_handover_full), 0u);
    // Each engine sent on its own queue.
    EXPECT_GT(internal::engine_of(*ctx, 0).counter(engine::EngineCounter::tx_frames), 0u);
    EXPECT_GT(internal::engine_of(*ctx, 1).counter(engine::EngineCounter::tx_frames), 0u);
  }
}

TEST(DpdkQueues, WorkerThreadsServeTheirQueuesWhileControlCallsHoldThem) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Queued d("mqw");
  ASSERT_NE(d.pair, nullptr);
  EXPECT_EQ(d.pair->a->start_workers({0}), EINVAL) << "one CPU for two engines";
  EXPECT_NE(d.pair->a->last_error().find("one CPU per engine"), std::string::npos);
  ASSERT_EQ(d.pair->a->start_workers({0, 1}), 0);
  EXPECT_EQ(d.pair->a->start_workers({0, 1}), EBUSY);
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  d.transfer(IBV_WR_RDMA_WRITE, 16, rng);
  // Control calls while the workers run: a region registered now is usable
  // by every engine at once, a QP on a named engine, one on an engine that
  // does not exist.
  std::vector<std::uint8_t> extra(65536, 0x5a);
  MemoryRegion* mr = d.pda->reg_mr(extra.data(), extra.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << d.pair->a->last_error();
  QpInitAttr init;
  init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
  init.send_cq = init.recv_cq = d.cqa;
  init.worker = 2;
  EXPECT_EQ(d.pda->create_qp(init), nullptr);
  EXPECT_NE(d.pair->a->last_error().find("worker 2 does not exist"), std::string::npos) << d.pair->a->last_error();
  for (std::size_t q = 0; q < Queued::kQps; ++q) {
    ASSERT_EQ(post_rdma(d.qps_a[q], IBV_WR_RDMA_WRITE, extra.data(), 65536, mr->lkey, d.bufb + q * Queued::kBytes,
                        d.mrb->rkey, q << 32),
              0);
  }
  std::size_t done = 0;
  ibv_wc wc[8];
  d.pair->run_until([&] {
    for (int k; (k = d.cqa->poll(8, wc)) > 0;) {
      for (int i = 0; i < k; ++i) EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS) << wc_status_str(wc[i].status);
      done += static_cast<std::size_t>(k);
    }
    return done >= Queued::kQps;
  });
  ASSERT_EQ(done, Queued::kQps);
  for (std::size_t q = 0; q < Queued::kQps; ++q) {
    EXPECT_EQ(std::memcmp(d.bufb + q * Queued::kBytes, extra.data(), extra.size()), 0) << "QP " << q;
  }
  d.transfer(IBV_WR_RDMA_READ, 16, rng);
  d.pair->a->stop_workers();
  EXPECT_EQ(d.pda->dereg_mr(mr), 0);
  EXPECT_EQ(d.total(*d.pair->b, engine::EngineCounter::rx_unknown_qp), 0u);
  EXPECT_GT(d.total(*d.pair->a, engine::EngineCounter::rx_handed_in), 0u);
}

// The answer of this process's telemetry to `command`.
std::string telemetry(const std::string& command) {
  return telemetry_query(EalEnvironment::telemetry_socket(), command);
}

TEST(DpdkTelemetry, CountersAreReadableAtRunTime) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Devices d("tel");
  ASSERT_NE(d.pair, nullptr);
  std::memset(d.bufa, 7, 4096);
  ASSERT_EQ(d.write(4096), 1u);
  const std::string devices = telemetry("/uroce/devices");
  EXPECT_NE(devices.find("\"tel-a\""), std::string::npos) << devices;
  // Our devices are the last two exposed.
  const auto a_index = devices.find("tel-a");
  ASSERT_NE(a_index, std::string::npos);
  const std::string index = devices.substr(devices.rfind('"', devices.rfind('"', a_index - 2) - 1) + 1);
  const std::string dev = index.substr(0, index.find('"'));
  const std::string qps = telemetry("/uroce/qps," + dev);
  EXPECT_NE(qps.find(std::to_string(d.qa->qp_num())), std::string::npos) << qps;
  const std::string qp = telemetry("/uroce/qp," + dev + "," + std::to_string(d.qa->qp_num()));
  EXPECT_NE(qp.find("\"state\":\"RTS\""), std::string::npos) << qp;
  EXPECT_NE(qp.find("\"tx_packets\":1,"), std::string::npos) << qp;
  EXPECT_NE(qp.find("\"tx_bytes\":4096"), std::string::npos) << qp;
  const std::string engine = telemetry("/uroce/engine," + dev);
  EXPECT_NE(engine.find("\"drop_icrc_mismatch\":0"), std::string::npos) << engine;
  EXPECT_NE(telemetry("/uroce/qp," + dev + ",999999").find("null"), std::string::npos) << "an unknown QP";
}

// Over net_ring with DCQCN on: each QP's rate state is in telemetry and in
// the API (net_ring marks nothing, so the rate stays at line rate, and the
// packets leave ECN-capable).
TEST(DpdkTelemetry, DcqcnStateOfEachQpIsVisible) {
  ASSERT_EQ(EalEnvironment::error(), "");
  cc::DcqcnParams params;
  params.line_rate_bps = 25e9;
  params.start_rate_fraction = 1;  // from the first packet at line rate, not at the default eighth
  // No alpha decay and no rate increase within the test: the CNP's cut
  // below stays as it was made.
  params.alpha_period_ns = params.rate_period_ns = 100'000'000'000ull;
  Devices d("dcq", false, &params);
  ASSERT_NE(d.pair, nullptr);
  ASSERT_EQ(d.write(65536), 1u);
  const QueuePair::CongestionState cs = d.qa->congestion();
  EXPECT_TRUE(cs.enabled);
  EXPECT_EQ(cs.rate_bps, 25e9);
  EXPECT_EQ(cs.cnps, 0u);
  EXPECT_EQ(d.qb->counter("ce_marked_received"), 0u);
  const std::string devices = telemetry("/uroce/devices");
  const auto a_index = devices.find("dcq-a");
  ASSERT_NE(a_index, std::string::npos) << devices;
  const std::string index = devices.substr(devices.rfind('"', devices.rfind('"', a_index - 2) - 1) + 1);
  const std::string dev = index.substr(0, index.find('"'));
  const std::string qp = telemetry("/uroce/qp," + dev + "," + std::to_string(d.qa->qp_num()));
  EXPECT_NE(qp.find("\"dcqcn_active\":1"), std::string::npos) << qp;
  EXPECT_NE(qp.find("\"dcqcn_rate_mbps\":25000"), std::string::npos) << qp;
  EXPECT_NE(qp.find("\"dcqcn_alpha_ppm\":"), std::string::npos) << qp;

  // A CNP for A's QP, sent into the ring from B's port as a switch-marked
  // path's receiver would: A's rate is cut (alpha starts at 1: to half), and
  // the API, the counters and telemetry all show it.
  wire::Ipv4Addr a_ip, b_ip;
  std::copy(d.pair->a->gid().raw + 12, d.pair->a->gid().raw + 16, a_ip.begin());
  std::copy(d.pair->b->gid().raw + 12, d.pair->b->gid().raw + 16, b_ip.begin());
  wire::FrameSpec spec = cnp_spec(d.qa->qp_num(), b_ip, a_ip);
  spec.eth_dst = d.pair->io_a->mac();
  spec.eth_src = d.pair->io_b->mac();
  const std::vector<std::uint8_t> bytes = cnp_frame(spec);
  wire::TxFrame cnp;
  ASSERT_EQ(d.pair->io_b->tx_heads(&cnp.head, 1), 1);
  ASSERT_LE(bytes.size(), cnp.head.room);
  std::copy(bytes.begin(), bytes.end(), cnp.head.data);
  cnp.head_len = static_cast<std::uint16_t>(bytes.size());
  ASSERT_EQ(d.pair->io_b->tx_burst(&cnp, 1), 1);
  for (int i = 0; i < 1000 && d.qa->congestion().cnps == 0; ++i) d.pair->step();
  const QueuePair::CongestionState cut = d.qa->congestion();
  EXPECT_EQ(cut.cnps, 1u);
  EXPECT_EQ(cut.target_bps, 25e9);
  EXPECT_EQ(cut.rate_bps, 12.5e9) << "cut by alpha / 2, alpha = 1";
  EXPECT_EQ(d.qa->counter("cnps_received"), 1u);
  const std::string after = telemetry("/uroce/qp," + dev + "," + std::to_string(d.qa->qp_num()));
  EXPECT_NE(after.find("\"cnps_received\":1"), std::string::npos) << after;
  EXPECT_NE(after.find("\"dcqcn_target_mbps\":25000"), std::string::npos) << after;
  EXPECT_NE(after.find("\"dcqcn_rate_mbps\":12500"), std::string::npos) << after;
}

TEST(DpdkArp, APortAnswersForItsAddressAndTheOtherLearnsIt) {
  ASSERT_EQ(EalEnvironment::error(), "");
  std::uint16_t ida = 0;
  std::uint16_t idb = 0;
  std::string error;
  ASSERT_TRUE(dpdk::create_ring_pair("arp", ida, idb, error)) << error;
  dpdk::PortConfig cfg;
  cfg.mbufs = 1023;
  cfg.port_id = ida;
  auto pa = dpdk::Port::open(cfg, error);
  cfg.port_id = idb;
  auto pb = dpdk::Port::open(cfg, error);
  ASSERT_TRUE(pa && pb) << error;
  dpdk::PortIo a(*pa, 0, {10, 97, 0, 1});
  dpdk::PortIo b(*pb, 0, {10, 97, 0, 2});
  // A answers from its own poll loop while B waits for the reply.
  std::atomic<bool> stop{false};
  std::thread responder([&] {
    std::array<engine::RxFrame, 32> frames;
    while (!stop) {
      const std::uint16_t n = a.rx_burst(frames.data(), 32);
      a.rx_release(frames.data(), n);
    }
  });
  std::uint8_t mac[6] = {};
  const bool ok = resolve_on(b, a.gid(), mac);
  stop = true;
  responder.join();
  ASSERT_TRUE(ok) << "no ARP reply";
  EXPECT_EQ(std::memcmp(mac, a.mac().data(), 6), 0);
  EXPECT_EQ(a.counters().arp_requests_answered, 1u);
  EXPECT_EQ(b.counters().arp_replies_learned, 1u);
  // Nobody owns 10.97.0.9: resolution gives up after its second.
  ibv_gid nobody = a.gid();
  nobody.raw[15] = 9;
  EXPECT_FALSE(resolve_on(b, nobody, mac));
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new uroce::test::EalEnvironment({.name = "uroce-test", .memory_mb = "768"}));
  return RUN_ALL_TESTS();
}
