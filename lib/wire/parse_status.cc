#include "wire/parse_status.h"

namespace uroce::wire {
namespace {

constexpr const char* kNames[] = {
#define UROCE_X(name, short_name, description) short_name,
    UROCE_PARSE_STATUS_LIST(UROCE_X)
#undef UROCE_X
};
constexpr const char* kDescriptions[] = {
#define UROCE_X(name, short_name, description) description,
    UROCE_PARSE_STATUS_LIST(UROCE_X)
#undef UROCE_X
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == kParseStatusCount);

}  // namespace

const char* parse_status_name(ParseStatus s) {
  const int i = static_cast<int>(s);
  return i < kParseStatusCount ? kNames[i] : "invalid";
}

const char* parse_status_description(ParseStatus s) {
  const int i = static_cast<int>(s);
  return i < kParseStatusCount ? kDescriptions[i] : "invalid status";
}

}  // namespace uroce::wire
