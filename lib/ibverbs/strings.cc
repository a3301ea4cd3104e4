// The *_str helpers: a name for each enum value, "unknown" past the end.
#include "ibverbs/internal.h"
#include "uroce/verbs.h"

namespace {

template <std::size_t N>
const char* name_of(const char* const (&names)[N], int value) {
  return value >= 0 && static_cast<std::size_t>(value) < N && names[value] != nullptr ? names[value] : "unknown";
}

}  // namespace

extern "C" {

const char* ibv_wc_status_str(ibv_wc_status status) { return uroce::wc_status_str(status); }

const char* ibv_port_state_str(ibv_port_state state) {
  static const char* const kNames[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE",
                                       "PORT_ACTIVE_DEFER"};
  return name_of(kNames, state);
}

const char* ibv_node_type_str(ibv_node_type type) {
  static const char* const kNames[] = {"InfiniBand channel adapter", "InfiniBand switch", "InfiniBand router",
                                       "iWARP NIC", "usNIC", "usNIC UDP", "unspecified"};
  if (type == IBV_NODE_UNKNOWN) return "unknown";
  return name_of(kNames, static_cast<int>(type) - IBV_NODE_CA);
}

const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error",                          // IBV_EVENT_CQ_ERR
      "QP fatal error",                    // IBV_EVENT_QP_FATAL
      "QP invalid request error",          // IBV_EVENT_QP_REQ_ERR
      "QP access violation error",         // IBV_EVENT_QP_ACCESS_ERR
      "communication established",         // IBV_EVENT_COMM_EST
      "send queue drained",                // IBV_EVENT_SQ_DRAINED
      "path migrated",                     // IBV_EVENT_PATH_MIG
      "path migration request error",      // IBV_EVENT_PATH_MIG_ERR
      "device fatal error",                // IBV_EVENT_DEVICE_FATAL
      "port active",                       // IBV_EVENT_PORT_ACTIVE
      "port error",                        // IBV_EVENT_PORT_ERR
      "LID changed",                       // IBV_EVENT_LID_CHANGE
      "P_Key table changed",               // IBV_EVENT_PKEY_CHANGE
      "SM changed",                        // IBV_EVENT_SM_CHANGE
      "SRQ error",                         // IBV_EVENT_SRQ_ERR
      "SRQ limit reached",                 // IBV_EVENT_SRQ_LIMIT_REACHED
      "QP last WQE reached",               // IBV_EVENT_QP_LAST_WQE_REACHED
      "client reregistration request",     // IBV_EVENT_CLIENT_REREGISTER
      "GID table changed",                 // IBV_EVENT_GID_CHANGE
      "WQ fatal error",                    // IBV_EVENT_WQ_FATAL
  };
  static_assert(sizeof kNames / sizeof kNames[0] == IBV_EVENT_WQ_FATAL + 1);
  return name_of(kNames, event);
}

}  // extern "C"

// --- static rates (verbs.h enum ibv_rate): as multiples of 2.5 Gb/s, and
// in Mb/s (the data rates after line coding, as rdma-core reports them) ----

namespace {

struct Rate {
  ibv_rate rate;
  int mult;   // of 2.5 Gb/s; -1 when not a multiple
  int mbps;
};
constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},       {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},     {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},    {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, -1, 14062},    {IBV_RATE_56_GBPS, -1, 56250},    {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},  {IBV_RATE_25_GBPS, -1, 25781},    {IBV_RATE_100_GBPS, -1, 103125},
    {IBV_RATE_200_GBPS, -1, 206250},  {IBV_RATE_300_GBPS, -1, 309375},  {IBV_RATE_28_GBPS, -1, 28125},
    {IBV_RATE_50_GBPS, -1, 53125},    {IBV_RATE_400_GBPS, -1, 425000},  {IBV_RATE_600_GBPS, -1, 637500},
};

}  // namespace

extern "C" {

int ibv_rate_to_mult(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate) return r.mult;
  }
  return -1;
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (const Rate& r : kRates) {
    if (r.mult == mult) return r.rate;
  }
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const Rate& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

}  // extern "C"
