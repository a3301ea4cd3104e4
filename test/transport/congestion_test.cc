// DCQCN on the wire, over the simulated link: ECN-capable marking on what
// is sent, CNPs for CE-marked packets (at most one per QP per interval, with
// the configured DSCP, BECN, the peer's QPN and a good ICRC, dissected by
// tshark as CNP), the sender's rate cut by the CNPs it receives, and a CNP
// for an unknown QP counted and dropped.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <filesystem>

#include "cc/dcqcn.h"
#include "support/frame_helpers.h"
#include "pcap/pcap_file.h"
#include "support/rc_fixture.h"
#include "support/scripted_port.h"
#include "transport/qp.h"
#include "wire/frame.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

struct Seen {
  std::uint64_t at_ns;
  int from;
  std::vector<std::uint8_t> frame;
};

// Paced at line rate from the first packet, with no cap on packets in
// flight (the rig's link has no rate, so a 4-packet cap at 10 Gb/s would
// make the QP wait for ACKs, then spend its pacing burst): these tests are
// about CNPs and pacing, not about where a new QP's rate starts or its
// window (WindowCapHoldsPacketsInFlightAtTheBdp below).
cc::DcqcnParams params() {
  cc::DcqcnParams p;
  p.line_rate_bps = 10e9;
  p.start_rate_fraction = 1;
  p.window_rtt_ns = 0;
  p.cnp_interval_ns = 50'000;
  p.cnp_dscp = 46;
  p.data_ecn = 2;
  return p;
}

TEST(Congestion, MarkedTrafficBringsCnpsAtMostOnePerIntervalAndCutsTheSendersRate) {
  const cc::DcqcnParams cp = params();
  sim::Impairments to_b;
  to_b.gbps = 10;
  to_b.ce_mark = 0.5;  // a congested switch between A and B
  sim::Impairments to_a;
  to_a.gbps = 10;
  constexpr std::size_t kBytes = 4u << 20;
  RcPair p(3, kBytes, {}, to_b, to_a, 1024, &cp);
  ASSERT_EQ(p.connect_rc, 0);
  std::vector<Seen> seen;
  p.net.link.observe([&](int from, std::span<const std::uint8_t> f) {
    seen.push_back(Seen{p.net.clock.now_ns(), from, std::vector<std::uint8_t>(f.begin(), f.end())});
  });
  fill_pattern(p.bufa, kBytes / 2, 5);
  constexpr int kMessages = 32;
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, static_cast<std::uint64_t>(i) * 65536, 65536,
                          kBytes / 2 + static_cast<std::uint64_t>(i) * 65536, static_cast<std::uint64_t>(i)),
              0);
  }
  const auto done = p.wait(p.cqa, kMessages);
  ASSERT_EQ(done.size(), static_cast<std::size_t>(kMessages));
  for (const auto& wc : done) ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb + kBytes / 2, kBytes / 2), 0);

  std::size_t data = 0;
  std::vector<std::uint64_t> cnp_times;
  for (const Seen& s : seen) {
    wire::ParsedFrame f;
    ASSERT_EQ(wire::parse_frame(s.frame, f), wire::ParseStatus::kOk) << "every frame keeps a good ICRC";
    if (f.opcode == static_cast<std::uint8_t>(wire::Opcode::kCnp)) {
      // From B (the notification point) to A's QP.
      EXPECT_EQ(s.from, 1);
      EXPECT_EQ(f.bth().dest_qp.get(), p.qa->qp_num());
      EXPECT_TRUE(f.bth().becn());
      EXPECT_EQ(f.ipv4().tos >> 2, 46) << "the configured DSCP";
      EXPECT_EQ(f.payload_length, 16u);
      for (std::uint8_t b : f.payload()) EXPECT_EQ(b, 0);
      cnp_times.push_back(s.at_ns);
    } else if (s.from == 0) {
      ++data;
      EXPECT_EQ(f.ecn(), 2) << "A's packets leave ECT(0)";
    }
  }
  ASSERT_GT(data, 1000u);
  ASSERT_GE(cnp_times.size(), 2u);
  for (std::size_t i = 1; i < cnp_times.size(); ++i) {
    EXPECT_GE(cnp_times[i] - cnp_times[i - 1], cp.cnp_interval_ns) << "CNP " << i;
  }
  // Half the data packets were marked; each 50 us saw at most one CNP.
  const std::uint64_t marked = p.net.link.stats(0).ce_marked;
  EXPECT_GT(marked, data / 4);
  EXPECT_EQ(p.qb->counter("ce_marked_received"), marked);
  EXPECT_EQ(p.qb->counter("cnps_sent"), cnp_times.size());
  EXPECT_EQ(p.qa->counter("cnps_received"), cnp_times.size());
  EXPECT_EQ(p.qa->counter("cnps_sent"), 0u) << "nothing marked towards A";
  const transport::Qp& qa = testing::transport_qp(p.qa);
  EXPECT_EQ(qa.congestion.rate.cnps(), cnp_times.size());
  EXPECT_LT(qa.congestion.rate.rate_bps(), cp.line_rate_bps);
  EXPECT_GT(qa.congestion.rate.alpha(), 0.0);

  // tshark reads the CNPs as CNPs.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("uroce-cnp-" + std::to_string(getpid()) + ".pcap")).string();
  {
    std::string error;
    auto w = pcap::Writer::create(path, error);
    ASSERT_NE(w, nullptr) << error;
    for (const Seen& s : seen) w->write(s.frame, static_cast<std::int64_t>(s.at_ns));
  }
  const std::string cmd = "tshark -n --disable-protocol rpcordma --disable-protocol smb_direct -r " + path +
                          " -Y 'infiniband.bth.opcode == 129' -T fields -e infiniband.bth.opcode -e _ws.malformed 2>/dev/null";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = pclose(pipe);
  std::filesystem::remove(path);
  ASSERT_EQ(WEXITSTATUS(status), 0) << "tshark failed (tools/setup.sh installs it)";
  EXPECT_EQ(static_cast<std::size_t>(std::count(out.begin(), out.end(), '\n')), cnp_times.size()) << out.substr(0, 300);
  EXPECT_EQ(out.find("malformed"), std::string::npos) << out.substr(0, 300);
}

TEST(Congestion, WithoutDcqcnNothingIsMarkedEctAndNoCnpGoesOut) {
  sim::Impairments to_b;
  to_b.ce_mark = 1.0;
  RcPair p(4, 1 << 20, {}, to_b, {}, 1024, nullptr);
  ASSERT_EQ(p.connect_rc, 0);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 65536, 65536), 0);
  ASSERT_EQ(p.wait(p.cqa, 1).size(), 1u);
  EXPECT_EQ(p.net.link.stats(0).ce_marked, 0u) << "Not-ECT packets are never marked";
  EXPECT_EQ(p.qb->counter("cnps_sent"), 0u);
}

// Virtual time to WRITE `bytes` from A to B over an unlimited link, with A's
// QP paced at `line_gbps` (DCQCN on, nothing marked), and the frames seen.
std::uint64_t paced_transfer_ns(double line_gbps, std::size_t bytes, std::vector<Seen>* seen = nullptr) {
  cc::DcqcnParams cp = params();
  cp.line_rate_bps = line_gbps * 1e9;
  ConnectParams mtu4k;
  mtu4k.mtu = IBV_MTU_4096;
  RcPair p(6, 2 * bytes, mtu4k, {}, {}, 1024, &cp);
  EXPECT_EQ(p.connect_rc, 0);
  if (seen != nullptr) {
    p.net.link.observe([&](int from, std::span<const std::uint8_t> f) {
      if (from == 0) seen->push_back(Seen{p.net.clock.now_ns(), from, std::vector<std::uint8_t>(f.begin(), f.end())});
    });
  }
  fill_pattern(p.bufa, bytes, 8);
  const std::uint64_t t0 = p.net.clock.now_ns();
  const int messages = static_cast<int>(bytes / 65536);
  for (int i = 0; i < messages; ++i) {
    EXPECT_EQ(p.post_send(IBV_WR_RDMA_WRITE, static_cast<std::uint64_t>(i) * 65536, 65536,
                          bytes + static_cast<std::uint64_t>(i) * 65536, static_cast<std::uint64_t>(i)),
              0);
  }
  const auto done = p.wait(p.cqa, static_cast<std::size_t>(messages));
  EXPECT_EQ(done.size(), static_cast<std::size_t>(messages));
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb + bytes, bytes), 0);
  return p.net.clock.now_ns() - t0;
}

TEST(Congestion, AQpSendsAtItsRate) {
  constexpr std::size_t kBytes = 4u << 20;
  // Frames of 4096 bytes of payload, 58 of headers and ICRC (Ethernet, IPv4,
  // UDP, BTH; the first of a message 16 more), 24 of preamble, IFG and FCS.
  const double wire = static_cast<double>(kBytes) * (4096 + 58 + 24) / 4096 * 8;
  for (const double gbps : {10.0, 2.5}) {
    SCOPED_TRACE(gbps);
    const double ns = static_cast<double>(paced_transfer_ns(gbps, kBytes));
    const double expect = wire / gbps;
    EXPECT_GT(ns, expect * 0.97) << "faster than the rate allows";
    EXPECT_LT(ns, expect * 1.10) << "much slower than the rate";
  }
  // Beyond the first burst, departures are a frame time apart at 10 Gb/s.
  std::vector<Seen> seen;
  paced_transfer_ns(10.0, 1u << 20, &seen);
  std::size_t checked = 0;
  for (std::size_t i = 16; i < seen.size(); ++i) {
    if (seen[i].frame.size() < 4096 || seen[i - 1].frame.size() < 4096) continue;
    const double gap = static_cast<double>(seen[i].at_ns - seen[i - 1].at_ns);
    EXPECT_GE(gap, static_cast<double>(seen[i - 1].frame.size() + 24) * 8 / 10.0 - 1) << "frame " << i;
    ++checked;
  }
  EXPECT_GT(checked, 100u);
}

// A QP paced far below the time its messages take: 64 KiB at 10 Mb/s leaves
// over ~55 ms, the local ACK timeout is 4 ms (timeout 10). The timer runs
// from the packets that ask for an ACK (each message's last), so nothing
// times out while the message is still leaving; with loss, the timer and
// the sequence NAKs still recover every message.
TEST(Congestion, APacedQpSlowerThanItsAckTimeoutDoesNotTimeOut) {
  cc::DcqcnParams cp = params();
  cp.line_rate_bps = 10e6;
  cp.min_rate_bps = 1e6;
  ConnectParams cparams;
  cparams.mtu = IBV_MTU_4096;
  cparams.timeout = 10;  // 4.096 us * 2^10 = 4.2 ms
  for (const double loss : {0.0, 0.1}) {
    SCOPED_TRACE("loss " + std::to_string(loss));
    sim::Impairments lossy;
    lossy.loss = loss;
    constexpr std::size_t kBytes = 4 * 65536;
    RcPair p(9, 2 * kBytes, cparams, lossy, lossy, 1024, &cp);
    ASSERT_EQ(p.connect_rc, 0);
    fill_pattern(p.bufa, kBytes, 3);
    const std::uint64_t t0 = p.net.clock.now_ns();
    for (std::uint64_t i = 0; i < 4; ++i) ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, i * 65536, 65536, kBytes + i * 65536, i), 0);
    const auto done = p.wait(p.cqa, 4);
    ASSERT_EQ(done.size(), 4u);
    for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_str(wc.status);
    EXPECT_EQ(std::memcmp(p.bufa, p.bufb + kBytes, kBytes), 0);
    // 64 frames of 4,194 bytes on the wire at 10 Mb/s: ~215 ms.
    EXPECT_GT(p.net.clock.now_ns() - t0, 200'000'000u) << "paced";
    if (loss == 0) {
      EXPECT_EQ(p.qa->counter("timeouts"), 0u);
      EXPECT_EQ(p.qa->counter("retransmitted_packets"), 0u);
    } else {
      EXPECT_GT(p.qa->counter("retransmitted_packets"), 0u) << "loss was recovered";
    }
  }
}

// 1,000 QPs on one engine, each paced at 25 Mb/s: together they keep the
// 25 Gb/s the rates add up to (on virtual time: the pacing schedule, not the
// CPU, is what is measured here).
TEST(Congestion, AThousandPacedQpsTogetherReachTheirAggregateRate) {
  cc::DcqcnParams cp;
  cp.line_rate_bps = 25e6;
  cp.min_rate_bps = 1e6;
  cp.start_rate_fraction = 1;
  device::SimPair net(11, {}, {}, &cp);
  ProtectionDomain* pda = net.a->alloc_pd();
  ProtectionDomain* pdb = net.b->alloc_pd();
  CompletionQueue* cqa = net.a->create_cq(16384);
  CompletionQueue* cqb = net.b->create_cq(16384);
  constexpr int kQps = 1000, kMsgs = 8;
  std::vector<std::uint8_t> src(4096, 0x42);
  std::vector<std::uint8_t> dst(4096);
  MemoryRegion* mra = pda->reg_mr(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  MemoryRegion* mrb = pdb->reg_mr(dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ConnectParams params;
  params.mtu = IBV_MTU_4096;
  std::vector<QueuePair*> qps;
  for (int i = 0; i < kQps; ++i) {
    QpInitAttr init;
    init.cap = ibv_qp_cap{kMsgs + 1, 1, 1, 1, 0};
    init.send_cq = init.recv_cq = cqa;
    QueuePair* qa = pda->create_qp(init);
    init.send_cq = init.recv_cq = cqb;
    QueuePair* qb = pdb->create_qp(init);
    ASSERT_TRUE(qa && qb) << net.a->last_error();
    ASSERT_EQ(net.connect(qa, qb, params), 0);
    qps.push_back(qa);
  }
  const std::uint64_t t0 = net.clock.now_ns();
  for (QueuePair* qa : qps) {
    for (int m = 0; m < kMsgs; ++m) {
      ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, src.data(), 4096, mra->lkey, dst.data(), mrb->rkey), 0);
    }
  }
  std::size_t done = 0, failed = 0;
  ibv_wc wc[64];
  ASSERT_TRUE(net.run_until([&] {
    for (int k; (k = cqa->poll(64, wc)) > 0;) {
      for (int i = 0; i < k; ++i) failed += wc[i].status != IBV_WC_SUCCESS;
      done += static_cast<std::size_t>(k);
    }
    return done == static_cast<std::size_t>(kQps * kMsgs);
  }));
  EXPECT_EQ(failed, 0u);
  // Each QP's first frame leaves at once; the other 7 follow at 25 Mb/s.
  const double frame_bits = (4096 + 74 + 24) * 8.0;
  const double expect_ns = (kMsgs - 1) * frame_bits / 25e6 * 1e9;
  const double ns = static_cast<double>(net.clock.now_ns() - t0);
  EXPECT_GT(ns, expect_ns * 0.98) << "faster than the rates allow";
  EXPECT_LT(ns, expect_ns * 1.05) << "the pacing schedule lost time";
  EXPECT_EQ(dst[4095], 0x42);
}

// A new QP starts at its start rate: at rp_start_rate_percent = 12.5 its
// first frames leave 8 times as far apart as a line-rate QP's (the default
// is line rate, with the BDP cap below).
TEST(Congestion, ANewQpStartsAtItsStartRate) {
  cc::DcqcnParams cp;
  cp.line_rate_bps = 10e9;
  ASSERT_EQ(cp.start_rate_fraction, 1.0) << "the default: line rate";
  cp.start_rate_fraction = 0.125;
  ConnectParams mtu4k;
  mtu4k.mtu = IBV_MTU_4096;
  RcPair p(12, 2u << 20, mtu4k, {}, {}, 1024, &cp);
  ASSERT_EQ(p.connect_rc, 0);
  std::vector<std::uint64_t> sent;
  p.net.link.observe([&](int from, std::span<const std::uint8_t> f) {
    if (from == 0 && f.size() > 4096) sent.push_back(p.net.clock.now_ns());
  });
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 1u << 20, 1u << 20), 0);
  ASSERT_EQ(p.wait(p.cqa, 1).size(), 1u);
  ASSERT_GT(sent.size(), 20u);
  // Past the first 8 us (a quiet QP's burst), frames of 4,096 bytes of
  // payload and 58 of headers and ICRC (+24 on the wire) leave
  // 4,178 * 8 / 1.25 Gb/s = 26,739 ns apart; the rate timer's first steps
  // are fast recovery with nothing to recover.
  for (std::size_t i = 4; i < 12; ++i) {
    EXPECT_NEAR(static_cast<double>(sent[i] - sent[i - 1]), 26'739, 2) << "frame " << i;
  }
}

// The most request packets A had in flight while it WROTE 1 MiB to B over
// a link of 10 us each way (longer than the window takes to leave, so the
// window is the limit), as the link saw them: the PSN A last sent minus the
// one B's latest ACK named (a lower bound on the requester's own count,
// which hears of each ACK later).
std::uint32_t most_in_flight(const cc::DcqcnParams& cp) {
  ConnectParams mtu4k;
  mtu4k.mtu = IBV_MTU_4096;
  sim::Impairments far;
  far.delay_ns = 10'000;
  RcPair p(13, 2u << 20, mtu4k, far, far, 1024, &cp);
  EXPECT_EQ(p.connect_rc, 0);
  constexpr std::size_t kBth = 14 + 20 + 8;
  std::optional<std::uint32_t> first, acked;
  std::uint32_t sent = 0, most = 0;
  p.net.link.observe([&](int from, std::span<const std::uint8_t> f) {
    if (f.size() < kBth + 12) return;
    const std::uint32_t psn = (std::uint32_t{f[kBth + 9]} << 16) | (std::uint32_t{f[kBth + 10]} << 8) | f[kBth + 11];
    if (from == 0 && f.size() > 4096) {
      if (!first) first = psn;
      sent = psn;
    } else if (from == 1 && f[kBth] == static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge)) {
      acked = psn;
    }
    if (first) {
      const std::uint32_t base = acked ? (*acked + 1) & 0xffffff : *first;
      most = std::max(most, (sent + 1 - base) & 0xffffff);
    }
  });
  fill_pattern(p.bufa, 1u << 20, 3);
  EXPECT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 1u << 20, 1u << 20), 0);
  EXPECT_EQ(p.wait(p.cqa, 1).size(), 1u);
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb + (1u << 20), 1u << 20), 0);
  return most;
}

// With DCQCN's defaults a QP starts at line rate and keeps at most the
// path's bandwidth-delay product in flight (window_packets: 10 Gb/s x 16 us
// over 4,194-byte frames, 5 packets), and reaches it. Without the cap,
// more.
TEST(Congestion, WindowCapHoldsPacketsInFlightAtTheBdp) {
  cc::DcqcnParams cp;
  cp.line_rate_bps = 10e9;
  ASSERT_EQ(cc::window_packets(cp, 4096), 5u);
  const std::uint32_t capped = most_in_flight(cp);
  EXPECT_EQ(capped, 5u);
  cp.window_rtt_ns = 0;
  EXPECT_GT(most_in_flight(cp), 5u);
}

// A rate change applies to the wait already running, as a token bucket's
// would: a cut stretches what is left of it (without this, a cut took
// effect one frame late, 27 us at 1.25 Gb/s), an increase shrinks it.
TEST(Congestion, ARateChangeStretchesOrShrinksTheWaitForTheNextDeparture) {
  cc::DcqcnParams cp;
  cp.line_rate_bps = 1e9;
  cp.start_rate_fraction = 1;
  cp.alpha_period_ns = 1ull << 60;
  cp.byte_counter = 0;
  cp.rate_period_ns = 20'000;
  transport::Qp qp;
  transport::Env env;
  env.dcqcn = &cp;
  env.now = 100'000;
  ASSERT_TRUE(transport::pace_allows(qp, env));  // the rate starts: 1 Gb/s
  // 4,072 bytes + 24 (preamble, IFG, FCS) = 32,768 bits: 32,768 ns at
  // 1 Gb/s, from 8 us back (a quiet QP's burst): next at 124,768.
  transport::paced_sent(qp, env, 4072);
  ASSERT_EQ(qp.congestion.next_send_ns, 124'768u);
  // A CNP at 108,768 halves the rate (alpha = 1): the 16,000 ns left
  // become 32,000.
  env.now = 108'768;
  transport::rp_on_cnp(qp, env);
  EXPECT_EQ(qp.congestion.rate.rate_bps(), 0.5e9);
  EXPECT_EQ(qp.congestion.next_send_ns, 140'768u);
  // The rate timer's step at 128,768 (fast recovery: (1 + 0.5) / 2 = 0.75
  // Gb/s), seen at 130,768: the 10,000 ns left become 6,666.
  env.now = 130'768;
  EXPECT_FALSE(transport::pace_allows(qp, env));
  EXPECT_EQ(qp.congestion.rate.rate_bps(), 0.75e9);
  EXPECT_EQ(qp.congestion.next_send_ns, 137'434u);
  env.now = 137'433;
  EXPECT_FALSE(transport::pace_allows(qp, env));
  env.now = 137'434;
  EXPECT_TRUE(transport::pace_allows(qp, env));
}

// A CNP built by hand for `dest_qp`, as the peer (10.0.0.1) would send it.
std::vector<std::uint8_t> peer_cnp(std::uint32_t dest_qp) { return cnp_frame(cnp_spec(dest_qp, {10, 0, 0, 1}, {10, 0, 0, 2})); }

TEST(Congestion, ACnpForAnUnknownQpIsCountedAndDropped) {
  const cc::DcqcnParams cp = params();
  sim::VirtualClock clock;
  ScriptedDevice dev(clock, ibv_gid{}, ibv_qp_cap{16, 16, 1, 1, 0}, 16, &cp);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  ScriptedPort& port = dev.port;
  Context* ctx = dev.ctx.get();
  QueuePair* qp = dev.qp;
  ASSERT_FALSE(peer_cnp(0x777).empty());
  port.inbox.push_back(peer_cnp(0x777));
  port.inbox.push_back(peer_cnp(qp->qp_num()));
  ctx->progress();
  const engine::Engine& e = internal::engine_of(*ctx);
  EXPECT_EQ(e.counter(engine::EngineCounter::rx_cnp), 2u);
  EXPECT_EQ(e.counter(engine::EngineCounter::rx_unknown_qp), 1u);
  EXPECT_EQ(qp->counter("cnps_received"), 1u);
  EXPECT_TRUE(port.inbox.empty());
}

// On a VLAN-tagged path, a CNP carries the configured 802.1p priority (and
// the QP's own traffic keeps its tag).
TEST(Congestion, CnpsOnATaggedPathCarryTheConfiguredPriority) {
  cc::DcqcnParams cp = params();
  cp.cnp_priority = 6;
  sim::VirtualClock clock;
  const ibv_gid gid = ipv4_gid({10, 0, 0, 1});
  ScriptedDevice dev(clock, gid, ibv_qp_cap{16, 16, 1, 1, 0}, 16, &cp);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  ScriptedPort& port = dev.port;
  Context* ctx = dev.ctx.get();
  QueuePair* qp = dev.qp;
  ibv_gid peer = gid;
  peer.raw[15] = 2;
  ASSERT_EQ(connect_rc(qp, peer, 0x99, 0x100, 0x200, ConnectParams{}), 0) << ctx->last_error();
  transport::Qp& t = testing::transport_qp(qp);
  t.path_spec.vlan_tci = 0x0064;  // VLAN 100, priority 0
  transport::qp_build_paths(t, &cp);
  // A CE-marked SEND from the peer (no receive posted: an RNR NAK too).
  wire::FrameSpec s = t.path_spec;
  std::swap(s.eth_src, s.eth_dst);
  std::swap(s.src4, s.dst4);
  s.tos = 3;
  s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
  s.bth.pkey.set(0xffff);
  s.bth.dest_qp.set(qp->qp_num());
  s.bth.psn.set(0x200);
  const std::array<std::uint8_t, 8> payload{};
  std::vector<std::uint8_t> f(256);
  f.resize(wire::build_frame(s, payload, f));
  ASSERT_FALSE(f.empty());
  port.inbox.push_back(f);
  ctx->progress();
  ASSERT_EQ(qp->counter("ce_marked_received"), 1u);
  ASSERT_EQ(qp->counter("cnps_sent"), 1u);
  bool seen = false;
  for (const auto& sent : port.sent) {
    wire::ParsedFrame p;
    ASSERT_EQ(wire::parse_frame(sent, p), wire::ParseStatus::kOk);
    ASSERT_TRUE(p.has_vlan);
    if (p.opcode == static_cast<std::uint8_t>(wire::Opcode::kCnp)) {
      seen = true;
      EXPECT_EQ(p.vlan_tci >> 13, 6) << "CNP priority";
      EXPECT_EQ(p.vlan_tci & 0xfff, 100);
      EXPECT_EQ(p.bth().dest_qp.get(), 0x99u);
    } else {
      EXPECT_EQ(p.vlan_tci, 0x0064) << "the QP's own frames keep their tag";
    }
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace uroce::test
