// The work requests the tools post, filled in one place: one SGE each, the
// fields ibv_post_send and ibv_post_recv read, the rest zero. Every send
// request is signalled: the tools count each one's completion.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "uroce/verbs.h"

namespace uroce::app {

// `length` bytes at `addr`, inside `mr`.
inline ibv_sge local_sge(const void* addr, std::uint32_t length, const MemoryRegion& mr) {
  return ibv_sge{reinterpret_cast<std::uint64_t>(addr), length, mr.lkey};
}

// A receive into `sge`.
inline ibv_recv_wr recv_wr(std::uint64_t wr_id, ibv_sge& sge) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return wr;
}

// A SEND of `sge`.
inline ibv_send_wr send_wr(std::uint64_t wr_id, ibv_sge& sge) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  return wr;
}

// An RDMA WRITE of `sge` to, or an RDMA READ into `sge` from, `remote_addr`
// under `rkey` (opcode IBV_WR_RDMA_WRITE or IBV_WR_RDMA_READ).
inline ibv_send_wr rdma_wr(ibv_wr_opcode opcode, std::uint64_t wr_id, ibv_sge& sge, std::uint64_t remote_addr,
                           std::uint32_t rkey) {
  ibv_send_wr wr = send_wr(wr_id, sge);
  wr.opcode = opcode;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

// A fetch-and-add of `add` to the 8 bytes at `remote_addr`; the original
// value lands in `sge`.
inline ibv_send_wr fetch_add_wr(std::uint64_t wr_id, ibv_sge& sge, std::uint64_t remote_addr, std::uint32_t rkey,
                                std::uint64_t add) {
  ibv_send_wr wr = send_wr(wr_id, sge);
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.remote_addr = remote_addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = add;
  return wr;
}

}  // namespace uroce::app
