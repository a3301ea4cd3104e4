// Which congestion control a port runs: `cc = dcqcn | delay | off` as the
// tools, the environment and uroced's configuration spell it, with each
// controller's parameter file beside it. Names only: reading the files is
// the caller's (lib/cc does no I/O).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace uroce::cc {

enum class Controller { kOff, kDcqcn, kDelay };

// "dcqcn", "delay" or "off"; nullopt for anything else.
std::optional<Controller> parse_controller(std::string_view name);
const char* controller_name(Controller c);

// How the caller's user names the three settings in messages: e.g.
// {"UROCE_CC", "UROCE_DCQCN", "UROCE_DELAY"} or {"--cc", "--dcqcn", "--delay"}.
struct ControllerNames {
  const char* cc;
  const char* dcqcn_file;
  const char* delay_file;
};

// The controller a port runs given `cc` ("" when not set) and whether a
// DCQCN or a delay parameter file is given. Unset, a file alone picks its
// controller (DCQCN's file has always meant DCQCN on) and none means off.
// A file of the other controller, or any file with off, is an error (the
// file would be silently ignored). "" or the one-line error.
std::string resolve_controller(std::string_view cc, bool dcqcn_file, bool delay_file, const ControllerNames& names,
                               Controller& out);

}  // namespace uroce::cc
