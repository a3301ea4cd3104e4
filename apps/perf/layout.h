// How each side of a benchmark lays out its resources, the same in every
// mode: message slot s of the buffer at s * slot (64-byte multiples from the
// buffer's start, which --offset may put anywhere in a page), the
// fetch-and-add counter 8-byte aligned in the last 64 bytes, the messages
// spread over the QPs (slot s on QP s mod qps), one CQ for them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "perf/options.h"
#include "uroce/verbs.h"

namespace uroce::perf {

// Every access a benchmark buffer needs, for whichever operation it serves.
constexpr int kAllAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

struct BufferLayout {
  explicit BufferLayout(const Options& o)
      : slot((o.size + 63) & ~std::size_t{63}), bytes(slot * o.depth + 4096) {}

  std::size_t slot_offset(std::uint32_t s) const { return s * slot; }
  // The counter of the buffer at `vaddr` (either side's: their offsets may
  // differ): 8-byte aligned, as an atomic's VA must be (IBTA 9.4.5).
  std::size_t counter_offset(std::uint64_t vaddr) const { return bytes - 64 - (vaddr & 7); }

  std::size_t slot;   // bytes per message slot
  std::size_t bytes;  // the whole buffer
};

// `bytes` for a buffer that starts o.offset bytes into a page of `ctx`'s
// memory (page-aligned), for a region registered from there; nullptr as
// alloc_buffer.
inline std::uint8_t* alloc_at_offset(Context& ctx, std::size_t bytes, const Options& o) {
  auto* p = static_cast<std::uint8_t*>(ctx.alloc_buffer(bytes + o.offset));
  return p == nullptr ? nullptr : p + o.offset;
}

// Completions of one side: a send and a receive for each message in flight.
inline int cq_entries(const Options& o) { return static_cast<int>(o.depth * 2 + 16); }

// o.qps QPs on `pd` completing on `cq`; fewer if one cannot be created
// (last_error() says why). Slot s goes to QP s mod qps: each QP has at most
// depth / qps + 1 messages in flight.
inline std::vector<QueuePair*> create_message_qps(ProtectionDomain* pd, CompletionQueue* cq, const Options& o) {
  QpInitAttr init;
  const std::uint32_t per_qp = o.depth / o.qps + 2;
  init.cap = ibv_qp_cap{per_qp, per_qp, 1, 1, 0};
  init.send_cq = init.recv_cq = cq;
  std::vector<QueuePair*> qps;
  for (std::uint32_t q = 0; q < o.qps; ++q) {
    QueuePair* qp = pd->create_qp(init);
    if (qp == nullptr) break;
    qps.push_back(qp);
  }
  return qps;
}

}  // namespace uroce::perf
