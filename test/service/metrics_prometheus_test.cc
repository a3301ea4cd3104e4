// uroced's /metrics read by a real Prometheus server (Debian's prometheus
// package, which tools/setup.sh installs): two daemons joined by memif,
// stock ib_write_bw between them at a steady rate, daemon a scraped every
// second. Prometheus's per-QP rate must match the rate of the QP's own
// counter read from the daemon's telemetry over the same seconds, a drop
// counter must be exactly the daemon's, and every query of the Grafana
// dashboard in conf/grafana must evaluate on that server.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/free_port.h"
#include "support/http_client.h"
#include "support/telemetry_client.h"
#include "support/uroced.h"

namespace uroce::test {
namespace {

using namespace std::chrono_literals;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A Prometheus server of its own on loopback, scraping `target` every second.
struct Prometheus {
  Prometheus(const std::string& dir, int target_port) : port(free_tcp_port()) {
    const std::string config = dir + "/prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                          << "scrape_configs:\n  - job_name: uroced\n    static_configs:\n"
                          << "      - targets: ['127.0.0.1:" << target_port << "']\n";
    process = spawn("prometheus --config.file=" + config + " --storage.tsdb.path=" + dir +
                        "/tsdb --web.listen-address=127.0.0.1:" + std::to_string(port) + " --log.level=warn",
                    dir + "/prometheus.log");
  }
  ~Prometheus() {
    if (process.pid > 0) {
      kill(process.pid, SIGTERM);
      if (wait_exit(process.pid, 20s, false) == -1000) {
        kill(process.pid, SIGKILL);
        waitpid(process.pid, nullptr, 0);
      }
    }
  }
  bool ready(std::chrono::seconds limit) {
    for (const auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      if (http_get(port, "/-/ready").find("Ready") != std::string::npos) return true;
      std::this_thread::sleep_for(200ms);
    }
    return false;
  }
  // The answer of /api/v1/query for `expr` (at `time`, unix seconds, if given).
  std::string query(const std::string& expr, double time = 0) {
    std::string target = "/api/v1/query?query=" + url_encode(expr);
    if (time > 0) {
      char t[32];
      std::snprintf(t, sizeof t, "%.3f", time);
      target += "&time=" + std::string(t);
    }
    return http_get(port, target);
  }
  int port;
  Process process;
};

// The first sample's value in a query answer ({"value":[t,"V"]}), or NaN.
double first_value(const std::string& answer) {
  static const std::regex kValue(R"re("value":\[[0-9.]+,"([^"]+)"\])re");
  std::smatch m;
  return std::regex_search(answer, m, kValue) ? std::strtod(m[1].str().c_str(), nullptr) : NAN;
}

// The QP of daemon `telemetry` with the most payload placed, and how much.
std::pair<std::string, long> busiest_receiver(const std::string& telemetry) {
  const std::string qps = telemetry_query(telemetry, "/uroce/qps,0");
  std::pair<std::string, long> best{"", -1};
  static const std::regex kNumber("[0-9]+");
  const auto list = qps.substr(qps.find('['));
  for (std::sregex_iterator it(list.begin(), list.end(), kNumber), end; it != end; ++it) {
    const long rx = telemetry_number(telemetry_query(telemetry, "/uroce/qp,0," + it->str()), "rx_bytes");
    if (rx > best.second) best = {it->str(), rx};
  }
  return best;
}

TEST(MetricsPrometheus, APrometheusServerReadsTheDaemonsCountersBack) {
  ASSERT_EQ(std::system("command -v prometheus >/dev/null"), 0)
      << "no prometheus: install Debian's prometheus package (tools/setup.sh does)";
  TempDir dir("/tmp/uroce-prom-");
  const int metrics_port = free_tcp_port();
  // Daemon a drops one frame in 500 on arrival (counted as
  // rx_dropped_impaired): a drop counter that moves, and retransmissions.
  setenv("UROCE_RX_LOSS", "0.002,7", 1);
  Uroced a(memif_uroced("prom", dir.dir, "a", true, 0,
                        "--cc dcqcn --metrics 127.0.0.1:" + std::to_string(metrics_port)));
  unsetenv("UROCE_RX_LOSS");
  ASSERT_EQ(a.error, "");
  Uroced b(memif_uroced("prom", dir.dir, "b", false, 1, "--cc dcqcn"));
  ASSERT_EQ(b.error, "");
  ASSERT_TRUE(a.wait_link_up() && b.wait_link_up()) << a.out() << b.out();
  EXPECT_NE(a.out().find("Prometheus metrics at http://127.0.0.1:" + std::to_string(metrics_port)),
            std::string::npos)
      << a.out();

  Prometheus prom(dir.dir, metrics_port);
  ASSERT_TRUE(prom.ready(90s)) << read_text_file(prom.process.log);
  // Ready is not yet scraping: its first scrape of the daemon can come
  // seconds later, and a rate over a window it did not cover would be cut.
  double up = NAN;
  for (const auto end = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < end;) {
    if ((up = first_value(prom.query("up{job=\"uroced\"}"))) == 1.0) break;
    std::this_thread::sleep_for(250ms);
  }
  ASSERT_EQ(up, 1.0) << "Prometheus did not scrape the daemon: " << read_text_file(prom.process.log);

  // 1 Gb/s of 64 KiB WRITEs each way for 16 s, paced by perftest: a rate
  // that holds from second to second, even on a loaded machine; both ends
  // send, so DCQCN paces a QP of daemon a's too.
  const std::string tcp = std::to_string(free_tcp_port());
  const std::string bw = " timeout 60 ib_write_bw -d uroce0 -x 1 -s 65536 -D 16 -b --rate_limit=1 --rate_limit_type=SW "
                         "--report_gbits -p " + tcp;
  Process server = spawn(std::string(UROCE_RUN) + " --service --socket " + a.socket + bw, dir.dir + "/bw-s.log");
  ASSERT_TRUE(wait_tcp_listening(std::stoi(tcp))) << "ib_write_bw's server did not listen: " << server.out();
  Process client =
      spawn(std::string(UROCE_RUN) + " --service --socket " + b.socket + bw + " 127.0.0.1", dir.dir + "/bw-c.log");

  // The receiving QP on daemon a, once payload flows.
  std::pair<std::string, long> qp{"", -1};
  for (const auto end = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < end;) {
    qp = busiest_receiver(a.telemetry);
    if (qp.second > (64L << 20)) break;
    std::this_thread::sleep_for(250ms);
  }
  ASSERT_GT(qp.second, 64L << 20) << "no traffic reached daemon a:\n" << server.out() << client.out();

  // The stack's own rate over 5 s, from its counter.
  std::this_thread::sleep_for(2s);
  const std::string qp_command = "/uroce/qp,0," + qp.first;
  const double t1 = unix_now();
  const long v1 = telemetry_number(telemetry_query(a.telemetry, qp_command), "rx_bytes");
  std::this_thread::sleep_for(5s);
  const double t2 = unix_now();
  const long v2 = telemetry_number(telemetry_query(a.telemetry, qp_command), "rx_bytes");
  const double stack_rate = static_cast<double>(v2 - v1) / (t2 - t1);
  ASSERT_GT(stack_rate, 1e7) << "the QP stopped moving";
  // Prometheus's rate of the same counter over the same 5 s, once it has
  // scraped past their end.
  std::this_thread::sleep_for(2500ms);
  const std::string selector = "uroce_qp_rx_bytes_total{qpn=\"" + qp.first + "\",port=\"0\"}";
  const std::string window = std::to_string(std::llround((t2 - t1) * 1000)) + "ms";
  const std::string answer = prom.query("rate(" + selector + "[" + window + "])", t2);
  const double prom_rate = first_value(answer);
  std::printf("QP %s: the stack's rate %.1f MB/s, Prometheus's %.1f MB/s\n", qp.first.c_str(), stack_rate / 1e6,
              prom_rate / 1e6);
  ASSERT_FALSE(std::isnan(prom_rate)) << answer;
  EXPECT_NEAR(prom_rate / stack_rate, 1.0, 0.10)
      << answer << "\nthe daemon's counter: " << v1 << " at " << std::to_string(t1) << ", " << v2 << " at "
      << std::to_string(t2) << "\nPrometheus's samples: " << prom.query(selector + "[" + window + "]", t2)
      << "\nits scrapes: " << prom.query("scrape_duration_seconds[10s]", t2) << "\n"
      << prom.query("up[10s]", t2);

  // The series are typed and described as the registry says.
  const std::string meta = http_get(prom.port, "/api/v1/metadata?metric=uroce_qp_rx_bytes_total");
  EXPECT_NE(meta.find("\"type\":\"counter\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("payload bytes received and placed"), std::string::npos) << meta;
  const std::string info = prom.query("uroce_qp_info{qpn=\"" + qp.first + "\"}");
  const std::string telemetry_qp = telemetry_query(a.telemetry, qp_command);
  const std::string state = telemetry_qp.substr(telemetry_qp.find("\"state\":"), 14);  // "state":"RTS"
  EXPECT_NE(info.find(state), std::string::npos) << state << " in " << info;
  EXPECT_NE(info.find("\"peer_gid\":\"::ffff:10.0.0.2\""), std::string::npos) << info;
  EXPECT_NE(info.find("\"client_pid\""), std::string::npos) << "uroced labels each QP with its client: " << info;

  // Every query of the dashboard evaluates, and finds series while traffic
  // runs (its variables as "All" would set them).
  std::ifstream in(std::string(UROCE_SOURCE_ROOT) + "/conf/grafana/uroce-dashboard.json");
  ASSERT_TRUE(in) << "conf/grafana/uroce-dashboard.json";
  const std::string dashboard((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const std::regex kExpr(R"re("expr": "((?:[^"\\]|\\.)*)")re");
  int exprs = 0;
  for (std::sregex_iterator it(dashboard.begin(), dashboard.end(), kExpr), end; it != end; ++it, ++exprs) {
    std::string e = std::regex_replace((*it)[1].str(), std::regex(R"(\\")"), "\"");
    e = std::regex_replace(e, std::regex(R"(\$__rate_interval)"), "10s");
    e = std::regex_replace(e, std::regex(R"(\$(port|instance))"), ".*");
    const std::string r = prom.query(e);
    EXPECT_NE(r.find("\"status\":\"success\""), std::string::npos) << e << "\n" << r;
    EXPECT_NE(r.find("\"value\""), std::string::npos) << "no series for the dashboard's " << e << "\n" << r;
  }
  EXPECT_GE(exprs, 20);

  EXPECT_EQ(client.wait(90s), 0) << client.out();
  EXPECT_EQ(server.wait(30s), 0) << server.out();

  // After the traffic: Prometheus's last sample of a drop counter is the
  // daemon's counter, exactly (read again after a scrape, until it holds
  // still: an ARP or a late frame may still arrive).
  long dropped = -1;
  double scraped = NAN;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const long before = telemetry_number(telemetry_query(a.telemetry, "/uroce/port,0"), "rx_dropped_impaired");
    std::this_thread::sleep_for(2500ms);
    scraped = first_value(prom.query("uroce_port_rx_dropped_impaired_total{port=\"0\"}"));
    dropped = telemetry_number(telemetry_query(a.telemetry, "/uroce/port,0"), "rx_dropped_impaired");
    if (before == dropped && scraped == static_cast<double>(dropped)) break;
  }
  std::printf("frames dropped on arrival: the daemon counted %ld, Prometheus has %.0f\n", dropped, scraped);
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(scraped, static_cast<double>(dropped));
  // The drops made daemon a NAK sequence errors (its QPs are gone by now:
  // the port's sum keeps what they counted).
  EXPECT_GT(first_value(prom.query("uroce_port_qp_nak_seq_sent_total{port=\"0\"}")), 0.0);
  // The daemon answered every scrape, and Prometheus saw it up throughout.
  EXPECT_EQ(first_value(prom.query("min_over_time(up{job=\"uroced\"}[20s])")), 1.0);
  EXPECT_EQ(a.stop(), 0) << a.out();
}

// uroced --metrics: a malformed address and one another program holds each
// stop the daemon before it serves, with one line that says what to do.
TEST(MetricsUroced, ABadOrTakenAddressIsRefusedInOneLine) {
  TempDir dir("/tmp/uroce-promflags-");
  Uroced bad(memif_uroced("promflags", dir.dir, "bad", true, 0, "--metrics 127.0.0.1:http"));
  EXPECT_EQ(bad.exit_code(30s), 2) << bad.out();
  EXPECT_EQ(bad.out(), "uroced: metrics: bad listen address \"127.0.0.1:http\": the port must be a number from 0 to "
                       "65535 (expected ADDR:PORT, [IPv6]:PORT or PORT, such as 127.0.0.1:9464)\n");

  const TakenTcpPort taken;
  ASSERT_NE(taken.port, 0);
  const std::string where = "127.0.0.1:" + std::to_string(taken.port);
  Uroced busy(memif_uroced("promflags", dir.dir, "busy", true, 0, "--log-level warn --metrics " + where));
  EXPECT_EQ(busy.exit_code(60s), 2) << busy.out();
  const std::string out = busy.out();
  EXPECT_NE(out.find("uroced: metrics: cannot listen on " + where + ": Address already in use (choose another with "
                     "--metrics ADDR:PORT)\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("uroced: ready"), std::string::npos) << "it never served: " << out;
}

}  // namespace
}  // namespace uroce::test
