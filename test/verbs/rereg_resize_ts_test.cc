// ProtectionDomain::rereg_mr (ibv_rereg_mr), CompletionQueue::resize
// (ibv_resize_cq) and completion timestamps on the simulated link: keys kept,
// every flag combination, a WRITE in flight when its region moves, waiting
// completions kept in order, timestamps of the engines' (virtual) clock, and
// a QP moved to RESET leaving nothing in its CQ.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/rc_fixture.h"
#include "verbs/internal.h"
#include "verbs/verbs_impl.h"

namespace uroce {
namespace {

using test::RcPair;

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST(Rereg, EveryFlagCombinationKeepsTheKeysAndChangesWhatItNames) {
  RcPair t(11, 1 << 16);
  ASSERT_EQ(t.connect_rc, 0);
  ProtectionDomain* other_pd = t.net.b->alloc_pd();
  auto* other = static_cast<std::uint8_t*>(t.net.b->alloc_buffer(1 << 16));
  ASSERT_TRUE(other_pd && other);
  const std::uint32_t key = t.mrb->lkey;
  for (int flags = 1; flags <= 7; ++flags) {
    ReregAttr change;
    change.flags = flags;
    const bool translation = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
    std::uint8_t* to = t.mrb->addr == other ? t.bufb : other;
    ProtectionDomain* pd = t.mrb->pd == other_pd ? t.pdb : other_pd;
    const int access = t.mrb->access == kAll ? IBV_ACCESS_LOCAL_WRITE : kAll;
    change.addr = to;
    change.length = 4096 * static_cast<std::size_t>(flags);
    change.iova = reinterpret_cast<std::uintptr_t>(to);
    change.pd = pd;
    change.access = access;
    const MemoryRegion before = *t.mrb;
    ASSERT_EQ(t.mrb->pd->rereg_mr(t.mrb, change), 0) << flags << ": " << t.net.b->last_error();
    EXPECT_EQ(t.mrb->lkey, key);
    EXPECT_EQ(t.mrb->rkey, key);
    EXPECT_EQ(t.mrb->addr, translation ? to : before.addr) << flags;
    EXPECT_EQ(t.mrb->length, translation ? change.length : before.length) << flags;
    EXPECT_EQ(t.mrb->pd, (flags & IBV_REREG_MR_CHANGE_PD) ? pd : before.pd) << flags;
    EXPECT_EQ(t.mrb->access, (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : before.access) << flags;
    const mem::Region* r = testing::mr_table(*t.net.b).find(key);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->base, static_cast<std::uint8_t*>(t.mrb->addr));
    EXPECT_EQ(r->length, t.mrb->length);
    EXPECT_EQ(r->pd, t.mrb->pd->id());
    EXPECT_EQ(r->access, t.mrb->access);
  }
  // Refused, and nothing changed: no flag, an unknown one, a translation
  // without memory, REMOTE_WRITE without LOCAL_WRITE, a PD of another context.
  const MemoryRegion before = *t.mrb;
  ProtectionDomain* foreign = t.net.a->alloc_pd();
  for (const ReregAttr bad : {ReregAttr{0}, ReregAttr{8}, ReregAttr{IBV_REREG_MR_CHANGE_TRANSLATION},
                              ReregAttr{IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, 0, IBV_ACCESS_REMOTE_WRITE},
                              ReregAttr{IBV_REREG_MR_CHANGE_PD, foreign}}) {
    EXPECT_EQ(t.mrb->pd->rereg_mr(t.mrb, bad), EINVAL) << bad.flags;
    EXPECT_EQ(t.mrb->addr, before.addr);
    EXPECT_EQ(t.mrb->pd, before.pd);
    EXPECT_EQ(t.mrb->access, before.access);
  }
  // The region is counted in the PD it is in now, and only there.
  EXPECT_EQ(testing::mr_table(*t.net.b).regions_in_pd((t.mrb->pd == other_pd ? t.pdb : other_pd)->id()), 0u);
  EXPECT_EQ(testing::mr_table(*t.net.b).regions_in_pd(t.mrb->pd->id()), 1u);
}

TEST(Rereg, AWriteLandsInTheNewTranslationAndTheOldAddressIsRefused) {
  RcPair t(12, 1 << 16);
  ASSERT_EQ(t.connect_rc, 0);
  auto* fresh = static_cast<std::uint8_t*>(t.net.b->alloc_buffer(1 << 16));
  ASSERT_NE(fresh, nullptr);
  std::memset(fresh, 0, 1 << 16);
  std::memset(t.bufb, 0, 1 << 16);
  ReregAttr change{IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, fresh, 1 << 16, reinterpret_cast<std::uintptr_t>(fresh)};
  ASSERT_EQ(t.pdb->rereg_mr(t.mrb, change), 0) << t.net.b->last_error();
  test::fill_pattern(t.bufa, 4096, 5);
  ASSERT_EQ(test::post_rdma(t.qa, IBV_WR_RDMA_WRITE, t.bufa, 4096, t.mra->lkey, fresh + 512, t.mrb->rkey, 1), 0);
  auto wc = t.wait(t.cqa, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(fresh + 512, t.bufa, 4096), 0);
  // The old address under the same rkey: outside the region now.
  ASSERT_EQ(test::post_rdma(t.qa, IBV_WR_RDMA_WRITE, t.bufa, 4096, t.mra->lkey, t.bufb + 512, t.mrb->rkey, 2), 0);
  wc = t.wait(t.cqa, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  for (int i = 0; i < (1 << 16); ++i) ASSERT_EQ(t.bufb[i], 0) << i;
}

// A WRITE of 256 packets, its region moved after the first have landed: no
// packet after the rereg reaches the old memory (MrTable's epoch), and the
// WRITE ends in a remote access error (the old addresses are not the new
// region's).
TEST(Rereg, AWriteInFlightToTheOldTranslationIsRefusedAsAfterDereg) {
  constexpr std::size_t kBytes = 1 << 20;
  RcPair t(13, kBytes);
  ASSERT_EQ(t.connect_rc, 0);
  auto* fresh = static_cast<std::uint8_t*>(t.net.b->alloc_buffer(kBytes));
  std::memset(fresh, 0, kBytes);
  std::memset(t.bufb, 0, kBytes);
  std::memset(t.bufa, 0x5a, kBytes);
  ASSERT_EQ(t.post_send(IBV_WR_RDMA_WRITE, 0, kBytes, 0, 1), 0);
  ASSERT_TRUE(t.net.run_until([&] { return t.bufb[0] == 0x5a; }));
  ASSERT_NE(t.bufb[kBytes - 1], 0x5a) << "the whole WRITE landed before the rereg";
  ReregAttr change{IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, fresh, kBytes, reinterpret_cast<std::uintptr_t>(fresh)};
  ASSERT_EQ(t.pdb->rereg_mr(t.mrb, change), 0) << t.net.b->last_error();
  std::size_t landed = 0;
  while (landed < kBytes && t.bufb[landed] == 0x5a) ++landed;
  const auto wc = t.wait(t.cqa, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  for (std::size_t i = landed; i < kBytes; ++i) ASSERT_EQ(t.bufb[i], 0) << "byte " << i << " written after the rereg";
  for (std::size_t i = 0; i < kBytes; ++i) ASSERT_EQ(fresh[i], 0) << i;
}

// Sends from a to b, each completing on both sides; `n` send completions
// left waiting in cqa (cqb is drained).
void leave_send_completions(RcPair& t, std::uint64_t first_id, int n) {
  const std::uint32_t before = internal::cq_waiting(*t.cqa);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(t.post_recv_b(0, 64, 1000 + i), 0);
    ASSERT_EQ(t.post_send(IBV_WR_SEND, 0, 64, 0, first_id + static_cast<std::uint64_t>(i)), 0);
  }
  ASSERT_TRUE(t.net.run_until([&] { return internal::cq_waiting(*t.cqa) == before + static_cast<std::uint32_t>(n); }));
  ASSERT_EQ(t.wait(t.cqb, static_cast<std::size_t>(n)).size(), static_cast<std::size_t>(n));
}

TEST(ResizeCq, WaitingCompletionsAreKeptInOrderAndFewerSlotsThanWaitIsEinval) {
  RcPair t(14, 1 << 16);
  ASSERT_EQ(t.connect_rc, 0);
  leave_send_completions(t, 1, 20);
  EXPECT_EQ(t.cqa->resize(19), EINVAL);
  EXPECT_EQ(t.cqa->resize(0), EINVAL);
  EXPECT_EQ(t.cqa->capacity(), 65536);
  ASSERT_EQ(t.cqa->resize(20), 0) << t.net.a->last_error();
  EXPECT_EQ(t.cqa->capacity(), 20);
  ASSERT_EQ(t.cqa->resize(24), 0);
  leave_send_completions(t, 21, 4);  // 24 wait now: the CQ is full, not overflowed
  EXPECT_FALSE(t.cqa->overflowed());
  ibv_wc wc[32];
  ASSERT_EQ(t.cqa->poll(32, wc), 24);
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(wc[i].wr_id, static_cast<std::uint64_t>(i + 1));
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
  }
  ASSERT_EQ(t.cqa->resize(1), 0);  // empty now
}

TEST(CompletionTimestamps, StampedWithTheEnginesClockWhereTheWorkCompletes) {
  RcPair t(15, 1 << 16);
  ASSERT_EQ(t.connect_rc, 0);
  CompletionQueue* stamped = t.net.a->create_cq(CqAttr{16, nullptr, nullptr, true});
  ASSERT_NE(stamped, nullptr);
  EXPECT_TRUE(stamped->timestamps());
  EXPECT_FALSE(t.cqa->timestamps());
  QpInitAttr init;
  init.cap = ibv_qp_cap{8, 8, 1, 1, 0};
  init.send_cq = init.recv_cq = stamped;
  QueuePair* qs = t.pda->create_qp(init);
  init.send_cq = init.recv_cq = t.cqb;
  QueuePair* qr = t.pdb->create_qp(init);
  ASSERT_TRUE(qs && qr);
  ASSERT_EQ(t.net.connect(qs, qr), 0);
  ClockValues v;
  ASSERT_EQ(t.net.a->query_clock(v), 0);
  EXPECT_EQ(v.raw_ns, t.net.clock.now_ns());
  EXPECT_NE(v.realtime_ns, 0u);
  std::uint64_t previous = 0;
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(test::post_recv_one(qr, t.bufb, 64, t.mrb->lkey, 50), 0);
    const std::uint64_t posted = t.net.clock.now_ns();
    ASSERT_EQ(test::post_send_one(qs, IBV_WR_SEND, t.bufa, 64, t.mra->lkey, static_cast<std::uint64_t>(i)), 0);
    ibv_wc wc{};
    std::uint64_t ts = 0;
    ASSERT_TRUE(t.net.run_until([&] { return stamped->poll(1, &wc, &ts) == 1; }));
    const std::uint64_t polled = t.net.clock.now_ns();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    // The ACK comes back over the link: strictly after the post on virtual time.
    EXPECT_GT(ts, posted);
    EXPECT_LE(ts, polled);
    EXPECT_GT(ts, previous);
    previous = ts;
    ASSERT_EQ(t.wait(t.cqb, 1).size(), 1u);
  }
  // A CQ made without them: poll with stamps reads 0, ibv_poll_cq's as ever.
  leave_send_completions(t, 1, 1);
  ibv_wc wc{};
  std::uint64_t ts = 7;
  ASSERT_EQ(t.cqa->poll(1, &wc, &ts), 1);
  EXPECT_EQ(ts, 0u);
  // Resizing keeps each completion's stamp with it.
  ASSERT_EQ(test::post_recv_one(qr, t.bufb, 64, t.mrb->lkey, 50), 0);
  ASSERT_EQ(test::post_send_one(qs, IBV_WR_SEND, t.bufa, 64, t.mra->lkey, 99), 0);
  ASSERT_TRUE(t.net.run_until([&] { return internal::cq_waiting(*stamped) == 1; }));
  const std::uint64_t before_resize = t.net.clock.now_ns();
  t.net.run_until([] { return false; }, 1'000'000);  // time moves on
  ASSERT_EQ(stamped->resize(64), 0);
  ASSERT_EQ(stamped->poll(1, &wc, &ts), 1);
  EXPECT_EQ(wc.wr_id, 99u);
  EXPECT_GT(ts, previous);
  EXPECT_LE(ts, before_resize);
}

// What rdma-core's test_mr rereg tests do: a QP in ERR with its receives
// flushed into its CQ, moved to RESET and used again, polls nothing of its
// earlier life (as rdma-core's mlx5 provider cleans the CQ).
TEST(ResetQp, TakesItsCompletionsOutOfItsCq) {
  RcPair t(16, 1 << 16);
  ASSERT_EQ(t.connect_rc, 0);
  leave_send_completions(t, 1, 3);  // qa's: stay
  for (int i = 0; i < 4; ++i) ASSERT_EQ(t.post_recv_b(0, 64, 500 + i), 0);
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(t.qb->modify(err, IBV_QP_STATE), 0);
  ASSERT_TRUE(t.net.run_until([&] { return internal::cq_waiting(*t.cqb) == 4; }));
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(t.qb->modify(reset, IBV_QP_STATE), 0);
  EXPECT_EQ(internal::cq_waiting(*t.cqb), 0u);
  EXPECT_EQ(internal::cq_waiting(*t.cqa), 3u);
}

}  // namespace
}  // namespace uroce
