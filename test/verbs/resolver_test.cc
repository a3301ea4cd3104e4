// The Context's address resolution (lib/verbs/resolver.h) on a port that
// answers when the test says, in the test's own time: when requests go out,
// when a resolution is given up, what the negative cache refuses, and that a
// caller kept from asking (a loaded host) does not find its resolution
// failed having asked once.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "uroce/port.h"
#include "verbs/resolver.h"

namespace uroce::test {
namespace {

using Clock = Resolver::Clock;
using std::chrono::milliseconds;

// A port whose neighbour answers once `answered` is set: counts the
// requests asked of it (resolve with `ask`) and the resolutions abandoned.
class AnsweringIo : public PacketIo {
 public:
  std::uint16_t rx_burst(RxFrame*, std::uint16_t) override { return 0; }
  void rx_release(RxFrame*, std::uint16_t) override {}
  std::uint16_t tx_burst(const TxFrame*, std::uint16_t) override { return 0; }
  Resolution resolve(const ibv_gid&, std::uint8_t mac[6], bool ask) override {
    if (answered) {
      std::memset(mac, 0x42, 6);
      return Resolution::kKnown;
    }
    requests += ask ? 1 : 0;
    return Resolution::kPending;
  }
  void abandon(const ibv_gid&) override { ++abandoned; }

  bool answered = false;
  int requests = 0;
  int abandoned = 0;
};

ibv_gid gid_of(std::uint8_t last) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = 10;
  g.raw[15] = last;
  return g;
}

TEST(Resolver, AskedOnScheduleAnUnansweredAddressFailsAfterASecondAndIsThenRefused) {
  AnsweringIo io;
  Resolver r(&io);
  const Clock::time_point t0 = Clock::now();
  const ibv_gid peer = gid_of(7);
  Reach last = Reach::kPending;
  Clock::time_point failed_at{};
  // Queried every 10 ms, as the CM's held MADs are.
  for (Clock::time_point t = t0; t < t0 + milliseconds(2000); t += milliseconds(10)) {
    last = r.query(peer, nullptr, t);
    if (last != Reach::kPending) {
      failed_at = t;
      break;
    }
  }
  ASSERT_EQ(last, Reach::kUnreachable);
  EXPECT_EQ(failed_at - t0, milliseconds(1000));
  EXPECT_EQ(io.requests, 5) << "one at the start, then every 200 ms";
  EXPECT_EQ(io.abandoned, 1);
  const ResolveCounters c = r.counters();
  EXPECT_EQ(c.resolve_started, 1u);
  EXPECT_EQ(c.resolve_asked_again, 4u);
  EXPECT_EQ(c.resolve_failed, 1u);
  // Refused without asking for kNegativeTtl, then asked again.
  EXPECT_EQ(r.query(peer, nullptr, failed_at + milliseconds(4900)), Reach::kUnreachable);
  EXPECT_EQ(io.requests, 5);
  EXPECT_EQ(r.counters().resolve_negative_hits, 1u);
  EXPECT_EQ(r.query(peer, nullptr, failed_at + Resolver::kNegativeTtl), Reach::kPending);
  EXPECT_EQ(io.requests, 6);
}

// The failure CI once met: a connect's resolution asked once, its caller
// then kept off the CPU past the second, and given up at the next look
// without another request (rdma_connect ended UNREACHABLE while the link
// was fine). Now the late look asks again, and the answer is taken.
TEST(Resolver, ACallerKeptFromAskingPastTheSecondAsksAgainInsteadOfFailing) {
  AnsweringIo io;
  Resolver r(&io);
  const Clock::time_point t0 = Clock::now();
  const ibv_gid peer = gid_of(8);
  std::uint8_t mac[6] = {};
  EXPECT_EQ(r.query(peer, mac, t0), Reach::kPending);
  EXPECT_EQ(io.requests, 1);
  EXPECT_EQ(r.query(peer, mac, t0 + milliseconds(1500)), Reach::kPending);
  EXPECT_EQ(io.requests, 2);
  EXPECT_EQ(r.query(peer, mac, t0 + milliseconds(2600)), Reach::kPending);
  EXPECT_EQ(io.requests, 3);
  io.answered = true;
  EXPECT_EQ(r.query(peer, mac, t0 + milliseconds(2610)), Reach::kKnown);
  EXPECT_EQ(mac[0], 0x42);
  EXPECT_EQ(r.counters().resolve_failed, 0u);
  EXPECT_EQ(r.counters().resolve_answered, 1u);

  // With its requests made, the third one kRetry unanswered, it fails.
  io.answered = false;
  const ibv_gid other = gid_of(9);
  const Clock::time_point t1 = t0 + milliseconds(5000);
  EXPECT_EQ(r.query(other, nullptr, t1), Reach::kPending);
  EXPECT_EQ(r.query(other, nullptr, t1 + milliseconds(1500)), Reach::kPending);
  EXPECT_EQ(r.query(other, nullptr, t1 + milliseconds(1700)), Reach::kPending);
  EXPECT_EQ(r.query(other, nullptr, t1 + milliseconds(1800)), Reach::kPending) << "the last request is fresh";
  EXPECT_EQ(r.query(other, nullptr, t1 + milliseconds(1900)), Reach::kUnreachable);
  EXPECT_EQ(r.counters().resolve_failed, 1u);
}

// Resolutions nobody looks at any more do not hold the table: a new one,
// with kMaxPending under way, gives up those past kAbandoned (however few
// requests they made) and starts.
TEST(Resolver, AFullTableGivesUpResolutionsNobodyLooksAt) {
  AnsweringIo io;
  Resolver r(&io);
  const Clock::time_point t0 = Clock::now();
  for (std::size_t i = 0; i < Resolver::kMaxPending; ++i) {
    EXPECT_EQ(r.query(gid_of(static_cast<std::uint8_t>(i)), nullptr, t0), Reach::kPending);
  }
  const ibv_gid late = gid_of(200);
  EXPECT_EQ(r.query(late, nullptr, t0 + milliseconds(1500)), Reach::kPending);
  EXPECT_EQ(r.counters().resolve_busy, 1u) << "none asked enough to be given up yet";
  EXPECT_EQ(r.counters().resolve_started, Resolver::kMaxPending);
  EXPECT_EQ(r.query(late, nullptr, t0 + Resolver::kAbandoned), Reach::kPending);
  EXPECT_EQ(r.counters().resolve_failed, Resolver::kMaxPending);
  EXPECT_EQ(r.counters().resolve_started, Resolver::kMaxPending + 1);
}

}  // namespace
}  // namespace uroce::test
