// Scatter/gather lists: resolving SGEs to host memory once, cutting a byte
// range of a list into payload pieces (TX, zero-copy), and placing received
// bytes into a list (RX, the one copy).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "mem/mr_table.h"
#include "transport/qp.h"

namespace uroce::transport {

// Resolves each SGE's lkey for `need` (0: local read; IBV_ACCESS_LOCAL_WRITE).
// Inline SGEs are already resolved.
inline mem::AccessResult sgl_resolve(Sge* sge, std::uint8_t n, const mem::MrTable& mrs, std::uint64_t pd,
                                     int need) {
  for (std::uint8_t i = 0; i < n; ++i) {
    if (sge[i].lkey == kInlineLkey && sge[i].host != nullptr) continue;
    if (sge[i].length == 0) continue;
    const mem::AccessResult r = mrs.check(sge[i].lkey, false, pd, sge[i].addr, sge[i].length, need, sge[i].host);
    if (r != mem::AccessResult::kOk) return r;
  }
  return mem::AccessResult::kOk;
}

// A WQE's list, resolved once and again whenever a key has stopped working
// since (MrTable::epoch): a WQE never reaches memory deregistered after it
// was posted.
template <typename Wqe>
inline mem::AccessResult wqe_resolve(Wqe& w, const mem::MrTable& mrs, std::uint64_t pd, int need) {
  if (w.resolved && w.mr_epoch == mrs.epoch()) return mem::AccessResult::kOk;
  const mem::AccessResult r = sgl_resolve(w.sge.data(), w.num_sge, mrs, pd, need);
  w.resolved = r == mem::AccessResult::kOk;
  w.mr_epoch = mrs.epoch();
  return r;
}

// The pieces of [offset, offset + len) of the list; returns how many.
inline std::uint8_t sgl_pieces(const Sge* sge, std::uint8_t n, std::uint32_t offset, std::uint32_t len,
                               std::span<const std::uint8_t>* out) {
  std::uint8_t k = 0;
  for (std::uint8_t i = 0; i < n && len > 0; ++i) {
    if (offset >= sge[i].length) {
      offset -= sge[i].length;
      continue;
    }
    const std::uint32_t take = std::min(sge[i].length - offset, len);
    out[k++] = std::span<const std::uint8_t>(sge[i].host + offset, take);
    len -= take;
    offset = 0;
  }
  return k;
}

// Copies `len` bytes of `src` into the list at `offset`.
inline void sgl_scatter(const Sge* sge, std::uint8_t n, std::uint32_t offset, const std::uint8_t* src,
                        std::uint32_t len) {
  for (std::uint8_t i = 0; i < n && len > 0; ++i) {
    if (offset >= sge[i].length) {
      offset -= sge[i].length;
      continue;
    }
    const std::uint32_t take = std::min(sge[i].length - offset, len);
    std::memcpy(sge[i].host + offset, src, take);
    src += take;
    len -= take;
    offset = 0;
  }
}

// The payload of `p` (contiguous or in segments) into the list at `offset`.
inline void sgl_scatter_payload(const Sge* sge, std::uint8_t n, std::uint32_t offset, const wire::ParsedFrame& p) {
  p.visit_payload([&](const std::uint8_t* data, std::size_t len, std::size_t at) {
    sgl_scatter(sge, n, offset + static_cast<std::uint32_t>(at), data, static_cast<std::uint32_t>(len));
  });
}

inline bool is_read_or_atomic(const SendWqe& w) {
  // ATOMIC WRITE takes a responder resource and waits for its response as they do.
  return w.kind == WqeKind::kRead || w.kind == WqeKind::kAtomic || w.kind == WqeKind::kAtomicWrite;
}

}  // namespace uroce::transport
