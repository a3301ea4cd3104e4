#include "dpdk/telemetry.h"

#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <rte_telemetry.h>

#include "engine/engine.h"
#include "transport/counters.h"
#include "transport/qp_state.h"
#include "uroce/verbs.h"
#include "verbs/verbs_impl.h"

namespace uroce::dpdk {
namespace {

struct Exposed {
  Context* ctx;
  std::string name;
};

// The exposed devices, for registration and the handlers (which run on
// DPDK's telemetry thread). A handler holds it from looking its device up
// until it has answered, so telemetry_hide() returns only when no handler
// uses the context any more. Lock order: g_mutex, then the context's
// control call; nothing takes g_mutex inside a control call.
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

// Runs `f` as a read-only control call: the engines' QP lists, QPN index and
// QP objects belong to the workers (or to the thread that calls progress())
// and change under create_qp/destroy_qp. `f` only copies; the answer is
// built after, with the engines running again.
template <typename F>
auto read_engines(Context& ctx, F&& f) {
  return ctx.impl().control(std::forward<F>(f), Context::Impl::Access::kReadsOnly);
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
  // Summed over the device's engines (one per port queue), taken together.
  struct Sums {
    std::size_t engines = 0;
    std::array<std::uint64_t, static_cast<std::size_t>(engine::EngineCounter::kCount)> counters{};
    std::array<std::uint64_t, wire::kParseStatusCount> drops{};
  };
  const Sums sums = read_engines(*ctx, [ctx] {
    Sums out;
    out.engines = ctx->engine_count();
    for (std::size_t k = 0; k < out.engines; ++k) {
      const engine::Engine& e = ctx->engine(k);
      for (std::size_t i = 0; i < out.counters.size(); ++i) {
        out.counters[i] += e.counter(static_cast<engine::EngineCounter>(i));
      }
      for (std::size_t i = 0; i < out.drops.size(); ++i) out.drops[i] += e.parse_drops(static_cast<wire::ParseStatus>(i));
    }
    return out;
  });
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "engines", sums.engines);
  for (std::size_t i = 0; i < sums.counters.size(); ++i) {
    rte_tel_data_add_dict_u64(d, engine::engine_counter_name(static_cast<engine::EngineCounter>(i)), sums.counters[i]);
  }
  for (std::size_t i = 0; i < sums.drops.size(); ++i) {
    const auto s = static_cast<wire::ParseStatus>(i);
    if (s == wire::ParseStatus::kOk || wire::is_not_roce(s)) continue;
    rte_tel_data_add_dict_u64(d, ("drop_" + std::string(wire::parse_status_name(s))).c_str(), sums.drops[i]);
  }
  return 0;
}

int list_qps(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Context* ctx = device(params, nullptr);
  if (ctx == nullptr) return -EINVAL;
  const std::vector<std::uint32_t> qpns = read_engines(*ctx, [ctx] {
    std::vector<std::uint32_t> out;
    for (std::size_t k = 0; k < ctx->engine_count(); ++k) {
      for (const transport::Qp* qp : ctx->engine(k).qps()) out.push_back(qp->qpn);
    }
    return out;
  });
  rte_tel_data_start_array(d, RTE_TEL_INT_VAL);
  for (const std::uint32_t qpn : qpns) rte_tel_data_add_array_int(d, static_cast<int>(qpn));
  return 0;
}

// One QP as qp_counters reports it.
struct QpSnapshot {
  bool found = false;
  std::size_t engine = 0;
  ibv_qp_state state = IBV_QPS_RESET;
  std::uint32_t dest_qp_num = 0;
  std::array<std::uint64_t, transport::kQpCounterCount> counters{};
  bool dcqcn_active = false;
  double rate_bps = 0;
  double target_bps = 0;
  double alpha = 0;
};

int qp_counters(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const char* rest = nullptr;
  Context* ctx = device(params, &rest);
  if (ctx == nullptr || rest == nullptr || *rest == '\0') return -EINVAL;
  const auto qpn = static_cast<std::uint32_t>(std::strtoul(rest, nullptr, 0));
  const QpSnapshot qp = read_engines(*ctx, [ctx, qpn] {
    QpSnapshot out;
    for (std::size_t k = 0; k < ctx->engine_count(); ++k) {
      const transport::Qp* q = ctx->engine(k).find_qp(qpn);
      if (q == nullptr) continue;
      out.found = true;
      out.engine = k;
      out.state = q->state;
      out.dest_qp_num = q->attr.dest_qp_num;
      for (std::size_t i = 0; i < out.counters.size(); ++i) {
        out.counters[i] = q->counters.get(static_cast<transport::QpCounter>(i));
      }
      const transport::Qp::Congestion& cg = q->congestion;
      out.dcqcn_active = cg.started;
      if (cg.started) {
        out.rate_bps = cg.rate.rate_bps();
        out.target_bps = cg.rate.target_bps();
        out.alpha = cg.rate.alpha();
      }
      break;
    }
    return out;
  });
  if (!qp.found) return -EINVAL;
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "engine", qp.engine);
  rte_tel_data_add_dict_string(d, "state", transport::qp_state_name(qp.state));
  rte_tel_data_add_dict_u64(d, "dest_qp_num", qp.dest_qp_num);
  for (std::size_t i = 0; i < qp.counters.size(); ++i) {
    rte_tel_data_add_dict_u64(d, transport::qp_counter_name(static_cast<transport::QpCounter>(i)), qp.counters[i]);
  }
  // DCQCN (reaction point): rates in Mb/s, alpha in millionths (22.11's
  // telemetry has no floating-point values); 0 until the QP has started.
  rte_tel_data_add_dict_u64(d, "dcqcn_active", qp.dcqcn_active ? 1 : 0);
  rte_tel_data_add_dict_u64(d, "dcqcn_rate_mbps", static_cast<std::uint64_t>(qp.rate_bps / 1e6));
  rte_tel_data_add_dict_u64(d, "dcqcn_target_mbps", static_cast<std::uint64_t>(qp.target_bps / 1e6));
  rte_tel_data_add_dict_u64(d, "dcqcn_alpha_ppm", static_cast<std::uint64_t>(qp.alpha * 1e6));
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
