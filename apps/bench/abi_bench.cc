// What the libibverbs layer costs: the same loopback test (two RC QPs of one
// device on net_ring0, the engine on a worker thread, this thread posting
// and polling) through uroce's API (uroce-bench-abi-uroce) and through
// lib/ibverbs's libibverbs.so.1 with rdma-core's header
// (uroce-bench-abi-verbs), built from this one file; the worker on CPU 1,
// this thread on CPU 0 (EAL's -l 0). It measures
//   latency: 8-byte SEND ping-pong between the QPs, half the round trip,
//     and an 8-byte RDMA WRITE ping-pong polled in memory (ib_write_lat's way);
//   bandwidth: 64 KiB RDMA WRITEs, 16 outstanding.
// tools/bench-abi.sh runs the two in turns and prints their ratio.
//
//   uroce-bench-abi-{uroce,verbs} [EAL args] [-- --json FILE --seconds S]
//   (default EAL: --no-huge --no-shconf --no-pci -l 0 -m 512 --vdev=net_ring0)
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef UROCE_BENCH_VERBS
#include "device/device.h"
#include "dpdk/eal.h"
#include "uroce/verbs.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kBuf = 4u << 20;
constexpr std::uint32_t kBig = 65536;
constexpr int kDepth = 16;
// The worker's CPU; this thread runs on EAL's first lcore (-l 0): one core
// each, the same in both builds.
constexpr int kWorkerCpu = 1;

// The data path both builds share: post and poll on QP/CQ `i` (0 or 1).
#ifdef UROCE_BENCH_VERBS
constexpr const char* kApi = "verbs";
struct Api {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq[2] = {};
  ibv_qp* qp[2] = {};
  ibv_mr* mr = nullptr;
  std::uint8_t* buf = nullptr;

  std::string open(const std::string& eal) {
    setenv("UROCE_EAL", eal.c_str(), 0);
    setenv("UROCE_IP", "10.0.0.1/24", 0);
    setenv("UROCE_WORKERS", std::to_string(kWorkerCpu).c_str(), 0);
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n < 1) return "no device (is UROCE_EAL right?)";
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (ctx == nullptr) return "ibv_open_device failed";
    pd = ibv_alloc_pd(ctx);
    buf = static_cast<std::uint8_t*>(aligned_alloc(4096, kBuf));
    mr = ibv_reg_mr(pd, buf, kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    for (int i = 0; i < 2; ++i) {
      cq[i] = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
      ibv_qp_init_attr a{};
      a.send_cq = a.recv_cq = cq[i];
      a.qp_type = IBV_QPT_RC;
      a.cap = {64, 64, 1, 1, 0};
      qp[i] = ibv_create_qp(pd, &a);
      if (qp[i] == nullptr) return "ibv_create_qp failed";
    }
    return "";
  }
  int modify(int i, ibv_qp_attr& a, int mask) { return ibv_modify_qp(qp[i], &a, mask); }
  std::uint32_t qpn(int i) const { return qp[i]->qp_num; }
  int gid(ibv_gid& g) { return ibv_query_gid(ctx, 1, 1, &g); }
  std::uint32_t lkey() const { return mr->lkey; }
  std::uint32_t rkey() const { return mr->rkey; }
  int post_send(int i, ibv_send_wr* wr) {
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp[i], wr, &bad);
  }
  int post_recv(int i, ibv_recv_wr* wr) {
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp[i], wr, &bad);
  }
  int poll(int i, int n, ibv_wc* wc) { return ibv_poll_cq(cq[i], n, wc); }
};
#else
constexpr const char* kApi = "uroce";
struct Api {
  std::unique_ptr<uroce::device::Device> dev;
  uroce::ProtectionDomain* pd = nullptr;
  uroce::CompletionQueue* cq[2] = {};
  uroce::QueuePair* qp[2] = {};
  uroce::MemoryRegion* mr = nullptr;
  std::uint8_t* buf = nullptr;

  std::string open(const std::string& eal) {
    std::vector<std::string> args = {"uroce-bench-abi"};
    for (std::size_t at = 0; at < eal.size();) {
      const std::size_t end = std::min(eal.find(' ', at), eal.size());
      if (end > at) args.push_back(eal.substr(at, end - at));
      at = end + 1;
    }
    if (std::string e = uroce::dpdk::eal_init(args); !e.empty()) return e;
    std::string error;
    dev = uroce::device::Device::open(0, {10, 0, 0, 1}, "bench", error);
    if (!dev) return error;
    uroce::Context& c = *dev->ctx;
    if (c.start_worker(kWorkerCpu) != 0) return c.last_error();
    pd = c.alloc_pd();
    buf = static_cast<std::uint8_t*>(aligned_alloc(4096, kBuf));
    mr = pd->reg_mr(buf, kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    for (int i = 0; i < 2; ++i) {
      cq[i] = c.create_cq(256);
      uroce::QpInitAttr a;
      a.send_cq = a.recv_cq = cq[i];
      a.cap = {64, 64, 1, 1, 0};
      qp[i] = pd->create_qp(a);
      if (qp[i] == nullptr) return c.last_error();
    }
    return "";
  }
  int modify(int i, ibv_qp_attr& a, int mask) { return qp[i]->modify(a, mask); }
  std::uint32_t qpn(int i) const { return qp[i]->qp_num(); }
  int gid(ibv_gid& g) { return dev->ctx->query_gid(1, g); }
  std::uint32_t lkey() const { return mr->lkey; }
  std::uint32_t rkey() const { return mr->rkey; }
  int post_send(int i, ibv_send_wr* wr) {
    ibv_send_wr* bad = nullptr;
    return qp[i]->post_send(wr, &bad);
  }
  int post_recv(int i, ibv_recv_wr* wr) {
    ibv_recv_wr* bad = nullptr;
    return qp[i]->post_recv(wr, &bad);
  }
  int poll(int i, int n, ibv_wc* wc) { return cq[i]->poll(n, wc); }
};
#endif

bool connect(Api& api) {
  ibv_gid g{};
  if (api.gid(g) != 0) return false;
  for (int i = 0; i < 2; ++i) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (api.modify(i, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) return false;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = api.qpn(1 - i);
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = g;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (api.modify(i, a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
      return false;
    }
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 100;
    a.max_rd_atomic = 1;
    if (api.modify(i, a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
      return false;
    }
  }
  return true;
}

// Half round trips of an 8-byte SEND ping-pong, in microseconds, sorted.
std::vector<double> ping_pong(Api& api, double seconds) {
  ibv_sge rsge[2] = {{reinterpret_cast<std::uintptr_t>(api.buf), 64, api.lkey()},
                     {reinterpret_cast<std::uintptr_t>(api.buf + 64), 64, api.lkey()}};
  ibv_sge ssge = {reinterpret_cast<std::uintptr_t>(api.buf + 128), 8, api.lkey()};
  std::vector<double> half;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  for (int i = 0; i < 2; ++i) {
    ibv_recv_wr r{};
    r.sg_list = &rsge[i];
    r.num_sge = 1;
    api.post_recv(i, &r);
  }
  ibv_wc wc;
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    for (int from = 0; from < 2; ++from) {
      const int to = 1 - from;
      ibv_send_wr s{};
      s.sg_list = &ssge;
      s.num_sge = 1;
      s.opcode = IBV_WR_SEND;
      s.send_flags = IBV_SEND_SIGNALED;
      if (api.post_send(from, &s) != 0) return {};
      // The receive at `to`, then the send's own completion at `from`
      // (one CQ per QP holds both kinds).
      bool got_recv = false, got_send = false;
      while (!got_recv || !got_send) {
        for (int q : {to, from}) {
          if (api.poll(q, 1, &wc) == 1) {
            if (wc.status != IBV_WC_SUCCESS) return {};
            (wc.opcode == IBV_WC_RECV ? got_recv : got_send) = true;
            if (wc.opcode == IBV_WC_RECV) {
              ibv_recv_wr r{};
              r.sg_list = &rsge[q];
              r.num_sge = 1;
              api.post_recv(q, &r);
            }
          }
        }
      }
    }
    half.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
  }
  std::sort(half.begin(), half.end());
  return half;
}

// Half round trips of an 8-byte RDMA WRITE ping-pong, as ib_write_lat
// measures it: each QP writes a count into a word the other side polls in
// memory; one WRITE in 16 is signaled (the others' slots come back with it).
std::vector<double> write_ping_pong(Api& api, double seconds) {
  volatile std::uint64_t* word[2] = {reinterpret_cast<volatile std::uint64_t*>(api.buf + 256),
                                     reinterpret_cast<volatile std::uint64_t*>(api.buf + 320)};
  std::uint64_t* source[2] = {reinterpret_cast<std::uint64_t*>(api.buf + 384),
                              reinterpret_cast<std::uint64_t*>(api.buf + 448)};
  *word[0] = 0;
  *word[1] = 0;
  std::vector<double> half;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  ibv_wc wc[16];
  for (std::uint64_t v = 1; Clock::now() < end; ++v) {
    const auto t0 = Clock::now();
    for (int from = 0; from < 2; ++from) {
      const int to = 1 - from;
      *source[from] = v;
      ibv_sge sge = {reinterpret_cast<std::uintptr_t>(source[from]), 8, api.lkey()};
      ibv_send_wr w{};
      w.sg_list = &sge;
      w.num_sge = 1;
      w.opcode = IBV_WR_RDMA_WRITE;
      w.send_flags = v % 16 == 0 ? IBV_SEND_SIGNALED : 0;
      w.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(word[to]);
      w.wr.rdma.rkey = api.rkey();
      if (api.post_send(from, &w) != 0) return {};
      while (*word[to] != v) {
        const int n = api.poll(from, 16, wc);
        for (int i = 0; i < n; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS) return {};
        }
      }
    }
    half.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
  }
  // The last signaled WRITEs' completions, so the queue is empty for what follows.
  for (auto until = Clock::now() + std::chrono::milliseconds(100); Clock::now() < until;) {
    api.poll(0, 16, wc);
    api.poll(1, 16, wc);
  }
  std::sort(half.begin(), half.end());
  return half;
}

// Gb/s of 64 KiB WRITEs from QP 0 into the region, kDepth outstanding.
double write_bandwidth(Api& api, double seconds) {
  ibv_sge sge = {reinterpret_cast<std::uintptr_t>(api.buf), kBig, api.lkey()};
  ibv_send_wr w{};
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(api.buf + kBuf / 2);
  w.wr.rdma.rkey = api.rkey();
  int outstanding = 0;
  std::uint64_t done = 0;
  ibv_wc wc[16];
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  while (Clock::now() < end || outstanding > 0) {
    while (outstanding < kDepth && Clock::now() < end) {
      if (api.post_send(0, &w) != 0) return 0;
      ++outstanding;
    }
    const int n = api.poll(0, 16, wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) return 0;
    }
    outstanding -= n;
    done += static_cast<std::uint64_t>(n);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(done) * kBig * 8 / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string eal;
  std::string json;
  double seconds = 2;
  int i = 1;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (!eal.empty()) eal += ' ';
    eal += argv[i];
  }
  for (++i; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [EAL args] [-- --json FILE --seconds S]\n", argv[0]);
      return 2;
    }
  }
  if (eal.empty()) eal = "--no-huge --no-shconf --no-pci -l 0 -m 512 --vdev=net_ring0 --log-level=lib.eal:error";
  Api api;
  if (const std::string e = api.open(eal); !e.empty()) {
    std::fprintf(stderr, "uroce-bench-abi: %s\n", e.c_str());
    return 1;
  }
  if (!connect(api)) {
    std::fprintf(stderr, "uroce-bench-abi: connecting the QPs failed\n");
    return 1;
  }
  const std::vector<double> lat = ping_pong(api, seconds);
  const std::vector<double> wlat = write_ping_pong(api, seconds);
  const double gbps = write_bandwidth(api, seconds);
  if (lat.empty() || wlat.empty() || gbps == 0) {
    std::fprintf(stderr, "uroce-bench-abi: a work request failed\n");
    return 1;
  }
  const double p50 = lat[lat.size() / 2];
  const double p99 = lat[lat.size() * 99 / 100];
  const double wp50 = wlat[wlat.size() / 2];
  std::printf("api %s: 8 B SEND half round trip p50 %.3f us, p99 %.3f us (%zu round trips); "
              "8 B WRITE half round trip p50 %.3f us; 64 KiB WRITE %.2f Gb/s\n",
              kApi, p50, p99, lat.size(), wp50, gbps);
  if (!json.empty()) {
    if (FILE* f = std::fopen(json.c_str(), "a")) {
      std::fprintf(f,
                   "{\"api\":\"%s\",\"lat_p50_us\":%.4f,\"lat_p99_us\":%.4f,\"round_trips\":%zu,"
                   "\"write_lat_p50_us\":%.4f,\"write_64k_gbps\":%.3f}\n",
                   kApi, p50, p99, lat.size(), wp50, gbps);
      std::fclose(f);
    }
  }
  std::fflush(stdout);
  std::_Exit(0);  // no teardown: the worker keeps the port until the process goes
}
