// uroce-bench-raw: the raw DPDK baseline that the performance report puts
// beside uroce's figures, on the same link in the same run. There is no RoCE
// and no stack here, only Ethernet frames of one size with a local
// experimental ethertype:
//   pingpong  the server bounces every frame back and the client times each
//             round trip (what uroce's 8-byte WRITE latency is held against)
//   rate      the client sends bursts as fast as one core can and the
//             server counts what arrives (what uroce's message rate is put
//             beside)
// One process per side, one lcore each, queue 0 of port 0.
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/args.h"
#include "dpdk/eal.h"
#include "dpdk/port.h"
#include "dpdk/rte.h"

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_ether.h>

namespace uroce::bench {
namespace {

constexpr const char* kUsage =
    "usage: uroce-bench-raw [EAL args] -- pingpong [--size BYTES] [-n N] [--warmup N] [--server] [--json FILE]\n"
    "       uroce-bench-raw [EAL args] -- rate [--size BYTES] [--seconds S] [--server] [--json FILE]\n"
    "  Raw DPDK between two processes, one per side, on DPDK port 0 queue 0: the baseline for\n"
    "  uroce's figures on the same link. Frames carry ethertype 0x88b5 (IEEE local experimental).\n"
    "  pingpong   the --server side bounces each frame back (MACs swapped); the client times\n"
    "             N round trips with the TSC after a warm-up and prints min/p50/p99/avg/max in us\n"
    "  rate       the client sends bursts of 32 for S seconds; the --server side counts what it\n"
    "             receives and prints Mpps and Gb/s (frame bits, no FCS) from first to last frame\n"
    "  --size BYTES   Ethernet frame length without FCS, 60..9014 (default 82: an 8-byte RDMA\n"
    "                 WRITE Only frame, 14+20+8+12+16+8+4)\n"
    "  -n, --iters N  timed round trips (pingpong, default 10000)\n"
    "  --warmup N     round trips before timing (pingpong, default 1000)\n"
    "  --seconds S    sending time (rate, default 3; the server needs the same S)\n"
    "  --server       the bouncing (pingpong) or receiving (rate) side; start it first\n"
    "  --json FILE    also write the result as JSON (the client's in pingpong, each side's in rate)\n"
    "Example (memif, server first):\n"
    "  uroce-bench-raw --no-huge --no-shconf --no-pci -m 1024 -l 0 --file-prefix=rs \\\n"
    "      --vdev=net_memif0,role=server,bsize=8192,socket=/tmp/raw.sock -- pingpong --server\n"
    "  uroce-bench-raw --no-huge --no-shconf --no-pci -m 1024 -l 1 --file-prefix=rc \\\n"
    "      --vdev=net_memif0,role=client,bsize=8192,socket=/tmp/raw.sock -- pingpong -n 20000\n";

enum class Mode { kPingpong, kRate };

struct Options {
  Mode mode = Mode::kPingpong;
  bool server = false;
  std::uint32_t size = 82;
  std::uint32_t iters = 10000;
  std::uint32_t warmup = 1000;
  std::uint32_t seconds = 3;
  std::string json;
};

// Both frame kinds: the minimum Ethernet frame (no FCS), and a 9000-byte
// MTU with its Ethernet header.
constexpr std::uint32_t kMinFrame = 60;
constexpr std::uint32_t kMaxFrame = 9014;
// The port's mbufs are sized as uroce's own ports size them (lib/device),
// so both run on the same memory; af_packet also needs room for a whole
// framesz block in one mbuf.
constexpr std::uint16_t kPortMaxFrame = 9018;
static_assert(kMaxFrame <= kPortMaxFrame);

using app::usage_error;

Options parse(const std::vector<std::string>& args) {
  Options o;
  app::ArgReader reader(args);
  bool have_mode = false;
  bool have_iters = false;
  bool have_warmup = false;
  bool have_seconds = false;
  auto u32 = [&](const char* flag) {
    const std::uint64_t v = reader.number(flag);
    if (v > UINT32_MAX) usage_error(std::string(flag) + " is too large");
    return static_cast<std::uint32_t>(v);
  };
  for (std::string a; reader.next(a);) {
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "pingpong" || a == "rate") {
      if (have_mode) usage_error("one mode only: 'pingpong' or 'rate'");
      o.mode = a == "rate" ? Mode::kRate : Mode::kPingpong;
      have_mode = true;
    } else if (a == "-s" || a == "--size") o.size = u32("--size");
    else if (a == "-n" || a == "--iters") o.iters = u32("-n"), have_iters = true;
    else if (a == "--warmup") o.warmup = u32("--warmup"), have_warmup = true;
    else if (a == "-t" || a == "--seconds") o.seconds = u32("--seconds"), have_seconds = true;
    else if (a == "--server") o.server = true;
    else if (a == "--json") o.json = reader.value("--json");
    else usage_error("unknown argument '" + a + "'");
  }
  if (!have_mode) usage_error("name a mode: 'pingpong' or 'rate'");
  if (o.size < kMinFrame || o.size > kMaxFrame) {
    usage_error("--size must be " + std::to_string(kMinFrame) + ".." + std::to_string(kMaxFrame) +
                " (an Ethernet frame without FCS), not " + std::to_string(o.size));
  }
  if (o.mode == Mode::kRate && (have_iters || have_warmup)) usage_error("-n and --warmup are for pingpong; rate takes --seconds");
  if (o.mode == Mode::kPingpong && have_seconds) usage_error("--seconds is for rate; pingpong takes -n");
  if (o.iters == 0) usage_error("-n must be positive");
  if (o.seconds == 0 || o.seconds > 3600) usage_error("--seconds must be 1..3600");
  if (o.mode == Mode::kPingpong && o.server && !o.json.empty()) {
    usage_error("--json: the pingpong server measures nothing; give it to the client");
  }
  return o;
}

// What follows the Ethernet header in every frame this tool sends: a magic
// word so stray frames on a shared link are told apart, the frame's kind and
// a sequence number (the round trip's, in pingpong). Big-endian on the wire.
enum class Kind : std::uint32_t { kPing = 1, kEnd = 2, kData = 3 };
constexpr std::uint16_t kEtherType = 0x88b5;  // IEEE 802 local experimental 1
constexpr std::uint32_t kMagic = 0x75726177;  // "uraw"
constexpr std::uint32_t kKindOffset = RTE_ETHER_HDR_LEN + 4;
constexpr std::uint32_t kSeqOffset = RTE_ETHER_HDR_LEN + 8;
constexpr std::uint32_t kHeaderBytes = RTE_ETHER_HDR_LEN + 16;
static_assert(sizeof(rte_ether_hdr) == RTE_ETHER_HDR_LEN);
static_assert(kHeaderBytes <= kMinFrame);

constexpr std::uint16_t kBurst = 32;
constexpr double kLinkWaitS = 10;     // for the peer to connect (memif) or the link to come up
constexpr double kPeerWaitS = 10;     // for the first frame once the link is up
constexpr double kPingTimeoutS = 0.2; // a round trip not back by then is lost; a shared core may stall for ms
constexpr double kIdleS = 1;          // the receiver's end: this long without frames
constexpr int kMaxLostInARow = 50;    // the peer is gone: 10 s of lost round trips
constexpr double kLingerS = 3;        // for the peer to close first (linger)

rte_mempool* pool_of(const dpdk::Port& port) { return static_cast<rte_mempool*>(port.pool()); }

std::uint64_t cycles(double seconds) { return static_cast<std::uint64_t>(seconds * static_cast<double>(rte_get_tsc_hz())); }

double to_us(std::uint64_t c) { return static_cast<double>(c) * 1e6 / static_cast<double>(rte_get_tsc_hz()); }

void put_be32(rte_mbuf* m, std::uint32_t offset, std::uint32_t v) {
  const rte_be32_t be = rte_cpu_to_be_32(v);
  std::memcpy(rte_pktmbuf_mtod_offset(m, std::uint8_t*, offset), &be, sizeof be);
}

void put_seq(rte_mbuf* m, std::uint64_t seq) {
  const rte_be64_t be = rte_cpu_to_be_64(seq);
  std::memcpy(rte_pktmbuf_mtod_offset(m, std::uint8_t*, kSeqOffset), &be, sizeof be);
}

// One frame of `size` bytes from the port's pool: broadcast (the peer's MAC
// is not known, and a bounce swaps it for ours), our MAC, kEtherType, the
// header, zeros. nullptr when the pool is empty.
rte_mbuf* build_frame(const dpdk::Port& port, std::uint32_t size, Kind kind, std::uint64_t seq) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_of(port));
  if (m == nullptr) return nullptr;
  auto* data = reinterpret_cast<std::uint8_t*>(rte_pktmbuf_append(m, static_cast<std::uint16_t>(size)));
  if (data == nullptr) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  std::memset(data, 0, size);
  rte_ether_hdr eth{};
  std::memset(eth.dst_addr.addr_bytes, 0xff, RTE_ETHER_ADDR_LEN);
  rte_eth_macaddr_get(port.id(), &eth.src_addr);
  eth.ether_type = rte_cpu_to_be_16(kEtherType);
  std::memcpy(data, &eth, sizeof eth);
  put_be32(m, RTE_ETHER_HDR_LEN, kMagic);
  put_be32(m, kKindOffset, static_cast<std::uint32_t>(kind));
  put_seq(m, seq);
  return m;
}

struct Probe {
  Kind kind;
  std::uint64_t seq;
};

// Whether `m` is one of ours; its kind and sequence number into `p`.
bool read_probe(const rte_mbuf* m, Probe& p) {
  if (rte_pktmbuf_data_len(m) < kHeaderBytes) return false;
  const auto* data = rte_pktmbuf_mtod(m, const std::uint8_t*);
  rte_be16_t type;
  rte_be32_t magic;
  rte_be32_t kind;
  rte_be64_t seq;
  std::memcpy(&type, data + 2 * RTE_ETHER_ADDR_LEN, sizeof type);
  std::memcpy(&magic, data + RTE_ETHER_HDR_LEN, sizeof magic);
  if (rte_be_to_cpu_16(type) != kEtherType || rte_be_to_cpu_32(magic) != kMagic) return false;
  std::memcpy(&kind, data + kKindOffset, sizeof kind);
  std::memcpy(&seq, data + kSeqOffset, sizeof seq);
  p.kind = static_cast<Kind>(rte_be_to_cpu_32(kind));
  p.seq = rte_be_to_cpu_64(seq);
  return true;
}

// Sends `m` and keeps it: the driver's free after its copy (memif,
// af_packet) or its DMA only drops the reference added here, so a frame is
// built once and sent many times. False if the TX ring was full.
bool send_kept(std::uint16_t port, rte_mbuf* m) {
  rte_mbuf_refcnt_update(m, 1);
  if (rte_eth_tx_burst(port, 0, &m, 1) == 1) return true;
  rte_mbuf_refcnt_update(m, -1);
  return false;
}

bool wait_link_up(std::uint16_t port) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kLinkWaitS);
  while (std::chrono::steady_clock::now() < until) {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Sends the frame that ends a run, retrying a full TX ring for up to a
// second: the peer stops polling when it arrives (or on its idle timeout if
// the link drops it).
void send_end(const dpdk::Port& port, std::uint32_t size) {
  rte_mbuf* end = build_frame(port, size, Kind::kEnd, 0);
  if (end == nullptr) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (rte_eth_tx_burst(port.id(), 0, &end, 1) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      rte_pktmbuf_free(end);
      return;
    }
  }
}

// Waits for the peer to close its port first, after send_end. memif in DPDK
// 22.11 unmaps a link's shared memory on EAL's interrupt thread when the
// peer leaves, while the datapath may be inside rx_burst on it: a SIGSEGV
// (seen in the rate receiver when the sender closed first). The side that
// keeps polling must therefore close first; other drivers need no wait.
void linger(const dpdk::Port& port) {
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port.id(), &info) != 0 || info.driver_name == nullptr ||
      std::strstr(info.driver_name, "memif") == nullptr) {
    return;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kLingerS);
  while (std::chrono::steady_clock::now() < until) {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(port.id(), &link) == 0 && link.link_status == RTE_ETH_LINK_DOWN) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool write_json(const std::string& path, const std::string& text) {
  if (path.empty()) return true;
  std::FILE* f = std::fopen(path.c_str(), "w");
  bool written = f != nullptr && std::fputs(text.c_str(), f) >= 0;
  if (f != nullptr && std::fclose(f) != 0) written = false;
  if (!written) std::fprintf(stderr, "uroce-bench-raw: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
  return written;
}

std::string fmt(const char* format, auto... values) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, values...);
  return buf;
}

// Nearest rank: the smallest sample at or above fraction `p` of them.
std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double p) {
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// --- pingpong --------------------------------------------------------------

int pingpong_client(const Options& o, const dpdk::Port& port) {
  const std::uint16_t id = port.id();
  rte_mbuf* ping = build_frame(port, o.size, Kind::kPing, 0);
  if (ping == nullptr) {
    std::fprintf(stderr, "uroce-bench-raw: cannot build the frame (mbuf pool empty)\n");
    return 1;
  }
  std::vector<std::uint64_t> rtt;
  rtt.reserve(o.iters);
  std::array<rte_mbuf*, kBurst> rx{};
  const std::uint64_t timeout = cycles(kPingTimeoutS);
  std::uint64_t seq = 0;
  std::uint64_t lost = 0;
  std::uint32_t warm = 0;
  int lost_in_a_row = 0;
  while (rtt.size() < o.iters) {
    put_seq(ping, ++seq);
    // A full TX ring is retried until the round trip's timeout.
    const std::uint64_t tried = rte_rdtsc();
    std::uint64_t t0 = tried;
    bool sent = send_kept(id, ping);
    while (!sent && (t0 = rte_rdtsc()) - tried < timeout) sent = send_kept(id, ping);
    std::uint64_t t1 = 0;
    while (sent && t1 == 0) {
      const std::uint16_t n = rte_eth_rx_burst(id, 0, rx.data(), kBurst);
      const std::uint64_t now = rte_rdtsc();
      for (std::uint16_t i = 0; i < n; ++i) {
        // A late echo of an earlier, timed-out round trip is not this one.
        Probe p{};
        if (read_probe(rx[i], p) && p.kind == Kind::kPing && p.seq == seq) t1 = now;
      }
      if (n > 0) rte_pktmbuf_free_bulk(rx.data(), n);
      if (t1 == 0 && now - t0 > timeout) break;
    }
    if (t1 == 0) {
      if (warm >= o.warmup) ++lost;
      if (++lost_in_a_row == kMaxLostInARow) {
        std::fprintf(stderr, "uroce-bench-raw: no echo for %d frames in a row: is the --server side running?\n",
                     kMaxLostInARow);
        rte_pktmbuf_free(ping);
        return 1;
      }
      continue;
    }
    lost_in_a_row = 0;
    if (warm < o.warmup) ++warm;
    else rtt.push_back(t1 - t0);
  }
  rte_pktmbuf_free(ping);
  send_end(port, o.size);
  linger(port);

  std::uint64_t sum = 0;
  for (auto c : rtt) sum += c;
  std::sort(rtt.begin(), rtt.end());
  const double min = to_us(rtt.front());
  const double p50 = to_us(percentile(rtt, 0.50));
  const double p99 = to_us(percentile(rtt, 0.99));
  const double max = to_us(rtt.back());
  const double avg = to_us(sum) / static_cast<double>(rtt.size());
  std::printf("pingpong %u B frames: %u round trips (after %u warm-up), %lu lost: "
              "min %.2f p50 %.2f p99 %.2f avg %.2f max %.2f us\n",
              o.size, o.iters, o.warmup, static_cast<unsigned long>(lost), min, p50, p99, avg, max);
  const std::string json = fmt(
      "{\"mode\":\"pingpong\",\"frame_bytes\":%u,\"iters\":%u,\"p50_us\":%.3f,\"min_us\":%.3f,\"p99_us\":%.3f,"
      "\"avg_us\":%.3f,\"max_us\":%.3f,\"lost\":%lu}\n",
      o.size, o.iters, p50, min, p99, avg, max, static_cast<unsigned long>(lost));
  return write_json(o.json, json) ? 0 : 1;
}

int pingpong_server(const dpdk::Port& port) {
  const std::uint16_t id = port.id();
  std::array<rte_mbuf*, kBurst> rx{};
  std::array<rte_mbuf*, kBurst> tx{};
  std::uint64_t echoed = 0;
  std::uint64_t dropped = 0;
  std::uint64_t last = rte_rdtsc();
  const std::uint64_t idle = cycles(kPeerWaitS);
  bool end = false;
  while (!end) {
    const std::uint16_t n = rte_eth_rx_burst(id, 0, rx.data(), kBurst);
    if (n == 0) {
      if (rte_rdtsc() - last > idle) {
        std::fprintf(stderr, "uroce-bench-raw: no frame for %.0f s; stopping\n", kPeerWaitS);
        break;
      }
      continue;
    }
    std::uint16_t out = 0;
    for (std::uint16_t i = 0; i < n; ++i) {
      rte_mbuf* m = rx[i];
      Probe p{};
      if (!read_probe(m, p) || p.kind != Kind::kPing) {
        end = end || p.kind == Kind::kEnd;
        rte_pktmbuf_free(m);
        continue;
      }
      auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
      std::swap(eth->dst_addr, eth->src_addr);
      tx[out++] = m;
    }
    const std::uint16_t sent = out > 0 ? rte_eth_tx_burst(id, 0, tx.data(), out) : 0;
    if (sent < out) rte_pktmbuf_free_bulk(tx.data() + sent, out - sent);
    echoed += sent;
    dropped += out - sent;
    last = rte_rdtsc();
  }
  std::printf("pingpong server: echoed %lu frames, %lu dropped (TX ring full)\n", static_cast<unsigned long>(echoed),
              static_cast<unsigned long>(dropped));
  return 0;
}

// --- rate ------------------------------------------------------------------

int rate_sender(const Options& o, const dpdk::Port& port) {
  const std::uint16_t id = port.id();
  // kBurst frames built once and sent again and again (send_kept's
  // reference trick, a burst at a time): the loop measures the link and
  // the driver, not mbuf allocation and header writes.
  std::array<rte_mbuf*, kBurst> frames{};
  for (std::uint16_t i = 0; i < kBurst; ++i) {
    frames[i] = build_frame(port, o.size, Kind::kData, i);
    if (frames[i] == nullptr) {
      std::fprintf(stderr, "uroce-bench-raw: cannot build the frames (mbuf pool empty)\n");
      for (std::uint16_t j = 0; j < i; ++j) rte_pktmbuf_free(frames[j]);
      return 1;
    }
  }
  std::uint64_t sent_total = 0;
  const std::uint64_t start = rte_rdtsc();
  const std::uint64_t stop = start + cycles(o.seconds);
  std::uint64_t now = start;
  while ((now = rte_rdtsc()) < stop) {
    for (rte_mbuf* m : frames) rte_mbuf_refcnt_update(m, 1);
    const std::uint16_t sent = rte_eth_tx_burst(id, 0, frames.data(), kBurst);
    for (std::uint16_t i = sent; i < kBurst; ++i) rte_mbuf_refcnt_update(frames[i], -1);
    sent_total += sent;
  }
  for (rte_mbuf* m : frames) rte_pktmbuf_free(m);
  send_end(port, o.size);
  linger(port);
  const double secs = to_us(now - start) / 1e6;
  const double mpps = static_cast<double>(sent_total) / secs / 1e6;
  const double gbps = static_cast<double>(sent_total) * o.size * 8 / secs / 1e9;
  std::printf("rate sender %u B frames: %lu frames in %.2f s: %.3f Mpps, %.3f Gb/s sent\n", o.size,
              static_cast<unsigned long>(sent_total), secs, mpps, gbps);
  return write_json(o.json, fmt("{\"mode\":\"rate\",\"role\":\"sender\",\"frame_bytes\":%u,\"tx_frames\":%lu,"
                                "\"tx_mpps\":%.4f,\"tx_gbps\":%.4f}\n",
                                o.size, static_cast<unsigned long>(sent_total), mpps, gbps))
             ? 0
             : 1;
}

int rate_receiver(const Options& o, const dpdk::Port& port) {
  const std::uint16_t id = port.id();
  std::array<rte_mbuf*, kBurst> rx{};
  // The rate runs from the arrival of the first burst with the sender's
  // frames to the last burst's, so that first burst is not counted (it
  // arrived before the interval began).
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  std::uint64_t frames = 0;
  std::uint64_t bytes = 0;
  const std::uint64_t idle = cycles(kIdleS);
  const std::uint64_t peer_deadline = rte_rdtsc() + cycles(kPeerWaitS);
  const std::uint64_t span = cycles(o.seconds + kIdleS);
  for (;;) {
    const std::uint16_t n = rte_eth_rx_burst(id, 0, rx.data(), kBurst);
    const std::uint64_t now = rte_rdtsc();
    if (n == 0) {
      if (first == 0 && now > peer_deadline) {
        std::fprintf(stderr, "uroce-bench-raw: no frame within %.0f s: is the sender running?\n", kPeerWaitS);
        return 1;
      }
      if (first != 0 && (now - last > idle || now - first > span)) break;
      continue;
    }
    // The sender's end frame is the last it sends, so only each burst's last
    // frame is read: the loop counts frames without touching their contents.
    Probe p{};
    const bool end = read_probe(rx[n - 1], p) && p.kind == Kind::kEnd;
    const std::uint16_t data = end ? static_cast<std::uint16_t>(n - 1) : n;
    if (first == 0) {
      // Only the sender's frames start the clock, not those a fresh veth's
      // kernel sends (IPv6 router solicitations, MLD reports).
      for (std::uint16_t i = 0; i < data && first == 0; ++i) {
        if (read_probe(rx[i], p) && p.kind == Kind::kData) first = last = now;
      }
    } else if (data > 0) {
      for (std::uint16_t i = 0; i < data; ++i) bytes += rte_pktmbuf_pkt_len(rx[i]);
      frames += data;
      last = now;
    }
    rte_pktmbuf_free_bulk(rx.data(), n);
    if (end || (first != 0 && now - first > span)) break;
  }
  if (frames == 0 || last == first) {
    std::fprintf(stderr, "uroce-bench-raw: only one burst arrived; no rate to report\n");
    return 1;
  }
  const double secs = to_us(last - first) / 1e6;
  const double mpps = static_cast<double>(frames) / secs / 1e6;
  const double gbps = static_cast<double>(bytes) * 8 / secs / 1e9;
  std::printf("rate %u B frames: %lu frames in %.2f s: %.3f Mpps, %.3f Gb/s received\n", o.size,
              static_cast<unsigned long>(frames), secs, mpps, gbps);
  return write_json(o.json, fmt("{\"mode\":\"rate\",\"frame_bytes\":%u,\"rx_frames\":%lu,\"seconds\":%.3f,"
                                "\"rx_mpps\":%.4f,\"rx_gbps\":%.4f}\n",
                                o.size, static_cast<unsigned long>(frames), secs, mpps, gbps))
             ? 0
             : 1;
}

int run(const Options& o) {
  std::string error;
  dpdk::PortConfig config;
  config.max_frame = kPortMaxFrame;
  config.zero_copy_tx = false;
  config.ipv4_checksum_offload = false;
  std::unique_ptr<dpdk::Port> port = dpdk::Port::open(config, error);
  if (port == nullptr) {
    std::fprintf(stderr, "uroce-bench-raw: %s\n", error.c_str());
    return 1;
  }
  if (!wait_link_up(port->id())) {
    std::fprintf(stderr, "uroce-bench-raw: port %u: link down after %.0f s (is the other side running?)\n", port->id(),
                 kLinkWaitS);
    return 1;
  }
  int rc = 0;
  if (o.mode == Mode::kPingpong) rc = o.server ? pingpong_server(*port) : pingpong_client(o, *port);
  else rc = o.server ? rate_receiver(o, *port) : rate_sender(o, *port);
  std::fflush(stdout);  // the figures are out even if the teardown below fails
  port.reset();
  return rc;
}

}  // namespace
}  // namespace uroce::bench

int main(int argc, char** argv) {
  const uroce::dpdk::SplitArgs args = uroce::dpdk::split_args(argc, argv);
  uroce::bench::Options o;
  try {
    o = uroce::bench::parse(args.app);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uroce-bench-raw: %s (see uroce-bench-raw --help)\n", e.what());
    return 2;
  }
  if (args.eal.size() == 1) {
    std::fprintf(stderr, "uroce-bench-raw: no EAL arguments: add the port with --vdev before '--' (see --help)\n");
    return 2;
  }
  if (const std::string err = uroce::dpdk::eal_init(args.eal); !err.empty()) {
    std::fprintf(stderr, "uroce-bench-raw: %s\n", err.c_str());
    return 1;
  }
  const int rc = uroce::bench::run(o);
  uroce::dpdk::eal_cleanup();
  return rc;
}
