// The lossy link a DPDK port can make on purpose at its receiver
// (dpdk::RxLoss, UROCE_RX_LOSS): what it parses and refuses, that it drops
// about the share of RoCE frames asked and never ARP, that every frame is
// delivered or counted, and that a seed repeats its pattern. On net_ring,
// which loops a queue's frames back to it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "dpdk/port.h"
#include "dpdk/port_io.h"
#include "engine/packet_io.h"
#include "support/eal_environment.h"
#include "support/frame_helpers.h"
#include "support/test_seed.h"

namespace uroce::test {
namespace {

TEST(RxLoss, ParsesAProbabilityAndASeed) {
  dpdk::RxLoss loss;
  std::string error;
  ASSERT_TRUE(dpdk::parse_rx_loss("0.02", loss, error)) << error;
  EXPECT_EQ(loss.probability, 0.02);
  EXPECT_EQ(loss.seed, 1u);
  ASSERT_TRUE(dpdk::parse_rx_loss("0.5,77", loss, error)) << error;
  EXPECT_EQ(loss.probability, 0.5);
  EXPECT_EQ(loss.seed, 77u);
  EXPECT_EQ(loss.min_bytes, 0u);
  ASSERT_TRUE(dpdk::parse_rx_loss("0.02,7,1024", loss, error)) << error;
  EXPECT_EQ(loss.probability, 0.02);
  EXPECT_EQ(loss.seed, 7u);
  EXPECT_EQ(loss.min_bytes, 1024u);
  ASSERT_TRUE(dpdk::parse_rx_loss("0", loss, error)) << error;
  EXPECT_EQ(loss.probability, 0);
  EXPECT_EQ(loss.min_bytes, 0u);
  for (const char* bad : {"", "1", "-0.1", "2%", "0.1,", "0.1,x", "0.1,7,", "0.1,7,x", "0.1,7,8,9", "0.1,,8", "nan",
                          "x"}) {
    dpdk::RxLoss kept{.probability = 0.3, .seed = 9};
    error.clear();
    EXPECT_FALSE(dpdk::parse_rx_loss(bad, kept, error)) << "'" << bad << "'";
    EXPECT_NE(error.find("UROCE_RX_LOSS must be a probability from 0 to below 1"), std::string::npos) << error;
    EXPECT_EQ(kept.probability, 0.3) << "refused text changes nothing: '" << bad << "'";
  }
}

// Sends `frames` through the port in bursts the ring holds and takes back
// what the queue's PortIo passes on; returns how many. With `passed`
// (RoCE frames of distinct lengths within a burst): which came through,
// and each burst's frames all passed on or counted as dropped.
std::size_t loop(dpdk::Port& port, dpdk::PortIo& io, const std::vector<std::vector<std::uint8_t>>& frames,
                 std::vector<bool>* passed = nullptr) {
  std::size_t got = 0;
  std::vector<engine::RxFrame> rx(64);
  for (std::size_t at = 0; at < frames.size(); at += 32) {
    const std::size_t n = std::min<std::size_t>(32, frames.size() - at);
    const auto burst = std::span<const std::vector<std::uint8_t>>(frames).subspan(at, n);
    EXPECT_EQ(port.send_copies(0, burst), n);
    const std::uint64_t dropped_before = io.counters().rx_dropped_impaired;
    std::uint16_t k = io.rx_burst(rx.data(), 64);
    // Which of the burst's frames came through: the others were counted.
    if (passed != nullptr) {
      std::size_t next = 0;
      for (std::uint16_t i = 0; i < k; ++i) {
        while (next < n && frames[at + next].size() != rx[i].len) passed->push_back(false), ++next;
        passed->push_back(true), ++next;
      }
      while (passed->size() < at + n) passed->push_back(false);
    }
    if (passed != nullptr) {
      EXPECT_EQ(k + (io.counters().rx_dropped_impaired - dropped_before), n);
    }
    got += k;
    io.rx_release(rx.data(), k);
  }
  return got;
}

// 4,000 RoCE frames of distinct lengths within each burst (to tell which
// came through), up to about 2 KiB, their payloads drawn from `seed`.
std::vector<std::vector<std::uint8_t>> roce_frames(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::uint8_t>> roce;
  for (int i = 0; i < 4000; ++i) {
    std::vector<std::uint8_t> payload(4 * (i % 500));
    for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
    roce.push_back(build(make_spec(0x0a), payload));
  }
  return roce;
}

TEST(RxLoss, DropsAboutTheShareAskedAndRepeatsForItsSeed) {
  ASSERT_EQ(EalEnvironment::error(), "");
  std::string error;
  // A malformed UROCE_RX_LOSS refuses the port before it is touched.
  setenv("UROCE_RX_LOSS", "0.1,seven", 1);
  EXPECT_EQ(dpdk::Port::open({.name = "net_ring0", .max_frame = 9018}, error), nullptr);
  EXPECT_NE(error.find("not '0.1,seven'"), std::string::npos) << error;
  unsetenv("UROCE_RX_LOSS");
  EXPECT_EQ(dpdk::Port::open({.name = "net_ring0", .rx_loss = {.probability = 1.0}}, error), nullptr);
  EXPECT_NE(error.find("a probability from 0 to below 1"), std::string::npos) << error;

  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  auto port = dpdk::Port::open({.name = "net_ring0", .max_frame = 9018, .rx_loss = {.probability = 0.25, .seed = seed}},
                               error);
  ASSERT_NE(port, nullptr) << error;
  EXPECT_EQ(port->rx_loss().probability, 0.25);

  // RoCE frames, and ARP requests: the latter always reach the port's own
  // handling.
  const std::vector<std::vector<std::uint8_t>> roce = roce_frames(seed);
  const std::array<std::uint8_t, 4> ip{10, 9, 8, 7};
  std::vector<bool> first;
  std::size_t got = 0;
  {
    dpdk::PortIo io(*port, 0, ip);
    got = loop(*port, io, roce, &first);
    EXPECT_EQ(got + io.counters().rx_dropped_impaired, roce.size());
    // 1000 expected; the binomial's sigma is 27.
    EXPECT_GT(io.counters().rx_dropped_impaired, 850u);
    EXPECT_LT(io.counters().rx_dropped_impaired, 1150u);
    EXPECT_EQ(io.counters().rx_other, 0u) << "dropped frames are counted as the impairment's, not as unknown";
  }
  // A queue on the same port and seed drops the same frames.
  {
    dpdk::PortIo io(*port, 0, ip);
    std::vector<bool> again;
    EXPECT_EQ(loop(*port, io, roce, &again), got);
    EXPECT_EQ(again, first);
    // ARP requests for the port's address are answered, none dropped.
    std::vector<std::vector<std::uint8_t>> arp;
    for (int i = 0; i < 64; ++i) {
      std::vector<std::uint8_t> f(42, 0);
      const std::uint8_t head[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06,
                                   0, 1, 0x08, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 9, 8, 1};
      std::copy(std::begin(head), std::end(head), f.begin());
      f[38] = 10, f[39] = 9, f[40] = 8, f[41] = 7;
      arp.push_back(f);
    }
    const std::uint64_t dropped = io.counters().rx_dropped_impaired;
    EXPECT_EQ(loop(*port, io, arp), 0u);  // handled inside the port, not passed on
    EXPECT_EQ(io.counters().rx_dropped_impaired, dropped);
  }
}

// With a minimum length, only frames of at least that many bytes are
// dropped: the short ones (ACKs, small messages) all pass. (A port of its
// own: the other test's closes with it.)
TEST(RxLoss, AMinimumLengthSparesShorterFrames) {
  ASSERT_EQ(EalEnvironment::error(), "");
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::string error;
  constexpr std::uint32_t kMin = 1024;
  auto port = dpdk::Port::open(
      {.name = "net_ring1", .max_frame = 9018, .rx_loss = {.probability = 0.25, .seed = seed, .min_bytes = kMin}}, error);
  ASSERT_NE(port, nullptr) << error;
  const std::vector<std::vector<std::uint8_t>> roce = roce_frames(seed);
  const std::array<std::uint8_t, 4> ip{10, 9, 8, 7};
  dpdk::PortIo io(*port, 0, ip);
  std::vector<bool> passed;
  const std::size_t got = loop(*port, io, roce, &passed);
  EXPECT_EQ(got + io.counters().rx_dropped_impaired, roce.size());
  std::size_t long_frames = 0;
  for (std::size_t i = 0; i < roce.size(); ++i) {
    if (roce[i].size() < kMin) EXPECT_TRUE(passed[i]) << "a " << roce[i].size() << "-byte frame was dropped";
    else ++long_frames;
  }
  // A quarter of the long ones (about 3,000 of 4,000 here): sigma about 24.
  const double expected = 0.25 * static_cast<double>(long_frames);
  EXPECT_GT(static_cast<double>(io.counters().rx_dropped_impaired), expected - 150);
  EXPECT_LT(static_cast<double>(io.counters().rx_dropped_impaired), expected + 150);
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(
      new uroce::test::EalEnvironment(
          {.name = "uroce-rxloss", .vdevs = {"net_ring0", "net_ring1"}, .log_level = "lib.eal:error"}));
  return RUN_ALL_TESTS();
}
