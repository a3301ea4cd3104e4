// Two devices joined by a simulated link on one virtual clock, stepped
// together: the test bed for the transport and for uroce-perf --sim.
#pragma once

#include <cstdint>
#include <memory>

#include "sim/sim_link.h"
#include "uroce/verbs.h"

namespace uroce::sim {

struct ConnectParams {
  ibv_mtu mtu = IBV_MTU_1024;
  std::uint32_t psn_a = 0x100;  // a's send PSN (b's receive PSN)
  std::uint32_t psn_b = 0x200;
  std::uint8_t timeout = 14;        // 4.096 us * 2^14 = 67 ms, as rxe and perftest default
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;
  std::uint8_t min_rnr_timer = 12;  // 0.64 ms
  std::uint8_t max_rd_atomic = 16;
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
};

// Moves `qp` (on `ctx`) to RTS connected to `remote_qpn` at `remote_gid`.
// Returns 0 or the first failing modify's errno.
int connect_rc(QueuePair* qp, const ibv_gid& remote_gid, std::uint32_t remote_qpn, std::uint32_t send_psn,
               std::uint32_t recv_psn, const ConnectParams& p);

class SimPair {
 public:
  explicit SimPair(std::uint64_t seed, Impairments a_to_b = {}, Impairments b_to_a = {});

  // Connects qa (on a) and qb (on b) to each other.
  int connect(QueuePair* qa, QueuePair* qb, const ConnectParams& p = {});

  // One round: both engines poll; if neither moved a frame, virtual time
  // jumps to the next delivery or timer. False once nothing can happen.
  bool step();

  // Steps until `done()` holds (true) or `limit_ns` of virtual time passes or
  // nothing is left to happen (false).
  template <typename Done>
  bool run_until(Done done, std::uint64_t limit_ns = 10'000'000'000ull) {
    const std::uint64_t start = clock.now_ns();
    while (!done()) {
      if (clock.now_ns() - start > limit_ns) return false;
      if (!step()) return done();
    }
    return true;
  }

  VirtualClock clock;
  SimLink link;
  std::unique_ptr<Context> a;
  std::unique_ptr<Context> b;
};

}  // namespace uroce::sim
