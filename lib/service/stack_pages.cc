// Stacks among the pages a region moves (pages.h): a thread's own stack
// pages are written by every call it makes, the very calls doing the move
// among them, and a write between the copy and the remap is lost (the
// thread returned into stale frames and crashed). So pages of the
// registering thread's own stack are moved by a helper thread while the
// caller sleeps in futex(2), signals held (a handler would write the
// stack); the helper starts once it sees the caller inside that call
// (/proc/self/task/TID/syscall). Another thread's stack is refused: that
// thread may run at any time (seen by the stack pointer of each blocked
// thread, and the main thread's stack by where it lies).
#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "service/pages.h"

namespace uroce::service::pages {
namespace {

// The caller's wait and the mover's: the caller sleeps in futex(2) on
// `moved` while the mover works, and the mover starts only once it sees the
// caller inside that very call (/proc/self/task/TID/syscall), so no write of
// the caller's (the call's own return address among them) lands between a
// copy and its remap.
struct MoveJob {
  std::vector<Move>* moves = nullptr;
  pid_t caller = 0;
  std::atomic<int> moved{0};
  bool waited = false;  // the caller was seen blocked: the moves were made
  bool blind = false;   // its system call cannot be read: nothing moved
};

long futex(std::atomic<int>* word, int op, int value) {
  return syscall(SYS_futex, reinterpret_cast<int*>(word), op, value, nullptr, nullptr, 0);
}

// 1 once thread `tid` is blocked in futex(FUTEX_WAIT_PRIVATE) on `word`,
// 0 not yet, -1 if its system call cannot be read here.
int waits_on(pid_t tid, const std::atomic<int>* word) {
  const int fd = open(("/proc/self/task/" + std::to_string(tid) + "/syscall").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[256];
  const ssize_t got = read(fd, text, sizeof text - 1);
  close(fd);
  if (got <= 0) return -1;
  text[got] = '\0';
  char* end = nullptr;
  if (std::strtol(text, &end, 10) != SYS_futex) return 0;
  return std::strtoull(end, nullptr, 16) == reinterpret_cast<std::uintptr_t>(word) ? 1 : 0;
}

void* run_moves(void* arg) {
  auto* job = static_cast<MoveJob*>(arg);
  // The caller is on its way into futex(2): a few instructions, unless
  // the machine is loaded; 10 s is far beyond any scheduling delay.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int seen; !job->waited && !job->blind && std::chrono::steady_clock::now() < deadline;) {
    seen = waits_on(job->caller, &job->moved);
    job->waited = seen == 1;
    job->blind = seen < 0;
    if (seen == 0) sched_yield();
  }
  if (job->waited) {
    for (Move& m : *job->moves) {
      m.fd = move_onto_file(m.lo, m.hi, m.why);
      if (m.fd < 0) break;
    }
  }
  job->moved.store(1, std::memory_order_release);
  futex(&job->moved, FUTEX_WAKE_PRIVATE, 1);
  return nullptr;
}

__attribute__((noinline)) void wait_moved(std::atomic<int>& moved) {
  while (moved.load(std::memory_order_acquire) == 0) futex(&moved, FUTEX_WAIT_PRIVATE, 0);
}

}  // namespace

// Moves on a thread of their own while this one sleeps with every signal
// held (a handler would write its stack, which may be among the pages).
// An empty string, or why nothing was moved.
std::string move_while_still(std::vector<Move>& moves) {
  MoveJob job;
  job.moves = &moves;
  job.caller = static_cast<pid_t>(syscall(SYS_gettid));
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);  // the mover inherits it too
  pthread_t mover;
  const int e = pthread_create(&mover, nullptr, run_moves, &job);
  if (e == 0) {
    wait_moved(job.moved);
    pthread_join(mover, nullptr);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (e != 0) return std::string("no thread to move the pages onto a memory file: ") + std::strerror(e);
  if (job.blind) {
    return "stack pages cannot be moved here (/proc/self/task/TID/syscall cannot be read, so the thread's "
           "stand-still cannot be seen): register malloc'd memory";
  }
  if (!job.waited) return "the pages were not moved: this thread was not seen waiting within 10 s";
  return "";
}

// Whether any of `moves` lies on the stack this thread runs on: the main
// thread's stack, a thread's own (pthread_getattr_np), or the mapping of
// its stack pointer now (a signal's alternate stack, a stack of the
// program's own making).
bool on_own_stack(const std::vector<Move>& moves, const std::vector<Vma>& maps) {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> stacks;
  if (static_cast<pid_t>(syscall(SYS_gettid)) == getpid()) {
    stacks.push_back(main_stack_range(maps));
  } else {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* lo = nullptr;
      std::size_t size = 0;
      if (pthread_attr_getstack(&attr, &lo, &size) == 0) {
        stacks.emplace_back(reinterpret_cast<std::uintptr_t>(lo), reinterpret_cast<std::uintptr_t>(lo) + size);
      }
      pthread_attr_destroy(&attr);
    }
  }
  const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  for (const Vma& v : maps) {
    if (here >= v.lo && here < v.hi) stacks.emplace_back(v.lo, v.hi);
  }
  for (const auto& [lo, hi] : stacks) {
    for (const Move& m : moves) {
      if (m.lo < hi && lo < m.hi) return true;
    }
  }
  return false;
}

// Where the main thread's stack may lie: below the top of [stack], as far
// as its size limit reaches (the kernel keeps other mappings out of it).
// Only its top part is named [stack] in /proc/self/maps once a move has
// split it.
std::pair<std::uintptr_t, std::uintptr_t> main_stack_range(const std::vector<Vma>& maps) {
  for (const Vma& v : maps) {
    if (v.path != "[stack]") continue;
    rlimit lim{};
    std::uintptr_t size = 8u << 20;
    if (getrlimit(RLIMIT_STACK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
      size = std::max<std::uintptr_t>(lim.rlim_cur, size);
    }
    return {v.hi - std::min(v.hi, size), v.hi};
  }
  return {0, 0};
}

namespace {

// Reads the stack pointer of thread `tid` while it is blocked (in a system
// call or stopped): false while it runs, or when it cannot be read.
bool blocked_sp(const std::string& tid, std::uintptr_t& sp) {
  const int fd = open(("/proc/self/task/" + tid + "/syscall").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[256];
  const ssize_t got = read(fd, text, sizeof text - 1);
  close(fd);
  if (got <= 0) return false;
  text[got] = '\0';
  if (std::strncmp(text, "running", 7) == 0) return false;
  // "nr arg1 .. arg6 sp pc", or "-1 sp pc" outside a system call: sp is the second last.
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.size() < 3) return false;
  sp = std::stoull(words[words.size() - 2], nullptr, 16);
  return true;
}

}  // namespace

// The thread (other than this one) whose stack holds pages of `moves`:
// its id, or 0. The main thread's stack is where it lies; another
// thread's, the pages around its stack pointer. A thread that is running
// shows no stack pointer: it is looked at twice, then taken as elsewhere.
pid_t stack_owner(const std::vector<Move>& moves, const std::vector<Vma>& maps) {
  const auto self = static_cast<pid_t>(syscall(SYS_gettid));
  auto overlaps = [&](std::uintptr_t lo, std::uintptr_t hi) {
    for (const Move& m : moves) {
      if (m.lo < hi && lo < m.hi) return true;
    }
    return false;
  };
  if (const auto [lo, hi] = main_stack_range(maps); self != getpid() && overlaps(lo, hi)) return getpid();
  std::vector<std::string> tids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.' && std::atoi(e->d_name) != self) tids.emplace_back(e->d_name);
    }
    closedir(d);
  }
  for (const std::string& tid : tids) {
    std::uintptr_t sp = 0;
    if (!blocked_sp(tid, sp)) {
      sched_yield();
      if (!blocked_sp(tid, sp)) continue;
    }
    // Its frames lie around its stack pointer, inside the mapping that
    // holds it: a window, not the whole mapping, as the kernel may have
    // merged a thread's stack with anonymous memory beside it (and a
    // program's own stacks may sit in its heap).
    constexpr std::uintptr_t kWindow = 256 * 1024;
    for (const Vma& v : maps) {
      if (sp < v.lo || sp >= v.hi) continue;
      const std::uintptr_t lo = std::max(v.lo, sp - std::min(sp, kWindow));
      const std::uintptr_t hi = std::min(v.hi, sp + kWindow);
      if (overlaps(lo, hi)) return static_cast<pid_t>(std::atoi(tid.c_str()));
    }
  }
  return 0;
}

// Grows the main thread's [stack] down one page below `lo` (its lowest
// page now): a growable stack must stay below the file mapped at `lo`, or
// the next deeper call would find the file there and fault. Not
// instrumented: it reads below the stack pointer on purpose.
__attribute__((no_sanitize_address, noinline)) void grow_stack_below(std::uintptr_t lo) {
  const volatile char* below = reinterpret_cast<const volatile char*>(lo - 1);
  (void)*below;
}

}  // namespace uroce::service::pages
