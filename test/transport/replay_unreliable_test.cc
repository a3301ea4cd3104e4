// Replay of the golden UD and UC captures (ibv_ud_pingpong, ibv_uc_pingpong
// against Soft-RoCE): each side's packets go into a QP of ours that has the
// other side's QP number; every datagram and message must complete whole,
// with what rxe's receiver saw (sizes, the sender's QP, the GRH), and our
// side must answer nothing. Then our requester sends the same messages as
// rxe's did, and its packets must carry the same BTH and DETH fields and
// payloads as the captured ones (only the Ethernet, IP and UDP details that
// are each sender's own may differ).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/golden_data.h"
#include "support/oob_sessions.h"
#include "support/scripted_port.h"
#include "verbs/connect.h"
#include "verbs/verbs_impl.h"
#include "wire/frame.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

using transport::kGrhBytes;

class FixedClock : public engine::Clock {
 public:
  std::uint64_t now_ns() override { return 1'000'000; }
};

// The RoCE frames one peer sent the other, in order.
std::vector<std::vector<std::uint8_t>> frames_from(const std::vector<pcap::Frame>& frames, const Peer& from,
                                                   const Peer& to) {
  std::vector<std::vector<std::uint8_t>> out;
  for (const auto& fr : frames) {
    wire::ParsedFrame p;
    if (wire::parse_frame(fr.data, p) != wire::ParseStatus::kOk || p.ip_version != 4) continue;
    if (ipv4_at(fr.data, p.l3_offset + 12) == from.ip && p.bth().dest_qp.get() == to.qpn) out.push_back(fr.data);
  }
  return out;
}

ibv_gid gid_of(std::uint32_t ip) {
  return ipv4_gid({static_cast<std::uint8_t>(ip >> 24), static_cast<std::uint8_t>(ip >> 16),
                   static_cast<std::uint8_t>(ip >> 8), static_cast<std::uint8_t>(ip)});
}

// Our device in the place of `self`, one QP of `type` with self's QP number.
struct OurSide {
  OurSide(ibv_qp_type type, const Peer& self) {
    PortConfig cfg;
    cfg.io = &port;
    cfg.clock = &clock;
    cfg.gid = gid_of(self.ip);
    ctx = Context::open(cfg, error);
    if (!ctx) return;
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(4096);
    QpInitAttr init;
    init.qp_type = type;
    init.send_cq = init.recv_cq = cq;
    init.cap = ibv_qp_cap{64, 256, 1, 1, 0};
    qp = testing::create_qp_with_qpn(pd, init, self.qpn);
    buf = static_cast<std::uint8_t*>(ctx->alloc_buffer(kBytes));
    mr = pd->reg_mr(buf, kBytes, IBV_ACCESS_LOCAL_WRITE);
    if (qp == nullptr || mr == nullptr) error = ctx->last_error();
  }
  void feed(const std::vector<std::uint8_t>& f) {
    port.inbox.push_back(f);
    ctx->progress();
  }
  int post_recv(std::uint32_t slot, std::uint64_t wr_id) {
    return post_recv_one(qp, buf + slot * kSlot, kSlot, mr->lkey, wr_id);
  }
  static constexpr std::uint32_t kSlot = 8192;
  static constexpr std::size_t kBytes = 64 * kSlot;
  ScriptedPort port;
  FixedClock clock;
  std::unique_ptr<Context> ctx;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  QueuePair* qp = nullptr;
  std::uint8_t* buf = nullptr;
  MemoryRegion* mr = nullptr;
  std::string error;
};

// The transport headers (BTH, DETH, ImmDt) and the payload of a frame.
struct Packet {
  std::vector<std::uint8_t> transport;
  std::vector<std::uint8_t> payload;
};
Packet packet_of(const std::vector<std::uint8_t>& f) {
  wire::ParsedFrame p;
  EXPECT_EQ(wire::parse_frame(f, p), wire::ParseStatus::kOk) << "ICRC and headers must be valid";
  Packet k;
  k.transport.assign(f.begin() + static_cast<std::ptrdiff_t>(p.bth_offset),
                     f.begin() + static_cast<std::ptrdiff_t>(p.bth_offset + p.info->header_bytes));
  k.transport[1] &= 0xcf;  // BTH flags byte: the pad count (bits 5:4) follows the payload, compared through it
  k.payload.assign(p.payload().begin(), p.payload().end());
  return k;
}

struct Capture {
  std::vector<pcap::Frame> frames;
  Session s;
};

Capture load(const std::string& file) {
  Capture c;
  c.frames = load_golden(file);
  const auto sessions = sessions_of(c.frames);
  EXPECT_EQ(sessions.size(), 1u) << file;
  if (!sessions.empty()) c.s = sessions.front();
  return c;
}

// Each direction's packets into our QP in the receiver's place: every
// message completes once, whole, with the sender's QP; nothing goes back.
void replay_receiver(ibv_qp_type type, const Capture& c, const Peer& from, const Peer& to, std::size_t messages,
                     std::uint32_t size) {
  OurSide us(type, to);
  ASSERT_TRUE(us.error.empty()) << us.error;
  if (type == IBV_QPT_UD) {
    ASSERT_EQ(ready_ud(us.qp, 0x11111111, to.psn), 0) << us.ctx->last_error();
  } else {
    ConnectParams p;
    p.mtu = IBV_MTU_1024;
    ASSERT_EQ(connect_rc(us.qp, gid_of(from.ip), from.qpn, to.psn, from.psn, p), 0) << us.ctx->last_error();
  }
  for (std::uint32_t i = 0; i < 32; ++i) ASSERT_EQ(us.post_recv(i, i), 0);
  const auto in = frames_from(c.frames, from, to);
  ASSERT_FALSE(in.empty());
  std::vector<std::uint8_t> expected;  // the payload bytes of the message being fed
  std::size_t completions = 0;
  for (const auto& f : in) {
    wire::ParsedFrame p;
    ASSERT_EQ(wire::parse_frame(f, p), wire::ParseStatus::kOk);
    if (p.info->has(wire::kFirst)) expected.clear();
    expected.insert(expected.end(), p.payload().begin(), p.payload().end());
    us.feed(f);
    ibv_wc wc;
    if (us.cq->poll(1, &wc) == 0) {
      EXPECT_FALSE(p.info->has(wire::kLast)) << "a message's last packet completes it";
      continue;
    }
    ASSERT_TRUE(p.info->has(wire::kLast));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, completions % 32);
    EXPECT_EQ(wc.src_qp, from.qpn);
    const std::uint8_t* got = us.buf + wc.wr_id * OurSide::kSlot;
    if (type == IBV_QPT_UD) {
      EXPECT_EQ(wc.byte_len, kGrhBytes + size);
      EXPECT_NE(wc.wc_flags & IBV_WC_GRH, 0u);
      // The GRH: the datagram's IPv4 header, as it came, in the last 20 bytes.
      EXPECT_EQ(std::memcmp(got + 20, &f[p.l3_offset], 20), 0);
      got += kGrhBytes;
    } else {
      EXPECT_EQ(wc.byte_len, size);
    }
    ASSERT_EQ(expected.size(), size);
    EXPECT_EQ(std::memcmp(got, expected.data(), size), 0) << "message " << completions;
    ASSERT_EQ(us.post_recv(static_cast<std::uint32_t>(wc.wr_id), wc.wr_id + 32), 0);
    ++completions;
  }
  EXPECT_EQ(completions, messages);
  EXPECT_TRUE(us.port.sent.empty()) << "UD and UC receivers answer nothing";
  EXPECT_EQ(us.qp->counter("messages_dropped") + us.qp->counter("drop_bad_qkey"), 0u);
}

// Our requester in `from`'s place sends what rxe's did: the same packets,
// byte for byte from the BTH to the end of the payload.
void replay_sender(ibv_qp_type type, const Capture& c, const Peer& from, const Peer& to) {
  OurSide us(type, from);
  ASSERT_TRUE(us.error.empty()) << us.error;
  AddressHandle* ah = nullptr;
  if (type == IBV_QPT_UD) {
    ASSERT_EQ(ready_ud(us.qp, 0x11111111, from.psn), 0) << us.ctx->last_error();
    ibv_ah_attr a{};
    a.is_global = 1;
    a.port_num = 1;
    a.grh.sgid_index = 1;
    a.grh.dgid = gid_of(to.ip);
    ah = us.pd->create_ah(a);
    ASSERT_NE(ah, nullptr) << us.ctx->last_error();
  } else {
    ConnectParams p;
    p.mtu = IBV_MTU_1024;
    ASSERT_EQ(connect_rc(us.qp, gid_of(to.ip), to.qpn, from.psn, to.psn, p), 0) << us.ctx->last_error();
  }
  const auto theirs = frames_from(c.frames, from, to);
  ASSERT_FALSE(theirs.empty());
  // The messages rxe sent, rebuilt from its packets, sent again by us.
  std::vector<std::vector<std::uint8_t>> messages;
  for (const auto& f : theirs) {
    wire::ParsedFrame p;
    ASSERT_EQ(wire::parse_frame(f, p), wire::ParseStatus::kOk);
    if (p.info->has(wire::kFirst)) messages.emplace_back();
    messages.back().insert(messages.back().end(), p.payload().begin(), p.payload().end());
  }
  for (std::size_t m = 0; m < messages.size(); ++m) {
    std::memcpy(us.buf, messages[m].data(), messages[m].size());
    ibv_sge sge{reinterpret_cast<std::uint64_t>(us.buf), static_cast<std::uint32_t>(messages[m].size()), us.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = m;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (ah != nullptr) {
      wr.wr.ud.ah = ah->ibv();
      wr.wr.ud.remote_qpn = to.qpn;
      wr.wr.ud.remote_qkey = 0x11111111;
    }
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(us.qp->post_send(&wr, &bad), 0) << us.ctx->last_error();
    us.ctx->progress();
    ibv_wc wc;
    ASSERT_EQ(us.cq->poll(1, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  ASSERT_EQ(us.port.sent.size(), theirs.size());
  for (std::size_t i = 0; i < theirs.size(); ++i) {
    const Packet ours = packet_of(us.port.sent[i]);
    const Packet rxe = packet_of(theirs[i]);
    EXPECT_EQ(ours.transport, rxe.transport) << "packet " << i << ": BTH and extension headers";
    EXPECT_EQ(ours.payload, rxe.payload) << "packet " << i;
  }
}

TEST(ReplayUnreliable, UdPingpongDatagramsLandAsRxeReceivedThem) {
  const Capture c = load("ud_pingpong.pcap");
  // 10 iterations each way of 1024-byte datagrams.
  replay_receiver(IBV_QPT_UD, c, c.s.client, c.s.server, 10, 1024);
  replay_receiver(IBV_QPT_UD, c, c.s.server, c.s.client, 10, 1024);
}

TEST(ReplayUnreliable, UcPingpongMessagesLandAsRxeReceivedThem) {
  const Capture c = load("uc_pingpong.pcap");
  // 10 iterations each way of 4096-byte messages at MTU 1024.
  replay_receiver(IBV_QPT_UC, c, c.s.client, c.s.server, 10, 4096);
  replay_receiver(IBV_QPT_UC, c, c.s.server, c.s.client, 10, 4096);
}

TEST(ReplayUnreliable, OurUdRequesterSendsWhatRxeSent) {
  const Capture c = load("ud_pingpong.pcap");
  replay_sender(IBV_QPT_UD, c, c.s.client, c.s.server);
  replay_sender(IBV_QPT_UD, c, c.s.server, c.s.client);
}

TEST(ReplayUnreliable, OurUcRequesterSendsWhatRxeSent) {
  const Capture c = load("uc_pingpong.pcap");
  replay_sender(IBV_QPT_UC, c, c.s.client, c.s.server);
  replay_sender(IBV_QPT_UC, c, c.s.server, c.s.client);
}

}  // namespace
}  // namespace uroce::test
