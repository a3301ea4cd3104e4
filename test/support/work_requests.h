// Posting the plain work requests tests use again and again.
#pragma once

#include <cstdint>

#include "uroce/verbs.h"

namespace uroce::test {

// One RDMA WRITE or READ of `len` bytes between `local` (under `lkey`) and
// the remote address `remote` (under `rkey`), one SGE. Returns
// post_send()'s status.
inline int post_rdma(QueuePair* qp, ibv_wr_opcode op, const void* local, std::uint32_t len, std::uint32_t lkey,
                     std::uint64_t remote, std::uint32_t rkey, std::uint64_t wr_id = 0,
                     unsigned flags = IBV_SEND_SIGNALED) {
  ibv_sge sge{reinterpret_cast<std::uint64_t>(local), len, lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = flags;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return qp->post_send(&wr, &bad);
}

inline int post_rdma(QueuePair* qp, ibv_wr_opcode op, const void* local, std::uint32_t len, std::uint32_t lkey,
                     const void* remote, std::uint32_t rkey, std::uint64_t wr_id = 0,
                     unsigned flags = IBV_SEND_SIGNALED) {
  return post_rdma(qp, op, local, len, lkey, reinterpret_cast<std::uint64_t>(remote), rkey, wr_id, flags);
}

// One signaled SEND (or SEND_WITH_IMM, with `imm` as it goes on the wire)
// of `len` bytes at `local` (under `lkey`), one SGE. Returns post_send()'s
// status.
inline int post_send_one(QueuePair* qp, ibv_wr_opcode op, const void* local, std::uint32_t len, std::uint32_t lkey,
                         std::uint64_t wr_id, std::uint32_t imm = 0) {
  ibv_sge sge{reinterpret_cast<std::uint64_t>(local), len, lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.imm_data = imm;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  return qp->post_send(&wr, &bad);
}

// One receive of `len` bytes at `addr` (under `lkey`), one SGE. Returns
// post_recv()'s status.
inline int post_recv_one(QueuePair* qp, const void* addr, std::uint32_t len, std::uint32_t lkey, std::uint64_t wr_id) {
  ibv_sge sge{reinterpret_cast<std::uint64_t>(addr), len, lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return qp->post_recv(&wr, &bad);
}

}  // namespace uroce::test
