// Connecting an RC QP to a peer whose QPN, PSN and GID are known (from an
// out-of-band exchange, or because both ends live in this process): the
// RESET -> INIT -> RTR -> RTS sequence with the attributes IBTA table 91 asks.
#pragma once

#include <cstdint>

#include "uroce/verbs.h"

namespace uroce {

struct ConnectParams {
  ibv_mtu mtu = IBV_MTU_1024;
  std::uint32_t psn_a = 0x100;  // a's send PSN (b's receive PSN)
  std::uint32_t psn_b = 0x200;
  std::uint8_t timeout = 14;        // 4.096 us * 2^14 = 67 ms, as rxe and perftest default
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;
  std::uint8_t min_rnr_timer = 12;  // 0.64 ms
  std::uint8_t max_rd_atomic = 16;
  std::uint8_t sgid_index = 1;      // our GID: 1 IPv4-mapped, 0 IPv6 link-local
  std::uint8_t traffic_class = 0;   // DSCP << 2 | ECN; 0: the device's default (PortConfig::pfc_priority)
  std::uint8_t hop_limit = 64;      // the GRH hop limit: the IP TTL this end sends with
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  // Set on the QP before RTR when not the defaults (both ends must agree).
  TransportOptions transport = {};
};

// Moves `qp` (on `ctx`) to RTS connected to `remote_qpn` at `remote_gid`.
// Returns 0 or the first failing modify's errno. A UC QP gets the
// attributes UC takes (no timeouts, retries or READ depth).
int connect_rc(QueuePair* qp, const ibv_gid& remote_gid, std::uint32_t remote_qpn, std::uint32_t send_psn,
               std::uint32_t recv_psn, const ConnectParams& p);

// Moves a UD QP to RTS with Q_Key `qkey` and send PSN `send_psn`.
int ready_ud(QueuePair* qp, std::uint32_t qkey, std::uint32_t send_psn);


}  // namespace uroce
