#include "mem/arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>

namespace uroce::mem {
namespace {

constexpr std::size_t kHugePage = 2u << 20;
constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

Buffer map_buffer(std::size_t bytes, bool allow_huge) {
  if (bytes == 0) bytes = 1;
  if (allow_huge) {
    const std::size_t n = round_up(bytes, kHugePage);
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) return {p, n, PageKind::kHuge};
  }
  const std::size_t n = round_up(bytes, kPage);
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return {};
  return {p, n, PageKind::kNormal};
}

void unmap_buffer(const Buffer& b) {
  if (b.addr != nullptr) munmap(b.addr, b.bytes);
}

int populate_pages(void* addr, std::size_t len, bool write) {
#if defined(MADV_POPULATE_WRITE) && defined(MADV_POPULATE_READ)
  constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
  constexpr int kPopulateRead = MADV_POPULATE_READ;
#else
  constexpr int kPopulateWrite = 23;  // Linux 5.14's values, for older headers
  constexpr int kPopulateRead = 22;
#endif
  if (len == 0) return 0;
  const auto first = reinterpret_cast<std::uintptr_t>(addr) / kPage * kPage;
  const std::size_t n = round_up(reinterpret_cast<std::uintptr_t>(addr) + len - first, kPage);
  return madvise(reinterpret_cast<void*>(first), n, write ? kPopulateWrite : kPopulateRead) == 0 ? 0 : errno;
}

void populate(void* addr, std::size_t len) {
  if (addr == nullptr || len == 0) return;
  if (populate_pages(addr, len, true) != 0) populate_pages(addr, len, false);
}

}  // namespace uroce::mem
