// The "uroce" logger behind include/uroce/log.h, for lib/verbs, lib/device
// and drivers/dpdk: control path only (DESIGN.md, logging). A layer of its
// own, so a driver logs without linking the stack above it. The layers below
// verbs (wire, mem, cc, transport, engine) never log; test/layering/layering_test.cc
// keeps spdlog out of them.
#pragma once

#include <spdlog/logger.h>

namespace uroce {

// Made at first use, with the level UROCE_LOG_LEVEL names (warn without it)
// and the sink set_log_sink() chose (stderr by default). Never destroyed, so
// it may be used until the process ends.
spdlog::logger& logger();

}  // namespace uroce
