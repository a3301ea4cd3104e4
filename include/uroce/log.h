// uroce's log: control-path events only (EAL start, port set-up, device
// assembly, QP state changes, failed control calls), never one line per
// packet or work request. One logger, named "uroce", built on spdlog; this
// header does not expose spdlog, so an embedder needs neither its headers nor
// its library to steer it.
//
// Levels: trace, debug, info, warn, error, off. The default is warn: a
// healthy run prints nothing. The environment variable UROCE_LOG_LEVEL sets
// the level when the logger is first used (an unknown value logs one warning
// naming the valid ones and keeps warn); set_log_level() overrides it.
//
// What each level carries:
//   error  a control operation failed (EAL did not start, a port refused its
//          set-up); the same text is also returned to the caller
//   info   what was set up: a port's queues, frame size and offloads; a device
//   debug  EAL's arguments, each QP state change ("qp 0x11: RESET -> INIT"),
//          each failed verbs control call with the reason last_error() gives
//
// Lines go to stderr ("[13:03:26.950] [uroce] [debug] qp 0x11: RESET -> INIT")
// unless a sink is set. All functions here are thread-safe.
#pragma once

#include <functional>
#include <string_view>

namespace uroce {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Sets the level by name: "trace", "debug", "info", "warn", "error" or
// "off", in any case. Returns false, and leaves the level as it was, for any
// other name.
bool set_log_level(std::string_view name);
void set_log_level(LogLevel level);
LogLevel log_level();

// "trace", ..., "off".
const char* log_level_name(LogLevel level);

// Receives each line at or above the level: its level and its text (no
// prefix, no newline). Called from the thread that logs (whichever thread
// makes the control call), one call at a time; it must not make uroce log
// or call set_log_sink (it runs under the sink's lock).
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Sends every line to `sink` instead of stderr; an empty sink restores
// stderr. The level still filters what reaches the sink.
void set_log_sink(LogSink sink);

}  // namespace uroce
