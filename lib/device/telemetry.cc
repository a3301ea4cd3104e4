#include "device/telemetry.h"

#include <arpa/inet.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <rte_telemetry.h>

#include "transport/qp_state.h"
#include "uroce/stats.h"
#include "uroce/verbs.h"
#include "verbs/internal.h"

namespace uroce::device {
namespace {

struct Exposed {
  Context* ctx;
  std::string name;
};

// The exposed devices, for registration and the handlers (which run on
// DPDK's telemetry thread). A handler holds the mutex from looking its
// device up until it has answered, so telemetry_hide() returns only when no
// handler uses the context any more. Lock order: the mutex, then the
// context's control call; nothing takes it inside a control call.
//
// On the heap and never freed: DPDK's telemetry thread outlives the
// process's static destructors. A stock program leaves its device to the
// exit (lib/ibverbs), and a client polling /uroce/port during that exit
// walked a vector already destroyed (a SIGSEGV after the program's last
// line, about one exit in ten, in the qemu NIC checks that poll every
// 0.1 s). At exit the list is emptied under the mutex (close_at_exit),
// after any handler under way has answered; later requests get -EINVAL.
struct Registry {
  std::mutex mutex;
  std::vector<Exposed> devices;
  bool registered = false;
  bool closed = false;  // the process is exiting
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// A forked child inherits this hook and the mutex as it was at the fork:
// held, if a handler of the parent's ran then, by a thread the child does
// not have (and with no telemetry thread of its own, nothing can read the
// list in it). A live handler answers within a control call, so after a
// second of trying the list is left as it is rather than the exit hanging.
void close_at_exit() {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex, std::defer_lock);
  for (int i = 0; i < 1000 && !lock.try_lock(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!lock.owns_lock()) return;
  r.closed = true;
  r.devices.clear();
}

Context* device(const char* params, const char** rest) {
  if (params == nullptr || *params == '\0') return nullptr;
  char* end = nullptr;
  const unsigned long i = std::strtoul(params, &end, 10);
  const std::vector<Exposed>& devices = registry().devices;
  if (end == params || i >= devices.size()) return nullptr;
  if (rest != nullptr) *rest = *end == ',' ? end + 1 : end;
  return devices[i].ctx;
}

// Each handler copies what it reports through the stats registry
// (uroce/stats.h), whose calls each take one read-only control call: the
// engines' QP lists, QPN index and QP objects belong to the workers. The
// answer is built after, with the engines running again.

int list_devices(const char*, const char*, rte_tel_data* d) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  rte_tel_data_start_dict(d);
  for (std::size_t i = 0; i < r.devices.size(); ++i) {
    rte_tel_data_add_dict_string(d, std::to_string(i).c_str(), r.devices[i].name.c_str());
  }
  return 0;
}

// The rows of `scope`, summed over the device's engines (one per port
// queue), after `count_key`: how many were summed.
int scope_counters(const char* params, rte_tel_data* d, StatScope scope, const char* count_key) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  Context* ctx = device(params, nullptr);
  if (ctx == nullptr) return -EINVAL;
  const std::vector<Stat> stats = ctx->stats();
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, count_key, internal::engine_count(*ctx));
  for (const Stat& s : stats) {
    if (s.scope == scope) rte_tel_data_add_dict_u64(d, s.name, s.value);
  }
  return 0;
}

int engine_counters(const char*, const char* params, rte_tel_data* d) {
  return scope_counters(params, d, StatScope::kEngine, "engines");
}

int port_counters(const char*, const char* params, rte_tel_data* d) {
  return scope_counters(params, d, StatScope::kPort, "queues");
}

int list_qps(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  Context* ctx = device(params, nullptr);
  if (ctx == nullptr) return -EINVAL;
  const std::vector<std::uint32_t> qpns = ctx->qp_nums();
  rte_tel_data_start_array(d, RTE_TEL_INT_VAL);
  for (const std::uint32_t qpn : qpns) rte_tel_data_add_array_int(d, static_cast<int>(qpn));
  return 0;
}

const char* qp_type_name(ibv_qp_type t) {
  switch (t) {
    case IBV_QPT_RC:
      return "rc";
    case IBV_QPT_UC:
      return "uc";
    case IBV_QPT_UD:
      return "ud";
    case IBV_QPT_XRC_SEND:
      return "xrc_send";
    case IBV_QPT_XRC_RECV:
      return "xrc_recv";
    default:
      return "other";
  }
}

// "::ffff:10.0.0.2" or an IPv6 address; "" for a zero GID (UD, before RTR).
std::string gid_text(const ibv_gid& gid) {
  static constexpr std::uint8_t kZero[16] = {};
  if (std::memcmp(gid.raw, kZero, sizeof kZero) == 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

std::uint64_t dcqcn_rate_mbps(const QpStats& qp) {
  return static_cast<std::uint64_t>(qp.congestion.rate_bps / 1e6);
}

int qp_counters(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  const char* rest = nullptr;
  Context* ctx = device(params, &rest);
  if (ctx == nullptr || rest == nullptr || *rest == '\0') return -EINVAL;
  const auto qpn = static_cast<std::uint32_t>(std::strtoul(rest, nullptr, 0));
  QpStats qp;
  if (!ctx->qp_stats(qpn, qp)) return -EINVAL;
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "engine", qp.engine);
  rte_tel_data_add_dict_string(d, "state", transport::qp_state_name(qp.state));
  rte_tel_data_add_dict_string(d, "type", qp_type_name(qp.qp_type));
  rte_tel_data_add_dict_u64(d, "dest_qp_num", qp.dest_qp_num);
  rte_tel_data_add_dict_string(d, "dest_gid", gid_text(qp.dest_gid).c_str());
  rte_tel_data_add_dict_u64(d, "send_outstanding", qp.send_outstanding);
  rte_tel_data_add_dict_u64(d, "recv_outstanding", qp.recv_outstanding);
  for (const Stat& s : qp.counters) rte_tel_data_add_dict_u64(d, s.name, s.value);
  // DCQCN (reaction point): rates in Mb/s, alpha in millionths (22.11's
  // telemetry has no floating-point values); 0 until the QP has started.
  const QueuePair::CongestionState& cg = qp.congestion;
  rte_tel_data_add_dict_u64(d, "dcqcn_active", cg.enabled ? 1 : 0);
  rte_tel_data_add_dict_u64(d, "dcqcn_rate_mbps", dcqcn_rate_mbps(qp));
  rte_tel_data_add_dict_u64(d, "dcqcn_target_mbps", static_cast<std::uint64_t>(cg.target_bps / 1e6));
  rte_tel_data_add_dict_u64(d, "dcqcn_alpha_ppm", static_cast<std::uint64_t>(cg.alpha * 1e6));
  return 0;
}

// A page row: these columns, then every QP counter in registry order.
constexpr const char* kPageHead[] = {"qpn",           "engine",           "state",          "dest_qp_num",
                                     "send_outstanding", "recv_outstanding", "dcqcn_rate_mbps"};

void page_row(const QpStats& qp, std::vector<std::uint64_t>& row) {
  row = {qp.qp_num,           qp.engine,           static_cast<std::uint64_t>(qp.state), qp.dest_qp_num,
         qp.send_outstanding, qp.recv_outstanding, dcqcn_rate_mbps(qp)};
  for (const Stat& s : qp.counters) row.push_back(s.value);
}

int qp_page_columns(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
  for (const char* c : kPageHead) rte_tel_data_add_array_string(d, c);
  for (const Stat& s : qp_stat_rows()) rte_tel_data_add_array_string(d, s.name);
  return 0;
}

// Every row that is a gauge (a value now, not a count: cc_cwnd), of any
// scope: a reader takes no rate of these.
int gauge_rows(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
  for (const Stat& s : qp_stat_rows()) {
    if (s.kind == StatKind::kGauge) rte_tel_data_add_array_string(d, s.name);
  }
  return 0;
}

// The answer's JSON length if `row` is added under `key`: DPDK 22.11 drops
// what does not fit its 16 KiB answer without a word, so a page stops first.
std::size_t row_json_length(const std::string& key, const std::vector<std::uint64_t>& row) {
  std::size_t n = key.size() + 6;  // "key":[],
  for (std::uint64_t v : row) n += std::to_string(v).size() + 1;
  return n;
}

int qp_page(const char*, const char* params, rte_tel_data* d) {
  // What one answer may hold, less room for the command's own wrapping.
  static constexpr std::size_t kAnswerBudget = 14 * 1024;
  static constexpr std::size_t kFetch = 48;  // QPs copied per control call
  std::lock_guard<std::mutex> lock(registry().mutex);
  const char* rest = nullptr;
  Context* ctx = device(params, &rest);
  if (ctx == nullptr) return -EINVAL;
  const auto from = rest != nullptr && *rest != '\0' ? static_cast<std::uint32_t>(std::strtoul(rest, nullptr, 0)) : 0u;
  const std::vector<QpStats> qps = ctx->qp_stats_page(from, kFetch);
  rte_tel_data_start_dict(d);
  std::size_t used = 32;
  std::uint32_t next = 0;
  std::vector<std::uint64_t> row;
  std::size_t added = 0;
  for (const QpStats& qp : qps) {
    const std::string key = "qp_" + std::to_string(qp.qp_num);
    page_row(qp, row);
    const std::size_t len = row_json_length(key, row);
    // Room for this row, and for the "next" entry after it; a dict holds
    // RTE_TEL_MAX_DICT_ENTRIES.
    if (used + len > kAnswerBudget || added + 2 > RTE_TEL_MAX_DICT_ENTRIES) {
      next = qp.qp_num;
      break;
    }
    rte_tel_data* c = rte_tel_data_alloc();
    if (c == nullptr) return -ENOMEM;
    rte_tel_data_start_array(c, RTE_TEL_U64_VAL);
    for (std::uint64_t v : row) rte_tel_data_add_array_u64(c, v);
    rte_tel_data_add_dict_container(d, key.c_str(), c, 0);
    used += len;
    ++added;
  }
  // Every QP fetched fitted: the next page starts past the last of them,
  // unless there were no more.
  if (next == 0 && qps.size() == kFetch) next = qps.back().qp_num + 1;
  rte_tel_data_add_dict_u64(d, "next", next);
  return 0;
}

}  // namespace

void telemetry_expose(Context* ctx, const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.closed) return;
  if (!r.registered) {
    rte_telemetry_register_cmd("/uroce/devices", list_devices, "uroce devices exposed to telemetry, by index");
    rte_telemetry_register_cmd("/uroce/engine", engine_counters, "A device's engine counters. Parameters: device index");
    rte_telemetry_register_cmd("/uroce/port", port_counters, "A device's port counters. Parameters: device index");
    rte_telemetry_register_cmd("/uroce/qps", list_qps, "A device's QP numbers. Parameters: device index");
    rte_telemetry_register_cmd("/uroce/qp", qp_counters, "One QP's counters. Parameters: device index, QPN");
    rte_telemetry_register_cmd("/uroce/qp_columns", qp_page_columns, "The columns of a /uroce/qp_page row");
    rte_telemetry_register_cmd("/uroce/gauges", gauge_rows, "The rows that are values now, not counts: no rate");
    // Help texts: at most RTE_TEL_MAX_STRING_LEN (128) bytes, or the command is refused.
    rte_telemetry_register_cmd("/uroce/qp_page", qp_page,
                               "QPs from QPN FROM, a row each; next: the next FROM, 0 at the end. Parameters: device, FROM");
    // After the first device is made: runs before the destructors of the
    // statics made before now, the stack's among them.
    std::atexit(close_at_exit);
    r.registered = true;
  }
  r.devices.push_back({ctx, name});
}

void telemetry_hide(Context* ctx) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::erase_if(r.devices, [ctx](const Exposed& e) { return e.ctx == ctx; });
}

void telemetry_visit(const std::function<void(std::size_t index, const std::string& name, Context& ctx)>& visit) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (std::size_t i = 0; i < r.devices.size(); ++i) visit(i, r.devices[i].name, *r.devices[i].ctx);
}

}  // namespace uroce::device
