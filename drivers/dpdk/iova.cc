#include "dpdk/iova.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>

#include <rte_eal.h>

namespace uroce::dpdk {
namespace {

class VaMap : public IovaMap {
 public:
  bool identity() const override { return true; }
  bool page_iovas(std::uintptr_t base, std::size_t page, std::size_t n, std::uint64_t* iovas,
                  std::string&) override {
    for (std::size_t i = 0; i < n; ++i) iovas[i] = base + i * page;
    return true;
  }
};

// Physical addresses from /proc/self/pagemap: one 64-bit entry per base
// page, bit 63 "present", bits 0-54 the page frame number (the kernel's
// Documentation/admin-guide/mm/pagemap.rst). Read in bulk, one pread per
// 4,096 entries, not one per page as rte_mem_virt2phy does.
class PagemapMap : public IovaMap {
 public:
  bool identity() const override { return false; }
  bool page_iovas(std::uintptr_t base, std::size_t page, std::size_t n, std::uint64_t* iovas,
                  std::string& error) override {
    const auto base_page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    if (page % base_page != 0) {
      error = "page size " + std::to_string(page) + " is not a multiple of the base page";
      return false;
    }
    const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error = std::string("cannot open /proc/self/pagemap: ") + std::strerror(errno);
      return false;
    }
    // With pages larger than the base page only each page's first entry is
    // read: a page is one frame run (a hugepage's base pages follow each
    // other physically).
    constexpr std::size_t kChunk = 4096;
    std::array<std::uint64_t, kChunk> entries;
    const std::size_t step = page / base_page;
    bool ok = true;
    for (std::size_t i = 0, count = 0; ok && i < n; i += count) {
      count = step == 1 ? std::min(kChunk, n - i) : 1;
      const auto offset = static_cast<off_t>((base + i * page) / base_page * sizeof(std::uint64_t));
      const auto want = static_cast<ssize_t>(count * sizeof(std::uint64_t));
      if (pread(fd, entries.data(), static_cast<std::size_t>(want), offset) != want) {
        error = std::string("cannot read /proc/self/pagemap: ") + std::strerror(errno);
        ok = false;
      }
      for (std::size_t k = 0; ok && k < count; ++k) {
        const std::uint64_t e = entries[k];
        const std::uint64_t pfn = e & ((std::uint64_t{1} << 55) - 1);
        if ((e >> 63) == 0 || pfn == 0) {
          error = (e >> 63) == 0 ? "a page is not present (the memory must be locked first)"
                                 : "physical addresses are hidden (reading them needs CAP_SYS_ADMIN: run as root)";
          ok = false;
        }
        iovas[i + k] = pfn * base_page;
      }
    }
    close(fd);
    return ok;
  }
};

}  // namespace

std::shared_ptr<IovaMap> physical_iova_map() { return std::make_shared<PagemapMap>(); }

std::shared_ptr<IovaMap> eal_iova_map() {
  if (rte_eal_iova_mode() == RTE_IOVA_PA) return physical_iova_map();
  return std::make_shared<VaMap>();
}

std::unique_ptr<IovaTable> IovaTable::read(IovaMap& map, std::uintptr_t lo, std::size_t bytes, std::size_t page,
                                           std::string& error) {
  auto t = std::make_unique<IovaTable>(lo, bytes);
  if (map.identity()) return t;
  if (!std::has_single_bit(page) || lo % page != 0 || bytes % page != 0 || bytes == 0) {
    error = "span not aligned to its page size";
    return nullptr;
  }
  const std::size_t n = bytes / page;
  if (n > UINT32_MAX) {
    error = "span too large";
    return nullptr;
  }
  t->page_shift_ = static_cast<unsigned>(std::countr_zero(page));
  t->iova_.resize(n);
  if (!map.page_iovas(lo, page, n, t->iova_.data(), error)) return nullptr;
  // Runs from the end: a page whose successor follows it in IOVA shares
  // its successor's run end.
  t->run_end_.resize(n);
  t->run_end_[n - 1] = static_cast<std::uint32_t>(n);
  for (std::size_t i = n - 1; i-- > 0;) {
    t->run_end_[i] = t->iova_[i + 1] == t->iova_[i] + page ? t->run_end_[i + 1] : static_cast<std::uint32_t>(i + 1);
  }
  return t;
}

std::vector<IovaTable::Run> IovaTable::runs() const {
  if (iova_.empty()) return {Run{lo_, lo_ + shift_, bytes_}};
  std::vector<Run> out;
  for (std::size_t i = 0; i < iova_.size(); i = run_end_[i]) {
    out.push_back(Run{lo_ + (i << page_shift_), iova_[i], (run_end_[i] - i) << page_shift_});
  }
  return out;
}

}  // namespace uroce::dpdk
