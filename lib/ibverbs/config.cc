#include <charconv>
#include <string>
#include <sstream>
#include <string_view>

#include "uroce/metrics.h"
#include "cc/choice.h"
#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

bool parse_ipv4(std::string_view s, std::array<std::uint8_t, 4>& ip) {
  if (const auto slash = s.find('/'); slash != std::string_view::npos) {
    unsigned len = 0;
    const auto tail = s.substr(slash + 1);
    const auto r = std::from_chars(tail.data(), tail.data() + tail.size(), len);
    if (r.ec != std::errc() || r.ptr != tail.data() + tail.size() || len > 32) return false;
    s = s.substr(0, slash);  // the prefix length is accepted as uroce-perf takes it; not used yet
  }
  for (std::size_t i = 0; i < 4; ++i) {
    unsigned v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || v > 255 || r.ptr == s.data()) return false;
    ip[i] = static_cast<std::uint8_t>(v);
    s.remove_prefix(static_cast<std::size_t>(r.ptr - s.data()));
    if (i < 3) {
      if (s.empty() || s.front() != '.') return false;
      s.remove_prefix(1);
    }
  }
  return s.empty();
}

}  // namespace

ConfigStatus read_config(const char* (*env)(const char*), Config& config, std::string& message) {
  const char* eal = env("UROCE_EAL");
  const char* ip = env("UROCE_IP");
  const char* port = env("UROCE_PORT_ID");
  if (eal == nullptr && ip == nullptr) {
    message = "uroce libibverbs: no device configured; set UROCE_EAL (e.g. \"--no-huge --no-shconf --no-pci "
              "--vdev=net_ring0\") and UROCE_IP (e.g. 10.0.0.1/24), and UROCE_PORT_ID if the port is not 0";
    return ConfigStatus::kUnset;
  }
  if (eal == nullptr) {
    message = "uroce libibverbs: UROCE_IP is set but UROCE_EAL is not; set UROCE_EAL to the EAL arguments "
              "(e.g. \"--no-huge --no-shconf --no-pci --vdev=net_ring0\")";
    return ConfigStatus::kInvalid;
  }
  if (ip == nullptr || !parse_ipv4(ip, config.ip)) {
    message = std::string("uroce libibverbs: UROCE_IP must be an IPv4 address like 10.0.0.1/24, not '") +
              (ip != nullptr ? ip : "") + "'";
    return ConfigStatus::kInvalid;
  }
  if (port != nullptr) {
    const std::string_view p(port);
    unsigned v = 0;
    const auto r = std::from_chars(p.data(), p.data() + p.size(), v);
    if (p.empty() || r.ec != std::errc() || r.ptr != p.data() + p.size() || v > 65535) {
      message = std::string("uroce libibverbs: UROCE_PORT_ID must be a DPDK port number, not '") + port + "'";
      return ConfigStatus::kInvalid;
    }
    config.port_id = static_cast<std::uint16_t>(v);
  }
  if (const char* q = env("UROCE_QUEUES"); q != nullptr) {
    const std::string_view v(q);
    unsigned n = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || n < 1 || n > 64) {
      message = std::string("uroce libibverbs: UROCE_QUEUES must be a number of port queues from 1 to 64, not '") +
                q + "'";
      return ConfigStatus::kInvalid;
    }
    config.queues = static_cast<std::uint16_t>(n);
  }
  config.workers.assign(config.queues, -1);
  if (const char* w = env("UROCE_WORKERS"); w != nullptr && *w != '\0') {
    config.workers.clear();
    std::string_view v(w);
    while (!v.empty()) {
      int cpu = 0;
      const auto r = std::from_chars(v.data(), v.data() + v.size(), cpu);
      if (r.ec != std::errc() || cpu < 0 || (r.ptr != v.data() + v.size() && *r.ptr != ',')) {
        message = std::string("uroce libibverbs: UROCE_WORKERS must be a CPU list like 2,3, not '") + w + "'";
        return ConfigStatus::kInvalid;
      }
      config.workers.push_back(cpu);
      v.remove_prefix(static_cast<std::size_t>(r.ptr - v.data()));
      if (!v.empty()) v.remove_prefix(1);
    }
    if (config.workers.size() != config.queues) {
      message = "uroce libibverbs: UROCE_WORKERS names " + std::to_string(config.workers.size()) +
                " CPU(s) for " + std::to_string(config.queues) + " queue(s) (UROCE_QUEUES); give one per queue";
      return ConfigStatus::kInvalid;
    }
  }
  if (const char* d = env("UROCE_DCQCN"); d != nullptr) config.dcqcn_file = d;
  if (const char* d = env("UROCE_DELAY"); d != nullptr) config.delay_file = d;
  const char* cc = env("UROCE_CC");
  cc::Controller controller = cc::Controller::kOff;
  if (std::string e = cc::resolve_controller(cc != nullptr ? cc : "", !config.dcqcn_file.empty(),
                                             !config.delay_file.empty(), {"UROCE_CC", "UROCE_DCQCN", "UROCE_DELAY"},
                                             controller);
      !e.empty()) {
    message = "uroce libibverbs: " + e;
    return ConfigStatus::kInvalid;
  }
  config.cc = cc::controller_name(controller);
  if (const char* p = env("UROCE_PFC"); p != nullptr && std::string_view(p) != "off") {
    const std::string_view v(p);
    unsigned prio = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), prio);
    if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || prio > 7) {
      message = std::string("uroce libibverbs: UROCE_PFC must be the lossless 802.1p priority, 0 to 7, or off, not '") +
                p + "'";
      return ConfigStatus::kInvalid;
    }
    config.pfc_priority = static_cast<int>(prio);
  }
  if (const char* t = env("UROCE_MIN_ACK_TIMEOUT"); t != nullptr) {
    const std::string_view v(t);
    unsigned n = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || n > 31) {
      message = std::string("uroce libibverbs: UROCE_MIN_ACK_TIMEOUT must be a local ACK timeout exponent, 0 (no "
                            "floor) to 31 (4.096 us * 2^N), not '") + t + "'";
      return ConfigStatus::kInvalid;
    }
    config.min_ack_timeout = static_cast<std::uint8_t>(n);
  }
  if (const char* m = env("UROCE_METRICS"); m != nullptr && *m != '\0' && std::string_view(m) != "off") {
    if (std::string e = metrics::check_listen_address(m); !e.empty()) {
      message = "uroce libibverbs: UROCE_METRICS: " + e.substr(e.find(": ") + 2);
      return ConfigStatus::kInvalid;
    }
    config.metrics = m;
  }
  if (const char* m = env("UROCE_PROGRESS"); m != nullptr && *m != '\0') {
    const std::string_view v(m);
    if (v != "workers" && v != "caller") {
      message = std::string("uroce libibverbs: UROCE_PROGRESS must be workers (a thread polls the engines, the "
                            "default) or caller (the program's verbs calls do, one core for both), not '") + m + "'";
      return ConfigStatus::kInvalid;
    }
    config.caller_progress = v == "caller";
  }
  config.eal = {"uroce-ibverbs"};
  std::istringstream words(eal);
  for (std::string w; words >> w;) config.eal.push_back(w);
  return ConfigStatus::kOk;
}

}  // namespace uroce::ibverbs
