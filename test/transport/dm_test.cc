// Device memory in process (Context::alloc_dm, ibv_alloc_dm's rules) on the
// simulated link: the budget of max_dm_size, 4-byte words for the copies,
// zero-based regions that must lie inside the memory, free refused while a
// region is on it, and traffic: SENDs and RDMA WRITEs into regions of it,
// SENDs and READs out of them, a peer's access past a region refused.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "support/rc_fixture.h"

namespace uroce::test {
namespace {

constexpr int kLocal = IBV_ACCESS_LOCAL_WRITE;
constexpr int kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

TEST(DeviceMemory, AllocationsStayWithinMaxDmSize) {
  device::SimPair net(1);
  Context& ctx = *net.a;
  const std::uint64_t max = ctx.limits().max_dm_size;
  ASSERT_GT(max, 0u);
  EXPECT_EQ(ctx.alloc_dm(0), nullptr);
  EXPECT_EQ(ctx.alloc_dm(max + 1), nullptr);
  EXPECT_NE(ctx.last_error().find("max_dm_size"), std::string::npos) << ctx.last_error();
  DeviceMemory* half = ctx.alloc_dm(max / 2);
  DeviceMemory* rest = ctx.alloc_dm(max - max / 2);
  ASSERT_NE(half, nullptr) << ctx.last_error();
  ASSERT_NE(rest, nullptr) << ctx.last_error();
  EXPECT_EQ(ctx.alloc_dm(4), nullptr) << "the whole budget is held";
  EXPECT_EQ(ctx.free_dm(half), 0);
  DeviceMemory* again = ctx.alloc_dm(max / 2);
  ASSERT_NE(again, nullptr) << ctx.last_error();
  // Fresh memory reads back as zeros.
  std::vector<std::uint8_t> seen(64, 0xee);
  ASSERT_EQ(again->copy_from(seen.data(), 0, seen.size()), 0);
  EXPECT_EQ(seen, std::vector<std::uint8_t>(64, 0));
  // Memory of another context, or freed, is not this context's.
  DeviceMemory* other = net.b->alloc_dm(64);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(ctx.free_dm(other), EINVAL);
  EXPECT_EQ(ctx.free_dm(again), 0);
  EXPECT_EQ(ctx.free_dm(rest), 0);
  EXPECT_EQ(ctx.free_dm(rest), EINVAL);
  // Each allocation holds whole pages of the budget, however small.
  std::vector<DeviceMemory*> words;
  for (DeviceMemory* w; (w = ctx.alloc_dm(4)) != nullptr && words.size() <= max / 4096;) words.push_back(w);
  EXPECT_EQ(words.size(), max / 4096);
  for (DeviceMemory* w : words) EXPECT_EQ(ctx.free_dm(w), 0);
}

TEST(DeviceMemory, CopiesMoveWholeWordsInsideTheMemory) {
  device::SimPair net(2);
  DeviceMemory* dm = net.a->alloc_dm(100);
  ASSERT_NE(dm, nullptr);
  std::uint8_t in[96], out[96] = {};
  for (std::size_t i = 0; i < sizeof in; ++i) in[i] = static_cast<std::uint8_t>(i * 7 + 1);
  ASSERT_EQ(dm->copy_to(4, in, sizeof in), 0);
  ASSERT_EQ(dm->copy_from(out, 4, sizeof out), 0);
  EXPECT_EQ(std::memcmp(in, out, sizeof in), 0);
  // As rdma-core's test_dm_bad_access: unaligned offset, unaligned length,
  // offset or length past the memory.
  for (auto [offset, length] : {std::pair<std::uint64_t, std::size_t>{3, 4}, {4, 3}, {104, 4}, {0, 104}, {96, 8}}) {
    EXPECT_EQ(dm->copy_to(offset, in, length), EINVAL) << offset << "+" << length;
    EXPECT_EQ(dm->copy_from(out, offset, length), EINVAL) << offset << "+" << length;
  }
  EXPECT_EQ(dm->copy_to(96, in, 4), 0) << "the last word";
}

TEST(DeviceMemory, RegionsAreZeroBasedInsideTheMemoryAndHoldIt) {
  device::SimPair net(3);
  ProtectionDomain* pd = net.a->alloc_pd();
  DeviceMemory* dm = net.a->alloc_dm(100);
  ASSERT_NE(dm, nullptr);
  EXPECT_EQ(pd->reg_dm_mr(dm, 0, 104, kLocal), nullptr) << "past the memory (test_dm_bad_registration)";
  EXPECT_EQ(pd->reg_dm_mr(dm, 100, 4, kLocal), nullptr);
  EXPECT_EQ(pd->reg_dm_mr(dm, 0, 100, IBV_ACCESS_REMOTE_WRITE), nullptr) << "REMOTE_WRITE without LOCAL_WRITE";
  DeviceMemory* other = net.b->alloc_dm(100);
  EXPECT_EQ(pd->reg_dm_mr(other, 0, 100, kLocal), nullptr) << "another context's memory";
  MemoryRegion* mr = pd->reg_dm_mr(dm, 8, 64, kRemote);
  ASSERT_NE(mr, nullptr) << net.a->last_error();
  EXPECT_EQ(mr->iova, 0u);
  EXPECT_EQ(mr->length, 64u);
  EXPECT_EQ(mr->dm, dm);
  EXPECT_EQ(net.a->free_dm(dm), EBUSY);
  EXPECT_NE(net.a->last_error().find("deregister"), std::string::npos) << net.a->last_error();
  // A region of no bytes (rdma-core's test_create_dm_mr registers one):
  // only zero-length accesses pass it.
  MemoryRegion* empty = pd->reg_dm_mr(dm, 4, 0, kLocal);
  ASSERT_NE(empty, nullptr) << net.a->last_error();
  std::uint8_t* host = nullptr;
  const mem::MrTable& table = testing::mr_table(*net.a);
  EXPECT_EQ(table.check(empty->lkey, false, pd->id(), 0, 0, IBV_ACCESS_LOCAL_WRITE, host), mem::AccessResult::kOk);
  EXPECT_EQ(table.check(empty->lkey, false, pd->id(), 0, 1, IBV_ACCESS_LOCAL_WRITE, host),
            mem::AccessResult::kOutOfBounds);
  EXPECT_EQ(pd->dereg_mr(mr), 0);
  EXPECT_EQ(net.a->free_dm(dm), EBUSY);
  EXPECT_EQ(pd->dereg_mr(empty), 0);
  EXPECT_EQ(net.a->free_dm(dm), 0);
}

// A's and B's regions on device memory, zero-based, on a connected RC pair.
struct DmRig : RcPair {
  explicit DmRig(std::uint64_t seed) : RcPair(seed, kBytes) {
    dma = net.a->alloc_dm(kDm);
    dmb = net.b->alloc_dm(kDm);
    if (dma == nullptr || dmb == nullptr) return;
    // B's region starts 256 bytes into its memory: address 0 of the region
    // is byte 256 of the memory.
    dmra = pda->reg_dm_mr(dma, 0, kDm, kRemote);
    dmrb = pdb->reg_dm_mr(dmb, 256, kDm - 256, kRemote);
  }
  bool ready() const { return connect_rc == 0 && dmra != nullptr && dmrb != nullptr; }
  static constexpr std::size_t kBytes = 1 << 16;
  static constexpr std::size_t kDm = 8192;
  DeviceMemory* dma = nullptr;
  DeviceMemory* dmb = nullptr;
  MemoryRegion* dmra = nullptr;
  MemoryRegion* dmrb = nullptr;
};

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

TEST(DeviceMemory, SendsGoFromAndLandInDeviceMemory) {
  DmRig r(4);
  ASSERT_TRUE(r.ready()) << r.net.a->last_error() << r.net.b->last_error();
  const auto data = pattern(3000, 4);  // three 1 KiB packets
  ASSERT_EQ(r.dma->copy_to(1024, data.data(), data.size()), 0);
  // SGEs address the regions from 0: A's region is its whole memory, B's
  // starts 256 bytes in.
  ASSERT_EQ(post_recv_one(r.qb, reinterpret_cast<const void*>(std::uintptr_t{512}), 4096, r.dmrb->lkey, 7), 0);
  ASSERT_EQ(post_send_one(r.qa, IBV_WR_SEND, reinterpret_cast<const void*>(std::uintptr_t{1024}), 3000, r.dmra->lkey, 8),
            0);
  const auto wa = r.wait(r.cqa, 1);
  const auto wb = r.wait(r.cqb, 1);
  ASSERT_EQ(wa.size(), 1u);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].byte_len, 3000u);
  std::vector<std::uint8_t> got(3000);
  ASSERT_EQ(r.dmb->copy_from(got.data(), 256 + 512, got.size()), 0);
  EXPECT_EQ(got, data);
}

TEST(DeviceMemory, PeersWriteAndReadDeviceMemoryByItsRegionsKeys) {
  DmRig r(5);
  ASSERT_TRUE(r.ready());
  const auto data = pattern(2048, 5);
  std::memcpy(r.bufa, data.data(), data.size());
  // WRITE from A's host memory to offset 64 of B's region.
  ASSERT_EQ(post_rdma(r.qa, IBV_WR_RDMA_WRITE, r.bufa, 2048, r.mra->lkey, std::uint64_t{64}, r.dmrb->rkey, 1), 0);
  auto w = r.wait(r.cqa, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_SUCCESS);
  std::vector<std::uint8_t> got(2048);
  ASSERT_EQ(r.dmb->copy_from(got.data(), 256 + 64, got.size()), 0);
  EXPECT_EQ(got, data);
  // READ it back into A's device memory.
  ASSERT_EQ(post_rdma(r.qa, IBV_WR_RDMA_READ, reinterpret_cast<const void*>(std::uintptr_t{4096}), 2048, r.dmra->lkey,
                      std::uint64_t{64}, r.dmrb->rkey, 2),
            0);
  w = r.wait(r.cqa, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_SUCCESS);
  std::fill(got.begin(), got.end(), 0);
  ASSERT_EQ(r.dma->copy_from(got.data(), 4096, got.size()), 0);
  EXPECT_EQ(got, data);
}

TEST(DeviceMemory, AWriteBeyondTheRegionIsARemoteAccessError) {
  DmRig r(6);
  ASSERT_TRUE(r.ready());
  const std::uint64_t end = DmRig::kDm - 256;  // B's region's length
  ASSERT_EQ(post_rdma(r.qa, IBV_WR_RDMA_WRITE, r.bufa, 64, r.mra->lkey, end - 32, r.dmrb->rkey, 1), 0);
  const auto w = r.wait(r.cqa, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_REM_ACCESS_ERR);
  // Nothing landed: the region's last 32 bytes are still zeros.
  std::vector<std::uint8_t> got(32, 0xee);
  ASSERT_EQ(r.dmb->copy_from(got.data(), 256 + end - 32, got.size()), 0);
  EXPECT_EQ(got, std::vector<std::uint8_t>(32, 0));
}

}  // namespace
}  // namespace uroce::test
