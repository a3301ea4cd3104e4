// uroced's configuration: conf/uroced.conf (key = value lines, '#'
// comments), then the command line, whose flags override the file's keys
// of the same name (--workers 2,3 overrides workers = 1).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace uroce::daemon {

struct Limits {
  std::uint32_t qps = 256;         // QPs per client
  std::uint32_t cqs = 512;         // CQs per client
  std::uint32_t mrs = 4096;        // memory regions per client
  std::uint64_t pinned_mb = 4096;  // MiB of registered memory per client
  std::uint32_t clients = 64;      // clients at once
  // Memory the daemon holds for clients (README "Budgets"): CQs' and QPs'
  // rings and engine arrays per client; everything (region files, CQs, QPs)
  // per uid and for the whole daemon (0: half the machine's memory).
  std::uint64_t object_mb = 256;        // max_object_mb, per client
  std::uint64_t uid_memory_mb = 8192;   // max_uid_memory_mb
  std::uint64_t memory_mb = 0;          // max_memory_mb, the daemon's total
  // Mappings the daemon makes for clients (memory files, multi-piece region
  // views, rings); the daemon's total is kept under half of vm.max_map_count.
  std::uint32_t mappings = 8192;        // max_mappings, per client
  std::uint32_t uid_mappings = 16384;   // max_uid_mappings
};

struct Config {
  std::string eal;                 // EAL arguments, blank-separated
  std::uint16_t port_id = 0;
  std::array<std::uint8_t, 4> ip{};
  bool ip_set = false;
  std::uint16_t queues = 1;
  std::vector<int> workers;        // one CPU per queue; empty: not pinned
  std::string dcqcn;               // DCQCN parameter file; "" off
  int pfc_priority = -1;           // the lossless 802.1p priority (PFC on the port, data's DSCP); -1 off
  std::string hugepages = "auto";  // auto | on | off: regions on hugepages (on: required)
  std::string socket = "/run/uroce/uroced.sock";
  std::uint32_t socket_mode = 0660;
  std::string socket_group;        // "" the daemon's
  Limits limits;
  std::string log_level = "info";
  bool stats = false;              // --stats: print the clients of a running daemon and exit
};

// Reads `file` into `config`: "" or "FILE:LINE: why".
std::string read_config_file(const std::string& file, Config& config);
// One key (as in the file, or a flag without its dashes): "" or why not.
std::string set_key(Config& config, const std::string& key, const std::string& value);
// The command line: "" or why not; `conf` names the file given by --conf
// (read first, then the other flags in order). `help` set for --help.
std::string parse_args(int argc, char** argv, Config& config, bool& help);

extern const char* const kUsage;

}  // namespace uroce::daemon
