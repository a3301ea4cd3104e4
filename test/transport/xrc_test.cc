// XRC (IBTA annex A14) between two uroce devices on the simulated link: an
// initiator QP on a sends into the XRC SRQs of b's domain through one
// target QP. Each message lands in the SRQ its XRCETH names and completes
// on that SRQ's CQ; RDMA and atomics are checked against the named SRQ's
// PD (not the target QP's); an SRQ of another domain, or none, is refused
// with an Invalid Request NAK; and a randomised run under loss, reordering
// and duplication delivers every message whole, in order, to its SRQ.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "support/rc_fixture.h"
#include "support/test_seed.h"

namespace uroce::test {
namespace {

constexpr int kAll =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr std::size_t kBytes = 1 << 20;

// a: an XRC initiator QP. b: an XRC domain with two SRQs, each of its own
// PD and CQ, and a target QP (on PD 1) connected to a's initiator.
struct XrcRig {
  explicit XrcRig(std::uint64_t seed, sim::Impairments a_to_b = {}, sim::Impairments b_to_a = {})
      : net(seed, a_to_b, b_to_a) {
    pda = net.a->alloc_pd();
    cqa = net.a->create_cq(4096);
    QpInitAttr ini;
    ini.qp_type = IBV_QPT_XRC_SEND;
    ini.send_cq = cqa;  // no recv_cq: an initiator receives nothing
    ini.cap = ibv_qp_cap{512, 0, 4, 0, 64};
    qa = pda->create_qp(ini);
    bufa = static_cast<std::uint8_t*>(net.a->alloc_buffer(kBytes));
    mra = pda->reg_mr(bufa, kBytes, kAll);

    xrcd = net.b->open_xrcd();
    for (int i = 0; i < 2; ++i) {
      pdb[i] = net.b->alloc_pd();
      cqb[i] = net.b->create_cq(4096);
      bufb[i] = static_cast<std::uint8_t*>(net.b->alloc_buffer(kBytes));
      mrb[i] = pdb[i]->reg_mr(bufb[i], kBytes, kAll);
      srq[i] = make_srq(xrcd, pdb[i], cqb[i]);
    }
    QpInitAttr tgt;
    tgt.qp_type = IBV_QPT_XRC_RECV;
    tgt.xrcd = xrcd;
    tgt.send_cq = tgt.recv_cq = cqb[0];
    target = pdb[0]->create_qp(tgt);
    ConnectParams params;
    params.mtu = IBV_MTU_1024;
    connected = qa != nullptr && target != nullptr ? net.connect(qa, target, params) : -1;
  }

  SharedReceiveQueue* make_srq(XrcDomain* domain, ProtectionDomain* pd, CompletionQueue* cq) {
    SrqInitAttr s;
    s.max_wr = 1024;
    s.max_sge = 2;
    s.xrcd = domain;
    s.cq = cq;
    return pd->create_srq(s);
  }

  // A WR of a's to the SRQ numbered `srqn` at b.
  int post(ibv_wr_opcode op, std::uint32_t srqn, std::uint64_t local_off, std::uint32_t len, std::uint64_t remote,
           std::uint32_t rkey, std::uint64_t wr_id, std::uint32_t imm = 0) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(bufa + local_off), len, mra->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = imm;
    wr.qp_type.xrc.remote_srqn = srqn;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
      wr.wr.atomic.remote_addr = remote;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = 5;
    } else {
      wr.wr.rdma.remote_addr = remote;
      wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad = nullptr;
    return qa->post_send(&wr, &bad);
  }
  int post_recv(int i, std::uint64_t off, std::uint32_t len, std::uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(bufb[i] + off), len, mrb[i]->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return srq[i]->post_recv(&wr, &bad);
  }
  std::uint64_t va(int i, std::uint64_t off) const { return reinterpret_cast<std::uint64_t>(bufb[i] + off); }

  device::SimPair net;
  ProtectionDomain* pda = nullptr;
  CompletionQueue* cqa = nullptr;
  QueuePair* qa = nullptr;
  std::uint8_t* bufa = nullptr;
  MemoryRegion* mra = nullptr;
  XrcDomain* xrcd = nullptr;
  ProtectionDomain* pdb[2] = {};
  CompletionQueue* cqb[2] = {};
  std::uint8_t* bufb[2] = {};
  MemoryRegion* mrb[2] = {};
  SharedReceiveQueue* srq[2] = {};
  QueuePair* target = nullptr;
  int connected = -1;
};

void expect_ready(const XrcRig& r) {
  ASSERT_EQ(r.connected, 0) << r.net.a->last_error() << " / " << r.net.b->last_error();
  ASSERT_NE(r.srq[0], nullptr);
  ASSERT_NE(r.srq[1], nullptr);
  ASSERT_NE(r.srq[0]->srq_num(), 0u);
  ASSERT_NE(r.srq[0]->srq_num(), r.srq[1]->srq_num());
}

TEST(Xrc, EachSendLandsInTheSrqItNamesAndCompletesOnThatSrqsCq) {
  XrcRig r(1);
  expect_ready(r);
  fill_pattern(r.bufa, 3 * 4096, 7);
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 2; ++k) ASSERT_EQ(r.post_recv(i, k * 8192, 8192, 100 * i + k), 0);
  }
  // Four packets to SRQ 0, one to SRQ 1, two more (with immediate) to SRQ 0.
  ASSERT_EQ(r.post(IBV_WR_SEND, r.srq[0]->srq_num(), 0, 4096, 0, 0, 1), 0);
  ASSERT_EQ(r.post(IBV_WR_SEND, r.srq[1]->srq_num(), 4096, 1000, 0, 0, 2), 0);
  ASSERT_EQ(r.post(IBV_WR_SEND_WITH_IMM, r.srq[0]->srq_num(), 8192, 2048, 0, 0, 3, htonl(0xabcd)), 0);
  const auto sent = wait_completions(r.net, r.cqa, 3, 1'000'000'000);
  ASSERT_EQ(sent.size(), 3u);
  for (const ibv_wc& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_str(wc.status);
  const auto got0 = wait_completions(r.net, r.cqb[0], 2, 1'000'000'000);
  const auto got1 = wait_completions(r.net, r.cqb[1], 1, 1'000'000'000);
  ASSERT_EQ(got0.size(), 2u);
  ASSERT_EQ(got1.size(), 1u);
  EXPECT_EQ(got0[0].wr_id, 0u);
  EXPECT_EQ(got0[0].byte_len, 4096u);
  EXPECT_EQ(got0[0].qp_num, r.target->qp_num());
  EXPECT_EQ(got0[1].wr_id, 1u);
  EXPECT_EQ(got0[1].byte_len, 2048u);
  EXPECT_TRUE(got0[1].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(got0[1].imm_data), 0xabcdu);
  EXPECT_EQ(got1[0].wr_id, 100u);
  EXPECT_EQ(got1[0].byte_len, 1000u);
  EXPECT_EQ(std::memcmp(r.bufb[0], r.bufa, 4096), 0);
  EXPECT_EQ(std::memcmp(r.bufb[0] + 8192, r.bufa + 8192, 2048), 0);
  EXPECT_EQ(std::memcmp(r.bufb[1], r.bufa + 4096, 1000), 0);
  EXPECT_EQ(r.srq[0]->count(), 0u);
  EXPECT_EQ(r.srq[1]->count(), 1u);
}

// The target QP is on PD 0; SRQ 1 and its region are PD 1's. A WRITE, READ
// and atomic into PD 1's region work when they name SRQ 1, and the WRITE
// naming SRQ 0 is a remote access error: the PD is the named SRQ's.
TEST(Xrc, RdmaAndAtomicsAreCheckedAgainstTheNamedSrqsPd) {
  XrcRig r(2);
  expect_ready(r);
  fill_pattern(r.bufa, 8192, 3);
  const std::uint32_t rkey1 = r.mrb[1]->rkey;
  std::uint64_t counter = 40;
  std::memcpy(r.bufb[1] + 65536, &counter, 8);
  ASSERT_EQ(r.post(IBV_WR_RDMA_WRITE, r.srq[1]->srq_num(), 0, 5000, r.va(1, 0), rkey1, 1), 0);
  ASSERT_EQ(r.post(IBV_WR_RDMA_READ, r.srq[1]->srq_num(), 16384, 5000, r.va(1, 0), rkey1, 2), 0);
  ASSERT_EQ(r.post(IBV_WR_ATOMIC_FETCH_AND_ADD, r.srq[1]->srq_num(), 32768, 8, r.va(1, 65536), rkey1, 3), 0);
  auto done = wait_completions(r.net, r.cqa, 3, 1'000'000'000);
  ASSERT_EQ(done.size(), 3u);
  for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id << ": " << wc_status_str(wc.status);
  EXPECT_EQ(std::memcmp(r.bufb[1], r.bufa, 5000), 0);
  EXPECT_EQ(std::memcmp(r.bufa + 16384, r.bufa, 5000), 0) << "the READ brought back what the WRITE placed";
  std::uint64_t orig = 0, now = 0;
  std::memcpy(&orig, r.bufa + 32768, 8);
  std::memcpy(&now, r.bufb[1] + 65536, 8);
  EXPECT_EQ(orig, 40u);
  EXPECT_EQ(now, 45u);

  const std::uint64_t refused_before = r.target->counter("drop_rkey_violation");
  ASSERT_EQ(r.post(IBV_WR_RDMA_WRITE, r.srq[0]->srq_num(), 0, 64, r.va(1, 4096), rkey1, 4), 0);
  done = wait_completions(r.net, r.cqa, 1, 1'000'000'000);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_REM_ACCESS_ERR) << wc_status_str(done[0].status);
  EXPECT_EQ(r.target->counter("drop_rkey_violation"), refused_before + 1);
  EXPECT_EQ(r.target->state(), IBV_QPS_ERR);
}

// An SRQ of another domain of b's (and a number no SRQ has) is no SRQ of
// the target QP's domain: Invalid Request, counted, nothing placed.
TEST(Xrc, AnSrqOfAnotherDomainIsRefused) {
  for (const bool other_domain : {true, false}) {
    XrcRig r(3);
    expect_ready(r);
    XrcDomain* other = r.net.b->open_xrcd();
    ASSERT_NE(other, nullptr);
    SharedReceiveQueue* foreign = r.make_srq(other, r.pdb[0], r.cqb[0]);
    ASSERT_NE(foreign, nullptr);
    ibv_sge sge{reinterpret_cast<std::uint64_t>(r.bufb[0]), 4096, r.mrb[0]->lkey};
    ibv_recv_wr rw{};
    rw.sg_list = &sge;
    rw.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(foreign->post_recv(&rw, &bad), 0);
    const std::uint32_t srqn = other_domain ? foreign->srq_num() : 0xfedcba;
    std::memset(r.bufa, 0x77, 64);
    ASSERT_EQ(r.post(IBV_WR_SEND, srqn, 0, 64, 0, 0, 1), 0);
    const auto done = wait_completions(r.net, r.cqa, 1, 1'000'000'000);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, IBV_WC_REM_INV_REQ_ERR) << wc_status_str(done[0].status);
    EXPECT_EQ(r.target->counter("drop_xrc_srq"), 1u);
    EXPECT_EQ(foreign->count(), 1u) << "its WQE stays";
    EXPECT_NE(r.bufb[0][0], 0x77);
    EXPECT_EQ(r.net.b->close_xrcd(other), EBUSY) << "its SRQ remains";
    EXPECT_EQ(r.pdb[0]->destroy_srq(foreign), 0);
    EXPECT_EQ(r.net.b->close_xrcd(other), 0);
  }
}

TEST(Xrc, ObjectRulesGiveClearErrors) {
  XrcRig r(4);
  expect_ready(r);
  Context& b = *r.net.b;
  // A target QP needs a domain; an XRC SRQ takes no ordinary QP.
  QpInitAttr t;
  t.qp_type = IBV_QPT_XRC_RECV;
  t.send_cq = t.recv_cq = r.cqb[0];
  EXPECT_EQ(r.pdb[0]->create_qp(t), nullptr);
  QpInitAttr rc;
  rc.send_cq = rc.recv_cq = r.cqb[0];
  rc.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  rc.srq = r.srq[0];
  EXPECT_EQ(r.pdb[0]->create_qp(rc), nullptr);
  EXPECT_NE(b.last_error().find("XRC SRQ"), std::string::npos) << b.last_error();
  // The target sends nothing; the domain stays while its objects do.
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_NE(r.target->post_send(&wr, &bad), 0);
  EXPECT_EQ(b.close_xrcd(r.xrcd), EBUSY);
  EXPECT_EQ(r.net.b->destroy_cq(r.cqb[1]), EBUSY) << "SRQ 1 completes on it";
}

// Random SENDs (1 to 5 packets, some with immediate) to random SRQs under
// loss, reordering and duplication both ways: every message completes once,
// whole, in order within its SRQ.
TEST(Xrc, RandomSendsUnderLossReachTheirSrqsWholeAndInOrder) {
  const std::uint64_t seed = test_seed();
  sim::Impairments imp;
  imp.loss = 0.02;
  imp.reorder = 0.01;
  imp.duplicate = 0.01;
  XrcRig r(seed, imp, imp);
  expect_ready(r);
  std::mt19937_64 rng(seed);
  constexpr int kMessages = 300;
  struct Sent {
    int srq;
    std::uint32_t off, len;
  };
  std::vector<Sent> sent;
  std::vector<std::vector<int>> by_srq(2);
  fill_pattern(r.bufa, kBytes, static_cast<std::uint32_t>(seed));
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < kMessages; ++k) ASSERT_EQ(r.post_recv(i, (k % 128) * 8192, 8192, k), 0);
  }
  int posted = 0, completed = 0;
  std::vector<ibv_wc> got[2];
  // What arrived so far, SRQ by SRQ, checked against what was sent to it (a
  // receive slot is reused every 128 messages, so checked before then).
  const auto take_arrivals = [&] {
    for (int i = 0; i < 2; ++i) {
      ibv_wc wc[64];
      for (int n; (n = r.cqb[i]->poll(64, wc)) > 0;) {
        for (int k = 0; k < n; ++k) {
          const std::size_t nth = got[i].size();
          ASSERT_LT(nth, by_srq[i].size()) << "a message too many in SRQ " << i << "; " << seed_note(seed);
          const Sent& s = sent[static_cast<std::size_t>(by_srq[i][nth])];
          ASSERT_EQ(wc[k].status, IBV_WC_SUCCESS) << seed_note(seed);
          ASSERT_EQ(wc[k].byte_len, s.len) << "message " << by_srq[i][nth] << "; " << seed_note(seed);
          ASSERT_EQ(std::memcmp(r.bufb[i] + (nth % 128) * 8192, r.bufa + s.off, s.len), 0)
              << "message " << by_srq[i][nth] << " in SRQ " << i << "; " << seed_note(seed);
          got[i].push_back(wc[k]);
        }
      }
    }
  };
  while (completed < kMessages) {
    while (posted < kMessages && posted - completed < 64) {
      const int i = static_cast<int>(rng() % 2);
      const auto len = static_cast<std::uint32_t>(1 + rng() % 5000);
      const auto off = static_cast<std::uint32_t>(rng() % (kBytes - 8192));
      by_srq[i].push_back(posted);
      sent.push_back({i, off, len});
      ASSERT_EQ(r.post(rng() % 3 == 0 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, r.srq[i]->srq_num(), off, len, 0, 0,
                       posted, static_cast<std::uint32_t>(posted)),
                0);
      ++posted;
    }
    const auto done = wait_completions(r.net, r.cqa, 1, 10'000'000'000);
    ASSERT_FALSE(done.empty()) << "no progress; " << seed_note(seed);
    for (const ibv_wc& wc : done) {
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_str(wc.status) << "; " << seed_note(seed);
      ASSERT_EQ(wc.wr_id, static_cast<std::uint64_t>(completed)) << seed_note(seed);
      ++completed;
    }
    take_arrivals();
  }
  // Each message completed at b before its ACK left: all are there.
  take_arrivals();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(got[i].size(), by_srq[i].size()) << "SRQ " << i << "; " << seed_note(seed);
  EXPECT_GT(r.qa->counter("retransmitted_packets"), 0u) << "the loss was felt; " << seed_note(seed);
}

}  // namespace
}  // namespace uroce::test
