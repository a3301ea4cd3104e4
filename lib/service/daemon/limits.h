// What the service daemon's Server is told (apps/uroced/config.h reads
// conf/uroced.conf and the command line into it): its socket, its timeouts,
// and the budgets of its clients.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

namespace uroce::daemon {

// Budgets: per client, and per uid (what all the clients of one uid hold
// together, so that one user cannot take every client slot or the device's
// max_qp / max_mr through many connections). Every key but max_clients and
// max_memory_mb (daemon-wide) can
// be set for one uid: "uid.1000.uid_max_qps = 2048" (limits_for).
struct Limits {
  std::uint32_t qps = 256;         // QPs per client
  std::uint32_t cqs = 512;         // CQs per client
  std::uint32_t mrs = 4096;        // memory regions per client
  std::uint64_t pinned_mb = 4096;  // MiB of registered memory per client
  std::uint32_t clients = 64;      // clients at once (all uids)
  std::uint32_t pds = 256;         // PDs per client
  std::uint32_t uid_connections = 0;  // clients of one uid at once; 0: max_clients / 4, at least 4
  std::uint32_t uid_pds = 1024;    // PDs of one uid's clients together
  std::uint32_t uid_qps = 1024;
  std::uint32_t uid_cqs = 2048;
  std::uint32_t uid_mrs = 16384;
  std::uint32_t srqs = 256;        // shared receive queues per client
  std::uint32_t uid_srqs = 1024;
  // Address handles: the daemon's process has 32767 in all (ibv_query_device's max_ah).
  std::uint32_t ahs = 1024;        // per client
  std::uint32_t uid_ahs = 4096;
  // Memory the daemon holds for clients (README "Budgets"): CQs' and QPs'
  // rings and engine arrays per client; everything (region files, CQs, QPs)
  // per uid and for the whole daemon (0: half the machine's memory).
  std::uint64_t object_mb = 256;        // max_object_mb, per client
  std::uint64_t uid_memory_mb = 8192;   // uid_max_memory_mb
  std::uint64_t memory_mb = 0;          // max_memory_mb, the daemon's total
  // Mappings the daemon makes for clients (memory files, multi-piece region
  // views, rings); the daemon's total is kept under half of vm.max_map_count.
  std::uint32_t mappings = 8192;        // max_mappings, per client
  std::uint32_t uid_mappings = 16384;   // uid_max_mappings
  // Memory files made known to the port (DPDK external memory, DMA mapping;
  // 128 for the whole process): per client and per uid. Past them a file's
  // regions work, their frames copied instead of read by the NIC.
  std::uint32_t port_registrations = 16;      // max_port_registrations
  std::uint32_t uid_port_registrations = 32;  // uid_max_port_registrations

  // uid_connections with its default resolved.
  std::uint32_t connections_per_uid() const {
    return uid_connections != 0 ? uid_connections : std::max<std::uint32_t>(clients / 4, 4);
  }
};

struct ServerConfig {
  std::string socket = "/run/uroce/uroced.sock";
  std::uint32_t socket_mode = 0660;
  std::string socket_group;               // "" the daemon's
  std::uint32_t hello_timeout_ms = 2000;  // a connection that has not said hello by then is closed
  std::uint32_t reply_timeout_ms = 2000;  // a client that leaves a reply unread this long is dropped
  Limits limits;                          // every uid's but those in uid_limits
  std::map<std::uint32_t, Limits> uid_limits;  // the uids with keys of their own ("uid.1000.uid_max_qps")
  // Embedded in an in-process program (lib/ibverbs/fork_service.cc), which
  // serves its forked children: run() returns when this eventfd is readable
  // and takes no signal (they are the program's); -1: uroced, which stops
  // on SIGTERM and SIGINT through a signalfd.
  int stop_fd = -1;
  // Only peers of the server's own uid attach (SO_PEERCRED), root's
  // included: the embedded server's clients are its program's children.
  bool own_uid_only = false;

  // The budgets of `uid`'s clients.
  const Limits& limits_for(std::uint32_t uid) const {
    const auto it = uid_limits.find(uid);
    return it != uid_limits.end() ? it->second : limits;
  }
};

}  // namespace uroce::daemon
