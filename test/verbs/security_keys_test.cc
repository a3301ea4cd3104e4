// Issue 25, L6 and L3 (identity): what a spoofing peer or another client
// would have to guess. Two fresh contexts made alike do not give out the
// same keys or QPNs, keys are not slot<<8|1 and QPNs not 0x11, 0x12...,
// and they stay unique and valid (a stale key opens nothing). A PD made
// after 2^32 others never has a live PD's identity, so that PD's keys fail
// the PD check for it.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <vector>

#include "support/rc_fixture.h"
#include "support/scripted_port.h"
#include "verbs/verbs_impl.h"

namespace uroce::test {
namespace {

struct Issued {
  std::vector<std::uint32_t> keys;
  std::vector<std::uint32_t> qpns;
};

// What a fresh context (seed 1, as every simulated one) gives out first.
Issued first_issued(device::SimPair& net, int n) {
  Issued out;
  ProtectionDomain* pd = net.a->alloc_pd();
  CompletionQueue* cq = net.a->create_cq(64);
  auto* buf = static_cast<std::uint8_t*>(net.a->alloc_buffer(4096));
  QpInitAttr init;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  init.send_cq = init.recv_cq = cq;
  for (int i = 0; i < n; ++i) {
    MemoryRegion* mr = pd->reg_mr(buf + i * 16, 16, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    EXPECT_NE(mr, nullptr);
    if (mr == nullptr) return out;
    EXPECT_EQ(mr->lkey, mr->rkey);
    out.keys.push_back(mr->rkey);
    QueuePair* qp = pd->create_qp(init);
    EXPECT_NE(qp, nullptr);
    if (qp == nullptr) return out;
    out.qpns.push_back(qp->qp_num());
  }
  return out;
}

TEST(SecurityKeys, TwoFreshContextsDoNotGiveOutTheSameKeysOrQpns) {
  constexpr int kN = 16;
  device::SimPair one(1);
  device::SimPair two(1);
  const Issued a = first_issued(one, kN);
  const Issued b = first_issued(two, kN);
  ASSERT_EQ(a.keys.size(), std::size_t{kN});
  ASSERT_EQ(b.keys.size(), std::size_t{kN});
  EXPECT_NE(a.keys, b.keys) << "the same rkeys from two fresh contexts: a peer can guess them";
  EXPECT_NE(a.qpns, b.qpns) << "the same QPNs from two fresh contexts: a peer can guess them";
  for (const Issued* s : {&a, &b}) {
    int slot_pattern = 0;  // slot << 8 | 1, the first generation of each slot
    int consecutive = 0;   // 0x11, 0x12, ...
    for (int i = 0; i < kN; ++i) {
      slot_pattern += (s->keys[i] & 0xff) == 1;
      if (i > 0) consecutive += s->qpns[i] == s->qpns[i - 1] + 1;
    }
    EXPECT_LT(slot_pattern, kN / 2) << "keys are slot<<8|1";
    EXPECT_LT(consecutive, kN / 2) << "QPNs count up";
    EXPECT_EQ(std::set<std::uint32_t>(s->keys.begin(), s->keys.end()).size(), std::size_t{kN});
    EXPECT_EQ(std::set<std::uint32_t>(s->qpns.begin(), s->qpns.end()).size(), std::size_t{kN});
    for (const std::uint32_t q : s->qpns) {
      EXPECT_GE(q, 2u) << "QP0 and QP1 are the management QPs";
      EXPECT_LE(q, 0xffffffu);
    }
  }
}

// A client that registers regions and sees its keys cannot tell the next
// key (another client's, in uroced) from them: it is not the last one plus
// one slot. And keys stay keys: each opens its own region, a key that
// outlived its region opens nothing, and 64 registrations, 8 live at a
// time, never repeat a key.
TEST(SecurityKeys, KeysAreUniqueAndAStaleKeyOpensNothing) {
  device::SimPair net(3);
  ProtectionDomain* pd = net.a->alloc_pd();
  auto* buf = static_cast<std::uint8_t*>(net.a->alloc_buffer(4096));
  const mem::MrTable& table = uroce::testing::mr_table(*net.a);
  std::set<std::uint32_t> stale;
  std::vector<MemoryRegion*> live;
  std::uint32_t last = 0;
  int guessed = 0;
  for (int round = 0; round < 64; ++round) {
    MemoryRegion* mr = pd->reg_mr(buf + (round % 16) * 64, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr, nullptr) << round;
    guessed += mr->rkey == last + 0x100;
    last = mr->rkey;
    EXPECT_EQ(stale.count(mr->rkey), 0u) << "a stale key came back at once";
    std::uint8_t* host = nullptr;
    EXPECT_EQ(table.check(mr->rkey, true, pd->id(), mr->iova, 64, IBV_ACCESS_REMOTE_READ, host), mem::AccessResult::kOk);
    EXPECT_EQ(host, static_cast<std::uint8_t*>(mr->addr));
    live.push_back(mr);
    if (live.size() == 8) {
      MemoryRegion* gone = live.front();
      live.erase(live.begin());
      const std::uint32_t key = gone->rkey;
      ASSERT_EQ(pd->dereg_mr(gone), 0);
      stale.insert(key);
    }
    for (const std::uint32_t k : stale) {
      EXPECT_EQ(table.check(k, true, pd->id(), 0, 1, 0, host), mem::AccessResult::kBadKey) << std::hex << k;
    }
  }
  EXPECT_LT(guessed, 8) << "the next key is the last one plus one slot";
}

// 10,000 QPs on one context, some destroyed as it goes: the QPN after one
// an attacker saw is not that one plus one; every QPN distinct, none 0 or
// 1, made in bounded time (a generous margin: the choice is O(1) per QP).
TEST(SecurityKeys, TenThousandQpsGetDistinctQpnsQuickly) {
  device::SimPair net(4);
  ProtectionDomain* pd = net.a->alloc_pd();
  CompletionQueue* cq = net.a->create_cq(64);
  QpInitAttr init;
  init.cap = ibv_qp_cap{1, 1, 1, 1, 0};
  init.send_cq = init.recv_cq = cq;
  std::set<std::uint32_t> qpns;
  std::vector<QueuePair*> qps;
  std::uint32_t last = 0;
  int guessed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) {
    QueuePair* qp = pd->create_qp(init);
    ASSERT_NE(qp, nullptr) << i << ": " << net.a->last_error();
    ASSERT_GE(qp->qp_num(), 2u);
    guessed += qp->qp_num() == last + 1;
    last = qp->qp_num();
    ASSERT_TRUE(qpns.insert(qp->qp_num()).second) << "QPN given twice: " << qp->qp_num();
    qps.push_back(qp);
    // Churn: every tenth QP goes again, so numbers are freed and chosen anew.
    if (i % 10 == 9) {
      QueuePair* gone = qps[qps.size() / 2];
      qpns.erase(gone->qp_num());
      qps.erase(qps.begin() + static_cast<std::ptrdiff_t>(qps.size() / 2));
      ASSERT_EQ(pd->destroy_qp(gone), 0);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(guessed, 100) << "the next QPN is the last one plus one";
  EXPECT_LT(seconds, 120.0);
  std::printf("10000 create_qp (1000 destroy_qp): %.2f s\n", seconds);
  for (QueuePair* qp : qps) ASSERT_EQ(pd->destroy_qp(qp), 0);
}

// L3: PD identities are 64-bit and never reused. A PD made after 2^32
// others (the counter moved there by the test hook) has an identity no live
// PD has, so a region of the first PD is no region of it: its lkey fails
// the PD check, and a SEND from its QP naming that lkey ends in a local
// protection error without a byte sent.
TEST(SecurityKeys, APdMadeAfterTwoToTheThirtyTwoOthersNeverPassesForALiveOne) {
  RcPair p(5, 4096);
  ASSERT_EQ(p.connect_rc, 0);
  ProtectionDomain* first = p.pda;
  testing::set_next_pd_id(first->id() + (std::uint64_t{1} << 32) - 1);
  ProtectionDomain* before = p.net.a->alloc_pd();
  ProtectionDomain* wrapped = p.net.a->alloc_pd();  // 2^32 PDs after the first
  ASSERT_NE(before, nullptr);
  ASSERT_NE(wrapped, nullptr);
  EXPECT_NE(wrapped->id(), first->id()) << "a PD made 2^32 later has a live PD's identity";
  EXPECT_NE(before->id(), first->id());
  std::uint8_t* host = nullptr;
  const mem::MrTable& table = uroce::testing::mr_table(*p.net.a);
  EXPECT_EQ(table.check(p.mra->lkey, false, wrapped->id(), reinterpret_cast<std::uint64_t>(p.bufa), 16, 0, host),
            mem::AccessResult::kBadPd);
  EXPECT_EQ(table.check(p.mra->lkey, false, first->id(), reinterpret_cast<std::uint64_t>(p.bufa), 16, 0, host),
            mem::AccessResult::kOk);
  // Through the data path: a QP of the new PD, connected, sending from the
  // first PD's region.
  QpInitAttr init;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  init.send_cq = init.recv_cq = p.cqa;
  QueuePair* qx = wrapped->create_qp(init);
  init.send_cq = init.recv_cq = p.cqb;
  QueuePair* qy = p.pdb->create_qp(init);
  ASSERT_NE(qx, nullptr);
  ASSERT_NE(qy, nullptr);
  ASSERT_EQ(p.net.connect(qx, qy), 0);
  ASSERT_EQ(post_recv_one(qy, p.bufb, 64, p.mrb->lkey, 9), 0);
  std::memcpy(p.bufa, "another PD's memory", 20);
  ASSERT_EQ(post_rdma(qx, IBV_WR_SEND, p.bufa, 20, p.mra->lkey, std::uint64_t{0}, 0, 8), 0);
  const auto got = p.wait(p.cqa, 1, 2'000'000'000ull);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_LOC_PROT_ERR) << "another PD's lkey worked for the new PD's QP";
  EXPECT_NE(std::memcmp(p.bufb, "another PD's memory", 20), 0);
}

}  // namespace
}  // namespace uroce::test
