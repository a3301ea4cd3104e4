// Security review H3 and M1 (issue 25), as an attacker acts: a program (or
// a uroced client) that asks for a QP to an address nobody answers, again
// and again, or registers a large region, must not stop the other QPs of
// the device. Before the fix both ran inside a control call, every worker
// parked: resolution spun for a second on the port's receive queue
// (dropping the frames it found), reg_mr populated gigabytes.
//
// Two devices on a net_ring pair, each engine on a worker; a ping loop of
// single RDMA WRITEs on a connected QP pair records when each completion
// came, and the attack runs beside it.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "support/eal_environment.h"
#include "support/ring_pair_rig.h"
#include "verbs/internal.h"
#include "support/work_requests.h"
#include "uroce/stats.h"

namespace uroce::test {
namespace {

using Clock = std::chrono::steady_clock;

// A connected QP pair whose WRITEs run one at a time from a thread of its
// own, each completion's time recorded.
class Traffic : public RingPairRig {
 public:
  // Each device's engine on a worker; 64-byte WRITEs: the MTU is
  // ConnectParams' default.
  explicit Traffic(const std::string& name)
      : RingPairRig(name, {.worker_cpu_a = -1, .worker_cpu_b = -1, .cq_depth = 256, .connect_params = {}}) {}

  void start() {
    thread_ = std::thread([this] {
      ibv_wc wc[4];
      while (!stop_.load()) {
        if (post_rdma(qa, IBV_WR_RDMA_WRITE, bufa, 64, mra->lkey, bufb, mrb->rkey) != 0) break;
        const auto deadline = Clock::now() + std::chrono::seconds(30);
        int got = 0;
        while (got == 0 && Clock::now() < deadline) got = cqa->poll(4, wc);
        if (got <= 0 || wc[0].status != IBV_WC_SUCCESS) {
          failed_.store(true);
          break;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        done_.push_back(Clock::now());
      }
    });
  }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  ~Traffic() { stop(); }

  // Completions that came in [from, to].
  std::size_t completions(Clock::time_point from, Clock::time_point to) {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<std::size_t>(
        std::count_if(done_.begin(), done_.end(), [&](Clock::time_point t) { return t >= from && t <= to; }));
  }
  bool failed() const { return failed_.load(); }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::vector<Clock::time_point> done_;
};

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// H3: modify_qp to a GID nobody on the link answers, repeated. Each attempt
// used to hold every worker for a second; now the first waits for its
// second outside the control call (the other QP's WRITEs keep completing),
// and the repeats fail at once from the negative cache.
TEST(SecurityResolve, UnresolvableModifyQpNeitherStopsOtherQpsNorCostsASecondEachTime) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Traffic t("secres_h3");
  ASSERT_NE(t.pair, nullptr);
  // The attacker's QP on device A, to 10.98.0.77 (nobody).
  CompletionQueue* cq = t.pair->a->create_cq(16);
  QpInitAttr init;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  init.send_cq = init.recv_cq = cq;
  QueuePair* attacker = t.pda->create_qp(init);
  ASSERT_NE(attacker, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(attacker->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = IBV_MTU_1024;
  rtr.dest_qp_num = 0x99;
  rtr.rq_psn = 0;
  rtr.max_dest_rd_atomic = 1;
  rtr.min_rnr_timer = 12;
  rtr.ah_attr.is_global = 1;
  rtr.ah_attr.port_num = 1;
  rtr.ah_attr.grh.dgid = ipv4_gid({10, 98, 0, 77});
  rtr.ah_attr.grh.sgid_index = 1;
  rtr.ah_attr.grh.hop_limit = 64;
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

  t.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the ping loop is running
  const auto first_start = Clock::now();
  EXPECT_EQ(attacker->modify(rtr, mask), EHOSTUNREACH);
  const auto first_end = Clock::now();
  std::vector<double> repeats_ms;
  for (int i = 0; i < 5; ++i) {
    const auto s = Clock::now();
    EXPECT_EQ(attacker->modify(rtr, mask), EHOSTUNREACH);
    repeats_ms.push_back(ms_between(s, Clock::now()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  t.stop();
  ASSERT_FALSE(t.failed()) << "a WRITE of the other QP did not complete";

  const std::size_t during_first = t.completions(first_start, first_end);
  std::printf("first attempt %.0f ms, %zu WRITEs completed meanwhile; repeats (ms):", ms_between(first_start, first_end),
              during_first);
  for (double ms : repeats_ms) std::printf(" %.1f", ms);
  std::printf("\n");
  // The attempt waited for its answer (about a second) while the engines
  // ran: the other QP's WRITEs (one at a time, tens of microseconds each)
  // kept completing. Parked workers complete none.
  EXPECT_GE(ms_between(first_start, first_end), 500.0) << "no time given to the peer to answer";
  EXPECT_GE(during_first, 10u) << "the other QP stood still while the address was resolved";
  // The repeats come from the negative cache: no second of asking each.
  EXPECT_LT(*std::max_element(repeats_ms.begin(), repeats_ms.end()), 500.0);
  EXPECT_GE(internal::resolve_counter(*t.pair->a, "resolve_negative_hits"), 5u);
  EXPECT_EQ(internal::resolve_counter(*t.pair->a, "resolve_started"), 1u);
  // No frame of the ping loop was drained by the resolver: every RoCE
  // frame one engine handed to its port reached the other's (net_ring
  // loses none). Counted by frames, not by the ping QP's timeouts: on a
  // loaded machine a worker kept off its CPU past the local ACK timeout
  // makes one without any frame lost.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // late ACKs of resent WRITEs land
  auto engine_counter = [](Context& ctx, const char* name) {
    for (const Stat& st : ctx.stats()) {
      if (st.scope == StatScope::kEngine && std::string_view(st.name) == name) return st.value;
    }
    return std::uint64_t{0};
  };
  EXPECT_EQ(engine_counter(*t.pair->b, "rx_frames"), engine_counter(*t.pair->a, "tx_frames"));
  EXPECT_EQ(engine_counter(*t.pair->a, "rx_frames"), engine_counter(*t.pair->b, "tx_frames"));
  EXPECT_GT(engine_counter(*t.pair->a, "tx_frames"), 0u);
  EXPECT_EQ(attacker->state(), IBV_QPS_INIT);
  EXPECT_EQ(t.pda->destroy_qp(attacker), 0);
  EXPECT_EQ(t.pair->a->destroy_cq(cq), 0);
}

// H3: the address a resolution asked for comes back on the engine's queue
// and is taken there: a peer that answers ARP makes modify_qp succeed.
TEST(SecurityResolve, AnsweredResolutionCompletesWhileEnginesRun) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Traffic t("secres_ok");
  ASSERT_NE(t.pair, nullptr);
  // A's own IPv4 GID over the link: B answers ARP for 10.98.0.2 (known
  // statically to A), so ask for the link-local GID of B instead (ND).
  ibv_gid b_ll{};
  ASSERT_EQ(t.pair->b->query_gid(0, b_ll), 0);
  std::uint8_t mac[6] = {};
  Reach r = t.pair->a->resolve_gid(b_ll, mac);
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (r == Reach::kPending && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r = t.pair->a->resolve_gid(b_ll, mac);
  }
  EXPECT_EQ(r, Reach::kKnown);
  EXPECT_EQ(std::memcmp(mac, t.pair->io_b->mac().data(), 6), 0);
}

// M1: reg_mr of a large region (populated page by page, registered with
// DPDK) used to run inside the control call; now only the table insert
// does, and the other QP's WRITEs complete while it runs.
TEST(SecurityResolve, LargeRegMrDoesNotHoldTheEngines) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Traffic t("secres_m1");
  ASSERT_NE(t.pair, nullptr);
  constexpr std::size_t kLarge = std::size_t{768} << 20;
  void* big = mmap(nullptr, kLarge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(big, MAP_FAILED);
  t.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = Clock::now();
  MemoryRegion* mr = t.pda->reg_mr(big, kLarge, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const auto end = Clock::now();
  const auto dereg_start = Clock::now();
  const int dereg = mr != nullptr ? t.pda->dereg_mr(mr) : -1;
  const auto dereg_end = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  t.stop();
  munmap(big, kLarge);
  ASSERT_NE(mr, nullptr) << t.pair->a->last_error();
  EXPECT_EQ(dereg, 0);
  ASSERT_FALSE(t.failed()) << "a WRITE of the other QP did not complete";
  const std::size_t during = t.completions(start, end);
  std::printf("reg_mr of %zu MiB took %.0f ms, %zu WRITEs completed meanwhile; dereg_mr %.0f ms\n", kLarge >> 20,
              ms_between(start, end), during, ms_between(dereg_start, dereg_end));
  // Populating 768 MiB takes a good part of a second at least (it competes
  // for the CPU with the ping loop on a small machine); workers held for it
  // complete nothing (at most the one WRITE already in flight).
  EXPECT_GE(during, 5u) << "the engines stood still while the region was populated";
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new uroce::test::EalEnvironment({.name = "uroce-secres", .memory_mb = "512"}));
  return RUN_ALL_TESTS();
}
