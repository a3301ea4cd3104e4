// An embedder's own port, built from the public headers alone: this file is
// compiled with nothing but include/ on its include path (test/meson.build),
// so uroce/port.h and uroce/verbs.h must hold everything a port and its user
// need. Two in-memory ports wired back to back, which copy every frame, and
// a clock moved by hand carry a real RC WRITE and SEND between two Contexts.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "uroce/port.h"
#include "uroce/stats.h"
#include "uroce/verbs.h"

namespace {

using uroce::Context;
using uroce::QueuePair;

class ManualClock final : public uroce::Clock {
 public:
  std::uint64_t now_ns() override { return now_; }
  void advance(std::uint64_t ns) { now_ += ns; }

 private:
  std::uint64_t now_ = 1'000'000;
};

// One end of an in-memory cable. tx_burst copies each frame whole into the
// peer's inbox (no TX heads of its own: the engine writes into its memory);
// rx_burst lends inbox frames to the engine until rx_release.
class MemoryPort final : public uroce::PacketIo {
 public:
  MemoryPort(const std::uint8_t (&mac)[6], const ibv_gid& gid) : gid_(gid) { std::memcpy(mac_, mac, 6); }
  void connect(MemoryPort& peer) { peer_ = &peer; }

  std::uint16_t rx_burst(uroce::RxFrame* frames, std::uint16_t max) override {
    std::uint16_t n = 0;
    for (; n < max && !inbox_.empty(); ++n) {
      lent_.push_back(std::make_unique<std::vector<std::uint8_t>>(std::move(inbox_.front())));
      inbox_.pop_front();
      std::vector<std::uint8_t>& f = *lent_.back();
      frames[n] = {f.data(), static_cast<std::uint16_t>(f.size()), &f};
    }
    received_ += n;
    return n;
  }

  void rx_release(uroce::RxFrame* frames, std::uint16_t n) override {
    for (std::uint16_t i = 0; i < n; ++i) {
      for (auto it = lent_.begin(); it != lent_.end(); ++it) {
        if (it->get() == frames[i].cookie) {
          lent_.erase(it);
          break;
        }
      }
    }
  }

  std::uint16_t tx_burst(const uroce::TxFrame* frames, std::uint16_t n) override {
    for (std::uint16_t i = 0; i < n; ++i) {
      std::vector<std::uint8_t> bytes(frames[i].frame_bytes());
      EXPECT_EQ(frames[i].copy_to(bytes.data()), bytes.data() + bytes.size());
      peer_->inbox_.push_back(std::move(bytes));
    }
    sent_ += n;
    return n;
  }

  Resolution resolve(const ibv_gid& gid, std::uint8_t mac[6], bool) override {
    if (peer_ == nullptr || std::memcmp(gid.raw, peer_->gid_.raw, sizeof gid.raw) != 0) return Resolution::kUnreachable;
    std::memcpy(mac, peer_->mac_, 6);
    return Resolution::kKnown;
  }

  void visit_counters(void (*visit)(void* arg, const char* name, const char* description, std::uint64_t value),
                      void* arg) const override {
    visit(arg, "memory_tx_frames", "frames copied to the peer", sent_);
    visit(arg, "memory_rx_frames", "frames lent to the engine", received_);
  }

  std::uint64_t sent() const { return sent_; }
  std::uint64_t received() const { return received_; }
  std::size_t lent() const { return lent_.size(); }

 private:
  std::uint8_t mac_[6] = {};
  ibv_gid gid_;
  MemoryPort* peer_ = nullptr;
  std::deque<std::vector<std::uint8_t>> inbox_;
  std::vector<std::unique_ptr<std::vector<std::uint8_t>>> lent_;
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
};

constexpr std::uint8_t kMacA[6] = {0x02, 0, 0, 0, 0, 0x0a};
constexpr std::uint8_t kMacB[6] = {0x02, 0, 0, 0, 0, 0x0b};

// A device on one end of the cable.
std::unique_ptr<Context> open(MemoryPort& port, ManualClock& clock, const std::uint8_t (&mac)[6],
                              const ibv_gid& gid) {
  uroce::PortConfig cfg;
  cfg.io = &port;
  cfg.clock = &clock;
  std::memcpy(cfg.mac, mac, 6);
  cfg.gid = gid;
  cfg.buffer_pages = uroce::PortConfig::Pages::kNormal;
  std::string error;
  auto ctx = Context::open(cfg, error);
  EXPECT_NE(ctx, nullptr) << error;
  return ctx;
}

// RESET -> INIT -> RTR -> RTS towards `remote_qpn` at `remote_gid`, with the
// attributes IBTA table 91 asks for. Returns the first failing modify's errno.
int connect(QueuePair* qp, const ibv_gid& remote_gid, std::uint32_t remote_qpn, std::uint32_t send_psn,
            std::uint32_t recv_psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (int rc = qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return rc;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = recv_psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = remote_gid;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (int rc = qp->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return rc;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = send_psn;
  a.max_rd_atomic = 1;
  return qp->modify(a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

// Two devices on the cable, each with a PD, a CQ, an RC QP and a registered
// buffer: what an embedder sets up before it connects.
struct Cable {
  Cable() {
    a_port.connect(b_port);
    b_port.connect(a_port);
    a = open(a_port, clock, kMacA, gid_a);
    b = open(b_port, clock, kMacB, gid_b);
    for (Side* s : {&sa, &sb}) {
      Context& ctx = s == &sa ? *a : *b;
      s->pd = ctx.alloc_pd();
      s->cq = ctx.create_cq(64);
      uroce::QpInitAttr init;
      init.send_cq = init.recv_cq = s->cq;
      init.cap.max_send_wr = init.cap.max_recv_wr = 16;
      init.cap.max_send_sge = init.cap.max_recv_sge = 4;
      s->qp = s->pd->create_qp(init);
      s->buf = static_cast<std::uint8_t*>(ctx.alloc_buffer(kBytes));
      s->mr = s->pd->reg_mr(s->buf, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    }
  }

  // Runs both devices, a microsecond of virtual time per round, until `a_n`
  // completions are polled on A's CQ and `b_n` on B's, or 10 s pass.
  void run(std::size_t a_n, std::size_t b_n) {
    for (int round = 0; round < 10'000'000 && (a_wc.size() < a_n || b_wc.size() < b_n); ++round) {
      a->progress();
      b->progress();
      for (auto [cq, out] : {std::pair{sa.cq, &a_wc}, std::pair{sb.cq, &b_wc}}) {
        ibv_wc wc[8];
        for (int k; (k = cq->poll(8, wc)) > 0;) out->insert(out->end(), wc, wc + k);
      }
      clock.advance(1000);
    }
  }

  // Runs both devices until a round moves no frame (the cable is empty).
  void settle() {
    for (int round = 0; round < 1000; ++round) {
      const std::size_t moved = a->progress() + b->progress();
      clock.advance(1000);
      if (moved == 0) return;
    }
  }

  static constexpr std::size_t kBytes = 1 << 16;
  struct Side {
    uroce::ProtectionDomain* pd = nullptr;
    uroce::CompletionQueue* cq = nullptr;
    QueuePair* qp = nullptr;
    std::uint8_t* buf = nullptr;
    uroce::MemoryRegion* mr = nullptr;
  };

  ManualClock clock;
  ibv_gid gid_a = uroce::ipv4_gid({10, 0, 0, 1});
  ibv_gid gid_b = uroce::ipv4_gid({10, 0, 0, 2});
  MemoryPort a_port{kMacA, gid_a};
  MemoryPort b_port{kMacB, gid_b};
  std::unique_ptr<Context> a;
  std::unique_ptr<Context> b;
  Side sa;
  Side sb;
  std::vector<ibv_wc> a_wc;
  std::vector<ibv_wc> b_wc;
};

std::uint64_t port_stat(const Context& ctx, const char* name) {
  const std::vector<uroce::Stat> stats = ctx.stats();
  const uroce::Stat* s = uroce::find_stat(stats, uroce::StatScope::kPort, name);
  return s != nullptr ? s->value : ~std::uint64_t{0};
}

TEST(PublicPort, AnRcWriteAndSendCrossAnEmbeddersPort) {
  Cable c;
  ASSERT_NE(c.a, nullptr);
  ASSERT_NE(c.b, nullptr);
  ASSERT_NE(c.sa.mr, nullptr) << c.a->last_error();
  ASSERT_NE(c.sb.mr, nullptr) << c.b->last_error();
  ASSERT_EQ(connect(c.sa.qp, c.gid_b, c.sb.qp->qp_num(), 0x100, 0x200), 0) << c.a->last_error();
  ASSERT_EQ(connect(c.sb.qp, c.gid_a, c.sa.qp->qp_num(), 0x200, 0x100), 0) << c.b->last_error();
  ASSERT_EQ(c.sa.qp->state(), IBV_QPS_RTS);

  for (std::size_t i = 0; i < Cable::kBytes; ++i) c.sa.buf[i] = static_cast<std::uint8_t>(i * 7 + 3);

  // B takes the SEND at offset 40000.
  ibv_sge rsge{reinterpret_cast<std::uint64_t>(c.sb.buf + 40000), 8192, c.sb.mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 30;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(c.sb.qp->post_recv(&rwr, &bad_r), 0);

  // A WRITE of 10000 bytes (ten 1024-byte packets) to B at offset 100, then
  // a SEND of 3000 bytes gathered from two SGEs.
  ibv_sge wsge{reinterpret_cast<std::uint64_t>(c.sa.buf), 10000, c.sa.mr->lkey};
  ibv_sge ssge[2] = {{reinterpret_cast<std::uint64_t>(c.sa.buf + 20000), 1000, c.sa.mr->lkey},
                     {reinterpret_cast<std::uint64_t>(c.sa.buf + 30000), 2000, c.sa.mr->lkey}};
  ibv_send_wr send{};
  send.wr_id = 20;
  send.sg_list = ssge;
  send.num_sge = 2;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr write{};
  write.wr_id = 10;
  write.sg_list = &wsge;
  write.num_sge = 1;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.send_flags = IBV_SEND_SIGNALED;
  write.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(c.sb.buf + 100);
  write.wr.rdma.rkey = c.sb.mr->rkey;
  write.next = &send;
  ibv_send_wr* bad_s = nullptr;
  ASSERT_EQ(c.sa.qp->post_send(&write, &bad_s), 0) << c.a->last_error();

  c.run(2, 1);
  ASSERT_EQ(c.a_wc.size(), 2u);
  ASSERT_EQ(c.b_wc.size(), 1u);
  EXPECT_EQ(c.a_wc[0].status, IBV_WC_SUCCESS) << uroce::wc_status_str(c.a_wc[0].status);
  EXPECT_EQ(c.a_wc[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(c.a_wc[0].wr_id, 10u);
  EXPECT_EQ(c.a_wc[1].status, IBV_WC_SUCCESS) << uroce::wc_status_str(c.a_wc[1].status);
  EXPECT_EQ(c.a_wc[1].opcode, IBV_WC_SEND);
  EXPECT_EQ(c.a_wc[1].wr_id, 20u);
  EXPECT_EQ(c.b_wc[0].status, IBV_WC_SUCCESS) << uroce::wc_status_str(c.b_wc[0].status);
  EXPECT_EQ(c.b_wc[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(c.b_wc[0].wr_id, 30u);
  EXPECT_EQ(c.b_wc[0].byte_len, 3000u);
  EXPECT_EQ(c.b_wc[0].qp_num, c.sb.qp->qp_num());
  EXPECT_EQ(c.b_wc[0].src_qp, c.sa.qp->qp_num());

  EXPECT_EQ(std::memcmp(c.sb.buf + 100, c.sa.buf, 10000), 0);
  EXPECT_EQ(std::memcmp(c.sb.buf + 40000, c.sa.buf + 20000, 1000), 0);
  EXPECT_EQ(std::memcmp(c.sb.buf + 41000, c.sa.buf + 30000, 2000), 0);
  for (std::size_t off : {std::size_t{99}, std::size_t{10100}, std::size_t{43000}}) {
    EXPECT_EQ(c.sb.buf[off], 0) << "byte " << off << " of B's buffer was written";
  }

  c.settle();
  // At least the WRITE's ten packets and the SEND's three went A -> B, and
  // ACKs came back; every frame lent to an engine was given back.
  EXPECT_GE(c.a_port.sent(), 13u);
  EXPECT_GE(c.b_port.sent(), 1u);
  EXPECT_EQ(c.b_port.received(), c.a_port.sent());
  EXPECT_EQ(c.a_port.lent(), 0u);
  EXPECT_EQ(c.b_port.lent(), 0u);
  // The port's own counters reach the stats registry through visit_counters.
  EXPECT_EQ(port_stat(*c.a, "memory_tx_frames"), c.a_port.sent());
  EXPECT_EQ(port_stat(*c.b, "memory_rx_frames"), c.b_port.received());
}

TEST(PublicPort, APeerThePortCannotResolveFailsTheConnect) {
  Cable c;
  ASSERT_NE(c.a, nullptr);
  const ibv_gid stranger = uroce::ipv4_gid({10, 0, 0, 9});
  EXPECT_EQ(connect(c.sa.qp, stranger, 0x99, 0x100, 0x200), EHOSTUNREACH);
  EXPECT_NE(c.a->last_error().find("resolve"), std::string::npos) << c.a->last_error();
  EXPECT_EQ(c.sa.qp->state(), IBV_QPS_INIT);
}

TEST(PublicPort, AContextNeedsAPortAndAClock) {
  MemoryPort port{kMacA, uroce::ipv4_gid({10, 0, 0, 1})};
  uroce::PortConfig cfg;
  cfg.io = &port;
  std::string error;
  EXPECT_EQ(Context::open(cfg, error), nullptr);
  EXPECT_NE(error.find("clock"), std::string::npos) << error;
}

}  // namespace
