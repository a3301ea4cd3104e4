// The out-of-band exchange the RDMA tools run over an ordinary TCP socket
// (rdma-core's pingpong and perftest style), with the port kept polled while
// a side waits: a peer may ARP for our address meanwhile.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace uroce::oob {

// Connects to host:port; -1 and `error` on failure.
int connect_to(const std::string& host, std::uint16_t port, std::string& error);
// Listens on port and accepts one connection, calling `idle` while waiting.
int accept_one(std::uint16_t port, std::string& error, const std::function<void()>& idle);
// Reads exactly n bytes, calling `idle` while none are there. False on EOF or error.
bool read_full(int fd, char* buf, std::size_t n, const std::function<void()>& idle);
bool write_full(int fd, const char* buf, std::size_t n);

// Ends an exchange once this side has stopped polling its port: says "bye",
// waits without polling for the peer's (or for its socket to close: a stock
// peer closes after its exchange; no SIGPIPE either) and closes `fd`. True
// if the peer said it. memif in DPDK 22.11 unmaps a link's shared memory on
// EAL's interrupt thread when the peer closes its port, while this side may
// be inside rx_burst on it (a SIGSEGV): neither side closes its port before
// both have parted.
bool part(int fd);

// A GID as the exchanges write it (rc_pingpong's and perftest's): 32 hex
// digits, no separators.
std::string gid_to_hex(const ibv_gid& gid);
// The GID whose hex digits start at `hex`; false if one of its 16 bytes is
// missing.
bool gid_from_hex(const char* hex, ibv_gid& gid);

}  // namespace uroce::oob
