// Memory of every kind a program may register through uroced (issue 27):
// buffers on the calling thread's stack (the main thread's [stack] and a
// thread's own), which lib/service/memory.cc moves onto a memory file with
// the caller blocked, not running on the pages being moved; and what it
// refuses with a line and a count: another thread's stack, a stack's guard
// page, pages below the main stack, shared anonymous and /dev/shm mappings.
// Two daemons joined by memif; each region is checked by a WRITE or SEND
// between them and its bytes compared.
#include <gtest/gtest.h>

#include <alloca.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "service/client.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"
#include "support/service_clients.h"
#include "support/uroced.h"
#include "support/work_requests.h"

namespace {

using namespace std::chrono_literals;
using uroce::test::Uroced;

// Two daemons joined by memif for the whole suite, and one client context
// on each with an RC QP connected to the other's.
class ServiceStack : public ::testing::Test, protected uroce::test::ConnectedClients {
 public:
  static void SetUpTestSuite() { pair_ = new uroce::test::MemifUrocedPair("svcstk"); }
  static void TearDownTestSuite() { delete pair_; }
  void SetUp() override {
    ASSERT_EQ(pair_->error, "");
    ASSERT_EQ(set_up(pair_->a, pair_->b), "");
  }
  void TearDown() override { tear_down(); }

  // Both buffers on this frame, right beside the frames of the calls that
  // register them (the pages of the first byte hold those frames too).
  __attribute__((noinline)) std::string carry_on_stack(std::size_t len, std::uint8_t seed, bool send) {
    auto* src = static_cast<std::uint8_t*>(alloca(len));
    auto* dst = static_cast<std::uint8_t*>(alloca(len));
    return carry(src, dst, len, seed, send);
  }
  // The same `depth` × 16 KiB deeper: fresh stack pages, never moved yet.
  __attribute__((noinline)) std::string carry_deeper(int depth, std::size_t len, std::uint8_t seed, bool send) {
    if (depth == 0) return carry_on_stack(len, seed, send);
    volatile std::uint8_t frame[16 * 1024];
    frame[0] = static_cast<std::uint8_t>(depth);
    std::string r = carry_deeper(depth - 1, len, seed, send);
    return frame[0] == static_cast<std::uint8_t>(depth) ? r : "a frame of the caller changed";
  }

  static uroce::test::MemifUrocedPair* pair_;
};
uroce::test::MemifUrocedPair* ServiceStack::pair_ = nullptr;

const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

// The main thread's [stack]: 20 rounds, each on stack pages not moved
// before, a buffer of a few KiB and one over several pages, by WRITE and
// by SEND. Before memory.cc moved stack pages with the caller blocked,
// this crashed in Client::share (the caller's own frames were lost).
TEST_F(ServiceStack, BuffersOnTheMainThreadsStackRegisterAndKeepTheirBytes) {
  for (int round = 0; round < 20; ++round) {
    const auto seed = static_cast<std::uint8_t>(round + 1);
    EXPECT_EQ(carry_deeper(2 * round, 3000, seed, round % 2 == 0), "") << "round " << round << ", 3000 bytes";
    EXPECT_EQ(carry_deeper(2 * round + 1, 5 * kPage + 123, seed, round % 2 == 1), "")
        << "round " << round << ", " << 5 * kPage + 123 << " bytes";
  }
}

// A thread's own stack (glibc's mapping under a guard page): 20 threads,
// each registering buffers on its own stack.
TEST_F(ServiceStack, BuffersOnAThreadsOwnStackRegisterAndKeepTheirBytes) {
  for (int round = 0; round < 20; ++round) {
    std::string r1, r2;
    std::thread t([&] {
      r1 = carry_on_stack(3000, static_cast<std::uint8_t>(round + 40), false);
      r2 = carry_deeper(1, 4 * kPage + 7, static_cast<std::uint8_t>(round + 80), true);
    });
    t.join();
    EXPECT_EQ(r1, "") << "round " << round;
    EXPECT_EQ(r2, "") << "round " << round;
  }
}

// A thread on a stack of fresh pages (glibc reuses the stacks of ended
// threads, whose pages an earlier test may have moved already).
struct FreshStackThread {
  explicit FreshStackThread(std::function<void()> body) : body_(std::move(body)) {
    stack_ = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stack_, kBytes);
    started_ = pthread_create(&thread_, &attr, run, this) == 0;
    pthread_attr_destroy(&attr);
  }
  ~FreshStackThread() {
    if (started_) pthread_join(thread_, nullptr);
    munmap(stack_, kBytes);
  }
  static void* run(void* self) {
    static_cast<FreshStackThread*>(self)->body_();
    return nullptr;
  }
  static constexpr std::size_t kBytes = 1 << 20;
  std::function<void()> body_;
  void* stack_ = nullptr;
  pthread_t thread_{};
  bool started_ = false;
};

// Another thread's stack cannot be moved safely (that thread writes its
// frames whenever it runs): refused with EINVAL, a line and a count; the
// owner registers it itself.
TEST_F(ServiceStack, AnotherThreadsStackIsRefusedAndCounted) {
  std::promise<std::uint8_t*> where;
  std::promise<void> done;
  auto owner = std::make_unique<FreshStackThread>([&] {
    auto* buf = static_cast<std::uint8_t*>(alloca(2000));
    std::memset(buf, 0x77, 2000);
    where.set_value(buf);
    done.get_future().wait();
  });
  std::uint8_t* buf = where.get_future().get();
  std::this_thread::sleep_for(50ms);  // the owner blocked on its future
  const std::uint64_t before = uroce::service::Client::refused_shares();
  testing::internal::CaptureStderr();
  uroce::MemoryRegion* mr = pda->reg_mr(buf, 2000, IBV_ACCESS_LOCAL_WRITE);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(mr, nullptr);
  EXPECT_NE(ca->last_error().find("another thread's stack"), std::string::npos) << ca->last_error();
  EXPECT_NE(err.find("another thread's stack"), std::string::npos) << err;
  EXPECT_EQ(uroce::service::Client::refused_shares(), before + 1);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(buf[i], 0x77) << "byte " << i;
  done.set_value();
  owner.reset();
}

// A buffer reaching into a thread's guard page is refused (not memory the
// program may use); one on the page just above the guard registers.
TEST_F(ServiceStack, AStacksGuardPageIsRefusedAndThePageAboveItRegisters) {
  std::string refused, above;
  std::uint64_t counted = 0;
  std::thread t([&] {
    pthread_attr_t attr;
    void* lowest = nullptr;
    std::size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
    pthread_attr_getstack(&attr, &lowest, &size);
    pthread_attr_destroy(&attr);
    auto* low = static_cast<std::uint8_t*>(lowest);
    const std::uint64_t before = uroce::service::Client::refused_shares();
    if (pda->reg_mr(low - 64, 128, IBV_ACCESS_LOCAL_WRITE) != nullptr) {
      refused = "registered";
    } else {
      refused = ca->last_error();
    }
    counted = uroce::service::Client::refused_shares() - before;
    std::uint8_t dst[512];
    above = carry(low + 64, dst, 256, 5, false);
  });
  t.join();
  EXPECT_NE(refused.find("not private anonymous memory"), std::string::npos) << refused;
  EXPECT_EQ(counted, 1u);
  EXPECT_EQ(above, "");
}

// The main thread's stack: [stack] and the mappings right below it
// (pieces moved onto files, and the rest of the stack under them, which
// /proc/self/maps does not name [stack]).
std::pair<std::uintptr_t, std::uintptr_t> main_stack() {
  std::istringstream maps(uroce::test::read_text_file("/proc/self/maps"));
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> all;
  std::string line;
  std::size_t stack = 0;
  while (std::getline(maps, line)) {
    all.emplace_back(std::stoull(line.substr(0, line.find('-')), nullptr, 16),
                     std::stoull(line.substr(line.find('-') + 1), nullptr, 16));
    if (line.find("[stack]") != std::string::npos) stack = all.size();
  }
  if (stack == 0) return {0, 0};
  std::size_t i = stack - 1;
  while (i > 0 && all[i - 1].second == all[i].first) --i;
  return {all[i].first, all[stack - 1].second};
}

// Below the main stack's lowest page lies its guard gap (and room to grow
// into): nothing mapped, refused with EFAULT's reason rather than moved or
// grown into. Half a MiB below: the calls of reg_mr grow the stack, not that far.
TEST_F(ServiceStack, PagesBelowTheMainStackAreRefused) {
  const auto [lo, hi] = main_stack();
  ASSERT_NE(lo, 0u);
  const std::uint64_t before = uroce::service::Client::refused_shares();
  EXPECT_EQ(pda->reg_mr(reinterpret_cast<void*>(lo - 512 * 1024 - 64), 128, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_NE(ca->last_error().find("not mapped"), std::string::npos) << ca->last_error();
  EXPECT_EQ(uroce::service::Client::refused_shares(), before + 1);
}

// The main thread's [stack] registered from another thread: refused (the
// main thread runs on it), the main thread's bytes untouched.
TEST_F(ServiceStack, TheMainStackFromAnotherThreadIsRefused) {
  auto* buf = static_cast<std::uint8_t*>(alloca(3000));
  std::memset(buf, 0x42, 3000);
  std::string why;
  std::thread t([&] {
    if (pda->reg_mr(buf, 3000, IBV_ACCESS_LOCAL_WRITE) != nullptr) {
      why = "registered";
    } else {
      why = ca->last_error();
    }
  });
  t.join();
  EXPECT_NE(why.find("another thread's stack"), std::string::npos) << why;
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(buf[i], 0x42) << "byte " << i;
}

// A signal handler on an alternate stack (sigaltstack, fresh private
// pages) registers a buffer on that stack: the stack it runs on, moved
// while it sleeps as a thread's own stack is. The signal is raised by this
// thread at a known point, so the handler may call what it likes.
ServiceStack* g_on_signal = nullptr;
std::string g_signal_result;
void register_on_alt_stack(int) { g_signal_result = g_on_signal->carry_on_stack(2500, 77, false); }

TEST_F(ServiceStack, ABufferOnASignalsAlternateStackRegisters) {
  const std::size_t bytes = 256 * 1024;
  void* alt = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(alt, MAP_FAILED);
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = bytes;
  stack_t old_ss{};
  ASSERT_EQ(sigaltstack(&ss, &old_ss), 0);
  struct sigaction sa {}, old_sa {};
  sa.sa_handler = register_on_alt_stack;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old_sa), 0);
  g_on_signal = this;
  g_signal_result = "the handler did not run";
  raise(SIGUSR1);
  sigaction(SIGUSR1, &old_sa, nullptr);
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, nullptr);
  EXPECT_EQ(g_signal_result, "");
  munmap(alt, bytes);
}

// Shared mappings are not the program's private pages to move: a shared
// anonymous mapping and a /dev/shm file are refused with what to use
// instead, counted, their bytes untouched.
TEST_F(ServiceStack, SharedAnonymousAndShmFileMappingsAreRefusedWithWhatToDo) {
  const std::uint64_t before = uroce::service::Client::refused_shares();
  auto* anon = static_cast<std::uint8_t*>(
      mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(anon, MAP_FAILED);
  std::memset(anon, 0x33, 2 * kPage);
  EXPECT_EQ(pda->reg_mr(anon + 10, kPage, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_NE(ca->last_error().find("MAP_PRIVATE"), std::string::npos) << ca->last_error();
  const std::string name = "/uroce-svcstk-" + std::to_string(getpid());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  shm_unlink(name.c_str());
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kPage)), 0);
  auto* shm = static_cast<std::uint8_t*>(mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(shm, MAP_FAILED);
  std::memset(shm, 0x44, kPage);
  EXPECT_EQ(pda->reg_mr(shm, 100, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_NE(ca->last_error().find("/dev/shm"), std::string::npos) << ca->last_error();
  EXPECT_EQ(uroce::service::Client::refused_shares(), before + 2);
  for (std::size_t i = 0; i < 2 * kPage; ++i) ASSERT_EQ(anon[i], 0x33) << "byte " << i;
  for (std::size_t i = 0; i < kPage; ++i) ASSERT_EQ(shm[i], 0x44) << "byte " << i;
  munmap(shm, kPage);
  close(fd);
  munmap(anon, 2 * kPage);
}

}  // namespace
