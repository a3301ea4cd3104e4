// An application that runs DPDK itself, as SPDK, VPP and OVS-DPDK do: it
// calls rte_eal_init with its own arguments (lcore 0, its own memory, its
// own file prefix), makes a mempool and a buffer of its own, and only then
// uses uroce0 through libibverbs (issue 27, item 13; docs/embedding.md).
// What own_eal_test.cc runs, two at a time over memif.
//
//   own_eal_app server|client DIR [APP_VDEV]
//
// uroce's port comes from the environment: UROCE_EAL naming only a
// --vdev (uroce hot-plugs it), or UROCE_PORT_ID naming a port the
// application probed itself (APP_VDEV, given to its own rte_eal_init).
// The two swap QPN, PSN, GID, address and rkey through files in DIR, then
// the client RDMA WRITEs 512 KiB, SENDs 64 KiB and RDMA READs 128 KiB, and
// the server SENDs 64 KiB back; each side checks every byte it got. Then
// it closes everything, checks no thread of uroce is left, prints how many
// ports its EAL has (a removable hot-plugged vdev is gone), opens uroce0
// once more and closes it, closes its own port (the client first), calls
// rte_eal_cleanup itself and exits 0. Prints the first failed check and exits 1 otherwise;
// exits 3 when no uroce device shows (uroce's line is on stderr).
#include <dirent.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dpdk/rte.h"

#include <rte_malloc.h>

namespace {

#define CHECK(cond)                                                                                    \
  do {                                                                                                 \
    if (!(cond)) {                                                                                     \
      std::fprintf(stderr, "own_eal_app: %s:%d: check failed: %s (errno %d)\n", __FILE__, __LINE__, #cond, \
                   errno);                                                                             \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)
#define RUN(call)                  \
  do {                             \
    if ((call) != 0) return 1;     \
  } while (0)

constexpr std::size_t kBuf = 1 << 20;
constexpr std::size_t kWrite = 512 << 10;     // client -> server [0, 512K)
constexpr std::size_t kSendAt = 512 << 10;    // client -> server [512K, 576K)
constexpr std::size_t kSend = 64 << 10;
constexpr std::size_t kReplyAt = 768 << 10;   // server -> client [768K, 832K)
constexpr std::size_t kReadAt = 896 << 10;    // server's [896K, 1M) read into the client's same range
constexpr std::size_t kRead = 128 << 10;

std::uint8_t pattern(unsigned seed, std::size_t i) { return static_cast<std::uint8_t>(seed * 131 + i * 7 + (i >> 9)); }
void fill(std::uint8_t* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = pattern(seed, i);
}
int verify(const std::uint8_t* p, std::size_t n, unsigned seed, std::size_t& verified) {
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] != pattern(seed, i)) {
      std::fprintf(stderr, "own_eal_app: seed %u byte %zu: %u, wanted %u\n", seed, i, p[i], pattern(seed, i));
      return 1;
    }
  }
  verified += n;
  return 0;
}

// Threads of this process named `name` (/proc/self/task/*/comm).
int threads_named(const char* name) {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string c;
    std::getline(comm, c);
    if (c == name) ++n;
  }
  closedir(d);
  return n;
}

struct Peer {
  std::uint32_t qpn = 0, psn = 0, rkey = 0;
  std::uint64_t addr = 0;
  ibv_gid gid{};
};

void publish(const std::string& dir, const std::string& name, const Peer& p) {
  std::ostringstream s;
  s << p.qpn << ' ' << p.psn << ' ' << p.rkey << ' ' << p.addr;
  for (std::uint8_t b : p.gid.raw) s << ' ' << unsigned{b};
  const std::string path = dir + "/" + name;
  std::ofstream(path + ".tmp") << s.str() << '\n';
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// Waits up to 60 s for the file `name` in `dir` (written by publish or mark).
bool await_file(const std::string& dir, const std::string& name, std::string& text) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream in(dir + "/" + name);
    if (in) {
      std::getline(in, text);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool link_down_within(std::uint16_t port, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_DOWN) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool await_peer(const std::string& dir, const std::string& name, Peer& p) {
  std::string text;
  if (!await_file(dir, name, text)) return false;
  std::istringstream s(text);
  s >> p.qpn >> p.psn >> p.rkey >> p.addr;
  for (std::uint8_t& b : p.gid.raw) {
    unsigned v = 0;
    s >> v;
    b = static_cast<std::uint8_t>(v);
  }
  return static_cast<bool>(s);
}

int poll_one(ibv_cq* cq, ibv_wc_opcode opcode, std::uint64_t wr_id) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  ibv_wc wc{};
  for (;;) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    CHECK(n >= 0);
    if (n == 1) break;
    CHECK(std::chrono::steady_clock::now() < until);
  }
  if (wc.status != IBV_WC_SUCCESS || wc.opcode != opcode || wc.wr_id != wr_id) {
    std::fprintf(stderr, "own_eal_app: completion %s, opcode %d, wr_id %llu; wanted opcode %d, wr_id %llu\n",
                 ibv_wc_status_str(wc.status), wc.opcode, static_cast<unsigned long long>(wc.wr_id), opcode,
                 static_cast<unsigned long long>(wr_id));
    return 1;
  }
  return 0;
}

// The completions `want` (opcode, wr_id), all successful, in any order:
// the peer's SEND may land before the ACK of ours.
int poll_all(ibv_cq* cq, std::vector<std::pair<ibv_wc_opcode, std::uint64_t>> want) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!want.empty()) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(cq, 1, &wc);
    CHECK(n >= 0);
    if (n == 0) {
      CHECK(std::chrono::steady_clock::now() < until);
      continue;
    }
    bool expected = false;
    for (auto it = want.begin(); it != want.end(); ++it) {
      if (wc.status == IBV_WC_SUCCESS && wc.opcode == it->first && wc.wr_id == it->second) {
        want.erase(it);
        expected = true;
        break;
      }
    }
    if (!expected) {
      std::fprintf(stderr, "own_eal_app: unexpected completion %s, opcode %d, wr_id %llu\n",
                   ibv_wc_status_str(wc.status), wc.opcode, static_cast<unsigned long long>(wc.wr_id));
      return 1;
    }
  }
  return 0;
}

int post(ibv_qp* qp, ibv_wr_opcode opcode, ibv_mr* mr, std::size_t at, std::size_t len, std::uint64_t wr_id,
         const Peer* peer = nullptr, std::size_t remote_at = 0) {
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(static_cast<std::uint8_t*>(mr->addr) + at),
              static_cast<std::uint32_t>(len), mr->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (peer != nullptr) {
    wr.wr.rdma.remote_addr = peer->addr + remote_at;
    wr.wr.rdma.rkey = peer->rkey;
  }
  CHECK(ibv_post_send(qp, &wr, &bad) == 0);
  return 0;
}

int post_recv(ibv_qp* qp, ibv_mr* mr, std::size_t at, std::size_t len, std::uint64_t wr_id) {
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(static_cast<std::uint8_t*>(mr->addr) + at),
              static_cast<std::uint32_t>(len), mr->lkey};
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  CHECK(ibv_post_recv(qp, &wr, &bad) == 0);
  return 0;
}

int to_init(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  return 0;
}

int connect(ibv_qp* qp, const Peer& me, const Peer& peer, ibv_mtu mtu) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer.gid;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  CHECK(ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = me.psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  CHECK(ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC) == 0);
  return 0;
}

// RC traffic on uroce0 with `buf` (the application's EAL memory) as the region.
int traffic(bool server, const std::string& dir, std::uint8_t* buf, std::size_t& verified) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  CHECK(list != nullptr);
  if (n != 1) {
    ibv_free_device_list(list);
    std::fprintf(stderr, "own_eal_app: no uroce device\n");
    std::exit(3);
  }
  CHECK(std::strcmp(ibv_get_device_name(list[0]), "uroce0") == 0);
  ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx != nullptr);
  // The port is up: a memif server listens (own_eal_test starts the client then).
  std::ofstream(dir + (server ? "/server-open" : "/client-open")) << "open\n";
  ibv_port_attr port{};
  CHECK(ibv_query_port(ctx, 1, &port) == 0);
  CHECK(port.state == IBV_PORT_ACTIVE);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  CHECK(pd != nullptr);
  ibv_mr* mr = ibv_reg_mr(pd, buf, kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  CHECK(mr != nullptr);
  ibv_cq* cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  CHECK(cq != nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 16;
  init.cap.max_recv_wr = 16;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &init);
  CHECK(qp != nullptr);

  Peer me;
  me.qpn = qp->qp_num;
  me.psn = server ? 0x1234 : 0x5678;
  me.rkey = mr->rkey;
  me.addr = reinterpret_cast<std::uintptr_t>(buf);
  CHECK(ibv_query_gid(ctx, 1, 1, &me.gid) == 0);
  RUN(to_init(qp));  // receives may be posted from INIT on
  if (server) {
    fill(buf + kReadAt, kRead, 4);
    RUN(post_recv(qp, mr, kSendAt, kSend, 1));
  } else {
    fill(buf, kWrite, 1);
    fill(buf + kSendAt, kSend, 2);
    RUN(post_recv(qp, mr, kReplyAt, kSend, 1));
  }
  publish(dir, server ? "server" : "client", me);
  Peer peer;
  CHECK(await_peer(dir, server ? "client" : "server", peer));
  RUN(connect(qp, me, peer, port.active_mtu));
  publish(dir, server ? "server-ready" : "client-ready", me);
  std::string text;
  CHECK(await_file(dir, server ? "client-ready" : "server-ready", text));

  if (server) {
    RUN(poll_one(cq, IBV_WC_RECV, 1));  // after the WRITE: RC keeps the order
    RUN(verify(buf, kWrite, 1, verified));
    RUN(verify(buf + kSendAt, kSend, 2, verified));
    fill(buf + kReplyAt, kSend, 3);
    RUN(post(qp, IBV_WR_SEND, mr, kReplyAt, kSend, 2));
    RUN(poll_one(cq, IBV_WC_SEND, 2));
  } else {
    RUN(post(qp, IBV_WR_RDMA_WRITE, mr, 0, kWrite, 2, &peer, 0));
    RUN(post(qp, IBV_WR_SEND, mr, kSendAt, kSend, 3));
    RUN(post(qp, IBV_WR_RDMA_READ, mr, kReadAt, kRead, 4, &peer, kReadAt));
    RUN(poll_all(cq, {{IBV_WC_RDMA_WRITE, 2}, {IBV_WC_SEND, 3}, {IBV_WC_RDMA_READ, 4}, {IBV_WC_RECV, 1}}));
    RUN(verify(buf + kReadAt, kRead, 4, verified));
    RUN(verify(buf + kReplyAt, kSend, 3, verified));
  }
  // Neither side takes its port away while the other still needs it.
  publish(dir, server ? "server-done" : "client-done", me);
  CHECK(await_file(dir, server ? "client-done" : "server-done", text));

  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
  return 0;
}

// uroce0 opened and closed once more: the device comes back (a vdev is
// hot-plugged again) and goes with the close.
int reopen() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  CHECK(list != nullptr && n == 1);
  ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx != nullptr);
  ibv_port_attr port{};
  CHECK(ibv_query_port(ctx, 1, &port) == 0);
  CHECK(threads_named("uroce-worker") == 1);
  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
  return 0;
}

int run(bool server, const std::string& dir, const char* app_vdev) {
  const std::string prefix = std::string("own-eal-") + (server ? "server-" : "client-") + std::to_string(getpid());
  std::vector<std::string> args = {"own_eal_app", "--no-huge", "--no-shconf", "--no-pci", "-l", "0", "-m", "256",
                                   "--file-prefix=" + prefix, "--log-level=lib.eal:error"};
  if (app_vdev != nullptr) args.push_back(std::string("--vdev=") + app_vdev);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  CHECK(rte_eal_init(static_cast<int>(args.size()), argv.data()) >= 0);
  // The application's own memory, from its own EAL, before uroce's.
  rte_mempool* own_pool = rte_pktmbuf_pool_create("app_pool", 1023, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                                  static_cast<int>(rte_socket_id()));
  CHECK(own_pool != nullptr);
  auto* buf = static_cast<std::uint8_t*>(rte_zmalloc_socket("app_buffer", kBuf, 4096, static_cast<int>(rte_socket_id())));
  CHECK(buf != nullptr);
  const std::uint16_t ports_before = rte_eth_dev_count_avail();

  std::size_t verified = 0;
  RUN(traffic(server, dir, buf, verified));
  std::printf("verified %zu bytes\n", verified);
  const int left = threads_named("uroce-worker");
  std::printf("uroce threads after close: %d\n", left);
  std::printf("ports before uroce %u, after its close %u\n", ports_before, rte_eth_dev_count_avail());
  CHECK(left == 0);
  RUN(reopen());
  CHECK(threads_named("uroce-worker") == 0);
  std::printf("reopened and closed\n");
  // A memif client re-plugged by the reopen needs the server still there.
  std::ofstream(dir + (server ? "/server-finished" : "/client-finished")) << "finished\n";
  std::string text;
  CHECK(await_file(dir, server ? "client-finished" : "server-finished", text));

  // The application shuts its DPDK down itself: its port, its memory, EAL.
  // One end at a time: when the peer goes, DPDK 22.11's memif tears the
  // connection down on EAL's interrupt thread, and a close on the main
  // thread at that moment races it (a SEGV inside DPDK, once in a CI run).
  // The client closes first; the server waits until it has, and until its
  // own link is down (that teardown done), then closes.
  if (app_vdev != nullptr) {
    if (server) CHECK(await_file(dir, "client-closed", text));
    for (std::uint16_t id = 0; id < RTE_MAX_ETHPORTS; ++id) {
      if (!rte_eth_dev_is_valid_port(id)) continue;
      if (server) CHECK(link_down_within(id, std::chrono::seconds(10)));
      rte_eth_dev_stop(id);
      rte_eth_dev_close(id);
    }
    if (!server) std::ofstream(dir + "/client-closed") << "closed\n";
  }
  rte_free(buf);
  rte_mempool_free(own_pool);
  // As an application would: its EAL's runtime folder goes with it.
  const std::string runtime = rte_eal_get_runtime_dir();
  CHECK(rte_eal_cleanup() == 0);
  std::error_code ignored;
  std::filesystem::remove_all(runtime, ignored);
  std::printf("own_eal_app %s: EAL cleaned up by the application\n", server ? "server" : "client");
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4 || (std::strcmp(argv[1], "server") != 0 && std::strcmp(argv[1], "client") != 0)) {
    std::fprintf(stderr, "usage: %s server|client DIR [APP_VDEV]\n", argv[0]);
    return 2;
  }
  return run(std::strcmp(argv[1], "server") == 0, argv[2], argc == 4 ? argv[3] : nullptr);
}
