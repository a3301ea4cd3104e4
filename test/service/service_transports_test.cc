// SRQs, UD (address handles) and UC through uroced (docs/service.md): two
// daemons joined by a memif pair; each case runs with both programs on one
// daemon (its loopback) and with one on each daemon. The programs are
// Contexts attached from this process (one client each) and stock
// rdma-core pingpongs (ibv_srq_pingpong, ibv_ud_pingpong, ibv_uc_pingpong)
// under uroce-run --service. Then what a hostile client may not do: name
// another client's SRQ, PD or address handle, or pass its SRQ and AH budgets.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "service/client.h"
#include "service/protocol.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"
#include "verbs/internal.h"
#include "verbs/verbs_impl.h"
#include "support/free_port.h"
#include "support/uroced.h"
#include "support/work_requests.h"

namespace {

using namespace std::chrono_literals;
using uroce::test::Uroced;
using uroce::test::Process;
using uroce::test::spawn;


// Both daemons for the whole suite, as service_test's.
class Transports : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    pair_ = new uroce::test::MemifUrocedPair("svct");
    dir_ = pair_->dir.dir;
    a_ = &pair_->a;
    b_ = &pair_->b;
  }
  static void TearDownTestSuite() {
    delete pair_;
  }
  void SetUp() override {
    ASSERT_EQ(pair_->error, "");
  }
  // The second program's daemon: a's own (loopback) or b.
  static Uroced& other() { return GetParam() ? *b_ : *a_; }
  static std::string dir_;
  static uroce::test::MemifUrocedPair* pair_;
  static Uroced* a_;
  static Uroced* b_;
};
std::string Transports::dir_;
uroce::test::MemifUrocedPair* Transports::pair_ = nullptr;
Uroced* Transports::a_ = nullptr;
Uroced* Transports::b_ = nullptr;

// One program's objects: a Context attached to `socket`, a PD, a CQ and a
// 64 KiB registered buffer.
struct Side {
  explicit Side(const std::string& socket) {
    ctx = uroce::Context::attach(socket, error);
    if (!ctx) return;
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(256);
    buf = static_cast<std::uint8_t*>(ctx->alloc_buffer(kBytes));
    mr = pd != nullptr && buf != nullptr
             ? pd->reg_mr(buf, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
             : nullptr;
    if (pd == nullptr || cq == nullptr || mr == nullptr) error = ctx->last_error();
  }
  uroce::QueuePair* qp(ibv_qp_type type, uroce::SharedReceiveQueue* srq = nullptr) {
    uroce::QpInitAttr init;
    init.qp_type = type;
    init.cap = ibv_qp_cap{32, 32, 1, 1, 0};
    init.send_cq = init.recv_cq = cq;
    init.srq = srq;
    return pd->create_qp(init);
  }
  // Up to n completions within `limit`.
  std::vector<ibv_wc> poll(std::size_t n, std::chrono::milliseconds limit = 10s) {
    std::vector<ibv_wc> out;
    for (const auto end = std::chrono::steady_clock::now() + limit; out.size() < n && std::chrono::steady_clock::now() < end;) {
      ibv_wc wc[16];
      const int k = cq->poll(16, wc);
      if (k > 0) out.insert(out.end(), wc, wc + k);
      else std::this_thread::sleep_for(100us);
    }
    return out;
  }
  static constexpr std::size_t kBytes = 1 << 16;
  std::unique_ptr<uroce::Context> ctx;
  uroce::ProtectionDomain* pd = nullptr;
  uroce::CompletionQueue* cq = nullptr;
  std::uint8_t* buf = nullptr;
  uroce::MemoryRegion* mr = nullptr;
  std::string error;
};

std::atomic<int> limit_events{0};
void count_limit(void*) { limit_events.fetch_add(1); }

// On-demand paging through the daemons: the receiver's implicit region is
// its whole address space, reached by the daemon through the kernel. A
// WRITE into a page it never mapped, or into a page held by a userfaultfd
// nobody serves (a hostile client's trap for the daemon's engine), is NAKed
// (remote access error) at once; the daemon serves the next pair as before.
TEST_P(Transports, OdpWritesIntoMissingOrTrappedPagesAreNakedAndTheDaemonGoesOn) {
  Side s(a_->socket), r(other().socket);
  ASSERT_EQ(s.error, "");
  ASSERT_EQ(r.error, "");
  const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND;
  uroce::MemoryRegion* implicit = r.pd->reg_mr(nullptr, SIZE_MAX, all);
  ASSERT_NE(implicit, nullptr) << r.ctx->last_error();
  constexpr std::size_t kPage = 4096;
  void* m = mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* pages = static_cast<std::uint8_t*>(m);
  ASSERT_EQ(munmap(pages + kPage, kPage), 0);  // page 1: a hole
  // Page 2: faults wait for a userfaultfd that never answers.
  const int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  ASSERT_GE(uffd, 0) << std::strerror(errno);
  uffdio_api api{};
  api.api = UFFD_API;
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<std::uintptr_t>(pages + 2 * kPage);
  reg.range.len = kPage;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  ASSERT_EQ(ioctl(uffd, UFFDIO_API, &api), 0);
  ASSERT_EQ(ioctl(uffd, UFFDIO_REGISTER, &reg), 0);

  // One fresh pair per WRITE (a NAK leaves a pair in ERR); its completion.
  auto write_to = [&](std::uint8_t* at) -> ibv_wc {
    uroce::QueuePair* a = s.qp(IBV_QPT_RC);
    uroce::QueuePair* b = r.qp(IBV_QPT_RC);
    EXPECT_TRUE(a && b) << s.ctx->last_error() << r.ctx->last_error();
    if (!a || !b) return ibv_wc{};
    uroce::ConnectParams p;
    EXPECT_EQ(uroce::connect_rc(a, r.ctx->gid(), b->qp_num(), p.psn_a, p.psn_b, p), 0) << s.ctx->last_error();
    EXPECT_EQ(uroce::connect_rc(b, s.ctx->gid(), a->qp_num(), p.psn_b, p.psn_a, p), 0) << r.ctx->last_error();
    std::memset(s.buf, 0x6f, 64);
    EXPECT_EQ(uroce::test::post_rdma(a, IBV_WR_RDMA_WRITE, s.buf, 64, s.mr->lkey, at, implicit->rkey, 7), 0);
    const std::vector<ibv_wc> wc = s.poll(1);
    EXPECT_EQ(wc.size(), 1u) << "no completion: the daemon's engine is stuck";
    return wc.empty() ? ibv_wc{} : wc[0];
  };
  EXPECT_EQ(write_to(pages + 100).status, IBV_WC_SUCCESS);
  EXPECT_EQ(pages[100], 0x6f);
  EXPECT_EQ(pages[163], 0x6f);
  EXPECT_EQ(write_to(pages + kPage + 8).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(write_to(pages + 2 * kPage + 8).status, IBV_WC_REM_ACCESS_ERR);
  // The daemon goes on: a WRITE to a mapped page lands.
  pages[200] = 0;
  EXPECT_EQ(write_to(pages + 200).status, IBV_WC_SUCCESS);
  EXPECT_EQ(pages[200], 0x6f);
  close(uffd);
  munmap(pages, kPage);
  munmap(pages + 2 * kPage, kPage);
}

// RC into an SRQ: the receiver's two QPs take WQEs from one SRQ in the
// order posted; the limit event comes once the SRQ falls below its limit,
// which then reads 0; a QP on an SRQ refuses post_recv; the SRQ stays while
// a QP uses it.
TEST_P(Transports, RcSendsLandInAnSrqAndItsLimitEventComes) {
  Side s(a_->socket), r(other().socket);
  ASSERT_EQ(s.error, "");
  ASSERT_EQ(r.error, "");
  uroce::SharedReceiveQueue* srq = r.pd->create_srq(uroce::SrqInitAttr{16, 1, 0}, &count_limit, nullptr);
  ASSERT_NE(srq, nullptr) << r.ctx->last_error();
  uroce::QueuePair* s1 = s.qp(IBV_QPT_RC);
  uroce::QueuePair* s2 = s.qp(IBV_QPT_RC);
  uroce::QueuePair* r1 = r.qp(IBV_QPT_RC, srq);
  uroce::QueuePair* r2 = r.qp(IBV_QPT_RC, srq);
  ASSERT_TRUE(s1 && s2 && r1 && r2) << s.ctx->last_error() << r.ctx->last_error();
  uroce::ConnectParams p;
  ASSERT_EQ(uroce::connect_rc(s1, r.ctx->gid(), r1->qp_num(), p.psn_a, p.psn_b, p), 0) << s.ctx->last_error();
  ASSERT_EQ(uroce::connect_rc(r1, s.ctx->gid(), s1->qp_num(), p.psn_b, p.psn_a, p), 0) << r.ctx->last_error();
  ASSERT_EQ(uroce::connect_rc(s2, r.ctx->gid(), r2->qp_num(), p.psn_a, p.psn_b, p), 0) << s.ctx->last_error();
  ASSERT_EQ(uroce::connect_rc(r2, s.ctx->gid(), s2->qp_num(), p.psn_b, p.psn_a, p), 0) << r.ctx->last_error();
  EXPECT_EQ(uroce::test::post_recv_one(r1, r.buf, 64, r.mr->lkey, 1), EINVAL) << "a QP on an SRQ takes no receives";
  EXPECT_NE(r.ctx->last_error().find("post to the SRQ"), std::string::npos) << r.ctx->last_error();

  constexpr int kRecvs = 12, kSends = 10;
  for (int i = 0; i < kRecvs; ++i) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(r.buf + i * 1024), 1024, r.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 100 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(srq->post_recv(&wr, &bad), 0) << r.ctx->last_error();
  }
  ibv_srq_attr arm{};
  arm.srq_limit = 4;
  ASSERT_EQ(srq->modify(arm, IBV_SRQ_LIMIT), 0) << r.ctx->last_error();
  arm.srq_limit = 17;
  EXPECT_NE(srq->modify(arm, IBV_SRQ_LIMIT), 0) << "a limit over max_wr";
  ibv_srq_attr got{};
  ASSERT_EQ(srq->query(got), 0);
  EXPECT_EQ(got.max_wr, 16u);
  EXPECT_EQ(got.srq_limit, 4u);
  limit_events = 0;
  for (int i = 0; i < kSends; ++i) {
    std::memset(s.buf + i * 512, 'a' + i, 512);
    ASSERT_EQ(uroce::test::post_send_one(i % 2 ? s2 : s1, IBV_WR_SEND, s.buf + i * 512, 512, s.mr->lkey, i), 0)
        << s.ctx->last_error();
    // One at a time: the SRQ hands WQEs out in the order the messages come.
    ASSERT_EQ(s.poll(1).size(), 1u) << i;
    const std::vector<ibv_wc> wc = r.poll(1);
    ASSERT_EQ(wc.size(), 1u) << i;
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(wc[0].wr_id, 100u + i);
    EXPECT_EQ(wc[0].byte_len, 512u);
    EXPECT_EQ(wc[0].qp_num, (i % 2 ? r2 : r1)->qp_num());
    EXPECT_EQ(r.buf[i * 1024], 'a' + i);
    EXPECT_EQ(r.buf[i * 1024 + 511], 'a' + i);
  }
  EXPECT_EQ(srq->count(), static_cast<std::uint32_t>(kRecvs - kSends));
  for (const auto end = std::chrono::steady_clock::now() + 5s; limit_events == 0 && std::chrono::steady_clock::now() < end;) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(limit_events.load(), 1) << "IBV_EVENT_SRQ_LIMIT_REACHED, once";
  ASSERT_EQ(srq->query(got), 0);
  EXPECT_EQ(got.srq_limit, 0u) << "disarmed once it fired";

  EXPECT_NE(r.pd->destroy_srq(srq), 0) << "QPs still use it";
  EXPECT_EQ(r.pd->destroy_qp(r1), 0);
  EXPECT_EQ(r.pd->destroy_qp(r2), 0);
  EXPECT_EQ(r.pd->destroy_srq(srq), 0) << r.ctx->last_error();
}

// UD with address handles, to the peer's GID 1 (IPv4) and GID 0 (IPv6
// link-local): each datagram lands behind its 40-byte GRH with the
// sender's QPN; a send with an AH of another PD is refused at post.
TEST_P(Transports, UdDatagramsGoThroughAddressHandlesOfBothGids) {
  Side s(a_->socket), r(other().socket);
  ASSERT_EQ(s.error, "");
  ASSERT_EQ(r.error, "");
  uroce::QueuePair* sq = s.qp(IBV_QPT_UD);
  uroce::QueuePair* rq = r.qp(IBV_QPT_UD);
  ASSERT_TRUE(sq && rq) << s.ctx->last_error() << r.ctx->last_error();
  constexpr std::uint32_t kQkey = 0x11111111;
  ASSERT_EQ(uroce::ready_ud(sq, kQkey, 0x10), 0) << s.ctx->last_error();
  ASSERT_EQ(uroce::ready_ud(rq, kQkey, 0x20), 0) << r.ctx->last_error();
  for (int gid = 1; gid >= 0; --gid) {
    ibv_gid dgid{};
    ASSERT_EQ(r.ctx->query_gid(gid, dgid), 0);
    ibv_ah_attr attr{};
    attr.is_global = 1;
    attr.port_num = 1;
    attr.grh.dgid = dgid;
    attr.grh.sgid_index = static_cast<std::uint8_t>(gid);
    attr.grh.hop_limit = 64;
    uroce::AddressHandle* ah = s.pd->create_ah(attr);
    ASSERT_NE(ah, nullptr) << s.ctx->last_error();
    constexpr int kDatagrams = 8;
    for (int i = 0; i < kDatagrams; ++i) {
      ASSERT_EQ(uroce::test::post_recv_one(rq, r.buf + i * 2048, 2048, r.mr->lkey, 200 + i), 0);
    }
    // UD drops a datagram that finds no WQE: the receives reach the
    // daemon's QP at its worker's next round, before the first datagram.
    std::this_thread::sleep_for(50ms);
    for (int i = 0; i < kDatagrams; ++i) {
      std::memset(s.buf + i * 1024, 'A' + i + gid, 1000);
      ibv_sge sge{reinterpret_cast<std::uint64_t>(s.buf + i * 1024), 1000, s.mr->lkey};
      ibv_send_wr wr{};
      wr.wr_id = i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND_WITH_IMM;
      wr.imm_data = htonl(0x1000 + i);
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.ud.ah = ah->ibv();
      wr.wr.ud.remote_qpn = rq->qp_num();
      wr.wr.ud.remote_qkey = kQkey;
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(sq->post_send(&wr, &bad), 0) << s.ctx->last_error();
      // One in flight: UD drops what a receiver has no WQE for, and both
      // sides here keep up; the order is the posting order.
      ASSERT_EQ(s.poll(1).size(), 1u);
      const std::vector<ibv_wc> wc = r.poll(1);
      ASSERT_EQ(wc.size(), 1u) << "gid " << gid << " datagram " << i;
      EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc[0].wr_id, 200u + i);
      EXPECT_EQ(wc[0].byte_len, 1000u + 40u) << "the GRH's 40 bytes come first";
      EXPECT_EQ(wc[0].src_qp, sq->qp_num());
      EXPECT_TRUE(wc[0].wc_flags & IBV_WC_GRH);
      EXPECT_TRUE(wc[0].wc_flags & IBV_WC_WITH_IMM);
      EXPECT_EQ(ntohl(wc[0].imm_data), 0x1000u + i);
      EXPECT_EQ(r.buf[i * 2048 + 40], 'A' + i + gid);
      EXPECT_EQ(r.buf[i * 2048 + 40 + 999], 'A' + i + gid);
    }
    // Too long for one datagram: refused at post (no completion would come).
    ibv_sge big{reinterpret_cast<std::uint64_t>(s.buf), 8192, s.mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &big;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.wr.ud.ah = ah->ibv();
    wr.wr.ud.remote_qpn = rq->qp_num();
    wr.wr.ud.remote_qkey = kQkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(sq->post_send(&wr, &bad), EINVAL);
    EXPECT_EQ(s.pd->destroy_ah(ah), 0) << s.ctx->last_error();
  }
  // An AH of another PD of the same program: refused, as in process.
  uroce::ProtectionDomain* pd2 = s.ctx->alloc_pd();
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  r.ctx->query_gid(1, attr.grh.dgid);
  attr.grh.sgid_index = 1;
  uroce::AddressHandle* other_pd_ah = pd2->create_ah(attr);
  ASSERT_NE(other_pd_ah, nullptr) << s.ctx->last_error();
  ibv_sge sge{reinterpret_cast<std::uint64_t>(s.buf), 16, s.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.wr.ud.ah = other_pd_ah->ibv();
  wr.wr.ud.remote_qpn = rq->qp_num();
  wr.wr.ud.remote_qkey = kQkey;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(sq->post_send(&wr, &bad), EINVAL);
  EXPECT_NE(s.ctx->last_error().find("address handle of the QP's PD"), std::string::npos) << s.ctx->last_error();
  EXPECT_EQ(pd2->destroy_ah(other_pd_ah), 0);
}

// UC: WRITEs (with and without immediate data) and SENDs arrive whole, and
// a READ is refused at post (IBTA table 39: UC has no READ).
TEST_P(Transports, UcWritesAndSendsArrive) {
  Side s(a_->socket), r(other().socket);
  ASSERT_EQ(s.error, "");
  ASSERT_EQ(r.error, "");
  uroce::QueuePair* sq = s.qp(IBV_QPT_UC);
  uroce::QueuePair* rq = r.qp(IBV_QPT_UC);
  ASSERT_TRUE(sq && rq) << s.ctx->last_error() << r.ctx->last_error();
  uroce::ConnectParams p;
  ASSERT_EQ(uroce::connect_rc(sq, r.ctx->gid(), rq->qp_num(), p.psn_a, p.psn_b, p), 0) << s.ctx->last_error();
  ASSERT_EQ(uroce::connect_rc(rq, s.ctx->gid(), sq->qp_num(), p.psn_b, p.psn_a, p), 0) << r.ctx->last_error();
  for (std::size_t i = 0; i < 8192; ++i) s.buf[i] = static_cast<std::uint8_t>(i * 7 + 3);
  // Receives first: UC has no RNR NAK, a message that finds no WQE is
  // dropped (and a WQE posted just before a SEND may reach the daemon's
  // QP after the SEND reaches it from the other daemon).
  ASSERT_EQ(uroce::test::post_recv_one(rq, r.buf + 16384, 4096, r.mr->lkey, 7), 0);
  ASSERT_EQ(uroce::test::post_recv_one(rq, r.buf + 32768, 4096, r.mr->lkey, 8), 0);
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(uroce::test::post_rdma(sq, IBV_WR_RDMA_WRITE, s.buf, 8192, s.mr->lkey, r.buf + 4096, r.mr->rkey, 1), 0)
      << s.ctx->last_error();
  ASSERT_EQ(s.poll(1).size(), 1u);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(s.buf), 16, s.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(0xabcd);
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(r.buf);
  wr.wr.rdma.rkey = r.mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(sq->post_send(&wr, &bad), 0) << s.ctx->last_error();
  ASSERT_EQ(s.poll(1).size(), 1u);
  std::vector<ibv_wc> wc = r.poll(1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(wc[0].imm_data), 0xabcdu);
  EXPECT_EQ(std::memcmp(r.buf + 4096, s.buf, 8192), 0) << "the plain WRITE's bytes";
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(std::memcmp(r.buf, s.buf, 16), 0);
  ASSERT_EQ(uroce::test::post_send_one(sq, IBV_WR_SEND, s.buf + 100, 3000, s.mr->lkey, 3), 0);
  ASSERT_EQ(s.poll(1).size(), 1u);
  wc = r.poll(1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 8u);
  EXPECT_EQ(wc[0].byte_len, 3000u);
  EXPECT_EQ(std::memcmp(r.buf + 32768, s.buf + 100, 3000), 0);
  EXPECT_EQ(uroce::test::post_rdma(sq, IBV_WR_RDMA_READ, s.buf, 64, s.mr->lkey, r.buf, r.mr->rkey, 4), EINVAL);
}

// Selective repeat sprayed over four paths between two clients' QPs in the
// daemons: the daemons' QPs run it (the clients read the options back),
// WRITE, SEND and READ arrive whole, and the counters come back whole: the
// daemon sends every one (the first 40 only, before protocol 9), so
// `completions` and selective repeat's own, late in the list, are read.
TEST_P(Transports, SelectiveRepeatSprayedAndItsCountersThroughTheDaemons) {
  Side s(a_->socket), r(other().socket);
  ASSERT_EQ(s.error, "");
  ASSERT_EQ(r.error, "");
  uroce::QueuePair* sq = s.qp(IBV_QPT_RC);
  uroce::QueuePair* rq = r.qp(IBV_QPT_RC);
  ASSERT_TRUE(sq && rq) << s.ctx->last_error() << r.ctx->last_error();
  uroce::ConnectParams p;
  p.mtu = IBV_MTU_1024;
  p.transport.selective_repeat = true;
  p.transport.spray_paths = 4;
  ASSERT_EQ(uroce::connect_rc(sq, r.ctx->gid(), rq->qp_num(), p.psn_a, p.psn_b, p), 0) << s.ctx->last_error();
  ASSERT_EQ(uroce::connect_rc(rq, s.ctx->gid(), sq->qp_num(), p.psn_b, p.psn_a, p), 0) << r.ctx->last_error();
  for (uroce::QueuePair* q : {sq, rq}) {
    ibv_qp_attr attr{};
    ASSERT_EQ(q->query(attr, IBV_QP_STATE), 0);
    EXPECT_TRUE(q->transport_options().selective_repeat);
    EXPECT_EQ(q->transport_options().spray_paths, 4);
  }
  for (std::size_t i = 0; i < 16384; ++i) s.buf[i] = static_cast<std::uint8_t>(i * 13 + 1);
  ASSERT_EQ(uroce::test::post_recv_one(rq, r.buf + 32768, 16384, r.mr->lkey, 7), 0);
  ASSERT_EQ(uroce::test::post_rdma(sq, IBV_WR_RDMA_WRITE, s.buf, 16384, s.mr->lkey, r.buf, r.mr->rkey, 1), 0);
  ASSERT_EQ(uroce::test::post_send_one(sq, IBV_WR_SEND, s.buf, 10000, s.mr->lkey, 2), 0);
  std::vector<ibv_wc> wc = s.poll(2);
  ASSERT_EQ(wc.size(), 2u);
  for (const ibv_wc& w : wc) EXPECT_EQ(w.status, IBV_WC_SUCCESS) << "wr " << w.wr_id;
  wc = r.poll(1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].byte_len, 10000u);
  EXPECT_EQ(std::memcmp(r.buf, s.buf, 16384), 0) << "the WRITE's bytes";
  EXPECT_EQ(std::memcmp(r.buf + 32768, s.buf, 10000), 0) << "the SEND's bytes";
  EXPECT_EQ(sq->counter("completions"), 2u);
  EXPECT_EQ(rq->counter("completions"), 1u);
  EXPECT_EQ(sq->counter("sr_sack_refused"), 0u);
  EXPECT_GE(rq->counter("acks_sent"), 1u) << "SACKs, counted as ACKs";
}

// Stock rdma-core pingpongs, each end a program under uroce-run --service:
// the server on a, the client on a (loopback) or b. Each must exit 0 and
// report every iteration it was asked for.
TEST_P(Transports, StockPingpongs) {
  struct Case {
    std::string args;
    int iters;
  };
  // ibv_xsrq_pingpong (XRC: initiator QPs into the peer's XRC SRQs through
  // its target QPs) prints only "success" when every message came back.
  const Case cases[] = {{"ibv_srq_pingpong -d uroce0 -g 1 -q 8 -r 64", 500},
                        {"ibv_ud_pingpong -d uroce0 -g 1 -s 1024", 500},
                        {"ibv_ud_pingpong -d uroce0 -g 0 -s 1024", 300},
                        {"ibv_uc_pingpong -d uroce0 -g 1 -s 4096", 500},
                        {"ibv_xsrq_pingpong -d uroce0 -g 1 -s 4096", 300}};
  for (const Case& k : cases) {
    const int tcp = uroce::test::free_tcp_port();
    const std::string args = k.args + " -n " + std::to_string(k.iters) + " -p " + std::to_string(tcp);
    Process s = spawn(std::string(UROCE_RUN) + " --service --socket " + a_->socket + " timeout 60 " + args,
                      dir_ + "/pp-s.log");
    uroce::test::wait_tcp_listening(tcp);
    Process c = spawn(std::string(UROCE_RUN) + " --service --socket " + other().socket + " timeout 60 " + args +
                          " 127.0.0.1",
                      dir_ + "/pp-c.log");
    const int rc = c.wait(), rs = s.wait();
    EXPECT_EQ(rc, 0) << args << "\n" << c.out();
    EXPECT_EQ(rs, 0) << args << "\n" << s.out();
    for (const Process* p : {&c, &s}) {
      std::smatch m;
      const std::string out = p->out();
      if (k.args.rfind("ibv_xsrq_pingpong", 0) == 0) {
        EXPECT_NE(out.find("success"), std::string::npos) << args << "\n" << out;
        continue;
      }
      // "N iters in S seconds = U usec/iter": S has two decimals, so a fast
      // run (the pair on one daemon) prints 0.00; the time per iteration is
      // the figure that must be there.
      ASSERT_TRUE(std::regex_search(out, m, std::regex("(\\d+) iters in [0-9.]+ seconds = ([0-9.]+) usec/iter")))
          << args << "\n" << out;
      EXPECT_EQ(std::stoi(m[1]), k.iters) << args;
      EXPECT_GT(std::stod(m[2]), 0.0) << args << "\n" << out;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Service, Transports, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "TwoDaemons" : "OneDaemon"; });

// A client cannot name another client's SRQ, PD or address handle: each is
// unknown in its own table (EINVAL), and a UD send slot with another
// client's AH number sends nothing.
TEST(ServiceTransportsHostile, AClientCannotNameAnotherClientsSrqPdOrAddressHandle) {
  const uroce::test::TempDir tmp("/tmp/uroce-svct-hostile-");
  Uroced d(uroce::test::memif_uroced("svct", tmp.dir, "hostile", true, 1));
  ASSERT_EQ(d.error, "");
  Side a(d.socket), b(d.socket);
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  uroce::SharedReceiveQueue* srq = a.pd->create_srq(uroce::SrqInitAttr{8, 1, 0});
  ASSERT_NE(srq, nullptr) << a.ctx->last_error();
  const std::uint32_t srq_handle = uroce::internal::impl_of(*srq).remote->handle;
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  attr.grh.dgid = a.ctx->gid();
  attr.grh.sgid_index = 1;
  uroce::AddressHandle* a_ah = a.pd->create_ah(attr);
  ASSERT_NE(a_ah, nullptr) << a.ctx->last_error();
  const std::uint32_t a_ah_number = a_ah->ibv()->handle;

  std::string why;
  auto raw = uroce::service::Client::connect(d.socket, why);
  ASSERT_TRUE(raw) << why;
  uroce::service::Request req;
  uroce::service::Reply reply;
  for (auto op : {uroce::service::Op::kQuerySrq, uroce::service::Op::kDestroySrq}) {
    req = uroce::service::Request{};
    req.op = op;
    req.handle = srq_handle;
    EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
    EXPECT_NE(why.find("no SRQ"), std::string::npos) << why;
  }
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kModifySrq;
  req.modify_srq.srq = srq_handle;
  req.modify_srq.mask = IBV_SRQ_LIMIT;
  req.modify_srq.attr.srq_limit = 1;
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kDestroyAh;
  req.handle = a_ah_number;
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  EXPECT_NE(why.find("no address handle"), std::string::npos) << why;
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kCreateAh;
  req.create_ah = uroce::service::CreateAh{a.pd->handle(), 5, attr};
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL) << "a's PD";
  req.create_ah.ah = uroce::service::kMaxAhNumber;
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL) << "a number out of range";
  // A QP of b's on a's SRQ.
  uroce::QpInitAttr init;
  init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  init.send_cq = init.recv_cq = b.cq;
  uroce::service::CreateQp cq{b.pd->handle(), uroce::internal::impl_of(*b.cq).remote->handle,
                              uroce::internal::impl_of(*b.cq).remote->handle, IBV_QPT_RC, 0, init.cap, srq_handle};
  int err = 0;
  auto stolen = raw->create_qp(cq, why, err);
  EXPECT_FALSE(stolen);
  EXPECT_EQ(err, EINVAL);
  // An XRC domain of a's: unknown to anyone else, for an SRQ, a target QP
  // or a close.
  uroce::XrcDomain* xrcd = a.ctx->open_xrcd();
  ASSERT_NE(xrcd, nullptr) << a.ctx->last_error();
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kCloseXrcd;
  req.handle = xrcd->handle();
  EXPECT_EQ(raw->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  EXPECT_NE(why.find("no XRC domain"), std::string::npos) << why;
  // b's library names a's domain by its handle (a forged XrcDomain of b's
  // context): the daemon looks in b's table, where b's own domain is, and
  // finds none of that handle.
  uroce::XrcDomain* own = b.ctx->open_xrcd();
  ASSERT_NE(own, nullptr) << b.ctx->last_error();
  uroce::XrcDomain forged(b.ctx.get(), xrcd->handle() == own->handle() ? xrcd->handle() + 1 : xrcd->handle(), -1);
  uroce::SrqInitAttr xs;
  xs.max_wr = 8;
  xs.xrcd = &forged;
  xs.cq = b.cq;
  EXPECT_EQ(b.pd->create_srq(xs), nullptr);
  EXPECT_NE(b.ctx->last_error().find("not this client's"), std::string::npos) << b.ctx->last_error();
  uroce::QpInitAttr xt;
  xt.send_cq = xt.recv_cq = b.cq;
  xt.qp_type = IBV_QPT_XRC_RECV;
  xt.xrcd = &forged;
  EXPECT_EQ(b.pd->create_qp(xt), nullptr);
  EXPECT_NE(b.ctx->last_error().find("not this client's"), std::string::npos) << b.ctx->last_error();
  xs.xrcd = xt.xrcd = own;
  uroce::SharedReceiveQueue* own_srq = b.pd->create_srq(xs);
  EXPECT_NE(own_srq, nullptr) << "b's own domain works: " << b.ctx->last_error();
  uroce::QueuePair* own_target = b.pd->create_qp(xt);
  EXPECT_NE(own_target, nullptr) << b.ctx->last_error();
  EXPECT_EQ(b.ctx->close_xrcd(own), EBUSY) << "its SRQ and target QP remain";
  EXPECT_EQ(b.pd->destroy_qp(own_target), 0);
  EXPECT_EQ(b.pd->destroy_srq(own_srq), 0);
  EXPECT_EQ(b.ctx->close_xrcd(own), 0);
  EXPECT_EQ(a.ctx->close_xrcd(xrcd), 0) << "a's domain is untouched and still a's";

  // b's UD QP writes a's AH number into its send ring (its library would
  // refuse: b has no such AH): the daemon finds none in b's table and a's
  // UD QP receives nothing, while b's own AH reaches it.
  uroce::QueuePair* aq = a.qp(IBV_QPT_UD);
  uroce::QueuePair* bq = b.qp(IBV_QPT_UD);
  ASSERT_TRUE(aq && bq);
  ASSERT_EQ(uroce::ready_ud(aq, 0x22, 1), 0);
  ASSERT_EQ(uroce::ready_ud(bq, 0x22, 1), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(uroce::test::post_recv_one(aq, a.buf + i * 2048, 2048, a.mr->lkey, i), 0);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(b.buf), 64, b.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.remote_qpn = aq->qp_num();
  wr.wr.ud.remote_qkey = 0x22;
  ASSERT_EQ(uroce::internal::impl_of(*bq).remote->post_send(wr, a_ah_number), 0);
  EXPECT_TRUE(a.poll(1, 1s).empty()) << "a datagram through another client's AH";
  uroce::AddressHandle* b_ah = b.pd->create_ah(attr);
  ASSERT_NE(b_ah, nullptr) << b.ctx->last_error();
  wr.wr.ud.ah = b_ah->ibv();
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(bq->post_send(&wr, &bad), 0) << b.ctx->last_error();
  const std::vector<ibv_wc> got = a.poll(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].src_qp, bq->qp_num());
  EXPECT_EQ(a.pd->destroy_ah(a_ah), 0);
}

// Budgets: one SRQ and one AH per client (--max-srqs 1 --max-ahs 1); the
// next gets a clear error naming the key, and freeing one makes room.
TEST(ServiceTransportsHostile, SrqsAndAddressHandlesPastTheirBudgetGetAClearError) {
  const uroce::test::TempDir tmp("/tmp/uroce-svct-budget-");
  Uroced d(uroce::test::memif_uroced("svct", tmp.dir, "budget", true, 1, "--max-srqs 1 --max-ahs 1"));
  ASSERT_EQ(d.error, "");
  Side a(d.socket);
  ASSERT_EQ(a.error, "");
  uroce::SharedReceiveQueue* srq = a.pd->create_srq(uroce::SrqInitAttr{8, 1, 0});
  ASSERT_NE(srq, nullptr) << a.ctx->last_error();
  EXPECT_EQ(a.pd->create_srq(uroce::SrqInitAttr{8, 1, 0}), nullptr);
  EXPECT_NE(a.ctx->last_error().find("max_srqs"), std::string::npos) << a.ctx->last_error();
  EXPECT_EQ(a.pd->create_srq(uroce::SrqInitAttr{1u << 30, 1, 0}), nullptr) << "past max_qp_wr";
  ASSERT_EQ(a.pd->destroy_srq(srq), 0);
  EXPECT_NE(a.pd->create_srq(uroce::SrqInitAttr{8, 1, 0}), nullptr) << a.ctx->last_error();
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  attr.grh.dgid = a.ctx->gid();
  attr.grh.sgid_index = 1;
  ASSERT_NE(a.pd->create_ah(attr), nullptr) << a.ctx->last_error();
  EXPECT_EQ(a.pd->create_ah(attr), nullptr);
  EXPECT_NE(a.ctx->last_error().find("max_ahs"), std::string::npos) << a.ctx->last_error();
  // Without a GRH: refused with the reason, as in process.
  attr.is_global = 0;
  EXPECT_EQ(a.pd->create_ah(attr), nullptr);
}

}  // namespace
