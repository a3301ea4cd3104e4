#include "perf/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace uroce::perf {
namespace {

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(p / 100.0 * static_cast<double>(sorted.size())))];
}

}  // namespace

std::string test_text(const Options& o) {
  char line[160];
  std::snprintf(line, sizeof line, "%u B messages, %llu iterations, MTU %u, %s", o.size,
                static_cast<unsigned long long>(o.iters), o.mtu, o.lat ? "latency" : "bandwidth");
  return line;
}

Rates rates(std::uint64_t messages, std::uint32_t size, double seconds) {
  Rates r;
  r.gbps = static_cast<double>(messages * size) * 8 / seconds / 1e9;
  r.mpps = static_cast<double>(messages) / seconds / 1e6;
  return r;
}

LatencySummary summarize_latency(std::vector<double> samples_us) {
  std::sort(samples_us.begin(), samples_us.end());
  LatencySummary l;
  l.min = percentile(samples_us, 0);
  l.p50 = percentile(samples_us, 50);
  l.p99 = percentile(samples_us, 99);
  l.p999 = percentile(samples_us, 99.9);
  l.max = percentile(samples_us, 100);
  return l;
}

void print_latency(const char* clock, bool every_message, const LatencySummary& l) {
  std::printf("latency [us, %s%s]: min %.2f p50 %.2f p99 %.2f p99.9 %.2f max %.2f\n", clock,
              every_message ? "" : ", every 16th message, queueing included", l.min, l.p50, l.p99, l.p999, l.max);
}

std::ostringstream& JsonLine::key(const char* key) {
  out_ << (first_ ? "{\"" : ",\"") << key << "\":";
  first_ = false;
  return out_;
}

JsonLine& JsonLine::text(const char* key, const std::string& value) {
  this->key(key) << '"' << value << '"';
  return *this;
}

JsonLine& JsonLine::boolean(const char* key, bool value) {
  this->key(key) << (value ? "true" : "false");
  return *this;
}

JsonLine& JsonLine::latency(const LatencySummary& l) {
  key("lat_us") << "{\"min\":" << l.min << ",\"p50\":" << l.p50 << ",\"p99\":" << l.p99 << ",\"p999\":" << l.p999
                << ",\"max\":" << l.max << "}";
  return *this;
}

bool JsonLine::write(const std::string& path) const {
  std::ofstream file(path);
  if (!file) return false;
  file << out_.str() << "}\n";
  return true;
}

JsonLine json_head(const Options& o) {
  JsonLine j;
  j.text("tool", "uroce-perf").text("mode", o.fabric).text("op", op_name(o.op)).text("test", o.lat ? "lat" : "bw");
  j.number("size", o.size);
  return j;
}

}  // namespace uroce::perf
