// On-demand paging on the simulated link: ODP regions (explicit and
// implicit) are neither populated nor pinned, carry every operation, and a
// page that is not mapped ends the transfer with the verbs' error (a local
// protection error here, a remote access NAK to a peer) while the engine
// goes on: it never touches an ODP page with a load or store.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "support/rc_fixture.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

constexpr std::size_t kPage = 4096;
constexpr std::uint8_t kNakRemoteAccess = 0x62;
constexpr std::uint8_t kNakRemoteOperational = 0x63;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND;

// Anonymous pages, never touched: no page resident until something writes.
struct Pages {
  explicit Pages(std::size_t n) : bytes(n * kPage) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base = p == MAP_FAILED ? nullptr : static_cast<std::uint8_t*>(p);
  }
  ~Pages() {
    if (base != nullptr) munmap(base, bytes);
  }
  std::size_t resident() const {
    std::vector<unsigned char> v(bytes / kPage);
    if (mincore(base, bytes, v.data()) != 0) return SIZE_MAX;
    std::size_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return n;
  }
  // Unmaps page `i` (a hole the program made after registering).
  void unmap(std::size_t i) { ASSERT_EQ(munmap(base + i * kPage, kPage), 0); }
  std::uint8_t* page(std::size_t i) const { return base + i * kPage; }
  std::uint8_t* base = nullptr;
  std::size_t bytes;
};

// The AETH syndromes of the ACK/NAK packets side 1 (B) sent; `then` sees
// every frame as it leaves (before the other side has it).
struct NakLog {
  explicit NakLog(RcPair& p) {
    p.net.link.observe([this](int from, std::span<const std::uint8_t> f) {
      wire::ParsedFrame parsed;
      if (wire::parse_frame(f, parsed) != wire::ParseStatus::kOk) return;
      if (then) then(from, parsed);
      if (from != 1) return;
      if (parsed.opcode == 0x11 && parsed.has(wire::ExtHdr::kAeth)) syndromes.push_back(parsed.aeth().syndrome);
    });
  }
  std::function<void(int, const wire::ParsedFrame&)> then;
  std::size_t count(std::uint8_t s) const { return static_cast<std::size_t>(std::count(syndromes.begin(), syndromes.end(), s)); }
  std::vector<std::uint8_t> syndromes;
};

class Odp : public ::testing::Test {
 protected:
  Odp() : p(17, 1 << 20), naks(p) {}

  ibv_wc one(CompletionQueue* cq) {
    const auto got = p.wait(cq, 1);
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? ibv_wc{} : got[0];
  }

  RcPair p;
  NakLog naks;
};

TEST_F(Odp, RegistrationNeitherPopulatesNorNeedsTheMemory) {
  Pages b(16);
  ASSERT_NE(b.base, nullptr);
  MemoryRegion* mr = p.pdb->reg_mr(b.base, b.bytes, kAll);
  ASSERT_NE(mr, nullptr) << p.net.b->last_error();
  EXPECT_EQ(b.resident(), 0u) << "reg_mr populated an on-demand region";
  // Memory that is not mapped at all registers too (ODP needs no mapping).
  b.unmap(3);
  MemoryRegion* hole = p.pdb->reg_mr(b.page(3), kPage, kAll);
  EXPECT_NE(hole, nullptr) << p.net.b->last_error();
  // The implicit region: every address; NULL without ON_DEMAND is refused.
  MemoryRegion* all = p.pdb->reg_mr(nullptr, SIZE_MAX, kAll);
  ASSERT_NE(all, nullptr) << p.net.b->last_error();
  EXPECT_EQ(all->iova, 0u);
  EXPECT_EQ(p.pdb->reg_mr(nullptr, SIZE_MAX, kAll & ~IBV_ACCESS_ON_DEMAND), nullptr);
  EXPECT_EQ(p.pdb->reg_mr(nullptr, 4096, kAll), nullptr);
  // Remote write without local write is refused as for any region.
  EXPECT_EQ(p.pdb->reg_mr(b.base, kPage, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND), nullptr);
  EXPECT_EQ(p.pdb->dereg_mr(all), 0);
  EXPECT_EQ(p.pdb->dereg_mr(hole), 0);
  EXPECT_EQ(p.pdb->dereg_mr(mr), 0);
}

// WRITE, READ, SEND and both atomics with ODP memory at both ends, compared
// byte for byte (seeded data; a multi-packet message crosses pages).
TEST_F(Odp, EveryOperationMovesTheBytesBetweenOdpRegions) {
  const std::uint32_t seed = 20261206;
  SCOPED_TRACE("seed " + std::to_string(seed));
  Pages a(8), b(8);
  MemoryRegion* ma = p.pda->reg_mr(a.base, a.bytes, kAll);
  MemoryRegion* mb = p.pdb->reg_mr(b.base, b.bytes, kAll);
  ASSERT_NE(ma, nullptr);
  ASSERT_NE(mb, nullptr);
  std::mt19937 rng(seed);
  const std::uint32_t len = 3 * kPage + 123;  // several MTUs, page-crossing
  for (std::uint32_t i = 0; i < len; ++i) a.base[i + 7] = static_cast<std::uint8_t>(rng());

  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_WRITE, a.base + 7, len, ma->lkey, b.base + 100, mb->rkey, 1), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a.base + 7, b.base + 100, len), 0);

  std::memset(a.page(5), 0, kPage);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_READ, a.page(5), 2000, ma->lkey, b.base + 100, mb->rkey, 2), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a.page(5), a.base + 7, 2000), 0);

  ASSERT_EQ(post_recv_one(p.qb, b.page(6), 2 * kPage, mb->lkey, 3), 0);
  ASSERT_EQ(post_send_one(p.qa, IBV_WR_SEND, a.base + 7, 5000, ma->lkey, 4), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_SUCCESS);
  const ibv_wc r = one(p.cqb);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, 5000u);
  EXPECT_EQ(std::memcmp(b.page(6), a.base + 7, 5000), 0);

  auto* target = reinterpret_cast<std::uint64_t*>(b.page(4));
  *target = 40;
  ibv_sge sge{reinterpret_cast<std::uint64_t>(a.page(7)), 8, ma->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = reinterpret_cast<std::uint64_t>(target);
  wr.wr.atomic.rkey = mb->rkey;
  wr.wr.atomic.compare_add = 2;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(p.qa->post_send(&wr, &bad), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_SUCCESS);
  EXPECT_EQ(*target, 42u);
  EXPECT_EQ(*reinterpret_cast<std::uint64_t*>(a.page(7)), 40u);
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 42;
  wr.wr.atomic.swap = 7;
  ASSERT_EQ(p.qa->post_send(&wr, &bad), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_SUCCESS);
  EXPECT_EQ(*target, 7u);
  EXPECT_EQ(*reinterpret_cast<std::uint64_t*>(a.page(7)), 42u);
  EXPECT_EQ(p.qb->counter("odp_unmapped"), 0u);
}

TEST_F(Odp, ImplicitRegionReachesAnyMappedAddress) {
  Pages b(2);
  MemoryRegion* all = p.pdb->reg_mr(nullptr, SIZE_MAX, kAll);
  ASSERT_NE(all, nullptr);
  std::memcpy(p.bufa, "on demand", 10);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_WRITE, p.bufa, 10, p.mra->lkey, b.page(1) + 5, all->rkey, 1), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<char*>(b.page(1) + 5), "on demand");
  // A's own stack is in the implicit region too: B's buffer is read into it.
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_READ, p.bufa + 64, 10, p.mra->lkey, b.page(1) + 5, all->rkey, 2), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<char*>(p.bufa + 64), "on demand");
}

// The adversarial case: a WRITE into a page of an implicit region
// that is not mapped is NAKed (remote access error), counted, and the
// engine lives on (this process would have died of SIGSEGV otherwise).
TEST_F(Odp, WriteIntoAnUnmappedPageOfAnImplicitRegionIsNaked) {
  Pages b(4);
  b.unmap(2);
  MemoryRegion* all = p.pdb->reg_mr(nullptr, SIZE_MAX, kAll);
  ASSERT_NE(all, nullptr);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_WRITE, p.bufa, 64, p.mra->lkey, b.page(2) + 64, all->rkey, 1), 0);
  const ibv_wc wc = one(p.cqa);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << wc_status_str(wc.status);
  EXPECT_EQ(naks.count(kNakRemoteAccess), 1u);
  EXPECT_EQ(p.qb->counter("odp_unmapped"), 1u);
  EXPECT_EQ(p.qb->state(), IBV_QPS_ERR);
  // A WRITE that starts on a mapped page and runs into the hole: the same.
  RcPair q(18, 1 << 16);
  MemoryRegion* all_q = q.pdb->reg_mr(nullptr, SIZE_MAX, kAll);
  ASSERT_EQ(post_rdma(q.qa, IBV_WR_RDMA_WRITE, q.bufa, 8192, q.mra->lkey, b.page(1), all_q->rkey, 1), 0);
  const auto got = q.wait(q.cqa, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(q.qb->counter("odp_unmapped"), 1u);
  // The engines carry on: a new pair moves data.
  RcPair r(19, 1 << 16);
  ASSERT_EQ(r.post_send(IBV_WR_RDMA_WRITE, 0, 4096, 0), 0);
  const auto ok = r.wait(r.cqa, 1);
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].status, IBV_WC_SUCCESS);
}

TEST_F(Odp, ReadAndAtomicOnAnUnmappedRemotePageAreNaked) {
  Pages b(2);
  MemoryRegion* mb = p.pdb->reg_mr(b.base, b.bytes, kAll);
  ASSERT_NE(mb, nullptr);
  b.unmap(1);  // after registering: munmap of an ODP region's page
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_READ, p.bufa, 5000, p.mra->lkey, b.base, mb->rkey, 1), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(naks.count(kNakRemoteAccess), 1u);
  EXPECT_EQ(p.qb->counter("odp_unmapped"), 1u);

  RcPair q(21, 1 << 16);
  MemoryRegion* mq = q.pdb->reg_mr(b.base, b.bytes, kAll);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(q.bufa), 8, q.mra->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = reinterpret_cast<std::uint64_t>(b.page(1));
  wr.wr.atomic.rkey = mq->rkey;
  wr.wr.atomic.compare_add = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(q.qa->post_send(&wr, &bad), 0);
  const auto got = q.wait(q.cqa, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(q.qb->counter("odp_unmapped"), 1u);
}

// A local SGE on an unmapped page of an ODP region: the WR ends with a
// local protection error and nothing goes on the wire for it.
TEST_F(Odp, LocalSgeOnAnUnmappedPageIsALocalProtectionError) {
  Pages a(3);
  MemoryRegion* ma = p.pda->reg_mr(a.base, a.bytes, kAll);
  ASSERT_NE(ma, nullptr);
  a.unmap(1);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_WRITE, a.page(1), 100, ma->lkey, p.bufb, p.mrb->rkey, 1), 0);
  const ibv_wc wc = one(p.cqa);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << wc_status_str(wc.status);
  EXPECT_EQ(p.qa->counter("odp_unmapped"), 1u);
  EXPECT_EQ(p.qa->state(), IBV_QPS_ERR);
}

// A READ whose local buffer loses its page: the response cannot be placed,
// a local protection error on the requester.
TEST_F(Odp, ReadIntoAnUnmappedLocalPageIsALocalProtectionError) {
  Pages a(3);
  MemoryRegion* ma = p.pda->reg_mr(a.base, a.bytes, kAll);
  ASSERT_NE(ma, nullptr);
  a.unmap(2);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_READ, a.page(1), 2 * kPage, ma->lkey, p.bufb, p.mrb->rkey, 1), 0);
  const ibv_wc wc = one(p.cqa);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << wc_status_str(wc.status);
  EXPECT_EQ(p.qa->counter("odp_unmapped"), 1u);
}

// A receive WQE on an unmapped page: the receive ends with a local
// protection error and the sender gets a remote operational NAK (as for a
// receive WQE whose lkey fails, 11.6.2).
TEST_F(Odp, SendIntoAnUnmappedReceiveBufferIsRefused) {
  Pages b(2);
  MemoryRegion* mb = p.pdb->reg_mr(b.base, b.bytes, kAll);
  ASSERT_NE(mb, nullptr);
  b.unmap(0);
  ASSERT_EQ(post_recv_one(p.qb, b.base, 256, mb->lkey, 9), 0);
  ASSERT_EQ(post_send_one(p.qa, IBV_WR_SEND, p.bufa, 256, p.mra->lkey, 1), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_REM_OP_ERR);
  const ibv_wc r = one(p.cqb);
  EXPECT_EQ(r.wr_id, 9u);
  EXPECT_EQ(r.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(naks.count(kNakRemoteOperational), 1u);
  EXPECT_EQ(p.qb->counter("odp_unmapped"), 1u);
}

// Pages that go while a message is under way (munmap by another thread of
// the program): at a 256-byte MTU a 16 KiB WRITE or READ leaves in bursts
// of 32 packets; its last page goes as its first packet leaves, so a later
// packet (WRITE) or response (READ) meets the hole and the transfer ends
// with a remote access NAK there, the bytes before it placed.
TEST(OdpInFlight, APageUnmappedMidWriteEndsItWithANak) {
  ConnectParams params;
  params.mtu = IBV_MTU_256;
  RcPair p(23, 1 << 16, params);
  NakLog naks(p);
  Pages b(4);
  MemoryRegion* mb = p.pdb->reg_mr(b.base, b.bytes, kAll);
  ASSERT_NE(mb, nullptr);
  bool gone = false;
  naks.then = [&](int from, const wire::ParsedFrame&) {
    if (from == 0 && !gone) {
      gone = true;
      b.unmap(3);
    }
  };
  std::memset(p.bufa, 0x3c, 4 * kPage);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_WRITE, p.bufa, 4 * kPage, p.mra->lkey, b.base, mb->rkey, 1), 0);
  const auto got = p.wait(p.cqa, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(b.base[0], 0x3c);
  EXPECT_EQ(b.page(2)[kPage - 1], 0x3c);
  EXPECT_EQ(naks.count(kNakRemoteAccess), 1u);
  EXPECT_EQ(p.qb->counter("odp_unmapped"), 1u);
}

TEST(OdpInFlight, APageUnmappedMidReadEndsItWithANak) {
  ConnectParams params;
  params.mtu = IBV_MTU_256;
  RcPair p(24, 1 << 16, params);
  NakLog naks(p);
  Pages b(4);
  MemoryRegion* mb = p.pdb->reg_mr(b.base, b.bytes, kAll);
  ASSERT_NE(mb, nullptr);
  std::memset(b.base, 0x5a, b.bytes);
  // The request is checked whole when it comes; the page goes as the first
  // response leaves.
  bool gone = false;
  naks.then = [&](int from, const wire::ParsedFrame&) {
    if (from == 1 && !gone) {
      gone = true;
      b.unmap(3);
    }
  };
  std::memset(p.bufa, 0, 4 * kPage);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_RDMA_READ, p.bufa, 4 * kPage, p.mra->lkey, b.base, mb->rkey, 1), 0);
  const auto got = p.wait(p.cqa, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(p.bufa[0], 0x5a);
  EXPECT_EQ(naks.count(kNakRemoteAccess), 1u);
  EXPECT_EQ(p.qb->counter("odp_unmapped"), 1u);
}

TEST_F(Odp, AdviseMrPrefetchesOdpRangesAndRefusesTheRest) {
  Pages b(8);
  MemoryRegion* mb = p.pdb->reg_mr(b.base, b.bytes, kAll);
  ASSERT_NE(mb, nullptr);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(b.page(2)), 3 * kPage, mb->lkey};
  EXPECT_EQ(p.pdb->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1), 0);
  EXPECT_EQ(b.resident(), 0u);
  EXPECT_EQ(p.pdb->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0);
  EXPECT_EQ(b.resident(), 3u);
  EXPECT_EQ(p.pdb->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), 0);
  // Refused: another advice, unknown flags, a pinned region, a bad key, a
  // range past the region, another PD's region, an unmapped page.
  EXPECT_EQ(p.pdb->advise_mr(7, 0, &sge, 1), ENOTSUP);
  EXPECT_EQ(p.pdb->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH, 2, &sge, 1), EINVAL);
  ibv_sge pinned{reinterpret_cast<std::uint64_t>(p.bufb), 64, p.mrb->lkey};
  EXPECT_EQ(p.pdb->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pinned, 1), EFAULT);
  ibv_sge bad_key = sge;
  bad_key.lkey ^= 0x100;
  EXPECT_EQ(p.pdb->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &bad_key, 1), EFAULT);
  ibv_sge past{reinterpret_cast<std::uint64_t>(b.page(7)), 2 * kPage, mb->lkey};
  EXPECT_EQ(p.pdb->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &past, 1), EFAULT);
  EXPECT_EQ(p.pda->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EFAULT);
  b.unmap(6);
  ibv_sge hole{reinterpret_cast<std::uint64_t>(b.page(6)), kPage, mb->lkey};
  EXPECT_EQ(p.pdb->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &hole, 1), EFAULT);
  MemoryRegion* ro = p.pdb->reg_mr(b.base, kPage, IBV_ACCESS_ON_DEMAND);
  ibv_sge ro_sge{reinterpret_cast<std::uint64_t>(b.base), 8, ro->lkey};
  EXPECT_EQ(p.pdb->advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &ro_sge, 1), EPERM);
}

}  // namespace
}  // namespace uroce::test
