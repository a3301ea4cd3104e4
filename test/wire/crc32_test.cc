// Every CRC-32 implementation against the bitwise reference: random buffers
// of every length 0..9000, at every alignment 0..7, and chained across splits.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/test_seed.h"
#include "wire/crc32.h"

namespace uroce::test {
namespace {

TEST(Crc32, ReferenceKnownVectors) {
  const std::string check = "123456789";
  const auto* p = reinterpret_cast<const std::uint8_t*>(check.data());
  EXPECT_EQ(wire::crc32_bitwise(0, p, check.size()), 0xCBF43926u);  // the CRC-32 check value
  EXPECT_EQ(wire::crc32_bitwise(0, p, 0), 0u);
  const std::uint8_t zeros[4] = {};
  EXPECT_EQ(wire::crc32_bitwise(0, zeros, 4), 0x2144DF1Cu);
}

TEST(Crc32, ReferenceAndDispatchAreAlwaysAvailable) {
  ASSERT_NE(wire::crc32_select("bitwise"), nullptr);
  ASSERT_NE(wire::crc32_select("slice8"), nullptr);
  ASSERT_NE(wire::crc32_select(""), nullptr);
  EXPECT_STREQ(wire::crc32_select("")->name, "isal");
  EXPECT_EQ(wire::crc32_select("no-such-impl"), nullptr);
}

class Crc32Impl : public ::testing::TestWithParam<wire::Crc32Impl> {
 protected:
  void SetUp() override {
    if (!GetParam().available()) GTEST_SKIP() << GetParam().name << " needs a CPU feature this machine lacks";
  }
};

TEST_P(Crc32Impl, EveryLengthUpTo9000MatchesReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> buf(9000 + 8);
  for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
  const wire::Crc32Fn fn = GetParam().fn;
  for (std::size_t len = 0; len <= 9000; ++len) {
    const std::size_t align = len % 8;  // cover every misalignment
    const std::uint32_t init = (len % 3 == 0) ? 0u : static_cast<std::uint32_t>(rng());
    const std::uint32_t want = wire::crc32_bitwise(init, buf.data() + align, len);
    ASSERT_EQ(fn(init, buf.data() + align, len), want) << "len " << len << " align " << align;
  }
}

TEST_P(Crc32Impl, ChainsAcrossArbitrarySplits) {
  const std::uint64_t seed = test_seed() + 1;
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const wire::Crc32Fn fn = GetParam().fn;
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::uint8_t> buf(rng() % 9001);
    for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
    const std::uint32_t whole = wire::crc32_bitwise(0, buf.data(), buf.size());
    std::uint32_t crc = 0;
    std::size_t at = 0;
    while (at < buf.size()) {
      const std::size_t n = std::min<std::size_t>(buf.size() - at, 1 + rng() % 2048);
      crc = fn(crc, buf.data() + at, n);
      at += n;
    }
    ASSERT_EQ(crc, whole) << "round " << round << " size " << buf.size();
  }
}

INSTANTIATE_TEST_SUITE_P(All, Crc32Impl, ::testing::ValuesIn(wire::crc32_impls().begin(), wire::crc32_impls().end()),
                         [](const auto& param_info) {
                           std::string n = param_info.param.name;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace uroce::test
