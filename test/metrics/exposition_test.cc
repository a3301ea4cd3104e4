// The exposition text (lib/metrics/exposition.cc) of snapshots made by hand
// and of a real device on the simulated link: the format's rules, names and
// units in Prometheus's conventions, escapes, a stable order, and promtool's
// verdict.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "cc/dcqcn.h"
#include "device/sim_pair.h"
#include "support/rc_fixture.h"
#include "support/test_seed.h"
#include "metrics/metrics_helpers.h"

namespace uroce::test {
namespace {

using metrics::DeviceSnapshot;
using metrics::Exposition;
using metrics::Extra;
using metrics::Label;
using metrics::Snapshot;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

std::vector<Stat> device_rows(std::uint64_t frames) {
  return {
      {StatScope::kEngine, "rx_frames", "frames received from the port", frames, StatKind::kCounter},
      {StatScope::kEngine, "busy_ns", "time in polls that moved frames, ns", 1'500'000'000, StatKind::kCounter},
      {StatScope::kEngine, "busy_polls", "polls that moved frames", 42, StatKind::kCounter},
      {StatScope::kPort, "link_rx_packets", "packets the NIC received", frames + 7, StatKind::kCounter},
      {StatScope::kPort, "link_rx_missed", "packets the NIC dropped: no room in the receive ring", 3,
       StatKind::kCounter},
  };
}

ibv_gid v4_gid(std::uint8_t last) {
  ibv_gid g{};
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  g.raw[12] = 10;
  g.raw[15] = last;
  return g;
}

// Port "0" with QPs 9, 10 and 100 (100 with DCQCN on), and port "1" with QP 5.
Snapshot sample_snapshot(std::uint64_t round) {
  Snapshot s;
  DeviceSnapshot d0;
  d0.port = "0";
  d0.device = device_rows(1000 * round);
  for (const std::uint32_t qpn : {9u, 10u, 100u}) {
    QpStats q = make_qp(qpn);
    q.dest_gid = v4_gid(2);
    q.engine = qpn % 2;
    q.send_outstanding = 3;
    q.recv_outstanding = 16;
    add_traffic(q, qpn * 1000 * round);
    row(q, "cc_cwnd").value = 4500;
    row(q, "cc_rtt_us").value = 250;
    if (qpn == 100) {
      q.congestion.enabled = true;
      q.congestion.rate_bps = 25e9;
      q.congestion.target_bps = 40e9;
      q.congestion.alpha = 0.125;
      q.congestion.cnps = round;
    }
    d0.qps.push_back(q);
  }
  DeviceSnapshot d1;
  d1.port = "1";
  d1.device = device_rows(10 * round);
  QpStats ud = make_qp(5);
  ud.qp_type = IBV_QPT_UD;
  ud.dest_qp_num = 0;
  add_traffic(ud, 64 * round);
  d1.qps.push_back(ud);
  s.devices = {d0, d1};
  s.extra.push_back({"prog_clients", "clients attached", StatKind::kGauge, {{"kind", "verbs"}}, 2});
  s.extra.push_back({"prog_clients", "clients attached", StatKind::kGauge, {{"kind", "rdma_cm"}}, 1});
  s.extra.push_back({"prog_attaches", "clients that attached", StatKind::kCounter, {}, 12});
  return s;
}

// A baseline, then a second collection in which everything moved.
std::string two_rounds(Exposition& e, const Snapshot& first, const Snapshot& second) {
  const auto t0 = Clock::now();
  e.render(first, t0);
  return e.render(second, t0 + seconds(15));
}

std::string page_problems(const Page& p) {
  std::string all;
  for (const auto& s : p.problems) all += s + "\n";
  return all;
}

TEST(Exposition, FamiliesHaveHelpAndTypeOnceBeforeTheirSamples) {
  Exposition e;
  const std::string text = two_rounds(e, sample_snapshot(1), sample_snapshot(2));
  const Page p = parse_page(text);
  ASSERT_TRUE(p.problems.empty()) << page_problems(p) << text;
  for (const auto& [name, f] : p.families) {
    EXPECT_FALSE(f.help.empty()) << name;
    EXPECT_FALSE(f.samples.empty()) << name << ": a family without samples";
    const bool total = name.size() > 6 && name.substr(name.size() - 6) == "_total";
    EXPECT_EQ(total, f.type == "counter") << name << " is a " << f.type;
  }
  for (const char* name :
       {"uroce_engine_rx_frames_total", "uroce_engine_busy_polls_total", "uroce_port_link_rx_packets_total",
        "uroce_port_qps", "uroce_port_qp_tx_bytes_total", "uroce_port_qp_retransmitted_packets_total",
        "uroce_port_qp_send_wqes_outstanding", "uroce_qp_info", "uroce_qp_state", "uroce_qp_tx_bytes_total",
        "uroce_qp_retransmitted_packets_total", "uroce_qp_cc_cwnd", "uroce_qp_send_wqes_outstanding",
        "uroce_qp_cc_rate_bytes_per_second", "uroce_qp_cc_target_rate_bytes_per_second", "uroce_qp_dcqcn_alpha",
        "uroce_qp_dcqcn_rate_cuts_total", "uroce_metrics_qps_hidden", "prog_clients", "prog_attaches_total"}) {
    EXPECT_NE(p.family(name), nullptr) << name << " missing from\n" << text;
  }
  EXPECT_EQ(p.family("uroce_qp_tx_bytes_total")->help, "payload bytes sent");
  EXPECT_EQ(p.family("uroce_qp_cc_cwnd")->type, "gauge");
  EXPECT_EQ(p.family("uroce_engine_rx_frames_total")->type, "counter");

  // The counts, where they belong.
  EXPECT_EQ(p.value("uroce_engine_rx_frames_total", {{"port", "0"}}), 2000);
  EXPECT_EQ(p.value("uroce_port_link_rx_packets_total", {{"port", "1"}}), 27);
  EXPECT_EQ(p.value("uroce_qp_tx_bytes_total", {{"port", "0"}, {"qpn", "10"}}), 20000);
  EXPECT_EQ(p.value("uroce_port_qp_tx_bytes_total", {{"port", "0"}}), (9 + 10 + 100) * 2000);
  EXPECT_EQ(p.value("uroce_port_qps", {{"port", "0"}, {"state", "RTS"}}), 3);
  EXPECT_EQ(p.value("uroce_port_qps", {{"port", "0"}, {"state", "ERR"}}), 0);
  EXPECT_EQ(p.find("uroce_port_qps", {{"port", "1"}}).size(), 7u) << "every state, zero or not";
  EXPECT_EQ(p.value("uroce_port_qp_send_wqes_outstanding", {{"port", "0"}}), 9);
  EXPECT_EQ(p.value("uroce_port_qp_cc_cwnd", {{"port", "0"}}), 3 * 4500);
  EXPECT_EQ(p.value("uroce_qp_state", {{"port", "0"}, {"qpn", "9"}}), 3);
  EXPECT_EQ(p.value("uroce_qp_cc_rate_bytes_per_second", {{"qpn", "100"}}), 25e9 / 8) << "bytes, not bits";
  EXPECT_EQ(p.value("uroce_qp_dcqcn_alpha", {{"qpn", "100"}}), 0.125);
  EXPECT_EQ(p.find("uroce_qp_dcqcn_alpha").size(), 1u) << "congestion gauges only where it is on";
  EXPECT_EQ(p.value("prog_clients", {{"kind", "verbs"}}), 2);
  EXPECT_EQ(p.value("prog_attaches_total"), 12);

  const auto info = p.find("uroce_qp_info", {{"port", "0"}, {"qpn", "10"}});
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0]->value, "1");
  EXPECT_EQ(info[0]->label("type"), "rc");
  EXPECT_EQ(info[0]->label("state"), "RTS");
  EXPECT_EQ(info[0]->label("engine"), "0");
  EXPECT_EQ(info[0]->label("peer_gid"), "::ffff:10.0.0.2");
  EXPECT_EQ(info[0]->label("peer_qpn"), "1010");
  const auto ud = p.find("uroce_qp_info", {{"port", "1"}, {"qpn", "5"}});
  ASSERT_EQ(ud.size(), 1u);
  EXPECT_EQ(ud[0]->label("type"), "ud");
  EXPECT_EQ(ud[0]->label("peer_gid"), "");
}

TEST(Exposition, TimeRowsAreInSeconds) {
  Exposition e;
  const std::string text = two_rounds(e, sample_snapshot(1), sample_snapshot(2));
  const Page p = parse_page(text);
  ASSERT_TRUE(p.problems.empty()) << page_problems(p);
  EXPECT_EQ(p.value("uroce_engine_busy_seconds_total", {{"port", "0"}}), 1.5);
  EXPECT_EQ(p.family("uroce_engine_busy_seconds_total")->type, "counter");
  EXPECT_EQ(p.value("uroce_qp_cc_rtt_seconds", {{"port", "0"}, {"qpn", "9"}}), 0.00025);
  EXPECT_EQ(p.family("uroce_qp_cc_rtt_seconds")->type, "gauge");
  EXPECT_NE(p.family("uroce_qp_cc_rtt_seconds")->help.find("in seconds"), std::string::npos);
  // A sum of round trips now is no quantity: not summed per port.
  EXPECT_EQ(p.family("uroce_port_qp_cc_rtt_seconds"), nullptr);
  for (const auto& name : p.order) {
    for (const char* unit : {"_ns", "_us", "_ms"}) {
      EXPECT_EQ((name + "_").find(std::string(unit) + "_"), std::string::npos) << name;
    }
  }
}

TEST(Exposition, EscapesLabelValuesAndHelp) {
  Snapshot s = sample_snapshot(1);
  const std::string nasty = "a\"b\\c\nd";
  s.devices[0].qp_labels[10] = {{"comm", nasty}, {"bad-name", "x"}, {"port", "7"}, {"__secret", "y"}};
  s.extra.push_back({"prog_note", "one\ntwo \\ three", StatKind::kGauge, {{"path", "C:\\tmp\n\"x\""}}, 1});
  Snapshot s2 = s;
  for (auto& q : s2.devices[0].qps) add_traffic(q, 100);
  Exposition e;
  const std::string text = two_rounds(e, s, s2);
  EXPECT_NE(text.find(R"(comm="a\"b\\c\nd")"), std::string::npos) << text;
  EXPECT_NE(text.find("# HELP prog_note one\\ntwo \\\\ three\n"), std::string::npos) << text;
  const Page p = parse_page(text);
  ASSERT_TRUE(p.problems.empty()) << page_problems(p);
  const auto info = p.find("uroce_qp_info", {{"qpn", "10"}});
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0]->label("comm"), nasty);
  EXPECT_EQ(info[0]->label("bad_name"), "x");
  EXPECT_EQ(info[0]->label("port"), "0") << "the program's label does not replace the exporter's";
  EXPECT_EQ(info[0]->label("__secret"), "<none>") << "__ names are Prometheus's";
  EXPECT_EQ(std::count_if(info[0]->labels.begin(), info[0]->labels.end(), [](const Label& l) { return l.name == "port"; }),
            1);
  // The program's labels are on every series of the QP, not only on info.
  EXPECT_EQ(p.find("uroce_qp_tx_bytes_total", {{"qpn", "10"}, {"comm", nasty}}).size(), 1u);
  EXPECT_EQ(p.family("prog_note")->help, "one\ntwo \\ three");
  EXPECT_EQ(p.find("prog_note")[0]->label("path"), "C:\\tmp\n\"x\"");
  EXPECT_EQ(promtool_findings(text), "");
}

TEST(Exposition, OutputIsSortedAndStable) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  Exposition a;
  Exposition b;
  const auto t0 = Clock::now();
  std::string ta;
  std::string tb;
  for (std::uint64_t round = 1; round <= 3; ++round) {
    const Snapshot s = sample_snapshot(round);
    Snapshot shuffled = s;
    std::reverse(shuffled.devices.begin(), shuffled.devices.end());
    for (auto& d : shuffled.devices) std::shuffle(d.qps.begin(), d.qps.end(), rng);
    std::shuffle(shuffled.extra.begin(), shuffled.extra.end(), rng);
    ta = a.render(s, t0 + seconds(round));
    tb = b.render(shuffled, t0 + seconds(round));
    EXPECT_EQ(ta, tb) << "round " << round << ", " << seed_note(seed);
  }
  const Page p = parse_page(ta);
  ASSERT_TRUE(p.problems.empty()) << page_problems(p);
  EXPECT_TRUE(std::is_sorted(p.order.begin(), p.order.end()));
  std::vector<std::string> qpns;
  for (const auto* s : p.find("uroce_qp_info", {{"port", "0"}})) qpns.push_back(s->label("qpn"));
  EXPECT_EQ(qpns, (std::vector<std::string>{"9", "10", "100"})) << "numbers in numeric order";
  std::vector<std::string> ports;
  for (const auto* s : p.find("uroce_engine_rx_frames_total")) ports.push_back(s->label("port"));
  EXPECT_EQ(ports, (std::vector<std::string>{"0", "1"}));
}

TEST(Exposition, ExtrasJoinTheirFamilyAndKeepTheirType) {
  Snapshot s;
  s.extra.push_back({"prog_jobs", "jobs run", StatKind::kCounter, {{"queue", "b"}}, 4});
  s.extra.push_back({"prog_jobs_total", "jobs run", StatKind::kCounter, {{"queue", "a"}}, 3});
  s.extra.push_back({"prog_jobs_total", "a gauge of the same name", StatKind::kGauge, {{"queue", "c"}}, 9});
  s.extra.push_back({"prog-load", "load", StatKind::kGauge, {}, 0.5});
  Exposition e;
  const Page p = parse_page(e.render(s, Clock::now()));
  ASSERT_TRUE(p.problems.empty()) << page_problems(p);
  ASSERT_NE(p.family("prog_jobs_total"), nullptr);
  EXPECT_EQ(p.family("prog_jobs_total")->type, "counter");
  EXPECT_EQ(p.find("prog_jobs_total").size(), 2u) << "the gauge of a counter's name is dropped";
  EXPECT_EQ(p.find("prog_jobs_total")[0]->label("queue"), "a");
  EXPECT_EQ(p.value("prog_load"), 0.5);
}

TEST(Exposition, PassesPromtool) {
  Snapshot s = sample_snapshot(1);
  s.devices[0].qp_labels[9] = {{"pid", "4242"}, {"comm", "ib_write_bw"}};
  Snapshot s2 = sample_snapshot(2);
  s2.devices[0].qp_labels = s.devices[0].qp_labels;
  Exposition e;
  const std::string text = two_rounds(e, s, s2);
  EXPECT_EQ(promtool_findings(text), "") << text;
  // promtool must be able to fail here: a counter without _total.
  EXPECT_NE(promtool_findings("# HELP x_ms x\n# TYPE x_ms counter\nx_ms 1\n"), "");
}

// The registry's real rows, from a device on the simulated link: an RC pair
// with DCQCN that moved data, read through Context::stats() and qp_stats_page().
Snapshot snapshot_of(Context& ctx) {
  Snapshot s;
  DeviceSnapshot d;
  d.port = "0";
  collect(ctx, d, 2);
  s.devices.push_back(std::move(d));
  return s;
}

// collect() reads every QP once, in ascending order, whatever the page.
TEST(Collect, EveryQpOncePageByPage) {
  RcPair rc(test_seed(), 1 << 16);
  ASSERT_EQ(rc.connect_rc, 0);
  QpInitAttr init;
  init.cap.max_send_wr = init.cap.max_recv_wr = 2;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  init.send_cq = init.recv_cq = rc.cqa;
  std::vector<QueuePair*> made;
  for (int i = 0; i < 30; ++i) {
    made.push_back(rc.pda->create_qp(init));
    ASSERT_NE(made.back(), nullptr);
  }
  auto numbers = [&] {
    std::vector<std::uint32_t> n = rc.net.a->qp_nums();
    std::sort(n.begin(), n.end());
    return n;
  };
  // One snapshot written over again and again, as the exporter does.
  DeviceSnapshot d;
  d.port = "7";
  for (std::size_t per_call : {1u, 4u, 31u, 256u, 3u}) {
    collect(*rc.net.a, d, per_call);
    std::vector<std::uint32_t> got;
    for (const QpStats& q : d.qps) {
      got.push_back(q.qp_num);
      EXPECT_EQ(q.counters.size(), qp_stat_rows().size()) << "each QP's rows once";
    }
    EXPECT_EQ(got, numbers()) << per_call << " a call";
    EXPECT_EQ(d.port, "7");
    EXPECT_NE(find_stat(d.device, StatScope::kEngine, "tx_frames"), nullptr);
    // Fewer QPs the next time: none of the last collection's left over.
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(rc.pda->destroy_qp(made.back()), 0);
      made.pop_back();
    }
  }
}

TEST(Exposition, RealRowsOfTheSimulatedLinkPassPromtool) {
  cc::DcqcnParams dcqcn;
  RcPair rc(test_seed(), 1 << 20, {}, {}, {}, 1024, &dcqcn);
  ASSERT_EQ(rc.connect_rc, 0);
  Exposition e;
  const auto t0 = Clock::now();
  e.render(snapshot_of(*rc.net.a), t0);
  for (std::uint64_t k = 0; k < 8; ++k) {
    ASSERT_EQ(rc.post_send(IBV_WR_RDMA_WRITE, k * 65536, 65536, k * 65536, k), 0);
  }
  ASSERT_EQ(rc.wait(rc.cqa, 8).size(), 8u);
  const std::string text = e.render(snapshot_of(*rc.net.a), t0 + seconds(1));
  EXPECT_EQ(promtool_findings(text), "") << text;
  const Page p = parse_page(text);
  ASSERT_TRUE(p.problems.empty()) << page_problems(p);
  const std::string qpn = std::to_string(rc.qa->qp_num());
  EXPECT_EQ(p.value("uroce_qp_tx_bytes_total", {{"qpn", qpn}}), 8 * 65536) << text;
  EXPECT_EQ(p.value("uroce_port_qp_tx_bytes_total", {{"port", "0"}}), 8 * 65536);
  const auto info = p.find("uroce_qp_info", {{"qpn", qpn}});
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0]->label("type"), "rc");
  EXPECT_EQ(info[0]->label("state"), "RTS");
  EXPECT_EQ(info[0]->label("peer_qpn"), std::to_string(rc.qb->qp_num()));
  EXPECT_GT(p.value("uroce_engine_tx_frames_total", {{"port", "0"}}), 0);
  EXPECT_EQ(p.find("uroce_qp_cc_rate_bytes_per_second", {{"qpn", qpn}}).size(), 1u);
}

}  // namespace
}  // namespace uroce::test
