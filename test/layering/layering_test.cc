// The layering rule of DESIGN.md: each layer of lib/ includes only itself and
// the layers below it; of the public API, wire, transport and engine include
// only its port interface (uroce/port.h), which itself includes nothing but
// rdma-core's verbs.h and the standard library; lib/wire, mem, cc, transport
// and engine include no DPDK and no logging library. Ports below, assemblies
// above: drivers/ sit on the engine and the port interface and include
// nothing of the API or of lib/device, which assembles a Context on a
// driver's port; only drivers/dpdk, lib/device, lib/ibverbs and apps/ include
// rte_*.h. lib/meson.build and drivers/meson.build build the same graph with
// one include root per layer (and ones holding only uroce/port.h or
// uroce/log.h), so the compiler refuses an upward include too; this test also
// covers headers no target compiles and says which rule a line breaks. Every
// folder of lib/, drivers/ and apps/ has a row.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace uroce::test {
namespace {

namespace fs = std::filesystem;

struct Layer {
  // What its includes start with: "transport/qp.h". A layer of lib/ may also
  // be spelled by its path under lib/ ("service/daemon/server.h" is of
  // service_daemon).
  std::string_view name;
  // Under the source root. A file belongs to the row with the longest folder
  // that holds it (lib/service/daemon/x.h is service_daemon's, not service's).
  std::string_view folder;
  // What its files may include: a layer ("wire": any of its files), or one
  // file of a layer ("uroce/port.h": that file alone).
  std::vector<std::string_view> below;
  bool may_log;       // may include spdlog or fmt (control path only)
  bool dpdk = false;  // may include rte_*.h and drivers/dpdk
};

// The port interface of the public API: the one file of include/uroce that
// the layers under verbs see (lib/meson.build gives them a root with only
// this file).
constexpr std::string_view kPort = "uroce/port.h";
// The log's interface, which lib/log implements (its own root, too).
constexpr std::string_view kLog = "uroce/log.h";

// The allowed edges, lowest layer first. A layer lists everything it may
// reach, not only its direct dependencies: headers include each other. The
// public API (uroce) includes no layer, so it sits lowest; wire and the
// layers above it reach only its port interface (PacketIo, Clock, TxFrame),
// verbs all of it. A row whose folder does not exist (yet) is skipped.
std::vector<Layer> layer_table() {
  std::vector<Layer> t = {
      {"uroce", "include/uroce", {}, false},  // the public API
      // The one SPSC ring design, for every ring of the stack.
      {"ring", "lib/ring", {}, false},
      {"wire", "lib/wire", {kPort}, false},
      {"mem", "lib/mem", {}, false},
      {"cc", "lib/cc", {}, false},
      {"pcap", "lib/pcap", {}, false},
      {"transport", "lib/transport", {"ring", "wire", "mem", "cc", kPort}, false},
      {"engine", "lib/engine", {"ring", "wire", "mem", "cc", "transport", kPort}, false},
      // The "uroce" logger (spdlog) behind uroce/log.h: control path only.
      {"log", "lib/log", {kLog}, true},
      // The client's half of the service protocol: sockets and shared memory.
      {"service", "lib/service", {"ring"}, false},
      // The ports, beside verbs: the engine's PacketIo and Clock on DPDK or a
      // simulated link. Neither sees the API or what is assembled on them.
      {"dpdk", "drivers/dpdk", {"ring", "wire", "mem", "cc", "transport", "engine", "log", kLog, kPort}, true, true},
      {"sim", "drivers/sim", {"ring", "wire", "mem", "cc", "transport", "engine", "pcap", kPort}, false},
      {"verbs", "lib/verbs", {"ring", "wire", "mem", "cc", "transport", "engine", "log", "service", "uroce"}, true},
      // The Prometheus exporter: the public API only, as an embedder's code.
      {"metrics", "lib/metrics", {"uroce"}, false},
      // The communication manager (QP1, IB CM) on the API and verbs' internals.
      {"cm", "lib/cm", {"ring", "wire", "mem", "cc", "transport", "engine", "log", "service", "uroce", "verbs"}, false},
      // The daemon's half of the service protocol, on a local Context (and
      // the CM, run for its rdma_cm clients).
      {"service_daemon", "lib/service/daemon",
       {"ring", "wire", "mem", "cc", "transport", "engine", "log", "service", "uroce", "verbs", "cm"}, true},
      // The assemblies: a Context on a driver's port (Device, RingPair on
      // DPDK; SimPair, SimFabric on the simulator) and their telemetry.
      {"device", "lib/device",
       {"ring", "wire", "mem", "cc", "transport", "engine", "log", "service", "uroce", "verbs", "dpdk", "sim", "pcap"},
       true, true},
      // libibverbs.so.1 on top of the stack: starts EAL and opens a device::Device;
      // serves its forked children with the daemon's Server (fork_service.h).
      {"ibverbs", "lib/ibverbs",
       {"ring", "wire", "mem", "cc", "transport", "engine", "log", "service", "uroce", "verbs", "dpdk", "sim", "pcap",
        "device", "cm", "service_daemon"},
       true, true},
      // librdmacm.so.1: lib/cm on libibverbs.so.1's device.
      {"rdmacm", "lib/rdmacm",
       {"ring", "wire", "mem", "cc", "transport", "engine", "log", "service", "uroce", "verbs", "dpdk", "sim", "pcap", "device",
        "cm", "service_daemon", "ibverbs"},
       false},
  };
  // The programs: each may include everything (apps/ is on their include
  // path, so "common/args.h" is apps/common's). apps/sim's row is named
  // apart from drivers/sim: "sim/" means the driver, and apps/sim includes
  // its own headers without a folder.
  std::vector<std::string_view> everything;
  for (const auto& l : t) everything.push_back(l.name);
  t.push_back({"common", "apps/common", everything, true, true});
  everything.push_back("common");
  for (const auto& [name, folder] : std::vector<std::pair<std::string_view, std::string_view>>{
           {"bench", "apps/bench"}, {"dump", "apps/dump"}, {"perf", "apps/perf"}, {"pingpong", "apps/pingpong"},
           {"run", "apps/run"}, {"sim_app", "apps/sim"}, {"stat", "apps/stat"}, {"uroced", "apps/uroced"}}) {
    t.push_back({name, folder, everything, true, true});
  }
  return t;
}
const std::vector<Layer> kLayers = layer_table();

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

// Whether `path` is `prefix` or lies under it ("lib/service/daemon/x.h" under
// "lib/service", not "lib/serviced/x.h").
bool under(std::string_view path, std::string_view prefix) {
  return path.rfind(prefix, 0) == 0 && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

// The row a file belongs to (`rel` from the source root): the one with the
// longest folder holding it; nullptr if none.
const Layer* owner_of(const std::vector<Layer>& layers, std::string_view rel) {
  const Layer* best = nullptr;
  for (const auto& l : layers) {
    if (under(rel, l.folder) && (best == nullptr || l.folder.size() > best->folder.size())) best = &l;
  }
  return best;
}

// The layer an include names: the row whose name, or (for lib/) whose path
// under lib/, is the longest leading part of `target`; nullptr if none.
const Layer* layer_of_include(const std::vector<Layer>& layers, std::string_view target) {
  const Layer* best = nullptr;
  std::size_t best_len = 0;
  for (const auto& l : layers) {
    std::string_view spellings[2] = {l.name, {}};
    if (l.folder.rfind("lib/", 0) == 0) spellings[1] = l.folder.substr(4);
    for (const auto sp : spellings) {
      if (!sp.empty() && target.size() > sp.size() && under(target, sp) && sp.size() > best_len) {
        best = &l;
        best_len = sp.size();
      }
    }
  }
  return best;
}

// Why `target`, included from a file of `layer` with `quote` ('"' or '<'),
// breaks the rules; "" if it does not.
std::string why_forbidden(const std::vector<Layer>& layers, const Layer& layer, char quote,
                          const std::string& target) {
  const auto slash = target.find('/');
  if (slash == std::string::npos) return "";  // beside the file, or <array>
  if (target.substr(0, slash) == "..") return "a relative path around the include roots";
  const Layer* of = layer_of_include(layers, target);
  if (of == nullptr) return quote == '"' ? "not a layer of the table" : "";
  if (of == &layer || allows(layer, of->name, target)) return "";
  for (const auto b : layer.below) {
    if (layer_of(b) == of->name) return "of layer " + std::string(of->name) + ", only " + std::string(b) + " is below " + std::string(layer.name);
  }
  return "layer " + std::string(of->name) + " is not below " + std::string(layer.name);
}

// Calls f(file, line number, line) for every line of the .h and .cc files
// under `dir` (none if it does not exist) that `keep` accepts (all without
// it), counting the files in `scanned`.
template <typename F>
void for_each_source_line(const fs::path& dir, std::size_t& scanned, F&& f,
                          const std::function<bool(const fs::path&)>& keep = {}) {
  if (!fs::exists(dir)) return;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const auto ext = e.path().extension();
    if (ext != ".h" && ext != ".cc") continue;
    if (keep && !keep(e.path())) continue;
    ++scanned;
    std::ifstream in(e.path());
    int n = 0;
    for (std::string line; std::getline(in, line);) f(e.path(), ++n, line);
  }
}

// Calls f(layer, file, line number, line) for every line of every row's .h
// and .cc files under `root`, each file once, under the row it belongs to.
template <typename F>
void for_each_layer_line(const fs::path& root, const std::vector<Layer>& layers, std::size_t& scanned, F&& f) {
  for (const auto& layer : layers) {
    const auto line_of_layer = [&](const fs::path& file, int n, const std::string& line) { f(layer, file, n, line); };
    const auto belongs = [&](const fs::path& file) {
      return owner_of(layers, fs::relative(file, root).string()) == &layer;
    };
    for_each_source_line(root / layer.folder, scanned, line_of_layer, belongs);
  }
}

// Every include line of the rows' .h and .cc files under `root` that
// includes a layer the table does not allow, as "path:line: include  (reason)".
std::vector<std::string> violations(const fs::path& root, const std::vector<Layer>& layers,
                                    std::size_t& scanned) {
  std::vector<std::string> bad;
  for_each_layer_line(root, layers, scanned, [&](const Layer& layer, const fs::path& file, int n,
                                                 const std::string& line) {
    std::smatch m;
    if (!std::regex_search(line, m, kInclude)) return;
    const auto why = why_forbidden(layers, layer, m[1].str()[0], m[2].str());
    if (!why.empty()) {
      bad.push_back(fs::relative(file, root).string() + ":" + std::to_string(n) + ": " + line + "  (" + why + ")");
    }
  });
  return bad;
}

// The lines of the rows' .h and .cc files under `root` that match
// `forbidden`, for the rows where `skip` does not hold.
template <typename Skip>
std::vector<std::string> offending_layer_includes(const fs::path& root, const std::vector<Layer>& layers,
                                                  const std::regex& forbidden, Skip skip, std::size_t& scanned) {
  std::vector<std::string> bad;
  for_each_layer_line(root, layers, scanned, [&](const Layer& layer, const fs::path& file, int n,
                                                 const std::string& line) {
    if (!skip(layer) && std::regex_search(line, forbidden)) {
      bad.push_back(fs::relative(file, root).string() + ":" + std::to_string(n) + ": " + line);
    }
  });
  return bad;
}

// Folders of lib/, drivers/ and apps/ without a row: a new layer, driver or
// program must say where it sits.
std::vector<std::string> unlisted_folders(const fs::path& root, const std::vector<Layer>& layers) {
  std::vector<std::string> out;
  for (const char* top : {"lib", "drivers", "apps"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& e : fs::directory_iterator(root / top)) {
      if (!e.is_directory()) continue;
      const auto rel = std::string(top) + "/" + e.path().filename().string();
      const bool listed = std::any_of(layers.begin(), layers.end(), [&](const Layer& l) { return l.folder == rel; });
      if (!listed) out.push_back(rel);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Layering, EveryIncludeFollowsTheLayerTable) {
  std::size_t scanned = 0;
  for (const auto& b : violations(UROCE_SOURCE_ROOT, kLayers, scanned)) ADD_FAILURE() << b;
  EXPECT_GT(scanned, 30u) << "the layers were not found under " << UROCE_SOURCE_ROOT;
}

TEST(Layering, EveryFolderOfLibHasARow) {
  for (const auto& f : unlisted_folders(UROCE_SOURCE_ROOT, kLayers)) {
    if (under(f, "lib")) ADD_FAILURE() << f << " is not in kLayers";
  }
}

TEST(Layering, EveryFolderOfDriversAndAppsHasARow) {
  for (const auto& f : unlisted_folders(UROCE_SOURCE_ROOT, kLayers)) {
    if (!under(f, "lib")) ADD_FAILURE() << f << " is not in kLayers";
  }
  for (const char* name : {"dpdk", "sim", "device", "log", "common"}) {
    EXPECT_NE(find_layer(kLayers, name), nullptr) << name;
  }
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
  const auto quiet = [](const Layer& l) { return l.may_log; };
  for (const auto& b : offending_layer_includes(UROCE_SOURCE_ROOT, kLayers, kDpdkOrLoggingInclude, quiet, scanned)) {
    ADD_FAILURE() << b;
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

// drivers/dpdk, lib/device, lib/ibverbs and apps/: the rows marked dpdk.
bool on_dpdk(const Layer& l) { return l.dpdk; }

TEST(Layering, OnlyDriversAppsAndCompositionIncludeDpdk) {
  std::size_t scanned = 0;
  for (const auto& b : offending_layer_includes(UROCE_SOURCE_ROOT, kLayers, kDpdkInclude, on_dpdk, scanned)) {
    ADD_FAILURE() << b;
  }
  for (const auto& b : offending_includes(fs::path(UROCE_SOURCE_ROOT) / "include", kDpdkInclude, scanned)) ADD_FAILURE() << b;
  EXPECT_GT(scanned, 30u);
  for (const char* name : {"wire", "transport", "engine", "verbs", "sim", "cm", "rdmacm"}) {
    EXPECT_FALSE(find_layer(kLayers, name)->dpdk) << name;
  }
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
  write("drivers/sim/sim_link.h", "#pragma once\n#include \"engine/packet_io.h\"\n#include \"pcap/pcap_file.h\"\n");
  write("lib/device/dev.cc", "#include \"sim/sim_link.h\"\n#include \"verbs/verbs_impl.h\"\n");  // allowed
  write("lib/extra/x.h", "#pragma once\n");
  // Ports below, assemblies above: a driver sees the engine, the port
  // interface and the log, never the API or the assemblies on it.
  write("drivers/dpdk/ok.cc", "#include \"dpdk/rte.h\"\n#include \"engine/packet_io.h\"\n#include \"log/log.h\"\n"
                              "#include \"uroce/port.h\"\n");
  write("drivers/dpdk/x.cc", "#include \"dpdk/port.h\"\n#include \"verbs/internal.h\"\n#include \"uroce/verbs.h\"\n");
  write("drivers/sim/x.h", "#pragma once\n#include \"device/sim_pair.h\"\n#include \"dpdk/port.h\"\n");
  // The daemon's folder is its own layer, inside service's: its files are
  // checked once, under its row, and service may not include them.
  write("lib/service/daemon/server.cc", "#include \"service/client.h\"\n#include \"verbs/internal.h\"\n");  // allowed
  write("lib/service/up.cc", "#include \"service/shm.h\"\n#include \"service/daemon/server.h\"\n"
                             "#include \"service_daemon/server.h\"\n");
  write("apps/pingpong/main.cc", "#include \"common/args.h\"\n#include \"device/device.h\"\n#include \"dpdk/eal.h\"\n");
  write("apps/newtool/main.cc", "#include \"verbs/internal.h\"\n");  // no row: only reported as unlisted

  std::size_t scanned = 0;
  auto bad = violations(root_, kLayers, scanned);
  std::sort(bad.begin(), bad.end());
  const std::vector<std::string> want_prefixes = {
      "drivers/dpdk/x.cc:2:", "drivers/dpdk/x.cc:3:", "drivers/sim/x.h:2:", "drivers/sim/x.h:3:",
      "include/uroce/api.h:1:", "lib/cc/up.h:2:", "lib/engine/api.h:3:", "lib/mem/around.h:1:",
      "lib/service/up.cc:2:", "lib/service/up.cc:3:", "lib/transport/up.cc:2:", "lib/wire/driver.cc:1:",
  };
  ASSERT_EQ(bad.size(), want_prefixes.size()) << ::testing::PrintToString(bad);
  for (std::size_t i = 0; i < bad.size(); ++i) {
    EXPECT_EQ(bad[i].rfind(want_prefixes[i], 0), 0u) << bad[i];
  }
  EXPECT_EQ(scanned, 19u);
  EXPECT_EQ(unlisted_folders(root_, kLayers), (std::vector<std::string>{"apps/newtool", "lib/extra"}));
}

TEST_F(FakeTree, TheDpdkCheckerFindsDpdkOutsideItsRows) {
  write("drivers/dpdk/rte.h", "#pragma once\n#include <rte_mbuf.h>\n");
  write("lib/device/device.cc", "#include <rte_ethdev.h>\n#include \"dpdk/port.h\"\n");
  write("apps/bench/raw.cc", "#include <rte_mbuf.h>\n");
  write("drivers/sim/sim_link.cc", "#include <rte_mbuf.h>\n");
  write("lib/verbs/verbs.cc", "#include \"dpdk/port.h\"\n");
  std::size_t scanned = 0;
  auto bad = offending_layer_includes(root_, kLayers, kDpdkInclude, on_dpdk, scanned);
  std::sort(bad.begin(), bad.end());
  ASSERT_EQ(bad.size(), 2u) << ::testing::PrintToString(bad);
  EXPECT_EQ(bad[0].rfind("drivers/sim/sim_link.cc:1:", 0), 0u) << bad[0];
  EXPECT_EQ(bad[1].rfind("lib/verbs/verbs.cc:1:", 0), 0u) << bad[1];
  EXPECT_EQ(scanned, 5u);
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
