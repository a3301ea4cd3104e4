// Completion events (CompletionQueue::arm, ibv_req_notify_cq) on the
// simulated link, in virtual time: an arm fires on the next completion
// added, and at once for one waiting only if no event announced it; once
// per arm. perftest's latency tests with -e re-arm before they poll the
// completion that woke them (an event for that one made their next wait
// return with nothing to poll, and the ping-pong fell apart); UCX arms
// after polling, without polling again.
#include <gtest/gtest.h>

#include "device/sim_pair.h"
#include "support/work_requests.h"
#include "uroce/verbs.h"

namespace uroce::test {
namespace {

void count_event(void* arg) { ++*static_cast<int*>(arg); }

TEST(CqEvents, AnArmFiresOnTheNextCompletionOrOneNoEventAnnounced) {
  device::SimPair net(7);
  int events = 0;
  ProtectionDomain* pda = net.a->alloc_pd();
  ProtectionDomain* pdb = net.b->alloc_pd();
  CompletionQueue* cqa = net.a->create_cq(64);
  CompletionQueue* cqb = net.b->create_cq(64, &count_event, &events);
  ASSERT_NE(cqb, nullptr);
  QpInitAttr init;
  init.cap = ibv_qp_cap{8, 8, 1, 1, 64};
  init.send_cq = init.recv_cq = cqa;
  QueuePair* qa = pda->create_qp(init);
  init.send_cq = init.recv_cq = cqb;
  QueuePair* qb = pdb->create_qp(init);
  std::uint8_t* bufa = static_cast<std::uint8_t*>(net.a->alloc_buffer(4096));
  std::uint8_t* bufb = static_cast<std::uint8_t*>(net.b->alloc_buffer(4096));
  MemoryRegion* mra = pda->reg_mr(bufa, 4096, IBV_ACCESS_LOCAL_WRITE);
  MemoryRegion* mrb = pdb->reg_mr(bufb, 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(net.connect(qa, qb), 0);
  for (std::uint64_t id = 1; id <= 2; ++id) ASSERT_EQ(post_recv_one(qb, bufb + 64 * id, 64, mrb->lkey, id), 0);
  auto send = [&](std::uint64_t id) {
    return post_rdma(qa, IBV_WR_SEND, bufa, 8, mra->lkey, std::uint64_t{0}, 0, id, IBV_SEND_SIGNALED);
  };
  // Quiet for a virtual millisecond: whatever was to fire has.
  auto settle = [&] { net.run_until([] { return false; }, 1'000'000); };

  ASSERT_EQ(cqb->arm(false), 0);
  ASSERT_EQ(send(11), 0);
  ASSERT_TRUE(net.run_until([&] { return events == 1; }));
  // The SEND's receive completion waits, unpolled; arming again does not
  // report it a second time.
  ASSERT_EQ(cqb->arm(false), 0);
  settle();
  EXPECT_EQ(events, 1) << "an arm fired for a completion that was already waiting";
  // The next completion does.
  ASSERT_EQ(send(12), 0);
  ASSERT_TRUE(net.run_until([&] { return events == 2; }));
  ibv_wc wc[4];
  ASSERT_EQ(cqb->poll(4, wc), 2);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[1].wr_id, 2u);
  // One event per arm: a completion with nothing armed fires none.
  ASSERT_EQ(post_recv_one(qb, bufb, 64, mrb->lkey, 3), 0);
  ASSERT_EQ(send(13), 0);
  settle();
  EXPECT_EQ(events, 2);
  // That completion no event announced: an arm while it waits fires at
  // once (a program that polled before arming missed it, the window an
  // RNIC's arm with its consumer index closes; UCX counts on it), and only
  // once.
  ASSERT_EQ(cqb->arm(false), 0);
  EXPECT_EQ(events, 3) << "a completion that came while nothing was armed was not reported at the arm";
  ASSERT_EQ(cqb->arm(false), 0);
  settle();
  EXPECT_EQ(events, 3) << "the same waiting completion fired a second arm";
  EXPECT_EQ(cqb->poll(4, wc), 1);
  EXPECT_EQ(wc[0].wr_id, 3u);
}

}  // namespace
}  // namespace uroce::test
