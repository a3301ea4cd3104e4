// Shared receive queues on the simulated link: several RC QPs of one side
// take their receives from one SRQ, in the order posted; an empty SRQ
// draws RNR NAKs until a receive is posted; the limit event fires once
// per arming; the verbs' error values; and a randomised run under loss
// where every message lands exactly once, whole, in the receive it took.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "support/rc_fixture.h"

namespace uroce::test {
namespace {

// kQps QPs on A, each connected to one of kQps QPs on B, which all receive
// from one SRQ of B; a registered buffer on each side.
struct SrqRig {
  static constexpr int kQps = 3;
  explicit SrqRig(std::uint64_t seed, sim::Impairments loss = {}, std::uint32_t srq_wr = 256,
                  std::uint32_t srq_limit = 0)
      : net(seed, loss, loss) {
    pda = net.a->alloc_pd();
    pdb = net.b->alloc_pd();
    cqa = net.a->create_cq(4096);
    cqb = net.b->create_cq(4096);
    SrqInitAttr sa;
    sa.max_wr = srq_wr;
    sa.max_sge = 2;
    sa.srq_limit = srq_limit;
    srq = pdb->create_srq(sa, [](void* self) { ++static_cast<SrqRig*>(self)->limit_events; }, this);
    QpInitAttr init;
    init.cap = ibv_qp_cap{64, 64, 2, 2, 0};
    for (int i = 0; i < kQps; ++i) {
      init.send_cq = init.recv_cq = cqa;
      init.srq = nullptr;
      qa[i] = pda->create_qp(init);
      init.send_cq = init.recv_cq = cqb;
      init.srq = srq;
      qb[i] = pdb->create_qp(init);
    }
    bufa = static_cast<std::uint8_t*>(net.a->alloc_buffer(kBytes));
    bufb = static_cast<std::uint8_t*>(net.b->alloc_buffer(kBytes));
    mra = pda->reg_mr(bufa, kBytes, IBV_ACCESS_LOCAL_WRITE);
    mrb = pdb->reg_mr(bufb, kBytes, IBV_ACCESS_LOCAL_WRITE);
    ConnectParams p;
    p.mtu = IBV_MTU_1024;
    p.rnr_retry = 7;
    p.min_rnr_timer = 1;
    for (int i = 0; i < kQps; ++i) connected += net.connect(qa[i], qb[i], p) == 0;
  }
  bool ready() const { return srq != nullptr && connected == kQps && mra != nullptr && mrb != nullptr; }

  // A receive into slot `slot` of B's buffer (kSlot bytes each).
  int post_recv(std::uint32_t slot, std::uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(bufb + slot * kSlot), kSlot, mrb->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return srq->post_recv(&wr, &bad);
  }
  // A SEND of `len` bytes from slot `slot` of A's buffer on A's QP `q`.
  int send(int q, std::uint32_t slot, std::uint32_t len, std::uint64_t wr_id) {
    return post_rdma(qa[q], IBV_WR_SEND, bufa + slot * kSlot, len, mra->lkey, std::uint64_t{0}, 0, wr_id);
  }
  std::vector<ibv_wc> wait(CompletionQueue* cq, std::size_t n, std::uint64_t limit_ns = 20'000'000'000ull) {
    return wait_completions(net, cq, n, limit_ns);
  }

  static constexpr std::uint32_t kSlot = 8192;
  static constexpr std::size_t kBytes = 512 * kSlot;
  device::SimPair net;
  ProtectionDomain* pda = nullptr;
  ProtectionDomain* pdb = nullptr;
  CompletionQueue* cqa = nullptr;
  CompletionQueue* cqb = nullptr;
  SharedReceiveQueue* srq = nullptr;
  QueuePair* qa[kQps] = {};
  QueuePair* qb[kQps] = {};
  std::uint8_t* bufa = nullptr;
  std::uint8_t* bufb = nullptr;
  MemoryRegion* mra = nullptr;
  MemoryRegion* mrb = nullptr;
  int connected = 0;
  int limit_events = 0;
};

TEST(Srq, SendsOnSeveralQpsTakeTheSharedReceivesInOrder) {
  SrqRig r(1);
  ASSERT_TRUE(r.ready()) << r.net.b->last_error();
  for (std::uint32_t i = 0; i < 6; ++i) ASSERT_EQ(r.post_recv(i, 100 + i), 0);
  EXPECT_EQ(r.srq->count(), 6u);
  // One message at a time, from QPs 0, 1, 2, 0, 1, 2: each takes the
  // oldest receive; 5000 bytes are five 1 KiB packets.
  for (std::uint32_t m = 0; m < 6; ++m) {
    fill_pattern(r.bufa + m * SrqRig::kSlot, 5000, m + 1);
    ASSERT_EQ(r.send(static_cast<int>(m % 3), m, 5000, m), 0);
    const auto b = r.wait(r.cqb, 1);
    ASSERT_EQ(b.size(), 1u) << "message " << m;
    EXPECT_EQ(b[0].status, IBV_WC_SUCCESS) << wc_status_str(b[0].status);
    EXPECT_EQ(b[0].wr_id, 100u + m);
    EXPECT_EQ(b[0].byte_len, 5000u);
    EXPECT_EQ(b[0].qp_num, r.qb[m % 3]->qp_num()) << "the completion names the QP that received";
    EXPECT_EQ(std::memcmp(r.bufb + m * SrqRig::kSlot, r.bufa + m * SrqRig::kSlot, 5000), 0);
  }
  EXPECT_EQ(r.wait(r.cqa, 6).size(), 6u);
  EXPECT_EQ(r.srq->count(), 0u);
}

TEST(Srq, AnEmptySharedQueueDrawsRnrNaksUntilAReceiveIsPosted) {
  SrqRig r(2);
  ASSERT_TRUE(r.ready());
  fill_pattern(r.bufa, 3000, 7);
  ASSERT_EQ(r.send(1, 0, 3000, 9), 0);
  r.net.run_until([] { return false; }, 5'000'000);  // 5 ms of virtual time, nothing to receive into
  EXPECT_GT(r.qb[1]->counter("rnr_naks_sent"), 0u);
  EXPECT_GT(r.qa[1]->counter("rnr_naks_received"), 0u);
  ibv_wc wc;
  EXPECT_EQ(r.cqb->poll(1, &wc), 0);
  ASSERT_EQ(r.post_recv(3, 55), 0);
  const auto b = r.wait(r.cqb, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(b[0].wr_id, 55u);
  EXPECT_EQ(std::memcmp(r.bufb + 3 * SrqRig::kSlot, r.bufa, 3000), 0);
  const auto a = r.wait(r.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_SUCCESS) << wc_status_str(a[0].status);
}

TEST(Srq, TheLimitEventFiresOncePerArming) {
  SrqRig r(3, {}, 64, 3);  // armed at 3
  ASSERT_TRUE(r.ready());
  for (std::uint32_t i = 0; i < 5; ++i) ASSERT_EQ(r.post_recv(i, i), 0);
  ibv_srq_attr attr{};
  ASSERT_EQ(r.srq->query(attr), 0);
  EXPECT_EQ(attr.max_wr, 64u);
  EXPECT_EQ(attr.srq_limit, 3u);
  // 5 posted: after the 2nd take 3 remain (not fewer), after the 3rd 2 do.
  for (std::uint32_t m = 0; m < 2; ++m) ASSERT_EQ(r.send(0, m, 100, m), 0);
  ASSERT_EQ(r.wait(r.cqb, 2).size(), 2u);
  EXPECT_EQ(r.limit_events, 0);
  ASSERT_EQ(r.send(0, 2, 100, 2), 0);
  ASSERT_EQ(r.wait(r.cqb, 1).size(), 1u);
  EXPECT_EQ(r.limit_events, 1);
  ASSERT_EQ(r.srq->query(attr), 0);
  EXPECT_EQ(attr.srq_limit, 0u) << "the event disarms the limit";
  ASSERT_EQ(r.send(1, 3, 100, 3), 0);
  ASSERT_EQ(r.wait(r.cqb, 1).size(), 1u);
  EXPECT_EQ(r.limit_events, 1) << "not again until armed again";
  // Armed again at 2 with 1 left: the next take leaves 0 < 2.
  attr.srq_limit = 2;
  ASSERT_EQ(r.srq->modify(attr, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(r.send(2, 4, 100, 4), 0);
  ASSERT_EQ(r.wait(r.cqb, 1).size(), 1u);
  EXPECT_EQ(r.limit_events, 2);
}

TEST(Srq, VerbsRefuseWhatTheSpecForbids) {
  SrqRig r(4, {}, 4);
  ASSERT_TRUE(r.ready());
  // A QP on an SRQ has no receive queue of its own.
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(r.qb[0]->post_recv(&wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  // More SGEs than max_sge; full at max_wr.
  ibv_sge sge[3] = {};
  wr.sg_list = sge;
  wr.num_sge = 3;
  EXPECT_EQ(r.srq->post_recv(&wr, &bad), EINVAL);
  for (std::uint32_t i = 0; i < 4; ++i) ASSERT_EQ(r.post_recv(i, i), 0);
  EXPECT_EQ(r.post_recv(4, 4), ENOMEM);
  // No resizing; a limit over max_wr.
  ibv_srq_attr attr{};
  attr.max_wr = 8;
  EXPECT_EQ(r.srq->modify(attr, IBV_SRQ_MAX_WR), EINVAL);
  attr.srq_limit = 5;
  EXPECT_EQ(r.srq->modify(attr, IBV_SRQ_LIMIT), EINVAL);
  // Bad attributes at creation; destroying one that QPs use.
  SrqInitAttr none;
  EXPECT_EQ(r.pdb->create_srq(none), nullptr);
  EXPECT_EQ(r.pdb->destroy_srq(r.srq), EBUSY);
  // Another PD's SRQ for a QP.
  QpInitAttr init;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  init.send_cq = init.recv_cq = r.cqb;
  init.srq = r.srq;
  ProtectionDomain* other = r.net.b->alloc_pd();
  EXPECT_EQ(other->create_qp(init), nullptr);
  for (int i = 0; i < SrqRig::kQps; ++i) ASSERT_EQ(r.pdb->destroy_qp(r.qb[i]), 0);
  EXPECT_EQ(r.pdb->destroy_srq(r.srq), 0);
}

// Randomised: 600 SENDs of 2 B-6 KiB spread over the QPs at 1% loss with
// reordering and duplication, receives posted as they complete. Every
// receive completes once, holding exactly one message's bytes; each QP's
// receives complete in the order posted (across QPs a message slowed by a
// loss completes after later ones: the IBTA orders an SRQ's WQEs as taken,
// not their completions); every message is received once.
TEST(Srq, EveryMessageLandsOnceUnderLoss) {
  const std::uint64_t seed = std::getenv("UROCE_TEST_SEED") ? std::strtoull(std::getenv("UROCE_TEST_SEED"), nullptr, 0) : 5;
  SCOPED_TRACE("UROCE_TEST_SEED=" + std::to_string(seed));
  sim::Impairments loss;
  loss.loss = 0.01;
  loss.duplicate = 0.005;
  loss.reorder = 0.005;
  SrqRig r(seed, loss);
  ASSERT_TRUE(r.ready());
  std::mt19937_64 rng(seed);
  constexpr std::uint32_t kMessages = 600, kRecvSlots = 512;
  std::uint64_t next_recv = 0;
  // Fewer receives than SENDs in flight: the SRQ runs dry, RNR NAKs follow.
  for (; next_recv < 24; ++next_recv) ASSERT_EQ(r.post_recv(static_cast<std::uint32_t>(next_recv % kRecvSlots), next_recv), 0);
  // Each message's length and first byte (its number), by message number.
  std::vector<std::uint32_t> len(kMessages);
  std::uint32_t sent = 0, send_done = 0, received = 0;
  std::vector<int> seen(kMessages, 0);
  std::map<std::uint32_t, std::uint64_t> last_wr;  // by receiving QPN
  std::vector<int> receive_done(kMessages * 2, 0);
  ibv_wc wc[64];
  const bool finished = r.net.run_until(
      [&] {
        while (sent < kMessages && sent - send_done < 48) {
          const std::uint32_t m = sent;
          len[m] = 2 + static_cast<std::uint32_t>(rng() % 6000);
          std::uint8_t* src = r.bufa + (m % 256) * SrqRig::kSlot;
          fill_pattern(src, len[m], m);
          const auto number = static_cast<std::uint16_t>(m);
          std::memcpy(src, &number, 2);  // the message's number, in its first bytes
          if (r.send(static_cast<int>(rng() % SrqRig::kQps), m % 256, len[m], m) != 0) break;
          ++sent;
        }
        for (int k; (k = r.cqa->poll(64, wc)) > 0;) {
          for (int i = 0; i < k; ++i) {
            EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS) << wc_status_str(wc[i].status);
            ++send_done;
          }
        }
        for (int k; (k = r.cqb->poll(64, wc)) > 0;) {
          for (int i = 0; i < k; ++i) {
            EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS) << wc_status_str(wc[i].status);
            auto [last, first] = last_wr.try_emplace(wc[i].qp_num, wc[i].wr_id);
            if (!first) {
              EXPECT_GT(wc[i].wr_id, last->second) << "a QP's receives complete in the order posted";
            }
            last->second = wc[i].wr_id;
            if (wc[i].wr_id < receive_done.size()) {
              EXPECT_EQ(++receive_done[wc[i].wr_id], 1) << "receive " << wc[i].wr_id;
            }
            const std::uint8_t* got = r.bufb + (wc[i].wr_id % kRecvSlots) * SrqRig::kSlot;
            std::uint16_t m = 0;
            std::memcpy(&m, got, 2);
            if (m >= kMessages) {
              ADD_FAILURE() << "receive " << wc[i].wr_id << " holds no message";
            } else {
              ++seen[m];
              EXPECT_EQ(wc[i].byte_len, len[m]) << "message " << m;
              std::vector<std::uint8_t> want(len[m]);
              fill_pattern(want.data(), len[m], m);
              std::memcpy(want.data(), &m, 2);  // m: the uint16_t read back
              EXPECT_EQ(std::memcmp(got, want.data(), len[m]), 0) << "message " << m;
            }
            ++received;
          }
        }
        // Receives go back in batches of 16, so the SRQ runs dry between them.
        while (next_recv + 16 <= received + 24 || (sent == kMessages && next_recv < received + 24)) {
          EXPECT_EQ(r.post_recv(static_cast<std::uint32_t>(next_recv % kRecvSlots), next_recv), 0);
          ++next_recv;
        }
        return send_done == kMessages && received == kMessages;
      },
      600'000'000'000ull);
  ASSERT_TRUE(finished) << sent << " sent, " << send_done << " send completions, " << received << " received";
  for (std::uint32_t m = 0; m < kMessages; ++m) EXPECT_EQ(seen[m], 1) << "message " << m;
  std::uint64_t retransmitted = 0, rnr = 0;
  for (int i = 0; i < SrqRig::kQps; ++i) {
    retransmitted += r.qa[i]->counter("retransmitted_packets");
    rnr += r.qb[i]->counter("rnr_naks_sent");
  }
  EXPECT_GT(retransmitted, 0u) << "the loss took packets: recovered by retransmission";
  std::printf("  %u messages over %d QPs on one SRQ: %llu packets retransmitted, %llu RNR NAKs\n", kMessages,
              SrqRig::kQps, static_cast<unsigned long long>(retransmitted), static_cast<unsigned long long>(rnr));
}

}  // namespace
}  // namespace uroce::test
