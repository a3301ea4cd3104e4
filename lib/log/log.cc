// The "uroce" logger: one spdlog logger whose only sink writes to stderr or
// hands each line to the embedder's LogSink.
#include "log/log.h"

#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "uroce/log.h"

namespace uroce {
namespace {

struct LevelName {
  const char* name;
  LogLevel level;
  spdlog::level::level_enum spd;
};
constexpr std::array<LevelName, 6> kLevels = {{
    {"trace", LogLevel::kTrace, spdlog::level::trace},
    {"debug", LogLevel::kDebug, spdlog::level::debug},
    {"info", LogLevel::kInfo, spdlog::level::info},
    {"warn", LogLevel::kWarn, spdlog::level::warn},
    {"error", LogLevel::kError, spdlog::level::err},
    {"off", LogLevel::kOff, spdlog::level::off},
}};

// Any case: UROCE_LOG_LEVEL=DEBUG works too.
const LevelName* find_level(std::string_view name) {
  for (const auto& l : kLevels) {
    const std::string_view want = l.name;
    auto same = [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; };
    if (name.size() == want.size() && std::equal(name.begin(), name.end(), want.begin(), same)) return &l;
  }
  return nullptr;
}

const LevelName& entry(LogLevel level) {
  for (const auto& l : kLevels) {
    if (l.level == level) return l;
  }
  return kLevels[3];
}

LogLevel from_spdlog(spdlog::level::level_enum spd) {
  if (spd == spdlog::level::critical) return LogLevel::kError;
  for (const auto& l : kLevels) {
    if (l.spd == spd) return l.level;
  }
  return LogLevel::kWarn;
}

// Writes formatted lines to stderr, or hands the bare text to the
// embedder's sink. base_sink's mutex serialises both with route().
class RoutingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void route(LogSink to) {
    std::lock_guard<std::mutex> lock(mutex_);
    sink_ = std::move(to);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (sink_) {
      sink_(from_spdlog(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
      return;
    }
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  LogSink sink_;
};

struct Log {
  std::shared_ptr<RoutingSink> sink = std::make_shared<RoutingSink>();
  spdlog::logger logger{"uroce", sink};

  Log() {
    logger.set_pattern("[%T.%e] [%n] [%l] %v");
    logger.set_level(spdlog::level::warn);
    const char* env = std::getenv("UROCE_LOG_LEVEL");
    if (env == nullptr || *env == '\0') return;
    if (const LevelName* l = find_level(env)) {
      logger.set_level(l->spd);
    } else {
      logger.warn("UROCE_LOG_LEVEL={} is not a log level; use trace, debug, info, warn, error or off "
                  "(keeping warn)",
                  env);
    }
  }
};

// Never destroyed: a control call made while the process exits (a static
// object's destructor) may still log.
Log& the_log() {
  static Log* log = new Log();
  return *log;
}

}  // namespace

spdlog::logger& logger() { return the_log().logger; }

bool set_log_level(std::string_view name) {
  const LevelName* l = find_level(name);
  if (l == nullptr) return false;
  logger().set_level(l->spd);
  return true;
}

void set_log_level(LogLevel level) { logger().set_level(entry(level).spd); }

LogLevel log_level() { return from_spdlog(logger().level()); }

const char* log_level_name(LogLevel level) { return entry(level).name; }

void set_log_sink(LogSink sink) { the_log().sink->route(std::move(sink)); }

}  // namespace uroce
