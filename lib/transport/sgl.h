// Scatter/gather lists: resolving SGEs to host memory once, cutting a byte
// range of a list into payload pieces (TX, zero-copy), and placing received
// bytes into a list (RX, the one copy).
#pragma once

#include <cstdint>
#include <array>
#include <cstring>
#include <span>

#include "mem/mr_table.h"
#include "mem/odp.h"
#include "transport/qp.h"

namespace uroce::transport {

// Resolves each SGE's lkey for `need` (0: local read; IBV_ACCESS_LOCAL_WRITE).
// Inline SGEs are already resolved. Sets bit i of `odp_sges` for an SGE in
// an on-demand region, and `odp_pid` to its owner (one PD: one process).
inline mem::AccessResult sgl_resolve(Sge* sge, std::uint8_t n, const mem::MrTable& mrs, std::uint64_t pd,
                                     int need, std::uint16_t& odp_sges, std::int32_t& odp_pid) {
  odp_sges = 0;
  for (std::uint8_t i = 0; i < n; ++i) {
    if (sge[i].lkey == kInlineLkey && sge[i].host != nullptr) continue;
    if (sge[i].length == 0) continue;
    std::int32_t pid = 0;
    const mem::AccessResult r =
        mrs.check(sge[i].lkey, false, pd, sge[i].addr, sge[i].length, need, sge[i].host, pid);
    if (r != mem::AccessResult::kOk) return r;
    if (pid != 0) [[unlikely]] {
      odp_sges = static_cast<std::uint16_t>(odp_sges | 1u << i);
      odp_pid = pid;
    }
  }
  return mem::AccessResult::kOk;
}

// A WQE's list, resolved once and again whenever a key has stopped working
// since (MrTable::epoch): a WQE never reaches memory deregistered after it
// was posted.
template <typename Wqe>
inline mem::AccessResult wqe_resolve(Wqe& w, const mem::MrTable& mrs, std::uint64_t pd, int need) {
  // Read before resolving: another engine may move it meanwhile (MrTable::epoch).
  const std::uint64_t epoch = mrs.epoch();
  if (w.resolved && w.mr_epoch == epoch) return mem::AccessResult::kOk;
  const mem::AccessResult r = sgl_resolve(w.sge.data(), w.num_sge, mrs, pd, need, w.odp_sges, w.odp_pid);
  w.resolved = r == mem::AccessResult::kOk;
  w.mr_epoch = epoch;
  return r;
}

// Where an on-demand list's bytes are gathered for a frame: one packet at
// the largest MTU, copied into the frame's head before the next is built.
inline thread_local std::array<std::uint8_t, 4096> odp_bounce;

// Copies [offset, offset + len) of a list holding on-demand SGEs into
// `dst`, every ODP byte through the kernel. False when a page is not mapped.
inline bool sgl_gather(const Sge* sge, std::uint8_t n, std::uint16_t odp_sges, std::int32_t odp_pid,
                       std::uint32_t offset, std::uint32_t len, std::uint8_t* dst) {
  for (std::uint8_t i = 0; i < n && len > 0; ++i) {
    if (offset >= sge[i].length) {
      offset -= sge[i].length;
      continue;
    }
    const std::uint32_t take = std::min(sge[i].length - offset, len);
    if (odp_sges & 1u << i) {
      if (!mem::odp_read(odp_pid, dst, reinterpret_cast<std::uintptr_t>(sge[i].host) + offset, take)) return false;
    } else {
      std::memcpy(dst, sge[i].host + offset, take);
    }
    dst += take;
    len -= take;
    offset = 0;
  }
  return true;
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

// Copies `len` bytes of `src` into the list at `offset`; bytes for an SGE
// in `odp_sges` go through the kernel into `odp_pid`. False when such a
// page is not mapped (or not writable): the bytes before it are placed.
inline bool sgl_scatter(const Sge* sge, std::uint8_t n, std::uint32_t offset, const std::uint8_t* src,
                        std::uint32_t len, std::uint16_t odp_sges = 0, std::int32_t odp_pid = 0) {
  for (std::uint8_t i = 0; i < n && len > 0; ++i) {
    if (offset >= sge[i].length) {
      offset -= sge[i].length;
      continue;
    }
    const std::uint32_t take = std::min(sge[i].length - offset, len);
    if (odp_sges & 1u << i) [[unlikely]] {
      if (!mem::odp_write(odp_pid, reinterpret_cast<std::uintptr_t>(sge[i].host) + offset, src, take)) return false;
    } else {
      std::memcpy(sge[i].host + offset, src, take);
    }
    src += take;
    len -= take;
    offset = 0;
  }
  return true;
}

// The payload of `p` (contiguous or in segments) into the WQE's list at
// `offset`. False as sgl_scatter.
template <typename Wqe>
inline bool wqe_scatter_payload(const Wqe& w, std::uint32_t offset, const wire::ParsedFrame& p) {
  bool ok = true;
  p.visit_payload([&](const std::uint8_t* data, std::size_t len, std::size_t at) {
    ok = ok && sgl_scatter(w.sge.data(), w.num_sge, offset + static_cast<std::uint32_t>(at), data,
                           static_cast<std::uint32_t>(len), w.odp_sges, w.odp_pid);
  });
  return ok;
}

// Bytes into a region at `host` (a WRITE's RETH target, an atomic's result),
// through the kernel when the region is on demand (`odp_pid` != 0).
inline bool place(std::uint8_t* host, std::int32_t odp_pid, const std::uint8_t* src, std::size_t len) {
  if (odp_pid != 0) [[unlikely]] return mem::odp_write(odp_pid, reinterpret_cast<std::uintptr_t>(host), src, len);
  std::memcpy(host, src, len);
  return true;
}

inline bool is_read_or_atomic(const SendWqe& w) {
  // ATOMIC WRITE takes a responder resource and waits for its response as they do.
  return w.kind == WqeKind::kRead || w.kind == WqeKind::kAtomic || w.kind == WqeKind::kAtomicWrite;
}

}  // namespace uroce::transport
