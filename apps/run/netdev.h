// uroce0's Linux network interface, shown to one program the way a kernel
// RDMA device shows its own: in sysfs, under /sys/class/infiniband/uroce0.
#pragma once

#include <string>

namespace uroce::run {

// Moves this process into a private mount namespace (nothing it mounts
// reaches the host or other processes) and there lays a read-only tmpfs over
// /sys/class that holds every class of the real one (bind mounts) plus
//   infiniband/DEVICE/device/net/IFNAME        -> /sys/class/net/IFNAME
//   infiniband/DEVICE/ports/1/gid_attrs/ndevs/{0,1}   IFNAME
//   infiniband/DEVICE/ports/1/gid_attrs/types/{0,1}   RoCE v2
// (the kernel devices of a real /sys/class/infiniband stay beside it). Call
// it before exec; the program and its children inherit the view.
// Returns "" or a message a user can act on: IFNAME is no interface of this
// network namespace, or the namespace could not be made (EPERM: it needs
// CAP_SYS_ADMIN, i.e. root).
std::string show_netdev(const std::string& device, const std::string& ifname);

}  // namespace uroce::run
