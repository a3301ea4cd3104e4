// uroce-perf: a perftest-like benchmark. With --sim, both ends run in this
// process on one core, joined by the simulated link on virtual time: the
// figures are the stack's own CPU cost, not a network's.
#include <arpa/inet.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cc/dcqcn.h"
#include "dpdk/eal.h"
#include "perf/message.h"
#include "perf/pattern.h"
#include "perf/remote.h"
#include "dpdk/ring_pair.h"
#include "sim/sim_pair.h"
#include "uroce/version.h"
#include "wire/frame.h"
#include "wire/icrc.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: uroce-perf --sim OP [options]\n"
    "       uroce-perf [EAL args] -- --ring OP [options]\n"
    "  --sim   both devices in this process over the simulated link (virtual time)\n"
    "  --ring  both devices in this process on two DPDK ports joined by net_ring;\n"
    "          without EAL args: --no-huge --no-shconf --no-pci -l 0 -m 512\n"
    "       uroce-perf [EAL args] -- --ip ADDR/PREFIX [--port-id N] [-p TCP] OP [options] [server]\n"
    "  two processes, perftest style: without a server name, wait for a client on\n"
    "  TCP port 18515; with one, run the test against it. Both sides take the same\n"
    "  OP and options; with --verify each checks what it can see.\n"
    "  OP: write | read | send | atomic (fetch-and-add)\n"
    "  -s, --size BYTES      message size (default 65536; atomics are 8)\n"
    "  -n, --iters N         messages (default 10000)\n"
    "  -t, --tx-depth N      messages in flight in bw mode (default 64)\n"
    "  -m, --mtu BYTES       path MTU: 256, 512, 1024, 2048, 4096 (default 4096)\n"
    "      --lat             latency mode: one message at a time (default: bandwidth)\n"
    "      --loss RATE       loss probability on the simulated link, each way (default 0)\n"
    "      --seed N          seed of the simulated link (default 1)\n"
    "      --verify          check every byte and every atomic result\n"
    "      --json FILE       also write the results as JSON\n"
    "      --pcap FILE       record every frame on the simulated link (uroce-dump, tshark read it)\n"
    "      --counters        print the QP, engine and port counters on exit\n"
    "      --dcqcn on|off|FILE  DCQCN congestion control: ECN marking, CNPs, paced QPs;\n"
    "                        on: conf/dcqcn.conf's defaults; FILE: that file's values (default off)\n"
    "  -q, --qps N           spread the messages over N QP pairs (default 1;\n"
    "                        message slot s goes to QP s mod N, so -t should be a multiple of N)\n"
    "      --idle-qps N      with --sim or --ring: N more connected QP pairs that carry\n"
    "                        nothing (what the engine pays per poll for QPs it serves)\n"
    "      --workers         with --ring: each device's engine on its own thread (CPUs 0, 1);\n"
    "                        this thread only posts and polls (wants a third core: with two,\n"
    "                        the three busy threads time-slice)\n"

    "Exit status: 0 ok; 1 a transfer or verification failed; 2 bad usage.\n";

struct Options {
  std::string fabric;  // "sim" or "ring"
  std::string op;
  std::uint32_t size = 65536;
  std::uint64_t iters = 10000;
  std::uint32_t depth = 64;
  std::uint32_t mtu = 4096;
  bool lat = false;
  double loss = 0;
  std::uint64_t seed = 1;
  bool verify = false;
  std::string json;
  std::string pcap;
  bool counters = false;
  bool workers = false;
  std::optional<uroce::cc::DcqcnParams> dcqcn;
  std::uint32_t idle_qps = 0;
  std::uint32_t qps = 1;
  std::array<std::uint8_t, 4> ip{};
  bool have_ip = false;
  std::uint16_t port_id = 0;
  std::uint16_t tcp_port = 18515;
  std::string server;
};

[[noreturn]] void usage_error(const std::string& message) {
  throw std::invalid_argument(message);
}

Options parse(int argc, const char* const* argv) {
  Options o;
  auto number = [&](int& i, const char* flag) -> std::string {
    if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
    return argv[++i];
  };
  auto to_u64 = [](const std::string& v, const char* flag) {
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v.c_str(), &end, 0);
    if (v.empty() || *end != '\0') usage_error(std::string(flag) + " takes a number, not '" + v + "'");
    return static_cast<std::uint64_t>(x);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sim") o.fabric = "sim";
    else if (a == "--ring") o.fabric = "ring";
    else if (a == "-s" || a == "--size") o.size = static_cast<std::uint32_t>(to_u64(number(i, "-s"), "-s"));
    else if (a == "-n" || a == "--iters") o.iters = to_u64(number(i, "-n"), "-n");
    else if (a == "-t" || a == "--tx-depth") o.depth = static_cast<std::uint32_t>(to_u64(number(i, "-t"), "-t"));
    else if (a == "-m" || a == "--mtu") o.mtu = static_cast<std::uint32_t>(to_u64(number(i, "-m"), "-m"));
    else if (a == "--lat") o.lat = true;
    else if (a == "--bw") o.lat = false;
    else if (a == "--loss") o.loss = std::atof(number(i, "--loss").c_str());
    else if (a == "--seed") o.seed = to_u64(number(i, "--seed"), "--seed");
    else if (a == "--verify") o.verify = true;
    else if (a == "--json") o.json = number(i, "--json");
    else if (a == "--pcap") o.pcap = number(i, "--pcap");
    else if (a == "--counters") o.counters = true;
    else if (a == "--dcqcn") {
      const std::string v = number(i, "--dcqcn");
      if (v == "on") {
        o.dcqcn.emplace();
      } else if (v != "off") {
        std::ifstream in(v);
        if (!in) usage_error("--dcqcn: cannot read '" + v + "' (give on, off, or a file like conf/dcqcn.conf)");
        std::stringstream text;
        text << in.rdbuf();
        o.dcqcn.emplace();
        if (const std::string err = uroce::cc::parse_dcqcn_params(text.str(), *o.dcqcn); !err.empty()) {
          usage_error("--dcqcn " + v + ": " + err);
        }
      }
    }
    else if (a == "--workers") o.workers = true;
    else if (a == "-q" || a == "--qps") o.qps = static_cast<std::uint32_t>(to_u64(number(i, "--qps"), "--qps"));
    else if (a == "--idle-qps") o.idle_qps = static_cast<std::uint32_t>(to_u64(number(i, "--idle-qps"), "--idle-qps"));
    else if (a == "--ip") {
      std::string v = number(i, "--ip");
      v = v.substr(0, v.find('/'));
      if (inet_pton(AF_INET, v.c_str(), o.ip.data()) != 1) usage_error("--ip: '" + v + "' is not an IPv4 address");
      o.have_ip = true;
      o.fabric = o.fabric.empty() ? "port" : o.fabric;
    } else if (a == "--port-id") o.port_id = static_cast<std::uint16_t>(to_u64(number(i, "--port-id"), "--port-id"));
    else if (a == "-p" || a == "--port") o.tcp_port = static_cast<std::uint16_t>(to_u64(number(i, "-p"), "-p"));
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!a.empty() && a[0] != '-' && o.op.empty()) o.op = a;
    else if (!a.empty() && a[0] != '-' && o.server.empty()) o.server = a;
    else usage_error("unknown argument '" + a + "'");
  }
  if (o.fabric.empty()) usage_error("no fabric given: pass --sim, -- --ring, or -- --ip ADDR/PREFIX after EAL arguments");
  if (!o.server.empty() && o.fabric != "port") usage_error("a server name goes with --ip (two processes)");
  if (o.workers && o.fabric != "ring") usage_error("--workers goes with --ring");
  if (o.idle_qps > 0 && o.fabric != "sim" && o.fabric != "ring") usage_error("--idle-qps goes with --sim or --ring");
  if (o.idle_qps > 1000) usage_error("--idle-qps: at most 1000 (the device's max_qp is 1024)");
  if (o.qps == 0 || o.qps > 1000) usage_error("--qps: 1 to 1000");
  if (o.qps + o.idle_qps > 1024) usage_error("--qps plus --idle-qps: at most 1024 (the device's max_qp)");
  if (o.depth < o.qps) usage_error("-t (messages in flight) must be at least --qps");
  if (!o.pcap.empty() && o.fabric != "sim") usage_error("--pcap records the simulated link; use --sim");
  if (o.loss > 0 && o.fabric != "sim") usage_error("--loss applies to the simulated link; use --sim");
  if (o.op != "write" && o.op != "read" && o.op != "send" && o.op != "atomic") {
    usage_error("OP must be write, read, send or atomic");
  }
  if (o.op == "atomic") o.size = 8;
  if (o.size > (1u << 30)) usage_error("-s: at most 1 GiB");
  if (o.iters == 0) usage_error("-n must be at least 1");
  if (o.depth == 0 || o.depth > 4096) usage_error("-t must be 1..4096");
  if (o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096) {
    usage_error("-m must be 256, 512, 1024, 2048 or 4096");
  }
  if (o.loss < 0 || o.loss >= 1) usage_error("--loss must be in [0, 1)");
  if (o.lat) o.depth = 1;
  return o;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

ibv_mtu mtu_enum(std::uint32_t b) {
  return b == 256 ? IBV_MTU_256 : b == 512 ? IBV_MTU_512 : b == 1024 ? IBV_MTU_1024 : b == 2048 ? IBV_MTU_2048 : IBV_MTU_4096;
}

// The work no RoCE stack can skip, per 4 KiB packet of payload: the ICRC
// when sending and when receiving, and the copy into the target; plus the
// simulated wire's copy, which every packet here also pays. GB/s of payload.
double bare_icrc_and_copy_gbps(double seconds_budget) {
  uroce::wire::FrameSpec spec;
  spec.bth.opcode = 0x07;  // RC WRITE Middle: BTH only, 4096 bytes of payload
  std::vector<std::uint8_t> payload(4096, 0x5a);
  std::vector<std::uint8_t> frame(4096 + 128);
  std::vector<std::uint8_t> wire(frame.size());
  std::vector<std::uint8_t> target(4096);
  const std::size_t n = uroce::wire::build_frame(spec, payload, frame);
  const std::size_t l3 = 14;
  std::uint64_t packets = 0;
  std::uint32_t sink = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 256; ++i) {
      const std::span<const std::uint8_t> pieces[] = {payload};
      sink ^= uroce::wire::icrc_compute(uroce::wire::crc32_default,
                                        std::span<const std::uint8_t>(frame).subspan(l3, 54 - l3), pieces);
      std::memcpy(wire.data(), frame.data(), n);
      sink ^= uroce::wire::icrc_compute_in_place(uroce::wire::crc32_default, std::span(wire).subspan(l3, n - l3 - 4));
      std::memcpy(target.data(), wire.data() + 54, 4096);
    }
    packets += 256;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds_budget);
  if (sink == 0x12345678) std::puts("");  // keep the work
  return static_cast<double>(packets) * 4096 / elapsed / 1e9;
}

struct Result {
  double seconds = 0;
  double cpu = 0;
  double virtual_seconds = 0;
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  std::uint64_t packets = 0;  // all frames both engines sent
  std::uint64_t data_packets = 0;
  std::vector<double> latency_us;
  bool ok = true;
  bool verified = true;
  std::string error;
  std::uint64_t retransmitted = 0;
  std::uint64_t timeouts = 0;
};

template <typename Fabric>
Result run(const Options& o, Fabric& net) {
  using namespace uroce;
  Result r;
  ConnectParams params;
  params.mtu = mtu_enum(o.mtu);
  const std::size_t slot = (o.size + 63) & ~std::size_t{63};
  const std::size_t bytes = slot * o.depth + 4096;
  ProtectionDomain* pda = net.a->alloc_pd();
  ProtectionDomain* pdb = net.b->alloc_pd();
  CompletionQueue* cqa = net.a->create_cq(static_cast<int>(o.depth * 2 + 16));
  CompletionQueue* cqb = net.b->create_cq(static_cast<int>(o.depth * 2 + 16));
  QpInitAttr init;
  // Slot s goes to QP s mod N: each QP has at most depth / N + 1 in flight.
  const std::uint32_t per_qp = o.depth / o.qps + 2;
  init.cap = ibv_qp_cap{per_qp, per_qp, 1, 1, 0};
  init.send_cq = init.recv_cq = cqa;
  std::vector<QueuePair*> qas, qbs;
  for (std::uint32_t q = 0; q < o.qps; ++q) {
    init.send_cq = init.recv_cq = cqa;
    qas.push_back(pda->create_qp(init));
    init.send_cq = init.recv_cq = cqb;
    qbs.push_back(pdb->create_qp(init));
  }
  auto* bufa = static_cast<std::uint8_t*>(net.a->alloc_buffer(bytes));
  auto* bufb = static_cast<std::uint8_t*>(net.b->alloc_buffer(bytes));
  if (std::count(qas.begin(), qas.end(), nullptr) + std::count(qbs.begin(), qbs.end(), nullptr) > 0 ||
      bufa == nullptr || bufb == nullptr) {
    r.ok = false;
    r.error = "set-up failed: " + net.a->last_error() + net.b->last_error();
    return r;
  }
  const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  MemoryRegion* mra = pda->reg_mr(bufa, bytes, all);
  MemoryRegion* mrb = pdb->reg_mr(bufb, bytes, all);
  for (std::uint32_t q = 0; q < o.qps; ++q) {
    if (const int rc = net.connect(qas[q], qbs[q], params); rc != 0) {
      r.ok = false;
      r.error = "connect failed: " + net.a->last_error() + net.b->last_error();
      return r;
    }
  }
  for (std::uint32_t i = 0; i < o.idle_qps; ++i) {
    QpInitAttr idle;
    idle.cap = ibv_qp_cap{16, 16, 1, 1, 0};
    idle.send_cq = idle.recv_cq = cqa;
    QueuePair* ia = pda->create_qp(idle);
    idle.send_cq = idle.recv_cq = cqb;
    QueuePair* ib = pdb->create_qp(idle);
    if (ia == nullptr || ib == nullptr || net.connect(ia, ib, params) != 0) {
      r.ok = false;
      r.error = "idle QP set-up failed: " + net.a->last_error() + net.b->last_error();
      return r;
    }
  }

  const bool send = o.op == "send";
  const bool read = o.op == "read";
  const bool atomic = o.op == "atomic";
  std::uint64_t counter_model = 0;
  std::vector<Clock::time_point> posted_at(o.depth);
  const perf::Pattern pattern(o.size);
  std::vector<std::uint64_t> slot_msg(o.depth);
  std::vector<bool> busy(o.depth, false);  // a slot's message is outstanding

  auto post_recv = [&](std::uint32_t s) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(bufb + s * slot), o.size, mrb->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = s;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return qbs[s % o.qps]->post_recv(&wr, &bad);
  };
  auto post = [&](std::uint64_t msg) {
    const auto s = static_cast<std::uint32_t>(msg % o.depth);
    slot_msg[s] = msg;
    ibv_sge sge{reinterpret_cast<std::uint64_t>(bufa + s * slot), o.size, mra->lkey};
    ibv_send_wr wr = perf::message_wr(o.op, s, sge, reinterpret_cast<std::uint64_t>(bufb + s * slot),
                                      reinterpret_cast<std::uint64_t>(bufb + bytes - 64), mrb->rkey);
    if (o.verify && !read && !atomic) pattern.fill(bufa + s * slot, msg);
    if (o.verify && read) pattern.fill(bufb + s * slot, msg);
    if (send && post_recv(s) != 0) return false;
    if (o.lat || msg % 16 == 0) posted_at[s] = Clock::now();
    busy[s] = true;
    ibv_send_wr* bad = nullptr;
    return qas[s % o.qps]->post_send(&wr, &bad) == 0;
  };
  auto check = [&](std::uint32_t s) {
    const std::uint64_t msg = slot_msg[s];
    if (atomic) {
      // Several QPs' fetch-and-adds interleave at the responder: only one
      // QP's results follow the model (the final value is checked anyway).
      std::uint64_t orig;
      std::memcpy(&orig, bufa + s * slot, 8);
      if (o.qps == 1 && orig != counter_model) r.verified = false;
      ++counter_model;
      return;
    }
    // The source slot still holds the message: it is reused only after this
    // completion.
    (void)msg;
    if (std::memcmp(bufa + s * slot, bufb + s * slot, o.size) != 0) r.verified = false;
  };

  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  const std::uint64_t v0 = net.clock.now_ns();
  auto last_progress = Clock::now();
  std::uint64_t last_done = 0;
  std::uint64_t next = 0;
  std::uint64_t done = 0;
  std::uint64_t recv_done = 0;
  ibv_wc wc[64];
  while (done < o.iters || (send && recv_done < o.iters)) {
    while (next < o.iters && next - done < o.depth && !busy[next % o.depth]) {
      if (!post(next++)) {
        r.ok = false;
        r.error = "post failed: " + net.a->last_error() + net.b->last_error();
        return r;
      }
    }
    if (!net.step()) {
      r.ok = false;
      r.error = "the link went idle with work outstanding";
      break;
    }
    if (done + recv_done != last_done) {
      last_done = done + recv_done;
      last_progress = Clock::now();
    } else if (Clock::now() - last_progress > std::chrono::seconds(20)) {
      r.ok = false;
      r.error = "no completion for 20 s: the transfer is stuck (see the QP counters)";
      break;
    }
    for (int k; (k = cqa->poll(64, wc)) > 0;) {
      const auto now = Clock::now();
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) {
          r.ok = false;
          r.error = std::string("completion error: ") + wc_status_str(wc[i].status);
          return r;
        }
        const auto s = static_cast<std::uint32_t>(wc[i].wr_id);
        // Latency of every message in --lat; of every 16th in bandwidth mode
        // (post to completion, queueing included), to keep the clock reads cheap.
        if (o.lat || slot_msg[s] % 16 == 0) {
          r.latency_us.push_back(std::chrono::duration<double, std::micro>(now - posted_at[s]).count());
        }
        if (o.verify && !send) check(s);
        busy[s] = false;
        ++done;
      }
    }
    if (send) {
      for (int k; (k = cqb->poll(64, wc)) > 0;) {
        for (int i = 0; i < k; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != o.size) {
            r.ok = false;
            r.error = std::string("receive completion error: ") + wc_status_str(wc[i].status);
            return r;
          }
          if (o.verify) check(static_cast<std::uint32_t>(wc[i].wr_id));
          ++recv_done;
        }
      }
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.cpu = cpu_seconds() - cpu0;
  r.virtual_seconds = static_cast<double>(net.clock.now_ns() - v0) / 1e9;
  r.messages = done;
  r.bytes = done * o.size;
  r.packets = net.frames_sent();
  r.data_packets = r.retransmitted = r.timeouts = 0;
  for (std::uint32_t q = 0; q < o.qps; ++q) {
    r.data_packets += qas[q]->counter("tx_packets") + qbs[q]->counter("read_responses_sent");
    r.retransmitted += qas[q]->counter("retransmitted_packets");
    r.timeouts += qas[q]->counter("timeouts");
  }
  if (atomic && o.verify) {
    std::uint64_t final_value;
    std::memcpy(&final_value, bufb + bytes - 64, 8);
    if (final_value != o.iters) r.verified = false;
  }
  return r;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const uroce::dpdk::SplitArgs args = uroce::dpdk::split_args(argc, argv);
  std::vector<const char*> app;
  for (const auto& a : args.app) app.push_back(a.c_str());
  try {
    o = parse(static_cast<int>(app.size()), app.data());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uroce-perf: %s (see uroce-perf --help)\n", e.what());
    return 2;
  }
  std::unique_ptr<uroce::dpdk::RingPair> ring;
  if (o.fabric == "port") {
    if (args.eal.size() == 1) {
      std::fprintf(stderr, "uroce-perf: no EAL arguments: name the port before '--' (see --help)\n");
      return 2;
    }
    if (const std::string err = uroce::dpdk::eal_init(args.eal); !err.empty()) {
      std::fprintf(stderr, "uroce-perf: %s\n", err.c_str());
      return 2;
    }
    uroce::perf::RemoteOptions ro;
    ro.op = o.op;
    ro.size = o.size;
    ro.iters = o.iters;
    ro.depth = o.depth;
    ro.mtu = o.mtu;
    ro.qps = o.qps;
    ro.lat = o.lat;
    ro.verify = o.verify;
    ro.json = o.json;
    ro.counters = o.counters;
    ro.ip = o.ip;
    ro.port_id = o.port_id;
    ro.tcp_port = o.tcp_port;
    ro.server = o.server;
    ro.dcqcn = o.dcqcn ? &*o.dcqcn : nullptr;
    std::printf("uroce-perf %s %s %s: %u B messages, %llu iterations, MTU %u, %s\n", uroce::kVersion,
                o.server.empty() ? "server" : "client", o.op.c_str(), o.size, static_cast<unsigned long long>(o.iters),
                o.mtu, o.lat ? "latency" : "bandwidth");
    std::fflush(stdout);
    const int rc = uroce::perf::run_remote(ro);
    uroce::dpdk::eal_cleanup();
    return rc;
  }
  if (o.fabric == "ring") {
    std::vector<std::string> eal = args.eal;
    if (eal.size() == 1) {
      for (const char* a : {"--no-huge", "--no-shconf", "--no-pci", "-l", "0", "-m", "512", "--log-level=lib.*:error"}) {
        eal.emplace_back(a);
      }
    }
    if (const std::string err = uroce::dpdk::eal_init(eal); !err.empty()) {
      std::fprintf(stderr, "uroce-perf: %s\n", err.c_str());
      return 2;
    }
    if (const std::string w = uroce::dpdk::no_huge_warning("uroce-perf"); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
    std::string err;
    ring = uroce::dpdk::RingPair::create("uroce_perf", err, 1, o.dcqcn ? &*o.dcqcn : nullptr);
    if (!ring) {
      std::fprintf(stderr, "uroce-perf: %s\n", err.c_str());
      return 1;
    }
    if (o.workers && (ring->a->start_worker(0) != 0 || ring->b->start_worker(1) != 0)) {
      std::fprintf(stderr, "uroce-perf: %s\n", ring->a->last_error().c_str());
      return 1;
    }
  }
  std::printf("uroce-perf %s --%s %s: %u B messages, %llu iterations, MTU %u, %s, tx depth %u, loss %g, seed %llu\n",
              uroce::kVersion, o.fabric.c_str(), o.op.c_str(), o.size, static_cast<unsigned long long>(o.iters), o.mtu,
              o.lat ? "latency" : "bandwidth", o.depth, o.loss, static_cast<unsigned long long>(o.seed));
  std::puts(o.fabric == "sim"
                ? "Both ends run in this process on one core over the simulated link: CPU figures are the stack's."
                : o.workers ? "Two DPDK ports joined by net_ring; each device's engine on its own core, this thread posts and polls."
                            : "Both ends run in this process on one core, on two DPDK ports joined by net_ring.");
  Result r;
  if (ring) {
    r = run(o, *ring);
  } else {
    uroce::sim::Impairments imp;
    imp.loss = o.loss;
    uroce::sim::SimPair net(o.seed, imp, imp, o.dcqcn ? &*o.dcqcn : nullptr);
    if (!o.pcap.empty() && !net.link.tap(o.pcap, r.error)) {
      std::fprintf(stderr, "uroce-perf: %s\n", r.error.c_str());
      return 1;
    }
    r = run(o, net);
  }
  if (!r.ok) {
    std::fprintf(stderr, "uroce-perf: %s\n", r.error.c_str());
    return 1;
  }
  const double gbps = static_cast<double>(r.bytes) * 8 / r.seconds / 1e9;
  const double mpps = static_cast<double>(r.messages) / r.seconds / 1e6;
  const double ns_per_packet = r.cpu * 1e9 / static_cast<double>(std::max<std::uint64_t>(r.data_packets, 1));
  std::printf("%10s %12s %14s %14s %16s %14s\n", "#bytes", "#iterations", "BW [Gb/s]", "MsgRate [Mpps]",
              "CPU ns/packet", "retransmitted");
  std::printf("%10u %12llu %14.2f %14.3f %16.1f %14llu\n", o.size, static_cast<unsigned long long>(r.messages), gbps,
              mpps, ns_per_packet, static_cast<unsigned long long>(r.retransmitted));
  std::printf("data packets %llu, frames on the link %llu, timeouts %llu, virtual time %.6f s, wall %.3f s, CPU %.3f s\n",
              static_cast<unsigned long long>(r.data_packets), static_cast<unsigned long long>(r.packets),
              static_cast<unsigned long long>(r.timeouts), r.virtual_seconds, r.seconds, r.cpu);
  {
    std::printf("latency [us, wall clock, both ends on one core%s]: min %.2f p50 %.2f p99 %.2f p99.9 %.2f max %.2f\n",
                o.lat ? "" : ", every 16th message, queueing included",
                percentile(r.latency_us, 0), percentile(r.latency_us, 50), percentile(r.latency_us, 99),
                percentile(r.latency_us, 99.9), percentile(r.latency_us, 100));
  }
  // Cost: the same payload bytes through only the ICRC and the copies.
  const double bare = bare_icrc_and_copy_gbps(0.2);
  const double payload_gbytes_per_cpu_s = static_cast<double>(r.bytes) / r.cpu / 1e9;
  std::printf("bare ICRC (TX and RX) + copies, 4 KiB packets: %.2f GB/s; this run: %.2f GB/s of payload per CPU second; "
              "ratio %.3f\n",
              bare, payload_gbytes_per_cpu_s, payload_gbytes_per_cpu_s / bare);
  if (o.verify) std::printf("verification: %s\n", r.verified ? "PASSED (every byte and atomic result)" : "FAILED");

  if (!o.json.empty()) {
    std::ofstream out(o.json);
    if (!out) {
      std::fprintf(stderr, "uroce-perf: cannot write %s\n", o.json.c_str());
      return 1;
    }
    out << "{\"tool\":\"uroce-perf\",\"mode\":\"" << o.fabric << "\",\"op\":\"" << o.op << "\",\"test\":\"" << (o.lat ? "lat" : "bw")
        << "\",\"size\":" << o.size << ",\"iterations\":" << r.messages << ",\"mtu\":" << o.mtu
        << ",\"tx_depth\":" << o.depth << ",\"loss\":" << o.loss << ",\"seed\":" << o.seed << ",\"bw_gbps\":" << gbps
        << ",\"msg_rate_mpps\":" << mpps << ",\"cpu_ns_per_packet\":" << ns_per_packet
        << ",\"data_packets\":" << r.data_packets << ",\"retransmitted\":" << r.retransmitted
        << ",\"timeouts\":" << r.timeouts << ",\"wall_s\":" << r.seconds << ",\"cpu_s\":" << r.cpu
        << ",\"virtual_s\":" << r.virtual_seconds << ",\"bare_icrc_copy_gbytes_s\":" << bare
        << ",\"ratio_to_bare\":" << payload_gbytes_per_cpu_s / bare;
    {
      out << ",\"lat_us\":{\"min\":" << percentile(r.latency_us, 0) << ",\"p50\":" << percentile(r.latency_us, 50)
          << ",\"p99\":" << percentile(r.latency_us, 99) << ",\"p999\":" << percentile(r.latency_us, 99.9)
          << ",\"max\":" << percentile(r.latency_us, 100) << "}";
    }
    if (o.verify) out << ",\"verified\":" << (r.verified ? "true" : "false");
    out << "}\n";
  }
  return o.verify && !r.verified ? 1 : 0;
}
