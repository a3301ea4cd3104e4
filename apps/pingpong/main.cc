// uroce-pingpong: the counterpart of rdma-core's ibv_rc_pingpong, so the
// stock tool on any RoCE host talks to this stack unmodified. The same TCP
// exchange on port 18515 ("%04x:%06x:%06x:%s" = LID, QPN, PSN, GID as 32 hex
// digits, then "done" from the client) over an ordinary kernel socket; RoCE
// goes to the GID in the message, through the DPDK port this process owns.
#include <arpa/inet.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/args.h"
#include "common/counters.h"
#include "common/transport_flags.h"
#include "common/oob.h"
#include "common/path_mtu.h"
#include "common/port_device.h"
#include "common/work_request.h"
#include "device/device.h"
#include "dpdk/eal.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"

namespace {

using namespace uroce;

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
    "  -u, --qp-timeout N   local ACK timeout, 4.096 us * 2^N, 1-31 (default 14: 67 ms, as ibv_rc_pingpong);\n"
    "                       with the 7 retries, how long the peer may fall silent before the QP fails\n"
    "      --normal-pages   the buffer on ordinary pages of the process (mmap, never huge), not the\n"
    "                       device's (on hugepages when EAL has them), as a stock program's malloc'd buffer\n"
    "      --offset BYTES   the buffer starts BYTES into a page, 0 to page size - 1 (default 0),\n"
    "                       so messages cross page boundaries where a page-aligned one would not\n"
    "  -e, --events         accepted for compatibility; completions are polled\n"
    "      --counters       print the QP, engine and port counters on exit\n"
    "      --pfc PRIO       the lossless 802.1p priority, 0-7 (default off): PFC enabled on the\n"
    "                       port where its driver can (else one warning), data sent with DSCP PRIO*8\n"
    "%s"
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
  std::uint8_t qp_timeout = 14;  // -u: 4.096 us * 2^14 = 67 ms
  std::uint32_t offset = 0;  // --offset: where in its first page the buffer starts
  bool normal_pages = false;  // --normal-pages
  bool counters = false;
  int pfc_priority = -1;  // --pfc; -1 none
  TransportOptions transport;  // --sr, --spray, --bdp
  std::string server;
};

using app::usage_error;

// --ip ADDR/PREFIX.
void ip_option(std::string v, Options& o) {
  const auto slash = v.find('/');
  if (slash != std::string::npos) {
    const std::uint64_t prefix = app::parse_number(v.substr(slash + 1), "--ip prefix");
    if (prefix > 32) usage_error("--ip: the prefix must be 0..32");
    v = v.substr(0, slash);
  }
  if (inet_pton(AF_INET, v.c_str(), o.ip.data()) != 1) usage_error("--ip: '" + v + "' is not an IPv4 address");
  o.have_ip = true;
}

Options parse(const std::vector<std::string>& args) {
  Options o;
  app::ArgReader reader(args);
  auto u32 = [&](const char* flag) { return static_cast<std::uint32_t>(reader.number(flag)); };
  for (std::string a; reader.next(a);) {
    if (a == "--ip") ip_option(reader.value("--ip"), o);
    else if (a == "--port-id") o.port_id = static_cast<std::uint16_t>(reader.number("--port-id"));
    else if (a == "-p" || a == "--port") o.tcp_port = static_cast<std::uint16_t>(reader.number("-p"));
    else if (a == "-g" || a == "--gid-idx") o.gid_index = static_cast<int>(reader.number("-g"));
    else if (a == "-s" || a == "--size") o.size = u32("-s");
    else if (a == "-m" || a == "--mtu") o.mtu = u32("-m");
    else if (a == "-r" || a == "--rx-depth") o.rx_depth = u32("-r");
    else if (a == "-n" || a == "--iters") o.iters = u32("-n");
    else if (a == "-c" || a == "--chk") o.validate = true;
    else if (a == "-u" || a == "--qp-timeout") {
      const std::uint64_t t = reader.number("-u");
      if (t < 1 || t > 31) usage_error("-u must be 1..31 (the local ACK timeout is 4.096 us * 2^N)");
      o.qp_timeout = static_cast<std::uint8_t>(t);
    }
    else if (a == "--offset") o.offset = app::parse_page_offset(reader.value("--offset"), "--offset");
    else if (a == "--normal-pages") o.normal_pages = true;
    else if (a == "--counters") o.counters = true;
    else if (a == "--pfc") o.pfc_priority = app::parse_pfc_priority(reader.value("--pfc"), "--pfc");
    else if (app::transport_flag(a, reader, o.transport)) continue;
    else if (a == "-e" || a == "--events") {
    } else if (a == "-h" || a == "--help") {
      std::printf(kUsage, app::kTransportUsage);
      std::exit(0);
    } else if (!a.empty() && a[0] != '-' && o.server.empty()) o.server = a;
    else usage_error("unknown argument '" + a + "'");
  }
  if (!o.have_ip) usage_error("--ip ADDR/PREFIX is required: the address this stack owns on the port");
  if (o.gid_index != 0 && o.gid_index != 1) usage_error("-g must be 0 (IPv6 link-local) or 1 (::ffff:ADDR)");
  if (!app::is_path_mtu(o.mtu)) usage_error("-m must be 256, 512, 1024, 2048 or 4096");
  if (o.size == 0 || o.iters == 0 || o.rx_depth < 2) usage_error("-s, -n must be positive and -r at least 2");
  app::check_transport_flags(o.transport);
  return o;
}

struct Dest {
  std::uint32_t lid = 0;
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  ibv_gid gid{};
};

std::string to_message(const Dest& d) {
  char msg[64];
  std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:%s", d.lid, d.qpn, d.psn, oob::gid_to_hex(d.gid).c_str());
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
  return oob::gid_from_hex(gid, d.gid);
}

std::string gid_text(const ibv_gid& g) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, g.raw, buf, sizeof buf);
  return buf;
}

// One side of the ping-pong on the port's device: the buffer, CQ and QP,
// the exchange of addresses, then SENDs back and forth.
class Pingpong {
 public:
  Pingpong(const Options& o, Context& ctx, dpdk::PortIo& io) : o_(o), ctx_(ctx), io_(io) {}

  ~Pingpong() {
    if (oob_fd_ >= 0) close(oob_fd_);
  }
  bool set_up();
  bool exchange();
  int run();

 private:
  bool client() const { return !o_.server.empty(); }
  void print_counters() {
    if (o_.counters) uroce::print_counters(ctx_, qp_);
  }
  // Prints "uroce-pingpong: WHAT"; false.
  bool fail(const char* what) {
    std::fprintf(stderr, "uroce-pingpong: %s\n", what);
    return false;
  }

  std::uint32_t post_recvs(std::uint32_t n);
  bool post_send();
  bool connect_qp();
  bool exchange_as_client(const std::string& msg, char* in);
  bool ask_server(int fd, const std::string& msg, char* in);
  bool exchange_as_server(const std::string& msg, char* in);
  bool answer_client(int fd, const std::string& msg, char* in);
  int on_completion(const ibv_wc& wc);
  void report(double usec) const;
  int check_pages() const;
  void part();

  const Options& o_;
  Context& ctx_;
  dpdk::PortIo& io_;
  std::uint8_t* buf_ = nullptr;
  long page_ = sysconf(_SC_PAGESIZE);
  MemoryRegion* mr_ = nullptr;
  CompletionQueue* cq_ = nullptr;
  QueuePair* qp_ = nullptr;
  std::uint32_t routs_ = 0;  // receives posted
  Dest mine_;
  Dest peer_;
  const std::function<void()> idle_ = [this] { ctx_.progress(); };
  std::uint64_t pending_ = kRecvWrid;  // the work requests to complete before the next send
  std::uint32_t rcnt_ = 0;
  std::uint32_t scnt_ = 0;
  int oob_fd_ = -1;  // the exchange's socket, open until part()
};

// The buffer, its MR, the CQ and the QP in INIT with every receive posted.
bool Pingpong::set_up() {
  ProtectionDomain* pd = ctx_.alloc_pd();
  // --offset: page-aligned memory, the buffer and its MR from that far in.
  // --normal-pages: 4 KiB pages of the process's own, scattered in physical
  // memory (with IOVA as PA a piece crossing one goes out in two segments).
  if (o_.normal_pages) {
    const std::size_t bytes = o_.size + o_.offset;
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return fail(("cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(errno)).c_str());
    madvise(m, bytes, MADV_NOHUGEPAGE);
    buf_ = static_cast<std::uint8_t*>(m);
    std::printf("  buffer: %u bytes on normal pages\n", o_.size);
  } else {
    buf_ = static_cast<std::uint8_t*>(ctx_.alloc_buffer(o_.size + o_.offset));
    if (buf_ == nullptr) return fail(ctx_.last_error().c_str());
  }
  buf_ += o_.offset;
  if (o_.offset != 0) {
    const auto in_page = static_cast<long>(reinterpret_cast<std::uintptr_t>(buf_) % static_cast<std::uintptr_t>(page_));
    std::printf("  buffer: %u bytes at offset %ld of a page\n", o_.size, in_page);
  }
  // As ibv_rc_pingpong: the buffer starts as 0x7b; with -c the client marks
  // the first byte of every page, and the server checks the marks at the end.
  std::memset(buf_, 0x7b, o_.size);
  if (o_.validate && client()) {
    for (std::uint32_t i = 0; i < o_.size; i += static_cast<std::uint32_t>(page_)) buf_[i] = 0;
  }
  mr_ = pd->reg_mr(buf_, o_.size, IBV_ACCESS_LOCAL_WRITE);
  cq_ = ctx_.create_cq(static_cast<int>(o_.rx_depth + 1));
  QpInitAttr init;
  init.send_cq = init.recv_cq = cq_;
  init.cap = ibv_qp_cap{1, o_.rx_depth, 1, 1, 0};
  qp_ = pd->create_qp(init);
  if (mr_ == nullptr || cq_ == nullptr || qp_ == nullptr) return fail(ctx_.last_error().c_str());
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (qp_->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    return fail(ctx_.last_error().c_str());
  }
  routs_ = post_recvs(o_.rx_depth);
  return true;
}

// Posts up to n receives of the whole buffer; returns how many were posted.
std::uint32_t Pingpong::post_recvs(std::uint32_t n) {
  ibv_sge sge = app::local_sge(buf_, o_.size, *mr_);
  ibv_recv_wr wr = app::recv_wr(kRecvWrid, sge);
  ibv_recv_wr* bad_wr = nullptr;
  std::uint32_t i = 0;
  for (; i < n; ++i) {
    if (qp_->post_recv(&wr, &bad_wr) != 0) break;
  }
  return i;
}

bool Pingpong::post_send() {
  ibv_sge sge = app::local_sge(buf_, o_.size, *mr_);
  ibv_send_wr wr = app::send_wr(kSendWrid, sge);
  ibv_send_wr* bad_wr = nullptr;
  return qp_->post_send(&wr, &bad_wr) == 0;
}

// The attributes ibv_rc_pingpong uses: min_rnr_timer 12, timeout 14 (-u
// changes it), retry_cnt 7, rnr_retry 7, one READ/atomic each way.
bool Pingpong::connect_qp() {
  ConnectParams cp;
  cp.mtu = app::mtu_enum(o_.mtu);
  cp.max_rd_atomic = 1;
  cp.timeout = o_.qp_timeout;
  cp.access = 0;
  cp.sgid_index = static_cast<std::uint8_t>(o_.gid_index);
  cp.transport = o_.transport;
  if (connect_rc(qp_, peer_.gid, peer_.qpn, mine_.psn, peer_.psn, cp) == 0) {
    if (app::transport_asked(o_.transport)) {
      std::printf("  transport: %s\n", app::describe_transport(qp_->transport_options()).c_str());
    }
    return true;
  }
  std::fprintf(stderr, "uroce-pingpong: couldn't connect the QP: %s\n", ctx_.last_error().c_str());
  return false;
}

// The client sends its address, reads the server's, and says "done".
bool Pingpong::exchange_as_client(const std::string& msg, char* in) {
  std::string error;
  const int fd = oob::connect_to(o_.server, o_.tcp_port, error);
  if (fd < 0) return fail(error.c_str());
  const bool ok = ask_server(fd, msg, in);
  if (ok) oob_fd_ = fd;  // kept for part()
  else close(fd);
  return ok;
}

bool Pingpong::ask_server(int fd, const std::string& msg, char* in) {
  if (write(fd, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size()) || !oob::read_full(fd, in, msg.size(), idle_) ||
      !from_message(in, peer_)) {
    return fail("couldn't read/write remote address");
  }
  if (write(fd, "done", 5) != 5) fail("couldn't send \"done\"");
  return true;
}

// The server reads the client's address, connects its QP, then answers
// with its own and waits for "done".
bool Pingpong::exchange_as_server(const std::string& msg, char* in) {
  std::string error;
  const int fd = oob::accept_one(o_.tcp_port, error, idle_);
  if (fd < 0) return fail(error.c_str());
  const bool ok = answer_client(fd, msg, in);
  if (ok) oob_fd_ = fd;  // kept for part()
  else close(fd);
  return ok;
}

bool Pingpong::answer_client(int fd, const std::string& msg, char* in) {
  if (!oob::read_full(fd, in, msg.size(), idle_) || !from_message(in, peer_)) return fail("couldn't read remote address");
  if (!connect_qp()) return false;
  char done[5];
  if (write(fd, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size()) || !oob::read_full(fd, done, sizeof done, idle_)) {
    return fail("couldn't exchange addresses with the client");
  }
  return true;
}

// The rc_pingpong exchange of addresses over TCP; the QP connected to the peer's.
bool Pingpong::exchange() {
  mine_.qpn = qp_->qp_num();
  mine_.psn = static_cast<std::uint32_t>(std::random_device{}()) & 0xffffff;
  ctx_.query_gid(o_.gid_index, mine_.gid);
  std::printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", mine_.lid, mine_.qpn, mine_.psn,
              gid_text(mine_.gid).c_str());
  std::fflush(stdout);
  const std::string msg = to_message(mine_);
  char in[64] = {};
  if (!(client() ? exchange_as_client(msg, in) : exchange_as_server(msg, in))) return false;
  std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", peer_.lid, peer_.qpn, peer_.psn,
              gid_text(peer_.gid).c_str());
  std::fflush(stdout);
  return !client() || connect_qp();
}

// One completion: count it, keep receives posted, and send again once the
// last send and a receive have both completed. 0, or the exit status.
int Pingpong::on_completion(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) {
    std::fprintf(stderr, "Failed status %s (%d) for wr_id %d\n", wc_status_str(wc.status), wc.status,
                 static_cast<int>(wc.wr_id));
    print_counters();
    return 1;
  }
  if (wc.wr_id == kSendWrid) {
    ++scnt_;
  } else {
    if (--routs_ <= 1) routs_ += post_recvs(o_.rx_depth - routs_);
    ++rcnt_;
  }
  pending_ &= ~wc.wr_id;
  if (scnt_ < o_.iters && pending_ == 0) {
    if (!post_send()) {
      fail("couldn't post send");
      return 1;
    }
    pending_ = kRecvWrid | kSendWrid;
  }
  return 0;
}

void Pingpong::report(double usec) const {
  const long long bytes = static_cast<long long>(o_.size) * o_.iters * 2;
  std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6, static_cast<double>(bytes) * 8. / usec);
  std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", o_.iters, usec / 1e6, usec / o_.iters);
}

// -c on the server: the client's marks arrived in every page.
int Pingpong::check_pages() const {
  int rc = 0;
  for (std::uint32_t i = 0; i < o_.size; i += static_cast<std::uint32_t>(page_)) {
    if (buf_[i] != 0) {
      std::printf("invalid data in page %ld\n", static_cast<long>(i / page_));
      rc = 1;
    }
  }
  return rc;
}

// The ping-pong: the client sends first; o.iters messages each way.
int Pingpong::run() {
  if (client()) {
    if (!post_send()) {
      fail("couldn't post send");
      return 1;
    }
    pending_ |= kSendWrid;
  }
  const auto start = Clock::now();
  auto last_progress = start;
  ibv_wc wc[2];
  while (rcnt_ < o_.iters || scnt_ < o_.iters) {
    ctx_.progress();
    const int ne = cq_->poll(2, wc);
    if (ne < 0) {
      std::fprintf(stderr, "uroce-pingpong: poll CQ failed %d\n", ne);
      return 1;
    }
    if (ne == 0) {
      if (Clock::now() - last_progress > std::chrono::seconds(30)) {
        std::fprintf(stderr, "uroce-pingpong: no completion for 30 s (sent %u, received %u); is the peer there?\n",
                     scnt_, rcnt_);
        print_counters();
        return 1;
      }
      continue;
    }
    last_progress = Clock::now();
    for (int i = 0; i < ne; ++i) {
      if (const int rc = on_completion(wc[i]); rc != 0) return rc;
    }
  }
  report(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  const int rc = o_.validate && !client() ? check_pages() : 0;
  // Let the last ACKs leave before the port closes.
  const auto linger = Clock::now() + std::chrono::milliseconds(100);
  while (Clock::now() < linger) ctx_.progress();
  print_counters();
  part();
  return rc;
}

// Both sides stop polling before either closes its port (oob::part: memif
// in DPDK 22.11 crashes a side still polling when the other closes; seen
// about once in a CI run of the pingpong tests). The server then leaves
// the client a moment to close first.
void Pingpong::part() {
  if (oob_fd_ < 0) return;
  std::fflush(stdout);
  const bool heard = oob::part(oob_fd_);
  oob_fd_ = -1;
  if (heard && !client()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

int run(const Options& o) {
  const std::unique_ptr<device::Device> device = app::open_port_device("uroce-pingpong", o.port_id, o.ip, nullptr, o.pfc_priority);
  if (!device) return 1;
  Pingpong pingpong(o, *device->ctx, *device->io);
  if (!pingpong.set_up() || !pingpong.exchange()) return 1;
  return pingpong.run();
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
  std::fflush(stdout);
  uroce::dpdk::eal_cleanup();
  return rc;
}
