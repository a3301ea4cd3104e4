#include "config.h"

#include "uroce/metrics.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <type_traits>

namespace uroce::daemon {

const char* const kUsage =
    "usage: uroced [--conf FILE] [--eal \"EAL ARGS\"] [--ip ADDR/LEN] [--port-id N] [--queues N]\n"
    "              [--workers CPUS] [--cc dcqcn|delay|off] [--dcqcn FILE] [--delay FILE]\n"
    "              [--pfc-priority 0-7|off] [--hugepages auto|on|off]\n"
    "              [--min-ack-timeout 0-31] [--socket PATH]\n"
    "              [--socket-mode OCTAL] [--socket-group NAME] [--max-qps N] [--max-cqs N]\n"
    "              [--max-mrs N] [--max-pinned-mb N] [--max-clients N] [--max-pds N]\n"
    "              [--uid-max-connections N] [--uid-max-pds N] [--uid-max-qps N] [--uid-max-cqs N]\n"
    "              [--uid-max-mrs N] [--uid.UID.KEY N] [--hello-timeout-ms N] [--reply-timeout-ms N]\n"
    "              [--max-object-mb N] [--uid-max-memory-mb N] [--max-memory-mb N]\n"
    "              [--max-mappings N] [--uid-max-mappings N] [--max-port-registrations N]\n"
    "              [--uid-max-port-registrations N] [--max-srqs N] [--uid-max-srqs N]\n"
    "              [--max-ahs N] [--uid-max-ahs N] [--log-level LEVEL]\n"
    "              [--metrics ADDR:PORT] [--metrics-max-qps N]\n"
    "       uroced --stats [--socket PATH]\n"
    "\n"
    "The uroce service: owns a DPDK port and worker cores, and serves local RDMA programs\n"
    "(uroce's API, or stock verbs programs through uroce-run --service) over a UNIX socket,\n"
    "their queues and completions in shared memory. Configuration: conf/uroced.conf, whose\n"
    "keys the flags override (--max-qps is the key max_qps).\n"
    "  --stats   lists the clients of the daemon at --socket, their QPs and counters.\n"
    "SIGTERM or SIGINT: every client's QPs move to the error state, the clients are told\n"
    "(their socket closes), and the daemon exits.\n"
    "  --max-*   budgets per client; --uid-max-* budgets per uid (all its clients together);\n"
    "            --uid.1000.uid-max-qps 2048 (key uid.1000.uid_max_qps) sets one for uid 1000 only.\n"
    "  --cc C    the congestion control of every QP: dcqcn (ECN marks and CNPs; --dcqcn's file or\n"
    "            conf/dcqcn.conf's values), delay (each ACK's round trip, for switches that never mark;\n"
    "            --delay's file or conf/delay.conf's) or off. Unset: a file given picks its own, else off.\n"
    "  --pfc-priority (or --pfc) P: PFC on priority P on the port where its driver can (else one\n"
    "            warning), and data QPs whose traffic class is 0 sent with DSCP P*8.\n"
    "  --metrics ADDR:PORT: Prometheus's /metrics there (127.0.0.1:9464; off by default): the port's,\n"
    "            engines' and QPs' counters, per-QP series for the --metrics-max-qps (100) busiest QPs.\n"
    "  --min-ack-timeout N: no QP waits less than 4.096 us * 2^N for an acknowledgement before it\n"
    "            resends (0: each QP's own timeout), for paths slower than programs expect.\n";

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool parse_uint(const std::string& v, std::uint64_t max, std::uint64_t& out, int base = 10) {
  if (v.empty()) return false;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, base);
  if (*end != '\0' || x > max) return false;
  out = x;
  return true;
}

bool parse_ip(const std::string& v, std::array<std::uint8_t, 4>& ip) {
  const std::string addr = v.substr(0, v.find('/'));
  std::istringstream in(addr);
  std::string part;
  int i = 0;
  while (std::getline(in, part, '.')) {
    std::uint64_t x;
    if (i >= 4 || !parse_uint(part, 255, x)) return false;
    ip[static_cast<std::size_t>(i++)] = static_cast<std::uint8_t>(x);
  }
  return i == 4;
}

// A budget key (Limits) into `l`: "" or why not; `known` false for a key
// that is not a budget.
std::string set_limit(Limits& l, const std::string& key, const std::string& value, bool& known) {
  known = true;
  std::uint64_t x = 0;
  auto number = [&](std::uint64_t max, auto& field) -> std::string {
    if (!parse_uint(value, max, x)) return key + ": '" + value + "' is not a number up to " + std::to_string(max);
    field = static_cast<std::remove_reference_t<decltype(field)>>(x);
    return "";
  };
  if (key == "max_qps") return number(1u << 20, l.qps);
  if (key == "max_cqs") return number(1u << 20, l.cqs);
  if (key == "max_mrs") return number(1u << 20, l.mrs);
  if (key == "max_pinned_mb") return number(1ull << 30, l.pinned_mb);
  if (key == "max_clients") return number(4096, l.clients);
  if (key == "max_pds") return number(1u << 20, l.pds);
  if (key == "uid_max_connections") return number(4096, l.uid_connections);
  if (key == "uid_max_pds") return number(1u << 24, l.uid_pds);
  if (key == "uid_max_qps") return number(1u << 24, l.uid_qps);
  if (key == "uid_max_cqs") return number(1u << 24, l.uid_cqs);
  if (key == "uid_max_mrs") return number(1u << 24, l.uid_mrs);
  if (key == "max_srqs") return number(1u << 20, l.srqs);
  if (key == "uid_max_srqs") return number(1u << 24, l.uid_srqs);
  if (key == "max_ahs") return number(1u << 15, l.ahs);
  if (key == "uid_max_ahs") return number(1u << 15, l.uid_ahs);
  if (key == "max_object_mb") return number(1ull << 30, l.object_mb);
  if (key == "uid_max_memory_mb") return number(1ull << 30, l.uid_memory_mb);
  if (key == "max_memory_mb") return number(1ull << 30, l.memory_mb);
  if (key == "max_mappings") return number(1u << 24, l.mappings);
  if (key == "uid_max_mappings") return number(1u << 24, l.uid_mappings);
  if (key == "max_port_registrations") return number(128, l.port_registrations);
  if (key == "uid_max_port_registrations") return number(128, l.uid_port_registrations);
  known = false;
  return "";
}

// "uid.N.KEY": N and KEY, false if `key` is not of that form.
bool split_uid_key(const std::string& key, std::uint64_t& uid, std::string& rest) {
  if (key.rfind("uid.", 0) != 0) return false;
  const auto dot = key.find('.', 4);
  if (dot == std::string::npos || !parse_uint(key.substr(4, dot - 4), 0xfffffffe, uid)) return false;
  rest = key.substr(dot + 1);
  return true;
}

}  // namespace

Limits limits_for(const Config& config, std::uint32_t uid) {
  Limits l = config.limits;
  for (const UidKey& k : config.uid_keys) {
    bool known = false;
    if (k.uid == uid) set_limit(l, k.key, k.value, known);  // checked when read
  }
  return l;
}

ServerConfig server_config(const Config& config) {
  ServerConfig s;
  s.socket = config.socket;
  s.socket_mode = config.socket_mode;
  s.socket_group = config.socket_group;
  s.hello_timeout_ms = config.hello_timeout_ms;
  s.reply_timeout_ms = config.reply_timeout_ms;
  s.limits = config.limits;
  for (const UidKey& k : config.uid_keys) s.uid_limits.try_emplace(k.uid, limits_for(config, k.uid));
  return s;
}

std::string set_key(Config& c, const std::string& raw_key, const std::string& value) {
  std::string key = raw_key;
  for (char& ch : key) {
    if (ch == '-') ch = '_';
  }
  std::uint64_t x = 0;
  auto number = [&](std::uint64_t max, auto& field) -> std::string {
    if (!parse_uint(value, max, x)) return key + ": '" + value + "' is not a number up to " + std::to_string(max);
    field = static_cast<std::remove_reference_t<decltype(field)>>(x);
    return "";
  };
  std::uint64_t uid = 0;
  std::string uid_key;
  if (split_uid_key(key, uid, uid_key)) {
    Limits scratch;
    bool known = false;
    const std::string e = set_limit(scratch, uid_key, value, known);
    if (!known || uid_key == "max_clients" || uid_key == "max_memory_mb") {
      return raw_key + ": '" + uid_key + "' is not a budget one uid can have (max_qps, uid_max_qps, ...)";
    }
    if (!e.empty()) return raw_key + ": " + e;
    c.uid_keys.push_back(UidKey{static_cast<std::uint32_t>(uid), uid_key, value});
    return "";
  }
  if (key.rfind("uid.", 0) == 0) return raw_key + ": give uid.NUMBER.KEY, e.g. uid.1000.uid_max_qps";
  bool budget = false;
  if (std::string e = set_limit(c.limits, key, value, budget); budget) return e;
  if (key == "eal") {
    c.eal = value;
  } else if (key == "ip") {
    if (!parse_ip(value, c.ip)) return "ip: '" + value + "' is not an IPv4 address like 10.0.0.1/24";
    c.ip_set = true;
  } else if (key == "port_id") {
    return number(65535, c.port_id);
  } else if (key == "queues") {
    if (std::string e = number(64, c.queues); !e.empty() || c.queues == 0) return "queues: give 1 to 64";
  } else if (key == "workers") {
    c.workers.clear();
    std::istringstream in(value);
    std::string cpu;
    while (std::getline(in, cpu, ',')) {
      if (!parse_uint(trim(cpu), 4095, x)) return "workers: '" + value + "' is not a list of CPUs like 2,3";
      c.workers.push_back(static_cast<int>(x));
    }
  } else if (key == "cc") {
    if (value != "dcqcn" && value != "delay" && value != "off") return "cc: '" + value + "': give dcqcn, delay or off";
    c.cc = value;
  } else if (key == "dcqcn") {
    c.dcqcn = value;
  } else if (key == "delay") {
    c.delay = value;
  } else if (key == "pfc_priority" || key == "pfc") {  // --pfc as the tools spell it
    if (value == "off") {
      c.pfc_priority = -1;
    } else if (!parse_uint(value, 7, x)) {
      return key + ": '" + value + "' is not a priority; give the lossless 802.1p priority, 0 to 7, or off";
    } else {
      c.pfc_priority = static_cast<int>(x);
    }
  } else if (key == "min_ack_timeout") {
    if (!parse_uint(value, 31, x)) {
      return "min_ack_timeout: '" + value + "' is not a timeout exponent; give 0 (no floor) to 31 (4.096 us * 2^N)";
    }
    c.min_ack_timeout = static_cast<std::uint8_t>(x);
  } else if (key == "hugepages") {
    if (value != "auto" && value != "on" && value != "off") return "hugepages: give auto, on or off";
    c.hugepages = value;
  } else if (key == "socket") {
    c.socket = value;
  } else if (key == "socket_mode") {
    if (!parse_uint(value, 0777, x, 8)) return "socket_mode: '" + value + "' is not an octal mode like 0660";
    c.socket_mode = static_cast<std::uint32_t>(x);
  } else if (key == "socket_group") {
    c.socket_group = value;
  } else if (key == "hello_timeout_ms") {
    if (std::string e = number(3600000, c.hello_timeout_ms); !e.empty() || c.hello_timeout_ms == 0) {
      return "hello_timeout_ms: give 1 to 3600000";
    }
  } else if (key == "reply_timeout_ms") {
    if (std::string e = number(3600000, c.reply_timeout_ms); !e.empty() || c.reply_timeout_ms == 0) {
      return "reply_timeout_ms: give 1 to 3600000";
    }
  } else if (key == "log_level") {
    c.log_level = value;
  } else if (key == "metrics") {
    if (value == "off" || value.empty()) {
      c.metrics.clear();
    } else if (std::string e = metrics::check_listen_address(value); !e.empty()) {
      return "metrics: " + e;
    } else {
      c.metrics = value;
    }
  } else if (key == "metrics_max_qps") {
    if (!parse_uint(value, 100000, x)) return "metrics_max_qps: give 0 (the port's sums only) to 100000";
    c.metrics_max_qps = static_cast<std::size_t>(x);
  } else {
    return "unknown key '" + raw_key + "' (uroced --help lists them)";
  }
  return "";
}

std::string read_config_file(const std::string& file, Config& config) {
  std::ifstream in(file);
  if (!in) return file + ": cannot read it (give --conf FILE, e.g. conf/uroced.conf)";
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) return file + ":" + std::to_string(n) + ": expected 'key = value'";
    if (std::string e = set_key(config, trim(line.substr(0, eq)), trim(line.substr(eq + 1))); !e.empty()) {
      return file + ":" + std::to_string(n) + ": " + e;
    }
  }
  return "";
}

std::string parse_args(int argc, char** argv, Config& config, bool& help) {
  help = false;
  // --conf first, wherever it is, so the other flags override the file.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--conf") {
      if (i + 1 >= argc) return "--conf needs a file";
      if (std::string e = read_config_file(argv[i + 1], config); !e.empty()) return e;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help = true;
      return "";
    }
    if (a == "--stats") {
      config.stats = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) return "unexpected argument '" + a + "' (uroced --help)";
    if (i + 1 >= argc) return a + " needs a value (uroced --help)";
    const std::string v = argv[++i];
    if (a == "--conf") continue;
    if (std::string e = set_key(config, a.substr(2), v); !e.empty()) return e;
  }
  return "";
}

}  // namespace uroce::daemon
