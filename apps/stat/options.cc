#include "stat/options.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/args.h"

namespace uroce::statview {
namespace {

using app::usage_error;

const char kUsage[] =
    "usage: uroce-stat (--file-prefix P | --socket PATH) [--once] [--json] [--interval S] [--top N] [--timeout S]\n"
    "       uroce-stat (--file-prefix P | --socket PATH) --qp N [--device D] [--once] [--json] [--interval S]\n"
    "       uroce-stat --list [--json]\n"
    "\n"
    "A live view of a running uroce program or uroced, from its DPDK telemetry: ports (packets and Gb/s,\n"
    "drops by reason, PAUSE frames, handover), engines (busy fraction, bursts) and the busiest QPs. Rates\n"
    "are differences between two reads over the time between them.\n"
    "\n"
    "  --file-prefix P  the process started with EAL --file-prefix=P (its socket: /var/run/dpdk/P/ for root,\n"
    "                   $XDG_RUNTIME_DIR/dpdk/P/ otherwise)\n"
    "  --socket PATH    uroced's socket (PATH.telemetry leads to its telemetry), or a dpdk_telemetry.v2 socket\n"
    "  --list           the DPDK processes whose telemetry sockets are in the runtime folders\n"
    "  --once           read twice, an interval apart, print once and exit\n"
    "  --json           one JSON object a refresh (fields: docs/tools.md, uroce-stat)\n"
    "  --interval S     seconds between reads (default 1; 0.1 to 3600)\n"
    "  --top N          QPs shown, busiest first by Gb/s (default 10)\n"
    "  --qp N           every counter of QP N (decimal or 0x hex) with its rate\n"
    "  --device D       only device D (its index in /uroce/devices)\n"
    "  --timeout S      the longest wait for the process's greeting or one answer (default 2; 0.1 to 60)\n"
    "\n"
    "Ctrl-C ends the live view. Exit status: 0 ok; 1 the target cannot be read (the line says why); 2 bad usage.\n";

// Seconds from 0.1 to `most`, for `flag`.
double parse_seconds(const std::string& v, const char* flag, double most) {
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(s) || s < 0.1 || s > most) {
    char range[32];
    std::snprintf(range, sizeof range, "%g", most);
    usage_error(std::string(flag) + ": seconds from 0.1 to " + range + ", not '" + v + "'");
  }
  return s;
}

}  // namespace

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  app::ArgReader in(args);
  for (std::string a; in.next(a);) {
    if (a == "--file-prefix") o.file_prefix = in.value("--file-prefix");
    else if (a == "--socket") o.socket = in.value("--socket");
    else if (a == "--list") o.list = true;
    else if (a == "--once") o.once = true;
    else if (a == "--json") o.json = true;
    else if (a == "--interval") o.interval_s = parse_seconds(in.value("--interval"), "--interval", 3600);
    else if (a == "--timeout") o.timeout_s = parse_seconds(in.value("--timeout"), "--timeout", 60);
    else if (a == "--top") {
      const std::uint64_t n = in.number("--top");
      if (n == 0 || n > 100000) usage_error("--top: 1 to 100000 QPs");
      o.top = static_cast<std::uint32_t>(n);
    } else if (a == "--qp") {
      const std::uint64_t n = in.number("--qp");
      if (n > 0xffffff) usage_error("--qp: a QPN is 24 bits (at most 16777215)");
      o.qp = static_cast<std::uint32_t>(n);
    } else if (a == "--device") {
      const std::uint64_t n = in.number("--device");
      if (n > 1023) usage_error("--device: a device index, 0 to 1023");
      o.device = static_cast<std::uint32_t>(n);
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      usage_error("unknown argument '" + a + "' (see --help)");
    }
  }
  const int targets = (o.file_prefix.empty() ? 0 : 1) + (o.socket.empty() ? 0 : 1);
  if (o.list) {
    if (targets != 0 || o.once || o.qp || o.device) usage_error("--list takes no target and no --once, --qp or --device");
    return o;
  }
  if (targets == 0) usage_error("name the process: --file-prefix P or --socket PATH (uroce-stat --list shows them)");
  if (targets == 2) usage_error("give --file-prefix or --socket, not both");
  // A prefix is one folder's name under the runtime folder.
  if (!o.file_prefix.empty() &&
      (o.file_prefix.find('/') != std::string::npos || o.file_prefix == "." || o.file_prefix == "..")) {
    usage_error("--file-prefix: a DPDK file prefix has no '/' ('" + o.file_prefix + "')");
  }
  return o;
}

}  // namespace uroce::statview
