// Telemetry while QPs come and go and traffic flows (review D12), on DPDK
// ports joined by net_ring (no hugepages). The handlers run on DPDK's
// telemetry thread; each copies what it reports in one read-only control
// call. These tests check the answers are well formed and consistent; under
// ThreadSanitizer (tools/tsan.sh) they also show no handler reads what an
// engine or a control call writes unsynchronised: with workers, and with the
// application's own thread calling progress().
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cc/dcqcn.h"
#include "support/eal_environment.h"
#include "support/ring_pair_rig.h"
#include "transport/counters.h"
#include "transport/qp_state.h"
#include "uroce/verbs.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

using Clock = std::chrono::steady_clock;

// One connection to DPDK's telemetry socket, as dpdk-telemetry.py keeps
// one: a command, then its answer (one JSON object per message).
class TelemetryClient {
 public:
  TelemetryClient() {
    const std::string path = EalEnvironment::telemetry_socket();
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      error_ = "cannot connect to " + path;
      return;
    }
    char hello[1024];
    if (read(fd_, hello, sizeof hello) <= 0) error_ = "no greeting from " + path;
  }
  ~TelemetryClient() {
    if (fd_ >= 0) close(fd_);
  }
  TelemetryClient(const TelemetryClient&) = delete;
  TelemetryClient& operator=(const TelemetryClient&) = delete;

  const std::string& error() const { return error_; }
  std::string query(const std::string& command) {
    if (write(fd_, command.data(), command.size()) < 0) return "write failed";
    char buf[16384];
    const ssize_t n = read(fd_, buf, sizeof buf);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "no answer";
  }

 private:
  int fd_ = -1;
  std::string error_;
};

// The value of `"key":<digits>` in an answer.
std::optional<std::uint64_t> number(const std::string& answer, const std::string& key) {
  const std::string tag = "\"" + key + "\":";
  const auto at = answer.find(tag);
  if (at == std::string::npos) return std::nullopt;
  const char* p = answer.c_str() + at + tag.size();
  if (*p < '0' || *p > '9') return std::nullopt;
  return std::strtoull(p, nullptr, 10);
}

// The value of `"key":"<text>"` in an answer.
std::optional<std::string> text(const std::string& answer, const std::string& key) {
  const std::string tag = "\"" + key + "\":\"";
  const auto at = answer.find(tag);
  if (at == std::string::npos) return std::nullopt;
  const auto end = answer.find('"', at + tag.size());
  if (end == std::string::npos) return std::nullopt;
  return answer.substr(at + tag.size(), end - at - tag.size());
}

// The telemetry index of the device called `name`, "" if none.
std::string device_index(TelemetryClient& t, const std::string& name) {
  const std::string devices = t.query("/uroce/devices");
  const auto at = devices.find(":\"" + name + "\"");
  if (at == std::string::npos || at < 2) return "";
  const auto open = devices.rfind('"', at - 2);
  return open == std::string::npos ? "" : devices.substr(open + 1, at - 2 - open);
}

// The QPNs of a /uroce/qps answer, nullopt unless it is
// {"/uroce/qps":[n,n,...]}.
std::optional<std::vector<std::uint32_t>> qpns_of(const std::string& answer) {
  const std::string head = "{\"/uroce/qps\":[";
  if (answer.rfind(head, 0) != 0 || answer.size() < head.size() + 2 || answer.substr(answer.size() - 2) != "]}") {
    return std::nullopt;
  }
  std::vector<std::uint32_t> qpns;
  const char* p = answer.c_str() + head.size();
  const char* end = answer.c_str() + answer.size() - 2;
  while (p < end) {
    char* next = nullptr;
    const unsigned long v = std::strtoul(p, &next, 10);
    if (next == p || (next != end && *next != ',')) return std::nullopt;
    qpns.push_back(static_cast<std::uint32_t>(v));
    p = next == end ? end : next + 1;
  }
  return qpns;
}

// What is wrong with a /uroce/qp answer for a QP that exists ("" if
// nothing): it must name a QP state and carry every QP counter.
std::string malformed_qp(const std::string& answer) {
  if (answer.rfind("{\"/uroce/qp\":{", 0) != 0 || answer.substr(answer.size() - 2) != "}}") return "not a dict";
  const std::optional<std::string> state = text(answer, "state");
  bool known = false;
  for (const ibv_qp_state s : {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_SQE,
                               IBV_QPS_ERR}) {
    known = known || (state && *state == transport::qp_state_name(s));
  }
  if (!known) return "no QP state";
  for (std::size_t i = 0; i < transport::kQpCounterCount; ++i) {
    const char* name = transport::qp_counter_name(static_cast<transport::QpCounter>(i));
    if (!number(answer, name)) return std::string("no counter ") + name;
  }
  for (const char* key : {"engine", "dest_qp_num", "dcqcn_active", "dcqcn_rate_mbps"}) {
    if (!number(answer, key)) return std::string("no ") + key;
  }
  return "";
}

// Failures seen on a helper thread, reported on the test's own.
class Findings {
 public:
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(m_);
    if (++count_ <= 5) first_ += "\n  " + what;
  }
  int count() {
    std::lock_guard<std::mutex> lock(m_);
    return count_;
  }
  std::string first() {
    std::lock_guard<std::mutex> lock(m_);
    return first_;
  }

 private:
  std::mutex m_;
  int count_ = 0;
  std::string first_;
};

// QPs churn in `pd`, 8 at a time, until join(), with
// `pause` between rounds; it records every QPN it was given. Back to back, control
// calls hold a worker for good (it parks again before it polls), so with
// workers and traffic the churn pauses.
class QpChurn {
 public:
  QpChurn(ProtectionDomain* pd, CompletionQueue* cq, std::chrono::microseconds pause = {}) {
    QpInitAttr init;
    init.send_cq = init.recv_cq = cq;
    init.cap = ibv_qp_cap{4, 4, 1, 1, 0};
    thread_ = std::thread([this, pd, init, pause] {
      while (!stop_.load()) {
        std::vector<QueuePair*> qps;
        for (int k = 0; k < 8; ++k) {
          if (QueuePair* q = pd->create_qp(init)) {
            qps.push_back(q);
            ++created_;
            qpns_.insert(q->qp_num());
            last_qpn_.store(q->qp_num());
          }
        }
        for (QueuePair* q : qps) pd->destroy_qp(q);
        if (pause.count() != 0) std::this_thread::sleep_for(pause);
      }
    });
  }
  ~QpChurn() { join(); }
  void join() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::uint32_t last_qpn() const { return last_qpn_.load(); }
  // After join():
  std::size_t created() const { return created_; }
  bool was_created(std::uint32_t qpn) const { return qpns_.count(qpn) != 0; }
  std::size_t distinct() const { return qpns_.size(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint32_t> last_qpn_{0};
  std::size_t created_ = 0;
  std::set<std::uint32_t> qpns_;
  std::thread thread_;
};

// Two devices on net_ring, a QP pair (qa, qb) connected by connect(), and
// 64 KiB regions.
struct Link : RingPairRig {
  explicit Link(const std::string& name, const cc::DcqcnParams* dcqcn = nullptr)
      : RingPairRig(name, {.dcqcn = dcqcn, .bytes = kBytes, .connect = false}) {}

  // 4 KiB WRITEs from A to B, at most 32 outstanding: `n` of them, and more
  // while `more()`, within 30 s. `step` runs the engines when no worker
  // does. Returns how many completed, stopping at the first error.
  template <typename Step, typename More>
  int write(int n, Step step, More more) {
    int posted = 0, done = 0;
    ibv_wc wc[32];
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while ((done < n || more() || posted != done) && Clock::now() < deadline) {
      const bool post = done < n || more();
      while (post && posted - done < 32 &&
             post_rdma(qa, IBV_WR_RDMA_WRITE, bufa + (posted % 16) * 4096, 4096, mra->lkey,
                       bufb + (posted % 16) * 4096, mrb->rkey, static_cast<std::uint64_t>(posted)) == 0) {
        ++posted;
      }
      step();
      const int k = cqa->poll(32, wc);
      if (k < 0) return done;
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) return done;
      }
      done += k;
    }
    return done;
  }

  static constexpr std::size_t kBytes = 65536;
};

// Queries device `dev` until `stop`: the QP list (which must hold `steady`
// and only QPs that exist), `steady` itself, a QP the churn made lately (if
// any), and the engine counters. Counters must never go back.
struct Watch {
  Watch(const std::string& device, std::uint32_t steady_qpn, const char* steady_state, const QpChurn* churning)
      : dev(device), steady(steady_qpn), state(steady_state), churn(churning) {
    thread = std::thread([this] { run(); });
  }
  ~Watch() { join(); }
  void join() {
    stop.store(true);
    if (thread.joinable()) thread.join();
  }

  void run() {
    TelemetryClient t;
    if (!t.error().empty()) {
      findings.add(t.error());
      return;
    }
    std::map<std::string, std::uint64_t> last;  // monotonic counters, by name
    auto rises = [&](const std::string& what, const std::string& answer, const char* key) {
      const std::optional<std::uint64_t> v = number(answer, key);
      if (!v) return findings.add(what + ": no " + key + ": " + answer);
      std::uint64_t& before = last[what + "." + key];
      if (*v < before) {
        findings.add(what + "." + key + " went back from " + std::to_string(before) + " to " + std::to_string(*v));
      }
      before = *v;
    };
    const std::string steady_cmd = "/uroce/qp," + dev + "," + std::to_string(steady);
    while (!stop.load()) {
      const std::string list = t.query("/uroce/qps," + dev);
      const std::optional<std::vector<std::uint32_t>> qpns = qpns_of(list);
      if (!qpns) {
        findings.add("malformed QP list: " + list);
      } else {
        const std::set<std::uint32_t> unique(qpns->begin(), qpns->end());
        if (unique.size() != qpns->size()) findings.add("a QPN listed twice: " + list);
        if (!unique.count(steady)) findings.add("QP " + std::to_string(steady) + " not listed: " + list);
        if (qpns->size() > 1 + 8) findings.add("more QPs listed than ever existed at once: " + list);
        listed.insert(unique.begin(), unique.end());
      }
      const std::string qp = t.query(steady_cmd);
      if (const std::string why = malformed_qp(qp); !why.empty()) {
        findings.add("QP " + std::to_string(steady) + ": " + why + ": " + qp);
      } else {
        if (text(qp, "state") != state) findings.add("QP " + std::to_string(steady) + " not in " + state + ": " + qp);
        for (const char* key : {"tx_packets", "tx_bytes", "acks_received", "completions"}) rises("steady", qp, key);
        if (number(qp, "dcqcn_active") == 1u) dcqcn_seen.store(true);
        if (dcqcn_seen.load() && number(qp, "dcqcn_active") != 1u) findings.add("DCQCN went inactive: " + qp);
      }
      if (churn != nullptr && churn->last_qpn() != 0) {
        // Destroyed by now, or a fresh QP in RESET that has sent nothing.
        const std::string fresh = t.query("/uroce/qp," + dev + "," + std::to_string(churn->last_qpn()));
        if (fresh == "{\"/uroce/qp\":null}") {
          ++gone;
        } else if (const std::string why = malformed_qp(fresh); !why.empty()) {
          findings.add("churned QP: " + why + ": " + fresh);
        } else if (text(fresh, "state") != "RESET" || number(fresh, "tx_packets") != 0u ||
                   number(fresh, "dest_qp_num") != 0u) {
          findings.add("churned QP not fresh: " + fresh);
        } else {
          ++alive;
        }
      }
      const std::string engine = t.query("/uroce/engine," + dev);
      if (engine.rfind("{\"/uroce/engine\":{\"engines\":1,", 0) != 0) {
        findings.add("malformed engine counters: " + engine);
      } else {
        for (const char* key : {"rx_frames", "tx_frames", "drop_icrc_mismatch"}) rises("engine", engine, key);
      }
      ++rounds;
    }
  }

  std::string dev;
  std::uint32_t steady;
  std::string state;
  const QpChurn* churn;
  std::atomic<bool> stop{false};
  Findings findings;
  std::set<std::uint32_t> listed;  // every QPN seen in a list (after join())
  std::atomic<bool> dcqcn_seen{false};
  std::atomic<int> rounds{0};
  int alive = 0, gone = 0;  // churned QPs found and already destroyed (after join())
  std::thread thread;
};

// After the watch and the churn: every QPN listed existed.
void expect_listed_existed(const Watch& w, const QpChurn& churn) {
  // The allocator moves on (it skips QPNs whose table slot a live QP
  // holds): a QPN is never given twice within a test this short.
  ASSERT_EQ(churn.distinct(), churn.created()) << "a QPN given twice";
  for (const std::uint32_t qpn : w.listed) {
    EXPECT_TRUE(qpn == w.steady || churn.was_created(qpn))
        << "QP " << qpn << " listed, never created";
  }
}

// Lets the threads run 2 s, and on a loaded machine (sanitizers, a build
// beside) longer, up to 20 s, until the watcher has made enough rounds for
// the test to mean something.
void let_run(const std::atomic<int>& rounds) {
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  while (rounds.load() <= 10 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// The reproducer of D12: create_qp/destroy_qp (control calls, run here in
// the churning thread: no workers) reallocate the engine's QP list and index
// and free QPs while the telemetry thread answers.
TEST(TelemetryRace, QpsComeAndGoWithoutWorkers) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Link l("trn");
  ASSERT_TRUE(l.ready());
  TelemetryClient t;
  ASSERT_EQ(t.error(), "");
  const std::string dev = device_index(t, "trn-a");
  ASSERT_NE(dev, "");
  QpChurn churn(l.pda, l.cqa);
  Watch w(dev, l.qa->qp_num(), "RESET", &churn);
  let_run(w.rounds);
  w.join();
  churn.join();
  EXPECT_EQ(w.findings.count(), 0) << w.findings.first();
  EXPECT_GT(w.rounds, 10);
  EXPECT_GT(churn.created(), 8u);
  expect_listed_existed(w, churn);
  std::printf("  %d telemetry rounds while %zu QPs came and went (%d churned QPs found, %d gone)\n", w.rounds.load(),
              churn.created(), w.alive, w.gone);
}

// The same with both devices' engines on worker threads, idle. The churn
// pauses: back to back, its control calls would leave the telemetry thread
// (and the workers) hardly a turn.
TEST(TelemetryRace, QpsComeAndGoWhileWorkersRun) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Link l("trw");
  ASSERT_TRUE(l.ready());
  ASSERT_EQ(l.pair->a->start_worker(-1), 0);
  ASSERT_EQ(l.pair->b->start_worker(-1), 0);
  TelemetryClient t;
  ASSERT_EQ(t.error(), "");
  const std::string dev = device_index(t, "trw-a");
  ASSERT_NE(dev, "");
  QpChurn churn(l.pda, l.cqa, std::chrono::microseconds(500));
  Watch w(dev, l.qa->qp_num(), "RESET", &churn);
  let_run(w.rounds);
  w.join();
  churn.join();
  EXPECT_EQ(w.findings.count(), 0) << w.findings.first();
  EXPECT_GT(w.rounds, 10);
  EXPECT_GT(churn.created(), 8u);
  expect_listed_existed(w, churn);
  std::printf("  %d telemetry rounds while %zu QPs came and went\n", w.rounds.load(), churn.created());
}

// A's QP sent each of `done` one-packet 4 KiB WRITEs once, plus what it
// sent again: on a loaded machine a starved worker can answer late enough
// for the retransmission timer to resend a window (go-back-N), and tx_bytes
// counts every packet sent.
void expect_bytes_sent(const std::string& qp, int done) {
  const std::optional<std::uint64_t> resent = number(qp, "retransmitted_packets");
  ASSERT_TRUE(resent.has_value()) << qp;
  EXPECT_EQ(number(qp, "tx_bytes"), (static_cast<std::uint64_t>(done) + *resent) * 4096) << qp;
}

// And while A's QP carries WRITEs the application posts and polls for.
// tools/tsan.sh leaves it out of the ThreadSanitizer run: DPDK's rings and mempools are not instrumented,
// so TSan cannot see that an mbuf one worker sends through net_ring (or
// frees) is synchronised with the other worker that receives (or allocates)
// it, and reports our own code touching it. Telemetry beside traffic is
// covered there by WhileTheApplicationDrivesProgress, workers beside
// traffic and control calls by worker_race_test.cc.
TEST(TelemetryRace, QpsComeAndGoWhileWorkersCarryTraffic) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Link l("trt");
  ASSERT_TRUE(l.ready());
  ASSERT_EQ(l.pair->a->start_worker(-1), 0);
  ASSERT_EQ(l.pair->b->start_worker(-1), 0);
  ASSERT_EQ(l.connect(), 0) << l.pair->a->last_error() << l.pair->b->last_error();
  TelemetryClient t;
  ASSERT_EQ(t.error(), "");
  const std::string dev = device_index(t, "trt-a");
  ASSERT_NE(dev, "");
  QpChurn churn(l.pda, l.cqa, std::chrono::microseconds(500));
  Watch w(dev, l.qa->qp_num(), "RTS", &churn);
  const int done = l.write(1000, [] {}, [&w] { return w.rounds.load() < 20; });
  const int rounds = w.rounds.load();
  w.join();
  churn.join();
  EXPECT_GE(done, 1000);
  EXPECT_GE(rounds, 20);
  EXPECT_EQ(w.findings.count(), 0) << w.findings.first();
  EXPECT_GT(churn.created(), 8u);
  expect_listed_existed(w, churn);
  const std::string qp = t.query("/uroce/qp," + dev + "," + std::to_string(l.qa->qp_num()));
  expect_bytes_sent(qp, done);
  std::printf("  %d telemetry rounds during %d WRITEs while %zu QPs came and went\n", rounds, done, churn.created());
  l.pair->a->stop_workers();
  l.pair->b->stop_workers();
}

// No workers: the application's thread runs the engines with progress()
// (DCQCN on, so the engine rewrites each QP's rate state as it sends) while
// the telemetry thread reads the same QP. A control call from the telemetry
// thread must exclude the progress() caller.
TEST(TelemetryRace, WhileTheApplicationDrivesProgress) {
  ASSERT_EQ(EalEnvironment::error(), "");
  cc::DcqcnParams dcqcn;
  dcqcn.line_rate_bps = 25e9;
  dcqcn.start_rate_fraction = 1;  // at line rate throughout (net_ring marks nothing), as checked below
  Link l("trp", &dcqcn);
  ASSERT_TRUE(l.ready());
  ASSERT_EQ(l.connect(), 0) << l.pair->a->last_error() << l.pair->b->last_error();
  TelemetryClient t;
  ASSERT_EQ(t.error(), "");
  const std::string dev = device_index(t, "trp-a");
  ASSERT_NE(dev, "");
  Watch w(dev, l.qa->qp_num(), "RTS", nullptr);
  device::RingPair& pair = *l.pair;
  const int done = l.write(1000, [&pair] { pair.step(); }, [&w] { return w.rounds.load() < 20; });
  const int rounds = w.rounds.load();
  w.join();
  EXPECT_GE(done, 1000);
  EXPECT_GE(rounds, 20);
  EXPECT_EQ(w.findings.count(), 0) << w.findings.first();
  EXPECT_TRUE(w.dcqcn_seen.load()) << "telemetry never showed the QP's DCQCN state";
  const std::string qp = t.query("/uroce/qp," + dev + "," + std::to_string(l.qa->qp_num()));
  expect_bytes_sent(qp, done);
  EXPECT_EQ(number(qp, "dcqcn_rate_mbps"), 25000u) << qp;
  std::printf("  %d telemetry rounds during %d WRITEs\n", rounds, done);
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(
      new uroce::test::EalEnvironment({.name = "uroce-telemetry-race", .memory_mb = "1024"}));
  return RUN_ALL_TESTS();
}
