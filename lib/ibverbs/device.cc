// Devices and contexts: ibv_get_device_list starts EAL and opens the one
// uroce device from the environment (once per process), ibv_open_device
// hands out a verbs_context laid out as the stock inline verbs expect
// (research note verbs-abi.md §2).
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "compose/device.h"
#include "dpdk/eal.h"
#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

// What one process has: EAL runs at most once, and the device lives until
// the process exits. It is never freed: a program may call ibv_get_device_list
// again after ibv_free_device_list, and tearing DPDK down from a static
// destructor races EAL's own threads.
struct Process {
  std::once_flag started;
  Device* device = nullptr;  // nullptr: not configured, or it failed (said once on stderr)
};

Process& process() {
  static Process* p = new Process;
  return *p;
}

const char* getenv_fn(const char* name) { return std::getenv(name); }

// A byte whose address no vendor library knows (Device::provider_ops).
const char kProviderOps = 0;

__be64 eui64_of(const std::uint8_t mac[6]) {
  std::uint8_t b[8] = {static_cast<std::uint8_t>(mac[0] ^ 2), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
  __be64 g;
  std::memcpy(&g, b, sizeof g);  // already in network order
  return g;
}

void start() {
  Config config;
  std::string message;
  switch (read_config(getenv_fn, config, message)) {
    case ConfigStatus::kOk:
      break;
    case ConfigStatus::kUnset:
    case ConfigStatus::kInvalid:
      std::fprintf(stderr, "%s\n", message.c_str());
      return;
  }
  if (std::string e = dpdk::eal_init(config.eal); !e.empty()) {
    std::fprintf(stderr, "uroce libibverbs: EAL did not start (UROCE_EAL='%s'): %s\n", std::getenv("UROCE_EAL"),
                 e.c_str());
    return;
  }
  std::string error;
  auto port = dpdk::Device::open(config.port_id, config.ip, kDeviceName, error);
  if (!port) {
    std::fprintf(stderr, "uroce libibverbs: no device on DPDK port %u (UROCE_PORT_ID): %s\n", config.port_id,
                 error.c_str());
    return;
  }
  auto* d = new Device{};
  d->ibv.node_type = IBV_NODE_CA;
  d->ibv.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d->ibv.name, sizeof d->ibv.name, "%s", kDeviceName);
  std::snprintf(d->ibv.dev_name, sizeof d->ibv.dev_name, "u%s", kDeviceName);
  // No sysfs behind them (ibv_read_sysfs_file says ENOENT); they name what
  // rdma-core's would.
  std::snprintf(d->ibv.dev_path, sizeof d->ibv.dev_path, "/sys/class/infiniband_verbs/u%s", kDeviceName);
  std::snprintf(d->ibv.ibdev_path, sizeof d->ibv.ibdev_path, "/sys/class/infiniband/%s", kDeviceName);
  d->provider_ops = &kProviderOps;
  const uroce::PortConfig pc = dpdk::device_config(port->queues, port->clock);
  d->guid = eui64_of(pc.mac);
  d->active_mtu = pc.active_mtu;
  d->port = port.release();
  process().device = d;
}

Device* started_device() {
  Process& p = process();
  std::call_once(p.started, start);
  return p.device;
}

}  // namespace

Device* device_of(ibv_device* dev) {
  Device* d = process().device;
  if (dev == nullptr || d == nullptr || dev != &d->ibv) {
    errno = ENODEV;
    return nullptr;
  }
  return d;
}

Device* device_of(ibv_context* ctx) { return ctx == nullptr ? device_of(static_cast<ibv_device*>(nullptr)) : device_of(ctx->device); }

}  // namespace uroce::ibverbs

using uroce::ibverbs::Device;
using uroce::ibverbs::device_of;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  Device* d = uroce::ibverbs::started_device();
  auto** list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = d != nullptr ? &d->ibv : nullptr;
  if (num_devices != nullptr) *num_devices = d != nullptr ? 1 : 0;
  return list;
}

void ibv_free_device_list(ibv_device** list) { std::free(list); }

const char* ibv_get_device_name(ibv_device* device) {
  return device_of(device) != nullptr ? device->name : nullptr;
}

__be64 ibv_get_device_guid(ibv_device* device) {
  const Device* d = device_of(device);
  return d != nullptr ? d->guid : 0;
}

int ibv_get_device_index(ibv_device* device) { return device_of(device) != nullptr ? 0 : -1; }

ibv_context* ibv_open_device(ibv_device* device) {
  if (device_of(device) == nullptr) return nullptr;
  auto* v = new (std::nothrow) verbs_context{};
  if (v == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  ibv_context& c = v->context;
  c.device = device;
  uroce::ibverbs::fill_unsupported_ops(c.ops);
  c.ops._compat_query_device = ibv_query_device;
  c.ops._compat_query_port = (ibv_query_port);
  // Real descriptors: programs poll async_fd (UCX sets O_NONBLOCK and adds
  // it to epoll) and rdma-core closes cmd_fd. No event is ever written yet.
  c.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  c.async_fd = eventfd(0, EFD_CLOEXEC);
  if (c.cmd_fd < 0 || c.async_fd < 0) {
    const int e = errno;
    if (c.cmd_fd >= 0) close(c.cmd_fd);
    if (c.async_fd >= 0) close(c.async_fd);
    delete v;
    errno = e;
    return nullptr;
  }
  c.num_comp_vectors = 1;
  pthread_mutex_init(&c.mutex, nullptr);
  // verbs.h's verbs_get_ctx(): an extended context is marked by
  // abi_compat == UINTPTR_MAX, and sz bounds which ops the binary may read.
  c.abi_compat = reinterpret_cast<void*>(UINTPTR_MAX);
  v->sz = sizeof(verbs_context);
  v->query_port = uroce::ibverbs::query_port_op;
  // Every other verbs_context op stays NULL: the inlines then fall back to
  // the exported call (query_device_ex -> ibv_query_device, create_qp_ex ->
  // ibv_create_qp) or return EOPNOTSUPP themselves.
  return &c;
}

int ibv_close_device(ibv_context* context) {
  if (device_of(context) == nullptr) return -1;
  auto* v = reinterpret_cast<verbs_context*>(reinterpret_cast<char*>(context) - offsetof(verbs_context, context));
  close(context->cmd_fd);
  close(context->async_fd);
  pthread_mutex_destroy(&context->mutex);
  delete v;
  return 0;
}

}  // extern "C"
