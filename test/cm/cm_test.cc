// The communication manager (lib/cm) between two devices on the simulated
// link: a REQ to a listened service is accepted, both ends reach
// ESTABLISHED with their QPs in RTS and carry RC traffic, a disconnect
// ends both; a REQ for a service nobody listens on gets REJ "invalid
// service ID", a consumer reject carries its private data; lost MADs are
// sent again; MADs for connections nobody knows are answered as the IBTA
// says (REJ for a REP, DREP for a DREQ) or dropped, and counted. And the
// golden rping REQ of Soft-RoCE, replayed into a listening manager, gets a
// REP whose fields answer it as rxe's REP did. ECE offered in the REQ is
// answered in the REP with what both sides name.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "cm/manager.h"
#include "support/golden_data.h"
#include "support/rc_fixture.h"
#include "support/scripted_port.h"
#include "support/test_seed.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

using cm::Event;
using cm::EventType;

constexpr std::uint64_t kService = wire::rdma_cm_service_id(wire::kRdmaPsTcp, 7174);

cm::Manager::AcceptParams accept_params(QueuePair* qp) {
  cm::Manager::AcceptParams a;
  a.qp = qp;
  return a;
}

struct CmPair {
  explicit CmPair(std::uint64_t seed, sim::Impairments imp = {}) : net(seed, imp, imp) {
    std::string error;
    ma = cm::Manager::open(*net.a, error);
    mb = cm::Manager::open(*net.b, error);
    why = error;
    pda = net.a->alloc_pd();
    pdb = net.b->alloc_pd();
    cqa = net.a->create_cq(256);
    cqb = net.b->create_cq(256);
    QpInitAttr init;
    init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
    init.send_cq = init.recv_cq = cqa;
    qa = pda->create_qp(init);
    init.send_cq = init.recv_cq = cqb;
    qb = pdb->create_qp(init);
  }
  // Steps the link and the managers until `done` or `limit_ns` pass; when
  // the link is idle, virtual time moves 1 ms (the managers' resend timers
  // are not the engines').
  template <typename Done>
  bool run(Done done, std::uint64_t limit_ns = 5'000'000'000ull) {
    const std::uint64_t start = net.clock.now_ns();
    for (;;) {
      if (ma) ma->poll(ea);
      if (mb) mb->poll(eb);
      if (done()) return true;
      if (net.clock.now_ns() - start > limit_ns) return false;
      if (!net.step()) net.clock.advance(1'000'000);
    }
  }
  static const Event* find(const std::vector<Event>& v, EventType t) {
    for (const Event& e : v) {
      if (e.type == t) return &e;
    }
    return nullptr;
  }
  cm::Manager::ConnectParams connect_params() {
    cm::Manager::ConnectParams p;
    p.qp = qa;
    p.remote_gid = net.b->gid();
    p.service_id = kService;
    p.private_data = {1, 2, 3, 4};
    return p;
  }

  device::SimPair net;
  std::unique_ptr<cm::Manager> ma;
  std::unique_ptr<cm::Manager> mb;
  std::string why;
  ProtectionDomain* pda;
  ProtectionDomain* pdb;
  CompletionQueue* cqa;
  CompletionQueue* cqb;
  QueuePair* qa;
  QueuePair* qb;
  std::vector<Event> ea;
  std::vector<Event> eb;
  int owner = 0;
};

TEST(Cm, ConnectAcceptCarryTrafficAndDisconnect) {
  CmPair p(1);
  ASSERT_TRUE(p.ma && p.mb) << p.why;
  ASSERT_EQ(p.mb->listen(kService, &p.owner), 0);
  EXPECT_EQ(p.mb->listen(kService, nullptr), EADDRINUSE);
  std::uint32_t id = 0;
  ASSERT_EQ(p.ma->connect(p.connect_params(), id), 0);
  ASSERT_TRUE(p.run([&] { return CmPair::find(p.eb, EventType::kRequest) != nullptr; }));
  const Event req = *CmPair::find(p.eb, EventType::kRequest);
  EXPECT_EQ(req.listener, &p.owner);
  EXPECT_EQ(req.req.local_qpn, p.qa->qp_num());
  EXPECT_EQ(req.req.service_id, kService);
  EXPECT_EQ(std::vector<std::uint8_t>(req.private_data.begin(), req.private_data.begin() + 4),
            (std::vector<std::uint8_t>{1, 2, 3, 4}));
  cm::Manager::AcceptParams ap;
  ap.qp = p.qb;
  ap.private_data = {9, 8};
  ASSERT_EQ(p.mb->accept(req.comm_id, ap), 0);
  ASSERT_TRUE(p.run([&] {
    return CmPair::find(p.ea, EventType::kEstablished) != nullptr && CmPair::find(p.eb, EventType::kEstablished);
  }));
  EXPECT_EQ(CmPair::find(p.ea, EventType::kEstablished)->comm_id, id);
  EXPECT_EQ(CmPair::find(p.ea, EventType::kEstablished)->private_data[0], 9) << "the REP's private data";
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.qb->state(), IBV_QPS_RTS);
  // The connected QPs carry a SEND.
  auto* bufa = static_cast<std::uint8_t*>(p.net.a->alloc_buffer(4096));
  auto* bufb = static_cast<std::uint8_t*>(p.net.b->alloc_buffer(4096));
  MemoryRegion* mra = p.pda->reg_mr(bufa, 4096, IBV_ACCESS_LOCAL_WRITE);
  MemoryRegion* mrb = p.pdb->reg_mr(bufb, 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv_one(p.qb, bufb, 4096, mrb->lkey, 0), 0);
  std::memcpy(bufa, "over rdma_cm", 13);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_SEND, bufa, 13, mra->lkey, std::uint64_t{0}, 0, 7), 0);
  const auto got = wait_completions(p.net, p.cqb, 1, 1'000'000'000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<const char*>(bufb), "over rdma_cm");
  // Disconnect: DREQ, DREP, both told, both QPs in ERR.
  ASSERT_EQ(p.ma->disconnect(id), 0);
  ASSERT_TRUE(p.run([&] {
    return CmPair::find(p.ea, EventType::kDisconnected) != nullptr && CmPair::find(p.eb, EventType::kDisconnected);
  }));
  EXPECT_EQ(p.qa->state(), IBV_QPS_ERR);
  EXPECT_EQ(p.qb->state(), IBV_QPS_ERR);
  EXPECT_EQ(p.ma->counters().mads_refused + p.mb->counters().mads_refused, 0u);
}

// ECE (issue 30): what each ECE hook was given, by manager.
struct EceCall {
  QueuePair* qp;
  std::uint32_t vendor_id, options;
};
int record_ece(void* calls, QueuePair* qp, std::uint32_t vendor_id, std::uint32_t options) {
  static_cast<std::vector<EceCall>*>(calls)->push_back({qp, vendor_id, options});
  return 0;
}

// One connection with ECE offered in the REQ and answered in the REP: what
// each side's event carried and what each hook was given before RTR.
struct EceRun {
  Event request, established;
  std::vector<EceCall> active, passive;
};
EceRun ece_connection(std::uint32_t offer_vendor, std::uint32_t offer, std::uint32_t answer_vendor,
                      std::uint32_t answer) {
  EceRun r;
  CmPair p(7);
  EXPECT_TRUE(p.ma && p.mb) << p.why;
  if (!p.ma || !p.mb) return r;
  p.ma->set_ece(record_ece, &r.active);
  p.mb->set_ece(record_ece, &r.passive);
  EXPECT_EQ(p.mb->listen(kService, &p.owner), 0);
  cm::Manager::ConnectParams cp = p.connect_params();
  cp.ece_vendor_id = offer_vendor;
  cp.ece_options = offer;
  std::uint32_t id = 0;
  EXPECT_EQ(p.ma->connect(cp, id), 0);
  EXPECT_TRUE(p.run([&] { return CmPair::find(p.eb, EventType::kRequest) != nullptr; }));
  if (CmPair::find(p.eb, EventType::kRequest) == nullptr) return r;
  r.request = *CmPair::find(p.eb, EventType::kRequest);
  cm::Manager::AcceptParams ap = accept_params(p.qb);
  ap.ece_vendor_id = answer_vendor;
  ap.ece_options = answer;
  EXPECT_EQ(p.mb->accept(r.request.comm_id, ap), 0);
  EXPECT_TRUE(p.run([&] { return CmPair::find(p.ea, EventType::kEstablished) != nullptr; }));
  if (const Event* e = CmPair::find(p.ea, EventType::kEstablished)) r.established = *e;
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.qb->state(), IBV_QPS_RTS);
  for (const EceCall& c : r.active) EXPECT_EQ(c.qp, p.qa);
  for (const EceCall& c : r.passive) EXPECT_EQ(c.qp, p.qb);
  return r;
}

// A passive side that accepts with kTimeoutOfReq gives its QP the REQ's
// Local ACK Timeout (as Linux's CM does); a number of its own wins, and one
// a QP cannot hold is refused.
TEST(Cm, ThePassiveQpTakesTheReqsAckTimeoutWhenAskedTo) {
  for (const std::uint8_t accept_timeout : {cm::kTimeoutOfReq, std::uint8_t{12}}) {
    CmPair p(7);
    ASSERT_TRUE(p.ma && p.mb) << p.why;
    ASSERT_EQ(p.mb->listen(kService, &p.owner), 0);
    cm::Manager::ConnectParams cp = p.connect_params();
    cp.timeout = 16;
    std::uint32_t id = 0;
    ASSERT_EQ(p.ma->connect(cp, id), 0);
    ASSERT_TRUE(p.run([&] { return CmPair::find(p.eb, EventType::kRequest) != nullptr; }));
    const Event request = *CmPair::find(p.eb, EventType::kRequest);
    EXPECT_EQ(request.req.primary.local_ack_timeout, 16);
    cm::Manager::AcceptParams ap = accept_params(p.qb);
    ap.timeout = 32;
    EXPECT_EQ(p.mb->accept(request.comm_id, ap), EINVAL);
    ap.timeout = accept_timeout;
    ASSERT_EQ(p.mb->accept(request.comm_id, ap), 0);
    ASSERT_TRUE(p.run([&] { return CmPair::find(p.ea, EventType::kEstablished) != nullptr; }));
    ibv_qp_attr a{};
    ASSERT_EQ(p.qa->query(a, IBV_QP_TIMEOUT), 0);
    EXPECT_EQ(a.timeout, 16);
    ASSERT_EQ(p.qb->query(a, IBV_QP_TIMEOUT), 0);
    EXPECT_EQ(a.timeout, accept_timeout == cm::kTimeoutOfReq ? 16 : accept_timeout);
  }
}

// ECE travels in the REQ and REP: the REQ's offer reaches the passive side,
// the REP echoes the REQ's vendor id with what both named, and each managed
// QP is given that agreement before RTR; an offer of another vendor, a
// passive side that names less, or a REQ without ECE agree to nothing.
TEST(Cm, EceInTheReqAndRepAgreesOnWhatBothName) {
  constexpr std::uint32_t kUs = 0x020000, kOther = 0x15b3, kBit = kEceSelectiveRepeat;
  EceRun both = ece_connection(kUs, kBit | 0x80, kUs, kBit);
  EXPECT_EQ(both.request.ece_vendor_id, kUs);
  EXPECT_EQ(both.request.ece_options, kBit | 0x80) << "the offer as it was sent";
  EXPECT_EQ(both.established.ece_vendor_id, kUs);
  EXPECT_EQ(both.established.ece_options, kBit);
  ASSERT_EQ(both.passive.size(), 1u);
  EXPECT_EQ(both.passive[0].vendor_id, kUs);
  EXPECT_EQ(both.passive[0].options, kBit);
  ASSERT_EQ(both.active.size(), 1u);
  EXPECT_EQ(both.active[0].options, kBit);

  EceRun less = ece_connection(kUs, kBit, kUs, 0);
  EXPECT_EQ(less.established.ece_options, 0u);
  ASSERT_EQ(less.passive.size(), 1u);
  EXPECT_EQ(less.passive[0].options, 0u);
  ASSERT_EQ(less.active.size(), 1u);
  EXPECT_EQ(less.active[0].options, 0u);

  EceRun other = ece_connection(kOther, kBit, kUs, kBit);
  EXPECT_EQ(other.request.ece_vendor_id, kOther);
  EXPECT_EQ(other.established.ece_vendor_id, kOther) << "the REP echoes the REQ's vendor id";
  EXPECT_EQ(other.established.ece_options, 0u);
  ASSERT_EQ(other.passive.size(), 1u);
  EXPECT_EQ(other.passive[0].options, 0u);
  ASSERT_EQ(other.active.size(), 1u);
  EXPECT_EQ(other.active[0].vendor_id, kOther);
  EXPECT_EQ(other.active[0].options, 0u);

  // A REQ without ECE (Soft-RoCE's): the REP carries none, the passive QP
  // is given nothing agreed, and the active side, which offered none, is
  // left as it was.
  EceRun none = ece_connection(0, 0, kUs, kBit);
  EXPECT_EQ(none.request.ece_vendor_id, 0u);
  EXPECT_EQ(none.established.ece_vendor_id, 0u);
  EXPECT_EQ(none.established.ece_options, 0u);
  ASSERT_EQ(none.passive.size(), 1u);
  EXPECT_EQ(none.passive[0].options, 0u);
  EXPECT_TRUE(none.active.empty());
}

TEST(Cm, NoListenerGetsInvalidServiceIdAndAConsumerRejectCarriesItsData) {
  CmPair p(2);
  ASSERT_TRUE(p.ma && p.mb) << p.why;
  std::uint32_t id = 0;
  ASSERT_EQ(p.ma->connect(p.connect_params(), id), 0);
  ASSERT_TRUE(p.run([&] { return CmPair::find(p.ea, EventType::kRejected) != nullptr; }));
  EXPECT_EQ(CmPair::find(p.ea, EventType::kRejected)->reason,
            static_cast<std::uint16_t>(wire::RejReason::kInvalidServiceId));
  EXPECT_EQ(p.mb->counters().rej_sent_no_service, 6u) << "the REQ, and five tries after it";
  EXPECT_EQ(p.ma->counters().req_retried_no_service, 5u);
  // Now listened, and refused by the consumer.
  p.ea.clear();
  ASSERT_EQ(p.mb->listen(kService, &p.owner), 0);
  ASSERT_EQ(p.ma->connect(p.connect_params(), id), 0);
  ASSERT_TRUE(p.run([&] { return CmPair::find(p.eb, EventType::kRequest) != nullptr; }));
  ASSERT_EQ(p.mb->reject(CmPair::find(p.eb, EventType::kRequest)->comm_id, {0xde, 0xad}), 0);
  ASSERT_TRUE(p.run([&] { return CmPair::find(p.ea, EventType::kRejected) != nullptr; }));
  const Event* rej = CmPair::find(p.ea, EventType::kRejected);
  EXPECT_EQ(rej->reason, static_cast<std::uint16_t>(wire::RejReason::kConsumerReject));
  EXPECT_EQ(rej->private_data[0], 0xde);
  EXPECT_EQ(rej->private_data[1], 0xad);
  EXPECT_EQ(p.mb->accept(12345, accept_params(p.qb)), ENOENT);
}

// A REQ that comes before the peer listens (perftest -R's server re-listens
// after a handshake its client has already passed) is refused, sent again
// 100 ms later, and connects once the listener is there.
TEST(Cm, ARequestBeforeTheListenerIsTriedAgainAndConnects) {
  CmPair p(5);
  ASSERT_TRUE(p.ma && p.mb) << p.why;
  std::uint32_t id = 0;
  ASSERT_EQ(p.ma->connect(p.connect_params(), id), 0);
  ASSERT_TRUE(p.run([&] { return p.mb->counters().rej_sent_no_service >= 2; }));
  EXPECT_EQ(CmPair::find(p.ea, EventType::kRejected), nullptr) << "not reported while tries remain";
  ASSERT_EQ(p.mb->listen(kService, &p.owner), 0);
  bool accepted = false;
  ASSERT_TRUE(p.run([&] {
    const Event* r = CmPair::find(p.eb, EventType::kRequest);
    if (r != nullptr && !accepted) {
      EXPECT_EQ(p.mb->accept(r->comm_id, accept_params(p.qb)), 0);
      accepted = true;
    }
    return CmPair::find(p.ea, EventType::kEstablished) != nullptr;
  }));
  EXPECT_EQ(CmPair::find(p.ea, EventType::kRejected), nullptr);
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS);
}

TEST(Cm, LostMadsAreSentAgainUntilTheConnectionIsUp) {
  const std::uint64_t seed = test_seed(31);
  SCOPED_TRACE(seed_note(seed));
  sim::Impairments imp;
  imp.loss = 0.3;
  CmPair p(seed, imp);
  ASSERT_TRUE(p.ma && p.mb) << p.why;
  ASSERT_EQ(p.mb->listen(kService, &p.owner), 0);
  std::uint32_t id = 0;
  ASSERT_EQ(p.ma->connect(p.connect_params(), id), 0);
  bool accepted = false;
  ASSERT_TRUE(p.run(
      [&] {
        const Event* r = CmPair::find(p.eb, EventType::kRequest);
        if (r != nullptr && !accepted) {
          EXPECT_EQ(p.mb->accept(r->comm_id, accept_params(p.qb)), 0);
          accepted = true;
        }
        return CmPair::find(p.ea, EventType::kEstablished) != nullptr &&
               CmPair::find(p.eb, EventType::kEstablished) != nullptr;
      },
      60'000'000'000ull));
  int requests = 0;
  for (const Event& e : p.eb) requests += e.type == EventType::kRequest;
  EXPECT_EQ(requests, 1) << "a REQ sent again is the same request";
  if (p.net.link.stats(0).lost + p.net.link.stats(1).lost > 0) {
    EXPECT_GT(p.ma->counters().mads_resent + p.mb->counters().mads_resent, 0u);
  }
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.qb->state(), IBV_QPS_RTS);
}

TEST(Cm, NobodyAnswersMeansUnreachable) {
  CmPair p(4);
  ASSERT_TRUE(p.ma) << p.why;
  p.mb.reset();  // B has no CM: its QP1 is gone, its engine drops the MADs
  std::uint32_t id = 0;
  ASSERT_EQ(p.ma->connect(p.connect_params(), id), 0);
  ASSERT_TRUE(p.run([&] { return CmPair::find(p.ea, EventType::kUnreachable) != nullptr; }, 60'000'000'000ull));
  EXPECT_EQ(p.ma->counters().mads_resent, 10u);
  // Why, for librdmacm to print: the address resolved (the simulated link
  // knows B), the CM did not answer.
  const std::string why = CmPair::find(p.ea, EventType::kUnreachable)->why;
  EXPECT_NE(why.find("the REQ to "), std::string::npos) << why;
  EXPECT_NE(why.find("sent 11 times over 2.2 s"), std::string::npos) << why;
  EXPECT_NE(why.find("address was resolved"), std::string::npos) << why;
}

// MADs from a third party that knows no connection, straight into B's QP1.
TEST(Cm, MadsForUnknownConnectionsAreAnsweredOrDroppedAndCounted) {
  sim::VirtualClock clock;
  ScriptedDevice dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{4, 4, 1, 1, 0}, 16);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  std::string error;
  auto m = cm::Manager::open(*dev.ctx, error);
  ASSERT_NE(m, nullptr) << error;
  auto mad_frame = [](const wire::CmMad& mad, std::uint32_t qkey = wire::kGsiQkey, std::size_t cut = 0) {
    std::array<std::uint8_t, wire::kMadBytes> bytes{};
    EXPECT_TRUE(wire::encode_cm_mad(mad, bytes));
    wire::FrameSpec s;
    s.src4 = {10, 0, 0, 9};
    s.dst4 = {10, 0, 0, 1};
    s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kUdSendOnly);
    s.bth.pkey.set(0xffff);
    s.bth.dest_qp.set(wire::kGsiQpn);
    s.deth.qkey.set(qkey);
    s.deth.src_qp.set(wire::kGsiQpn);
    std::vector<std::uint8_t> f(512);
    f.resize(wire::build_frame(s, std::span(bytes.data(), bytes.size() - cut), f));
    return f;
  };
  std::vector<Event> events;
  auto feed = [&](std::vector<std::uint8_t> f) {
    dev.port.inbox.push_back(std::move(f));
    dev.ctx->progress();
    m->poll(events);
    dev.ctx->progress();  // what the manager sent goes out
  };
  auto sent_mads = [&] {
    std::vector<wire::CmMad> out;
    for (const auto& f : dev.port.sent) {
      wire::ParsedFrame p;
      if (wire::parse_frame(f, p) != wire::ParseStatus::kOk || p.bth().dest_qp.get() != wire::kGsiQpn) continue;
      wire::CmMad d;
      if (wire::decode_cm_mad(p.payload(), d) == wire::MadStatus::kOk) out.push_back(d);
    }
    dev.port.sent.clear();
    return out;
  };
  wire::CmMad rep;
  rep.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kRep);
  rep.header.tid = 77;
  rep.rep.local_comm_id = 0x1111;
  rep.rep.remote_comm_id = 0x2222;
  feed(mad_frame(rep));
  auto out = sent_mads();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].attr(), wire::CmAttr::kRej);
  EXPECT_EQ(out[0].rej.reason, static_cast<std::uint16_t>(wire::RejReason::kInvalidCommId));
  EXPECT_EQ(out[0].rej.remote_comm_id, 0x1111u);
  EXPECT_EQ(out[0].header.tid, 77u);
  wire::CmMad dreq;
  dreq.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kDreq);
  dreq.dreq.local_comm_id = 0x3333;
  dreq.dreq.remote_comm_id = 0x4444;
  feed(mad_frame(dreq));
  out = sent_mads();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].attr(), wire::CmAttr::kDrep);
  EXPECT_EQ(out[0].rtu.remote_comm_id, 0x3333u);
  for (wire::CmAttr a : {wire::CmAttr::kRtu, wire::CmAttr::kDrep, wire::CmAttr::kRej, wire::CmAttr::kMra}) {
    wire::CmMad x;
    x.header.attr_id = static_cast<std::uint16_t>(a);
    feed(mad_frame(x));
  }
  EXPECT_TRUE(sent_mads().empty()) << "RTU, DREP, REJ, MRA for nobody: dropped";
  EXPECT_EQ(m->counters().unknown_conn_dropped, 4u);
  // A REQ for nobody's service: REJ invalid service ID.
  wire::CmMad req;
  req.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kReq);
  req.req.local_comm_id = 0x5555;
  req.req.service_id = kService;
  feed(mad_frame(req));
  out = sent_mads();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].rej.reason, static_cast<std::uint16_t>(wire::RejReason::kInvalidServiceId));
  // Malformed: a truncated MAD (refused by the manager), the wrong Q_Key
  // (dropped by QP1 before).
  feed(mad_frame(rep, wire::kGsiQkey, 100));
  feed(mad_frame(rep, 0x1234));
  EXPECT_EQ(m->counters().mads_refused, 1u) << "the truncated one";
  EXPECT_TRUE(sent_mads().empty());
  EXPECT_TRUE(events.empty());
}

// Issue 27, item 7: on a shared link (a veth whose kernel has an address
// too) the port sees RoCEv2 frames for other hosts' addresses. A REQ sent
// to an address not ours is not ours to answer: dropped unanswered and
// counted; the host that owns the address answers it.
TEST(Cm, RequestsForAnAddressNotOursAreDroppedUnansweredAndCounted) {
  sim::VirtualClock clock;
  ScriptedDevice dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{4, 4, 1, 1, 0}, 16);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  std::string error;
  auto m = cm::Manager::open(*dev.ctx, error);
  ASSERT_NE(m, nullptr) << error;
  int owner = 0;
  ASSERT_EQ(m->listen(kService, &owner), 0);
  auto req_frame = [](std::array<std::uint8_t, 4> ip_dst, std::array<std::uint8_t, 4> path_dst, std::uint32_t comm) {
    wire::CmMad req;
    req.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kReq);
    req.header.tid = comm;
    req.req.local_comm_id = comm;
    req.req.service_id = kService;
    req.req.local_qpn = 0x100;
    req.req.path_mtu = IBV_MTU_1024;
    const ibv_gid from = ipv4_gid({10, 0, 0, 9});
    const ibv_gid to = ipv4_gid(path_dst);
    std::copy_n(from.raw, 16, req.req.primary.local_gid.begin());
    std::copy_n(to.raw, 16, req.req.primary.remote_gid.begin());
    std::array<std::uint8_t, wire::kMadBytes> bytes{};
    EXPECT_TRUE(wire::encode_cm_mad(req, bytes));
    wire::FrameSpec s;
    s.src4 = {10, 0, 0, 9};
    s.dst4 = ip_dst;
    s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kUdSendOnly);
    s.bth.pkey.set(0xffff);
    s.bth.dest_qp.set(wire::kGsiQpn);
    s.deth.qkey.set(wire::kGsiQkey);
    s.deth.src_qp.set(wire::kGsiQpn);
    std::vector<std::uint8_t> f(512);
    f.resize(wire::build_frame(s, bytes, f));
    return f;
  };
  std::vector<Event> events;
  auto feed = [&](std::vector<std::uint8_t> f) {
    dev.port.inbox.push_back(std::move(f));
    dev.ctx->progress();
    m->poll(events);
    dev.ctx->progress();
  };
  feed(req_frame({10, 0, 0, 7}, {10, 0, 0, 7}, 0x71));  // the kernel's address on the link
  EXPECT_TRUE(events.empty()) << "a request for another host's address reached the owner";
  EXPECT_TRUE(dev.port.sent.empty()) << "we answered for an address that is not ours";
  EXPECT_EQ(m->counters().mads_dropped_not_ours, 1u);
  EXPECT_EQ(m->pending_requests(), 0u);
  feed(req_frame({10, 0, 0, 1}, {10, 0, 0, 1}, 0x73));  // ours
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kRequest);
  EXPECT_EQ(m->counters().mads_dropped_not_ours, 1u);
}

// Soft-RoCE's rping REQ into our listening manager: the REP answers it as
// rxe's did (same transaction, comm IDs paired, resources, RNR retry, and
// a QP of ours in RTS toward the requester's QP and PSN).
TEST(Cm, TheGoldenRpingRequestIsAnsweredAsSoftRoceAnsweredIt) {
  std::vector<std::vector<std::uint8_t>> mads;
  std::vector<std::vector<std::uint8_t>> frames;
  for (const auto& fr : load_golden("rping.pcap")) {
    wire::ParsedFrame p;
    if (wire::parse_frame(fr.data, p) != wire::ParseStatus::kOk || p.bth().dest_qp.get() != wire::kGsiQpn) continue;
    mads.emplace_back(p.payload().begin(), p.payload().end());
    frames.push_back(fr.data);
  }
  ASSERT_EQ(mads.size(), 5u);
  wire::CmMad req;
  wire::CmMad rxe_rep;
  ASSERT_EQ(wire::decode_cm_mad(mads[0], req), wire::MadStatus::kOk);
  ASSERT_EQ(wire::decode_cm_mad(mads[1], rxe_rep), wire::MadStatus::kOk);
  wire::ParsedFrame first;
  ASSERT_EQ(wire::parse_frame(frames[0], first), wire::ParseStatus::kOk);
  sim::VirtualClock clock;
  ScriptedDevice dev(clock, ipv4_gid(first.ipv4().dst), ibv_qp_cap{16, 16, 1, 1, 0}, 16);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  std::string error;
  auto m = cm::Manager::open(*dev.ctx, error);
  ASSERT_NE(m, nullptr) << error;
  int owner = 0;
  ASSERT_EQ(m->listen(req.req.service_id, &owner), 0);
  std::vector<Event> events;
  dev.port.inbox.push_back(frames[0]);
  dev.ctx->progress();
  m->poll(events);
  ASSERT_EQ(events.size(), 1u);
  ASSERT_EQ(events[0].type, EventType::kRequest);
  EXPECT_TRUE(std::all_of(events[0].private_data.begin(), events[0].private_data.end(),
                          [](std::uint8_t b) { return b == 0; }))
      << "rping sends no private data of its own: rdma_cm's header is taken off";
  cm::Manager::AcceptParams ap;
  ap.qp = dev.qp;
  ap.responder_resources = rxe_rep.rep.responder_resources;
  ap.initiator_depth = rxe_rep.rep.initiator_depth;
  ASSERT_EQ(m->accept(events[0].comm_id, ap), 0);
  dev.ctx->progress();
  std::vector<wire::CmMad> ours;
  for (const auto& f : dev.port.sent) {
    wire::ParsedFrame p;
    ASSERT_EQ(wire::parse_frame(f, p), wire::ParseStatus::kOk);
    EXPECT_EQ(p.bth().dest_qp.get(), wire::kGsiQpn);
    EXPECT_EQ(p.deth().qkey.get(), wire::kGsiQkey);
    EXPECT_EQ(p.deth().src_qp.get(), wire::kGsiQpn);
    wire::CmMad d;
    ASSERT_EQ(wire::decode_cm_mad(p.payload(), d), wire::MadStatus::kOk);
    ours.push_back(d);
  }
  ASSERT_EQ(ours.size(), 1u);
  const wire::CmRep& a = ours[0].rep;
  const wire::CmRep& b = rxe_rep.rep;
  EXPECT_EQ(ours[0].attr(), wire::CmAttr::kRep);
  EXPECT_EQ(ours[0].header.tid, rxe_rep.header.tid) << "the REQ's transaction";
  EXPECT_EQ(a.remote_comm_id, b.remote_comm_id);
  EXPECT_EQ(a.responder_resources, b.responder_resources);
  EXPECT_EQ(a.initiator_depth, b.initiator_depth);
  EXPECT_EQ(a.target_ack_delay, b.target_ack_delay);
  EXPECT_EQ(a.rnr_retry_count, b.rnr_retry_count);
  EXPECT_EQ(a.local_qkey, b.local_qkey);
  EXPECT_EQ(a.local_qpn, dev.qp->qp_num());
  EXPECT_EQ(dev.qp->state(), IBV_QPS_RTS);
  ibv_qp_attr qa{};
  ASSERT_EQ(dev.qp->query(qa, IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN | IBV_QP_PATH_MTU), 0);
  EXPECT_EQ(qa.dest_qp_num, req.req.local_qpn);
  // A starting PSN is the one its receiver sends from (in the capture rxe's
  // server READs from the REQ's PSN, its client SENDs from the REP's).
  EXPECT_EQ(qa.sq_psn, req.req.starting_psn);
  EXPECT_EQ(qa.rq_psn, a.starting_psn);
  EXPECT_EQ(qa.path_mtu, static_cast<ibv_mtu>(req.req.path_mtu));
  // rxe's RTU, fed in, completes the connection.
  dev.port.inbox.push_back(frames[2]);
  wire::CmMad rtu;
  ASSERT_EQ(wire::decode_cm_mad(mads[2], rtu), wire::MadStatus::kOk);
  // (rxe's RTU names rxe's server comm ID; ours differs, so it is ours
  // only once rewritten: the pairing is by comm ID.)
  rtu.rtu.remote_comm_id = a.local_comm_id;
  std::array<std::uint8_t, wire::kMadBytes> bytes{};
  ASSERT_TRUE(wire::encode_cm_mad(rtu, bytes));
  wire::ParsedFrame rf;
  ASSERT_EQ(wire::parse_frame(frames[2], rf), wire::ParseStatus::kOk);
  wire::FrameSpec s = wire::spec_from_parsed(rf);
  std::vector<std::uint8_t> f(512);
  f.resize(wire::build_frame(s, bytes, f));
  dev.port.inbox.back() = f;
  dev.ctx->progress();
  events.clear();
  m->poll(events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kEstablished);
}

// perftest -R's two connections (ib_write_bw_rdma_cm.pcap): each of
// Soft-RoCE's REQs, replayed into our listening manager, gets a REP that
// answers it as rxe's REP did, on a QP of ours per connection.
TEST(Cm, PerftestsGoldenRequestsAreEachAnsweredAsSoftRoceAnswered) {
  struct Mad {
    wire::CmMad d;
    std::vector<std::uint8_t> frame;
    std::array<std::uint8_t, 4> dst{};
  };
  std::vector<Mad> reqs;
  std::map<std::uint32_t, wire::CmMad> rxe_reps;  // by the REQ's comm ID
  for (const auto& fr : load_golden("ib_write_bw_rdma_cm.pcap")) {
    wire::ParsedFrame p;
    if (wire::parse_frame(fr.data, p) != wire::ParseStatus::kOk || p.bth().dest_qp.get() != wire::kGsiQpn) continue;
    Mad m;
    ASSERT_EQ(wire::decode_cm_mad(p.payload(), m.d), wire::MadStatus::kOk);
    m.frame = fr.data;
    const wire::Ipv4Hdr ip = p.ipv4();
    std::copy(ip.dst.begin(), ip.dst.end(), m.dst.begin());
    if (m.d.attr() == wire::CmAttr::kReq) reqs.push_back(m);
    if (m.d.attr() == wire::CmAttr::kRep) rxe_reps[m.d.rep.remote_comm_id] = m.d;
  }
  ASSERT_EQ(reqs.size(), 2u);
  ASSERT_EQ(rxe_reps.size(), 2u);
  sim::VirtualClock clock;
  ScriptedDevice dev(clock, ipv4_gid(reqs[0].dst), ibv_qp_cap{16, 16, 1, 1, 0}, 16);
  ASSERT_NE(dev.qp, nullptr) << dev.error;
  std::string error;
  auto m = cm::Manager::open(*dev.ctx, error);
  ASSERT_NE(m, nullptr) << error;
  int owner = 0;
  for (const Mad& r : reqs) m->listen(r.d.req.service_id, &owner);  // one port: the second listen is EADDRINUSE
  std::vector<QueuePair*> qps;
  for (const Mad& r : reqs) {
    SCOPED_TRACE("REQ comm ID " + std::to_string(r.d.req.local_comm_id));
    const wire::CmRep& theirs = rxe_reps.at(r.d.req.local_comm_id).rep;
    std::vector<Event> events;
    dev.port.sent.clear();
    dev.port.inbox.push_back(r.frame);
    dev.ctx->progress();
    m->poll(events);
    ASSERT_EQ(events.size(), 1u);
    ASSERT_EQ(events[0].type, EventType::kRequest);
    QpInitAttr init;
    init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
    init.send_cq = init.recv_cq = dev.cq;
    QueuePair* qp = dev.pd->create_qp(init);
    ASSERT_NE(qp, nullptr);
    qps.push_back(qp);
    cm::Manager::AcceptParams ap;
    ap.qp = qp;
    ap.responder_resources = theirs.responder_resources;
    ap.initiator_depth = theirs.initiator_depth;
    ASSERT_EQ(m->accept(events[0].comm_id, ap), 0);
    dev.ctx->progress();
    ASSERT_EQ(dev.port.sent.size(), 1u);
    wire::ParsedFrame p;
    ASSERT_EQ(wire::parse_frame(dev.port.sent[0], p), wire::ParseStatus::kOk);
    wire::CmMad ours;
    ASSERT_EQ(wire::decode_cm_mad(p.payload(), ours), wire::MadStatus::kOk);
    ASSERT_EQ(ours.attr(), wire::CmAttr::kRep);
    EXPECT_EQ(ours.header.tid, r.d.header.tid);
    EXPECT_EQ(ours.rep.remote_comm_id, theirs.remote_comm_id);
    EXPECT_EQ(ours.rep.responder_resources, theirs.responder_resources);
    EXPECT_EQ(ours.rep.initiator_depth, theirs.initiator_depth);
    EXPECT_EQ(ours.rep.target_ack_delay, theirs.target_ack_delay);
    EXPECT_EQ(ours.rep.rnr_retry_count, theirs.rnr_retry_count);
    EXPECT_EQ(ours.rep.local_qpn, qp->qp_num());
    EXPECT_EQ(qp->state(), IBV_QPS_RTS);
  }
  EXPECT_NE(qps[0]->qp_num(), qps[1]->qp_num());
}

// A QP the program made and moves itself (rdma_cm's conn_param->qp_num):
// the REQ and REP name it, the manager never moves it (RESET until the
// program moves it, RTS after a disconnect), qp_attr() gives each side what
// it needs, the active side gets kConnectResponse and establish() sends the
// RTU. The REP is held with an MRA meanwhile: 3 s of moving (longer than
// the passive side's 2 s of REP resends) do not end the connection.
TEST(Cm, AProgramsOwnQpsAreNamedNeverMovedAndConnectWithQpAttr) {
  CmPair p(5);
  ASSERT_TRUE(p.ma && p.mb) << p.why;
  ASSERT_EQ(p.mb->listen(kService, &p.owner), 0);
  cm::Manager::ConnectParams cp = p.connect_params();
  cp.qp = nullptr;
  cp.qpn = p.qa->qp_num();
  cp.responder_resources = 3;
  cp.initiator_depth = 5;
  std::uint32_t id = 0;
  ASSERT_EQ(p.ma->connect(cp, id), 0);
  EXPECT_EQ(p.qa->state(), IBV_QPS_RESET) << "not the manager's to move";
  ibv_qp_attr a{};
  int mask = 0;
  EXPECT_EQ(p.ma->qp_attr(id, IBV_QPS_RTR, a, mask), EINVAL) << "no RTR before the REP";
  ASSERT_EQ(p.ma->qp_attr(id, IBV_QPS_INIT, a, mask), 0);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
  EXPECT_EQ(a.qp_access_flags, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  EXPECT_EQ(p.ma->qp_attr(id, IBV_QPS_SQD, a, mask), EINVAL);
  EXPECT_EQ(p.ma->qp_attr(id + 1, IBV_QPS_INIT, a, mask), ENOENT);
  EXPECT_EQ(p.ma->establish(id), EINVAL) << "no REP yet";

  ASSERT_TRUE(p.run([&] { return CmPair::find(p.eb, EventType::kRequest) != nullptr; }));
  const Event req = *CmPair::find(p.eb, EventType::kRequest);
  EXPECT_EQ(req.req.local_qpn, p.qa->qp_num());
  // The passive side moves its QP before it accepts, with the REQ's values.
  ibv_qp_attr b_rtr{}, b_rts{};
  for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    ASSERT_EQ(p.mb->qp_attr(req.comm_id, s, a, mask), 0);
    ASSERT_EQ(p.qb->modify(a, mask), 0) << "to " << s;
    (s == IBV_QPS_RTR ? b_rtr : b_rts) = a;
  }
  EXPECT_EQ(b_rtr.dest_qp_num, p.qa->qp_num());
  EXPECT_EQ(b_rtr.max_dest_rd_atomic, 5);
  EXPECT_EQ(b_rts.max_rd_atomic, 3);
  cm::Manager::AcceptParams ap;
  ap.qpn = p.qb->qp_num();
  ap.responder_resources = 2;
  ap.initiator_depth = 1;
  ASSERT_EQ(p.mb->accept(req.comm_id, ap), 0);

  ASSERT_TRUE(p.run([&] { return CmPair::find(p.ea, EventType::kConnectResponse) != nullptr; }));
  const Event rep = *CmPair::find(p.ea, EventType::kConnectResponse);
  EXPECT_EQ(rep.comm_id, id);
  EXPECT_EQ(rep.rep.local_qpn, p.qb->qp_num());
  EXPECT_EQ(rep.rep.starting_psn, b_rtr.rq_psn) << "the REP carries the PSN qp_attr gave before";
  EXPECT_EQ(p.qa->state(), IBV_QPS_RESET);
  // The program takes its time: the REP's MRA keeps the passive side waiting.
  EXPECT_FALSE(p.run([&] { return !p.eb.empty() && p.eb.back().type != EventType::kRequest; }, 3'000'000'000ull));
  ibv_qp_attr a_rtr{}, a_rts{};
  for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    ASSERT_EQ(p.ma->qp_attr(id, s, a, mask), 0);
    ASSERT_EQ(p.qa->modify(a, mask), 0) << "to " << s;
    (s == IBV_QPS_RTR ? a_rtr : a_rts) = a;
  }
  EXPECT_EQ(a_rtr.dest_qp_num, p.qb->qp_num());
  EXPECT_EQ(a_rtr.max_dest_rd_atomic, 1);
  EXPECT_EQ(a_rts.max_rd_atomic, 2);
  EXPECT_EQ(a_rts.sq_psn, b_rtr.rq_psn);
  EXPECT_EQ(b_rts.sq_psn, a_rtr.rq_psn);
  ASSERT_EQ(p.ma->establish(id), 0);
  ASSERT_TRUE(p.run([&] { return CmPair::find(p.eb, EventType::kEstablished) != nullptr; }));
  EXPECT_EQ(CmPair::find(p.eb, EventType::kUnreachable), nullptr);
  EXPECT_EQ(CmPair::find(p.ea, EventType::kEstablished), nullptr) << "the active side is told nothing more";
  EXPECT_EQ(p.ma->establish(id), EINVAL) << "once";

  auto* bufa = static_cast<std::uint8_t*>(p.net.a->alloc_buffer(4096));
  auto* bufb = static_cast<std::uint8_t*>(p.net.b->alloc_buffer(4096));
  MemoryRegion* mra = p.pda->reg_mr(bufa, 4096, IBV_ACCESS_LOCAL_WRITE);
  MemoryRegion* mrb = p.pdb->reg_mr(bufb, 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv_one(p.qb, bufb, 4096, mrb->lkey, 0), 0);
  std::memcpy(bufa, "own QPs", 8);
  ASSERT_EQ(post_rdma(p.qa, IBV_WR_SEND, bufa, 8, mra->lkey, std::uint64_t{0}, 0, 7), 0);
  const auto got = wait_completions(p.net, p.cqb, 1, 1'000'000'000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<const char*>(bufb), "own QPs");

  ASSERT_EQ(p.ma->disconnect(id), 0);
  ASSERT_TRUE(p.run([&] {
    return CmPair::find(p.ea, EventType::kDisconnected) != nullptr && CmPair::find(p.eb, EventType::kDisconnected);
  }));
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS) << "the program's, not the manager's";
  EXPECT_EQ(p.qb->state(), IBV_QPS_RTS);
}

// A connect response the program never establishes: after Timing::request_ns
// the REP is refused (REJ timeout), both sides told.
TEST(Cm, AConnectResponseNeverEstablishedIsRefusedInTime) {
  CmPair p(6);
  ASSERT_TRUE(p.ma && p.mb) << p.why;
  ASSERT_EQ(p.mb->listen(kService, &p.owner), 0);
  cm::Manager::ConnectParams cp = p.connect_params();
  cp.qp = nullptr;
  cp.qpn = p.qa->qp_num();
  std::uint32_t id = 0;
  ASSERT_EQ(p.ma->connect(cp, id), 0);
  ASSERT_TRUE(p.run([&] { return CmPair::find(p.eb, EventType::kRequest) != nullptr; }));
  ASSERT_EQ(p.mb->accept(CmPair::find(p.eb, EventType::kRequest)->comm_id, accept_params(p.qb)), 0);
  ASSERT_TRUE(p.run([&] { return CmPair::find(p.ea, EventType::kConnectResponse) != nullptr; }));
  ASSERT_TRUE(p.run(
      [&] {
        return CmPair::find(p.ea, EventType::kUnreachable) != nullptr &&
               CmPair::find(p.eb, EventType::kRejected) != nullptr;
      },
      15'000'000'000ull));
  EXPECT_EQ(CmPair::find(p.eb, EventType::kRejected)->reason, static_cast<std::uint16_t>(wire::RejReason::kTimeout));
  EXPECT_EQ(p.ma->connections(), 0u);
  EXPECT_EQ(p.qb->state(), IBV_QPS_ERR) << "B's QP is its manager's: the REJ ends it";
}

}  // namespace
}  // namespace uroce::test
