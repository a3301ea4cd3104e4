// The layering rule of DESIGN.md: each layer of lib/ includes only itself and
// the layers below it; of the public API, wire, transport and engine include
// only its port interface (uroce/port.h), which itself includes nothing but
// rdma-core's verbs.h and the standard library; lib/wire, mem, cc, transport
// and engine include no DPDK and no logging library; only drivers/dpdk (and
// apps that start EAL) include rte_*.h. lib/meson.build builds the same graph
// with one include root per layer (and one holding only uroce/port.h), so the
// compiler refuses an upward include too; this test also covers headers no
// target compiles and says which rule a line breaks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::test {
namespace {

namespace fs = std::filesystem;

struct Layer {
  std::string_view name;    // what its includes start with: "transport/qp.h"
  std::string_view folder;  // under the source root
  // What its files may include: a layer ("wire": any of its files), or one
  // file of a layer ("uroce/port.h": that file alone).
  std::vector<std::string_view> below;
  bool may_log;             // may include spdlog or fmt (control path only)
  // Assembles the stack on a driver's port: may include drivers' headers
  // (and so DPDK's). lib/compose, and lib/ibverbs above it.
  bool composes = false;
};

// The port interface of the public API: the one file of include/uroce that
// the layers under verbs see (lib/meson.build gives them a root with only
// this file).
constexpr std::string_view kPort = "uroce/port.h";

// The allowed edges, lowest layer first. A layer lists everything it may
// reach, not only its direct dependencies: headers include each other. The
// public API (uroce) includes no layer, so it sits lowest; wire and the
// layers above it reach only its port interface (PacketIo, Clock, TxFrame),
// verbs all of it.
const std::vector<Layer> kLayers = {
    {"uroce", "include/uroce", {}, false},  // the public API
    {"wire", "lib/wire", {kPort}, false},
    {"mem", "lib/mem", {}, false},
    {"cc", "lib/cc", {}, false},
    {"pcap", "lib/pcap", {}, false},
    // The "uroce" logger (spdlog) behind uroce/log.h: control path only.
    {"log", "lib/log", {"uroce/log.h"}, true},
    {"transport", "lib/transport", {"wire", "mem", "cc", kPort}, false},
    {"engine", "lib/engine", {"wire", "mem", "cc", "transport", kPort}, false},
    // The client's half of the service protocol: sockets and shared memory.
    {"service", "lib/service", {}, false},
    {"verbs", "lib/verbs", {"wire", "mem", "cc", "transport", "engine", "log", "service", "uroce"}, true},
    // The communication manager (QP1, IB CM) on the API and verbs' internals.
    {"cm", "lib/cm", {"wire", "mem", "cc", "transport", "engine", "log", "service", "uroce", "verbs"}, false},
    {"compose", "lib/compose", {"wire", "mem", "cc", "transport", "engine", "log", "service", "uroce", "verbs"}, true, true},
    // libibverbs.so.1 on top of the stack: starts EAL and opens a compose::Device.
    {"ibverbs", "lib/ibverbs", {"wire", "mem", "cc", "transport", "engine", "log", "service", "uroce", "verbs", "compose"}, true, true},
    // librdmacm.so.1: lib/cm on libibverbs.so.1's device.
    {"rdmacm", "lib/rdmacm", {"wire", "mem", "cc", "transport", "engine", "log", "service", "uroce", "verbs", "compose", "cm", "ibverbs"}, false, true},
};

const std::regex kInclude(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
const std::regex kDpdkInclude(R"(^\s*#\s*include\s*[<"](rte_|dpdk/))");
const std::regex kDpdkOrLoggingInclude(R"(^\s*#\s*include\s*[<"](rte_|dpdk/|spdlog|fmt/))");

bool contains(const std::vector<std::string_view>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The layer an entry of Layer::below names: "uroce" for "uroce/port.h".
std::string_view layer_of(std::string_view entry) { return entry.substr(0, entry.find('/')); }

// Whether `layer` may include `target` of layer `first`: all of that layer,
// or that one file of it.
bool allows(const Layer& layer, std::string_view first, std::string_view target) {
  return contains(layer.below, first) || contains(layer.below, target);
}

// Whether `layer` reaches everything entry `e` of a lower layer's list does.
bool covers(const Layer& layer, std::string_view e) {
  return contains(layer.below, e) || contains(layer.below, layer_of(e));
}

const Layer* find_layer(const std::vector<Layer>& layers, std::string_view name) {
  for (const auto& l : layers) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

// The folders of drivers/ and apps/: lib/ includes none of them.
std::vector<std::string> outer_folders(const fs::path& root) {
  std::vector<std::string> out;
  for (const char* top : {"drivers", "apps"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& e : fs::directory_iterator(root / top)) {
      if (e.is_directory()) out.push_back(e.path().filename().string());
    }
  }
  return out;
}

// Why `target`, included from a file of `layer` with `quote` ('"' or '<'),
// breaks the rules; "" if it does not.
std::string why_forbidden(const std::vector<Layer>& layers, const std::vector<std::string>& outer,
                          const Layer& layer, char quote, const std::string& target) {
  const auto slash = target.find('/');
  const std::string first = slash == std::string::npos ? "" : target.substr(0, slash);
  if (first == "..") return "a relative path around the include roots";
  if (first.empty() || first == layer.name) return "";
  const bool is_layer = find_layer(layers, first) != nullptr;
  const bool is_outer = std::find(outer.begin(), outer.end(), first) != outer.end();
  if (is_layer && !allows(layer, first, target)) {
    for (const auto b : layer.below) {
      if (layer_of(b) == first) return "of layer " + first + ", only " + std::string(b) + " is below " + std::string(layer.name);
    }
    return "layer " + first + " is not below " + std::string(layer.name);
  }
  if (is_outer) return layer.composes ? "" : first + " is in drivers/ or apps/, above every layer";
  if (!is_layer && quote == '"') return "not a layer of the table";
  return "";
}

// Calls f(file, line number, line) for every line of the .h and .cc files
// under `dir` (none if it does not exist), counting the files in `scanned`.
template <typename F>
void for_each_source_line(const fs::path& dir, std::size_t& scanned, F&& f) {
  if (!fs::exists(dir)) return;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const auto ext = e.path().extension();
    if (ext != ".h" && ext != ".cc") continue;
    ++scanned;
    std::ifstream in(e.path());
    int n = 0;
    for (std::string line; std::getline(in, line);) f(e.path(), ++n, line);
  }
}

// Every include line of the layers' .h and .cc files under `root` that
// includes a layer the table does not allow, as "path:line: include  (reason)".
std::vector<std::string> violations(const fs::path& root, const std::vector<Layer>& layers,
                                    std::size_t& scanned) {
  const auto outer = outer_folders(root);
  std::vector<std::string> bad;
  for (const auto& layer : layers) {
    for_each_source_line(root / layer.folder, scanned, [&](const fs::path& file, int n, const std::string& line) {
      std::smatch m;
      if (!std::regex_search(line, m, kInclude)) return;
      const auto why = why_forbidden(layers, outer, layer, m[1].str()[0], m[2].str());
      if (!why.empty()) {
        bad.push_back(fs::relative(file, root).string() + ":" + std::to_string(n) + ": " + line + "  (" + why + ")");
      }
    });
  }
  return bad;
}

// Folders of lib/ without a row: a new layer must say where it sits.
std::vector<std::string> unlisted_folders(const fs::path& root, const std::vector<Layer>& layers) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root / "lib")) {
    if (!e.is_directory()) continue;
    const auto rel = "lib/" + e.path().filename().string();
    const bool listed = std::any_of(layers.begin(), layers.end(), [&](const Layer& l) { return l.folder == rel; });
    if (!listed) out.push_back(rel);
  }
  return out;
}

TEST(Layering, EveryIncludeFollowsTheLayerTable) {
  std::size_t scanned = 0;
  for (const auto& b : violations(UROCE_SOURCE_ROOT, kLayers, scanned)) ADD_FAILURE() << b;
  EXPECT_GT(scanned, 30u) << "the layers were not found under " << UROCE_SOURCE_ROOT;
}

TEST(Layering, EveryFolderOfLibHasARow) {
  for (const auto& f : unlisted_folders(UROCE_SOURCE_ROOT, kLayers)) ADD_FAILURE() << f << " is not in kLayers";
}

// A layer reaches what its layers below reach (an include of theirs is
// compiled in it), and lists only rows that come before its own: no cycle.
TEST(Layering, TheTableIsOrderedAndClosed) {
  for (std::size_t i = 0; i < kLayers.size(); ++i) {
    const auto& layer = kLayers[i];
    for (const auto b : layer.below) {
      const Layer* lower = find_layer(kLayers, layer_of(b));
      ASSERT_NE(lower, nullptr) << layer.name << " lists unknown layer " << b;
      EXPECT_LT(lower - kLayers.data(), static_cast<std::ptrdiff_t>(i)) << b << " must come before " << layer.name;
      if (b != lower->name) {
        // One file of a layer: it must exist, and it may include nothing of
        // the layers, or a file's reach would not be in the table.
        EXPECT_TRUE(fs::exists(fs::path(UROCE_SOURCE_ROOT) / lower->folder / b.substr(lower->name.size() + 1))) << b;
        EXPECT_TRUE(lower->below.empty()) << b << " is one file of " << lower->name << ", which includes other layers";
        continue;
      }
      for (const auto bb : lower->below) {
        EXPECT_TRUE(covers(layer, bb)) << layer.name << " reaches " << bb << " through " << b;
      }
    }
  }
}

// The lines of .h and .cc files under `dir` that match `forbidden`.
std::vector<std::string> offending_includes(const fs::path& dir, const std::regex& forbidden,
                                            std::size_t& scanned) {
  std::vector<std::string> bad;
  for_each_source_line(dir, scanned, [&](const fs::path& file, int n, const std::string& line) {
    if (std::regex_search(line, forbidden)) bad.push_back(file.string() + ":" + std::to_string(n) + ": " + line);
  });
  return bad;
}

TEST(Layering, CoreLayersIncludeNoDpdkAndNoLogging) {
  for (const char* name : {"wire", "mem", "cc", "transport", "engine"}) {
    const Layer* layer = find_layer(kLayers, name);
    ASSERT_NE(layer, nullptr) << name;
    EXPECT_FALSE(layer->may_log) << name << " is on the data path: no logging library";
  }
  std::size_t scanned = 0;
  for (const auto& layer : kLayers) {
    if (layer.may_log) continue;
    const auto dir = fs::path(UROCE_SOURCE_ROOT) / layer.folder;
    for (const auto& b : offending_includes(dir, kDpdkOrLoggingInclude, scanned)) ADD_FAILURE() << b;
  }
  EXPECT_GT(scanned, 30u) << "the layers were not found under " << UROCE_SOURCE_ROOT;
}

// The includes of `file` that are not <infiniband/verbs.h> or a standard
// library header (<array>: no folder, no extension), as "line: include".
std::vector<std::string> non_standard_includes(const fs::path& file) {
  std::vector<std::string> bad;
  std::ifstream in(file);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    std::smatch m;
    if (!std::regex_search(line, m, kInclude)) continue;
    const std::string target = m[2].str();
    const bool standard = m[1].str() == "<" && target.find_first_of("/.") == std::string::npos;
    if (!standard && !(m[1].str() == "<" && target == "infiniband/verbs.h")) {
      bad.push_back(std::to_string(n) + ": " + line);
    }
  }
  return bad;
}

// What an embedder implements needs nothing but rdma-core's verbs.h and the
// standard library; the layers that see it see nothing more through it.
TEST(Layering, ThePortInterfaceIncludesOnlyVerbsAndTheStandardLibrary) {
  const fs::path port = fs::path(UROCE_SOURCE_ROOT) / "include" / kPort;
  ASSERT_TRUE(fs::exists(port)) << port;
  for (const auto& b : non_standard_includes(port)) ADD_FAILURE() << port.string() << ":" << b;
}

TEST(Layering, OnlyDriversAppsAndCompositionIncludeDpdk) {
  std::size_t scanned = 0;
  for (const auto& layer : kLayers) {
    if (layer.composes || layer.folder.rfind("lib/", 0) != 0) continue;
    const auto dir = fs::path(UROCE_SOURCE_ROOT) / layer.folder;
    for (const auto& b : offending_includes(dir, kDpdkInclude, scanned)) ADD_FAILURE() << b;
  }
  for (const auto& b : offending_includes(fs::path(UROCE_SOURCE_ROOT) / "include", kDpdkInclude, scanned)) ADD_FAILURE() << b;
  EXPECT_GT(scanned, 5u);
}

// The checkers must be able to fail: fake trees with one break of each kind.
class FakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("uroce-layering-" + std::to_string(getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& text) {
    fs::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path) << text;
  }
  fs::path root_;
};

TEST_F(FakeTree, TheLayerCheckerFindsEachKindOfBreak) {
  write("lib/wire/ok.h", "#pragma once\n#include \"wire/headers.h\"\n#include <cstdint>\n");
  write("lib/mem/ok.cc", "#include \"mem/mr_table.h\"\n#include <infiniband/verbs.h>\n");
  write("lib/transport/ok.cc", "#include \"wire/frame.h\"\n#include \"mem/mr_table.h\"\n#include \"cc/dcqcn.h\"\n");
  write("lib/transport/up.cc", "#include \"transport/qp.h\"\n#include \"engine/engine.h\"\n");
  write("lib/cc/up.h", "#pragma once\n  #  include \"transport/qp.h\"\n");
  write("lib/mem/around.h", "#include \"../verbs/verbs_impl.h\"\n");
  write("lib/wire/driver.cc", "#include \"sim/sim_link.h\"\n");
  write("lib/verbs/log.cc", "#include <spdlog/spdlog.h>\n#include \"engine/engine.h\"\n#include \"uroce/verbs.h\"\n");
  write("include/uroce/api.h", "#include \"verbs/verbs_impl.h\"\n");
  write("lib/wire/port_ok.h", "#pragma once\n#include \"uroce/port.h\"\n");
  write("lib/engine/api.h", "#pragma once\n#include \"uroce/port.h\"\n#include \"uroce/verbs.h\"\n");
  write("drivers/sim/sim_link.h", "#pragma once\n");
  write("lib/compose/dev.cc", "#include \"sim/sim_link.h\"\n#include \"verbs/verbs_impl.h\"\n");  // allowed
  write("lib/extra/x.h", "#pragma once\n");

  std::size_t scanned = 0;
  auto bad = violations(root_, kLayers, scanned);
  std::sort(bad.begin(), bad.end());
  const std::vector<std::string> want_prefixes = {
      "include/uroce/api.h:1:", "lib/cc/up.h:2:", "lib/engine/api.h:3:", "lib/mem/around.h:1:",
      "lib/transport/up.cc:2:", "lib/wire/driver.cc:1:",
  };
  ASSERT_EQ(bad.size(), want_prefixes.size()) << ::testing::PrintToString(bad);
  for (std::size_t i = 0; i < bad.size(); ++i) {
    EXPECT_EQ(bad[i].rfind(want_prefixes[i], 0), 0u) << bad[i];
  }
  EXPECT_EQ(scanned, 12u);
  EXPECT_EQ(unlisted_folders(root_, kLayers), std::vector<std::string>{"lib/extra"});
}

TEST_F(FakeTree, ThePortCheckerFindsAnIncludeBeyondTheStandardLibrary) {
  write("include/uroce/port.h",
        "#include <infiniband/verbs.h>\n#include <cstdint>\n#include \"uroce/verbs.h\"\n#include <spdlog/spdlog.h>\n"
        "#include <stdint.h>\n");
  const auto bad = non_standard_includes(root_ / "include/uroce/port.h");
  ASSERT_EQ(bad.size(), 3u) << ::testing::PrintToString(bad);
  EXPECT_EQ(bad[0].rfind("3:", 0), 0u) << bad[0];
  EXPECT_EQ(bad[1].rfind("4:", 0), 0u) << bad[1];
  EXPECT_EQ(bad[2].rfind("5:", 0), 0u) << bad[2];
}

TEST_F(FakeTree, TheHeaderCheckerFindsDpdkAndLogging) {
  write("lib/engine/ok.cc", "#include \"engine/engine.h\"\n// #include <rte_mbuf.h> in a comment\n");
  write("lib/engine/log.cc", "#include <spdlog/spdlog.h>\n");
  write("lib/engine/dpdk.h", "#pragma once\n#include <rte_mbuf.h>\n");
  std::size_t scanned = 0;
  auto bad = offending_includes(root_ / "lib", kDpdkOrLoggingInclude, scanned);
  std::sort(bad.begin(), bad.end());
  ASSERT_EQ(bad.size(), 2u) << ::testing::PrintToString(bad);
  EXPECT_NE(bad[0].find("dpdk.h:2"), std::string::npos) << bad[0];
  EXPECT_NE(bad[1].find("log.cc:1"), std::string::npos) << bad[1];
  EXPECT_EQ(offending_includes(root_ / "lib", kDpdkInclude, scanned).size(), 1u);
  EXPECT_EQ(scanned, 6u);
}

}  // namespace
}  // namespace uroce::test
