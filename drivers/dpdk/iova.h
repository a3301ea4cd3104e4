// Where a device finds process memory: the IOVA of each page.
//
// In IOVA-as-VA mode (vfio with an IOMMU, and every virtual device) a page's
// IOVA is its virtual address, and the IOMMU's table maps it. In IOVA-as-PA
// mode (uio, vfio without an IOMMU: a VM with no virtual IOMMU, bare metal
// without one) it is the physical address, and neighbouring pages of
// ordinary memory are rarely neighbours physically: a segment a NIC reads
// must lie inside one physically contiguous run, or the device reads the
// wrong memory after the first page boundary. PortIo reads a span's IOVAs
// once, when it registers the span, into an IovaTable; the data path looks
// segments up there, with no system call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace uroce::dpdk {

// The process's view of page IOVAs: EAL's (below), or a test's.
class IovaMap {
 public:
  virtual ~IovaMap() = default;
  // IOVA equals the virtual address: no table needed.
  virtual bool identity() const = 0;
  // The IOVAs of the `n` pages of `page` bytes from `base` (page-aligned)
  // into `iovas`. False, with `error`, when one is unknown (a page not
  // present, or no right to read physical addresses).
  virtual bool page_iovas(std::uintptr_t base, std::size_t page, std::size_t n, std::uint64_t* iovas,
                          std::string& error) = 0;
};

// EAL's IOVA mode: identity in VA mode; in PA mode, physical addresses read
// from /proc/self/pagemap (which needs CAP_SYS_ADMIN: without it the kernel
// reports frame number 0, taken as unknown).
std::shared_ptr<IovaMap> eal_iova_map();
// Physical addresses, whatever EAL's mode (EAL's PA-mode map; tests).
std::shared_ptr<IovaMap> physical_iova_map();

// The IOVAs of one registered span [lo, lo + bytes), and its runs of
// IOVA-contiguous pages. Immutable once made: engines read it lock-free.
class IovaTable {
 public:
  // IOVA = VA over the span.
  IovaTable(std::uintptr_t lo, std::size_t bytes) : lo_(lo), bytes_(bytes) {}
  // One IOVA-contiguous run from `iova` (an IOVA chosen for the span, where
  // the IOMMU cannot reach its virtual addresses).
  IovaTable(std::uintptr_t lo, std::size_t bytes, std::uint64_t iova) : lo_(lo), bytes_(bytes), shift_(iova - lo) {}
  // Lookups stop at every `page` boundary (a power of two), though the
  // span stays one run for DMA mapping: for devices that cannot read one
  // segment across pages that are not neighbours in the memory behind the
  // IOMMU (Port::tx_split_pages). Before any lookup.
  void split_lookups_at(std::size_t page) {
    split_shift_ = 0;
    while ((std::size_t{1} << split_shift_) < page) ++split_shift_;
  }
  // The span's pages through `map`; nullptr, with `error`, if one is unknown.
  static std::unique_ptr<IovaTable> read(IovaMap& map, std::uintptr_t lo, std::size_t bytes, std::size_t page,
                                         std::string& error);

  bool identity() const { return iova_.empty() && shift_ == 0; }
  std::uintptr_t lo() const { return lo_; }
  std::size_t bytes() const { return bytes_; }
  std::size_t page() const { return std::size_t{1} << page_shift_; }

  // The IOVA of `p` (inside the span), and in `run` how many of the `len`
  // bytes from `p` lie IOVA-contiguously there (all of them in VA mode).
  std::uint64_t lookup(std::uintptr_t p, std::size_t len, std::size_t& run) const {
    if (iova_.empty()) [[likely]] {
      run = len;
      if (split_shift_ != 0) [[unlikely]] {
        const std::size_t room = (std::size_t{1} << split_shift_) - (p & ((std::size_t{1} << split_shift_) - 1));
        if (room < run) run = room;
      }
      return p + shift_;
    }
    const std::size_t off = p - lo_;
    const std::size_t page_index = off >> page_shift_;
    const std::size_t in_page = off & ((std::size_t{1} << page_shift_) - 1);
    const std::size_t contiguous = ((std::size_t{run_end_[page_index]} - page_index) << page_shift_) - in_page;
    run = len < contiguous ? len : contiguous;
    return iova_[page_index] + in_page;
  }
  // How many segments [p, p + len) takes: one per contiguous run it touches.
  unsigned segments(std::uintptr_t p, std::size_t len) const {
    unsigned n = 0;
    for (std::size_t run; len > 0; p += run, len -= run, ++n) lookup(p, len, run);
    return n;
  }

  struct Run {
    std::uintptr_t va;
    std::uint64_t iova;
    std::size_t bytes;
  };
  // The span as IOVA-contiguous runs, in address order (one in VA mode):
  // what is DMA-mapped.
  std::vector<Run> runs() const;
  // Each page's IOVA, for rte_extmem_register (empty without a page table).
  const std::vector<std::uint64_t>& page_iovas() const { return iova_; }

 private:
  std::uintptr_t lo_;
  std::size_t bytes_;
  std::uint64_t shift_ = 0;  // without a page table: IOVA = VA + shift_ (mod 2^64)
  unsigned page_shift_ = 12;
  unsigned split_shift_ = 0;  // without a page table: lookups end at pages of 2^split_shift_ bytes (0: never)
  std::vector<std::uint64_t> iova_;     // per page; empty: identity
  std::vector<std::uint32_t> run_end_;  // per page: one past the last page of its contiguous run
};

}  // namespace uroce::dpdk
