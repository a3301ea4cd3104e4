// The exporter's HTTP server on the loopback: what it answers, and that slow,
// stalled, greedy or many clients neither stop it serving others nor make it
// collect more often than min_interval allows.
#include <gtest/gtest.h>

#include <ctime>

#include <dirent.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "metrics/metrics_helpers.h"

namespace uroce::test {
namespace {

using metrics::DeviceSnapshot;
using metrics::Exporter;
using metrics::Options;
using metrics::Snapshot;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A program's collect(): `qps` QPs on port "0", every one moving each time
// (so all of them, up to max_qps, have series), and who called it.
struct Collector {
  explicit Collector(std::uint32_t qps) {
    for (std::uint32_t qpn = 1; qpn <= qps; ++qpn) state.push_back(make_qp(qpn));
  }
  void operator()(Snapshot& s) {
    calls.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    }
    if (fail) throw std::runtime_error("the device is gone");
    // Work, not a wait: the exporter spaces collections by the CPU time
    // they take.
    if (const int ms = slow_ms.load(); ms > 0) {
      timespec t{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      const double until = static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9 + ms / 1e3;
      for (double now = 0; now < until;) {
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        now = static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
      }
    }
    for (auto& q : state) add_traffic(q, 4096);
    DeviceSnapshot d;
    d.port = "0";
    d.device = {{StatScope::kEngine, "rx_frames", "frames received from the port", calls.load(), StatKind::kCounter}};
    d.qps = state;
    s.devices.clear();  // the last collection's, handed back
    s.devices.push_back(std::move(d));
    s.extra.push_back({"test_clients", "clients attached", StatKind::kGauge, {}, 1});
  }
  std::vector<QpStats> state;
  std::atomic<int> slow_ms{0};  // each collection works this long (10,000 QPs)
  std::atomic<std::uint64_t> calls{0};
  std::atomic<bool> fail{false};
  std::mutex mu;
  std::set<std::thread::id> threads;
};

Options loopback(std::size_t max_qps = 100) {
  Options o;
  o.listen = "127.0.0.1:0";
  o.max_qps = max_qps;
  return o;
}

struct Server {
  Server(Options o, std::uint32_t qps = 3) : collector(qps), exporter(std::move(o), [this](Snapshot& s) { collector(s); }) {
    std::string error;
    started = exporter.start(error);
    EXPECT_TRUE(started) << error;
    EXPECT_EQ(error, "");
  }
  Collector collector;
  Exporter exporter;
  bool started = false;
};

// Polls `cond` until it holds or `limit` passes.
template <typename Cond>
bool eventually(Cond cond, std::chrono::milliseconds limit = 20s) {
  const auto deadline = Clock::now() + limit;
  while (!cond()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Whether a thread of this process is named `name`.
bool thread_named(const std::string& name) {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string line;
    if (std::getline(comm, line) && line == name) found = true;
  }
  closedir(d);
  return found;
}

TEST(Server, GetMetricsAnswersThePage) {
  Server s(loopback());
  ASSERT_TRUE(s.started);
  ASSERT_NE(s.exporter.port(), 0) << "port 0 binds a free port";
  const Response r = get(s.exporter.port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.complete) << "the server closes after the answer";
  EXPECT_EQ(r.headers.at("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(r.headers.at("connection"), "close");
  EXPECT_EQ(r.headers.at("content-length"), std::to_string(r.body.size()));
  const Page p = parse_page(r.body);
  for (const auto& problem : p.problems) ADD_FAILURE() << problem;
  EXPECT_EQ(p.value("uroce_port_qps", {{"port", "0"}, {"state", "RTS"}}), 3);
  EXPECT_EQ(p.find("uroce_qp_info").size(), 3u);
  EXPECT_EQ(p.value("test_clients"), 1);
  EXPECT_GE(p.value("uroce_metrics_scrapes_total"), 1);
  EXPECT_GE(p.value("uroce_metrics_collections_total"), 2) << "the baseline and this one";
  EXPECT_GE(p.value("uroce_metrics_collect_seconds"), 0);
  EXPECT_EQ(promtool_findings(r.body), "") << r.body;
  // collect() ran on the exporter's thread only, which has its name.
  {
    std::lock_guard<std::mutex> lock(s.collector.mu);
    EXPECT_EQ(s.collector.threads.size(), 1u);
    EXPECT_EQ(s.collector.threads.count(std::this_thread::get_id()), 0u);
  }
  EXPECT_TRUE(thread_named("uroce-metrics"));
}

TEST(Server, AnswersOtherPathsAndMethods) {
  Server s(loopback());
  ASSERT_TRUE(s.started);
  const auto port = s.exporter.port();
  Response r = get(port, "/");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("/metrics"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find('\n'), r.body.size() - 1) << "one paragraph";
  EXPECT_EQ(get(port, "/metrics?name[]=x").status, 200) << "a query string is ignored";
  EXPECT_EQ(get(port, "/nothing").status, 404);
  EXPECT_EQ(get(port, "/metrics/x").status, 404);
  r = http(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET, HEAD");
  EXPECT_EQ(http(port, "DELETE / HTTP/1.0\r\n\r\n").status, 405);
  EXPECT_EQ(http(port, "hello\r\n\r\n").status, 400);
  r = http(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.body, "") << "HEAD has no body";
  EXPECT_GT(std::stoul(r.headers["content-length"]), 1000u) << "but says how long it would be";
  // Bare newlines end a head too (lenient clients).
  EXPECT_EQ(http(port, "GET /metrics HTTP/1.0\n\n").status, 200);
}

TEST(Server, CollectFailureAnswers500AndTheServerGoesOn) {
  Options o = loopback();
  o.min_interval = 0ms;
  o.max_collect_share = 0;  // every scrape collects
  Server s(o);
  ASSERT_TRUE(s.started);
  s.collector.fail = true;
  const Response r = get(s.exporter.port(), "/metrics");
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.body.find("the device is gone"), std::string::npos);
  s.collector.fail = false;
  EXPECT_EQ(get(s.exporter.port(), "/metrics").status, 200);
}

TEST(Server, SlowLorisDoesNotStopOthersAndIsDropped) {
  Options o = loopback();
  o.read_timeout = 500ms;
  Server s(o);
  ASSERT_TRUE(s.started);
  const int loris = connect_to(s.exporter.port());
  ASSERT_GE(loris, 0);
  ASSERT_TRUE(send_all(loris, "GET /metr"));
  // Served while the slow one holds its connection.
  const auto t = Clock::now();
  EXPECT_EQ(get(s.exporter.port(), "/metrics").status, 200);
  EXPECT_LT(Clock::now() - t, 10s);
  // The slow one is closed at its deadline, unanswered.
  bool closed = false;
  const std::string got = read_to_end(loris, 20s, &closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(got, "");
  EXPECT_GE(s.exporter.connections_timed_out(), 1u);
  close(loris);
}

TEST(Server, AClientThatNeverReadsDoesNotStopOthersAndIsDropped) {
  Options o = loopback(2000);
  o.write_timeout = 3s;
  o.min_interval = 0ms;
  Server s(o, 2000);  // a page of several MB
  ASSERT_TRUE(s.started);
  const int greedy = connect_to(s.exporter.port(), 4096);
  ASSERT_GE(greedy, 0);
  ASSERT_TRUE(send_all(greedy, "GET /metrics HTTP/1.1\r\n\r\n"));
  // Wait until the server has answered it as far as the socket takes.
  ASSERT_TRUE(eventually([&] { return s.collector.calls.load() >= 2; }));
  EXPECT_EQ(get(s.exporter.port(), "/").status, 200);
  const Response r = get(s.exporter.port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.complete);
  EXPECT_GT(r.body.size(), 4u << 20) << "big enough not to fit the sockets' buffers";
  EXPECT_EQ(r.headers.at("content-length"), std::to_string(r.body.size()));
  ASSERT_TRUE(eventually([&] { return s.exporter.connections_timed_out() >= 1; }))
      << "the greedy client is dropped at the write deadline";
  close(greedy);
  EXPECT_EQ(get(s.exporter.port(), "/").status, 200);
}

TEST(Server, FiftyConnectionsAtOnceDoNotStopIt) {
  Options o = loopback();
  o.max_connections = 8;
  Server s(o);
  ASSERT_TRUE(s.started);
  std::vector<int> idle;
  for (int i = 0; i < 50; ++i) {
    const int fd = connect_to(s.exporter.port());
    ASSERT_GE(fd, 0) << i;
    idle.push_back(fd);
  }
  // All fifty stay open and silent; a scraper still gets its page.
  EXPECT_EQ(get(s.exporter.port(), "/metrics").status, 200);
  EXPECT_GE(s.exporter.connections_refused(), 42u);
  for (const int fd : idle) close(fd);
  EXPECT_EQ(get(s.exporter.port(), "/metrics").status, 200);
  // And fifty that all ask at once get their pages or are closed, never hang.
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  std::atomic<int> hung{0};
  for (int i = 0; i < 50; ++i) {
    clients.emplace_back([&] {
      const int fd = connect_to(s.exporter.port());
      if (fd < 0) return;
      bool closed = false;
      std::string raw;
      if (send_all(fd, "GET /metrics HTTP/1.1\r\n\r\n")) raw = read_to_end(fd, 30s, &closed);
      close(fd);
      if (!closed) hung.fetch_add(1);
      if (parse_response(raw, closed).status == 200) answered.fetch_add(1);
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(hung.load(), 0);
  EXPECT_GE(answered.load(), 1);
  EXPECT_EQ(get(s.exporter.port(), "/metrics").status, 200);
}

TEST(Server, AHugeRequestHeadIsRefused) {
  Server s(loopback());
  ASSERT_TRUE(s.started);
  ASSERT_TRUE(eventually([&] { return s.collector.calls.load() >= 1; })) << "the baseline";
  const auto before = s.collector.calls.load();
  const int fd = connect_to(s.exporter.port());
  ASSERT_GE(fd, 0);
  std::string request = "GET /metrics HTTP/1.1\r\nX-Junk: " + std::string(100 * 1024, 'a');
  ASSERT_TRUE(send_all(fd, request));
  shutdown(fd, SHUT_WR);
  bool closed = false;
  const std::string raw = read_to_end(fd, 30s, &closed);
  close(fd);
  EXPECT_TRUE(closed);
  EXPECT_EQ(raw.rfind("HTTP/1.1 431 ", 0), 0u) << raw.substr(0, 200);
  EXPECT_EQ(s.collector.calls.load(), before) << "refused before any collection";
  EXPECT_EQ(get(s.exporter.port(), "/metrics").status, 200);
}

TEST(Server, FastScrapesShareCollections) {
  Server s(loopback());  // min_interval 100 ms
  ASSERT_TRUE(s.started);
  const auto t0 = Clock::now();
  const auto before = s.collector.calls.load();
  for (int i = 0; i < 200; ++i) ASSERT_EQ(get(s.exporter.port(), "/metrics").status, 200) << i;
  const auto elapsed = Clock::now() - t0;
  const auto calls = s.collector.calls.load() - before;
  EXPECT_GE(calls, 1u);
  EXPECT_LE(calls, static_cast<std::uint64_t>(elapsed / 100ms) + 2) << "in " << (elapsed / 1ms) << " ms";
  EXPECT_EQ(s.exporter.collections(), s.collector.calls.load());
}

// A collection that works 20 ms (as 10,000 QPs do) is not repeated for
// 20 ms / max_collect_share (2 s at 1%), however fast the scrapes come: the
// engines its copies hold stay free 99% of the time.
TEST(Server, ALongCollectionSpacesTheNext) {
  Options o = loopback();
  o.max_collect_share = 0.01;
  Server s(o);
  ASSERT_TRUE(s.started);
  s.collector.slow_ms = 20;
  ASSERT_TRUE(eventually([&] { return s.collector.calls.load() >= 1; }));  // the baseline
  const auto t0 = Clock::now();
  const auto before = s.collector.calls.load();
  while (Clock::now() - t0 < 1500ms) ASSERT_EQ(get(s.exporter.port(), "/metrics").status, 200);
  const auto calls = s.collector.calls.load() - before;
  // The first scrape collects afresh (the baseline's 100 ms are past or
  // nearly); then none for 2 s.
  EXPECT_LE(calls, 2u);
  EXPECT_GE(calls, 1u);
  // With no floor from the collection's length: min_interval alone.
  Options fast = loopback();
  fast.max_collect_share = 0;
  Server f(fast);
  ASSERT_TRUE(f.started);
  f.collector.slow_ms = 20;
  const auto t1 = Clock::now();
  const auto before_fast = f.collector.calls.load();
  while (Clock::now() - t1 < 1500ms) ASSERT_EQ(get(f.exporter.port(), "/metrics").status, 200);
  EXPECT_GE(f.collector.calls.load() - before_fast, 5u) << "every 100 ms, less the collections' own 20 ms";
}

TEST(Server, StopReturnsPromptlyWithClientsConnected) {
  Options o = loopback(2000);
  Server s(o, 2000);
  ASSERT_TRUE(s.started);
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    const int fd = connect_to(s.exporter.port(), 4096);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
  }
  ASSERT_TRUE(send_all(fds[0], "GET /met"));                       // slow
  ASSERT_TRUE(send_all(fds[1], "GET /metrics HTTP/1.1\r\n\r\n"));  // never reads
  // Its answer has begun: the collection is over (stop() waits for one in progress).
  ASSERT_TRUE(eventually([&] {
    pollfd p{fds[1], POLLIN, 0};
    return poll(&p, 1, 0) == 1;
  }));
  const auto t = Clock::now();
  s.exporter.stop();
  EXPECT_LT(Clock::now() - t, 3s) << "not the read (5 s) or write (10 s) deadline";
  EXPECT_FALSE(thread_named("uroce-metrics"));
  for (const int fd : fds) {
    bool closed = false;
    read_to_end(fd, 20s, &closed);
    EXPECT_TRUE(closed);
    close(fd);
  }
  EXPECT_LT(connect_to(s.exporter.port()), 0) << "nobody listens after stop()";
  s.exporter.stop();  // again: nothing
}

TEST(Server, StartOnAPortInUseSaysWhatToDo) {
  Server first(loopback());
  ASSERT_TRUE(first.started);
  Options o;
  o.listen = "127.0.0.1:" + std::to_string(first.exporter.port());
  Exporter second(o, [](Snapshot&) {});
  std::string error;
  EXPECT_FALSE(second.start(error));
  EXPECT_EQ(error, "metrics: cannot listen on " + o.listen +
                       ": Address already in use (choose another with --metrics ADDR:PORT)");
  EXPECT_EQ(second.port(), 0);
  EXPECT_EQ(get(first.exporter.port(), "/metrics").status, 200) << "the first is untouched";
}

TEST(Server, StartsAgainAfterStop) {
  Server s(loopback());
  ASSERT_TRUE(s.started);
  s.exporter.stop();
  std::string error;
  ASSERT_TRUE(s.exporter.start(error)) << error;
  EXPECT_EQ(get(s.exporter.port(), "/metrics").status, 200);
}

// A program that forks with an exporter running: the child's stop() does not
// stop the parent's, and the child does not keep the port bound.
TEST(Server, AForkedChildLeavesTheParentsExporterAlone) {
  Server s(loopback());
  ASSERT_TRUE(s.started);
  const auto port = s.exporter.port();
  int to_child[2];
  int from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Nothing here may use GoogleTest: the exit status says it all.
    char c = 0;
    s.exporter.stop();  // must return: the thread is the parent's
    if (write(from_child[1], "s", 1) != 1) _exit(2);
    if (read(to_child[0], &c, 1) != 1) _exit(3);  // alive while the parent binds the port again
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  pollfd p{from_child[0], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 20'000), 1) << "the child's stop() did not return";
  EXPECT_EQ(get(port, "/metrics").status, 200) << "the child stopped the parent's exporter";
  s.exporter.stop();
  Options again = loopback();
  again.listen = "127.0.0.1:" + std::to_string(port);
  Exporter second(again, [](Snapshot&) {});
  std::string error;
  EXPECT_TRUE(second.start(error)) << error << " (the child still holds the port)";
  EXPECT_EQ(write(to_child[1], "x", 1), 1);
  int status = -1;
  ASSERT_TRUE(eventually([&] { return waitpid(pid, &status, WNOHANG) == pid; }));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  close(to_child[1]);
  close(from_child[0]);
}

TEST(ListenAddress, ParsesWhatFlagsGive) {
  sockaddr_storage ss;
  socklen_t len = 0;
  EXPECT_EQ(metrics::parse_listen_address("127.0.0.1:9464", ss, len), "");
  EXPECT_EQ(ss.ss_family, AF_INET);
  EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port), 9464);
  EXPECT_EQ(metrics::parse_listen_address("9100", ss, len), "");
  EXPECT_EQ(reinterpret_cast<sockaddr_in*>(&ss)->sin_addr.s_addr, htonl(INADDR_LOOPBACK)) << "a port alone is loopback";
  EXPECT_EQ(metrics::parse_listen_address("[::1]:0", ss, len), "");
  EXPECT_EQ(ss.ss_family, AF_INET6);
  EXPECT_EQ(len, sizeof(sockaddr_in6));
  EXPECT_EQ(metrics::check_listen_address("0.0.0.0:9464"), "");
  EXPECT_EQ(metrics::check_listen_address("localhost:9464"), "");
  EXPECT_EQ(metrics::check_listen_address("[::]:9464"), "");
  for (const char* bad : {"", ":9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:http", "::1:9464",
                          "[::1]9464", "[::1", "[10.0.0.1]:80", "example.com:9464", "300.1.1.1:80"}) {
    const std::string e = metrics::check_listen_address(bad);
    EXPECT_EQ(e.rfind("metrics: bad listen address \"" + std::string(bad) + "\": ", 0), 0u) << bad << ": " << e;
    EXPECT_NE(e.find("(expected ADDR:PORT"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line";
  }
  Options nowhere;
  nowhere.listen = "nowhere";
  Exporter bad(nowhere, [](Snapshot&) {});
  std::string error;
  EXPECT_FALSE(bad.start(error));
  EXPECT_EQ(error.rfind("metrics: bad listen address \"nowhere\"", 0), 0u) << error;
}

}  // namespace
}  // namespace uroce::test
