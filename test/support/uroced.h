// Child processes for the tests that drive uroced over its socket: uroced
// itself (started, waited for until it says its socket is ready, and for
// its link if asked, killed and reaped at the end, its EAL runtime folder
// removed), programs run through
// sh with their output in a log file, a function run in a forked child, and
// a scratch folder.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "support/telemetry_client.h"

namespace uroce::test {

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A child that has not ended in time, before it is killed: each thread's
// stack (gdb, 20 frames) of it and of its own children, on stderr, so that
// the test's log says where a rare hang waits (a ForkServe test timed out
// once in a run of the whole suite under ASan on a loaded machine, and
// passed 60 runs in a row alone).
inline void print_stacks(pid_t pid) {
  const std::string p = std::to_string(pid);
  const std::string cmd = "for p in " + p + " $(pgrep -P " + p +
                          "); do echo \"== still running after its limit: pid $p: $(tr '\\0' ' ' </proc/$p/cmdline 2>/dev/null)\";"
                          " timeout 60 gdb -p $p -batch -nx -ex 'thread apply all bt 20' 2>/dev/null |"
                          " grep -E '^(Thread|#)'; done >&2";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "(no stacks: gdb missing or failed)\n");
}

// Waits up to `limit` for child `pid` to end: its exit code, or -signal;
// -1000 if it is still running (then, with `kill_late`, its stacks are
// printed and it is killed and reaped).
inline int wait_exit(pid_t pid, std::chrono::milliseconds limit, bool kill_late = true) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= end) {
      if (kill_late) {
        print_stacks(pid);
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
      return -1000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

// A process started with `sh -c "exec COMMAND"`, its stdout and stderr in
// the file `log`.
struct Process {
  pid_t pid = -1;
  std::string log;
  // Exit code, or -signal, once it has ended (waits up to `limit`; -1000
  // and killed if it has not).
  int wait(std::chrono::milliseconds limit = std::chrono::seconds(120)) {
    const int rc = wait_exit(pid, limit);
    pid = -1;
    return rc;
  }
  std::string out() const { return read_text_file(log); }
};

inline Process spawn(const std::string& command, const std::string& log) {
  Process p;
  p.log = log;
  p.pid = fork();
  if (p.pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return p;
}

// Runs `body` in a forked child: its return value is the exit code, which
// this returns (-1000 if the child did not end within `limit`: killed).
inline int run_in_child(const std::function<int()>& body, std::chrono::milliseconds limit) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  return wait_exit(pid, limit);
}

// A folder made with mkdtemp (`prefix` + XXXXXX), of exactly `mode` (not
// the umask's) if one is given; removed with what it holds.
struct TempDir {
  explicit TempDir(const std::string& prefix, mode_t mode = 0) {
    std::string tmpl = prefix + "XXXXXX";
    dir = mkdtemp(tmpl.data());
    if (mode != 0) chmod(dir.c_str(), mode);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string dir;
};

struct UrocedOptions {
  std::string eal{};     // EAL arguments, --file-prefix aside
  std::string prefix{};  // EAL file prefix: unique to the test process (and daemon)
  std::string ip{};      // --ip
  std::string socket{};  // --socket
  std::string log{};     // its stdout and stderr
  std::string extra{};   // more options, as typed
  // Time to get ready: generous, for sanitizers on a loaded machine.
  std::chrono::seconds ready_limit{60};
};

// uroced (the binary test/meson.build names in UROCED) as a child process.
// The constructor returns once the daemon has
// said its socket is ready ("uroced: ready", printed after listen()), or
// with `error` saying why it is not: it exited (its output), or it did not
// get ready in time (its output; killed).
class Uroced {
 public:
  explicit Uroced(const UrocedOptions& o)
      : socket(o.socket), log(o.log), telemetry(kRuntimeRoot + o.prefix + "/dpdk_telemetry.v2"),
        runtime_(kRuntimeRoot + o.prefix) {
    pid = spawn(std::string(UROCED) + " --eal '" + o.eal + " --file-prefix=" + o.prefix + "' --ip " + o.ip +
                    " --socket " + o.socket + (o.extra.empty() ? "" : " " + o.extra),
                o.log)
              .pid;
    const auto end = std::chrono::steady_clock::now() + o.ready_limit;
    for (;;) {
      if (out().find("uroced: ready") != std::string::npos) return;
      if (exit_code(std::chrono::milliseconds(0)) != kRunning) {
        error = "uroced exited (" + std::to_string(exited_) + "): " + out();
        return;
      }
      if (std::chrono::steady_clock::now() >= end) {
        kill(pid, SIGKILL);
        exit_code(std::chrono::seconds(10));
        error = "uroced did not get ready within " + std::to_string(o.ready_limit.count()) + " s: " + out();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~Uroced() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    std::error_code ignored;
    std::filesystem::remove_all(runtime_, ignored);
  }
  Uroced(const Uroced&) = delete;
  Uroced& operator=(const Uroced&) = delete;

  // Its exit code (or -signal) once it ends within `limit`; kRunning if it
  // has not (it is left running).
  int exit_code(std::chrono::milliseconds limit) {
    if (pid <= 0) return exited_;
    const int rc = wait_exit(pid, limit, false);
    if (rc == kRunning) return rc;
    pid = -1;
    exited_ = rc;
    return rc;
  }
  // SIGTERM; its exit code (kRunning if it did not end within `limit`).
  int stop(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    return exit_code(limit);
  }
  bool alive() { return exit_code(std::chrono::milliseconds(0)) == kRunning; }
  // Waits up to `limit` for its port's link to be up, as DPDK telemetry
  // reports it (a memif port's: once the peer has joined); false if not.
  bool wait_link_up(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    for (const auto end = std::chrono::steady_clock::now() + limit;;) {
      if (telemetry_query(telemetry, "/ethdev/link_status,0").find("\"status\":\"UP\"") != std::string::npos) {
        return true;
      }
      if (!alive() || std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::string out() const { return read_text_file(log); }

  static constexpr int kRunning = -1000;
  std::string socket;
  std::string log;
  std::string telemetry;  // its DPDK telemetry socket
  std::string error;      // "" once ready
  pid_t pid = -1;         // -1 once it has ended (and been reaped)

 private:
  static inline const std::string kRuntimeRoot = "/var/run/dpdk/";
  std::string runtime_;
  int exited_ = kRunning;
};

// Options for one uroced alone on a net_ring port (its clients talk through
// its loopback), its socket and log in `dir`, its EAL prefix from `tag`.
inline UrocedOptions ring_uroced(const std::string& tag, const std::string& dir) {
  return {.eal = "--no-huge --no-shconf --no-pci -m 512 -l 0 --log-level=lib.eal:error --vdev=net_ring0",
          .prefix = "uroce-" + tag + "-" + std::to_string(getpid()),
          .ip = "10.0.0.1/24",
          .socket = dir + "/uroced.sock",
          .log = dir + "/uroced.log"};
}

// Options for one of two uroced joined by a memif link whose socket is in
// `dir`: the server end (10.0.0.1) or the client end (10.0.0.2), on CPU
// `cpu`. `tag` keeps each test binary's EAL prefixes apart.
inline UrocedOptions memif_uroced(const std::string& tag, const std::string& dir, const std::string& name,
                                  bool server, int cpu, const std::string& extra = "") {
  return {.eal = "--no-huge --no-shconf --no-pci -m 512 --log-level=lib.eal:error -l " + std::to_string(cpu) +
                 " --vdev=net_memif0,role=" + (server ? "server" : "client") + ",socket=" + dir +
                 "/memif.sock,bsize=8192",
          .prefix = "uroce-" + tag + "-" + name + "-" + std::to_string(getpid()),
          .ip = std::string("10.0.0.") + (server ? "1" : "2") + "/24",
          .socket = dir + "/" + name + ".sock",
          .log = dir + "/" + name + ".log",
          .extra = extra};
}

// Two daemons on the two ends of one memif link, in a scratch folder of
// their own: a (the server end, 10.0.0.1, CPU 0) and b (10.0.0.2, CPU 1).
// `error` is "" once both are ready and the link is up (b has joined a's
// socket), else what went wrong.
struct MemifUrocedPair {
  explicit MemifUrocedPair(const std::string& tag)
      : dir("/tmp/uroce-" + tag + "-"),
        a(memif_uroced(tag, dir.dir, "a", true, 0)),
        b(memif_uroced(tag, dir.dir, "b", false, 1)) {
    if (!a.error.empty()) error = "daemon a: " + a.error;
    if (error.empty() && !b.error.empty()) error = "daemon b: " + b.error;
    for (Uroced* d : {&a, &b}) {
      if (error.empty() && !d->wait_link_up()) error = "the memif link did not come up: " + d->out();
    }
  }
  TempDir dir;
  Uroced a;
  Uroced b;
  std::string error;
};

}  // namespace uroce::test
