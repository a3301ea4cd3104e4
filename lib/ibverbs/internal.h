// What the files of lib/ibverbs share: the device and context objects that
// stock binaries see through rdma-core's <infiniband/verbs.h>, and the
// process-wide state (EAL, the one uroce device). Not installed.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace uroce::dpdk {
struct Device;
}  // namespace uroce::dpdk

namespace uroce::ibverbs {

// The device's name in ibv_get_device_list, ibv_devinfo and telemetry.
inline constexpr const char* kDeviceName = "uroce0";
// Port 1 only; its GID table: 0 fe80:: from the MAC, 1 ::ffff:a.b.c.d.
inline constexpr int kGidTableLen = 2;

// The shape of rdma-core's struct verbs_device (driver.h, not installed):
// ibv_device, then the provider's ops pointer at +664, which libmlx5's
// mlx5dv_is_supported() compares with its own table. Ours points to a
// private byte, so no vendor library takes the device for its own.
struct Device {
  ibv_device ibv;
  const void* provider_ops;
  dpdk::Device* port;        // the uroce device on its DPDK port (never freed: see device.cc)
  __be64 guid;               // EUI-64 of the MAC, network order
  ibv_mtu active_mtu;        // largest path MTU the port carries
};
static_assert(sizeof(ibv_device) == 664, "rdma-core v44 layout");
static_assert(offsetof(Device, provider_ops) == 664, "verbs_device::ops sits right after ibv_device");

// Our device behind an ibv_device or an ibv_context; nullptr (errno ENODEV)
// for one that is not ours.
Device* device_of(ibv_device* dev);
Device* device_of(ibv_context* ctx);

// The ibv_context.ops slots the stock inline verbs call without a NULL check
// (post_send, poll_cq, ...), each answering EOPNOTSUPP until it is
// implemented (ops.cc).
void fill_unsupported_ops(ibv_context_ops& ops);

// verbs_context.query_port: length-tolerant (the caller's struct size).
int query_port_op(ibv_context* context, std::uint8_t port_num, ibv_port_attr* attr, std::size_t attr_len);

// The configuration from the environment (config.cc).
struct Config {
  std::vector<std::string> eal;  // program name first, then UROCE_EAL split at blanks
  std::array<std::uint8_t, 4> ip{};
  std::uint16_t port_id = 0;
};
enum class ConfigStatus { kOk, kUnset, kInvalid };
// Reads UROCE_EAL, UROCE_IP (a.b.c.d or a.b.c.d/len) and UROCE_PORT_ID
// (default 0) through `env` (std::getenv). kUnset when UROCE_EAL and
// UROCE_IP are both unset; kInvalid with a one-line `message` when one is
// missing or malformed.
ConfigStatus read_config(const char* (*env)(const char*), Config& config, std::string& message);

}  // namespace uroce::ibverbs
