// One benchmark message, the same in every mode: its work request, and the
// checks --verify makes of what an atomic returned. The message in slot `s`
// of the local buffer goes to the peer's slot `s` (RDMA and SEND) or adds 1
// to the peer's counter (fetch-and-add).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>

#include "common/work_request.h"
#include "perf/options.h"

namespace uroce::perf {

inline ibv_send_wr message_wr(Op op, std::uint32_t s, ibv_sge& sge, std::uint64_t remote_slot,
                              std::uint64_t remote_counter, std::uint32_t rkey) {
  switch (op) {
    case Op::kAtomic: return app::fetch_add_wr(s, sge, remote_counter, rkey, 1);
    case Op::kSend: return app::send_wr(s, sge);
    case Op::kRead: return app::rdma_wr(IBV_WR_RDMA_READ, s, sge, remote_slot, rkey);
    case Op::kWrite: break;
  }
  return app::rdma_wr(IBV_WR_RDMA_WRITE, s, sge, remote_slot, rkey);
}

// Whether the requester writes the message's bytes into its slot before
// posting it (WRITE and SEND carry them; READ fetches them, an atomic adds 1).
inline bool source_is_local(Op op) { return op == Op::kWrite || op == Op::kSend; }

// The 8 bytes at `p` (a counter, or what a fetch-and-add returned).
inline std::uint64_t load_u64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Whether fetch-and-add number `msg` returned `msg`: the counter starts at 0
// and each message adds 1. Holds with one QP only: over several, the adds
// of different QPs interleave at the responder in any order.
inline bool fetch_add_result_matches(const std::uint8_t* result, std::uint64_t msg) { return load_u64(result) == msg; }

}  // namespace uroce::perf
