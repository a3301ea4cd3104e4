// uroced's configuration: conf/uroced.conf (key = value lines, '#'
// comments), then the command line, whose flags override the file's keys
// of the same name (--workers 2,3 overrides workers = 1).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "service_daemon/limits.h"

namespace uroce::daemon {

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
  std::string cc;                  // dcqcn | delay | off; "" what the files below imply (off if none)
  std::string dcqcn;               // DCQCN parameter file; "" conf/dcqcn.conf's defaults (with cc = dcqcn)
  std::string delay;               // the delay controller's; "" conf/delay.conf's defaults (with cc = delay)
  int pfc_priority = -1;           // the lossless 802.1p priority (PFC on the port, data's DSCP); -1 off
  std::uint8_t min_ack_timeout = 0;  // a floor under every QP's local ACK timeout (exponent); 0 none
  std::string hugepages = "auto";  // auto | on | off: regions on hugepages (on: required)
  std::string socket = "/run/uroce/uroced.sock";
  std::uint32_t socket_mode = 0660;
  std::string socket_group;        // "" the daemon's
  Limits limits;
  std::vector<UidKey> uid_keys;    // in the order given; the last one of a key wins
  std::uint32_t hello_timeout_ms = 2000;  // a connection that has not said hello by then is closed
  std::uint32_t reply_timeout_ms = 2000;  // a client that leaves a reply unread this long is dropped
  std::string log_level = "info";
  // Prometheus /metrics on ADDR:PORT ("" off); per-QP series for at most
  // metrics_max_qps QPs (the busiest), every QP in the port's sums.
  std::string metrics;
  std::size_t metrics_max_qps = 100;
  bool stats = false;              // --stats: print the clients of a running daemon and exit
};

// The budgets of `uid`'s clients: config.limits with the uid's own keys.
Limits limits_for(const Config& config, std::uint32_t uid);
// What the Server takes of `config`: the socket, timeouts and budgets, with
// every uid's own keys applied (limits_for).
ServerConfig server_config(const Config& config);

// Reads `file` into `config`: "" or "FILE:LINE: why".
std::string read_config_file(const std::string& file, Config& config);
// One key (as in the file, or a flag without its dashes): "" or why not.
std::string set_key(Config& config, const std::string& key, const std::string& value);
// The command line: "" or why not; `conf` names the file given by --conf
// (read first, then the other flags in order). `help` set for --help.
std::string parse_args(int argc, char** argv, Config& config, bool& help);

extern const char* const kUsage;

}  // namespace uroce::daemon
