// Service ID Resolution in the CM (lib/cm, IBTA 12.11) against a scripted
// peer whose SIDR MADs are made here and whose answers are decoded back:
// a SIDR_REQ for a listened service becomes a request (its private data
// behind rdma_cm's header), accept() answers SIDR_REP "valid QP" with the UD
// QP's number and Q_Key, a duplicate SIDR_REQ gets the same answer again and
// no second request, reject() answers "rejected", a service nobody listens
// on "service ID not supported" (counted), a malformed SIDR MAD is dropped
// and counted, and our own SIDR_REQ is resent until it gives up.
#include <gtest/gtest.h>

#include <vector>

#include "cm/manager.h"
#include "sim/sim_link.h"
#include "support/scripted_port.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

using cm::EventType;

constexpr std::uint64_t kUdpService = wire::rdma_cm_service_id(wire::kRdmaPsUdp, 7174);
constexpr std::array<std::uint8_t, 4> kPeer = {10, 0, 0, 2};

struct Rig {
  Rig() : dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{16, 16, 1, 1, 0}, 64) {
    dev.port.keep_sent = true;
    if (dev.qp == nullptr) {
      error = dev.error;
      return;
    }
    QpInitAttr init;
    init.qp_type = IBV_QPT_UD;
    init.send_cq = init.recv_cq = dev.cq;
    init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
    ud = dev.pd->create_qp(init);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = wire::kRdmaUdpQkey;
    if (ud == nullptr || ud->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) != 0) {
      error = "UD QP: " + dev.ctx->last_error();
      return;
    }
    m = cm::Manager::open(*dev.ctx, error);
  }

  // `mad` as the peer's QP1 sends it to ours; `cut` bytes fewer than a MAD.
  void send(const wire::CmMad& mad, std::size_t cut = 0) {
    std::array<std::uint8_t, wire::kMadBytes> bytes{};
    ASSERT_TRUE(wire::encode_cm_mad(mad, bytes));
    wire::FrameSpec s;
    s.src4 = kPeer;
    s.dst4 = {10, 0, 0, 1};
    s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kUdSendOnly);
    s.bth.pkey.set(0xffff);
    s.bth.dest_qp.set(wire::kGsiQpn);
    s.deth.qkey.set(wire::kGsiQkey);
    s.deth.src_qp.set(wire::kGsiQpn);
    std::vector<std::uint8_t> f(512);
    f.resize(wire::build_frame(s, std::span(bytes.data(), bytes.size() - cut), f));
    dev.port.inbox.push_back(f);
    step();
  }
  void step() {
    dev.ctx->progress();
    m->poll(events);
    dev.ctx->progress();
  }
  // What our CM sent since the last look, decoded.
  std::vector<wire::CmMad> sent() {
    std::vector<wire::CmMad> out;
    for (const auto& f : dev.port.sent) {
      wire::ParsedFrame p;
      if (wire::parse_frame(f, p) != wire::ParseStatus::kOk || p.bth().dest_qp.get() != wire::kGsiQpn) continue;
      wire::CmMad d;
      if (wire::decode_cm_mad(p.payload(), d) == wire::MadStatus::kOk) out.push_back(d);
    }
    dev.port.sent.clear();
    return out;
  }
  static wire::CmMad sidr_req(std::uint32_t request_id, std::uint64_t service = kUdpService) {
    wire::CmMad m;
    m.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kSidrReq);
    m.header.tid = 0xabc0 + request_id;
    m.sidr_req.request_id = request_id;
    m.sidr_req.service_id = service;
    wire::RdmaCmHeader h;
    h.src_port = 40000;
    h.src_addr[15] = 2;
    h.dst_addr[15] = 1;
    wire::encode_rdma_cm_header(h, m.sidr_req.private_data);
    m.sidr_req.private_data[wire::kRdmaCmHeaderBytes] = 'h';
    m.sidr_req.private_data[wire::kRdmaCmHeaderBytes + 1] = 'i';
    return m;
  }

  sim::VirtualClock clock;
  ScriptedDevice dev;
  QueuePair* ud = nullptr;
  std::unique_ptr<cm::Manager> m;
  std::string error;
  std::vector<cm::Event> events;
  int owner = 0;
};

TEST(SidrCm, ARequestIsAcceptedWithTheUdQpAndItsQkeyAndADuplicateGetsTheSameAnswer) {
  Rig r;
  ASSERT_TRUE(r.m) << r.error;
  ASSERT_EQ(r.m->listen(kUdpService, &r.owner), 0);
  r.send(Rig::sidr_req(0x1234));
  ASSERT_EQ(r.events.size(), 1u);
  const cm::Event e = r.events[0];
  EXPECT_EQ(e.type, EventType::kRequest);
  EXPECT_TRUE(e.sidr);
  EXPECT_EQ(e.listener, &r.owner);
  EXPECT_EQ(e.req.service_id, kUdpService);
  ASSERT_GE(e.private_data.size(), 2u);
  EXPECT_EQ(e.private_data[0], 'h') << "the private data behind rdma_cm's header";
  EXPECT_EQ(e.private_data[1], 'i');
  EXPECT_EQ(r.m->pending_requests(), 1u);

  cm::Manager::AcceptParams rc_qp;
  rc_qp.qp = r.dev.qp;  // RC: not what a SIDR answer can name
  EXPECT_EQ(r.m->accept(e.comm_id, rc_qp), EINVAL);
  cm::Manager::AcceptParams ap;
  ap.qp = r.ud;
  ap.private_data = {'o', 'k'};
  ASSERT_EQ(r.m->accept(e.comm_id, ap), 0);
  EXPECT_EQ(r.m->pending_requests(), 0u);
  r.step();
  auto out = r.sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].attr(), wire::CmAttr::kSidrRep);
  EXPECT_EQ(out[0].header.tid, 0xabc0u + 0x1234u) << "the REQ's transaction ID";
  EXPECT_EQ(out[0].sidr_rep.request_id, 0x1234u);
  EXPECT_EQ(out[0].sidr_rep.status, static_cast<std::uint8_t>(wire::SidrStatus::kOk));
  EXPECT_EQ(out[0].sidr_rep.qpn, r.ud->qp_num());
  EXPECT_EQ(out[0].sidr_rep.qkey, wire::kRdmaUdpQkey);
  EXPECT_EQ(out[0].sidr_rep.service_id, kUdpService);
  EXPECT_EQ(out[0].sidr_rep.private_data[1], 'k');

  // The peer did not get it and asks again: the same answer, no new request.
  r.events.clear();
  r.send(Rig::sidr_req(0x1234));
  EXPECT_TRUE(r.events.empty());
  EXPECT_EQ(r.m->counters().duplicates, 1u);
  out = r.sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sidr_rep.qpn, r.ud->qp_num());
  // The answer is kept only as long as the peer's resends last.
  r.clock.advance(10'000'000'000);
  r.step();
  EXPECT_EQ(r.m->connections(), 0u);
}

TEST(SidrCm, RejectNoListenerAndMalformedSidrMadsGetTheirAnswersAndCounts) {
  Rig r;
  ASSERT_TRUE(r.m) << r.error;
  ASSERT_EQ(r.m->listen(kUdpService, &r.owner), 0);
  r.send(Rig::sidr_req(7));
  ASSERT_EQ(r.events.size(), 1u);
  ASSERT_EQ(r.m->reject(r.events[0].comm_id, {'n', 'o'}), 0);
  r.step();
  auto out = r.sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sidr_rep.status, static_cast<std::uint8_t>(wire::SidrStatus::kReject));
  EXPECT_EQ(out[0].sidr_rep.qpn, 0u) << "a refusal names no QP";
  EXPECT_EQ(out[0].sidr_rep.private_data[0], 'n');

  // Nobody listens: "service ID not supported" (IBTA 12.11.2), counted.
  r.events.clear();
  r.send(Rig::sidr_req(8, wire::rdma_cm_service_id(wire::kRdmaPsUdp, 9999)));
  // An RC port space's service is not resolved by SIDR even when listened on.
  const std::uint64_t tcp = wire::rdma_cm_service_id(wire::kRdmaPsTcp, 7174);
  ASSERT_EQ(r.m->listen(tcp, &r.owner), 0);
  r.send(Rig::sidr_req(9, tcp));
  EXPECT_TRUE(r.events.empty());
  out = r.sent();
  ASSERT_EQ(out.size(), 2u);
  for (const wire::CmMad& d : out) {
    EXPECT_EQ(d.sidr_rep.status, static_cast<std::uint8_t>(wire::SidrStatus::kUnsupportedServiceId));
  }
  EXPECT_EQ(r.m->counters().sidr_rep_sent_no_service, 2u);

  // A SIDR_REQ cut short is dropped and counted, as any malformed MAD.
  const std::uint64_t refused = r.m->counters().mads_refused;
  r.send(Rig::sidr_req(10), 20);
  EXPECT_TRUE(r.events.empty());
  EXPECT_TRUE(r.sent().empty());
  EXPECT_EQ(r.m->counters().mads_refused, refused + 1);
  // A SIDR_REP for no request of ours: dropped, counted.
  wire::CmMad stray;
  stray.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kSidrRep);
  stray.sidr_rep.request_id = 0x5555;
  const std::uint64_t unknown = r.m->counters().unknown_conn_dropped;
  r.send(stray);
  EXPECT_TRUE(r.events.empty());
  EXPECT_EQ(r.m->counters().unknown_conn_dropped, unknown + 1);
}

TEST(SidrCm, OurRequestIsResentThenAnsweredOrGivenUp) {
  Rig r;
  ASSERT_TRUE(r.m) << r.error;
  cm::SidrParams p;
  p.remote_gid = ipv4_gid(kPeer);
  p.service_id = kUdpService;
  p.private_data.assign(217, 0);
  std::uint32_t id = 0;
  EXPECT_EQ(r.m->sidr_request(p, id), EINVAL) << "more than 216 bytes of private data";
  p.private_data = {'q'};
  ASSERT_EQ(r.m->sidr_request(p, id), 0);
  r.step();
  auto out = r.sent();
  // The peer's address may need resolving first: the REQ goes once it is known.
  for (int i = 0; i < 50 && out.empty(); ++i) {
    r.clock.advance(10'000'000);
    r.step();
    out = r.sent();
  }
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].attr(), wire::CmAttr::kSidrReq);
  EXPECT_EQ(out[0].sidr_req.request_id, id);
  EXPECT_EQ(out[0].sidr_req.private_data[0], 'q');
  r.clock.advance(cm::Timing{}.resend_ns + 1);
  r.step();
  EXPECT_GE(r.m->counters().mads_resent, 1u) << "unanswered: sent again";

  // Answered: the peer's QPN and Q_Key.
  wire::CmMad rep;
  rep.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kSidrRep);
  rep.header.tid = out[0].header.tid;
  rep.sidr_rep.request_id = id;
  rep.sidr_rep.qpn = 0x4242;
  rep.sidr_rep.qkey = wire::kRdmaUdpQkey;
  r.send(rep);
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].type, EventType::kEstablished);
  EXPECT_TRUE(r.events[0].sidr);
  EXPECT_EQ(r.events[0].rep.local_qpn, 0x4242u);
  EXPECT_EQ(r.events[0].rep.local_qkey, wire::kRdmaUdpQkey);
  EXPECT_EQ(r.m->connections(), 0u) << "nothing held once answered";

  // Never answered: resent Timing::max_resends times, then unreachable.
  r.events.clear();
  ASSERT_EQ(r.m->sidr_request(p, id), 0);
  for (int i = 0; i < 20 && r.events.empty(); ++i) {
    r.clock.advance(cm::Timing{}.resend_ns + 1);
    r.step();
  }
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].type, EventType::kUnreachable);
  EXPECT_TRUE(r.events[0].sidr);
  EXPECT_EQ(r.events[0].reason, 0) << "no answer: no SIDR status";
}

}  // namespace
}  // namespace uroce::test
