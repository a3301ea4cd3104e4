// The layering rule of DESIGN.md: lib/wire, lib/transport, lib/cc and lib/mem
// include no DPDK and no logging library; only drivers/dpdk (and apps that
// start EAL) include rte_*.h.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

namespace uroce::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> offending_includes(const fs::path& dir, const std::regex& forbidden,
                                            std::size_t& scanned) {
  std::vector<std::string> bad;
  if (!fs::exists(dir)) return bad;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const auto ext = e.path().extension();
    if (ext != ".h" && ext != ".cc") continue;
    ++scanned;
    std::ifstream in(e.path());
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (std::regex_search(line, forbidden)) bad.push_back(e.path().string() + ":" + std::to_string(n) + ": " + line);
    }
  }
  return bad;
}

TEST(Layering, CoreLayersIncludeNoDpdkAndNoLogging) {
  const std::regex forbidden(R"(^\s*#\s*include\s*[<"](rte_|dpdk/|spdlog|fmt/))");
  std::size_t scanned = 0;
  for (const char* layer : {"lib/wire", "lib/transport", "lib/cc", "lib/mem"}) {
    for (const auto& b : offending_includes(fs::path(UROCE_SOURCE_ROOT) / layer, forbidden, scanned)) {
      ADD_FAILURE() << b;
    }
  }
  EXPECT_GT(scanned, 5u) << "the layers were not found under " << UROCE_SOURCE_ROOT;
}

TEST(Layering, OnlyDriversAndAppsIncludeDpdk) {
  const std::regex forbidden(R"(^\s*#\s*include\s*[<"](rte_|dpdk/))");
  std::size_t scanned = 0;
  for (const auto& b : offending_includes(fs::path(UROCE_SOURCE_ROOT) / "lib", forbidden, scanned)) ADD_FAILURE() << b;
  for (const auto& b : offending_includes(fs::path(UROCE_SOURCE_ROOT) / "include", forbidden, scanned)) ADD_FAILURE() << b;
  EXPECT_GT(scanned, 5u);
}

// The check above must be able to fail: a planted include is found.
TEST(Layering, DetectsAPlantedInclude) {
  const fs::path dir = fs::temp_directory_path() / ("uroce-layering-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "bad.h") << "#pragma once\n#include <rte_mbuf.h>\n";
  std::size_t scanned = 0;
  const auto bad = offending_includes(dir, std::regex(R"(^\s*#\s*include\s*[<"](rte_|dpdk/))"), scanned);
  fs::remove_all(dir);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("bad.h:2"), std::string::npos);
}

}  // namespace
}  // namespace uroce::test
