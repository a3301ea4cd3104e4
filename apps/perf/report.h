// What every uroce-perf driver reports the same way: the test's line, the
// rates, the latency percentiles, and the JSON object (--json) they go in.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "perf/options.h"

namespace uroce::perf {

// "65536 B messages, 10000 iterations, MTU 4096, bandwidth": the test, as
// the first line of each driver's output names it.
std::string test_text(const Options& o);

struct Rates {
  double gbps = 0;  // payload, Gb/s
  double mpps = 0;  // messages, millions a second
};
Rates rates(std::uint64_t messages, std::uint32_t size, double seconds);

struct LatencySummary {
  double min = 0, p50 = 0, p99 = 0, p999 = 0, max = 0;  // us; all 0 without samples
};
LatencySummary summarize_latency(std::vector<double> samples_us);

// "latency [us, CLOCK, every 16th message, queueing included]: min ... max ..."
// (without the sampling note when every message was timed).
void print_latency(const char* clock, bool every_message, const LatencySummary& l);

// A one-line JSON object, fields in the order added.
class JsonLine {
 public:
  JsonLine& text(const char* key, const std::string& value);
  template <typename Number>
  JsonLine& number(const char* key, Number value) {
    this->key(key) << value;
    return *this;
  }
  JsonLine& boolean(const char* key, bool value);
  JsonLine& latency(const LatencySummary& l);  // "lat_us":{"min":...,"max":...}
  // Writes the object and a newline to `path`; false if it cannot be opened.
  bool write(const std::string& path) const;

 private:
  std::ostringstream& key(const char* key);

  std::ostringstream out_;
  bool first_ = true;
};

// The fields every driver's JSON starts with: tool, mode, op, test, size.
JsonLine json_head(const Options& o);

}  // namespace uroce::perf
