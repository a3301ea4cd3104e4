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
