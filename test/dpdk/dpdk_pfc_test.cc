// PFC on DPDK ports (issue 16), on net_ring with EAL's --no-huge --no-shconf
// --no-pci: MAC Control frames (PAUSE, PFC, other opcodes, truncated ones)
// reaching a port are counted and dropped before the engine; asking a
// driver without PFC for it gives one warning and a working port; and the
// DSCP data and CNPs carry on the wire follows the PFC priority as the
// README's "PFC and traffic classes" says, read back from the other ring end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cc/dcqcn.h"
#include "common/args.h"
#include "dpdk/port.h"
#include "support/eal_environment.h"
#include "support/ring_pair_rig.h"
#include "uroce/log.h"
#include "uroce/stats.h"
#include "verbs/traffic_class.h"
#include "wire/frame.h"
#include "wire/pfc.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

// The warnings logged while it lives (the default level, warn).
class WarnCapture {
 public:
  WarnCapture() {
    set_log_level(LogLevel::kWarn);
    set_log_sink([this](LogLevel level, std::string_view text) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (level >= LogLevel::kWarn) lines_.emplace_back(text);
    });
  }
  ~WarnCapture() { set_log_sink({}); }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }
  // The lines holding every one of `parts`.
  std::vector<std::string> with(std::initializer_list<const char*> parts) const {
    std::vector<std::string> out;
    for (const std::string& l : lines()) {
      if (std::all_of(parts.begin(), parts.end(), [&](const char* p) { return l.find(p) != std::string::npos; })) {
        out.push_back(l);
      }
    }
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

std::uint64_t stat(const std::vector<Stat>& rows, StatScope scope, const char* name) {
  const Stat* s = find_stat(rows, scope, name);
  EXPECT_NE(s, nullptr) << stat_scope_name(scope) << "." << name;
  return s != nullptr ? s->value : 0;
}

// Marks the IPv4 packet at `l3` of `frame` CE (ECN 11) and rewrites its
// header checksum.
void set_ce(std::vector<std::uint8_t>& frame, std::size_t l3) {
  std::uint8_t* ip = frame.data() + l3;
  ip[1] |= 0x03;
  ip[10] = ip[11] = 0;
  const std::size_t len = (ip[0] & 0x0fu) * 4u;
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < len; i += 2) sum += static_cast<std::uint32_t>(ip[i] << 8 | ip[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  ip[10] = static_cast<std::uint8_t>(~sum >> 8);
  ip[11] = static_cast<std::uint8_t>(~sum);
}

std::vector<std::uint8_t> mac_control(const wire::PauseRequest& req) {
  std::vector<std::uint8_t> f(wire::kMacControlFrameBytes);
  EXPECT_EQ(wire::build_mac_control({0x02, 0, 0, 0, 0, 0x99}, req, f), wire::kMacControlFrameBytes);
  return f;
}

// Two devices on a net_ring pair with a PD, CQ and buffer each; QPs on demand.
struct Rig : RingPairRig {
  explicit Rig(const std::string& name, int pfc_priority = -1, const cc::DcqcnParams* dcqcn = nullptr)
      : RingPairRig(name, {.dcqcn = dcqcn, .pfc_priority = pfc_priority, .cq_depth = 1024,
                           .cap = ibv_qp_cap{64, 64, 1, 1, 64}, .qps = false}) {}

  QueuePair* qp(ProtectionDomain* pd, CompletionQueue* cq, ibv_qp_type type = IBV_QPT_RC) {
    return create_qp(pd, cq, type);
  }

  // An RC pair a -> b whose address vectors carry `traffic_class`.
  std::pair<QueuePair*, QueuePair*> connected(std::uint8_t traffic_class) {
    QueuePair* from = qp(pda, cqa);
    QueuePair* to = qp(pdb, cqb);
    ConnectParams p;
    p.traffic_class = traffic_class;
    EXPECT_EQ(pair->connect(from, to, p), 0) << pair->a->last_error() << pair->b->last_error();
    return {from, to};
  }

  // What a has sent towards b: a polls alone, and the frames are taken off
  // b's end of the ring before b's engine sees them.
  std::vector<std::vector<std::uint8_t>> capture_from_a() {
    std::vector<std::vector<std::uint8_t>> frames;
    for (int i = 0; i < 20; ++i) {
      pair->a->progress();
      pair->port_b->receive_copies(0, frames, 64);
    }
    return frames;
  }
};

// The IPv4 ToS byte of each RoCEv2 frame in `frames`, by destination QPN.
std::map<std::uint32_t, std::vector<std::uint8_t>> tos_by_dest_qp(const std::vector<std::vector<std::uint8_t>>& frames) {
  std::map<std::uint32_t, std::vector<std::uint8_t>> out;
  for (const auto& f : frames) {
    wire::ParsedFrame p;
    if (wire::parse_frame(f, p) != wire::ParseStatus::kOk || p.ip_version != 4) {
      ADD_FAILURE() << "a frame that is not IPv4 RoCEv2 (" << f.size() << " bytes)";
      continue;
    }
    out[p.at<wire::Bth>(p.bth_offset).dest_qp.get()].push_back(p.at<wire::Ipv4Hdr>(p.l3_offset).tos);
  }
  return out;
}

TEST(DpdkPfc, MacControlFramesAreCountedAndNeverReachTheEngine) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Rig rig("pfcrx");
  ASSERT_NE(rig.pair, nullptr);

  wire::PauseRequest pfc;
  pfc.enabled = 0x08;
  pfc.quanta[3] = 0xffff;
  wire::PauseRequest pause;
  pause.pfc = false;
  pause.quanta[0] = 0x100;
  std::vector<std::uint8_t> other = mac_control(pause);
  other[15] = 0x02;  // opcode 0x0002: 802.3 MPCP GATE, not flow control
  const std::vector<std::uint8_t> full_pfc = mac_control(pfc);
  const std::vector<std::vector<std::uint8_t>> frames = {
      full_pfc,
      mac_control(pause),
      other,
      std::vector<std::uint8_t>(full_pfc.begin(), full_pfc.begin() + 14),  // ends at its ether_type
      std::vector<std::uint8_t>(full_pfc.begin(), full_pfc.begin() + 15),  // half an opcode
      std::vector<std::uint8_t>(full_pfc.begin(), full_pfc.begin() + 24),  // PFC without all eight times
      mac_control(pfc),
  };
  // Sent on a's port behind a's engine: they arrive where b's engine polls.
  ASSERT_EQ(rig.pair->port_a->send_copies(0, frames), frames.size());
  for (int i = 0; i < 10; ++i) rig.pair->b->progress();

  const dpdk::PortIoCounters& c = rig.pair->io_b->counters();
  EXPECT_EQ(c.rx_pfc, 2u);
  EXPECT_EQ(c.rx_pause, 1u);
  EXPECT_EQ(c.rx_mac_control_other, 1u);
  EXPECT_EQ(c.rx_mac_control_malformed, 3u);
  EXPECT_EQ(c.rx_other, 0u);
  // Nothing of them reached the engine: no frame received, nothing taken
  // for "not RoCE", no parse reason counted a drop.
  const std::vector<Stat> rows = rig.pair->b->stats();
  EXPECT_EQ(stat(rows, StatScope::kEngine, "rx_frames"), 0u);
  EXPECT_EQ(stat(rows, StatScope::kEngine, "rx_not_roce"), 0u);
  for (const Stat& s : rows) {
    if (s.scope == StatScope::kEngine && std::strncmp(s.name, "drop_", 5) == 0) {
      EXPECT_EQ(s.value, 0u) << s.name;
    }
  }
  // The same rows through the registry the tools and telemetry read.
  EXPECT_EQ(stat(rows, StatScope::kPort, "rx_pfc"), 2u);
  EXPECT_EQ(stat(rows, StatScope::kPort, "rx_mac_control_malformed"), 3u);

  // And RoCE goes on around them: a WRITE with a PAUSE frame in its path.
  auto [qa, qb] = rig.connected(0);
  ASSERT_NE(qa, nullptr);
  for (std::size_t i = 0; i < 4096; ++i) rig.bufa[i] = static_cast<std::uint8_t>(i * 7);
  ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, rig.bufa, 4096, rig.mra->lkey, rig.bufb, rig.mrb->rkey), 0);
  rig.pair->port_a->send_copies(0, std::vector<std::vector<std::uint8_t>>{mac_control(pause)});
  ibv_wc wc{};
  ASSERT_TRUE(rig.pair->run_until([&] { return rig.cqa->poll(1, &wc) == 1; }));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(rig.bufa, rig.bufb, 4096), 0);
  EXPECT_EQ(c.rx_pause, 2u);
  EXPECT_EQ(c.rx_other, 0u);
}

TEST(DpdkPfc, PfcOnADriverWithoutItWarnsOnceAndThePortWorks) {
  ASSERT_EQ(EalEnvironment::error(), "");
  std::string error;
  EXPECT_EQ(dpdk::Port::open({.name = "net_ring0", .pfc_priority = 8}, error), nullptr);
  EXPECT_NE(error.find("from 0 to 7"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;

  WarnCapture warnings;
  auto port = dpdk::Port::open({.name = "net_ring0", .pfc_priority = 3}, error);
  ASSERT_NE(port, nullptr) << error;
  EXPECT_EQ(port->pfc(), dpdk::PortPfc::kUnsupported);
  // One line that names the port and its driver and says what to do.
  ASSERT_EQ(warnings.lines().size(), 1u);
  const std::string line = warnings.lines()[0];
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  for (const char* part : {"net_ring0", "driver net_ring", "priority 3", "dcb pfc set", "prio-pfc 3:on", "switch"}) {
    EXPECT_NE(line.find(part), std::string::npos) << part << " not in: " << line;
  }
  // The port carries frames as before (a PFC frame too: net_ring0 loops it).
  wire::PauseRequest pfc;
  pfc.enabled = 0x08;
  const std::vector<std::vector<std::uint8_t>> sent = {mac_control(pfc), std::vector<std::uint8_t>(60, 0xab)};
  ASSERT_EQ(port->send_copies(0, sent), sent.size());
  std::vector<std::vector<std::uint8_t>> got;
  port->receive_copies(0, got);
  EXPECT_EQ(got, sent);
}

TEST(DpdkPfc, DataDscpFollowsThePfcPriority) {
  ASSERT_EQ(EalEnvironment::error(), "");
  WarnCapture warnings;
  Rig rig("pfctc", 3);
  ASSERT_NE(rig.pair, nullptr);
  // Both net_ring ports said they cannot enable PFC; nothing else warned yet.
  EXPECT_EQ(warnings.with({"PFC on priority 3 not enabled"}).size(), 2u);
  EXPECT_EQ(warnings.lines().size(), 2u);

  // Traffic class (DSCP << 2) asked -> sent. DSCP 0 takes priority 3's
  // DSCP 24; explicit DSCPs are kept, those of priority 5 counted.
  const std::vector<std::pair<std::uint8_t, std::uint8_t>> cases = {
      {0x00, 24 << 2}, {26 << 2, 26 << 2}, {46 << 2, 46 << 2}, {40 << 2, 40 << 2}};
  std::vector<std::pair<QueuePair*, QueuePair*>> qps;
  for (const auto& [asked, sent] : cases) {
    qps.push_back(rig.connected(asked));
    ASSERT_NE(qps.back().first, nullptr);
  }
  for (const auto& [qa, qb] : qps) {
    ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, rig.bufa, 2048, rig.mra->lkey, rig.bufb, rig.mrb->rkey), 0);
  }
  const auto tos = tos_by_dest_qp(rig.capture_from_a());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("traffic class asked " + std::to_string(cases[i].first));
    const auto it = tos.find(qps[i].second->qp_num());
    ASSERT_NE(it, tos.end());
    for (const std::uint8_t t : it->second) EXPECT_EQ(t, cases[i].second);
  }
  // The QPs keep the class asked (query_qp), whatever went on the wire.
  ibv_qp_attr attr{};
  ASSERT_EQ(qps[0].first->query(attr, IBV_QP_AV), 0);
  EXPECT_EQ(attr.ah_attr.grh.traffic_class, 0);
  // Two QPs outside priority 3 on each device (both ends were given the
  // class), counted; one warning per device for both.
  EXPECT_EQ(stat(rig.pair->a->stats(), StatScope::kEngine, "paths_outside_pfc_priority"), 2u);
  EXPECT_EQ(stat(rig.pair->b->stats(), StatScope::kEngine, "paths_outside_pfc_priority"), 2u);
  const auto outside = warnings.with({"not the PFC priority 3", "DSCP 46", "priority 5"});
  EXPECT_EQ(outside.size(), 2u);
  EXPECT_EQ(warnings.lines().size(), 4u);

  // A UD address handle with traffic class 0 sends in priority 3 too.
  QueuePair* ua = rig.qp(rig.pda, rig.cqa, IBV_QPT_UD);
  QueuePair* ub = rig.qp(rig.pdb, rig.cqb, IBV_QPT_UD);
  ASSERT_EQ(ready_ud(ua, 0x1111, 0x10), 0);
  ASSERT_EQ(ready_ud(ub, 0x1111, 0x20), 0);
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.sgid_index = 1;
  ah.grh.hop_limit = 64;
  ah.grh.dgid = rig.pair->b->gid();
  AddressHandle* to_b = rig.pda->create_ah(ah);
  ASSERT_NE(to_b, nullptr) << rig.pair->a->last_error();
  ibv_sge sge{reinterpret_cast<std::uint64_t>(rig.bufa), 256, rig.mra->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.wr.ud.ah = to_b->ibv();
  wr.wr.ud.remote_qpn = ub->qp_num();
  wr.wr.ud.remote_qkey = 0x1111;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ua->post_send(&wr, &bad), 0);
  const auto ud = tos_by_dest_qp(rig.capture_from_a());
  ASSERT_EQ(ud.count(ub->qp_num()), 1u);
  EXPECT_EQ(ud.at(ub->qp_num()), std::vector<std::uint8_t>{24 << 2});
}

TEST(DpdkPfc, WithDcqcnDataIsEcnCapableInThePfcPriorityAndCnpsKeepTheirOwn) {
  ASSERT_EQ(EalEnvironment::error(), "");
  const cc::DcqcnParams dcqcn;  // CNPs on DSCP 48, priority 6 (ConnectX's)
  {
    WarnCapture warnings;
    Rig rig("pfcecn", 3, &dcqcn);
    ASSERT_NE(rig.pair, nullptr);
    EXPECT_TRUE(warnings.with({"CNPs"}).empty());
    auto [qa, qb] = rig.connected(0);
    ASSERT_NE(qa, nullptr);
    ASSERT_EQ(post_rdma(qa, IBV_WR_RDMA_WRITE, rig.bufa, 2048, rig.mra->lkey, rig.bufb, rig.mrb->rkey), 0);
    std::vector<std::vector<std::uint8_t>> ce = rig.capture_from_a();
    const auto tos = tos_by_dest_qp(ce);
    ASSERT_EQ(tos.count(qb->qp_num()), 1u);
    for (const std::uint8_t t : tos.at(qb->qp_num())) EXPECT_EQ(t, 24 << 2 | dcqcn.data_ecn);

    // b answers CE-marked packets with a CNP: in the CNPs' class, DSCP 48.
    // The same frames, marked CE (ECN 11) as a congested switch marks them.
    for (auto& f : ce) {
      wire::ParsedFrame p;
      ASSERT_EQ(wire::parse_frame(f, p), wire::ParseStatus::kOk);
      set_ce(f, p.l3_offset);
    }
    ASSERT_FALSE(ce.empty());
    // Replayed into b's end: a's port sends to b.
    ASSERT_EQ(rig.pair->port_a->send_copies(0, ce), ce.size());
    std::vector<std::vector<std::uint8_t>> from_b;
    for (int i = 0; i < 20; ++i) {
      rig.pair->b->progress();
      rig.pair->port_a->receive_copies(0, from_b, 64);
    }
    bool cnp = false;
    for (const auto& f : from_b) {
      wire::ParsedFrame p;
      ASSERT_EQ(wire::parse_frame(f, p), wire::ParseStatus::kOk);
      if (p.opcode != 0x81) {
        // b's ACKs travel with the data, in the lossless priority.
        EXPECT_EQ(p.at<wire::Ipv4Hdr>(p.l3_offset).dscp(), 24) << "opcode " << int(p.opcode);
        continue;
      }
      cnp = true;
      EXPECT_EQ(p.at<wire::Ipv4Hdr>(p.l3_offset).dscp(), dcqcn.cnp_dscp);
    }
    EXPECT_TRUE(cnp) << from_b.size() << " frames from b, none a CNP";
  }
  // A PFC priority that is the CNPs' own: one warning when the device opens.
  WarnCapture warnings;
  Rig rig("pfccnp", 6, &dcqcn);
  ASSERT_NE(rig.pair, nullptr);
  EXPECT_EQ(warnings.with({"CNPs", "share the PFC priority 6"}).size(), 2u);  // one per device
}

TEST(DpdkPfc, TheRuleOnTrafficClasses) {
  using internal::sent_traffic_class;
  // No PFC priority: as asked.
  EXPECT_EQ(sent_traffic_class(0x00, -1).traffic_class, 0x00);
  EXPECT_FALSE(sent_traffic_class(0xb8, -1).outside_pfc);
  // DSCP 0 takes priority P's first DSCP, P * 8, keeping the ECN bits.
  EXPECT_EQ(sent_traffic_class(0x00, 3).traffic_class, 0x60);
  EXPECT_EQ(sent_traffic_class(0x02, 3).traffic_class, 0x62);
  EXPECT_EQ(sent_traffic_class(0x00, 7).traffic_class, 0xe0);
  EXPECT_EQ(sent_traffic_class(0x01, 0).traffic_class, 0x01);
  // Explicit DSCPs are kept; outside P's eight (P * 8 .. P * 8 + 7) flagged.
  EXPECT_EQ(sent_traffic_class(0x7c, 3).traffic_class, 0x7c);  // DSCP 31
  EXPECT_FALSE(sent_traffic_class(0x7c, 3).outside_pfc);
  EXPECT_TRUE(sent_traffic_class(0x80, 3).outside_pfc);  // DSCP 32: priority 4
  EXPECT_TRUE(sent_traffic_class(0x04, 3).outside_pfc);  // DSCP 1: priority 0
  EXPECT_FALSE(sent_traffic_class(0x04, 0).outside_pfc);
}

TEST(DpdkPfc, ToolsTakeAPriorityOrOff) {
  EXPECT_EQ(app::parse_pfc_priority("3", "--pfc"), 3);
  EXPECT_EQ(app::parse_pfc_priority("0", "--pfc"), 0);
  EXPECT_EQ(app::parse_pfc_priority("off", "--pfc"), -1);
  for (const char* bad : {"8", "-1", "", "3x", "on"}) {
    try {
      app::parse_pfc_priority(bad, "--pfc");
      ADD_FAILURE() << "'" << bad << "' taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("0 to 7, or off"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // net_ring0 with no arguments loops what it sends back to itself.
  ::testing::AddGlobalTestEnvironment(
      new uroce::test::EalEnvironment({.name = "uroce-test", .memory_mb = "768", .vdevs = {"net_ring0"}}));
  return RUN_ALL_TESTS();
}
