// Memory windows (IBTA 10.6.7) and IBA 1.5 ATOMIC WRITE on a simulated link:
// the region table's rules alone, then windows bound, used, invalidated
// (locally and by a peer's SEND with Invalidate) and refused, and ATOMIC
// WRITE placed, answered and replayed under loss.
#include <gtest/gtest.h>

#include <cstring>

#include "mem/mr_table.h"
#include "support/rc_fixture.h"
#include "support/test_seed.h"
#include "support/work_requests.h"
#include "verbs/verbs_impl.h"

namespace uroce::test {
namespace {

using mem::AccessResult;
using mem::MrTable;
using mem::WindowBind;
using mem::WindowResult;

constexpr int kRemote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// --- The region table alone -----------------------------------------------------

struct Table {
  std::uint8_t bytes[1 << 16]{};
  MrTable t{64};
  std::uint32_t mr = 0;
  Table(int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) {
    EXPECT_EQ(t.add(7, bytes, 0x10000, sizeof bytes, access, mr), 0);
  }
  WindowBind bind(std::uint32_t window, std::uint64_t addr, std::uint64_t len, int access) const {
    WindowBind b;
    b.window_key = window;
    b.new_rkey = (window & ~0xffu) | ((window + 1) & 0xffu);
    b.mr_key = mr;
    b.addr = addr;
    b.length = len;
    b.access = access;
    return b;
  }
};

TEST(WindowTable, UnboundWindowGrantsNothingAndIsNeverAnLkey) {
  Table x;
  std::uint32_t w = 0;
  ASSERT_EQ(x.t.add_window(7, IBV_MW_TYPE_2, w), 0);
  std::uint8_t* host = nullptr;
  EXPECT_EQ(x.t.check_remote(w, 7, 5, 0x10000, 8, IBV_ACCESS_REMOTE_WRITE, host), AccessResult::kBadKey);
  const WindowBind b = x.bind(w, 0x10100, 256, kRemote);
  ASSERT_EQ(x.t.bind_window(b, 7, 5), WindowResult::kOk);
  EXPECT_EQ(x.t.check(b.new_rkey, false, 7, 0x10100, 8, 0, host), AccessResult::kBadKey);  // never an lkey
  EXPECT_EQ(x.t.check_remote(b.new_rkey, 7, 5, 0x10100, 256, IBV_ACCESS_REMOTE_WRITE, host), AccessResult::kOk);
  EXPECT_EQ(host, x.bytes + 0x100);
  EXPECT_EQ(x.t.check_remote(w, 7, 5, 0x10100, 8, IBV_ACCESS_REMOTE_WRITE, host), AccessResult::kBadKey)
      << "the allocation key is not the bound rkey";
  EXPECT_EQ(x.t.check_remote(b.new_rkey, 7, 5, 0x10100, 257, IBV_ACCESS_REMOTE_WRITE, host),
            AccessResult::kOutOfBounds);
  EXPECT_EQ(x.t.check_remote(b.new_rkey, 7, 6, 0x10100, 8, IBV_ACCESS_REMOTE_WRITE, host), AccessResult::kBadKey)
      << "a type 2 window's rkey works only on the QP that bound it";
  EXPECT_EQ(x.t.check_remote(b.new_rkey, 8, 5, 0x10100, 8, IBV_ACCESS_REMOTE_WRITE, host), AccessResult::kBadPd);
  EXPECT_EQ(x.t.check_remote(b.new_rkey, 7, 5, 0x10100, 8, IBV_ACCESS_REMOTE_ATOMIC, host), AccessResult::kNoAccess);
}

TEST(WindowTable, BindRulesRefuseAndLeaveTheWindowUnchanged) {
  Table x;
  std::uint32_t w = 0;
  ASSERT_EQ(x.t.add_window(7, IBV_MW_TYPE_2, w), 0);
  EXPECT_EQ(x.t.bind_window(x.bind(w, 0x10000, sizeof x.bytes + 1, kRemote), 7, 5), WindowResult::kOutOfBounds);
  EXPECT_EQ(x.t.bind_window(x.bind(w, 0xff00, 512, kRemote), 7, 5), WindowResult::kOutOfBounds);
  EXPECT_EQ(x.t.bind_window(x.bind(w, 0x10000, 64, kRemote), 8, 5), WindowResult::kWrongPd);
  WindowBind other = x.bind(w, 0x10000, 64, kRemote);
  other.new_rkey ^= 0x100;  // another slot
  EXPECT_EQ(x.t.bind_window(other, 7, 5), WindowResult::kWrongKey);
  std::uint8_t* host = nullptr;
  EXPECT_EQ(x.t.check_remote(x.bind(w, 0, 0, 0).new_rkey, 7, 5, 0x10000, 8, 0, host), AccessResult::kBadKey);

  Table no_bind(IBV_ACCESS_LOCAL_WRITE);  // C10-73
  ASSERT_EQ(no_bind.t.add_window(7, IBV_MW_TYPE_2, w), 0);
  EXPECT_EQ(no_bind.t.bind_window(no_bind.bind(w, 0x10000, 64, kRemote), 7, 5), WindowResult::kNoBindRight);

  Table read_only(IBV_ACCESS_MW_BIND);  // C10-74: remote write needs the region's local write
  ASSERT_EQ(read_only.t.add_window(7, IBV_MW_TYPE_2, w), 0);
  EXPECT_EQ(read_only.t.bind_window(read_only.bind(w, 0x10000, 64, IBV_ACCESS_REMOTE_WRITE), 7, 5),
            WindowResult::kNeedLocalWrite);
  EXPECT_EQ(read_only.t.bind_window(read_only.bind(w, 0x10000, 64, IBV_ACCESS_REMOTE_READ), 7, 5), WindowResult::kOk);
}

TEST(WindowTable, Type2IsBoundOnceUntilInvalidatedType1Rebinds) {
  Table x;
  std::uint32_t w2 = 0, w1 = 0;
  ASSERT_EQ(x.t.add_window(7, IBV_MW_TYPE_2, w2), 0);
  ASSERT_EQ(x.t.add_window(7, IBV_MW_TYPE_1, w1), 0);
  const WindowBind b2 = x.bind(w2, 0x10000, 64, kRemote);
  ASSERT_EQ(x.t.bind_window(b2, 7, 5), WindowResult::kOk);
  EXPECT_EQ(x.t.bind_window(b2, 7, 5), WindowResult::kStillBound);  // o10-37.2.30
  EXPECT_EQ(x.t.invalidate_window(b2.new_rkey, 8), WindowResult::kWrongPd);
  EXPECT_EQ(x.t.invalidate_window(b2.new_rkey, 7), WindowResult::kOk);
  EXPECT_EQ(x.t.bind_window(b2, 7, 5), WindowResult::kOk);
  EXPECT_EQ(x.t.invalidate(b2.new_rkey, 7), AccessResult::kOk);  // a peer's SEND with Invalidate
  std::uint8_t* host = nullptr;
  EXPECT_EQ(x.t.check_remote(b2.new_rkey, 7, 5, 0x10000, 8, IBV_ACCESS_REMOTE_READ, host), AccessResult::kBadKey);

  WindowBind b1 = x.bind(w1, 0x10000, 64, kRemote);
  ASSERT_EQ(x.t.bind_window(b1, 7, 0), WindowResult::kOk);
  EXPECT_EQ(x.t.check_remote(b1.new_rkey, 7, 99, 0x10000, 8, IBV_ACCESS_REMOTE_READ, host), AccessResult::kOk)
      << "a type 1 window works on any QP of its PD";
  EXPECT_EQ(x.t.invalidate_window(b1.new_rkey, 7), WindowResult::kNotInvalidatable);  // o10-37.2.26
  EXPECT_EQ(x.t.invalidate(b1.new_rkey, 7), AccessResult::kNoAccess);
  WindowBind again = x.bind(b1.new_rkey, 0x10000, 64, kRemote);
  ASSERT_EQ(x.t.bind_window(again, 7, 0), WindowResult::kOk);  // a type 1 rebind: new rkey, old one dead
  EXPECT_EQ(x.t.check_remote(b1.new_rkey, 7, 0, 0x10000, 8, IBV_ACCESS_REMOTE_READ, host), AccessResult::kBadKey);
  WindowBind zero = again;
  zero.access |= IBV_ACCESS_ZERO_BASED;
  EXPECT_EQ(x.t.bind_window(zero, 7, 0), WindowResult::kBadAccess);  // o10-36.2.2
}

TEST(WindowTable, RegionWithBoundWindowsStaysUntilTheyGo) {
  Table x;
  std::uint32_t w = 0;
  ASSERT_EQ(x.t.add_window(7, IBV_MW_TYPE_2, w), 0);
  const WindowBind b = x.bind(w, 0x10000, 64, kRemote | IBV_ACCESS_ZERO_BASED);
  ASSERT_EQ(x.t.bind_window(b, 7, 5), WindowResult::kOk);
  std::uint8_t* host = nullptr;
  EXPECT_EQ(x.t.check_remote(b.new_rkey, 7, 5, 8, 8, IBV_ACCESS_REMOTE_READ, host), AccessResult::kOk);
  EXPECT_EQ(host, x.bytes + 8) << "zero-based: the peer addresses the window from 0";
  EXPECT_EQ(x.t.remove(x.mr), EBUSY);
  EXPECT_EQ(x.t.regions_in_pd(7), 2u);
  EXPECT_EQ(x.t.remove(w), EINVAL) << "a window goes by remove_window";
  ASSERT_EQ(x.t.remove_window(w), 0);  // deallocating a bound window
  EXPECT_EQ(x.t.check_remote(b.new_rkey, 7, 5, 8, 8, IBV_ACCESS_REMOTE_READ, host), AccessResult::kBadKey);
  EXPECT_EQ(x.t.remove(x.mr), 0);
  EXPECT_EQ(x.t.regions_in_pd(7), 0u);
}

// ibv_rereg_mr of a region with a window bound is refused and changes
// nothing (the window keeps what it granted); once unbound it goes ahead. A
// window's own key is never a region to re-register.
TEST(WindowTable, ReregOfARegionWithAWindowBoundIsBusy) {
  Table x;
  std::uint32_t w = 0;
  ASSERT_EQ(x.t.add_window(7, IBV_MW_TYPE_2, w), 0);
  const WindowBind b = x.bind(w, 0x10000, 64, kRemote);
  ASSERT_EQ(x.t.bind_window(b, 7, 5), WindowResult::kOk);
  std::uint8_t other[4096];
  EXPECT_EQ(x.t.rereg(x.mr, 7, other, 0x20000, sizeof other, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND), EBUSY);
  std::uint8_t* host = nullptr;
  EXPECT_EQ(x.t.check(x.mr, false, 7, 0x10000, 8, 0, host), AccessResult::kOk);
  EXPECT_EQ(host, x.bytes) << "the refused rereg changed the region";
  EXPECT_EQ(x.t.rereg(b.new_rkey, 7, other, 0x20000, sizeof other, IBV_ACCESS_LOCAL_WRITE), EINVAL);
  ASSERT_EQ(x.t.invalidate_window(b.new_rkey, 7), WindowResult::kOk);
  EXPECT_EQ(x.t.rereg(x.mr, 7, other, 0x20000, sizeof other, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND), 0);
  EXPECT_EQ(x.t.check(x.mr, false, 7, 0x20000, 8, 0, host), AccessResult::kOk);
  EXPECT_EQ(host, other);
}

// A window bound on an on-demand region is reached as its region is: the
// peer's access through it names the region's owner, so the engine goes
// through the kernel (mem/odp.h), never a load or store.
TEST(WindowTable, AWindowOnAnOnDemandRegionCarriesItsOwner) {
  MrTable t{64};
  std::uint32_t mr = 0;
  ASSERT_EQ(t.add_odp(7, reinterpret_cast<void*>(0x7f0000000000), 0x7f0000000000, 1 << 20,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND, 4242, mr),
            0);
  std::uint32_t w = 0;
  ASSERT_EQ(t.add_window(7, IBV_MW_TYPE_2, w), 0);
  WindowBind b;
  b.window_key = w;
  b.new_rkey = (w & ~0xffu) | ((w + 1) & 0xffu);
  b.mr_key = mr;
  b.addr = 0x7f0000001000;
  b.length = 4096;
  b.access = kRemote;
  ASSERT_EQ(t.bind_window(b, 7, 5), WindowResult::kOk);
  std::uint8_t* host = nullptr;
  std::int32_t owner = 0;
  ASSERT_EQ(t.check_remote(b.new_rkey, 7, 5, 0x7f0000001010, 8, IBV_ACCESS_REMOTE_WRITE, host, owner),
            AccessResult::kOk);
  EXPECT_EQ(owner, 4242);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(host), 0x7f0000001010u);
  std::uint8_t pinned[64];
  std::uint32_t plain = 0;
  ASSERT_EQ(t.add(7, pinned, 0x1000, sizeof pinned, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, plain), 0);
  ASSERT_EQ(t.check_remote(plain, 7, 5, 0x1000, 8, IBV_ACCESS_REMOTE_WRITE, host, owner), AccessResult::kOk);
  EXPECT_EQ(owner, 0);
}

TEST(WindowTable, ADeallocatedWindowsKeysAreNotGivenToTheNextRegion) {
  std::uint8_t bytes[256];
  MrTable t{1};  // one slot: the next region takes the window's
  std::uint32_t mr = 0, w = 0;
  ASSERT_EQ(t.add(7, bytes, 0, sizeof bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, mr), 0);
  ASSERT_EQ(t.remove(mr), 0);
  ASSERT_EQ(t.add_window(7, IBV_MW_TYPE_2, w), 0);
  std::uint32_t keys[4] = {w, (w & ~0xffu) | ((w + 1) & 0xffu), (w & ~0xffu) | ((w + 2) & 0xffu), w ^ 0x80u};
  ASSERT_EQ(t.remove_window(w), 0);
  std::uint32_t next = 0;
  ASSERT_EQ(t.add(7, bytes, 0, sizeof bytes, IBV_ACCESS_LOCAL_WRITE, next), 0);
  for (std::uint32_t k : keys) EXPECT_NE(next, k) << "a key the window could have been bound as";
}

// --- On a live RC connection -----------------------------------------------------

// B's window over part of a region registered with MW_BIND; A writes and
// reads through it.
struct WindowPair : RcPair {
  WindowPair() : RcPair(3, 1 << 20) {
    region = pdb->reg_mr(bufb + 65536, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    EXPECT_NE(region, nullptr);
    verbs_region.lkey = region->lkey;
  }
  // Posts a bind of `mw` on B's QP and returns its completion.
  ibv_wc bind(MemoryWindow* mw, std::uint32_t rkey, std::uint64_t offset, std::uint64_t len, int access) {
    ibv_send_wr wr{};
    wr.wr_id = 900;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw->ibv();
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info.mr = &verbs_region;
    wr.bind_mw.bind_info.addr = reinterpret_cast<std::uint64_t>(bufb + 65536 + offset);
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(access);
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(qb->post_send(&wr, &bad), 0);
    return one(cqb);
  }
  ibv_wc one(CompletionQueue* cq) {
    const auto got = wait(cq, 1);
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? ibv_wc{} : got[0];
  }
  // A's WRITE of `len` bytes from its buffer to `remote` under `rkey`.
  ibv_wc write(std::uint64_t remote, std::uint32_t rkey, std::uint32_t len = 64) {
    EXPECT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, bufa, len, mra->lkey, remote, rkey, 5), 0);
    return one(cqa);
  }
  std::uint64_t at(std::uint64_t offset) const { return reinterpret_cast<std::uint64_t>(bufb + 65536 + offset); }
  static std::uint32_t next_key(std::uint32_t k) { return (k & ~0xffu) | ((k + 1) & 0xffu); }

  MemoryRegion* region = nullptr;
  ibv_mr verbs_region{};  // what IBV_WR_BIND_MW names: the region's lkey
};

TEST(MemoryWindows, Type2BoundWrittenThenRefusedBeyondIt) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  MemoryWindow* mw = p.pdb->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr) << p.net.b->last_error();
  const std::uint32_t rkey = WindowPair::next_key(mw->rkey());
  const ibv_wc b = p.bind(mw, rkey, 4096, 8192, kRemote);
  EXPECT_EQ(b.status, IBV_WC_SUCCESS) << wc_status_str(b.status);
  EXPECT_EQ(b.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(p.qb->counter("mw_binds"), 1u);
  fill_pattern(p.bufa, 64, 4);
  const ibv_wc w = p.write(p.at(4096 + 100), rkey);
  EXPECT_EQ(w.status, IBV_WC_SUCCESS) << wc_status_str(w.status);
  EXPECT_EQ(std::memcmp(p.bufb + 65536 + 4096 + 100, p.bufa, 64), 0);
  // Inside the region, outside the window: NAK, counted as a window's refusal.
  const ibv_wc beyond = p.write(p.at(4096 + 8192 - 32), rkey);
  EXPECT_EQ(beyond.status, IBV_WC_REM_ACCESS_ERR) << wc_status_str(beyond.status);
  EXPECT_EQ(p.qb->counter("drop_window_rkey"), 1u);
  EXPECT_EQ(p.qb->counter("drop_rkey_violation"), 0u);
}

TEST(MemoryWindows, ZeroBasedWindowIsAddressedFromZero) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  MemoryWindow* mw = p.pdb->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const std::uint32_t rkey = WindowPair::next_key(mw->rkey());
  ASSERT_EQ(p.bind(mw, rkey, 1024, 2048, kRemote | IBV_ACCESS_ZERO_BASED).status, IBV_WC_SUCCESS);
  fill_pattern(p.bufa, 64, 6);
  EXPECT_EQ(p.write(200, rkey).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(p.bufb + 65536 + 1024 + 200, p.bufa, 64), 0);
}

TEST(MemoryWindows, LocallyInvalidatedWindowIsRefused) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  MemoryWindow* mw = p.pdb->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const std::uint32_t rkey = WindowPair::next_key(mw->rkey());
  ASSERT_EQ(p.bind(mw, rkey, 0, 4096, kRemote).status, IBV_WC_SUCCESS);
  ASSERT_EQ(p.write(p.at(0), rkey).status, IBV_WC_SUCCESS);
  ibv_send_wr inv{};
  inv.wr_id = 901;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(p.qb->post_send(&inv, &bad), 0);
  const ibv_wc done = p.one(p.cqb);
  EXPECT_EQ(done.status, IBV_WC_SUCCESS) << wc_status_str(done.status);
  EXPECT_EQ(done.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(p.qb->counter("mw_invalidations"), 1u);
  std::memset(p.bufb + 65536, 0, 64);
  EXPECT_EQ(p.write(p.at(0), rkey).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(p.qb->counter("drop_window_rkey"), 1u);
  EXPECT_EQ(p.bufb[65536 + 5], 0) << "nothing placed through the invalidated window";
}

TEST(MemoryWindows, SendWithInvalidateRevokesTheWindow) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  MemoryWindow* mw = p.pdb->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const std::uint32_t rkey = WindowPair::next_key(mw->rkey());
  ASSERT_EQ(p.bind(mw, rkey, 0, 4096, kRemote).status, IBV_WC_SUCCESS);
  ASSERT_EQ(p.post_recv_b(0, 256, 77), 0);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(p.bufa), 16, p.mra->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 8;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(p.qa->post_send(&wr, &bad), 0);
  EXPECT_EQ(p.one(p.cqa).status, IBV_WC_SUCCESS);
  const ibv_wc r = p.one(p.cqb);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS) << wc_status_str(r.status);
  EXPECT_TRUE(r.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(r.invalidated_rkey, rkey);
  EXPECT_EQ(p.qb->counter("mw_invalidations"), 1u);
  EXPECT_EQ(p.write(p.at(0), rkey).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(p.qb->counter("drop_window_rkey"), 1u);
}

TEST(MemoryWindows, BindBeyondTheRegionEndsInBindError) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  MemoryWindow* mw = p.pdb->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const ibv_wc b = p.bind(mw, WindowPair::next_key(mw->rkey()), 4096, 65536, kRemote);
  EXPECT_EQ(b.status, IBV_WC_MW_BIND_ERR) << wc_status_str(b.status);
  EXPECT_EQ(p.qb->counter("mw_bind_errors"), 1u);
  EXPECT_EQ(p.qb->state(), IBV_QPS_ERR);
}

TEST(MemoryWindows, Type2WindowStillBoundIsNotBoundAgain) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  MemoryWindow* mw = p.pdb->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const std::uint32_t rkey = WindowPair::next_key(mw->rkey());
  ASSERT_EQ(p.bind(mw, rkey, 0, 64, kRemote).status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.bind(mw, WindowPair::next_key(rkey), 0, 64, kRemote).status, IBV_WC_MW_BIND_ERR);
}

TEST(MemoryWindows, Type1RebindMovesTheRkeyAndUnbindRevokes) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  MemoryWindow* mw = p.pdb->alloc_mw(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const std::uint32_t first = mw->rkey();
  ibv_mw_bind bind{};
  bind.wr_id = 40;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info.mr = &p.verbs_region;
  bind.bind_info.addr = p.at(0);
  bind.bind_info.length = 4096;
  bind.bind_info.mw_access_flags = kRemote;
  ASSERT_EQ(p.qb->bind_mw(mw, bind), 0);
  EXPECT_NE(mw->rkey(), first);
  EXPECT_EQ(mw->rkey() >> 8, first >> 8);
  EXPECT_EQ(p.one(p.cqb).opcode, IBV_WC_BIND_MW);
  const std::uint32_t bound = mw->rkey();
  EXPECT_EQ(p.write(p.at(8), bound).status, IBV_WC_SUCCESS);
  bind.bind_info.length = 0;  // unbind (rdma-core's test_invalidate_mw_type1)
  ASSERT_EQ(p.qb->bind_mw(mw, bind), 0);
  EXPECT_EQ(p.one(p.cqb).status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.write(p.at(8), bound).status, IBV_WC_REM_ACCESS_ERR);
  MemoryWindow* two = p.pdb->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(p.qb->bind_mw(two, bind), EINVAL) << "bind_mw is for type 1 windows";
  bind.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
  EXPECT_EQ(p.qb->bind_mw(mw, bind), EINVAL);
}

TEST(MemoryWindows, DeallocRevokesAndRegionWaitsForItsWindows) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  MemoryWindow* mw = p.pdb->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const std::uint32_t rkey = WindowPair::next_key(mw->rkey());
  ASSERT_EQ(p.bind(mw, rkey, 0, 4096, kRemote).status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.pdb->dereg_mr(p.region), EBUSY);
  EXPECT_EQ(p.pdb->dealloc_mw(mw), 0);
  EXPECT_EQ(p.write(p.at(0), rkey).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(p.pdb->dereg_mr(p.region), 0);
  EXPECT_EQ(p.pdb->alloc_mw(static_cast<ibv_mw_type>(3)), nullptr);
}

TEST(MemoryWindows, LocalInvalidateOfARegionOrType1WindowFails) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  ibv_send_wr inv{};
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = p.mrb->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(p.qb->post_send(&inv, &bad), 0);
  EXPECT_EQ(p.one(p.cqb).status, IBV_WC_LOC_QP_OP_ERR);
  EXPECT_EQ(p.qb->counter("local_inv_errors"), 1u);
}

// --- ATOMIC WRITE ---------------------------------------------------------------------

int post_atomic_write(QueuePair* qp, const std::uint8_t* local, std::uint32_t lkey, std::uint64_t remote,
                      std::uint32_t rkey, std::uint64_t wr_id, unsigned flags = IBV_SEND_SIGNALED) {
  return post_rdma(qp, IBV_WR_ATOMIC_WRITE, local, 8, lkey, remote, rkey, wr_id, flags);
}

TEST(AtomicWrite, PlacesEightBytesAndCompletes) {
  RcPair p(5, 1 << 16);
  ASSERT_EQ(p.connect_rc, 0);
  const std::uint64_t value = 0x1122334455667788ull;
  std::memcpy(p.bufa + 64, &value, 8);
  ASSERT_EQ(post_atomic_write(p.qa, p.bufa + 64, p.mra->lkey, reinterpret_cast<std::uint64_t>(p.bufb + 512),
                              p.mrb->rkey, 21),
            0);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_SUCCESS) << wc_status_str(a[0].status);
  EXPECT_EQ(a[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(std::memcmp(p.bufb + 512, &value, 8), 0);
  EXPECT_EQ(p.qb->counter("atomic_writes_executed"), 1u);
  // Inline: the bytes travel in the WQE, whatever max_inline_data is.
  const std::uint64_t second = 42;
  ASSERT_EQ(post_atomic_write(p.qa, reinterpret_cast<const std::uint8_t*>(&second), 0,
                              reinterpret_cast<std::uint64_t>(p.bufb + 520), p.mrb->rkey, 22,
                              IBV_SEND_SIGNALED | IBV_SEND_INLINE),
            0);
  ASSERT_EQ(p.wait(p.cqa, 1).size(), 1u);
  EXPECT_EQ(std::memcmp(p.bufb + 520, &second, 8), 0);
  // Seven bytes is not an ATOMIC WRITE.
  EXPECT_EQ(post_rdma(p.qa, IBV_WR_ATOMIC_WRITE, p.bufa, 7, p.mra->lkey, p.bufb + 512, p.mrb->rkey), EINVAL);
}

TEST(AtomicWrite, MisalignedAddressIsNakedInvalidRequest) {
  RcPair p(6, 1 << 16);
  ASSERT_EQ(p.connect_rc, 0);
  ASSERT_EQ(post_atomic_write(p.qa, p.bufa, p.mra->lkey, reinterpret_cast<std::uint64_t>(p.bufb + 513),
                              p.mrb->rkey, 1),
            0);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_REM_INV_REQ_ERR) << wc_status_str(a[0].status);
  EXPECT_EQ(p.qb->counter("drop_misaligned_atomic"), 1u);
}

TEST(AtomicWrite, ThroughAWindowNeedsItsRemoteWrite) {
  WindowPair p;
  ASSERT_EQ(p.connect_rc, 0);
  MemoryWindow* mw = p.pdb->alloc_mw(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const std::uint32_t rkey = WindowPair::next_key(mw->rkey());
  ASSERT_EQ(p.bind(mw, rkey, 0, 64, IBV_ACCESS_REMOTE_READ).status, IBV_WC_SUCCESS);
  ASSERT_EQ(post_atomic_write(p.qa, p.bufa, p.mra->lkey, p.at(8), rkey, 1), 0);
  EXPECT_EQ(p.one(p.cqa).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(p.qb->counter("drop_window_rkey"), 1u);
}

// Under loss, duplication and reordering every ATOMIC WRITE completes once
// and the last value stands: a duplicate is answered, never placed again.
TEST(AtomicWrite, LossyLinkPlacesEachOnceInOrder) {
  const std::uint64_t seed = test_seed(11);
  sim::Impairments bad;
  bad.loss = 0.1;
  bad.duplicate = 0.1;
  bad.reorder = 0.1;
  RcPair p(seed, 1 << 16, {}, bad, bad);
  ASSERT_EQ(p.connect_rc, 0);
  constexpr int kN = 200;
  for (int i = 0; i < kN; ++i) {
    const std::uint64_t v = 1000 + i;
    std::memcpy(p.bufa + 8 * i, &v, 8);
    // Every one to the same 8 bytes, with a plain WRITE of the next slot between.
    ASSERT_EQ(post_atomic_write(p.qa, p.bufa + 8 * i, p.mra->lkey, reinterpret_cast<std::uint64_t>(p.bufb + 4096),
                                p.mrb->rkey, i),
              0)
        << "seed " << seed;
  }
  const auto a = p.wait(p.cqa, kN);
  ASSERT_EQ(a.size(), static_cast<std::size_t>(kN)) << "seed " << seed;
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(a[i].status, IBV_WC_SUCCESS) << "seed " << seed << " " << wc_status_str(a[i].status);
    EXPECT_EQ(a[i].wr_id, static_cast<std::uint64_t>(i)) << "seed " << seed;
  }
  std::uint64_t last = 0;
  std::memcpy(&last, p.bufb + 4096, 8);
  EXPECT_EQ(last, 1000u + kN - 1) << "seed " << seed;
  EXPECT_EQ(p.qb->counter("atomic_writes_executed"), static_cast<std::uint64_t>(kN)) << "seed " << seed;
}

}  // namespace
}  // namespace uroce::test
