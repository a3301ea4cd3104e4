// Device memory through uroced (Context::alloc_dm attached): the daemon's
// memory file, mapped by the client that asked; zero-based regions on it
// carry SENDs, WRITEs and READs between two clients of one daemon (its
// loopback); each client's budget is max_dm_size; free is refused while a
// region is on it; and a hostile client cannot name another's device memory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "service/client.h"
#include "service/protocol.h"
#include "support/uroced.h"
#include "support/work_requests.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"

namespace {

using namespace std::chrono_literals;
using uroce::test::Uroced;

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr std::size_t kDm = 16384;

// One client: a Context attached to the daemon, a PD, a CQ, an RC QP, a
// host buffer, and device memory with a region on all of it.
struct Client {
  explicit Client(const std::string& socket) {
    ctx = uroce::Context::attach(socket, error);
    if (!ctx) return;
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(64);
    uroce::QpInitAttr init;
    init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
    init.send_cq = init.recv_cq = cq;
    qp = pd != nullptr && cq != nullptr ? pd->create_qp(init) : nullptr;
    buf = static_cast<std::uint8_t*>(ctx->alloc_buffer(kDm));
    mr = pd != nullptr && buf != nullptr ? pd->reg_mr(buf, kDm, kAccess) : nullptr;
    dm = ctx->alloc_dm(kDm);
    dmr = pd != nullptr && dm != nullptr ? pd->reg_dm_mr(dm, 0, kDm, kAccess) : nullptr;
    if (qp == nullptr || mr == nullptr || dmr == nullptr) error = ctx->last_error();
  }
  std::vector<ibv_wc> poll(std::size_t n) {
    std::vector<ibv_wc> out;
    for (const auto end = std::chrono::steady_clock::now() + 10s;
         out.size() < n && std::chrono::steady_clock::now() < end;) {
      ibv_wc wc[8];
      const int k = cq->poll(8, wc);
      if (k > 0) out.insert(out.end(), wc, wc + k);
      else std::this_thread::sleep_for(100us);
    }
    return out;
  }
  std::unique_ptr<uroce::Context> ctx;
  uroce::ProtectionDomain* pd = nullptr;
  uroce::CompletionQueue* cq = nullptr;
  uroce::QueuePair* qp = nullptr;
  std::uint8_t* buf = nullptr;
  uroce::MemoryRegion* mr = nullptr;
  uroce::DeviceMemory* dm = nullptr;
  uroce::MemoryRegion* dmr = nullptr;
  std::string error;
};

class ServiceDm : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(d.error, ""); }
  uroce::test::TempDir tmp{"/tmp/uroce-svcdm-"};
  Uroced d{uroce::test::memif_uroced("svcdm", tmp.dir, "a", true, 1)};
};

const void* at(std::uintptr_t offset) { return reinterpret_cast<const void*>(offset); }

TEST_F(ServiceDm, TrafficMovesBetweenTwoClientsDeviceMemory) {
  Client a(d.socket), b(d.socket);
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.ctx->limits().max_dm_size, uroce::DeviceLimits{}.max_dm_size) << "the daemon's, from its hello";
  uroce::ConnectParams p;
  ASSERT_EQ(uroce::connect_rc(a.qp, b.ctx->gid(), b.qp->qp_num(), p.psn_a, p.psn_b, p), 0) << a.ctx->last_error();
  ASSERT_EQ(uroce::connect_rc(b.qp, a.ctx->gid(), a.qp->qp_num(), p.psn_b, p.psn_a, p), 0) << b.ctx->last_error();
  std::vector<std::uint8_t> data(6000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 13 + 5);

  // A SEND from a's device memory into b's, SGEs from 0.
  ASSERT_EQ(a.dm->copy_to(1000, data.data(), data.size()), 0);
  ASSERT_EQ(uroce::test::post_recv_one(b.qp, at(4000), 8192, b.dmr->lkey, 1), 0);
  ASSERT_EQ(uroce::test::post_send_one(a.qp, IBV_WR_SEND, at(1000), 6000, a.dmr->lkey, 2), 0) << a.ctx->last_error();
  auto wa = a.poll(1);
  auto wb = b.poll(1);
  ASSERT_EQ(wa.size(), 1u);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].status, IBV_WC_SUCCESS);
  std::vector<std::uint8_t> got(data.size());
  ASSERT_EQ(b.dm->copy_from(got.data(), 4000, got.size()), 0);
  EXPECT_EQ(got, data);

  // A WRITE from a's host memory into b's device memory, and a READ of it
  // back into a's device memory, by the region's rkey and zero-based address.
  std::memcpy(a.buf, data.data(), 4096);
  ASSERT_EQ(uroce::test::post_rdma(a.qp, IBV_WR_RDMA_WRITE, a.buf, 4096, a.mr->lkey, std::uint64_t{12000},
                                   b.dmr->rkey, 3),
            0);
  wa = a.poll(1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(uroce::test::post_rdma(a.qp, IBV_WR_RDMA_READ, at(8000), 4096, a.dmr->lkey, std::uint64_t{12000},
                                   b.dmr->rkey, 4),
            0);
  wa = a.poll(1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  got.assign(4096, 0);
  ASSERT_EQ(a.dm->copy_from(got.data(), 8000, got.size()), 0);
  EXPECT_EQ(0, std::memcmp(got.data(), data.data(), 4096));

  // Past the region's end: a remote access error, nothing written.
  ASSERT_EQ(uroce::test::post_rdma(a.qp, IBV_WR_RDMA_WRITE, a.buf, 64, a.mr->lkey, std::uint64_t{kDm - 32},
                                   b.dmr->rkey, 5),
            0);
  wa = a.poll(1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, IBV_WC_REM_ACCESS_ERR);
  std::vector<std::uint8_t> tail(32, 0xee);
  ASSERT_EQ(b.dm->copy_from(tail.data(), kDm - 32, tail.size()), 0);
  EXPECT_EQ(tail, std::vector<std::uint8_t>(32, 0));
}

TEST_F(ServiceDm, TheDaemonKeepsEachClientsBudgetAndRegionsHoldTheMemory) {
  Client a(d.socket);
  ASSERT_EQ(a.error, "");
  const std::uint64_t max = a.ctx->limits().max_dm_size;
  EXPECT_EQ(a.ctx->alloc_dm(max - kDm + 4), nullptr) << "kDm is held already";
  uroce::DeviceMemory* rest = a.ctx->alloc_dm(max - kDm);
  ASSERT_NE(rest, nullptr) << a.ctx->last_error();
  EXPECT_EQ(a.ctx->free_dm(a.dm), EBUSY);
  EXPECT_NE(a.ctx->last_error().find("deregister"), std::string::npos) << a.ctx->last_error();
  EXPECT_EQ(a.pd->reg_dm_mr(rest, 8, max, kAccess), nullptr) << "past the memory";
  EXPECT_EQ(a.pd->dereg_mr(a.dmr), 0);
  EXPECT_EQ(a.ctx->free_dm(a.dm), 0);
  EXPECT_EQ(a.ctx->free_dm(rest), 0);
  // Another client has a budget of its own.
  Client b(d.socket);
  ASSERT_EQ(b.error, "");
  EXPECT_NE(b.ctx->alloc_dm(max - kDm), nullptr) << b.ctx->last_error();
}

TEST_F(ServiceDm, AClientCannotNameAnotherClientsDeviceMemory) {
  Client a(d.socket);
  ASSERT_EQ(a.error, "");
  std::string why;
  auto raw = uroce::service::Client::connect(d.socket, why);
  ASSERT_TRUE(raw) << why;
  uroce::service::Request req;
  uroce::service::Reply reply;
  req.op = uroce::service::Op::kAllocPd;
  ASSERT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), 0) << why;
  const std::uint32_t own_pd = reply.handle;
  // a's device memory by its handle (handles are each client's own: the
  // daemon looks in the asking client's table only): unknown here.
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kRegDmMr;
  req.reg_dm_mr = uroce::service::RegDmMr{own_pd, a.dm->handle(), kAccess, 0, 64};
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  EXPECT_NE(why.find("no device memory"), std::string::npos) << why;
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kFreeDm;
  req.handle = a.dm->handle();
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  // Its own memory, with a PD it does not have: refused too.
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kAllocDm;
  req.alloc_dm.length = 64;
  std::vector<int> fds;
  ASSERT_EQ(raw->call(req, reply, nullptr, 0, &fds, why), 0) << why;
  EXPECT_EQ(fds.size(), 1u);
  for (const int fd : fds) close(fd);
  const std::uint32_t own_dm = reply.handle;
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kRegDmMr;
  req.reg_dm_mr = uroce::service::RegDmMr{own_pd + 1000, own_dm, kAccess, 0, 64};
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  EXPECT_NE(why.find("no PD"), std::string::npos) << why;
  // Its own region on its own memory works; a's memory is still a's.
  req.reg_dm_mr.pd = own_pd;
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), 0) << why;
  const std::uint32_t word = 0x5a5a5a5a;
  EXPECT_EQ(a.dm->copy_to(0, &word, 4), 0);
  EXPECT_EQ(a.pd->dereg_mr(a.dmr), 0);
  EXPECT_EQ(a.ctx->free_dm(a.dm), 0);
}

}  // namespace
