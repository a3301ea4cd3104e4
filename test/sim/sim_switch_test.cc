// The simulated switch: RED marking on the backlog a frame finds, tail drop
// past the buffer, and N-to-1 incast through it with DCQCN on and off.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <cstring>

#include "cc/dcqcn.h"
#include "device/sim_fabric.h"
#include "support/test_seed.h"
#include "verbs/connect.h"
#include "wire/frame.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

// A 1 KiB WRITE-middle RoCE frame to `dst`, ECT(0).
std::vector<std::uint8_t> roce_frame(const std::uint8_t dst[6], std::uint32_t psn) {
  wire::FrameSpec s;
  std::memcpy(s.eth_dst.data(), dst, 6);
  s.eth_src = {0x02, 0, 0, 0, 0x09, 0x09};
  s.src4 = {10, 0, 0, 9};
  s.dst4 = {10, 0, 0, 1};
  s.tos = 2;
  s.udp_src_port = 0xc000;
  s.udp_dst_port = 4791;
  s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcWriteMiddle);
  s.bth.pkey.set(0xffff);
  s.bth.dest_qp.set(0x11);
  s.bth.psn.set(psn);
  std::vector<std::uint8_t> payload(1024, 0x5a);
  std::vector<std::uint8_t> out(2048);
  out.resize(wire::build_frame(s, payload, out));
  return out;
}

TEST(SimSwitch, MarksOnTheBacklogByRedAndDropsPastTheBuffer) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  sim::VirtualClock clock;
  sim::SimSwitch sw(clock, seed);
  sim::EgressConfig e;
  e.gbps = 10;
  e.kmin_bytes = 20'000;
  e.kmax_bytes = 120'000;
  e.pmax = 0.5;
  e.buffer_bytes = 200'000;
  e.mark_on_dequeue = false;  // each frame judged by the backlog it found
  const std::uint8_t mac[6] = {0x02, 0, 0, 0, 0, 1};
  engine::PacketIo& port = sw.add_port(mac, ibv_gid{}, e);
  // 300 frames at one instant: the backlog grows by one frame each.
  const std::size_t frame = roce_frame(mac, 0).size();
  for (std::uint32_t i = 0; i < 300; ++i) sw.forward(1, roce_frame(mac, i));
  const sim::EgressStats& st = sw.stats(0);
  const std::uint64_t fit = e.buffer_bytes / (frame + 24) + 1;  // the backlog is counted in wire time
  EXPECT_NEAR(static_cast<double>(st.enqueued), static_cast<double>(fit), 1.0);
  EXPECT_EQ(st.enqueued + st.dropped, 300u);
  EXPECT_GE(st.max_queue_bytes, e.buffer_bytes - 2 * (frame + 24));
  // Read them back in order: the backlog frame k found is k frames' wire time.
  clock.advance(1'000'000'000);
  std::size_t k = 0, marked_between = 0, between = 0;
  engine::RxFrame frames[32];
  for (std::uint16_t n; (n = port.rx_burst(frames, 32)) > 0;) {
    for (std::uint16_t i = 0; i < n; ++i, ++k) {
      wire::ParsedFrame p;
      ASSERT_EQ(wire::parse_frame(std::span<const std::uint8_t>(frames[i].data, frames[i].len), p), wire::ParseStatus::kOk);
      EXPECT_EQ(p.bth().psn.get(), k) << "FIFO";
      const std::uint64_t backlog = k * (frame + 24);
      const bool ce = p.ecn() == 3;
      if (backlog <= e.kmin_bytes) {
        EXPECT_FALSE(ce) << "frame " << k << " below Kmin";
      }
      if (backlog >= e.kmax_bytes + frame + 24) {
        EXPECT_TRUE(ce) << "frame " << k << " above Kmax";
      }
      if (backlog > e.kmin_bytes + frame + 24 && backlog + frame + 24 < e.kmax_bytes) {
        ++between;
        marked_between += ce;
      }
    }
    port.rx_release(frames, n);
  }
  EXPECT_EQ(k, st.enqueued);
  // Between the thresholds p rises from 0 to Pmax = 0.5: about a quarter.
  ASSERT_GT(between, 50u);
  EXPECT_GT(marked_between, between / 8);
  EXPECT_LT(marked_between, between / 2);
}

struct Incast {
  // `senders` hosts WRITE `bytes` each into host 0 through its 10 Gb/s port.
  Incast(int senders, std::size_t bytes, const cc::DcqcnParams* dcqcn, const sim::EgressConfig& bottleneck)
      : fabric(7, dcqcn), per_sender(bytes) {
    Context& rx = fabric.add_host(bottleneck);
    for (int i = 0; i < senders; ++i) fabric.add_host(sim::EgressConfig{});
    ProtectionDomain* rpd = rx.alloc_pd();
    CompletionQueue* rcq = rx.create_cq(1024);
    rbuf = static_cast<std::uint8_t*>(rx.alloc_buffer(bytes * static_cast<std::size_t>(senders)));
    const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    MemoryRegion* rmr = rpd->reg_mr(rbuf, bytes * static_cast<std::size_t>(senders), all);
    ConnectParams params;
    params.mtu = IBV_MTU_4096;
    for (int i = 0; i < senders; ++i) {
      Context& tx = *fabric.hosts[static_cast<std::size_t>(i) + 1];
      Sender s;
      ProtectionDomain* pd = tx.alloc_pd();
      s.cq = tx.create_cq(1024);
      QpInitAttr init;
      init.cap = ibv_qp_cap{512, 16, 1, 1, 0};
      init.send_cq = init.recv_cq = s.cq;
      s.qp = pd->create_qp(init);
      init.send_cq = init.recv_cq = rcq;
      QueuePair* rqp = rpd->create_qp(init);
      s.buf = static_cast<std::uint8_t*>(tx.alloc_buffer(bytes));
      for (std::size_t k = 0; k < bytes; ++k) s.buf[k] = static_cast<std::uint8_t>(k * 7 + static_cast<std::size_t>(i));
      MemoryRegion* mr = pd->reg_mr(s.buf, bytes, all);
      EXPECT_EQ(connect_rc(s.qp, rx.gid(), rqp->qp_num(), 0x100, 0x200, params), 0) << tx.last_error();
      EXPECT_EQ(connect_rc(rqp, tx.gid(), s.qp->qp_num(), 0x200, 0x100, params), 0) << rx.last_error();
      for (std::size_t off = 0; off < bytes; off += 65536) {
        EXPECT_EQ(post_rdma(s.qp, IBV_WR_RDMA_WRITE, s.buf + off, 65536, mr->lkey,
                            rbuf + static_cast<std::size_t>(i) * bytes + off, rmr->rkey),
                  0);
        ++s.posted;
      }
      senders_.push_back(s);
    }
  }

  bool run() {
    return fabric.run_until(
        [&] {
          bool all = true;
          ibv_wc wc[32];
          for (Sender& s : senders_) {
            for (int k; (k = s.cq->poll(32, wc)) > 0;) {
              for (int j = 0; j < k; ++j) ok = ok && wc[j].status == IBV_WC_SUCCESS;
              s.done += static_cast<std::size_t>(k);
            }
            all = all && s.done >= s.posted;
          }
          return all;
        },
        5'000'000'000ull);
  }

  bool data_intact() const {
    for (std::size_t i = 0; i < senders_.size(); ++i) {
      if (std::memcmp(senders_[i].buf, rbuf + i * per_sender, per_sender) != 0) return false;
    }
    return true;
  }

  std::uint64_t sum(const char* counter) const {
    std::uint64_t n = 0;
    for (const Sender& s : senders_) n += s.qp->counter(counter);
    return n;
  }

  struct Sender {
    CompletionQueue* cq = nullptr;
    QueuePair* qp = nullptr;
    std::uint8_t* buf = nullptr;
    std::size_t posted = 0, done = 0;
  };
  device::SimFabric fabric;
  std::size_t per_sender;
  std::uint8_t* rbuf = nullptr;
  std::vector<Sender> senders_;
  bool ok = true;
};

sim::EgressConfig bottleneck() {
  sim::EgressConfig e;
  e.gbps = 10;
  e.buffer_bytes = 2'000'000;
  e.kmin_bytes = 5'000;
  e.kmax_bytes = 200'000;
  e.pmax = 0.01;
  return e;
}

// A fabric of more hosts than one octet numbers: each has an address and
// a MAC of its own (host 256 was host 0's again, and 256-to-1 carried
// nothing), the first 255 as before.
TEST(SimSwitch, EveryHostOfThreeHundredHasItsOwnAddress) {
  device::SimFabric fabric(1, nullptr);
  std::set<std::string> gids;
  for (int i = 0; i < 300; ++i) {
    const ibv_gid& g = fabric.add_host(bottleneck()).gid();
    gids.emplace(reinterpret_cast<const char*>(g.raw), sizeof g.raw);
  }
  EXPECT_EQ(gids.size(), 300u);
  ibv_gid first = fabric.hosts[0]->gid();
  EXPECT_EQ(first.raw[14], 1);  // 10.98.1.1
  EXPECT_EQ(first.raw[15], 1);
  const ibv_gid& last = fabric.hosts[299]->gid();
  EXPECT_EQ(last.raw[14], 2);  // host 300: 10.98.2.44
  EXPECT_EQ(last.raw[15], 44);
}

TEST(SimSwitch, IncastWithDcqcnLosesNothing) {
  cc::DcqcnParams cp;
  cp.line_rate_bps = 10e9;
  Incast in(4, 2u << 20, &cp, bottleneck());
  ASSERT_TRUE(in.run()) << "incast did not finish";
  EXPECT_TRUE(in.ok);
  EXPECT_TRUE(in.data_intact());
  const sim::EgressStats& st = in.fabric.sw.stats(0);
  EXPECT_EQ(st.dropped, 0u);
  EXPECT_GT(st.marked, 0u);
  EXPECT_GT(in.sum("cnps_received"), 0u);
  EXPECT_EQ(in.sum("retransmitted_packets"), 0u);
  std::printf("dcqcn on: max queue %llu B, marked %llu, CNPs %llu\n",
              static_cast<unsigned long long>(st.max_queue_bytes), static_cast<unsigned long long>(st.marked),
              static_cast<unsigned long long>(in.sum("cnps_received")));
}

TEST(SimSwitch, IncastWithoutDcqcnOverflowsTheBufferAndGoesBackN) {
  Incast in(4, 2u << 20, nullptr, bottleneck());
  ASSERT_TRUE(in.run()) << "incast did not finish";
  EXPECT_TRUE(in.ok);
  EXPECT_TRUE(in.data_intact()) << "go-back-N still delivers everything";
  const sim::EgressStats& st = in.fabric.sw.stats(0);
  EXPECT_GT(st.dropped, 0u);
  EXPECT_EQ(st.marked, 0u) << "nothing is ECN-capable";
  EXPECT_GT(in.sum("retransmitted_packets"), 0u);
  std::printf("dcqcn off: dropped %llu, retransmitted %llu\n", static_cast<unsigned long long>(st.dropped),
              static_cast<unsigned long long>(in.sum("retransmitted_packets")));
}

}  // namespace
}  // namespace uroce::test
