// uroce-perf between two processes, each with its own DPDK port: a server
// that waits for a client, perftest-style (the TCP exchange carries the test,
// QPN and PSN of each QP, rkey, buffer address and GID of each side).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace uroce::cc {
struct DcqcnParams;
}  // namespace uroce::cc

namespace uroce::perf {

struct RemoteOptions {
  std::string op;        // write | read | send | atomic
  std::uint32_t size = 65536;
  std::uint64_t iters = 10000;
  std::uint32_t depth = 64;
  std::uint32_t mtu = 4096;
  std::uint32_t qps = 1;     // message slot s goes to QP s mod qps
  bool lat = false;
  bool verify = false;
  std::string json;
  bool counters = false;
  std::array<std::uint8_t, 4> ip{};
  std::uint16_t port_id = 0;
  std::uint16_t tcp_port = 18515;
  std::string server;    // empty: be the server
  const cc::DcqcnParams* dcqcn = nullptr;  // congestion control; nullptr: off
};

// Runs one side. Returns the process exit status (0 ok, 1 failure).
int run_remote(const RemoteOptions& o);

}  // namespace uroce::perf
