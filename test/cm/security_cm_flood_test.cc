// Issue 25, M6: a peer on the link floods a listening CM with REQs, each
// with a fresh comm ID (and a spoofed source), and never answers. What the
// CM keeps for them stays within the listener's backlog and an overall cap
// (the rest get REJ "no resources"), unanswered requests expire (REJ
// timeout, reported), a REQ seen again is still matched to its connection
// after thousands of others, a peer's REJ withdraws its request, and a
// legitimate peer connects once the flood is over.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cm/manager.h"
#include "support/scripted_port.h"
#include "sim/sim_link.h"
#include "support/test_seed.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

using cm::Event;
using cm::EventType;

constexpr std::uint64_t kService = wire::rdma_cm_service_id(wire::kRdmaPsTcp, 7174);

// A CM on a scripted port at 10.0.0.1; frames in are MADs a hostile peer
// makes, frames out are decoded back.
struct Victim {
  explicit Victim(cm::Timing timing = {}) : dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{16, 16, 1, 1, 0}, 64) {
    dev.port.keep_sent = true;
    if (dev.qp == nullptr) {
      error = dev.error;
      return;
    }
    m = cm::Manager::open(*dev.ctx, error, timing);
  }

  static std::vector<std::uint8_t> frame(const wire::CmMad& mad, std::array<std::uint8_t, 4> src) {
    std::array<std::uint8_t, wire::kMadBytes> bytes{};
    EXPECT_TRUE(wire::encode_cm_mad(mad, bytes));
    wire::FrameSpec s;
    s.src4 = src;
    s.dst4 = {10, 0, 0, 1};
    s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kUdSendOnly);
    s.bth.pkey.set(0xffff);
    s.bth.dest_qp.set(wire::kGsiQpn);
    s.deth.qkey.set(wire::kGsiQkey);
    s.deth.src_qp.set(wire::kGsiQpn);
    std::vector<std::uint8_t> f(512);
    f.resize(wire::build_frame(s, bytes, f));
    return f;
  }
  static wire::CmMad req(std::uint32_t comm_id, std::uint64_t service = kService) {
    wire::CmMad m;
    m.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kReq);
    m.header.tid = 0x1000 + comm_id;
    m.req.local_comm_id = comm_id;
    m.req.service_id = service;
    m.req.local_qpn = 0x100 + (comm_id & 0xffff);
    m.req.starting_psn = comm_id & 0xffffff;
    m.req.path_mtu = IBV_MTU_1024;
    m.req.remote_cm_response_timeout = 20;
    m.req.local_cm_response_timeout = 20;
    m.req.max_cm_retries = 15;
    return m;
  }
  // Feeds MADs through the engine into the CM (at most 32 at a time: QP1
  // has 64 receives) and lets what it answers go out.
  void feed(const std::vector<std::vector<std::uint8_t>>& frames) {
    for (std::size_t i = 0; i < frames.size(); i += 32) {
      for (std::size_t k = i; k < std::min(frames.size(), i + 32); ++k) dev.port.inbox.push_back(frames[k]);
      dev.ctx->progress();
      m->poll(events);
      dev.ctx->progress();
    }
  }
  void idle(std::uint64_t ns) {
    clock.advance(ns);
    dev.ctx->progress();
    m->poll(events);
    dev.ctx->progress();
  }
  // The MADs sent since the last call.
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
  std::size_t count(EventType t) const {
    std::size_t n = 0;
    for (const Event& e : events) n += e.type == t;
    return n;
  }

  sim::VirtualClock clock;
  ScriptedDevice dev;
  std::unique_ptr<cm::Manager> m;
  std::string error;
  std::vector<Event> events;
  int owner = 0;
};

std::array<std::uint8_t, 4> spoofed(std::uint32_t i) {
  return {10, static_cast<std::uint8_t>(1 + (i >> 16) % 200), static_cast<std::uint8_t>(i >> 8),
          static_cast<std::uint8_t>(i)};
}

// 5,000 REQs with fresh comm IDs from as many sources at a listener that
// never answers: at most its backlog become requests, every other one is
// refused at once with REJ "no resources"; after the request lifetime the
// waiting ones are refused (REJ timeout) and reported, and the listener
// takes requests again.
TEST(SecurityCmFlood, RequestsBeyondTheBacklogAreRefusedAndTheRestExpire) {
  Victim v;
  ASSERT_TRUE(v.m) << v.error;
  ASSERT_EQ(v.m->listen(kService, &v.owner), 0);  // the default backlog
  constexpr std::uint32_t kFlood = 5000;
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::uint32_t i = 0; i < kFlood; ++i) frames.push_back(Victim::frame(Victim::req(0x10000 + i), spoofed(i)));
  v.feed(frames);
  const std::size_t taken = v.count(EventType::kRequest);
  EXPECT_LE(taken, cm::kMaxBacklog) << "requests held beyond the listener's backlog";
  EXPECT_GT(taken, 0u);
  std::size_t refused = 0;
  for (const wire::CmMad& d : v.sent()) {
    refused += d.attr() == wire::CmAttr::kRej &&
               d.rej.reason == static_cast<std::uint16_t>(wire::RejReason::kNoResources);
  }
  EXPECT_EQ(refused, kFlood - taken) << "every REQ beyond the backlog: REJ no resources";

  // Nobody answers: after the request lifetime each is refused and reported.
  for (int s = 0; s < 30 && v.count(EventType::kUnreachable) < taken; ++s) v.idle(1'000'000'000);
  EXPECT_EQ(v.count(EventType::kUnreachable), taken) << "unanswered requests never expire";
  std::size_t timed_out = 0;
  for (const wire::CmMad& d : v.sent()) {
    timed_out += d.attr() == wire::CmAttr::kRej && d.rej.reason == static_cast<std::uint16_t>(wire::RejReason::kTimeout);
  }
  // REJ timeout to their peers, as many as QP1's send queue takes at once
  // (all expire in the same instant here); the rest time out on their own.
  EXPECT_GT(timed_out, 0u) << "expired requests: REJ timeout to their peers";
  EXPECT_LE(timed_out, taken);

  // The listener takes a legitimate request again, and it connects.
  v.events.clear();
  v.feed({Victim::frame(Victim::req(0x7777), {10, 0, 0, 2})});
  ASSERT_EQ(v.count(EventType::kRequest), 1u) << "the listener is still full of expired requests";
  cm::Manager::AcceptParams ap;
  ap.qp = v.dev.qp;
  EXPECT_EQ(v.m->accept(v.events[0].comm_id, ap), 0);
  v.dev.ctx->progress();
  bool rep = false;
  for (const wire::CmMad& d : v.sent()) rep |= d.attr() == wire::CmAttr::kRep && d.rep.remote_comm_id == 0x7777;
  EXPECT_TRUE(rep);
}

// rdma_listen's backlog and the manager's overall cap bound requests (with
// counters), each listener on its own.
TEST(SecurityCmFlood, BacklogAndOverallCapAreCountedApart) {
  cm::Timing t;
  t.max_pending_requests = 12;
  Victim v(t);
  ASSERT_TRUE(v.m) << v.error;
  const std::uint64_t other = wire::rdma_cm_service_id(wire::kRdmaPsTcp, 7175);
  ASSERT_EQ(v.m->listen(kService, &v.owner, 8), 0);
  ASSERT_EQ(v.m->listen(other, &v.owner, 8), 0);
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::uint32_t i = 0; i < 100; ++i) frames.push_back(Victim::frame(Victim::req(0x20000 + i), spoofed(i)));
  for (std::uint32_t i = 0; i < 100; ++i) {
    frames.push_back(Victim::frame(Victim::req(0x30000 + i, other), spoofed(1000 + i)));
  }
  v.feed(frames);
  EXPECT_EQ(v.count(EventType::kRequest), 12u);
  EXPECT_EQ(v.m->pending_requests(), 12u);
  EXPECT_EQ(v.m->connections(), 12u);
  EXPECT_EQ(v.m->counters().req_refused_backlog, 92u) << "the first service: 8 taken";
  EXPECT_EQ(v.m->counters().req_refused_full, 96u) << "the second: 4 taken, then the cap";
  // Refusing one frees its place.
  ASSERT_EQ(v.m->reject(v.events[0].comm_id, {}), 0);
  EXPECT_EQ(v.m->pending_requests(), 11u);
  v.events.clear();
  v.feed({Victim::frame(Victim::req(0x40000, other), {10, 0, 0, 2})});
  EXPECT_EQ(v.count(EventType::kRequest), 1u);
  for (int s = 0; s < 15; ++s) v.idle(1'000'000'000);
  EXPECT_EQ(v.m->counters().req_timed_out, 12u);
  EXPECT_EQ(v.m->pending_requests(), 0u);
  EXPECT_EQ(v.m->connections(), 0u);
}

// After thousands of other requests a REQ sent again is still the same
// request (found by peer and comm ID, not a new one), the same comm ID from
// another peer is another request, and the peer's REJ withdraws its request
// (its place in the backlog is free at once).
TEST(SecurityCmFlood, RequestsAreMatchedByPeerAndCommIdAndAPeerMayWithdrawOne) {
  const std::uint64_t seed = test_seed(0x6d36);
  SCOPED_TRACE(seed_note(seed));
  Victim v;
  ASSERT_TRUE(v.m) << v.error;
  ASSERT_EQ(v.m->listen(kService, &v.owner, 4), 0);
  const std::array<std::uint8_t, 4> peer = {10, 0, 0, 2};
  const auto first = static_cast<std::uint32_t>(seed);
  v.feed({Victim::frame(Victim::req(first), peer)});
  ASSERT_EQ(v.count(EventType::kRequest), 1u);
  const std::uint32_t ours = v.events[0].comm_id;
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::uint32_t i = 0; i < 3000; ++i) frames.push_back(Victim::frame(Victim::req(first + 1 + i), spoofed(i)));
  v.feed(frames);
  EXPECT_EQ(v.count(EventType::kRequest), 4u);
  const std::uint64_t dup_before = v.m->counters().duplicates;
  v.feed({Victim::frame(Victim::req(first), peer)});
  EXPECT_EQ(v.m->counters().duplicates, dup_before + 1) << "the REQ again is the same request";
  EXPECT_EQ(v.count(EventType::kRequest), 4u);
  // The peer gives up: its REJ (timeout) withdraws the request.
  wire::CmMad rej;
  rej.header.attr_id = static_cast<std::uint16_t>(wire::CmAttr::kRej);
  rej.rej.local_comm_id = first;
  rej.rej.remote_comm_id = ours;
  rej.rej.rejected = wire::CmMsgKind::kReq;
  rej.rej.reason = static_cast<std::uint16_t>(wire::RejReason::kTimeout);
  v.events.clear();
  v.feed({Victim::frame(rej, peer)});
  ASSERT_EQ(v.count(EventType::kRejected), 1u) << "a withdrawn request is reported";
  EXPECT_EQ(v.events[0].comm_id, ours);
  cm::Manager::AcceptParams ap;
  ap.qp = v.dev.qp;
  EXPECT_EQ(v.m->accept(ours, ap), ENOENT);
  // Its place is free: the next REQ is taken (not refused).
  v.events.clear();
  v.sent();
  v.feed({Victim::frame(Victim::req(first ^ 0x55aa55aa), {10, 0, 0, 3})});
  EXPECT_EQ(v.count(EventType::kRequest), 1u);
}

// Security review L6: the comm ID and starting PSN a CM answers with are
// drawn from the kernel's CSPRNG, not from a generator seeded with the
// clock: two CMs opened in turn at the same (virtual) instant, each
// accepting the same REQ, answer with different ones. A peer who could
// predict them could forge the connection's DREQ or inject into the QP
// (the PSN is then all that guards its receive side).
TEST(SecurityCmFlood, CommIdsAndStartingPsnsAreUnpredictable) {
  std::vector<std::uint32_t> ids, psns;
  for (int round = 0; round < 4; ++round) {
    Victim v;
    ASSERT_TRUE(v.m) << v.error;
    ASSERT_EQ(v.m->listen(kService, &v.owner), 0);
    v.feed({Victim::frame(Victim::req(0x7777), {10, 0, 0, 2})});
    ASSERT_EQ(v.count(EventType::kRequest), 1u);
    cm::Manager::AcceptParams ap;
    ap.qp = v.dev.qp;
    ASSERT_EQ(v.m->accept(v.events[0].comm_id, ap), 0);
    v.dev.ctx->progress();
    for (const wire::CmMad& d : v.sent()) {
      if (d.attr() != wire::CmAttr::kRep) continue;
      ids.push_back(d.rep.local_comm_id);
      psns.push_back(d.rep.starting_psn);
    }
  }
  ASSERT_EQ(ids.size(), 4u);
  // Four draws of 32 (24) random bits: a repeat is a one in 10^8 (10^6) event.
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::size_t k = i + 1; k < ids.size(); ++k) {
      EXPECT_NE(ids[i], ids[k]) << "the same comm ID from two CMs opened alike";
      EXPECT_NE(psns[i], psns[k]) << "the same starting PSN from two CMs opened alike";
    }
  }
}

}  // namespace
}  // namespace uroce::test
