// The path MTU option of the tools (-m BYTES) as the verbs enum.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace uroce::app {

// Whether `bytes` is an IBTA path MTU: 256, 512, 1024, 2048 or 4096.
inline bool is_path_mtu(std::uint32_t bytes) {
  return bytes == 256 || bytes == 512 || bytes == 1024 || bytes == 2048 || bytes == 4096;
}

// The enum of a path MTU of `bytes`; anything but 256..2048 is 4096 (the
// tools check the value with is_path_mtu when they parse it).
inline ibv_mtu mtu_enum(std::uint32_t bytes) {
  return bytes == 256    ? IBV_MTU_256
         : bytes == 512  ? IBV_MTU_512
         : bytes == 1024 ? IBV_MTU_1024
         : bytes == 2048 ? IBV_MTU_2048
                         : IBV_MTU_4096;
}

}  // namespace uroce::app
