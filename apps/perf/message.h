// The work request of one benchmark message, the same in every mode: the
// message's slot `s` in the local buffer, sent to the peer's slot (RDMA and
// SEND) or to the peer's counter (fetch-and-add of 1).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace uroce::perf {

inline ibv_send_wr message_wr(const std::string& op, std::uint32_t s, ibv_sge& sge, std::uint64_t remote_slot,
                              std::uint64_t remote_counter, std::uint32_t rkey) {
  ibv_send_wr wr{};
  wr.wr_id = s;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (op == "atomic") {
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic.remote_addr = remote_counter;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = 1;
  } else {
    wr.opcode = op == "send" ? IBV_WR_SEND : op == "read" ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = remote_slot;
    wr.wr.rdma.rkey = rkey;
  }
  return wr;
}

}  // namespace uroce::perf
