#include "perf/remote.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <vector>

#include "common/counters.h"
#include "common/oob.h"
#include "dpdk/device.h"
#include "dpdk/eal.h"
#include "perf/message.h"
#include "perf/pattern.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"

namespace uroce::perf {
namespace {

using Clock = std::chrono::steady_clock;

// What each side tells the other: the test, so both run the same one, and
// where its QP and buffer are.
struct Hello {
  char op[8] = {};
  std::uint32_t size = 0;
  std::uint64_t iters = 0;
  std::uint32_t depth = 0;
  std::uint32_t mtu = 0;
  std::uint32_t qps = 1;
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  std::uint32_t rkey = 0;
  std::uint64_t vaddr = 0;
  ibv_gid gid{};
};

constexpr std::size_t kHelloBytes = 160;

std::string encode(const Hello& h) {
  char gid[33];
  for (int i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", h.gid.raw[i]);
  char buf[kHelloBytes] = {};
  std::snprintf(buf, sizeof buf, "uroce-perf2:%s:%u:%llu:%u:%u:%u:%06x:%06x:%08x:%016llx:%s", h.op, h.size,
                static_cast<unsigned long long>(h.iters), h.depth, h.mtu, h.qps, h.qpn, h.psn, h.rkey,
                static_cast<unsigned long long>(h.vaddr), gid);
  return std::string(buf, sizeof buf);
}

bool decode(const char* buf, Hello& h) {
  char gid[33] = {};
  unsigned long long iters = 0;
  unsigned long long vaddr = 0;
  if (std::sscanf(buf, "uroce-perf2:%7[a-z]:%u:%llu:%u:%u:%u:%x:%x:%x:%llx:%32s", h.op, &h.size, &iters, &h.depth,
                  &h.mtu, &h.qps, &h.qpn, &h.psn, &h.rkey, &vaddr, gid) != 11) {
    return false;
  }
  h.iters = iters;
  h.vaddr = vaddr;
  for (int i = 0; i < 16; ++i) {
    unsigned b = 0;
    if (std::sscanf(gid + 2 * i, "%2x", &b) != 1) return false;
    h.gid.raw[i] = static_cast<std::uint8_t>(b);
  }
  return true;
}

// With several QPs, the QPN and first PSN of each, after the Hello: one
// fixed 16-byte line per QP.
constexpr std::size_t kQpLineBytes = 16;

std::string encode_qps(const std::vector<QueuePair*>& qps, const std::vector<std::uint32_t>& psns) {
  std::string out;
  for (std::size_t i = 0; i < qps.size(); ++i) {
    char line[32];
    std::snprintf(line, sizeof line, "%06x:%06x", qps[i]->qp_num() & 0xffffff, psns[i] & 0xffffff);
    std::string l(line);
    l.resize(kQpLineBytes - 1, ' ');
    out += l + '\n';
  }
  return out;
}

bool decode_qps(const std::string& in, std::size_t n, std::vector<std::uint32_t>& qpns, std::vector<std::uint32_t>& psns) {
  qpns.resize(n);
  psns.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (std::sscanf(in.c_str() + i * kQpLineBytes, "%6x:%6x", &qpns[i], &psns[i]) != 2) return false;
  }
  return true;
}

ibv_mtu mtu_enum(std::uint32_t b) {
  return b == 256 ? IBV_MTU_256 : b == 512 ? IBV_MTU_512 : b == 1024 ? IBV_MTU_1024 : b == 2048 ? IBV_MTU_2048 : IBV_MTU_4096;
}

}  // namespace

int run_remote(const RemoteOptions& o) {
  std::string error;
  auto device = dpdk::Device::open(o.port_id, o.ip, "uroce-perf", error, 1, o.dcqcn);
  if (!device) {
    std::fprintf(stderr, "uroce-perf: %s\n", error.c_str());
    return 1;
  }
  if (const std::string w = dpdk::no_huge_warning("uroce-perf"); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  auto& ctx = device->ctx;
  dpdk::PortIo& io = *device->io;
  ProtectionDomain* pd = ctx->alloc_pd();
  const bool server = o.server.empty();
  const bool send = o.op == "send";
  const bool read = o.op == "read";
  const bool atomic = o.op == "atomic";
  const std::size_t slot = (o.size + 63) & ~std::size_t{63};
  const std::size_t bytes = slot * o.depth + 4096;
  auto* buf = static_cast<std::uint8_t*>(ctx->alloc_buffer(bytes));
  const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  MemoryRegion* mr = buf ? pd->reg_mr(buf, bytes, all) : nullptr;
  CompletionQueue* cq = ctx->create_cq(static_cast<int>(2 * o.depth + 16));
  // Message slot s goes to QP s mod qps (as with --ring).
  QpInitAttr init;
  init.send_cq = init.recv_cq = cq;
  const std::uint32_t per_qp = o.depth / o.qps + 2;
  init.cap = ibv_qp_cap{per_qp, per_qp, 1, 1, 0};
  std::vector<QueuePair*> qps;
  for (std::uint32_t q = 0; q < o.qps && cq != nullptr; ++q) {
    QueuePair* one = pd->create_qp(init);
    if (one == nullptr) break;
    qps.push_back(one);
  }
  if (mr == nullptr || cq == nullptr || qps.size() != o.qps) {
    std::fprintf(stderr, "uroce-perf: set-up failed: %s\n", ctx->last_error().c_str());
    return 1;
  }
  QueuePair* qp = qps[0];
  auto qp_of_slot = [&](std::uint64_t s) { return qps[s % o.qps]; };
  auto sum = [&](const char* counter) {
    std::uint64_t n = 0;
    for (QueuePair* q : qps) n += q->counter(counter);
    return n;
  };
  const Pattern pattern(o.size);
  // READ sources are known to both sides: slot s holds pattern s.
  if (server && read) {
    for (std::uint32_t s = 0; s < o.depth; ++s) pattern.fill(buf + s * slot, s);
  }
  std::uint64_t atomic_start = 0;
  std::memcpy(buf + bytes - 64, &atomic_start, 8);

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = all;
  for (QueuePair* q : qps) q->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

  std::uint64_t recv_posted = 0;
  // A receive buffer (slot) is posted again once the message it held has
  // been checked: over several QPs, receives complete out of order.
  std::vector<bool> recv_busy(o.depth);
  auto post_recv = [&]() {
    const std::uint32_t s = static_cast<std::uint32_t>(recv_posted % o.depth);
    if (recv_busy[s]) return true;
    recv_busy[s] = true;
    ibv_sge sge{reinterpret_cast<std::uint64_t>(buf + s * slot), o.size, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = recv_posted++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    // Each QP takes its messages in order, so receive k meets message k.
    return qp_of_slot(s)->post_recv(&wr, &bad) == 0;
  };
  if (server && send) {
    for (std::uint32_t i = 0; i < o.depth; ++i) post_recv();
  }

  Hello mine;
  std::snprintf(mine.op, sizeof mine.op, "%s", o.op.c_str());
  mine.size = o.size;
  mine.iters = o.iters;
  mine.depth = o.depth;
  mine.mtu = o.mtu;
  mine.qps = o.qps;
  std::vector<std::uint32_t> my_psns;
  std::random_device rd;
  for (std::uint32_t q = 0; q < o.qps; ++q) my_psns.push_back(static_cast<std::uint32_t>(rd()) & 0xffffff);
  mine.qpn = qp->qp_num();
  mine.psn = my_psns[0];
  mine.rkey = mr->rkey;
  mine.vaddr = reinterpret_cast<std::uint64_t>(buf);
  mine.gid = ctx->gid();
  const std::function<void()> idle = [&] { ctx->progress(); };
  Hello peer;
  char in[kHelloBytes];
  int fd = server ? oob::accept_one(o.tcp_port, error, idle) : oob::connect_to(o.server, o.tcp_port, error);
  if (fd < 0) {
    std::fprintf(stderr, "uroce-perf: %s\n", error.c_str());
    return 1;
  }
  const int fd_for_read = fd;
  const std::string out = encode(mine) + (o.qps > 1 ? encode_qps(qps, my_psns) : std::string());
  std::vector<std::uint32_t> peer_qpns, peer_psns;
  auto read_peer = [&] {
    if (!oob::read_full(fd_for_read, in, sizeof in, idle) || !decode(in, peer)) return false;
    if (peer.qps != o.qps) return true;  // reported below as a different test
    std::string list(kQpLineBytes * o.qps, '\0');
    if (o.qps > 1) return oob::read_full(fd_for_read, list.data(), list.size(), idle) && decode_qps(list, o.qps, peer_qpns, peer_psns);
    peer_qpns = {peer.qpn};
    peer_psns = {peer.psn};
    return true;
  };

  ConnectParams cp;
  cp.mtu = mtu_enum(o.mtu);
  auto connect_qps = [&] {
    for (std::uint32_t q = 0; q < o.qps; ++q) {
      if (connect_rc(qps[q], peer.gid, peer_qpns[q], my_psns[q], peer_psns[q], cp) != 0) return false;
    }
    return true;
  };
  bool ok = true;
  if (server) {
    ok = read_peer();
    if (ok && (std::string(peer.op) != o.op || peer.size != o.size || peer.iters != o.iters || peer.depth != o.depth ||
               peer.mtu != o.mtu || peer.qps != o.qps)) {
      std::fprintf(stderr,
                   "uroce-perf: the client runs %s -s %u -n %llu -t %u -m %u -q %u; start both sides with the same test\n",
                   peer.op, peer.size, static_cast<unsigned long long>(peer.iters), peer.depth, peer.mtu, peer.qps);
      close(fd);
      return 2;
    }
    ok = ok && connect_qps() && oob::write_full(fd, out.data(), out.size());
  } else {
    ok = oob::write_full(fd, out.data(), out.size()) && read_peer() && peer.qps == o.qps && connect_qps();
  }
  if (!ok) {
    const std::string why = ctx->last_error();
    std::fprintf(stderr, "uroce-perf: the exchange with the peer failed: %s\n",
                 !why.empty() ? why.c_str()
                              : "the peer hung up (does it run the same test and uroce-perf version? see its output)");
    close(fd);
    return 1;
  }

  bool verified = true;
  if (server) {
    // The server serves: it keeps its engine running until the client says
    // it is done, receiving SENDs and checking them.
    std::uint64_t received = 0;
    char done[8];
    std::function<void()> serve = [&] {
      ctx->progress();
      ibv_wc wc[32];
      for (int k; (k = cq->poll(32, wc)) > 0;) {
        for (int i = 0; i < k; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS) {
            std::fprintf(stderr, "uroce-perf: receive failed: %s\n", wc_status_str(wc[i].status));
            verified = false;
            continue;
          }
          const auto s = static_cast<std::uint32_t>(wc[i].wr_id % o.depth);
          if (o.verify && !pattern.matches(buf + s * slot, wc[i].wr_id)) verified = false;
          ++received;
          recv_busy[s] = false;
          while (!recv_busy[recv_posted % o.depth] && post_recv()) {
          }
        }
      }
    };
    ok = oob::read_full(fd, done, sizeof done, serve);
    if (o.verify && o.op == "write") {
      // Each slot holds the last message written into it.
      for (std::uint32_t s = 0; s < o.depth && s < o.iters; ++s) {
        const std::uint64_t last = (o.iters - 1 - s) / o.depth * o.depth + s;
        if (!pattern.matches(buf + s * slot, last)) verified = false;
      }
    }
    if (o.verify && atomic) {
      std::uint64_t final_value;
      std::memcpy(&final_value, buf + bytes - 64, 8);
      if (final_value != o.iters) verified = false;
    }
    if (send && received != o.iters) verified = false;
    const char verdict = verified ? 'y' : 'n';
    oob::write_full(fd, &verdict, 1);
    close(fd);
    if (o.counters) print_counters(*ctx, qp, &io.counters());
    std::printf("uroce-perf server: %s test done%s%s\n", o.op.c_str(), send ? (", " + std::to_string(received) + " messages received").c_str() : "",
                o.verify ? (verified ? "; verification: PASSED" : "; verification: FAILED") : "");
    return ok && verified ? 0 : 1;
  }

  // Client: the test itself.
  std::vector<Clock::time_point> posted_at(o.depth);
  std::vector<std::uint64_t> slot_msg(o.depth);
  std::vector<double> lat;
  auto post = [&](std::uint64_t msg) {
    const auto s = static_cast<std::uint32_t>(msg % o.depth);
    slot_msg[s] = msg;
    ibv_sge sge{reinterpret_cast<std::uint64_t>(buf + s * slot), o.size, mr->lkey};
    ibv_send_wr wr = message_wr(o.op, s, sge, peer.vaddr + s * slot, peer.vaddr + bytes - 64, peer.rkey);
    if (o.verify && !read && !atomic) pattern.fill(buf + s * slot, msg);
    if (o.lat || msg % 16 == 0) posted_at[s] = Clock::now();
    ibv_send_wr* bad = nullptr;
    return qp_of_slot(s)->post_send(&wr, &bad) == 0;
  };
  const auto t0 = Clock::now();
  auto last_progress = t0;
  std::uint64_t next = 0;
  std::uint64_t done_count = 0;
  const std::uint32_t depth = o.lat ? 1 : o.depth;
  std::vector<bool> busy(depth);
  std::string failure;
  while (done_count < o.iters && failure.empty()) {
    // A slot is reused once its message has completed (over several QPs
    // they complete out of order).
    while (next < o.iters && next - done_count < depth && !busy[next % depth]) {
      busy[next % depth] = true;
      if (!post(next++)) failure = "post failed: " + ctx->last_error();
    }
    ctx->progress();
    ibv_wc wc[32];
    const int k = cq->poll(32, wc);
    if (k == 0 && Clock::now() - last_progress > std::chrono::seconds(20)) failure = "no completion for 20 s";
    for (int i = 0; i < k; ++i) {
      last_progress = Clock::now();
      if (wc[i].status != IBV_WC_SUCCESS) {
        failure = std::string("completion error: ") + wc_status_str(wc[i].status);
        break;
      }
      const auto s = static_cast<std::uint32_t>(wc[i].wr_id);
      busy[s % depth] = false;
      const std::uint64_t msg = slot_msg[s];
      if (o.lat || msg % 16 == 0) lat.push_back(std::chrono::duration<double, std::micro>(last_progress - posted_at[s]).count());
      if (o.verify && read && !pattern.matches(buf + s * slot, s)) verified = false;
      if (o.verify && atomic && o.qps == 1) {  // over several QPs the adds interleave in any order
        std::uint64_t orig;
        std::memcpy(&orig, buf + s * slot, 8);
        if (orig != msg) verified = false;
      }
      ++done_count;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // Tell the server, and hear its verdict on what it received.
  char verdict = 'n';
  const bool told = oob::write_full(fd, "done\0\0\0", 8) && oob::read_full(fd, &verdict, 1, idle);
  close(fd);
  if (!failure.empty()) {
    std::fprintf(stderr, "uroce-perf: %s\n", failure.c_str());
    if (o.counters) print_counters(*ctx, qp, &io.counters());
    return 1;
  }
  if (!told) verdict = 'n';
  if (o.verify && verdict != 'y') verified = false;
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) {
    return lat.empty() ? 0.0 : lat[std::min(lat.size() - 1, static_cast<std::size_t>(p / 100.0 * static_cast<double>(lat.size())))];
  };
  const double gbps = static_cast<double>(done_count * o.size) * 8 / seconds / 1e9;
  const double mpps = static_cast<double>(done_count) / seconds / 1e6;
  std::printf("%10s %12s %14s %14s\n", "#bytes", "#iterations", "BW [Gb/s]", "MsgRate [Mpps]");
  std::printf("%10u %12llu %14.2f %14.3f\n", o.size, static_cast<unsigned long long>(done_count), gbps, mpps);
  std::printf("latency [us, post to completion%s]: min %.2f p50 %.2f p99 %.2f p99.9 %.2f max %.2f\n",
              o.lat ? "" : ", every 16th message, queueing included", pct(0), pct(50), pct(99), pct(99.9), pct(100));
  std::printf("retransmitted %llu packets, %llu timeouts, %llu sequence NAKs, %llu RNR NAKs\n",
              static_cast<unsigned long long>(sum("retransmitted_packets")),
              static_cast<unsigned long long>(sum("timeouts")),
              static_cast<unsigned long long>(sum("nak_seq_received")),
              static_cast<unsigned long long>(sum("rnr_naks_received")));
  if (o.verify) std::printf("verification: %s\n", verified ? "PASSED (both sides)" : "FAILED");
  if (o.counters) print_counters(*ctx, qp, &io.counters());
  if (!o.json.empty()) {
    std::ofstream j(o.json);
    j << "{\"tool\":\"uroce-perf\",\"mode\":\"port\",\"op\":\"" << o.op << "\",\"test\":\"" << (o.lat ? "lat" : "bw")
      << "\",\"size\":" << o.size << ",\"qps\":" << o.qps << ",\"iterations\":" << done_count << ",\"mtu\":" << o.mtu << ",\"tx_depth\":" << depth
      << ",\"bw_gbps\":" << gbps << ",\"msg_rate_mpps\":" << mpps << ",\"lat_us\":{\"min\":" << pct(0)
      << ",\"p50\":" << pct(50) << ",\"p99\":" << pct(99) << ",\"p999\":" << pct(99.9) << ",\"max\":" << pct(100) << "}";
    if (o.verify) j << ",\"verified\":" << (verified ? "true" : "false");
    j << "}\n";
  }
  return o.verify && !verified ? 1 : 0;
}

}  // namespace uroce::perf
