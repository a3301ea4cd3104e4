#include "dpdk/telemetry.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <rte_telemetry.h>

#include "engine/engine.h"
#include "transport/counters.h"
#include "transport/qp_state.h"
#include "uroce/verbs.h"

namespace uroce::dpdk {
namespace {

struct Exposed {
  Context* ctx;
  std::string name;
};

// Control path only: registration and telemetry requests.
std::mutex g_mutex;
std::vector<Exposed> g_devices;
bool g_registered = false;

Context* device(const char* params, const char** rest) {
  if (params == nullptr || *params == '\0') return nullptr;
  char* end = nullptr;
  const unsigned long i = std::strtoul(params, &end, 10);
  if (end == params || i >= g_devices.size()) return nullptr;
  if (rest != nullptr) *rest = *end == ',' ? end + 1 : end;
  return g_devices[i].ctx;
}

int list_devices(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  rte_tel_data_start_dict(d);
  for (std::size_t i = 0; i < g_devices.size(); ++i) {
    rte_tel_data_add_dict_string(d, std::to_string(i).c_str(), g_devices[i].name.c_str());
  }
  return 0;
}

int engine_counters(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Context* ctx = device(params, nullptr);
  if (ctx == nullptr) return -EINVAL;
  // Summed over the device's engines (one per port queue).
  const std::size_t engines = ctx->engine_count();
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "engines", engines);
  for (int i = 0; i < static_cast<int>(engine::EngineCounter::kCount); ++i) {
    const auto c = static_cast<engine::EngineCounter>(i);
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < engines; ++k) v += ctx->engine(k).counter(c);
    rte_tel_data_add_dict_u64(d, engine::engine_counter_name(c), v);
  }
  for (int i = 0; i < wire::kParseStatusCount; ++i) {
    const auto s = static_cast<wire::ParseStatus>(i);
    if (s == wire::ParseStatus::kOk || wire::is_not_roce(s)) continue;
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < engines; ++k) v += ctx->engine(k).parse_drops(s);
    rte_tel_data_add_dict_u64(d, ("drop_" + std::string(wire::parse_status_name(s))).c_str(), v);
  }
  return 0;
}

int list_qps(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Context* ctx = device(params, nullptr);
  if (ctx == nullptr) return -EINVAL;
  rte_tel_data_start_array(d, RTE_TEL_INT_VAL);
  for (std::size_t k = 0; k < ctx->engine_count(); ++k) {
    for (const transport::Qp* qp : ctx->engine(k).qps()) rte_tel_data_add_array_int(d, static_cast<int>(qp->qpn));
  }
  return 0;
}

int qp_counters(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const char* rest = nullptr;
  Context* ctx = device(params, &rest);
  if (ctx == nullptr || rest == nullptr || *rest == '\0') return -EINVAL;
  const auto qpn = static_cast<std::uint32_t>(std::strtoul(rest, nullptr, 0));
  const transport::Qp* qp = nullptr;
  std::size_t engine = 0;
  for (; qp == nullptr && engine < ctx->engine_count(); ++engine) qp = ctx->engine(engine).find_qp(qpn);
  if (qp == nullptr) return -EINVAL;
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "engine", engine - 1);
  rte_tel_data_add_dict_string(d, "state", transport::qp_state_name(qp->state));
  rte_tel_data_add_dict_u64(d, "dest_qp_num", qp->attr.dest_qp_num);
  for (std::size_t i = 0; i < transport::kQpCounterCount; ++i) {
    const auto c = static_cast<transport::QpCounter>(i);
    rte_tel_data_add_dict_u64(d, transport::qp_counter_name(c), qp->counters.get(c));
  }
  // DCQCN (reaction point): rates in Mb/s, alpha in millionths (22.11's
  // telemetry has no floating-point values).
  const transport::Qp::Congestion& cg = qp->congestion;
  rte_tel_data_add_dict_u64(d, "dcqcn_active", cg.started ? 1 : 0);
  rte_tel_data_add_dict_u64(d, "dcqcn_rate_mbps", cg.started ? static_cast<std::uint64_t>(cg.rate.rate_bps() / 1e6) : 0);
  rte_tel_data_add_dict_u64(d, "dcqcn_target_mbps", cg.started ? static_cast<std::uint64_t>(cg.rate.target_bps() / 1e6) : 0);
  rte_tel_data_add_dict_u64(d, "dcqcn_alpha_ppm", cg.started ? static_cast<std::uint64_t>(cg.rate.alpha() * 1e6) : 0);
  return 0;
}

}  // namespace

void telemetry_expose(Context* ctx, const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_registered) {
    rte_telemetry_register_cmd("/uroce/devices", list_devices, "uroce devices exposed to telemetry, by index");
    rte_telemetry_register_cmd("/uroce/engine", engine_counters, "A device's engine counters. Parameters: device index");
    rte_telemetry_register_cmd("/uroce/qps", list_qps, "A device's QP numbers. Parameters: device index");
    rte_telemetry_register_cmd("/uroce/qp", qp_counters, "One QP's counters. Parameters: device index, QPN");
    g_registered = true;
  }
  g_devices.push_back({ctx, name});
}

void telemetry_hide(Context* ctx) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::erase_if(g_devices, [ctx](const Exposed& e) { return e.ctx == ctx; });
}

}  // namespace uroce::dpdk
