// Reading a tool's own arguments (what follows "--" for the DPDK tools):
// flags with values, numbers, and a one-line message for each mistake.
// Exceptions only here, at the edge: each tool's main catches them.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace uroce::app {

// Bad usage: `message` says what is wrong, in one line.
[[noreturn]] inline void usage_error(const std::string& message) { throw std::invalid_argument(message); }

// `v` as an unsigned number (decimal, 0x hex or 0 octal, as strtoull reads
// it); usage_error "FLAG takes a number, not 'V'" otherwise.
inline std::uint64_t parse_number(const std::string& v, const char* flag) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 0);
  if (v.empty() || *end != '\0') usage_error(std::string(flag) + " takes a number, not '" + v + "'");
  return x;
}

// --pfc PRIO: the lossless 802.1p priority, 0 to 7, or "off" (-1).
inline int parse_pfc_priority(const std::string& v, const char* flag) {
  if (v == "off") return -1;
  char* end = nullptr;
  const unsigned long x = std::strtoul(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x > 7) {
    usage_error(std::string(flag) + ": give the lossless 802.1p priority, 0 to 7, or off (not '" + v + "')");
  }
  return static_cast<int>(x);
}

// --offset BYTES: where in a page a buffer starts, 0 to the page size - 1,
// so that messages cross page boundaries (a device reading one by its IOVA
// must follow them); usage_error naming the range otherwise.
inline std::uint32_t parse_page_offset(const std::string& v, const char* flag) {
  const long page = sysconf(_SC_PAGESIZE);
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v[0] == '-' || *end != '\0' || x >= static_cast<unsigned long long>(page)) {
    usage_error(std::string(flag) + ": 0 to " + std::to_string(page - 1) + " (bytes into a " + std::to_string(page) +
                "-byte page), not '" + v + "'");
  }
  return static_cast<std::uint32_t>(x);
}

// The arguments one at a time; args[0] is the program's name and skipped.
class ArgReader {
 public:
  explicit ArgReader(std::vector<std::string> args) : args_(std::move(args)) {}

  // The next argument into `arg`; false after the last.
  bool next(std::string& arg) {
    if (++i_ >= args_.size()) return false;
    arg = args_[i_];
    return true;
  }
  // The value that follows flag `flag`; usage_error "FLAG needs a value" if none does.
  std::string value(const char* flag) {
    if (i_ + 1 >= args_.size()) usage_error(std::string(flag) + " needs a value");
    return args_[++i_];
  }
  // The value that follows `flag`, as parse_number reads it.
  std::uint64_t number(const char* flag) { return parse_number(value(flag), flag); }

 private:
  std::vector<std::string> args_;
  std::size_t i_ = 0;
};

}  // namespace uroce::app
