// Replay against Soft-RoCE: the requester's packets of a golden capture go
// into our responder, set up with the QP numbers, PSNs, rkeys and addresses
// of the capture's TCP exchange; our answers must match those of the rxe
// responder in the capture: opcodes, PSNs, AETH syndromes and MSNs, READ
// response lengths and data, atomic original values.
//
// The same captures replayed as XRC (IBTA annex A14; Soft-RoCE has none to
// capture): each request moved to XRC's opcode with an XRCETH naming an
// XRC SRQ, into an XRC target QP whose receives and memory are that SRQ's
// and its PD's; the answers must be rxe's, in XRC's opcodes.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <map>
#include <regex>
#include <sstream>
#include <tuple>

#include "support/golden_data.h"
#include "support/oob_sessions.h"
#include "support/scripted_port.h"
#include "verbs/verbs_impl.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

// A port that delivers injected frames and keeps what the engine sends.
class FixedClock : public engine::Clock {
 public:
  std::uint64_t now_ns() override { return now; }
  std::uint64_t now = 1'000'000;
};

// What a response says, for comparison.
struct Answer {
  std::uint8_t opcode = 0;
  std::uint32_t psn = 0;
  int syndrome = -1;
  std::uint32_t msn = 0;
  std::uint32_t payload = 0;
  std::uint64_t orig = 0;
  std::vector<std::uint8_t> data;
  bool icrc_ok = false;

  bool operator==(const Answer& o) const {
    return opcode == o.opcode && psn == o.psn && syndrome == o.syndrome && msn == o.msn && payload == o.payload &&
           orig == o.orig && data == o.data;
  }
  std::string str() const {
    std::ostringstream s;
    s << wire::opcode_name(opcode) << " psn=" << psn << " syn=0x" << std::hex << syndrome << std::dec << " msn=" << msn
      << " len=" << payload << " orig=" << orig;
    return s.str();
  }
};

Answer answer_of(const wire::ParsedFrame& p, wire::ParseStatus status) {
  Answer a;
  a.opcode = p.opcode;
  a.psn = p.bth().psn.get();
  if (p.has(wire::ExtHdr::kAeth)) {
    a.syndrome = p.aeth().syndrome;
    a.msn = p.aeth().msn.get();
  }
  if (p.has(wire::ExtHdr::kAtomicAckEth)) a.orig = p.atomic_ack_eth().orig_data.get();
  a.payload = p.payload_length;
  a.data.assign(p.payload().begin(), p.payload().end());
  a.icrc_ok = status == wire::ParseStatus::kOk;
  return a;
}

struct Direction {
  Peer requester;
  Peer responder;
  std::vector<std::vector<std::uint8_t>> requests;  // as captured, in order
  std::vector<Answer> rxe;                          // rxe's answers, in order
  std::uint32_t mtu = 4096;
};

// The requests one peer sent the other's QP, and the answers that came back.
Direction direction_of(const std::vector<pcap::Frame>& frames, const Peer& req, const Peer& resp) {
  Direction d{req, resp, {}, {}, 4096};
  std::uint32_t largest_segment = 0;
  for (const auto& fr : frames) {
    wire::ParsedFrame p;
    if (wire::parse_frame(fr.data, p) != wire::ParseStatus::kOk || p.ip_version != 4) continue;
    if (p.info->transport != wire::Transport::kRc) continue;
    const std::uint32_t src = ipv4_at(fr.data, p.l3_offset + 12);
    const std::uint32_t dqpn = p.bth().dest_qp.get();
    const bool segment = p.info->has_any(wire::kFirst | wire::kMiddle) && !p.info->has(wire::kLast);
    if (src == req.ip && dqpn == resp.qpn && p.info->has(wire::kRequest)) {
      d.requests.push_back(fr.data);
      if (segment) largest_segment = std::max<std::uint32_t>(largest_segment, p.payload_length);
    } else if (src == resp.ip && dqpn == req.qpn && p.info->has(wire::kResponse)) {
      d.rxe.push_back(answer_of(p, wire::ParseStatus::kOk));
      if (segment) largest_segment = std::max<std::uint32_t>(largest_segment, p.payload_length);
    }
  }
  if (largest_segment != 0) d.mtu = largest_segment;
  return d;
}

ibv_mtu mtu_enum(std::uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

// `frame`, an RC request, as the XRC request for SRQ `srqn`: its opcode in
// XRC's range and an XRCETH behind the BTH (the rest rebuilt around it, the
// ICRC anew).
std::vector<std::uint8_t> as_xrc(const std::vector<std::uint8_t>& frame, std::uint32_t srqn) {
  wire::ParsedFrame p;
  wire::parse_frame(frame, p);
  wire::FrameSpec spec = wire::spec_from_parsed(p);
  spec.bth.opcode = static_cast<std::uint8_t>(spec.bth.opcode + static_cast<std::uint8_t>(wire::Opcode::kXrcSendFirst));
  spec.xrceth.srqn.set(srqn);
  std::vector<std::uint8_t> out(frame.size() + 64);
  out.resize(wire::build_frame(spec, p.payload(), out));
  return out;
}

// Runs `d.requests` through our responder (an XRC target QP with `xrc`);
// returns our answers.
std::vector<Answer> replay(const Direction& d, std::string& error, bool xrc = false) {
  ScriptedPort port;
  FixedClock clock;
  PortConfig cfg;
  cfg.io = &port;
  cfg.clock = &clock;
  // The two ends' addresses as captured: a connected QP takes packets from
  // its peer's address to its own only.
  ibv_gid requester_gid{};
  if (!d.requests.empty()) {
    wire::ParsedFrame first;
    wire::parse_frame(d.requests.front(), first);
    if (first.ip_version != 4) {
      error = "only IPv4 captures are replayed (the port's IPv6 GID is its link-local address)";
      return {};
    }
    cfg.gid = ipv4_gid(first.ipv4().dst);
    requester_gid = ipv4_gid(first.ipv4().src);
  }
  auto ctx = Context::open(cfg, error);
  ProtectionDomain* pd = ctx->alloc_pd();
  CompletionQueue* cq = ctx->create_cq(65536);
  QpInitAttr init;
  init.send_cq = init.recv_cq = cq;
  init.cap = ibv_qp_cap{16, 4096, 1, 1, 0};
  SharedReceiveQueue* srq = nullptr;
  if (xrc) {
    init.qp_type = IBV_QPT_XRC_RECV;
    init.xrcd = ctx->open_xrcd();
    SrqInitAttr sa;
    sa.max_wr = 4096;
    sa.max_sge = 1;
    sa.xrcd = init.xrcd;
    sa.cq = cq;
    srq = pd->create_srq(sa);
    if (srq == nullptr) {
      error = ctx->last_error();
      return {};
    }
  }
  QueuePair* qp = testing::create_qp_with_qpn(pd, init, d.responder.qpn);
  if (qp == nullptr) {
    error = ctx->last_error();
    return {};
  }

  // The responder's registered memory, at the capture's address and rkey,
  // holding what rxe's memory held as far as the capture shows it.
  constexpr std::size_t kMem = 8u << 20;
  auto* mem = static_cast<std::uint8_t*>(ctx->alloc_buffer(kMem));
  const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (d.responder.has_memory &&
      testing::reg_mr_with_key(pd, mem, kMem, d.responder.vaddr, all, d.responder.rkey) == nullptr) {
    error = "cannot register the capture's rkey";
    return {};
  }
  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint32_t>> reads;  // request PSN -> (va, len)
  bool atomic_seeded = false;
  for (const auto& f : d.requests) {
    wire::ParsedFrame p;
    wire::parse_frame(f, p);
    if (p.info->has(wire::kReadRequest)) reads[p.bth().psn.get()] = {p.reth().va.get(), p.reth().dma_length.get()};
  }
  for (const Answer& a : d.rxe) {
    if (a.opcode >= 0x0d && a.opcode <= 0x10) {
      // The READ data rxe sent: put it where it came from.
      for (const auto& [psn, req] : reads) {
        const std::uint32_t n = req.second == 0 ? 1 : (req.second + d.mtu - 1) / d.mtu;
        const std::int32_t at = static_cast<std::int32_t>((a.psn - psn) & 0xffffff);
        if (at >= 0 && static_cast<std::uint32_t>(at) < n) {
          const std::uint64_t off = req.first - d.responder.vaddr + static_cast<std::uint64_t>(at) * d.mtu;
          if (off + a.data.size() <= kMem) std::memcpy(mem + off, a.data.data(), a.data.size());
          break;
        }
      }
    }
    if (a.opcode == 0x12 && !atomic_seeded) {
      // The value the first atomic found in rxe's memory.
      for (const auto& f : d.requests) {
        wire::ParsedFrame p;
        wire::parse_frame(f, p);
        if (p.info->has(wire::kAtomic) && p.bth().psn.get() == a.psn) {
          std::memcpy(mem + (p.atomic_eth().va.get() - d.responder.vaddr), &a.orig, 8);
          atomic_seeded = true;
        }
      }
    }
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = all;
  qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  // Receives for SENDs (rdma-core's pingpong and perftest's send tests post
  // theirs up front).
  MemoryRegion* rx = pd->reg_mr(mem + kMem / 2, kMem / 2, IBV_ACCESS_LOCAL_WRITE);
  for (std::uint32_t i = 0; i < 4000; ++i) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(mem + kMem / 2) + (i % 32) * 65536, 65536, rx->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (srq != nullptr) srq->post_recv(&wr, &bad);
    else qp->post_recv(&wr, &bad);
  }

  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu_enum(d.mtu);
  a.dest_qp_num = d.requester.qpn;
  a.rq_psn = d.requester.psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = requester_gid;
  a.ah_attr.grh.sgid_index = 1;  // the port's IPv4 address
  if (qp->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    error = ctx->last_error();
    return {};
  }

  for (const auto& f : d.requests) {
    port.inbox.push_back(srq != nullptr ? as_xrc(f, srq->srq_num()) : f);
    for (int i = 0; i < 64 && (ctx->progress() > 0 || !port.inbox.empty()); ++i) {
    }
  }
  std::vector<Answer> ours;
  for (const auto& f : port.sent) {
    wire::ParsedFrame p;
    const wire::ParseStatus s = wire::parse_frame(f, p);
    ours.push_back(answer_of(p, s));
  }
  return ours;
}

struct ReplayCase {
  std::string file;
  std::size_t lost_responses;  // netem dropped this many of the responder's frames before the capture point
};

class Replay : public ::testing::TestWithParam<ReplayCase> {};

// rxe's answers of `d`, as an XRC responder sends them: XRC's opcodes.
std::vector<Answer> in_xrc(std::vector<Answer> rxe) {
  for (Answer& a : rxe) a.opcode = static_cast<std::uint8_t>(a.opcode + static_cast<std::uint8_t>(wire::Opcode::kXrcSendFirst));
  return rxe;
}

void expect_answers_as_rxe(const ReplayCase& c, bool xrc) {
  const auto frames = load_golden(c.file);
  const auto sessions = sessions_of(frames);
  ASSERT_FALSE(sessions.empty()) << "no TCP exchange found";
  std::size_t directions = 0;
  std::size_t answers = 0;
  for (const Session& s : sessions) {
    for (int dir = 0; dir < 2; ++dir) {
      const Peer& req = dir == 0 ? s.client : s.server;
      const Peer& resp = dir == 0 ? s.server : s.client;
      const Direction d = direction_of(frames, req, resp);
      if (d.requests.empty()) continue;
      ++directions;
      std::string error;
      const std::vector<Answer> ours = replay(d, error, xrc);
      const std::vector<Answer> want_all = xrc ? in_xrc(d.rxe) : d.rxe;
      ASSERT_TRUE(error.empty()) << error;
      for (const Answer& a : ours) EXPECT_TRUE(a.icrc_ok) << "our frame fails its ICRC: " << a.str();
      // rxe's answers, in order, within ours; ours may hold the few the
      // capture lost (netem dropped them before the capture point).
      std::size_t j = 0;
      std::size_t extra = 0;
      for (const Answer& want : want_all) {
        while (j < ours.size() && !(ours[j] == want)) {
          ++extra;
          ++j;
        }
        ASSERT_LT(j, ours.size()) << "rxe answered " << want.str() << "; ours has no such answer after " << j
                                  << " of " << ours.size() << (j > 0 ? ", last: " + ours[j - 1].str() : "");
        ++j;
        ++answers;
      }
      extra += ours.size() - j;
      EXPECT_LE(extra, c.lost_responses) << "answers that rxe did not send";
    }
  }
  EXPECT_GT(directions, 0u);
  EXPECT_GT(answers, 0u);
  std::printf("  %s%s: %zu sessions, %zu directions, %zu answers matched\n", c.file.c_str(), xrc ? " as XRC" : "",
              sessions.size(), directions, answers);
}

TEST_P(Replay, OurResponderAnswersAsSoftRoceDid) { expect_answers_as_rxe(GetParam(), false); }

TEST_P(Replay, AsXrcOurTargetQpAnswersAsSoftRoceDid) { expect_answers_as_rxe(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(SoftRoce, Replay,
                         ::testing::Values(ReplayCase{"ib_write_bw.pcap", 0}, ReplayCase{"ib_read_lat.pcap", 0},
                                           ReplayCase{"ib_atomic_lat.pcap", 0}, ReplayCase{"ib_send_lat.pcap", 0},
                                           ReplayCase{"rc_pingpong.pcap", 0}, ReplayCase{"ib_write_bw_loss.pcap", 0},
                                           ReplayCase{"ib_read_lat_loss.pcap", 3}),
                         [](const auto& param_info) { return capture_test_name(param_info.param.file); });

}  // namespace
}  // namespace uroce::test
