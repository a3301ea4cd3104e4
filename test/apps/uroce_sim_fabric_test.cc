// uroce-sim's fabric scenarios (loss, leafspine), run as a user runs them
// from scenario files: they run to completion with every byte checked, and
// their summary has goodput and flow completion times; what the transport
// refuses ends the run with one line naming it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/sim_run.h"
#include "support/test_seed.h"

namespace uroce::test {
namespace {

// A scenario file with `text`; removed with the object.
class ScenarioFile {
 public:
  explicit ScenarioFile(const std::string& text) {
    static int n = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("uroce-sim-fabric-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".conf");
    std::ofstream(path_) << text;
  }
  ~ScenarioFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

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
