// A command run under sh with its output captured, for the tests that run
// uroce's programs or stock ones: what it printed on stdout (a command that
// wants its stderr too ends with 2>&1) and how it ended.
#pragma once

#include <stdio.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace uroce::test {

struct Outcome {
  int status = -1;  // the exit status; -1 if killed by a signal, or not run
  std::string out;
};

inline Outcome run_command(const std::string& line) {
  Outcome r;
  FILE* p = popen(line.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// `env` clearing every variable through which uroce's library would take
// its configuration from the test's own environment.
inline const std::string kNoUroceEnv =
    "env -u UROCE_EAL -u UROCE_IP -u UROCE_PORT_ID -u UROCE_QUEUES -u UROCE_WORKERS -u UROCE_CC -u UROCE_DCQCN "
    "-u UROCE_DELAY -u UROCE_SERVICE -u UROCE_RX_LOSS ";

// perftest times its bandwidth and latency tests in TSC cycles, converted
// with a clock rate it fits at start-up (TSC against gettimeofday, 200
// samples). A process preempted while it samples spoils the fit: it prints
// "Correlation coefficient r^2: ... < 0.9" and, at the end, "Can't produce a
// report" instead of its figures. The transfer ran; perftest could not time
// it (seen on a loaded 2-core machine). Tests that want the figures run such
// a pair again, a few times at most.
inline bool perftest_clock_fit_failed(const std::string& out) {
  return out.find("Can't produce a report") != std::string::npos ||
         out.find("Correlation coefficient r^2") != std::string::npos;
}

// Both ends of a pair of stock programs, as they ended.
struct PairEnds {
  int client_status = -1;
  int server_status = -1;
  std::string client_out;
  std::string server_out;
};

// Runs `run` (which starts both ends and returns how they ended) again, 3
// times at most, while perftest could not fit its clock; the last is returned.
template <typename Run>
PairEnds until_perftest_reports(Run run) {
  PairEnds ends;
  for (int attempt = 0; attempt < 3; ++attempt) {
    ends = run();
    if (!perftest_clock_fit_failed(ends.client_out + ends.server_out)) break;
    std::printf("perftest could not fit the CPU's clock (a loaded machine): the pair runs again\n");
  }
  return ends;
}

}  // namespace uroce::test
