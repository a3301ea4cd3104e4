#include "transport/counters.h"

namespace uroce::transport {
namespace {

constexpr const char* kNames[] = {
#define UROCE_X(name, description) #name,
    UROCE_QP_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};
constexpr const char* kDescriptions[] = {
#define UROCE_X(name, description) description,
    UROCE_QP_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};

}  // namespace

const char* qp_counter_name(QpCounter c) {
  return c < QpCounter::kCount ? kNames[static_cast<std::size_t>(c)] : "invalid";
}
const char* qp_counter_description(QpCounter c) {
  return c < QpCounter::kCount ? kDescriptions[static_cast<std::size_t>(c)] : "invalid";
}
QpCounter qp_counter_by_name(std::string_view name) {
  for (std::size_t i = 0; i < kQpCounterCount; ++i) {
    if (name == kNames[i]) return static_cast<QpCounter>(i);
  }
  return QpCounter::kCount;
}

}  // namespace uroce::transport
