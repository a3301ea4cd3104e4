// uroce-stat's command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace uroce::statview {

struct Options {
  std::string file_prefix;  // --file-prefix: a DPDK process's
  std::string socket;       // --socket: uroced's socket, or a telemetry socket
  bool list = false;
  bool once = false;
  bool json = false;
  double interval_s = 1;
  double timeout_s = 2;  // --timeout: the longest wait for one answer
  std::uint32_t top = 10;
  std::optional<std::uint32_t> qp;      // --qp N
  std::optional<std::uint32_t> device;  // --device D: only this device index
};

// The options in `args` (the program's name first). Throws
// std::invalid_argument with a one-line message on bad usage; prints the
// usage and exits 0 on -h or --help.
Options parse_options(const std::vector<std::string>& args);

}  // namespace uroce::statview
