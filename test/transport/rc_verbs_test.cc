// Each RC verb alone on a clean simulated link: completions, statuses,
// opcodes and the bytes that arrive.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "support/rc_fixture.h"
#include "verbs/verbs_impl.h"
#include "wire/frame.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

TEST(RcVerbs, ConnectReachesRts) {
  RcPair p(1, 1 << 16);
  ASSERT_EQ(p.connect_rc, 0) << p.net.a->last_error() << p.net.b->last_error();
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.qb->state(), IBV_QPS_RTS);
}

TEST(RcVerbs, SendLandsInThePostedReceive) {
  RcPair p(1, 1 << 16);
  ASSERT_EQ(p.connect_rc, 0);
  fill_pattern(p.bufa, 5000, 3);
  ASSERT_EQ(p.post_recv_b(8192, 8000, 77), 0);
  ASSERT_EQ(p.post_send(IBV_WR_SEND, 0, 5000, 0, 11), 0);
  const auto a = p.wait(p.cqa, 1);
  const auto b = p.wait(p.cqb, 1);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_SUCCESS) << wc_status_str(a[0].status);
  EXPECT_EQ(a[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(a[0].wr_id, 11u);
  EXPECT_EQ(b[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(b[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(b[0].wr_id, 77u);
  EXPECT_EQ(b[0].byte_len, 5000u);
  EXPECT_EQ(b[0].src_qp, p.qa->qp_num());
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb + 8192, 5000), 0);
}

// A list is taken WR by WR and the engine told once, after the last; a
// bad WR stops the list there (bad_wr names it) and those before it still
// go out (the engine is told of them too), as on an RNIC.
TEST(RcVerbs, AListOfWritesGoesOutAndABadWrStopsItWhereItIs) {
  RcPair p(1, 1 << 16);
  ASSERT_EQ(p.connect_rc, 0);
  fill_pattern(p.bufa, 8 * 512, 9);
  ibv_sge sges[8];
  ibv_send_wr wrs[8];
  auto make_list = [&](int n) {
    for (int i = 0; i < n; ++i) {
      sges[i] = ibv_sge{reinterpret_cast<std::uint64_t>(p.bufa + i * 512), 512, p.mra->lkey};
      wrs[i] = ibv_send_wr{};
      wrs[i].wr_id = static_cast<std::uint64_t>(i);
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = 1;
      wrs[i].opcode = IBV_WR_RDMA_WRITE;
      wrs[i].send_flags = IBV_SEND_SIGNALED;
      wrs[i].wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(p.bufb + i * 512);
      wrs[i].wr.rdma.rkey = p.mrb->rkey;
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
  };
  make_list(8);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(p.qa->post_send(wrs, &bad), 0);
  auto done = p.wait(p.cqa, 8);
  ASSERT_EQ(done.size(), 8u);
  for (std::size_t i = 0; i < done.size(); ++i) {
    EXPECT_EQ(done[i].status, IBV_WC_SUCCESS) << wc_status_str(done[i].status);
    EXPECT_EQ(done[i].wr_id, i) << "a list completes in order";
  }
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb, 8 * 512), 0);

  // The third of four has more SGEs than the QP takes: the first two go.
  std::memset(p.bufb, 0, 8 * 512);
  make_list(4);
  wrs[2].num_sge = 17;  // max_send_sge 16
  bad = nullptr;
  EXPECT_EQ(p.qa->post_send(wrs, &bad), EINVAL);
  EXPECT_EQ(bad, &wrs[2]);
  done = p.wait(p.cqa, 2);
  ASSERT_EQ(done.size(), 2u) << "the WRs before the bad one were not sent";
  EXPECT_EQ(done[0].wr_id, 0u);
  EXPECT_EQ(done[1].wr_id, 1u);
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb, 2 * 512), 0);
  EXPECT_TRUE(p.wait(p.cqa, 1, 50'000'000).empty()) << "nothing of the bad WR or after it";
}

TEST(RcVerbs, WriteReadAndAtomics) {
  RcPair p(2, 1 << 20);
  ASSERT_EQ(p.connect_rc, 0);
  fill_pattern(p.bufa, 100000, 5);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 100000, 4096, 1), 0);
  auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(p.bufa, p.bufb + 4096, 100000), 0);

  fill_pattern(p.bufb + 300000, 70000, 9);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_READ, 500000, 70000, 300000, 2), 0);
  a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(a[0].byte_len, 70000u);
  EXPECT_EQ(std::memcmp(p.bufa + 500000, p.bufb + 300000, 70000), 0);

  std::uint64_t target = 40;
  std::memcpy(p.bufb + 800, &target, 8);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(p.bufa + 900), 8, p.mra->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 3;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = reinterpret_cast<std::uint64_t>(p.bufb + 800);
  wr.wr.atomic.rkey = p.mrb->rkey;
  wr.wr.atomic.compare_add = 2;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(p.qa->post_send(&wr, &bad), 0);
  a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a[0].opcode, IBV_WC_FETCH_ADD);
  std::uint64_t orig = 0;
  std::memcpy(&orig, p.bufa + 900, 8);
  EXPECT_EQ(orig, 40u);
  std::memcpy(&target, p.bufb + 800, 8);
  EXPECT_EQ(target, 42u);

  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 42;
  wr.wr.atomic.swap = 1000;
  ASSERT_EQ(p.qa->post_send(&wr, &bad), 0);
  a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&orig, p.bufa + 900, 8);
  EXPECT_EQ(orig, 42u);
  std::memcpy(&target, p.bufb + 800, 8);
  EXPECT_EQ(target, 1000u);
}

TEST(RcVerbs, CompletionQueueOverflowIsAnError) {
  device::SimPair net(8);
  ProtectionDomain* pda = net.a->alloc_pd();
  ProtectionDomain* pdb = net.b->alloc_pd();
  CompletionQueue* small = net.a->create_cq(2);
  CompletionQueue* cqb = net.b->create_cq(16);
  QpInitAttr init;
  init.cap = ibv_qp_cap{8, 8, 1, 1, 0};
  init.send_cq = init.recv_cq = small;
  QueuePair* qa = pda->create_qp(init);
  init.send_cq = init.recv_cq = cqb;
  QueuePair* qb = pdb->create_qp(init);
  auto* a = static_cast<std::uint8_t*>(net.a->alloc_buffer(4096));
  auto* b = static_cast<std::uint8_t*>(net.b->alloc_buffer(4096));
  MemoryRegion* mra = pda->reg_mr(a, 4096, IBV_ACCESS_LOCAL_WRITE);
  MemoryRegion* mrb = pdb->reg_mr(b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(net.connect(qa, qb), 0);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, a, 8, mra->lkey, b, mrb->rkey, static_cast<std::uint64_t>(i)), 0);
  }
  net.run_until([] { return false; }, 1'000'000);
  ibv_wc wc[4];
  EXPECT_EQ(small->poll(4, wc), -EOVERFLOW);
  EXPECT_EQ(qa->state(), IBV_QPS_ERR);
  EXPECT_EQ(net.a->destroy_cq(small), EBUSY) << "a CQ in use cannot go";
  EXPECT_NE(net.a->last_error().find("QPs still use this CQ"), std::string::npos);
}

TEST(RcVerbs, GidTableAsRdmaCoreListsIt) {
  device::SimPair net(9);
  ibv_gid g{};
  ASSERT_EQ(net.a->query_gid(1, g), 0);
  EXPECT_EQ(g.raw[10], 0xff);
  EXPECT_EQ(g.raw[11], 0xff);
  EXPECT_EQ(g.raw[12], 10);  // ::ffff:10.99.0.1
  ASSERT_EQ(net.a->query_gid(0, g), 0);
  // MAC 02:00:00:00:00:0a -> fe80::0000:00ff:fe00:000a (the U/L bit flipped)
  const std::uint8_t want[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0xff, 0xfe, 0x00, 0x00, 0x0a};
  EXPECT_EQ(std::memcmp(g.raw, want, 16), 0);
  EXPECT_EQ(net.a->query_gid(2, g), EINVAL);
}

TEST(RcVerbs, BuffersOnHugepagesOrAClearError) {
  std::ifstream nr("/proc/sys/vm/nr_hugepages");
  long reserved = 0;
  nr >> reserved;
  sim::VirtualClock clock;
  const std::uint8_t mac[6] = {2, 0, 0, 0, 0, 1};
  sim::SimLink link(clock, 1, mac, mac);
  PortConfig port;
  port.io = &link.port(0);
  port.clock = &clock;
  port.buffer_pages = PortConfig::Pages::kHuge;
  std::string error;
  auto ctx = Context::open(port, error);
  void* b = ctx->alloc_buffer(1 << 20);
  if (reserved == 0) {
    EXPECT_EQ(b, nullptr);
    EXPECT_NE(ctx->last_error().find("dpdk-hugepages.py --setup"), std::string::npos) << ctx->last_error();
  } else {
    EXPECT_NE(b, nullptr) << ctx->last_error();
  }
  port.buffer_pages = PortConfig::Pages::kNormal;
  auto normal = Context::open(port, error);
  EXPECT_NE(normal->alloc_buffer(1 << 20), nullptr);
}

// SEND with Invalidate may revoke only keys made to be invalidated (memory
// windows, fast-registered regions); a reg_mr region's rkey is refused, as
// rxe refuses it (Class J): the sender sees NAK Invalid Request, the receive
// ends with REM_INV_REQ_ERR, and the region's rkey keeps working (review D7).
TEST(RcVerbs, SendWithInvalidateOfAnOrdinaryRegionIsRefused) {
  RcPair p(4, 1 << 16);
  ASSERT_EQ(p.connect_rc, 0);
  MemoryRegion* target = p.pdb->reg_mr(p.bufb + 32768, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(target, nullptr);
  ASSERT_EQ(p.post_recv_b(0, 64, 5), 0);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(p.bufa), 16, p.mra->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = target->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(p.qa->post_send(&wr, &bad), 0);
  const auto b = p.wait(p.cqb, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].status, IBV_WC_REM_INV_REQ_ERR);
  const auto a = p.wait(p.cqa, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(p.qb->counter("nak_inv_req_sent"), 1u);
  EXPECT_EQ(p.qb->state(), IBV_QPS_ERR);
  // The rkey still opens the region.
  std::uint8_t* host = nullptr;
  EXPECT_EQ(uroce::testing::mr_table(*p.net.b).check(target->rkey, true, p.pdb->id(), reinterpret_cast<std::uint64_t>(p.bufb + 32768),
                                      8, IBV_ACCESS_REMOTE_WRITE, host),
            mem::AccessResult::kOk);
}

TEST(RcVerbs, FencedRequestWaitsForEarlierReads) {
  RcPair p(5, 1 << 20);
  ASSERT_EQ(p.connect_rc, 0);
  std::vector<std::pair<int, std::uint8_t>> order;  // (side, opcode) as sent
  p.net.link.observe([&](int from, std::span<const std::uint8_t> f) {
    wire::ParsedFrame parsed;
    if (wire::parse_frame(f, parsed) == wire::ParseStatus::kOk) order.emplace_back(from, parsed.opcode);
  });
  fill_pattern(p.bufb, 8192, 3);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_READ, 0, 8192, 0, 1), 0);
  ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 100000, 64, 200000, 2, IBV_SEND_SIGNALED | IBV_SEND_FENCE), 0);
  const auto a = p.wait(p.cqa, 2);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].wr_id, 1u);
  EXPECT_EQ(a[1].wr_id, 2u);
  // The WRITE (0x0a) leaves A only after the last READ response (0x0f) left B.
  const auto last_response = std::find(order.begin(), order.end(), std::make_pair(1, std::uint8_t{0x0f}));
  const auto write = std::find(order.begin(), order.end(), std::make_pair(0, std::uint8_t{0x0a}));
  ASSERT_NE(last_response, order.end());
  ASSERT_NE(write, order.end());
  EXPECT_LT(last_response - order.begin(), write - order.begin());
}

}  // namespace
}  // namespace uroce::test
