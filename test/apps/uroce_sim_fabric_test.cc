// uroce-sim's fabric scenarios (loss, leafspine), run as a user runs them
// from scenario files: they run to completion with every byte checked, and
// their summary has goodput and flow completion times; what the transport
// refuses ends the run with one line naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/sim_run.h"
#include "support/test_seed.h"

namespace uroce::test {
namespace {

// The fields every fabric run's summary has, and sane: FCTs ordered and
// at least the time `size` bytes take at the link's rate; goodput above
// zero and below what the hosts' links can carry.
void expect_sane(const SimRun& r, double min_fct_us, double max_goodput_bps) {
  EXPECT_EQ(field(r.summary, "data_intact"), 1) << r.summary;
  EXPECT_EQ(field(r.summary, "failed_transfers"), 0) << r.summary;
  EXPECT_GT(field(r.summary, "transfers"), 0) << r.summary;
  EXPECT_GE(field(r.summary, "queue_drops"), 0) << r.summary;
  EXPECT_GE(field(r.summary, "marks"), 0) << r.summary;
  const double p50 = field(r.summary, "fct_p50_us"), p99 = field(r.summary, "fct_p99_us"),
               pmax = field(r.summary, "fct_max_us");
  EXPECT_GE(p50, min_fct_us) << r.summary;
  EXPECT_LE(p50, p99) << r.summary;
  EXPECT_LE(p99, pmax) << r.summary;
  const double goodput = field(r.summary, "goodput_bps");
  EXPECT_GT(goodput, 0) << r.summary;
  EXPECT_LE(goodput, max_goodput_bps) << r.summary;
  EXPECT_EQ(r.csv_header, "t_us,goodput_bps,received_bytes,completed_bytes,transfers,lost,failed_drops");
  EXPECT_GT(r.csv_rows, 0);
}

TEST(UroceSimFabric, LossScenarioDeliversEveryByteThroughLossWithGoBackN) {
  const std::uint64_t seed = test_seed(1);
  SCOPED_TRACE(seed_note(seed));
  const ScenarioFile f(
      "base = loss\nflows = 2\ngbps = 10\nrtt_us = 8\nsize = 262144\nloss = 0.01\ntransport = gbn\n"
      "duration_us = 1500\n");
  const SimRun r = run_sim(f.path() + " --dcqcn off --seed " + std::to_string(seed));
  ASSERT_EQ(r.status, 0) << r.output;
  // 256 KiB at 10 Gb/s: 210 us at least; two flows: 20 Gb/s at most.
  expect_sane(r, 210, 20e9);
  EXPECT_EQ(field(r.summary, "qps"), 2) << r.summary;
  // 1% of ~1000 packets: some lost, each recovered by resending.
  EXPECT_GT(field(r.summary, "lost_packets"), 0) << r.summary;
  EXPECT_GE(field(r.summary, "retransmitted_packets"), field(r.summary, "lost_packets")) << r.summary;
  // The same seed, the same run.
  const SimRun again = run_sim(f.path() + " --dcqcn off --seed " + std::to_string(seed));
  EXPECT_EQ(field(again.summary, "goodput_bps"), field(r.summary, "goodput_bps"));
  EXPECT_EQ(field(again.summary, "lost_packets"), field(r.summary, "lost_packets"));
}

const char* kLeafSpine =
    "base = leafspine\nspines = 2\nleaves = 2\nhosts_per_leaf = 2\nsize = 65536\ntransport = gbn\nspray = 1\n"
    "duration_us = 600\nloss = 0.001\n";

TEST(UroceSimFabric, LeafSpineAllToAllRunsToCompletionOverBothSpines) {
  const std::uint64_t seed = test_seed(1);
  SCOPED_TRACE(seed_note(seed));
  const ScenarioFile f(std::string(kLeafSpine) + "pattern = alltoall\n");
  const SimRun r = run_sim(f.path() + " --dcqcn off --seed " + std::to_string(seed));
  ASSERT_EQ(r.status, 0) << r.output;
  // 64 KiB: 52 us at 10 Gb/s; four hosts: 40 Gb/s at most.
  expect_sane(r, 52, 40e9);
  EXPECT_EQ(field(r.summary, "qps"), 12) << r.summary;
  // Every transfer of every round: 12 per round.
  EXPECT_EQ(static_cast<long>(field(r.summary, "transfers")) % 12, 0) << r.summary;
  // Eight of the twelve flows cross the spines: the spine links carried
  // traffic, and are reported each way.
  EXPECT_GT(field(r.summary, "spine_utilisation_max"), 0) << r.summary;
  EXPECT_LE(field(r.summary, "spine_utilisation_max"), 1) << r.summary;
  EXPECT_NE(r.summary.find("\"spine_links\": [\n    {\"leaf\": 0, \"spine\": 0, \"up_utilisation\": "), std::string::npos)
      << r.summary;
}

// A run repeats for its seed (QP numbers, and so the paths ECMP gives the
// flows, come from it), and another seed may take other paths.
TEST(UroceSimFabric, ALeafSpineRunRepeatsForItsSeed) {
  const std::uint64_t seed = test_seed(1);
  SCOPED_TRACE(seed_note(seed));
  const ScenarioFile f(std::string(kLeafSpine) + "pattern = alltoall\n");
  const SimRun a = run_sim(f.path() + " --dcqcn off --seed " + std::to_string(seed));
  const SimRun b = run_sim(f.path() + " --dcqcn off --seed " + std::to_string(seed));
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  for (const char* key : {"goodput_bps", "fct_p50_us", "fct_p99_us", "fct_max_us", "spine_utilisation_max"}) {
    EXPECT_EQ(field(a.summary, key), field(b.summary, key)) << key << "\n" << a.summary << "\n" << b.summary;
  }
}

TEST(UroceSimFabric, LeafSpineRingAllReduceRunsToCompletion) {
  const std::uint64_t seed = test_seed(1);
  SCOPED_TRACE(seed_note(seed));
  const ScenarioFile f(std::string(kLeafSpine) + "pattern = allreduce\n");
  const SimRun r = run_sim(f.path() + " --dcqcn off --seed " + std::to_string(seed));
  ASSERT_EQ(r.status, 0) << r.output;
  // Chunks of 64 KiB / 4: 13 us at 10 Gb/s.
  expect_sane(r, 13, 40e9);
  EXPECT_EQ(field(r.summary, "qps"), 4) << r.summary;
  // Each iteration: 2 (N - 1) = 6 steps of 4 transfers.
  EXPECT_GE(field(r.summary, "iterations"), 1) << r.summary;
  EXPECT_EQ(field(r.summary, "transfers"), 24 * field(r.summary, "iterations")) << r.summary;
}

// A spine link failing mid-run: the flows hashed onto it (single path,
// go-back-N) give up after retry_cnt; counted, and the run says the data
// did not all arrive.
TEST(UroceSimFabric, AFailedSpineLinkEndsTheFlowsOnItAndIsCounted) {
  const ScenarioFile f(std::string(kLeafSpine) + "pattern = alltoall\nfail_link_us = 100\n");
  const SimRun r = run_sim(f.path() + " --dcqcn off");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_GT(field(r.summary, "failed_link_drops"), 0) << r.summary;
  EXPECT_GT(field(r.summary, "failed_transfers"), 0) << r.summary;
  EXPECT_EQ(field(r.summary, "data_intact"), 0) << r.summary;
}

// The same failure, withdrawn from ECMP after 1 ms (as routing converges):
// the flows that were on it move to the other spine, resend what the link
// swallowed after one retransmit timeout, and every byte arrives.
TEST(UroceSimFabric, AFailedSpineLinkReroutedFinishesWithDataIntact) {
  const ScenarioFile f(std::string(kLeafSpine) + "pattern = alltoall\nfail_link_us = 100\nreroute_us = 1000\n");
  const SimRun r = run_sim(f.path() + " --dcqcn off");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_GT(field(r.summary, "failed_link_drops"), 0) << r.summary;
  expect_sane(r, 52, 40e9);
}

// Selective repeat and spraying: until the transport takes them, refused in
// one line naming the refusal, with no run; once it does, a run as any other.
TEST(UroceSimFabric, SelectiveRepeatAndSprayRunOrAreRefusedInOneLine) {
  for (const std::string extra : {"transport = sr\n", "transport = sr\nspray = 4\n", "spray = 4\n"}) {
    SCOPED_TRACE(extra);
    const ScenarioFile f(std::string(kLeafSpine) + "pattern = alltoall\n" + extra);
    const SimRun r = run_sim(f.path() + " --dcqcn off");
    if (r.status == 0) {
      expect_sane(r, 52, 40e9);
      EXPECT_NE(r.summary.find(extra.find("sr") != std::string::npos ? "\"transport\": \"sr\"" : "\"transport\": \"gbn\""),
                std::string::npos) << r.summary;
      continue;
    }
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("uroce-sim: the transport refuses transport = "), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_TRUE(r.summary.empty()) << "no run";
  }
}

// sweep.csv's header, and a row as its fields.
constexpr const char* kSweepHeader =
    "transport,loss,outcome,goodput_bps,ratio_to_lossless,fct_p50_us,fct_p99_us,fct_max_us,transfers,"
    "retransmitted_packets,lost_packets,queue_drops,data_intact,seed,dir";

std::vector<std::string> fields(const std::string& row) {
  std::vector<std::string> out;
  std::string::size_type from = 0;
  for (;;) {
    const auto comma = row.find(',', from);
    out.push_back(row.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

enum Col { kTransport, kLoss, kOutcome, kGoodput, kRatio, kP50, kP99, kMax, kTransfers, kResent, kLost, kDrops, kIntact, kSeed, kDir };

// Lists are parsed item by item; a bad item, an empty one, one given twice
// or a list where none is taken is a usage error naming it, and nothing runs.
TEST(UroceSimFabric, BadListsAreUsageErrors) {
  const std::string loss = "base = loss\nflows = 1\nduration_us = 200\n";
  struct Case {
    std::string text, says;
  };
  for (const Case& c : {
           Case{loss + "loss = 0.001,,0.01\n", "loss: an empty item in '0.001,,0.01'"},
           Case{loss + "loss = 0.001, x\n", "loss takes a probability from 0 to below 1 (or a list of them), not 'x'"},
           Case{loss + "loss = 0.01, 1\n", "not '1'"},
           Case{loss + "loss = 0.01, 1e-2\n", "loss lists 1e-2 twice"},
           Case{loss + "loss = 0,\n", "loss: an empty item"},
           Case{loss + "transport = gbn, tcp\n", "transport takes gbn or sr (or a list of them), not 'tcp'"},
           Case{loss + "transport = sr,sr\n", "transport lists 'sr' twice"},
           Case{loss + "flows = 1,2\n", "flows takes a non-negative number, not '1,2'"},
           // loss is the fabric's: the switch scenarios have no lossy hop.
           Case{"base = incast\nloss = 0, 0.01\n", "loss is for base = loss or leafspine"},
       }) {
    SCOPED_TRACE(c.text);
    const ScenarioFile f(c.text);
    const SimRun r = run_sim(f.path());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    EXPECT_TRUE(r.summary.empty() && r.sweep_csv.empty() && r.point_summary.empty()) << "nothing ran";
  }
}

// A go-back-N sweep over two loss rates: one run each, in the order given,
// each with every byte compared, into a directory of its own; the table in
// sweep.csv and sweep.json says the same as each run's summary.json, with
// the seed; and each point is the run its file with that one value gives.
TEST(UroceSimFabric, AGoBackNSweepAtTwoLossRatesRunsEachVerifiedAndWritesTheTable) {
  const std::uint64_t seed = test_seed(1);
  SCOPED_TRACE(seed_note(seed));
  const std::string base =
      "base = loss\nflows = 1\ngbps = 10\nrtt_us = 8\nsize = 65536\ntransport = gbn\ndcqcn = off\nduration_us = 1000\n";
  const ScenarioFile f(base + "loss = 0, 0.01\n");
  const SimRun r = run_sim(f.path() + " --seed " + std::to_string(seed));
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(r.sweep_csv.size(), 3u) << r.output;
  EXPECT_EQ(r.sweep_csv[0], kSweepHeader);
  const std::vector<std::string> lossless = fields(r.sweep_csv[1]), lossy = fields(r.sweep_csv[2]);
  ASSERT_EQ(lossless.size(), 15u) << r.sweep_csv[1];
  ASSERT_EQ(lossy.size(), 15u) << r.sweep_csv[2];
  EXPECT_EQ(lossless[kTransport], "gbn");
  EXPECT_EQ(lossless[kLoss], "0");
  EXPECT_EQ(lossy[kLoss], "0.01");
  for (const auto& row : {lossless, lossy}) {
    EXPECT_EQ(row[kOutcome], "ok");
    EXPECT_EQ(row[kIntact], "true");
    EXPECT_EQ(row[kSeed], std::to_string(seed));
    EXPECT_GT(std::stod(row[kGoodput]), 0);
    EXPECT_LE(std::stod(row[kGoodput]), 10e9);
    EXPECT_LE(std::stod(row[kP50]), std::stod(row[kP99]));
    EXPECT_LE(std::stod(row[kP99]), std::stod(row[kMax]));
    // Each run's own files, under the name the row gives.
    ASSERT_EQ(r.point_summary.count(row[kDir]), 1u) << row[kDir];
    const std::string& summary = r.point_summary.at(row[kDir]);
    EXPECT_EQ(field(summary, "data_intact"), 1) << summary;
    EXPECT_EQ(field(summary, "goodput_bps"), std::stod(row[kGoodput])) << summary;
    EXPECT_EQ(field(summary, "loss"), std::stod(row[kLoss])) << summary;
    EXPECT_EQ(field(summary, "retransmitted_packets"), std::stod(row[kResent])) << summary;
  }
  EXPECT_EQ(lossless[kDir], "gbn-loss0");
  EXPECT_EQ(lossy[kDir], "gbn-loss0.01");
  EXPECT_EQ(r.point_summary.size(), 2u);
  // Lossless: nothing lost or resent, and the ratio's denominator.
  EXPECT_EQ(lossless[kLost], "0");
  EXPECT_EQ(lossless[kResent], "0");
  EXPECT_EQ(lossless[kRatio], "1");
  // 1% of ~150 packets a way: lost, and each one resent.
  EXPECT_GT(std::stod(lossy[kLost]), 0);
  EXPECT_GE(std::stod(lossy[kResent]), std::stod(lossy[kLost]));
  // (Six significant digits in the CSV.)
  EXPECT_NEAR(std::stod(lossy[kRatio]), std::stod(lossy[kGoodput]) / std::stod(lossless[kGoodput]), 1e-5);
  EXPECT_NE(r.sweep_json.find("\"seed\": " + std::to_string(seed) + ",\n  \"dcqcn\": false,\n  \"complete\": true"),
            std::string::npos)
      << r.sweep_json;
  EXPECT_NE(r.sweep_json.find("{\"transport\": \"gbn\", \"loss\": 0.01, \"outcome\": \"ok\", \"goodput_bps\": " + lossy[kGoodput]),
            std::string::npos)
      << r.sweep_json;
  // The printed table has both rows.
  EXPECT_NE(r.output.find("uroce-sim sweep loss: 2 runs, seed " + std::to_string(seed) + ", DCQCN off"), std::string::npos)
      << r.output;

  // A file with the one value: the same run as the sweep's point, and no
  // sweep files.
  const ScenarioFile one(base + "loss = 0.01\n");
  const SimRun single = run_sim(one.path() + " --seed " + std::to_string(seed));
  ASSERT_EQ(single.status, 0) << single.output;
  EXPECT_TRUE(single.sweep_csv.empty() && single.sweep_json.empty() && single.point_summary.empty());
  EXPECT_EQ(field(single.summary, "goodput_bps"), std::stod(lossy[kGoodput])) << single.summary;
  EXPECT_EQ(field(single.summary, "lost_packets"), std::stod(lossy[kLost])) << single.summary;
  EXPECT_EQ(field(single.summary, "dcqcn"), 0) << "the file's dcqcn = off: " << single.summary;
  // --dcqcn over the file's.
  const SimRun on = run_sim(one.path() + " --dcqcn on --seed " + std::to_string(seed));
  ASSERT_EQ(on.status, 0) << on.output;
  EXPECT_EQ(field(on.summary, "dcqcn"), 1) << on.summary;
}

// gbn and sr in one sweep: while the transport refuses sr, its rows say so
// (no run, no directory), go-back-N's still run, and the exit status says
// the sweep is incomplete; once it takes sr, every row runs verified.
TEST(UroceSimFabric, ASweepRunsWhatTheTransportTakesAndSaysWhatItRefuses) {
  const ScenarioFile f(
      "base = loss\nflows = 1\ngbps = 10\nrtt_us = 8\nsize = 65536\ntransport = gbn, sr\nloss = 0, 0.001\n"
      "dcqcn = off\nduration_us = 500\n");
  const SimRun r = run_sim(f.path());
  ASSERT_EQ(r.sweep_csv.size(), 5u) << r.output;
  bool refused = false;
  for (std::size_t i = 1; i < r.sweep_csv.size(); ++i) {
    const std::vector<std::string> row = fields(r.sweep_csv[i]);
    SCOPED_TRACE(r.sweep_csv[i]);
    ASSERT_EQ(row.size(), 15u);
    EXPECT_EQ(row[kTransport], i <= 2 ? "gbn" : "sr");
    EXPECT_EQ(row[kLoss], i % 2 == 1 ? "0" : "0.001");
    if (row[kTransport] == "sr" && row[kOutcome] == "refused") {
      refused = true;
      EXPECT_EQ(row[kIntact], "false");
      EXPECT_EQ(row[kDir], "");
      EXPECT_EQ(row[kGoodput], "");
      continue;
    }
    EXPECT_EQ(row[kOutcome], "ok");
    EXPECT_EQ(row[kIntact], "true");
    EXPECT_EQ(r.point_summary.count(row[kDir]), 1u);
  }
  if (refused) {
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("refused: the transport refuses transport = sr, spray = 1, bdp = 0: "), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("uroce-sim: the sweep is incomplete"), std::string::npos) << r.output;
    EXPECT_NE(r.sweep_json.find("\"complete\": false"), std::string::npos) << r.sweep_json;
    EXPECT_EQ(r.point_summary.size(), 2u) << "go-back-N's two runs";
  } else {
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.sweep_json.find("\"complete\": true"), std::string::npos) << r.sweep_json;
    EXPECT_EQ(r.point_summary.size(), 4u);
  }
}

TEST(UroceSimFabric, BadKeysAreUsageErrors) {
  for (const std::string bad : {"transport = tcp\n", "pattern = ring\n", "spray = 0\n", "loss = 1\n", "spines = 1.5\n"}) {
    const ScenarioFile f(std::string(kLeafSpine) + bad);
    const SimRun r = run_sim(f.path());
    EXPECT_EQ(r.status, 2) << bad << r.output;
  }
  // More hosts than the fabric's addresses hold (2 x 200 on one leaf).
  const ScenarioFile many("base = loss\nflows = 200\n");
  const SimRun r = run_sim(many.path());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("1 to 254 hosts per leaf"), std::string::npos) << r.output;
  // The fabric's keys are not the switch scenarios'.
  const ScenarioFile f("base = fairness\nspines = 2\n");
  EXPECT_EQ(run_sim(f.path()).status, 2);
}

}  // namespace
}  // namespace uroce::test
