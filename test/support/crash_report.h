// A fatal signal in a test binary, said on stderr before the process dies
// as it would have: the signal, the faulting address, the thread's name and
// a backtrace. CI keeps a crashed binary's output, not its core; this is
// what tells a SIGSEGV on EAL's interrupt thread from an abort in the test's
// own thread. Libraries' frames come as "lib.so(+offset)", which addr2line
// resolves against the same Debian package.
//
// Not under ASan or TSan: their own handlers report more.
#pragma once

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>

namespace uroce::test {

namespace crash_report_detail {

inline void write_all(const char* s, std::size_t n) {
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

inline void on_fatal(int sig, siginfo_t* info, void*) {
  char name[32] = "?";
  pthread_getname_np(pthread_self(), name, sizeof name);
  char line[200];
  // snprintf of integers and pointers does not allocate in glibc.
  const int n = std::snprintf(line, sizeof line, "\n*** fatal signal %d (%s) at address %p in thread %d \"%s\"\n", sig,
                              sigabbrev_np(sig) != nullptr ? sigabbrev_np(sig) : "?", info->si_addr, gettid(), name);
  if (n > 0) write_all(line, static_cast<std::size_t>(n));
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  // Die of the same signal, as the test's runner expects.
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace crash_report_detail

inline void report_crashes() {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // backtrace() loads libgcc on its first call: done here, not in the handler.
  void* warm[2];
  backtrace(warm, 2);
  static char alt_stack[64 * 1024];  // a stack overflow still gets its word
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = crash_report_detail::on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(sig, &sa, nullptr);
#endif
}

}  // namespace uroce::test
