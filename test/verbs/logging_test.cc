// The "uroce" log (include/uroce/log.h): QP state changes and failed control
// calls at debug, nothing at the default level, level names, and
// UROCE_LOG_LEVEL read at first use.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "device/sim_pair.h"
#include "support/rc_fixture.h"
#include "uroce/log.h"
#include "verbs/verbs_impl.h"

namespace uroce::test {
namespace {

struct Line {
  LogLevel level;
  std::string text;
};

// Takes every line the log emits while it lives; then stderr and warn again.
class Capture {
 public:
  Capture() {
    set_log_sink([this](LogLevel level, std::string_view text) {
      std::lock_guard<std::mutex> lock(mutex_);
      lines_.push_back({level, std::string(text)});
    });
  }
  ~Capture() {
    set_log_sink({});
    set_log_level(LogLevel::kWarn);
  }
  std::vector<Line> lines() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }
  // Index of the first line equal to `text` at `level` from `from` on; -1 if none.
  int find(const std::string& text, LogLevel level, int from = 0) const {
    const auto all = lines();
    for (int i = from; i < static_cast<int>(all.size()); ++i) {
      if (all[static_cast<std::size_t>(i)].text == text && all[static_cast<std::size_t>(i)].level == level) return i;
    }
    return -1;
  }
  std::string dump() const {
    std::string out;
    for (const auto& l : lines()) out += std::string(log_level_name(l.level)) + ": " + l.text + "\n";
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Line> lines_;
};

std::string hex(std::uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%x", v);
  return b;
}

QpInitAttr small_qp(CompletionQueue* cq) {
  QpInitAttr init;
  init.cap.max_send_wr = init.cap.max_recv_wr = 16;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  init.send_cq = init.recv_cq = cq;
  return init;
}

TEST(Logging, StateChangesAtDebugNameTheQpn) {
  Capture capture;
  ASSERT_TRUE(set_log_level("debug"));
  device::SimPair net(1);
  ProtectionDomain* pda = net.a->alloc_pd();
  ProtectionDomain* pdb = net.b->alloc_pd();
  QueuePair* qa = uroce::testing::create_qp_with_qpn(pda, small_qp(net.a->create_cq(64)), 0x1234);
  QueuePair* qb = pdb->create_qp(small_qp(net.b->create_cq(64)));
  ASSERT_NE(qa, nullptr) << net.a->last_error();
  ASSERT_NE(qb, nullptr) << net.b->last_error();
  ASSERT_EQ(net.connect(qa, qb), 0) << net.a->last_error() << net.b->last_error();

  for (QueuePair* qp : {qa, qb}) {
    const std::string q = "qp " + hex(qp->qp_num()) + ": ";
    const int init = capture.find(q + "RESET -> INIT", LogLevel::kDebug);
    const int rtr = capture.find(q + "INIT -> RTR", LogLevel::kDebug, init + 1);
    const int rts = capture.find(q + "RTR -> RTS", LogLevel::kDebug, rtr + 1);
    EXPECT_GE(init, 0) << capture.dump();
    EXPECT_GT(rtr, init) << capture.dump();
    EXPECT_GT(rts, rtr) << capture.dump();
  }
  EXPECT_GE(capture.find("qp 0x1234: connecting to remote qp " + hex(qb->qp_num()) +
                             ", send PSN 0x100, receive PSN 0x200, path MTU 1024",
                         LogLevel::kDebug),
            0)
      << capture.dump();

  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(qa->modify(err, IBV_QP_STATE), 0) << net.a->last_error();
  EXPECT_GE(capture.find("qp 0x1234: RTS -> ERR", LogLevel::kDebug), 0) << capture.dump();
}

TEST(Logging, TheDefaultLevelLogsNothingForTheSame) {
  Capture capture;
  set_log_level(LogLevel::kWarn);  // the default (LoggingEnv checks that it is)
  RcPair p(1, 1 << 16);
  ASSERT_EQ(p.connect_rc, 0) << p.net.a->last_error() << p.net.b->last_error();
  ASSERT_EQ(p.post_recv_b(0, 4096), 0);
  ASSERT_EQ(p.post_send(IBV_WR_SEND, 0, 4096, 0), 0);
  EXPECT_EQ(p.wait(p.cqb, 1).size(), 1u);
  ibv_qp_attr bad{};
  bad.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(p.qa->modify(bad, IBV_QP_STATE | IBV_QP_DEST_QPN), EINVAL);  // a failed control call, still quiet
  EXPECT_TRUE(capture.lines().empty()) << capture.dump();
}

TEST(Logging, UnknownLevelNamesAreRefused) {
  Capture capture;
  set_log_level(LogLevel::kInfo);
  for (const char* name : {"verbose", "", "warning", "critical", "debug ", "2"}) {
    EXPECT_FALSE(set_log_level(name)) << "'" << name << "'";
    EXPECT_EQ(log_level(), LogLevel::kInfo) << "a refused name leaves the level as it was: '" << name << "'";
  }
  for (LogLevel l : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError,
                     LogLevel::kOff}) {
    ASSERT_TRUE(set_log_level(log_level_name(l))) << log_level_name(l);
    EXPECT_EQ(log_level(), l) << log_level_name(l);
  }
  EXPECT_TRUE(set_log_level("DEBUG"));
  EXPECT_EQ(log_level(), LogLevel::kDebug);
  EXPECT_TRUE(capture.lines().empty()) << capture.dump();
}

TEST(Logging, AFailedControlCallLogsItsReasonAtDebug) {
  Capture capture;
  ASSERT_TRUE(set_log_level("debug"));
  device::SimPair net(1);
  ProtectionDomain* pd = net.a->alloc_pd();
  QueuePair* qp = pd->create_qp(small_qp(net.a->create_cq(64)));
  ASSERT_NE(qp, nullptr);
  const std::size_t before = capture.lines().size();

  // RESET -> INIT needs PKEY_INDEX, PORT and ACCESS_FLAGS too (IBTA table 91).
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(qp->modify(a, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(qp->state(), IBV_QPS_RESET);
  const std::string why = net.a->last_error();
  ASSERT_NE(why.find("RESET->INIT"), std::string::npos) << why;
  const auto lines = capture.lines();
  ASSERT_EQ(lines.size(), before + 1) << capture.dump();
  EXPECT_EQ(lines.back().level, LogLevel::kDebug);
  EXPECT_EQ(lines.back().text, why + " (" + std::strerror(EINVAL) + ")");

  // post_send is the data path: its errors set last_error and log nothing.
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_NE(qp->post_send(&wr, &bad), 0);
  EXPECT_NE(net.a->last_error(), why);
  EXPECT_EQ(capture.lines().size(), before + 1) << capture.dump();
}

// UROCE_LOG_LEVEL, read when the logger is first used: run this test again
// in a child process whose environment sets it (before anything has logged).
TEST(LoggingEnv, TheLevelComesFromTheEnvironmentAtFirstUse) {
  if (std::getenv("UROCE_LOGGING_CHILD") != nullptr) {
    std::printf("level=%s\n", log_level_name(log_level()));
    return;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto run = [&](const std::string& env) {
    const std::string cmd = "env -u GTEST_OUTPUT -u UROCE_LOG_LEVEL UROCE_LOGGING_CHILD=1 " + env + " '" + self +
                            "' --gtest_filter=LoggingEnv.TheLevelComesFromTheEnvironmentAtFirstUse 2>&1";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) return out;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    const int status = pclose(p);
    EXPECT_EQ(status, 0) << cmd << "\n" << out;
    return out;
  };
  const std::string warning = "UROCE_LOG_LEVEL=loud is not a log level; use trace, debug, info, warn, error or off";

  const std::string unset = run("");
  EXPECT_NE(unset.find("level=warn\n"), std::string::npos) << unset;
  EXPECT_EQ(unset.find("UROCE_LOG_LEVEL"), std::string::npos) << unset;

  const std::string debug = run("UROCE_LOG_LEVEL=debug");
  EXPECT_NE(debug.find("level=debug\n"), std::string::npos) << debug;
  EXPECT_EQ(debug.find("UROCE_LOG_LEVEL"), std::string::npos) << debug;

  const std::string off = run("UROCE_LOG_LEVEL=off");
  EXPECT_NE(off.find("level=off\n"), std::string::npos) << off;

  const std::string loud = run("UROCE_LOG_LEVEL=loud");
  EXPECT_NE(loud.find("level=warn\n"), std::string::npos) << loud;
  const auto at = loud.find(warning);
  ASSERT_NE(at, std::string::npos) << loud;
  EXPECT_EQ(loud.find(warning, at + 1), std::string::npos) << "one warning line\n" << loud;
  const std::string prefix = "[uroce] [warning] ";
  ASSERT_GE(at, prefix.size()) << loud;
  EXPECT_EQ(loud.compare(at - prefix.size(), prefix.size(), prefix), 0) << "on stderr, as a uroce warning\n" << loud;
}

}  // namespace
}  // namespace uroce::test
