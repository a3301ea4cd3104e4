#include "mem/arena.h"

#include <sys/mman.h>

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

}  // namespace uroce::mem
