#include "cc/choice.h"

namespace uroce::cc {

std::optional<Controller> parse_controller(std::string_view name) {
  if (name == "dcqcn") return Controller::kDcqcn;
  if (name == "delay") return Controller::kDelay;
  if (name == "off") return Controller::kOff;
  return std::nullopt;
}

const char* controller_name(Controller c) {
  switch (c) {
    case Controller::kDcqcn:
      return "dcqcn";
    case Controller::kDelay:
      return "delay";
    case Controller::kOff:
      break;
  }
  return "off";
}

std::string resolve_controller(std::string_view cc, bool dcqcn_file, bool delay_file, const ControllerNames& names,
                               Controller& out) {
  const std::string cc_name(names.cc);
  const std::string dcqcn_name(names.dcqcn_file);
  const std::string delay_name(names.delay_file);
  if (cc.empty()) {
    if (dcqcn_file && delay_file) {
      return dcqcn_name + " and " + delay_name + " name two congestion controls; keep one, or say which with " +
             cc_name;
    }
    out = dcqcn_file ? Controller::kDcqcn : delay_file ? Controller::kDelay : Controller::kOff;
    return "";
  }
  const std::optional<Controller> c = parse_controller(cc);
  if (!c) return cc_name + " takes dcqcn, delay or off, not '" + std::string(cc) + "'";
  if (dcqcn_file && *c != Controller::kDcqcn) {
    return dcqcn_name + " with " + cc_name + " " + controller_name(*c) + ": DCQCN's parameters are for " + cc_name +
           " dcqcn; drop one of them";
  }
  if (delay_file && *c != Controller::kDelay) {
    return delay_name + " with " + cc_name + " " + controller_name(*c) + ": the delay parameters are for " + cc_name +
           " delay; drop one of them";
  }
  out = *c;
  return "";
}

}  // namespace uroce::cc
