// uroce-perf's options, the same for every driver: the in-process ones
// (--sim, --ring) and the two-process one (--ip), so both sides of a test
// and every mode read one command line the same way.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cc/dcqcn.h"
#include "cc/delay.h"
#include "uroce/verbs.h"

namespace uroce::perf {

// The operation each message is.
enum class Op { kWrite, kRead, kSend, kAtomic };

// "write", "read", "send", "atomic": the name on the command line, in the
// output, the JSON and the two-process exchange.
const char* op_name(Op op);

struct Options {
  std::string fabric;  // "sim", "ring" or "port" (--ip: two processes)
  Op op = Op::kWrite;
  std::uint32_t size = 65536;
  std::uint64_t iters = 10000;
  std::uint32_t depth = 64;  // messages in flight; 1 with --lat
  std::uint32_t mtu = 4096;
  std::uint32_t offset = 0;  // --offset: where in its first page each side's buffer starts
  bool lat = false;
  double loss = 0;
  std::uint64_t seed = 1;
  bool verify = false;
  bool odp = false;  // --odp: both buffers registered on demand (IBV_ACCESS_ON_DEMAND)
  std::string json;
  std::string pcap;
  bool counters = false;
  std::string metrics;  // --metrics ADDR:PORT: Prometheus /metrics while it runs
  double report_interval = 0;  // --report-interval S: a JSON line of figures every S seconds (--sim, --ring)
  bool workers = false;
  std::optional<cc::DcqcnParams> dcqcn;
  std::optional<cc::DelayParams> delay;  // --cc delay (never with dcqcn)
  int pfc_priority = -1;  // --pfc: the lossless priority; -1 none
  TransportOptions transport;  // --sr, --spray, --bdp: every RC QP's, both ends
  std::uint32_t idle_qps = 0;
  std::uint32_t idle_depth = 16;  // send and receive WQEs of each idle QP
  std::uint32_t idle_rd_atomic = 16;  // max_rd_atomic / max_dest_rd_atomic of each idle QP
  std::uint32_t qps = 1;  // message slot s goes to QP s mod qps
  std::uint32_t post_list = 1;  // --post-list: each QP's WRs posted this many to a call, chained
  std::array<std::uint8_t, 4> ip{};
  bool have_ip = false;
  std::uint16_t port_id = 0;
  std::uint16_t tcp_port = 18515;
  std::string server;  // with --ip: empty to be the server

  // The congestion control parameters, or nullptr when it is off.
  const cc::DcqcnParams* dcqcn_params() const { return dcqcn ? &*dcqcn : nullptr; }
  const cc::DelayParams* delay_params() const { return delay ? &*delay : nullptr; }
};

// The options in `args` (the program's name first, then what follows "--").
// Throws std::invalid_argument with a one-line message on bad usage; prints
// the usage and exits 0 on -h or --help.
Options parse_options(const std::vector<std::string>& args);

}  // namespace uroce::perf
