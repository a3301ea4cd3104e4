// librdmacm lets go of its CM thread, its manager and its device context
// when the program is done with rdma_cm (issue 27, item 13): with the last
// ID and the last event channel destroyed, the thread named uroce-cm is
// joined and the process has the threads it had before its first
// rdma_cm call; the next call starts afresh, and a connection works in
// each round. In this process on net_ring (frames to our own address come
// back in), as rdmacm_api_test.cc. cm_own_eal_test.cc does the same in an
// application's own EAL, where the context's close takes the port down.
#include <dirent.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "self_connection.h"

namespace {

using namespace uroce::test;

void configure() { configure_net_ring("cmteardown"); }

// The threads a process with uroce's device started (EAL's, ibverbs's
// event monitor) but no rdma_cm: a context opened and closed once.
std::size_t baseline_threads() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  EXPECT_EQ(n, 1);
  if (n == 1) {
    ibv_context* ctx = ibv_open_device(list[0]);
    EXPECT_NE(ctx, nullptr);
    if (ctx != nullptr) ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  return thread_names().size();
}

TEST(CmTeardown, AChannelAndAnIdTwiceLeaveTheThreadsAsTheyWere) {
  configure();
  Deadline deadline(60);
  const std::size_t start = baseline_threads();
  ASSERT_EQ(threads_named("uroce-cm"), 0) << all_threads();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    rdma_event_channel* ch = rdma_create_event_channel();
    ASSERT_NE(ch, nullptr) << strerror(errno);
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
    EXPECT_EQ(threads_named("uroce-cm"), 1) << all_threads();
    EXPECT_EQ(rdma_destroy_id(id), 0);
    EXPECT_EQ(threads_named("uroce-cm"), 1) << "the channel still holds the CM";
    rdma_destroy_event_channel(ch);
    EXPECT_EQ(threads_named("uroce-cm"), 0) << all_threads();
    EXPECT_EQ(thread_names().size(), start) << all_threads();
  }
}

// A synchronous ID (no channel of the program's) holds the CM by itself.
TEST(CmTeardown, ASynchronousIdAloneHoldsTheCmUntilItIsDestroyed) {
  configure();
  Deadline deadline(60);
  const std::size_t start = baseline_threads();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0) << strerror(errno);
  EXPECT_EQ(threads_named("uroce-cm"), 1) << all_threads();
  EXPECT_EQ(rdma_destroy_id(id), 0);
  EXPECT_EQ(threads_named("uroce-cm"), 0) << all_threads();
  EXPECT_EQ(thread_names().size(), start) << all_threads();
}

// Threads that each make and destroy a channel and an ID, over and over:
// one thread's teardown never takes what another has just made (a call
// that starts the CM waits for a teardown under way to end), nothing hangs,
// and with the last gone the CM thread is too.
TEST(CmTeardown, ThreadsMakingAndDestroyingIdsAtOnce) {
  configure();
  Deadline deadline(120);
  const std::size_t start = baseline_threads();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&failures] {
      for (int k = 0; k < 50; ++k) {
        rdma_event_channel* ch = rdma_create_event_channel();
        rdma_cm_id* id = nullptr;
        if (ch == nullptr || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
          ++failures;
          if (ch != nullptr) rdma_destroy_event_channel(ch);
          continue;
        }
        sockaddr_in at = ipv4(0);
        if (rdma_bind_addr(id, sa(&at)) != 0 || id->verbs == nullptr || id->pd == nullptr) ++failures;
        if (rdma_destroy_id(id) != 0) ++failures;
        rdma_destroy_event_channel(ch);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(threads_named("uroce-cm"), 0) << all_threads();
  EXPECT_EQ(thread_names().size(), start) << all_threads();
}

TEST(CmTeardown, AConnectionInEachOfTwoRounds) {
  configure();
  Deadline deadline(60);
  const std::size_t start = baseline_threads();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    connect_to_ourselves();
    EXPECT_EQ(threads_named("uroce-cm"), 0) << all_threads();
    EXPECT_EQ(thread_names().size(), start) << all_threads();
  }
}

// rdma_get_devices' context stays valid (rdma-core's do until exit: a
// program may use it after rdma_free_devices, as libfabric's verbs provider
// does); the CM thread still stops with the last ID and channel.
TEST(CmTeardown, AListedContextStaysUsableAfterTheCmStops) {
  configure();
  Deadline deadline(60);
  int n = 0;
  ibv_context** list = rdma_get_devices(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(n, 1);
  ibv_context* listed = list[0];
  rdma_free_devices(list);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in at = ipv4(next_port());
  ASSERT_EQ(rdma_bind_addr(id, sa(&at)), 0);
  EXPECT_EQ(id->verbs, listed);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
  EXPECT_EQ(threads_named("uroce-cm"), 0) << all_threads();
  ibv_pd* pd = ibv_alloc_pd(listed);
  ASSERT_NE(pd, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  connect_to_ourselves();
}

}  // namespace

namespace {

// A thread blocked in rdma_get_cm_event when another destroys the channel
// goes on waiting (as on Linux's channel); the teardown does not wait for
// it, and the next round's channel (perhaps on the same descriptor number)
// and its events are not taken by it. Last: the blocked thread stays.
TEST(CmTeardown, AReaderLeftBlockedOnADestroyedChannelDoesNotHoldTheCm) {
  configure();
  Deadline deadline(60);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  std::atomic<bool> returned{false};
  std::thread reader([ch, &returned] {
    rdma_cm_event* e = nullptr;
    rdma_get_cm_event(ch, &e);
    returned = true;
  });
  reader.detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // inside its wait
  rdma_destroy_event_channel(ch);
  EXPECT_EQ(threads_named("uroce-cm"), 0) << all_threads();
  connect_to_ourselves();
  EXPECT_FALSE(returned.load());
}

}  // namespace
