// Buffers for memory regions: hugepage-backed when the system has hugepages
// reserved (fewer TLB misses, and DMA-able once registered with DPDK),
// normal pages otherwise.
#pragma once

#include <cstddef>

namespace uroce::mem {

enum class PageKind { kHuge, kNormal };

struct Buffer {
  void* addr = nullptr;
  std::size_t bytes = 0;  // mapped size (rounded up to the page size)
  PageKind kind = PageKind::kNormal;
};

// Maps `bytes` of zeroed memory. With `allow_huge`, tries 2 MiB hugepages
// first. addr == nullptr when out of memory.
Buffer map_buffer(std::size_t bytes, bool allow_huge);
void unmap_buffer(const Buffer& b);

// Faults in every page of [addr, addr + len) now, writable where the mapping
// allows, as an RNIC's registration pins them: a transfer into a fresh
// region then takes no page fault (the kernel clearing pages inside a timed
// run cost a third of its CPU). Best effort: pages it cannot populate (a
// kernel before 5.14, a mapping that refuses) fault in on first touch.
void populate(void* addr, std::size_t len);
// The pages of [addr, addr + len) faulted in now, for writing or reading
// (MADV_POPULATE_WRITE or _READ, Linux 5.14): 0, or madvise's errno
// (ENOMEM: part of the range is not mapped; EFAULT: a page cannot be
// faulted in that way; EINVAL: an older kernel).
int populate_pages(void* addr, std::size_t len, bool write);

}  // namespace uroce::mem
