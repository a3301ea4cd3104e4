// Starting uroced for a test: the daemon as a child process (through sh, so
// its command line reads as a user would type it), its output in a log
// file, and a wait for its "uroced: ready" line. Shared by the tests that
// drive the daemon over its socket.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace uroce::test {

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `command` (exec'd by sh) with stdout and stderr in `log`, and waits
// up to `limit` for uroced's ready line: the daemon's pid, or -1 with `error`
// saying why (it exited, or never got ready: its log).
inline pid_t start_uroced(const std::string& command, const std::string& log, std::string& error,
                          std::chrono::seconds limit = std::chrono::seconds(60)) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (read_text_file(log).find("uroced: ready") != std::string::npos) return pid;
    int st;
    if (waitpid(pid, &st, WNOHANG) != 0) {
      error = "uroced exited: " + read_text_file(log);
      return -1;
    }
    if (std::chrono::steady_clock::now() >= end) {
      error = "uroced did not get ready: " + read_text_file(log);
      return pid;  // still running: the caller kills it
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace uroce::test
