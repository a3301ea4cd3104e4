// uroce: a user-space RoCEv2 transport on DPDK.
#pragma once

namespace uroce {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace uroce
