// When a program started under uroce-run has its device up: some stock
// programs show nothing outside the process when they are ready (rping's
// server listens through rdma_cm, which no socket table lists). Give the
// server's command a mark in its environment (mark_env), then wait until a
// process carrying that mark runs one of uroce's threads: "uroce-worker"
// or "uroce-helper" (in-process, when the device opens) or "uroce-cm" (librdmacm's, started
// by the first rdma_cm call, also through uroced). The program listens a
// moment later, and a REQ that comes before is sent again (docs/rdma_cm.md).
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <thread>

namespace uroce::test {

// "UROCE_TEST_MARK=<tag>-<pid>-<n>": unique per call, given to the program
// with env(1) (it passes through uroce-run and ip netns exec to it).
inline std::string mark_env(const std::string& tag) {
  static int n = 0;
  return "UROCE_TEST_MARK=" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(++n);
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Whether a process whose environment holds `mark` (as mark_env gave it)
// has a thread named `thread`.
inline bool uroce_thread_running(const std::string& mark, const std::string& thread = "uroce-worker") {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return false;
  bool found = false;
  const std::string needle = mark + '\0';
  while (dirent* d = readdir(proc)) {
    if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
    const std::string pid = std::string("/proc/") + d->d_name;
    if (read_all(pid + "/environ").find(needle) == std::string::npos) continue;
    if (DIR* tasks = opendir((pid + "/task").c_str())) {
      while (dirent* t = readdir(tasks)) {
        if (t->d_name[0] != '.' && read_all(pid + "/task/" + t->d_name + "/comm") == thread + "\n") found = true;
      }
      closedir(tasks);
    }
    if (found) break;
  }
  closedir(proc);
  return found;
}

// Waits up to `limit` for a thread named one of `threads`; false if none
// came (or `gone()` says the server has ended).
template <typename Gone>
bool wait_uroce_thread(const std::string& mark, std::initializer_list<const char*> threads, Gone gone,
                       std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const auto any = [&] {
    for (const char* t : threads) {
      if (uroce_thread_running(mark, t)) return true;
    }
    return false;
  };
  while (!any()) {
    if (gone() || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The engines' threads: "uroce-worker", or with UROCE_PROGRESS=caller
// "uroce-helper".
template <typename Gone>
bool wait_uroce_workers(const std::string& mark, Gone gone, std::chrono::seconds limit = std::chrono::seconds(60)) {
  return wait_uroce_thread(mark, {"uroce-worker", "uroce-helper"}, gone, limit);
}

}  // namespace uroce::test
