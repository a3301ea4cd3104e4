// Seeds for randomised tests: UROCE_TEST_SEED overrides the default, and
// every randomised test puts the seed in its failure messages.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace uroce::test {

inline std::uint64_t test_seed(std::uint64_t fallback = 20261202) {
  if (const char* s = std::getenv("UROCE_TEST_SEED"); s != nullptr && *s != '\0') {
    return std::strtoull(s, nullptr, 0);
  }
  return fallback;
}

inline std::string seed_note(std::uint64_t seed) {
  return "seed=" + std::to_string(seed) + " (rerun with UROCE_TEST_SEED=" + std::to_string(seed) + ")";
}

}  // namespace uroce::test
