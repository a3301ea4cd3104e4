// The IOVA rules of zero-copy TX (issue 28), without a NIC: a fake IOVA
// map gives a region's pages physical addresses the way IOVA-as-PA mode
// does (runs of one to four contiguous pages, scattered), and a model of a
// DMA engine reads each frame sent on a net_ring port the way a NIC would,
// through the segments' IOVAs only. Every segment must lie inside one
// contiguous run, and the bytes the device reads must be the payload.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include <rte_ethdev.h>
#include <rte_errno.h>
#include <rte_mbuf.h>

#include "dpdk/iova.h"
#include "dpdk/port.h"
#include "dpdk/port_io.h"
#include "support/eal_environment.h"
#include "support/test_seed.h"
#include "uroce/port.h"

namespace uroce::test {
namespace {

constexpr std::size_t kPage = 4096;

class PortEnvironment : public EalEnvironment {
 public:
  PortEnvironment()
      : EalEnvironment({.name = "uroce-test-iova", .vdevs = {"net_ring_iova0"}, .log_level = "lib.eal:error"}) {}
  void TearDown() override {
    port_.reset();
    EalEnvironment::TearDown();
  }
  static dpdk::Port* port() {
    if (!port_ && error_.empty()) port_ = dpdk::Port::open({.name = "net_ring_iova0", .max_frame = 9018}, error_);
    return port_.get();
  }

 private:
  static inline std::unique_ptr<dpdk::Port> port_;
};

// IOVA-as-PA as a test sees it: the pages of each span asked about get
// scattered "physical" pages, in runs of 1-4 contiguous ones; the inverse
// (IOVA page -> virtual page) is what the device model reads through.
class ScatteredMap : public dpdk::IovaMap {
 public:
  explicit ScatteredMap(std::uint64_t seed) : rng_(seed) {}
  bool identity() const override { return false; }
  bool page_iovas(std::uintptr_t base, std::size_t page, std::size_t n, std::uint64_t* iovas,
                  std::string& error) override {
    if (fail_) {
      error = "the test's map knows no addresses";
      return false;
    }
    // Runs of 1-4 pages, each at a slot 8 pages apart from the others, in
    // shuffled order: no two runs touch.
    std::vector<std::size_t> runs;
    for (std::size_t done = 0; done < n;) {
      const std::size_t len = std::min<std::size_t>(n - done, 1 + rng_() % 4);
      runs.push_back(len);
      done += len;
    }
    std::vector<std::uint64_t> slots(runs.size());
    std::iota(slots.begin(), slots.end(), next_slot_);
    next_slot_ += slots.size();
    std::shuffle(slots.begin(), slots.end(), rng_);
    std::size_t i = 0;
    for (std::size_t r = 0; r < runs.size(); ++r) {
      const std::uint64_t start = (std::uint64_t{1} << 40) + slots[r] * 8 * page;
      for (std::size_t k = 0; k < runs[r]; ++k, ++i) {
        iovas[i] = start + k * page;
        virt_[iovas[i]] = base + i * page;
        run_of_[base + i * page] = r + run_base_;
      }
    }
    run_base_ += runs.size();
    return true;
  }
  // What the device reads at `iova`: the byte of the page mapped there;
  // false if no page is.
  bool device_read(std::uint64_t iova, std::size_t len, std::vector<std::uint8_t>& out) const {
    for (std::size_t k = 0; k < len; ++k) {
      const std::uint64_t a = iova + k;
      const auto it = virt_.find(a & ~(kPage - 1));
      if (it == virt_.end()) return false;
      out.push_back(*reinterpret_cast<const std::uint8_t*>(it->second + (a & (kPage - 1))));
    }
    return true;
  }
  // The run the page holding `va` belongs to.
  std::size_t run_of(std::uintptr_t va) const { return run_of_.at(va & ~(kPage - 1)); }
  void fail_lookups() { fail_ = true; }

 private:
  std::mt19937_64 rng_;
  std::map<std::uint64_t, std::uintptr_t> virt_;
  std::map<std::uintptr_t, std::size_t> run_of_;
  std::uint64_t next_slot_ = 0;
  std::size_t run_base_ = 0;
  bool fail_ = false;
};

struct Memory {
  std::size_t bytes;
  std::uint8_t* p;
  explicit Memory(std::size_t n) : bytes(n) {
    p = static_cast<std::uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 7 + i / 4096 + 1);
  }
  ~Memory() { munmap(p, bytes); }
};

TEST(IovaTable, RunsAndLookupsFollowTheMap) {
  const std::uint64_t seed = test_seed();
  ScatteredMap map(seed);
  Memory region(64 * kPage);
  const auto lo = reinterpret_cast<std::uintptr_t>(region.p);
  std::string error;
  auto table = dpdk::IovaTable::read(map, lo, region.bytes, kPage, error);
  ASSERT_NE(table, nullptr) << error;
  EXPECT_FALSE(table->identity());
  // The runs tile the span, each contiguous in the map, none joinable.
  std::uintptr_t at = lo;
  std::size_t last_run = SIZE_MAX;
  for (const auto& r : table->runs()) {
    EXPECT_EQ(r.va, at) << seed_note(seed);
    const std::size_t run = map.run_of(r.va);
    EXPECT_NE(run, last_run) << seed_note(seed);
    for (std::size_t off = 0; off < r.bytes; off += kPage) EXPECT_EQ(map.run_of(r.va + off), run) << seed_note(seed);
    last_run = run;
    at += r.bytes;
  }
  EXPECT_EQ(at, lo + region.bytes);
  // Any lookup: the IOVA the map gives, and a run that stays in one run of
  // the map and ends only where that run does (or the length).
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 2000; ++i) {
    const std::size_t off = rng() % region.bytes;
    const std::size_t len = 1 + rng() % std::min<std::size_t>(3 * kPage, region.bytes - off);
    std::size_t run = 0;
    const std::uint64_t iova = table->lookup(lo + off, len, run);
    std::vector<std::uint8_t> seen;
    ASSERT_TRUE(map.device_read(iova, 1, seen)) << seed_note(seed);
    EXPECT_EQ(seen[0], region.p[off]) << seed_note(seed);
    ASSERT_GE(run, 1u);
    ASSERT_LE(run, len);
    EXPECT_EQ(map.run_of(lo + off), map.run_of(lo + off + run - 1)) << "off " << off << " " << seed_note(seed);
    if (run < len) {
      EXPECT_NE(map.run_of(lo + off), map.run_of(lo + off + run)) << seed_note(seed);
    }
  }
}

// For qemu's e1000e and vmxnet3 behind an IOMMU (Port::tx_split_pages): the
// span stays one run for the DMA mapping, but no lookup crosses a page, at
// its own address or at an IOVA chosen for it.
TEST(IovaTable, SplitLookupsEndAtEveryPageAndTheSpanStaysOneRun) {
  const std::uint64_t seed = test_seed();
  const std::uintptr_t lo = 0x7f0000000000ull;
  const std::size_t bytes = 17 * kPage;
  for (const std::uint64_t chosen : {std::uint64_t{0}, std::uint64_t{0x40000000}}) {
    dpdk::IovaTable table = chosen == 0 ? dpdk::IovaTable(lo, bytes) : dpdk::IovaTable(lo, bytes, chosen);
    table.split_lookups_at(kPage);
    ASSERT_EQ(table.runs().size(), 1u);
    EXPECT_EQ(table.runs()[0].bytes, bytes);
    const std::uint64_t shift = chosen == 0 ? 0 : chosen - lo;
    // A 64 KiB payload 3000 bytes into a page: 17 pieces, each inside a page.
    EXPECT_EQ(table.segments(lo + 3000, 65536), 17u);
    EXPECT_EQ(table.segments(lo, 4 * kPage), 4u);
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 2000; ++i) {
      const std::size_t off = rng() % bytes;
      const std::size_t len = 1 + rng() % std::min<std::size_t>(3 * kPage, bytes - off);
      std::size_t run = 0;
      EXPECT_EQ(table.lookup(lo + off, len, run), lo + off + shift) << seed_note(seed);
      ASSERT_GE(run, 1u) << seed_note(seed);
      EXPECT_EQ(run, std::min(len, kPage - off % kPage)) << "off " << off << " len " << len << " " << seed_note(seed);
    }
  }
  // Without the split a lookup runs to the length asked.
  const dpdk::IovaTable whole(lo, bytes);
  std::size_t run = 0;
  whole.lookup(lo + 3000, 65536, run);
  EXPECT_EQ(run, 65536u);
}

TEST(IovaTable, PhysicalAddressesOfLockedPagesAreReadAndUnlockedOnesRefused) {
  Memory region(16 * kPage);
  ASSERT_EQ(mlock(region.p, region.bytes), 0);
  std::string error;
  auto table = dpdk::IovaTable::read(*dpdk::physical_iova_map(), reinterpret_cast<std::uintptr_t>(region.p),
                                     region.bytes, kPage, error);
  ASSERT_NE(table, nullptr) << error << " (run as root)";
  std::vector<std::uint64_t> seen(table->page_iovas());
  ASSERT_EQ(seen.size(), 16u);
  for (std::uint64_t a : seen) {
    EXPECT_NE(a, 0u);
    EXPECT_EQ(a % kPage, 0u);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "two pages at one physical address";
  munlock(region.p, region.bytes);
  // Pages never touched have no frame: refused, never guessed.
  auto* fresh = static_cast<std::uint8_t*>(
      mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  error.clear();
  EXPECT_EQ(dpdk::IovaTable::read(*dpdk::physical_iova_map(), reinterpret_cast<std::uintptr_t>(fresh), 4 * kPage,
                                  kPage, error),
            nullptr);
  EXPECT_NE(error.find("not present"), std::string::npos) << error;
  munmap(fresh, 4 * kPage);
}

// A frame of a 60-byte head (taken from the port) and no pieces yet;
// false when the port had no head to give.
bool head_only_frame(dpdk::PortIo& io, TxFrame& f) {
  TxHead head;
  if (io.tx_heads(&head, 1) != 1) return false;
  std::memset(head.data, 0xee, 60);
  f = TxFrame{};
  f.head = head;
  f.head_len = 60;
  f.l3_offset = 14;
  return true;
}

struct Sent {
  int frames = 0;             // sent, came back, checked
  int external_segments = 0;  // segments pointing into the region
};

// Sends frames of 1-4 pieces from the region and reads each back as a DMA
// engine would.
Sent send_and_check(dpdk::Port& port, dpdk::PortIo& io, const ScatteredMap& map, const Memory& region,
                    std::uint64_t seed, int frames) {
  std::mt19937_64 rng(seed);
  Sent sent;
  for (int n = 0; n < frames; ++n) {
    TxFrame f;
    if (!head_only_frame(io, f)) break;
    f.npieces = static_cast<std::uint8_t>(1 + rng() % 4);
    std::vector<std::uint8_t> payload;
    std::size_t budget = 4096;
    for (int k = 0; k < f.npieces; ++k) {
      const std::size_t len = 1 + rng() % (budget - (f.npieces - k - 1));
      budget -= len;
      const std::size_t off = rng() % (region.bytes - len);
      f.pieces[k] = std::span<const std::uint8_t>(region.p + off, len);
      payload.insert(payload.end(), region.p + off, region.p + off + len);
    }
    f.trailer_len = 4;
    f.trailer = {1, 2, 3, 4};
    if (io.tx_burst(&f, 1) != 1) {
      io.tx_heads_return(&f.head, 1);
      ADD_FAILURE() << "frame " << n << " not taken " << seed_note(seed);
      break;
    }
    rte_mbuf* m = nullptr;
    for (int tries = 0; tries < 1000 && rte_eth_rx_burst(port.id(), 0, &m, 1) == 0; ++tries) {
    }
    if (m == nullptr) {
      ADD_FAILURE() << "frame " << n << " did not come back " << seed_note(seed);
      break;
    }
    // The device's view: head, tail and copied pieces in the port's pool
    // (DPDK's own memory, whose IOVAs are DPDK's concern), pieces attached
    // from the region through the map.
    std::vector<std::uint8_t> read;
    int segment = 0;
    for (rte_mbuf* s = m; s != nullptr; s = s->next, ++segment) {
      if (!RTE_MBUF_HAS_EXTBUF(s)) {
        if (segment != 0 && s->next != nullptr) {
          read.insert(read.end(), rte_pktmbuf_mtod(s, std::uint8_t*), rte_pktmbuf_mtod(s, std::uint8_t*) + s->data_len);
        }
        continue;
      }
      ++sent.external_segments;
      const auto va = rte_pktmbuf_mtod(s, std::uintptr_t);
      const std::uint64_t iova = s->buf_iova + s->data_off;
      EXPECT_EQ(map.run_of(va), map.run_of(va + s->data_len - 1))
          << "frame " << n << " segment " << segment << " crosses from one run into another " << seed_note(seed);
      EXPECT_TRUE(map.device_read(iova, s->data_len, read)) << "no page at IOVA " << iova << " " << seed_note(seed);
    }
    EXPECT_EQ(read, payload) << "frame " << n << ": the device read other bytes " << seed_note(seed);
    rte_pktmbuf_free(m);
    ++sent.frames;
  }
  return sent;
}

TEST(PortIova, ZeroCopySegmentsStayInsideOneContiguousRunAndTheDeviceReadsThePayload) {
  const std::uint64_t seed = test_seed();
  dpdk::Port* port = PortEnvironment::port();
  ASSERT_NE(port, nullptr) << EalEnvironment::error();
  ASSERT_TRUE(port->multi_seg_tx()) << "net_ring takes chains";
  dpdk::PortIo io(*port, 0, {10, 0, 9, 1});
  auto map = std::make_shared<ScatteredMap>(seed);
  io.use_iova_map(map);
  Memory region(64 * kPage);
  io.register_memory(region.p, region.bytes);
  EXPECT_EQ(io.counters().regions_registered, 1u);
  EXPECT_EQ(io.counters().regions_iova_unknown, 0u);
  const Sent sent = send_and_check(*port, io, *map, region, seed, 500);
  EXPECT_EQ(sent.frames, 500);
  EXPECT_GT(sent.external_segments, 500);
  EXPECT_EQ(io.counters().tx_zero_copy_frames, 500u);
  EXPECT_GT(io.counters().tx_pieces_split, 0u) << "no piece crossed a run: the test proves nothing " << seed_note(seed);
  EXPECT_EQ(io.counters().tx_copied_unregistered, 0u);
  io.unregister_memory(region.p, region.bytes);
  EXPECT_EQ(io.counters().memory_drain_failed, 0u);
}

TEST(PortIova, MemoryWhoseAddressesAreUnknownIsCopiedNeverAttached) {
  dpdk::Port* port = PortEnvironment::port();
  ASSERT_NE(port, nullptr) << EalEnvironment::error();
  dpdk::PortIo io(*port, 0, {10, 0, 9, 1});
  auto map = std::make_shared<ScatteredMap>(test_seed());
  map->fail_lookups();
  io.use_iova_map(map);
  Memory region(8 * kPage);
  io.register_memory(region.p, region.bytes);
  EXPECT_EQ(io.counters().regions_iova_unknown, 1u);
  EXPECT_EQ(io.counters().regions_registered, 0u);
  const Sent sent = send_and_check(*port, io, *map, region, test_seed(), 20);
  EXPECT_EQ(sent.frames, 20);
  EXPECT_EQ(sent.external_segments, 0) << "the device was sent into memory whose addresses are unknown";
  EXPECT_GE(io.counters().tx_copied_unregistered, 20u);
  io.unregister_memory(region.p, region.bytes);
}

// A model IOMMU `bits` wide: a mapping whose IOVAs pass 2^bits is
// refused (EINVAL, as vfio says), others are kept, and the device reads
// through them.
class ModelIommu {
 public:
  explicit ModelIommu(unsigned bits) : limit_(std::uint64_t{1} << bits) {}
  dpdk::PortIo::DmaMapper mapper() {
    dpdk::PortIo::DmaMapper m;
    m.map = [](void* arg, void* va, std::uint64_t iova, std::size_t bytes) {
      auto* self = static_cast<ModelIommu*>(arg);
      if (iova + bytes > self->limit_) {
        rte_errno = EINVAL;
        return -1;
      }
      self->maps_[iova] = {reinterpret_cast<std::uintptr_t>(va), bytes};
      return 0;
    };
    m.unmap = [](void* arg, void*, std::uint64_t iova, std::size_t) {
      auto* self = static_cast<ModelIommu*>(arg);
      return self->maps_.erase(iova) == 1 ? 0 : -1;
    };
    m.arg = this;
    return m;
  }
  // The bytes the device reads at [iova, iova + len): false if unmapped.
  bool read(std::uint64_t iova, std::size_t len, std::vector<std::uint8_t>& out) const {
    auto it = maps_.upper_bound(iova);
    if (it == maps_.begin()) return false;
    --it;
    if (iova + len > it->first + it->second.second) return false;
    const auto* p = reinterpret_cast<const std::uint8_t*>(it->second.first + (iova - it->first));
    out.insert(out.end(), p, p + len);
    return true;
  }
  std::size_t mappings() const { return maps_.size(); }
  std::uint64_t first_iova() const { return maps_.empty() ? 0 : maps_.begin()->first; }

 private:
  std::uint64_t limit_;
  std::map<std::uint64_t, std::pair<std::uintptr_t, std::size_t>> maps_;
};

// IOVA as VA behind an IOMMU narrower than the process's addresses (qemu's
// intel-iommu and many client CPUs: 39 bits; mmap memory lives near 2^47):
// the region is mapped at an IOVA uroce chose, and every frame's payload
// segments carry it.
TEST(PortIova, AnIommuThatCannotReachARegionsAddressesGetsAnIovaOfOurs) {
  const std::uint64_t seed = test_seed();
  dpdk::Port* port = PortEnvironment::port();
  ASSERT_NE(port, nullptr) << EalEnvironment::error();
  dpdk::PortIo io(*port, 0, {10, 0, 9, 1});
  ModelIommu iommu(39);
  io.use_dma_mapper(iommu.mapper());
  Memory region(16 * kPage);
  ASSERT_GT(reinterpret_cast<std::uintptr_t>(region.p), std::uintptr_t{1} << 39) << "the test needs memory above 2^39";
  io.register_memory(region.p, region.bytes);
  EXPECT_EQ(io.counters().regions_iova_chosen, 1u);
  EXPECT_EQ(io.counters().regions_dma_mapped, 1u);
  ASSERT_EQ(iommu.mappings(), 1u);
  const std::uint64_t chosen = iommu.first_iova();
  EXPECT_LT(chosen + region.bytes, std::uint64_t{1} << 32);
  std::mt19937_64 rng(seed);
  for (int n = 0; n < 100; ++n) {
    TxFrame f;
    ASSERT_TRUE(head_only_frame(io, f));
    f.npieces = 1;
    const std::size_t len = 512 + rng() % 3585;
    const std::size_t off = rng() % (region.bytes - len);
    f.pieces[0] = std::span<const std::uint8_t>(region.p + off, len);
    ASSERT_EQ(io.tx_burst(&f, 1), 1);
    rte_mbuf* m = nullptr;
    ASSERT_EQ(rte_eth_rx_burst(port->id(), 0, &m, 1), 1);
    std::vector<std::uint8_t> read;
    for (rte_mbuf* s = m; s != nullptr; s = s->next) {
      if (!RTE_MBUF_HAS_EXTBUF(s)) continue;
      EXPECT_TRUE(iommu.read(s->buf_iova + s->data_off, s->data_len, read)) << "frame " << n << " " << seed_note(seed);
    }
    EXPECT_EQ(read, std::vector<std::uint8_t>(region.p + off, region.p + off + len)) << "frame " << n << " " << seed_note(seed);
    rte_pktmbuf_free(m);
  }
  EXPECT_EQ(io.counters().tx_zero_copy_frames, 100u);
  io.unregister_memory(region.p, region.bytes);
  EXPECT_EQ(iommu.mappings(), 0u);
  // The IOVA range went back: the next region gets it again.
  io.register_memory(region.p, region.bytes);
  EXPECT_EQ(iommu.first_iova(), chosen);
  io.unregister_memory(region.p, region.bytes);
}

// A frame the device refuses goes back to the engine and is offered
// again: the port counts what it sent, once, not each offer (the memif
// stall under load showed millions of zero-copy frames for a few thousand
// sent).
TEST(PortCounters, FramesTheDeviceRefusesAreNotCounted) {
  dpdk::Port* port = PortEnvironment::port();
  ASSERT_NE(port, nullptr) << EalEnvironment::error();
  dpdk::PortIo io(*port, 0, {10, 0, 9, 1});
  Memory region(4 * kPage);
  io.register_memory(region.p, region.bytes);
  // Until the ring is full, and three more offers of a refused frame.
  std::uint64_t taken = 0;
  int refusals = 0;
  for (int n = 0; n < 20000 && refusals < 3; ++n) {
    TxFrame f;
    ASSERT_TRUE(head_only_frame(io, f));
    f.npieces = 1;
    f.pieces[0] = std::span<const std::uint8_t>(region.p + 100, 1000);
    if (io.tx_burst(&f, 1) == 1) {
      ++taken;
    } else {
      io.tx_heads_return(&f.head, 1);
      ++refusals;
    }
  }
  ASSERT_EQ(refusals, 3) << "the ring never filled";
  EXPECT_EQ(io.counters().tx_zero_copy_frames, taken);
  EXPECT_EQ(io.counters().tx_zero_copy_bytes, taken * 1000);
  for (rte_mbuf* m[32]; std::uint16_t got = rte_eth_rx_burst(port->id(), 0, m, 32);) rte_pktmbuf_free_bulk(m, got);
  io.unregister_memory(region.p, region.bytes);
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new uroce::test::PortEnvironment);
  return RUN_ALL_TESTS();
}
