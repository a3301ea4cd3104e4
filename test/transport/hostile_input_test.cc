// Hostile input: well-formed RoCEv2 frames with valid ICRCs but random
// opcodes, PSNs (near and far from the expected one), keys, addresses,
// lengths and payloads, plus runts and garbage, thrown at a live QP that has
// work posted in both directions. The stack must not crash (this suite also
// runs under ASan/UBSan), must count every frame, must complete only the work
// requests that were posted, each at most once, and must not write outside
// its registered region. A single well-formed frame that breaks one rule is
// tested under that rule (completer_rules_test.cc, responder_rules_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <set>

#include "cc/dcqcn.h"
#include "engine/engine.h"
#include "support/scripted_port.h"
#include "support/test_seed.h"
#include "verbs/connect.h"
#include "verbs/verbs_impl.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

class StepClock : public engine::Clock {
 public:
  std::uint64_t now_ns() override { return now += 1000; }
  std::uint64_t now = 1'000'000;
};

TEST(HostileInput, RandomValidFramesNeverCrashAndAreAllCounted) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  StepClock clock;
  ScriptedDevice dev(clock, ipv4_gid({10, 0, 0, 0}), ibv_qp_cap{64, 64, 4, 4, 64}, 65536);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  ScriptedPort& port = dev.port;
  port.keep_sent = false;
  Context* ctx = dev.ctx.get();
  ProtectionDomain* pd = dev.pd;
  CompletionQueue* cq = dev.cq;
  QueuePair* qp = dev.qp;
  // The region sits inside a larger allocation whose edges must stay intact.
  constexpr std::size_t kGuard = 4096;
  constexpr std::size_t kRegion = 1 << 16;
  std::vector<std::uint8_t> memory(kRegion + 2 * kGuard, 0xcd);
  std::uint8_t* region = memory.data() + kGuard;
  const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  MemoryRegion* mr = pd->reg_mr_iova(region, kRegion, 0x100000, all);
  ConnectParams params;
  const ibv_gid peer = ipv4_gid({10, 0, 0, 2});
  std::set<std::uint64_t> posted;
  std::set<std::uint64_t> seen;
  std::uint64_t next_id = 1000;
  std::uint64_t revived = 0;
  // Connects the QP (again, after ERR) and posts work in both directions:
  // receives for the peer's SENDs, and WRITEs, READs, SENDs and atomics of
  // ours that wait for responses.
  auto arm = [&] {
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(qp->modify(reset, IBV_QP_STATE), 0);
  ASSERT_EQ(connect_rc(qp, peer, 0x42, 0x1000, 0x2000, params), 0);
  for (std::uint64_t i = 0; i < 32; ++i) {
    ibv_sge sge{0x100000 + i * 1024, 1024, mr->lkey};
    ibv_recv_wr rw{};
    rw.wr_id = next_id++;
    rw.sg_list = &sge;
    rw.num_sge = 1;
    ibv_recv_wr* bad_r = nullptr;
    ASSERT_EQ(qp->post_recv(&rw, &bad_r), 0);
    posted.insert(rw.wr_id);
  }
  for (std::uint64_t i = 0; i < 16; ++i) {
    ibv_sge sge{0x100000 + 32768 + i * 1024, i % 4 == 3 ? 8u : 1000u, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = next_id++;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.opcode = i % 4 == 0 ? IBV_WR_RDMA_WRITE : i % 4 == 1 ? IBV_WR_RDMA_READ : i % 4 == 2 ? IBV_WR_SEND
                                                                                          : IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.rdma.remote_addr = 0x5000;
    wr.wr.rdma.rkey = 0x77;
    if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
      wr.wr.atomic.remote_addr = 0x5000;
      wr.wr.atomic.rkey = 0x77;
    }
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(qp->post_send(&wr, &bad), 0);
    posted.insert(wr.wr_id);
  }
  };
  // Only posted work completes, each at most once.
  auto drain = [&] {
    ibv_wc wc[64];
    for (int k; (k = cq->poll(64, wc)) > 0;) {
      for (int i = 0; i < k; ++i) {
        EXPECT_TRUE(posted.count(wc[i].wr_id)) << "completion for wr_id " << wc[i].wr_id << " never posted";
        EXPECT_TRUE(seen.insert(wc[i].wr_id).second) << "wr_id " << wc[i].wr_id << " completed twice";
      }
    }
  };
  arm();

  // Frames: mostly for our QP, PSNs near what each side expects.
  const std::uint32_t rq_psn = 0x2000;
  const std::uint32_t sq_psn = 0x1000;
  constexpr int kFrames = 60000;
  std::vector<std::uint8_t> out(9216);
  std::uint64_t injected = 0;
  for (int i = 0; i < kFrames; ++i) {
    std::vector<std::uint8_t> f;
    const auto kind = rng() % 100;
    if (kind < 5) {
      f.resize(rng() % 120);  // runts and garbage
      for (auto& b : f) b = static_cast<std::uint8_t>(rng());
    } else {
      wire::FrameSpec spec;
      // From the peer to us; now and then from a third host, which a
      // connected QP must ignore.
      spec.src4 = {10, 0, 0, static_cast<std::uint8_t>(rng() % 50 == 0 ? 3 : 2)};
      spec.dst4 = {10, 0, 0, 0};
      std::uint8_t op = static_cast<std::uint8_t>(rng() % 0x1e);  // RC opcodes, reserved ones included
      if (kind < 10) op = static_cast<std::uint8_t>(rng());
      spec.bth.opcode = op;
      spec.bth.pkey.set(rng() % 50 == 0 ? static_cast<std::uint16_t>(rng()) : 0xffff);
      spec.bth.dest_qp.set(rng() % 20 == 0 ? static_cast<std::uint32_t>(rng()) : qp->qp_num());
      const bool request = wire::opcode_info(op).has(wire::kRequest);
      const std::uint32_t base = request ? rq_psn : sq_psn;
      const auto spread = static_cast<std::int64_t>(rng() % 5 == 0 ? (rng() & 0xffffff) : rng() % 64);
      spec.bth.psn.set(static_cast<std::uint32_t>((base + static_cast<std::uint32_t>(spread) - 16) & 0xffffff));
      spec.bth.set_ack_req(rng() % 2);
      const bool good_key = rng() % 2;
      spec.reth.va.set(rng() % 3 == 0 ? rng() : 0x100000 + rng() % (kRegion + 4096));
      spec.reth.rkey.set(good_key ? mr->rkey : static_cast<std::uint32_t>(rng()));
      spec.reth.dma_length.set(rng() % 3 == 0 ? static_cast<std::uint32_t>(rng()) : static_cast<std::uint32_t>(rng() % 70000));
      const std::uint64_t align_mask = rng() % 2 ? ~std::uint64_t{7} : ~std::uint64_t{0};
      spec.atomic_eth.va.set(rng() % 3 == 0 ? rng() : 0x100000 + ((rng() % (kRegion + 64)) & align_mask));
      spec.atomic_eth.rkey.set(good_key ? mr->rkey : static_cast<std::uint32_t>(rng()));
      spec.aeth.syndrome = static_cast<std::uint8_t>(rng());
      spec.aeth.msn.set(static_cast<std::uint32_t>(rng()));
      spec.ieth.rkey.set(good_key ? mr->rkey : static_cast<std::uint32_t>(rng()));
      const std::size_t payload = rng() % 4 == 0 ? 1024 : rng() % 1100;
      std::vector<std::uint8_t> data(payload);
      for (auto& b : data) b = static_cast<std::uint8_t>(rng());
      const std::size_t n = wire::build_frame(spec, data, out);
      if (n == 0) continue;  // an opcode the builder does not know
      f.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
    }
    port.inbox.push_back(std::move(f));
    ++injected;
    if (port.inbox.size() >= 32) {
      ctx->progress();
      drain();
      if (qp->state() == IBV_QPS_ERR) {
        // The hostile peer broke the connection: connect again and go on,
        // so every state keeps seeing hostile traffic.
        ++revived;
        arm();
      }
    }
  }
  while (!port.inbox.empty()) ctx->progress();
  for (int i = 0; i < 100; ++i) ctx->progress();  // let timers fire and answers leave

  // Every frame was taken and is accounted for: accepted, or counted under a reason.
  const engine::Engine& e = internal::engine_of(*ctx);
  EXPECT_EQ(e.counter(engine::EngineCounter::rx_frames), injected);
  EXPECT_GT(e.counter(engine::EngineCounter::rx_wrong_address), 0u) << "frames from the third host";
  drain();
  EXPECT_GT(revived, 0u) << "the hostile peer should have broken the connection at least once";
  // Nothing outside the region was touched.
  for (std::size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(memory[i], 0xcd) << "byte " << i << " before the region";
    ASSERT_EQ(memory[kGuard + kRegion + i], 0xcd) << "byte " << i << " after the region";
  }
  // The hostile peer drove the QP somewhere legal.
  const ibv_qp_state s = qp->state();
  EXPECT_TRUE(s == IBV_QPS_RTS || s == IBV_QPS_ERR) << s;
  std::printf("  seed %llu: %llu frames, %llu reconnects, QP ended in %s, %zu completions, %llu ICRC/parse drops, %llu NAKs sent\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(injected),
              static_cast<unsigned long long>(revived), s == IBV_QPS_RTS ? "RTS" : "ERR", seen.size(),
              static_cast<unsigned long long>([&] {
                std::uint64_t d = 0;
                for (int r = 1; r < wire::kParseStatusCount; ++r) d += e.parse_drops(static_cast<wire::ParseStatus>(r));
                return d;
              }()),
              static_cast<unsigned long long>(qp->counter("nak_seq_sent") + qp->counter("nak_inv_req_sent") +
                                               qp->counter("nak_rem_access_sent") + qp->counter("nak_rem_op_sent")));
}

// A connected QP hears only its peer: a third host that knows the QPN, the
// PSN and the rkey can neither WRITE into it nor slow it down with a CNP;
// the same packets from the peer's address are taken.
TEST(HostileInput, AThirdHostCannotWriteIntoOrSlowDownAConnectedQp) {
  const cc::DcqcnParams dcqcn;
  StepClock clock;
  ScriptedDevice dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{8, 8, 1, 1, 0}, 64, &dcqcn);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  ScriptedPort& port = dev.port;
  Context* ctx = dev.ctx.get();
  QueuePair* qp = dev.qp;
  std::vector<std::uint8_t> region(4096, 0);
  MemoryRegion* mr = dev.pd->reg_mr(region.data(), region.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(connect_rc(qp, ipv4_gid({10, 0, 0, 2}), 0x42, 0x1000, 0x2000, ConnectParams{}), 0) << ctx->last_error();

  auto frame_from = [&](std::uint8_t host, wire::Opcode op) {
    wire::FrameSpec spec;
    spec.src4 = {10, 0, 0, host};
    spec.dst4 = {10, 0, 0, 1};
    spec.bth.opcode = static_cast<std::uint8_t>(op);
    spec.bth.pkey.set(0xffff);
    spec.bth.dest_qp.set(qp->qp_num());
    spec.bth.psn.set(0x2000);
    spec.bth.set_ack_req(true);
    spec.bth.set_becn(op == wire::Opcode::kCnp);
    spec.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
    spec.reth.rkey.set(mr->rkey);
    spec.reth.dma_length.set(64);
    const std::vector<std::uint8_t> payload(op == wire::Opcode::kCnp ? 16 : 64, 0xab);
    std::vector<std::uint8_t> out(256);
    out.resize(wire::build_frame(spec, payload, out));
    return out;
  };
  const engine::Engine& e = internal::engine_of(*ctx);
  for (const std::uint8_t host : {std::uint8_t{3}, std::uint8_t{2}}) {
    SCOPED_TRACE("from 10.0.0." + std::to_string(host));
    port.sent.clear();
    port.inbox.push_back(frame_from(host, wire::Opcode::kRcWriteOnly));
    port.inbox.push_back(frame_from(host, wire::Opcode::kCnp));
    for (int i = 0; i < 8; ++i) ctx->progress();
    const bool peer = host == 2;
    EXPECT_EQ(e.counter(engine::EngineCounter::rx_wrong_address), 2u) << "the third host's two, and none of the peer's";
    EXPECT_EQ(region[0], peer ? 0xab : 0) << "WRITE placed";
    EXPECT_EQ(qp->counter("rx_packets"), peer ? 1u : 0u);
    EXPECT_EQ(port.sent.size(), peer ? 1u : 0u) << "one ACK";
    EXPECT_EQ(qp->congestion().cnps, peer ? 1u : 0u) << "rate cut";
  }
}

// Selective repeat's packets from the connected peer to a QP that did not
// agree on the mode: the wrong service for it, never taken, never answered.
TEST(HostileInput, SelectiveRepeatPacketsToAPlainQpAreRefused) {
  StepClock clock;
  ScriptedDevice dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{8, 8, 1, 1, 0}, 64);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  std::vector<std::uint8_t> region(4096, 0);
  MemoryRegion* mr = dev.pd->reg_mr(region.data(), region.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(connect_rc(dev.qp, ipv4_gid({10, 0, 0, 2}), 0x42, 0x1000, 0x2000, ConnectParams{}), 0);
  for (const std::uint8_t op : {std::uint8_t{0xc4}, std::uint8_t{0xca}, std::uint8_t{0xd1}}) {
    wire::FrameSpec spec;
    spec.src4 = {10, 0, 0, 2};
    spec.dst4 = {10, 0, 0, 1};
    spec.bth.opcode = op;  // SR SEND Only, WRITE Only, ACK
    spec.bth.pkey.set(0xffff);
    spec.bth.dest_qp.set(dev.qp->qp_num());
    spec.bth.psn.set(0x2000);
    spec.reth.va.set(reinterpret_cast<std::uint64_t>(region.data()));
    spec.reth.rkey.set(mr->rkey);
    spec.reth.dma_length.set(64);
    const bool data = op != 0xd1;
    std::vector<std::uint8_t> out(256);
    out.resize(wire::build_frame(spec, std::vector<std::uint8_t>(data ? 64 : 0, 0xab), out));
    ASSERT_FALSE(out.empty()) << wire::opcode_name(op);
    dev.port.inbox.push_back(std::move(out));
  }
  for (int i = 0; i < 8; ++i) dev.ctx->progress();
  const engine::Engine& e = internal::engine_of(*dev.ctx);
  EXPECT_EQ(e.counter(engine::EngineCounter::rx_wrong_service), 3u);
  EXPECT_EQ(dev.qp->counter("rx_packets"), 0u);
  EXPECT_EQ(region[0], 0) << "nothing placed";
  EXPECT_TRUE(dev.port.sent.empty()) << "nothing answered";
  EXPECT_EQ(dev.qp->state(), IBV_QPS_RTS);
}

// The source GID and the destination GID share one IP header: a family
// mismatch is refused at RTR with a hint.
TEST(HostileInput, AnAddressVectorMixingIpv4AndIpv6IsRefused) {
  StepClock clock;
  ScriptedDevice dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{8, 8, 1, 1, 0}, 64);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  Context* ctx = dev.ctx.get();
  QueuePair* qp = dev.qp;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x42;
  a.rq_psn = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = ipv4_gid({10, 0, 0, 2});
  a.ah_attr.grh.sgid_index = 0;  // IPv6 link-local
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(qp->modify(a, mask), EINVAL);
  EXPECT_NE(ctx->last_error().find("GID index 0 is IPv6 but the destination GID is IPv4"), std::string::npos)
      << ctx->last_error();
  a.ah_attr.grh.sgid_index = 1;
  EXPECT_EQ(qp->modify(a, mask), 0) << ctx->last_error();
}

}  // namespace
}  // namespace uroce::test
