// uroced's configuration: conf/uroced.conf (key = value lines, '#'
// comments), then the command line, whose flags override the file's keys
// of the same name (--workers 2,3 overrides workers = 1).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace uroce::daemon {

// Budgets: per client, and per uid (what all the clients of one uid hold
// together, so that one user cannot take every client slot or the device's
// max_qp / max_mr through many connections). Every key but max_clients and
// max_memory_mb (daemon-wide) can
// be set for one uid: "uid.1000.uid_max_qps = 2048" (limits_for).
struct Limits {
  std::uint32_t qps = 256;         // QPs per client
  std::uint32_t cqs = 512;         // CQs per client
  std::uint32_t mrs = 4096;        // memory regions per client
  std::uint64_t pinned_mb = 4096;  // MiB of registered memory per client
  std::uint32_t clients = 64;      // clients at once (all uids)
  std::uint32_t pds = 256;         // PDs per client
  std::uint32_t uid_connections = 0;  // clients of one uid at once; 0: max_clients / 4, at least 4
  std::uint32_t uid_pds = 1024;    // PDs of one uid's clients together
  std::uint32_t uid_qps = 1024;
  std::uint32_t uid_cqs = 2048;
  std::uint32_t uid_mrs = 16384;
  // Memory the daemon holds for clients (README "Budgets"): CQs' and QPs'
  // rings and engine arrays per client; everything (region files, CQs, QPs)
  // per uid and for the whole daemon (0: half the machine's memory).
  std::uint64_t object_mb = 256;        // max_object_mb, per client
  std::uint64_t uid_memory_mb = 8192;   // uid_max_memory_mb
  std::uint64_t memory_mb = 0;          // max_memory_mb, the daemon's total
  // Mappings the daemon makes for clients (memory files, multi-piece region
  // views, rings); the daemon's total is kept under half of vm.max_map_count.
  std::uint32_t mappings = 8192;        // max_mappings, per client
  std::uint32_t uid_mappings = 16384;   // uid_max_mappings
  // Memory files made known to the port (DPDK external memory, DMA mapping;
  // 128 for the whole process): per client and per uid. Past them a file's
  // regions work, their frames copied instead of read by the NIC.
  std::uint32_t port_registrations = 16;      // max_port_registrations
  std::uint32_t uid_port_registrations = 32;  // uid_max_port_registrations

  // uid_connections with its default resolved.
  std::uint32_t connections_per_uid() const {
    return uid_connections != 0 ? uid_connections : std::max<std::uint32_t>(clients / 4, 4);
  }
};

// A "uid.N.KEY = VALUE" line: KEY's budget for uid N's clients.
struct UidKey {
  std::uint32_t uid = 0;
  std::string key, value;
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
  std::vector<UidKey> uid_keys;    // in the order given; the last one of a key wins
  std::uint32_t hello_timeout_ms = 2000;  // a connection that has not said hello by then is closed
  std::uint32_t reply_timeout_ms = 2000;  // a client that leaves a reply unread this long is dropped
  std::string log_level = "info";
  bool stats = false;              // --stats: print the clients of a running daemon and exit
};

// The budgets of `uid`'s clients: config.limits with the uid's own keys.
Limits limits_for(const Config& config, std::uint32_t uid);

// Reads `file` into `config`: "" or "FILE:LINE: why".
std::string read_config_file(const std::string& file, Config& config);
// One key (as in the file, or a flag without its dashes): "" or why not.
std::string set_key(Config& config, const std::string& key, const std::string& value);
// The command line: "" or why not; `conf` names the file given by --conf
// (read first, then the other flags in order). `help` set for --help.
std::string parse_args(int argc, char** argv, Config& config, bool& help);

extern const char* const kUsage;

}  // namespace uroce::daemon
