// UD and UC on the simulated link and on a scripted port: datagrams land
// behind the 40-byte GRH with their sender's QP and address, a wrong Q_Key
// or a missing receive drops them (counted), UD sends only SENDs of at most
// the MTU; UC carries SENDs and WRITEs without a single ACK, and a lost
// packet drops its whole message while the next one lands in the same
// receive WQE. Randomised runs under loss, duplication and reordering check
// that every message that completes is whole and correct.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "support/rc_fixture.h"
#include "support/scripted_port.h"
#include "support/test_seed.h"
#include "device/step.h"
#include "engine/engine.h"
#include "uroce/stats.h"
#include "verbs/connect.h"
#include "wire/frame.h"
#include "wire/headers.h"

namespace uroce::test {
namespace {

using transport::kGrhBytes;
constexpr std::uint32_t kQkey = 0x11111111;  // as ibv_ud_pingpong
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

// A frame from the scripted peer 10.0.0.2 to us, 10.0.0.1: `op` to QP
// `dest` with PSN `psn`, `len` bytes of `fill`, and (UD) a DETH with `qkey`
// from the peer's QP 0x33.
std::vector<std::uint8_t> peer_frame(wire::Opcode op, std::uint32_t dest, std::uint32_t psn, std::size_t len,
                                     std::uint8_t fill, std::uint32_t qkey = 0) {
  wire::FrameSpec s;
  std::memset(s.eth_src.data(), 0x52, 6);
  s.src4 = {10, 0, 0, 2};
  s.dst4 = {10, 0, 0, 1};
  s.bth.opcode = static_cast<std::uint8_t>(op);
  s.bth.pkey.set(0xffff);
  s.bth.dest_qp.set(dest);
  s.bth.psn.set(psn);
  s.deth.qkey.set(qkey);
  s.deth.src_qp.set(0x33);
  const std::vector<std::uint8_t> payload(len, fill);
  std::vector<std::uint8_t> f(len + 256);
  f.resize(wire::build_frame(s, payload, f));
  return f;
}

// One QP of `type` on each side of a simulated link, each with a CQ and a
// registered buffer; UD QPs in RTS with kQkey and an AH on A for B (and on
// B for A), UC QPs connected.
struct Rig {
  static constexpr std::uint32_t kSlot = 8192;
  static constexpr std::size_t kBytes = 256 * kSlot;

  Rig(ibv_qp_type type, std::uint64_t seed, sim::Impairments loss = {}, ibv_mtu mtu = IBV_MTU_1024)
      : net(seed, loss, loss) {
    pda = net.a->alloc_pd();
    pdb = net.b->alloc_pd();
    cqa = net.a->create_cq(4096);
    cqb = net.b->create_cq(4096);
    QpInitAttr init;
    init.qp_type = type;
    init.cap = ibv_qp_cap{256, 256, 2, 2, 64};
    init.send_cq = init.recv_cq = cqa;
    qa = pda->create_qp(init);
    init.send_cq = init.recv_cq = cqb;
    qb = pdb->create_qp(init);
    bufa = static_cast<std::uint8_t*>(net.a->alloc_buffer(kBytes));
    bufb = static_cast<std::uint8_t*>(net.b->alloc_buffer(kBytes));
    mra = pda->reg_mr(bufa, kBytes, kAccess);
    mrb = pdb->reg_mr(bufb, kBytes, kAccess);
    if (qa == nullptr || qb == nullptr || mra == nullptr || mrb == nullptr) return;
    if (type == IBV_QPT_UD) {
      if (ready_ud(qa, kQkey, 0x10) != 0 || ready_ud(qb, kQkey, 0x20) != 0) return;
      ibv_ah_attr ah{};
      ah.is_global = 1;
      ah.port_num = 1;
      ah.grh.sgid_index = 1;
      ah.grh.hop_limit = 64;
      ah.grh.dgid = net.b->gid();
      to_b = pda->create_ah(ah);
      ah.grh.dgid = net.a->gid();
      to_a = pdb->create_ah(ah);
      ok = to_b != nullptr && to_a != nullptr;
    } else {
      ConnectParams p;
      p.mtu = mtu;
      ok = net.connect(qa, qb, p) == 0;
    }
  }

  int post_recv_b(std::uint32_t slot, std::uint32_t len, std::uint64_t wr_id) {
    return post_recv_one(qb, bufb + slot * kSlot, len, mrb->lkey, wr_id);
  }
  // A UD SEND of `len` bytes from A's slot `slot` to B's QP with `qkey`.
  int send_ud(std::uint32_t slot, std::uint32_t len, std::uint64_t wr_id, std::uint32_t qkey = kQkey,
              ibv_wr_opcode op = IBV_WR_SEND, std::uint32_t imm = 0) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(bufa + slot * kSlot), len, mra->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.imm_data = imm;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = to_b->ibv();
    wr.wr.ud.remote_qpn = qb->qp_num();
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad = nullptr;
    return qa->post_send(&wr, &bad);
  }
  std::vector<ibv_wc> wait(CompletionQueue* cq, std::size_t n, std::uint64_t limit_ns = 2'000'000'000ull) {
    return wait_completions(net, cq, n, limit_ns);
  }
  // Runs the link until nothing moves (every frame delivered or lost).
  void drain() { net.run_until([] { return false; }, 50'000'000); }

  device::SimPair net;
  ProtectionDomain* pda = nullptr;
  ProtectionDomain* pdb = nullptr;
  CompletionQueue* cqa = nullptr;
  CompletionQueue* cqb = nullptr;
  QueuePair* qa = nullptr;
  QueuePair* qb = nullptr;
  AddressHandle* to_b = nullptr;
  AddressHandle* to_a = nullptr;
  std::uint8_t* bufa = nullptr;
  std::uint8_t* bufb = nullptr;
  MemoryRegion* mra = nullptr;
  MemoryRegion* mrb = nullptr;
  bool ok = false;
};

// --- UD ------------------------------------------------------------------------------

TEST(Ud, ADatagramLandsBehindTheGrhWithItsSendersQpAndAddress) {
  Rig r(IBV_QPT_UD, 1);
  ASSERT_TRUE(r.ok) << r.net.a->last_error() << " / " << r.net.b->last_error();
  ASSERT_EQ(r.post_recv_b(0, kGrhBytes + 1024, 77), 0);
  fill_pattern(r.bufa, 1024, 3);
  ASSERT_EQ(r.send_ud(0, 1024, 5, kQkey, IBV_WR_SEND_WITH_IMM, htonl(0xabcd1234)), 0);
  const auto a = r.wait(r.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(a[0].wr_id, 5u);
  const auto b = r.wait(r.cqb, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].status, IBV_WC_SUCCESS) << wc_status_str(b[0].status);
  EXPECT_EQ(b[0].wr_id, 77u);
  EXPECT_EQ(b[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(b[0].byte_len, kGrhBytes + 1024) << "byte_len counts the GRH";
  EXPECT_EQ(b[0].wc_flags, static_cast<unsigned>(IBV_WC_GRH | IBV_WC_WITH_IMM));
  EXPECT_EQ(ntohl(b[0].imm_data), 0xabcd1234u);
  EXPECT_EQ(b[0].src_qp, r.qa->qp_num());
  EXPECT_EQ(b[0].qp_num, r.qb->qp_num());
  EXPECT_EQ(b[0].sl, 2) << "the GRH holds an IPv4 header (mlx5's packet type in sl)";
  // RoCEv2 over IPv4: 20 bytes of nothing, then the IPv4 header as it came.
  const std::uint8_t* grh = r.bufb;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(grh[i], 0) << "byte " << i;
  EXPECT_EQ(grh[20], 0x45);
  EXPECT_EQ(grh[29], 17) << "UDP";
  EXPECT_EQ(std::memcmp(grh + 32, r.net.a->gid().raw + 12, 4), 0) << "source address: A's";
  EXPECT_EQ(std::memcmp(grh + 36, r.net.b->gid().raw + 12, 4), 0) << "destination address: B's";
  EXPECT_EQ(std::memcmp(r.bufb + kGrhBytes, r.bufa, 1024), 0);
  EXPECT_EQ(r.qa->counter("acks_sent") + r.qb->counter("acks_sent"), 0u);
}

TEST(Ud, AWrongQkeyIsDroppedAndCountedAndTheHighBitMeansTheQpsOwn) {
  Rig r(IBV_QPT_UD, 2);
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.post_recv_b(0, kGrhBytes + 256, 1), 0);
  ASSERT_EQ(r.send_ud(0, 100, 1, 0x22222222), 0);
  EXPECT_EQ(r.wait(r.cqa, 1).size(), 1u) << "the sender's WR completes: UD is not told";
  r.drain();
  ibv_wc wc;
  EXPECT_EQ(r.cqb->poll(1, &wc), 0);
  EXPECT_EQ(r.qb->counter("drop_bad_qkey"), 1u);
  // 0x80000000 set: the sending QP's own Q_Key (kQkey) goes on the wire.
  ASSERT_EQ(r.send_ud(0, 100, 2, 0x80000000u), 0);
  const auto b = r.wait(r.cqb, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].wr_id, 1u) << "the receive the bad datagram did not take";
  EXPECT_EQ(b[0].byte_len, kGrhBytes + 100);
  EXPECT_EQ(r.qb->counter("drop_bad_qkey"), 1u);
}

TEST(Ud, NoReceiveOrOneTooShortDropsTheDatagramAndKeepsTheQueueWorking) {
  Rig r(IBV_QPT_UD, 3);
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.send_ud(0, 200, 1), 0);  // nothing posted: UD has no RNR
  r.drain();
  EXPECT_EQ(r.qb->counter("messages_dropped"), 1u);
  EXPECT_EQ(r.qb->counter("rnr_naks_sent"), 0u);
  ASSERT_EQ(r.post_recv_b(0, kGrhBytes + 100, 9), 0);
  ASSERT_EQ(r.send_ud(0, 200, 2), 0);  // 240 bytes into 140: dropped, the WQE stays
  r.drain();
  EXPECT_EQ(r.qb->counter("messages_dropped"), 2u);
  EXPECT_EQ(r.qb->counter("drop_recv_too_short"), 1u);
  fill_pattern(r.bufa + Rig::kSlot, 100, 9);
  ASSERT_EQ(r.send_ud(1, 100, 3), 0);
  const auto b = r.wait(r.cqb, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(b[0].wr_id, 9u);
  EXPECT_EQ(std::memcmp(r.bufb + kGrhBytes, r.bufa + Rig::kSlot, 100), 0);
  EXPECT_EQ(r.qb->state(), IBV_QPS_RTS);
}

TEST(Ud, PostsAreRefusedForOtherOpcodesLongerThanTheMtuOrAForeignAh) {
  Rig r(IBV_QPT_UD, 4);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.send_ud(0, 4097, 1), EINVAL) << "more than the port's MTU (4096)";
  EXPECT_EQ(r.send_ud(0, 4096, 2), 0);
  EXPECT_EQ(r.send_ud(0, 8, 3, kQkey, IBV_WR_RDMA_WRITE), EINVAL);
  EXPECT_EQ(r.send_ud(0, 8, 4, kQkey, IBV_WR_RDMA_READ), EINVAL);
  // An AH of another PD, and none at all.
  ProtectionDomain* other = r.net.a->alloc_pd();
  AddressHandle* foreign = other->create_ah(r.to_b->attr());
  ASSERT_NE(foreign, nullptr);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(r.bufa), 8, r.mra->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.wr.ud.ah = foreign->ibv();
  wr.wr.ud.remote_qpn = r.qb->qp_num();
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(r.qa->post_send(&wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  wr.wr.ud.ah = nullptr;
  EXPECT_EQ(r.qa->post_send(&wr, &bad), EINVAL);
  EXPECT_EQ(r.net.a->dealloc_pd(other), EBUSY) << "the PD still has an AH";
  EXPECT_EQ(other->destroy_ah(foreign), 0);
  EXPECT_EQ(r.net.a->dealloc_pd(other), 0);
}

TEST(Ud, AddressHandlesNeedAGrhOfTheRightFamilyAndQpsTheUdColumnOfTable91) {
  Rig r(IBV_QPT_UD, 5);
  ASSERT_TRUE(r.ok);
  ibv_ah_attr ah = r.to_b->attr();
  ah.is_global = 0;
  EXPECT_EQ(r.pda->create_ah(ah), nullptr);
  EXPECT_NE(r.net.a->last_error().find("is_global"), std::string::npos) << r.net.a->last_error();
  ah = r.to_b->attr();
  ah.grh.sgid_index = 0;  // IPv6 link-local for an IPv4 peer
  EXPECT_EQ(r.pda->create_ah(ah), nullptr);
  EXPECT_EQ(AddressHandle::of(r.to_b->ibv()), r.to_b);
  ibv_ah not_ours{};
  EXPECT_EQ(AddressHandle::of(&not_ours), nullptr);
  // A UD QP: RESET->INIT needs the Q_Key, RTR takes no path.
  QpInitAttr init;
  init.qp_type = IBV_QPT_UD;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  init.send_cq = init.recv_cq = r.cqa;
  QueuePair* q = r.pda->create_qp(init);
  ASSERT_NE(q, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  EXPECT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), EINVAL);
  a.qkey = 7;
  EXPECT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
  a.qp_state = IBV_QPS_RTR;
  a.ah_attr = r.to_b->attr();
  EXPECT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_AV), EINVAL);
  EXPECT_EQ(q->modify(a, IBV_QP_STATE), 0);
  ibv_qp_attr got{};
  QpInitAttr got_init;
  ASSERT_EQ(q->query(got, IBV_QP_QKEY, &got_init), 0);
  EXPECT_EQ(got.qkey, 7u);
  EXPECT_EQ(got_init.qp_type, IBV_QPT_UD);
}

TEST(Ud, ManyDatagramsUnderLossDuplicationAndReorderingArriveWholeOrNotAtAll) {
  const std::uint64_t seed = test_seed(141);
  SCOPED_TRACE(seed_note(seed));
  sim::Impairments imp;
  imp.loss = 0.05;
  imp.duplicate = 0.02;
  imp.reorder = 0.05;
  Rig r(IBV_QPT_UD, seed, imp);
  ASSERT_TRUE(r.ok);
  constexpr std::uint32_t kMessages = 400;
  std::mt19937_64 rng(seed);
  for (std::uint32_t i = 0; i < 200; ++i) ASSERT_EQ(r.post_recv_b(i, kGrhBytes + 4096, i), 0);
  std::map<std::uint32_t, std::uint32_t> length_of;  // message -> bytes
  std::uint32_t posted_recvs = 200;
  std::uint32_t got = 0;
  std::set<std::uint32_t> seen;
  for (std::uint32_t m = 0; m < kMessages; ++m) {
    const auto len = static_cast<std::uint32_t>(4 + rng() % 4093);
    std::uint8_t* src = r.bufa + (m % 200) * Rig::kSlot;
    fill_pattern(src, len, m);
    std::memcpy(src, &m, 4);
    length_of[m] = len;
    while (r.send_ud(m % 200, len, m) == ENOMEM) r.wait(r.cqa, 1);
    // Take in what has arrived; each slot's receive goes back once checked.
    ibv_wc wc[32];
    for (int k; (k = r.cqb->poll(32, wc)) > 0;) {
      for (int i = 0; i < k; ++i) {
        ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS);
        const std::uint8_t* data = r.bufb + wc[i].wr_id * Rig::kSlot + kGrhBytes;
        std::uint32_t id;
        std::memcpy(&id, data, 4);
        ASSERT_TRUE(length_of.count(id)) << "datagram " << id << " was never sent";
        ASSERT_EQ(wc[i].byte_len, kGrhBytes + length_of[id]) << "datagram " << id;
        std::vector<std::uint8_t> want(length_of[id]);
        fill_pattern(want.data(), want.size(), id);
        std::memcpy(want.data(), &id, 4);
        ASSERT_EQ(std::memcmp(data, want.data(), want.size()), 0) << "datagram " << id << " corrupted";
        seen.insert(id);
        ++got;
        ASSERT_EQ(r.post_recv_b(static_cast<std::uint32_t>(wc[i].wr_id), kGrhBytes + 4096, wc[i].wr_id), 0);
        ++posted_recvs;
      }
    }
    r.net.run_until([] { return false; }, 20'000);
  }
  r.drain();
  ibv_wc wc[32];
  for (int k; (k = r.cqb->poll(32, wc)) > 0;) got += static_cast<std::uint32_t>(k);
  const sim::DirectionStats& s = r.net.link.stats(0);
  EXPECT_GT(s.lost, 0u);
  // Every datagram the link delivered was received, duplicates too (UD
  // has no sequence to catch them), unless it found no receive posted.
  EXPECT_EQ(got + r.qb->counter("messages_dropped"), s.delivered) << "delivered " << s.delivered;
  EXPECT_GT(seen.size(), kMessages * 8 / 10);
}

// Hostile datagrams on a scripted port: a UD QP (Q_Key kQkey) and an RC
// QP of the same device get packets of the wrong service, too long, or cut
// short; each is dropped and counted, nothing is answered, nothing breaks.
TEST(Ud, HostileDatagramsAreDroppedCountedAndUnanswered) {
  sim::VirtualClock clock;
  ScriptedDevice dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{4, 4, 1, 1, 0}, 64);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  ASSERT_EQ(connect_rc(dev.qp, ipv4_gid({10, 0, 0, 2}), 0x99, 1, 1, ConnectParams{}), 0);
  QpInitAttr init;
  init.qp_type = IBV_QPT_UD;
  init.cap = ibv_qp_cap{4, 8, 1, 1, 0};
  init.send_cq = init.recv_cq = dev.cq;
  QueuePair* ud = dev.pd->create_qp(init);
  ASSERT_NE(ud, nullptr);
  ASSERT_EQ(ready_ud(ud, kQkey, 1), 0);
  std::vector<std::uint8_t> buf(1 << 16);
  MemoryRegion* mr = dev.pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_recv_one(ud, buf.data() + i * 8192, 8192, mr->lkey, 0), 0);
  // From 10.0.0.2, the RC QP's peer: past its address check.
  auto frame = [](wire::Opcode op, std::uint32_t dest, std::uint32_t qkey, std::size_t len) {
    return peer_frame(op, dest, 0, len, 0x5a, qkey);
  };
  const auto& e = internal::engine_of(*dev.ctx);
  auto push = [&](std::vector<std::uint8_t> f) {
    dev.port.inbox.push_back(std::move(f));
    dev.ctx->progress();
  };
  push(frame(wire::Opcode::kUdSendOnly, dev.qp->qp_num(), kQkey, 64));  // a datagram for the RC QP
  push(frame(wire::Opcode::kUcSendOnly, ud->qp_num(), 0, 64));          // UC for the UD QP
  EXPECT_EQ(e.counter(engine::EngineCounter::rx_wrong_service), 2u);
  push(frame(wire::Opcode::kUdSendOnly, ud->qp_num(), kQkey, 4100));    // over any MTU: the parser's
  std::uint64_t too_long = 0;
  for (const Stat& st : dev.ctx->stats()) {
    if (std::string(st.name) == "drop_payload_length") too_long = st.value;
  }
  EXPECT_EQ(too_long, 1u);
  push(frame(wire::Opcode::kUdSendOnly, ud->qp_num(), 0x80010000, 8));  // QP1's well-known Q_Key
  EXPECT_EQ(ud->counter("drop_bad_qkey"), 1u);
  // Cut inside the DETH: the parser refuses it before any QP sees it.
  std::vector<std::uint8_t> cut = frame(wire::Opcode::kUdSendOnly, ud->qp_num(), kQkey, 0);
  wire::ParsedFrame p;
  ASSERT_EQ(wire::parse_frame(cut, p), wire::ParseStatus::kOk);
  cut.resize(p.bth_offset + 12 + 4);
  const std::uint64_t parse_drops_before = e.counter(engine::EngineCounter::rx_frames);
  push(cut);
  EXPECT_EQ(e.counter(engine::EngineCounter::rx_frames), parse_drops_before + 1);
  ibv_wc wc;
  EXPECT_EQ(dev.cq->poll(1, &wc), 0) << "nothing completed";
  EXPECT_EQ(ud->counter("rx_packets"), 0u);
  EXPECT_TRUE(dev.port.sent.empty()) << "nothing answered";
  // A good one still lands.
  push(frame(wire::Opcode::kUdSendOnly, ud->qp_num(), kQkey, 100));
  ASSERT_EQ(dev.cq->poll(1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.src_qp, 0x33u);
  EXPECT_EQ(wc.byte_len, kGrhBytes + 100);
  EXPECT_EQ(dev.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(ud->state(), IBV_QPS_RTS);
}

// --- UC ------------------------------------------------------------------------------

TEST(Uc, SendsAndWritesArriveWithoutASingleAck) {
  Rig r(IBV_QPT_UC, 11);
  ASSERT_TRUE(r.ok) << r.net.a->last_error();
  ASSERT_EQ(r.post_recv_b(0, Rig::kSlot, 1), 0);
  ASSERT_EQ(r.post_recv_b(1, Rig::kSlot, 2), 0);
  fill_pattern(r.bufa, 5000, 1);
  fill_pattern(r.bufa + Rig::kSlot, 3000, 2);
  fill_pattern(r.bufa + 2 * Rig::kSlot, 2500, 3);
  ASSERT_EQ(post_rdma(r.qa, IBV_WR_SEND, r.bufa, 5000, r.mra->lkey, std::uint64_t{0}, 0, 10), 0);
  ASSERT_EQ(post_rdma(r.qa, IBV_WR_RDMA_WRITE, r.bufa + Rig::kSlot, 3000, r.mra->lkey, r.bufb + 4 * Rig::kSlot,
                      r.mrb->rkey, 11), 0);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(r.bufa + 2 * Rig::kSlot), 2500, r.mra->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 12;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(42);
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(r.bufb + 5 * Rig::kSlot);
  wr.wr.rdma.rkey = r.mrb->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(r.qa->post_send(&wr, &bad), 0);
  const auto a = r.wait(r.cqa, 3);
  ASSERT_EQ(a.size(), 3u);
  for (const ibv_wc& w : a) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  EXPECT_EQ(a[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(a[1].opcode, IBV_WC_RDMA_WRITE);
  const auto b = r.wait(r.cqb, 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].wr_id, 1u);
  EXPECT_EQ(b[0].byte_len, 5000u);
  EXPECT_EQ(b[0].wc_flags & IBV_WC_GRH, 0u) << "only UD receives carry a GRH";
  EXPECT_EQ(b[1].wr_id, 2u);
  EXPECT_EQ(b[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(b[1].imm_data), 42u);
  EXPECT_EQ(std::memcmp(r.bufb, r.bufa, 5000), 0);
  EXPECT_EQ(std::memcmp(r.bufb + 4 * Rig::kSlot, r.bufa + Rig::kSlot, 3000), 0);
  EXPECT_EQ(std::memcmp(r.bufb + 5 * Rig::kSlot, r.bufa + 2 * Rig::kSlot, 2500), 0);
  r.drain();
  EXPECT_EQ(r.qa->counter("acks_sent") + r.qb->counter("acks_sent"), 0u);
  EXPECT_EQ(r.net.link.stats(1).sent, 0u) << "B sent nothing at all";
  // READs and atomics do not exist on UC.
  EXPECT_EQ(post_rdma(r.qa, IBV_WR_RDMA_READ, r.bufa, 8, r.mra->lkey, r.bufb, r.mrb->rkey), EINVAL);
}

// A UC QP on a scripted port, fed packets by hand.
struct ScriptedUc {
  ScriptedUc() : dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{4, 4, 1, 1, 0}, 16) {
    QpInitAttr init;
    init.qp_type = IBV_QPT_UC;
    init.cap = ibv_qp_cap{4, 8, 1, 1, 0};
    init.send_cq = init.recv_cq = dev.cq;
    qp = dev.pd->create_qp(init);
    buf.resize(1 << 16);
    mr = dev.pd->reg_mr(buf.data(), buf.size(), kAccess);
    ibv_gid peer = dev.ctx->gid();
    peer.raw[15] = 2;
    ConnectParams p;
    p.mtu = IBV_MTU_256;
    ok = qp != nullptr && mr != nullptr && connect_rc(qp, peer, 0x99, 0x10, 0x500, p) == 0;
  }
  // A packet from the peer: `op` with PSN `psn` and `len` bytes of `fill`.
  void feed(wire::Opcode op, std::uint32_t psn, std::uint32_t len, std::uint8_t fill) {
    dev.port.inbox.push_back(peer_frame(op, qp->qp_num(), psn, len, fill));
    dev.ctx->progress();
  }
  int post_recv(std::uint64_t wr_id, std::uint32_t off, std::uint32_t len) {
    return post_recv_one(qp, buf.data() + off, len, mr->lkey, wr_id);
  }
  sim::VirtualClock clock;
  ScriptedDevice dev;
  QueuePair* qp = nullptr;
  std::vector<std::uint8_t> buf;
  MemoryRegion* mr = nullptr;
  bool ok = false;
};

TEST(Uc, ALostPacketDropsItsWholeMessageAndTheNextLandsInTheSameReceive) {
  ScriptedUc u;
  ASSERT_TRUE(u.ok) << u.dev.ctx->last_error();
  ASSERT_EQ(u.post_recv(1, 0, 4096), 0);
  using wire::Opcode;
  // First (0x500), Middle 0x501 lost, Last 0x502: the message is gone.
  u.feed(Opcode::kUcSendFirst, 0x500, 256, 0xaa);
  EXPECT_EQ(u.qp->counter("messages_dropped"), 0u);
  EXPECT_EQ(u.qp->counter("rx_packets"), 1u);
  u.feed(Opcode::kUcSendLast, 0x502, 100, 0xaa);
  ibv_wc wc;
  EXPECT_EQ(u.dev.cq->poll(1, &wc), 0);
  EXPECT_EQ(u.qp->counter("out_of_sequence"), 1u);
  EXPECT_EQ(u.qp->counter("messages_dropped"), 1u);
  // A Middle with no message begun is dropped too.
  u.feed(Opcode::kUcSendMiddle, 0x503, 256, 0xbb);
  EXPECT_EQ(u.dev.cq->poll(1, &wc), 0);
  // The next message (First at the next PSN, Last) lands whole, in the same WQE.
  u.feed(Opcode::kUcSendFirst, 0x504, 256, 0xcc);
  u.feed(Opcode::kUcSendLast, 0x505, 10, 0xdd);
  ASSERT_EQ(u.dev.cq->poll(1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.byte_len, 266u);
  EXPECT_EQ(u.buf[0], 0xcc);
  EXPECT_EQ(u.buf[255], 0xcc);
  EXPECT_EQ(u.buf[256], 0xdd);
  EXPECT_EQ(u.buf[265], 0xdd);
  // A PSN gap right before a First only resynchronises: it lands.
  ASSERT_EQ(u.post_recv(2, 8192, 4096), 0);
  u.feed(Opcode::kUcSendOnly, 0x600, 40, 0xee);
  ASSERT_EQ(u.dev.cq->poll(1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.byte_len, 40u);
  // No receive posted: dropped, no RNR NAK; nothing ever goes back.
  u.feed(Opcode::kUcSendOnly, 0x601, 40, 0xee);
  EXPECT_EQ(u.qp->counter("messages_dropped"), 2u);
  EXPECT_EQ(u.qp->counter("rnr_naks_sent"), 0u);
  EXPECT_EQ(u.dev.port.sent.size(), 0u) << "a UC responder answers nothing";
  EXPECT_EQ(u.qp->state(), IBV_QPS_RTS);
}

TEST(Uc, MessagesUnderLossAreEitherCompleteAndCorrectOrAbsent) {
  const std::uint64_t seed = test_seed(142);
  SCOPED_TRACE(seed_note(seed));
  sim::Impairments imp;
  imp.loss = 0.01;
  imp.duplicate = 0.01;
  imp.reorder = 0.01;
  Rig r(IBV_QPT_UC, seed, imp);
  ASSERT_TRUE(r.ok);
  std::mt19937_64 rng(seed);
  constexpr std::uint32_t kMessages = 300;
  for (std::uint32_t i = 0; i < 100; ++i) ASSERT_EQ(r.post_recv_b(i, Rig::kSlot, i), 0);
  std::uint32_t sends_done = 0;
  std::uint32_t received = 0;
  std::uint32_t writes_seen = 0;
  std::map<std::uint32_t, std::uint32_t> length_of;
  auto check = [&](const ibv_wc& w) {
    ASSERT_EQ(w.status, IBV_WC_SUCCESS) << wc_status_str(w.status);
    if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      // A WRITE with immediate completes only whole: its region holds it.
      const std::uint32_t id = ntohl(w.imm_data);
      const std::uint8_t* at = r.bufb + (128 + id % 100) * Rig::kSlot;
      std::vector<std::uint8_t> want(length_of.at(id));
      fill_pattern(want.data(), want.size(), id);
      ASSERT_EQ(w.byte_len, want.size());
      ASSERT_EQ(std::memcmp(at, want.data(), want.size()), 0) << "WRITE " << id << " completed but differs";
      ++writes_seen;
    } else {
      const std::uint8_t* data = r.bufb + w.wr_id * Rig::kSlot;
      std::uint32_t id;
      std::memcpy(&id, data, 4);
      ASSERT_TRUE(length_of.count(id)) << "message " << id << " was never sent";
      std::vector<std::uint8_t> want(length_of[id]);
      fill_pattern(want.data(), want.size(), id);
      std::memcpy(want.data(), &id, 4);
      ASSERT_EQ(w.byte_len, want.size()) << "message " << id;
      ASSERT_EQ(std::memcmp(data, want.data(), want.size()), 0) << "message " << id << " completed but differs";
    }
    ++received;
    ASSERT_EQ(r.post_recv_b(static_cast<std::uint32_t>(w.wr_id), Rig::kSlot, w.wr_id), 0);
  };
  for (std::uint32_t m = 0; m < kMessages; ++m) {
    const auto len = static_cast<std::uint32_t>(8 + rng() % 6000);
    std::uint8_t* src = r.bufa + (m % 100) * Rig::kSlot;
    const bool write = m % 3 == 2;
    fill_pattern(src, len, m);
    if (!write) std::memcpy(src, &m, 4);
    length_of[m] = len;
    int rc;
    if (write) {
      ibv_sge sge{reinterpret_cast<std::uint64_t>(src), len, r.mra->lkey};
      ibv_send_wr wr{};
      wr.wr_id = m;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(m);
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(r.bufb + (128 + m % 100) * Rig::kSlot);
      wr.wr.rdma.rkey = r.mrb->rkey;
      ibv_send_wr* bad = nullptr;
      rc = r.qa->post_send(&wr, &bad);
    } else {
      rc = post_rdma(r.qa, IBV_WR_SEND, src, len, r.mra->lkey, std::uint64_t{0}, 0, m);
    }
    ASSERT_EQ(rc, 0);
    // One message in flight at a time: its source slot is reused 100 later.
    sends_done += static_cast<std::uint32_t>(r.wait(r.cqa, 1).size());
    r.net.run_until([] { return false; }, 200'000);
    ibv_wc wc[16];
    for (int k; (k = r.cqb->poll(16, wc)) > 0;) {
      for (int i = 0; i < k; ++i) {
        check(wc[i]);
        if (HasFatalFailure()) return;
      }
    }
  }
  EXPECT_EQ(sends_done, kMessages) << "every UC WR completes at the sender";
  EXPECT_GT(r.net.link.stats(0).lost, 0u);
  EXPECT_GT(r.qb->counter("messages_dropped"), 0u);
  EXPECT_GT(received, kMessages * 8 / 10);
  EXPECT_GT(writes_seen, 0u);
  EXPECT_EQ(r.qb->state(), IBV_QPS_RTS);
}

// On-demand paging over the unreliable services (the UC and UD odp_caps):
// regions over pages never touched carry UC SENDs and WRITEs and UD
// datagrams both ways, byte for byte; a UD receive on a page that is gone
// ends with a local protection error and the engine goes on.
TEST(Uc, OdpRegionsCarrySendsAndWrites) {
  Rig r(IBV_QPT_UC, 13);
  ASSERT_TRUE(r.ok) << r.net.a->last_error();
  constexpr std::size_t kLen = 4 * 4096;
  auto* a = static_cast<std::uint8_t*>(mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* b = static_cast<std::uint8_t*>(mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_TRUE(a != MAP_FAILED && b != MAP_FAILED);
  MemoryRegion* ma = r.pda->reg_mr(a, kLen, kAccess | IBV_ACCESS_ON_DEMAND);
  MemoryRegion* mb = r.pdb->reg_mr(b, kLen, kAccess | IBV_ACCESS_ON_DEMAND);
  ASSERT_TRUE(ma && mb);
  fill_pattern(a, 6000, 5);
  ASSERT_EQ(post_recv_one(r.qb, b, 8192, mb->lkey, 1), 0);
  ASSERT_EQ(post_rdma(r.qa, IBV_WR_SEND, a, 6000, ma->lkey, std::uint64_t{0}, 0, 10), 0);
  ASSERT_EQ(post_rdma(r.qa, IBV_WR_RDMA_WRITE, a, 6000, ma->lkey, b + 2 * 4096, mb->rkey, 11), 0);
  ASSERT_EQ(r.wait(r.cqa, 2).size(), 2u);
  const auto got = r.wait(r.cqb, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].byte_len, 6000u);
  r.drain();
  EXPECT_EQ(std::memcmp(a, b, 6000), 0);
  EXPECT_EQ(std::memcmp(a, b + 2 * 4096, 6000), 0);
  munmap(a, kLen);
  munmap(b, kLen);
}

TEST(Ud, OdpRegionsCarryDatagramsAndAnUnmappedReceiveIsAProtectionError) {
  Rig r(IBV_QPT_UD, 14);
  ASSERT_TRUE(r.ok) << r.net.a->last_error();
  constexpr std::size_t kLen = 2 * 4096;
  auto* a = static_cast<std::uint8_t*>(mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* b = static_cast<std::uint8_t*>(mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_TRUE(a != MAP_FAILED && b != MAP_FAILED);
  MemoryRegion* ma = r.pda->reg_mr(a, kLen, kAccess | IBV_ACCESS_ON_DEMAND);
  MemoryRegion* mb = r.pdb->reg_mr(b, kLen, kAccess | IBV_ACCESS_ON_DEMAND);
  ASSERT_TRUE(ma && mb);
  fill_pattern(a, 900, 6);
  auto send = [&](std::uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(a), 900, ma->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = r.to_b->ibv();
    wr.wr.ud.remote_qpn = r.qb->qp_num();
    wr.wr.ud.remote_qkey = kQkey;
    ibv_send_wr* bad = nullptr;
    return r.qa->post_send(&wr, &bad);
  };
  ASSERT_EQ(post_recv_one(r.qb, b, 40 + 900, mb->lkey, 1), 0);
  ASSERT_EQ(send(10), 0);
  const auto got = r.wait(r.cqb, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a, b + 40, 900), 0);
  // The receive buffer's page goes after it was posted.
  ASSERT_EQ(post_recv_one(r.qb, b + 4096, 40 + 900, mb->lkey, 2), 0);
  ASSERT_EQ(munmap(b + 4096, 4096), 0);
  ASSERT_EQ(send(11), 0);
  const auto lost = r.wait(r.cqb, 1);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].wr_id, 2u);
  EXPECT_EQ(lost[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(r.qb->counter("odp_unmapped"), 1u);
  EXPECT_EQ(r.wait(r.cqa, 2).size(), 2u);  // both sends completed on A
  munmap(a, kLen);
  munmap(b, 4096);
}

}  // namespace
}  // namespace uroce::test
