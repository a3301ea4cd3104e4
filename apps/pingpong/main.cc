// uroce-pingpong: the counterpart of rdma-core's ibv_rc_pingpong, so the
// stock tool on any RoCE host talks to this stack unmodified. The same TCP
// exchange on port 18515 ("%04x:%06x:%06x:%s" = LID, QPN, PSN, GID as 32 hex
// digits, then "done" from the client) over an ordinary kernel socket; RoCE
// goes to the GID in the message, through the DPDK port this process owns.
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/oob.h"
#include "dpdk/device.h"
#include "dpdk/eal.h"
#include "common/counters.h"
#include "uroce/verbs.h"
#include "uroce/version.h"
#include "verbs/connect.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: uroce-pingpong [EAL args] -- --ip ADDR/PREFIX [options] [server]\n"
    "  Without a server name: wait for a client. With one: connect to it.\n"
    "  --ip ADDR/PREFIX     the IPv4 address this stack owns on the DPDK port\n"
    "  --port-id N          DPDK port to use (default 0)\n"
    "  -p, --port PORT      TCP port of the exchange (default 18515)\n"
    "  -g, --gid-idx N      local GID index: 1 = ::ffff:ADDR (default), 0 = IPv6 link-local fe80::\n"
    "  -s, --size BYTES     message size (default 4096)\n"
    "  -m, --mtu BYTES      path MTU (default 1024)\n"
    "  -r, --rx-depth N     receives posted at a time (default 500)\n"
    "  -n, --iters N        exchanges (default 1000)\n"
    "  -c, --chk            validate the received buffer\n"
    "  -e, --events         accepted for compatibility; completions are polled\n"
    "      --counters       print the QP, engine and port counters on exit\n"
    "Example (af_packet on eth1, as root):\n"
    "  uroce-pingpong --no-pci --no-huge -m 512 --vdev=net_af_packet0,iface=eth1,framesz=8192,blocksz=16384 \\\n"
    "      -- --ip 10.99.0.1/24 -g 1 10.99.0.2\n";

constexpr std::uint64_t kRecvWrid = 1;
constexpr std::uint64_t kSendWrid = 2;

struct Options {
  std::array<std::uint8_t, 4> ip{};
  bool have_ip = false;
  std::uint16_t port_id = 0;
  std::uint16_t tcp_port = 18515;
  int gid_index = 1;
  std::uint32_t size = 4096;
  std::uint32_t mtu = 1024;
  std::uint32_t rx_depth = 500;
  std::uint32_t iters = 1000;
  bool validate = false;
  bool counters = false;
  std::string server;
};

[[noreturn]] void bad(const std::string& m) { throw std::invalid_argument(m); }

std::uint64_t number(const std::string& v, const char* flag) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 0);
  if (v.empty() || *end != '\0') bad(std::string(flag) + " takes a number, not '" + v + "'");
  return x;
}

Options parse(const std::vector<std::string>& args) {
  Options o;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= args.size()) bad(std::string(flag) + " needs a value");
      return args[++i];
    };
    if (a == "--ip") {
      std::string v = value("--ip");
      const auto slash = v.find('/');
      if (slash != std::string::npos) {
        const std::uint64_t prefix = number(v.substr(slash + 1), "--ip prefix");
        if (prefix > 32) bad("--ip: the prefix must be 0..32");
        v = v.substr(0, slash);
      }
      if (inet_pton(AF_INET, v.c_str(), o.ip.data()) != 1) bad("--ip: '" + v + "' is not an IPv4 address");
      o.have_ip = true;
    } else if (a == "--port-id") o.port_id = static_cast<std::uint16_t>(number(value("--port-id"), "--port-id"));
    else if (a == "-p" || a == "--port") o.tcp_port = static_cast<std::uint16_t>(number(value("-p"), "-p"));
    else if (a == "-g" || a == "--gid-idx") o.gid_index = static_cast<int>(number(value("-g"), "-g"));
    else if (a == "-s" || a == "--size") o.size = static_cast<std::uint32_t>(number(value("-s"), "-s"));
    else if (a == "-m" || a == "--mtu") o.mtu = static_cast<std::uint32_t>(number(value("-m"), "-m"));
    else if (a == "-r" || a == "--rx-depth") o.rx_depth = static_cast<std::uint32_t>(number(value("-r"), "-r"));
    else if (a == "-n" || a == "--iters") o.iters = static_cast<std::uint32_t>(number(value("-n"), "-n"));
    else if (a == "-c" || a == "--chk") o.validate = true;
    else if (a == "--counters") o.counters = true;
    else if (a == "-e" || a == "--events") {
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!a.empty() && a[0] != '-' && o.server.empty()) o.server = a;
    else bad("unknown argument '" + a + "'");
  }
  if (!o.have_ip) bad("--ip ADDR/PREFIX is required: the address this stack owns on the port");
  if (o.gid_index != 0 && o.gid_index != 1) bad("-g must be 0 (IPv6 link-local) or 1 (::ffff:ADDR)");
  if (o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096) {
    bad("-m must be 256, 512, 1024, 2048 or 4096");
  }
  if (o.size == 0 || o.iters == 0 || o.rx_depth < 2) bad("-s, -n must be positive and -r at least 2");
  return o;
}

struct Dest {
  std::uint32_t lid = 0;
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  ibv_gid gid{};
};

std::string to_message(const Dest& d) {
  char gid[33];
  for (int i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", d.gid.raw[i]);
  char msg[64];
  std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:%s", d.lid, d.qpn, d.psn, gid);
  return std::string(msg, std::strlen(msg) + 1);  // with the NUL, 52 bytes
}

bool from_message(const char* msg, Dest& d) {
  char gid[33] = {};
  unsigned lid = 0;
  unsigned qpn = 0;
  unsigned psn = 0;
  if (std::sscanf(msg, "%x:%x:%x:%32s", &lid, &qpn, &psn, gid) != 4 || std::strlen(gid) != 32) return false;
  d.lid = lid;
  d.qpn = qpn;
  d.psn = psn;
  for (int i = 0; i < 16; ++i) {
    unsigned byte = 0;
    if (std::sscanf(gid + 2 * i, "%2x", &byte) != 1) return false;
    d.gid.raw[i] = static_cast<std::uint8_t>(byte);
  }
  return true;
}

std::string gid_text(const ibv_gid& g) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, g.raw, buf, sizeof buf);
  return buf;
}

int run(const Options& o) {
  using namespace uroce;
  std::string error;
  auto device = dpdk::Device::open(o.port_id, o.ip, "uroce-pingpong", error);
  if (!device) {
    std::fprintf(stderr, "uroce-pingpong: %s\n", error.c_str());
    return 1;
  }
  if (const std::string w = dpdk::no_huge_warning("uroce-pingpong"); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  auto& ctx = device->ctx;
  dpdk::PortIo& io = *device->io;
  ProtectionDomain* pd = ctx->alloc_pd();
  auto* buf = static_cast<std::uint8_t*>(ctx->alloc_buffer(o.size));
  if (buf == nullptr) {
    std::fprintf(stderr, "uroce-pingpong: %s\n", ctx->last_error().c_str());
    return 1;
  }
  // As ibv_rc_pingpong: the buffer starts as 0x7b; with -c the client marks
  // the first byte of every page, and the server checks the marks at the end.
  std::memset(buf, 0x7b, o.size);
  const long page = sysconf(_SC_PAGESIZE);
  if (o.validate && !o.server.empty()) {
    for (std::uint32_t i = 0; i < o.size; i += static_cast<std::uint32_t>(page)) buf[i] = 0;
  }
  MemoryRegion* mr = pd->reg_mr(buf, o.size, IBV_ACCESS_LOCAL_WRITE);
  CompletionQueue* cq = ctx->create_cq(static_cast<int>(o.rx_depth + 1));
  QpInitAttr init;
  init.send_cq = init.recv_cq = cq;
  init.cap = ibv_qp_cap{1, o.rx_depth, 1, 1, 0};
  QueuePair* qp = pd->create_qp(init);
  if (mr == nullptr || cq == nullptr || qp == nullptr) {
    std::fprintf(stderr, "uroce-pingpong: %s\n", ctx->last_error().c_str());
    return 1;
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    std::fprintf(stderr, "uroce-pingpong: %s\n", ctx->last_error().c_str());
    return 1;
  }
  auto post_recv = [&](std::uint32_t n) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(buf), o.size, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = kRecvWrid;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad_wr = nullptr;
    std::uint32_t i = 0;
    for (; i < n; ++i) {
      if (qp->post_recv(&wr, &bad_wr) != 0) break;
    }
    return i;
  };
  std::uint32_t routs = post_recv(o.rx_depth);

  Dest mine;
  mine.qpn = qp->qp_num();
  mine.psn = static_cast<std::uint32_t>(std::random_device{}()) & 0xffffff;
  ctx->query_gid(o.gid_index, mine.gid);
  std::printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", mine.lid, mine.qpn, mine.psn,
              gid_text(mine.gid).c_str());
  std::fflush(stdout);

  ConnectParams cp;
  cp.mtu = o.mtu == 256 ? IBV_MTU_256 : o.mtu == 512 ? IBV_MTU_512 : o.mtu == 1024 ? IBV_MTU_1024 : o.mtu == 2048 ? IBV_MTU_2048 : IBV_MTU_4096;
  cp.max_rd_atomic = 1;
  cp.access = 0;
  cp.sgid_index = static_cast<std::uint8_t>(o.gid_index);
  Dest peer;
  auto connect_qp = [&]() {
    // The attributes ibv_rc_pingpong uses: min_rnr_timer 12, timeout 14,
    // retry_cnt 7, rnr_retry 7, one READ/atomic each way.
    return connect_rc(qp, peer.gid, peer.qpn, mine.psn, peer.psn, cp);
  };
  const std::string msg = to_message(mine);
  char in[64] = {};
  const std::function<void()> idle = [&] { ctx->progress(); };
  if (!o.server.empty()) {
    const int fd = oob::connect_to(o.server, o.tcp_port, error);
    if (fd < 0) {
      std::fprintf(stderr, "uroce-pingpong: %s\n", error.c_str());
      return 1;
    }
    if (write(fd, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size()) || !oob::read_full(fd, in, msg.size(), idle) ||
        !from_message(in, peer)) {
      std::fprintf(stderr, "uroce-pingpong: couldn't read/write remote address\n");
      close(fd);
      return 1;
    }
    if (write(fd, "done", 5) != 5) std::fprintf(stderr, "uroce-pingpong: couldn't send \"done\"\n");
    close(fd);
  } else {
    const int fd = oob::accept_one(o.tcp_port, error, idle);
    if (fd < 0) {
      std::fprintf(stderr, "uroce-pingpong: %s\n", error.c_str());
      return 1;
    }
    if (!oob::read_full(fd, in, msg.size(), idle) || !from_message(in, peer)) {
      std::fprintf(stderr, "uroce-pingpong: couldn't read remote address\n");
      close(fd);
      return 1;
    }
    if (connect_qp() != 0) {
      std::fprintf(stderr, "uroce-pingpong: couldn't connect the QP: %s\n", ctx->last_error().c_str());
      close(fd);
      return 1;
    }
    char done[5];
    if (write(fd, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size()) || !oob::read_full(fd, done, sizeof done, idle)) {
      std::fprintf(stderr, "uroce-pingpong: couldn't exchange addresses with the client\n");
      close(fd);
      return 1;
    }
    close(fd);
  }
  std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", peer.lid, peer.qpn, peer.psn,
              gid_text(peer.gid).c_str());
  std::fflush(stdout);
  if (!o.server.empty() && connect_qp() != 0) {
    std::fprintf(stderr, "uroce-pingpong: couldn't connect the QP: %s\n", ctx->last_error().c_str());
    return 1;
  }

  auto post_send = [&]() {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(buf), o.size, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = kSendWrid;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad_wr = nullptr;
    return qp->post_send(&wr, &bad_wr);
  };
  std::uint64_t pending = kRecvWrid;
  if (!o.server.empty()) {
    if (post_send() != 0) {
      std::fprintf(stderr, "uroce-pingpong: couldn't post send\n");
      return 1;
    }
    pending |= kSendWrid;
  }
  const auto start = Clock::now();
  auto last_progress = start;
  std::uint32_t rcnt = 0;
  std::uint32_t scnt = 0;
  ibv_wc wc[2];
  while (rcnt < o.iters || scnt < o.iters) {
    ctx->progress();
    const int ne = cq->poll(2, wc);
    if (ne < 0) {
      std::fprintf(stderr, "uroce-pingpong: poll CQ failed %d\n", ne);
      return 1;
    }
    if (ne == 0) {
      if (Clock::now() - last_progress > std::chrono::seconds(30)) {
        std::fprintf(stderr, "uroce-pingpong: no completion for 30 s (sent %u, received %u); is the peer there?\n",
                     scnt, rcnt);
        if (o.counters) uroce::print_counters(*ctx, qp, &io.counters());
        return 1;
      }
      continue;
    }
    last_progress = Clock::now();
    for (int i = 0; i < ne; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        std::fprintf(stderr, "Failed status %s (%d) for wr_id %d\n", wc_status_str(wc[i].status), wc[i].status,
                     static_cast<int>(wc[i].wr_id));
        if (o.counters) uroce::print_counters(*ctx, qp, &io.counters());
        return 1;
      }
      if (wc[i].wr_id == kSendWrid) {
        ++scnt;
      } else {
        if (--routs <= 1) routs += post_recv(o.rx_depth - routs);
        ++rcnt;
      }
      pending &= ~wc[i].wr_id;
      if (scnt < o.iters && pending == 0) {
        if (post_send() != 0) {
          std::fprintf(stderr, "uroce-pingpong: couldn't post send\n");
          return 1;
        }
        pending = kRecvWrid | kSendWrid;
      }
    }
  }
  const double usec = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  const long long bytes = static_cast<long long>(o.size) * o.iters * 2;
  std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6, static_cast<double>(bytes) * 8. / usec);
  std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec / 1e6, usec / o.iters);
  int rc = 0;
  if (o.validate && o.server.empty()) {
    for (std::uint32_t i = 0; i < o.size; i += static_cast<std::uint32_t>(page)) {
      if (buf[i] != 0) {
        std::printf("invalid data in page %ld\n", static_cast<long>(i / page));
        rc = 1;
      }
    }
  }
  // Let the last ACKs leave before the port closes.
  const auto linger = Clock::now() + std::chrono::milliseconds(100);
  while (Clock::now() < linger) ctx->progress();
  if (o.counters) uroce::print_counters(*ctx, qp, &io.counters());
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const uroce::dpdk::SplitArgs args = uroce::dpdk::split_args(argc, argv);
  Options o;
  try {
    o = parse(args.app);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uroce-pingpong: %s (see uroce-pingpong --help)\n", e.what());
    return 2;
  }
  if (args.eal.size() == 1) {
    std::fprintf(stderr, "uroce-pingpong: no EAL arguments: name the port before '--' (see --help)\n");
    return 2;
  }
  if (const std::string err = uroce::dpdk::eal_init(args.eal); !err.empty()) {
    std::fprintf(stderr, "uroce-pingpong: %s\n", err.c_str());
    return 1;
  }
  const int rc = run(o);
  uroce::dpdk::eal_cleanup();
  return rc;
}
