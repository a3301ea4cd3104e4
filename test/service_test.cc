// uroced and its clients (README "Running as a service"): two daemons joined
// by a memif pair (no hugepages), each serving clients in processes of their
// own; the C verbs program of ibverbs_test (every verb, data verified) and
// stock rdma-core and perftest binaries through the daemons; a client killed
// mid-transfer; a client that sends garbage, names another's handles or
// passes its limits; registered memory moved onto shared files; SIGTERM.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "service/client.h"
#include "service/protocol.h"
#include "uroce/verbs.h"

namespace {

using namespace std::chrono_literals;

const std::string kEal = "--no-huge --no-shconf --no-pci -m 512 --log-level=lib.eal:error";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A process started with `sh -c "exec COMMAND"`, its output in a file.
struct Process {
  pid_t pid = -1;
  std::string log;
  // Exit code, or -signal, once it has ended (waits up to `limit`).
  int wait(std::chrono::seconds limit = 120s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return -1000;
      }
      std::this_thread::sleep_for(20ms);
    }
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  }
  std::string out() const { return read_file(log); }
};

Process spawn(const std::string& command, const std::string& log) {
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

std::string env_lib() { return "env -u UROCE_EAL -u UROCE_IP LD_LIBRARY_PATH=" UROCE_IBVERBS_DIR " "; }

// A daemon on one end of a memif pair in `dir`.
struct Daemon {
  std::string socket;
  Process proc;
  std::string error;
  Daemon(const std::string& dir, const std::string& name, bool server, int cpu, const std::string& extra = "") {
    socket = dir + "/" + name + ".sock";
    const std::string eal = kEal + " -l " + std::to_string(cpu) + " --vdev=net_memif0,role=" +
                            (server ? "server" : "client") + ",socket=" + dir + "/memif.sock,bsize=8192";
    proc = spawn(std::string(UROCED) + " --eal '" + eal + "' --ip 10.0.0." + (server ? "1" : "2") +
                     "/24 --socket " + socket + " " + extra,
                 dir + "/" + name + ".log");
    for (int i = 0; i < 200; ++i) {
      if (proc.out().find("uroced: ready") != std::string::npos) return;
      int st;
      if (waitpid(proc.pid, &st, WNOHANG) != 0) {
        proc.pid = -1;
        error = "uroced exited: " + proc.out();
        return;
      }
      std::this_thread::sleep_for(50ms);
    }
    error = "uroced did not get ready: " + proc.out();
  }
  // SIGTERM; the exit code.
  int stop() {
    if (proc.pid <= 0) return -1;
    kill(proc.pid, SIGTERM);
    return proc.wait(30s);
  }
  ~Daemon() {
    if (proc.pid > 0) {
      kill(proc.pid, SIGKILL);
      proc.wait(10s);
    }
  }
  // What the daemon says of itself (one client more: the asking one).
  uroce::service::StatsReply stats() const {
    std::string e;
    auto c = uroce::service::Client::connect(socket, e);
    uroce::service::StatsReply s{};
    if (!c) return s;
    uroce::service::Request req;
    req.op = uroce::service::Op::kStats;
    uroce::service::Reply reply;
    if (c->call(req, reply, nullptr, 0, nullptr, e) == 0) s = reply.stats;
    return s;
  }
};

// Two daemons joined by memif, for the whole suite (a memif peer that goes
// away and comes back is a DPDK corner of its own; see README).
class Service : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/uroce-service-XXXXXX";
    dir_ = mkdtemp(tmpl);
    a_ = new Daemon(dir_, "a", true, 0);
    std::this_thread::sleep_for(300ms);
    b_ = new Daemon(dir_, "b", false, 1);
    std::this_thread::sleep_for(1s);  // the memif link comes up
  }
  static void TearDownTestSuite() {
    delete b_;
    delete a_;
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  void SetUp() override {
    ASSERT_EQ(a_->error, "");
    ASSERT_EQ(b_->error, "");
  }
  // ibverbs_rc's two sides, one on each daemon, exchanging through `tag`'s folder.
  static std::pair<Process, Process> verbs_pair(const std::string& tag) {
    const std::string d = dir_ + "/" + tag;
    std::system(("mkdir -p '" + d + "'").c_str());
    Process s = spawn(env_lib() + "UROCE_SERVICE=" + a_->socket + " timeout 90 " UROCE_IBVERBS_RC " memif server " + d,
                      d + "/server.log");
    std::this_thread::sleep_for(200ms);
    Process c = spawn(env_lib() + "UROCE_SERVICE=" + b_->socket + " timeout 90 " UROCE_IBVERBS_RC " memif client " + d,
                      d + "/client.log");
    return {s, c};
  }
  static std::string dir_;
  static Daemon* a_;
  static Daemon* b_;
};
std::string Service::dir_;
Daemon* Service::a_ = nullptr;
Daemon* Service::b_ = nullptr;

void expect_passed(Process& p) {
  const int rc = p.wait();
  const std::string out = p.out();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all checks passed"), std::string::npos) << out;
}

TEST_F(Service, TwoClientsEachWithAPeerRunEveryVerbWithDataVerified) {
  auto [s1, c1] = verbs_pair("one");
  auto [s2, c2] = verbs_pair("two");
  expect_passed(s1);
  expect_passed(c1);
  expect_passed(s2);
  expect_passed(c2);
}

TEST_F(Service, StockRcPingpongAndWriteBwRunThroughTheDaemons) {
  struct Case {
    std::string args;
    std::string marker;
  };
  const Case cases[] = {{"ibv_rc_pingpong -d uroce0 -g 1 -p 18801 -n 500", "iters in"},
                        {"ibv_rc_pingpong -d uroce0 -g 1 -p 18802 -n 200 -e -s 65536", "iters in"},
                        {"ib_write_bw -d uroce0 -x 1 -p 18803 -s 65536 -n 2000 --report_gbits", "65536"}};
  for (const Case& k : cases) {
    const std::string tag = k.args.substr(0, k.args.find(' '));
    Process s = spawn(std::string(UROCE_RUN) + " --service --socket " + a_->socket + " timeout 60 " + k.args,
                      dir_ + "/stock-s.log");
    std::this_thread::sleep_for(1s);
    Process c = spawn(std::string(UROCE_RUN) + " --service --socket " + b_->socket + " timeout 60 " + k.args +
                          " 127.0.0.1",
                      dir_ + "/stock-c.log");
    const int rc = c.wait(), rs = s.wait();
    EXPECT_EQ(rc, 0) << k.args << "\n" << c.out();
    EXPECT_EQ(rs, 0) << k.args << "\n" << s.out();
    EXPECT_NE(c.out().find(k.marker), std::string::npos) << c.out();
  }
}

TEST_F(Service, AClientKilledMidTransferHarmsNobody) {
  const uroce::service::StatsReply before = a_->stats();
  // The victim: ib_write_bw for 6 s between the daemons, killed after 2 s.
  Process vs = spawn(std::string(UROCE_RUN) + " --service --socket " + a_->socket +
                         " ib_write_bw -d uroce0 -x 1 -p 18810 -s 65536 -D 6",
                     dir_ + "/victim-s.log");
  std::this_thread::sleep_for(1s);
  Process vc = spawn(std::string(UROCE_RUN) + " --service --socket " + b_->socket +
                         " ib_write_bw -d uroce0 -x 1 -p 18810 -s 65536 -D 6 127.0.0.1",
                     dir_ + "/victim-c.log");
  std::this_thread::sleep_for(1500ms);
  // The survivors: client pairs one after another, every byte verified,
  // from before the kill until well after it.
  std::atomic<bool> killed{false};
  std::atomic<int> rounds_after_kill{0};
  std::vector<std::string> failures;
  std::thread survivors([&] {
    for (int round = 0; round < 40 && rounds_after_kill < 3; ++round) {
      const bool after = killed.load();
      auto [s, c] = verbs_pair("survivor" + std::to_string(round));
      const int rs = s.wait(), rc = c.wait();
      if (rs != 0 || rc != 0) failures.push_back(s.out() + c.out());
      if (after) ++rounds_after_kill;
    }
  });
  std::this_thread::sleep_for(700ms);
  const uroce::service::StatsReply during = a_->stats();
  EXPECT_GE(during.qps, 2u) << "victim and a survivor both hold QPs on daemon a";
  kill(vs.pid, SIGKILL);
  killed = true;
  EXPECT_EQ(vs.wait(), -SIGKILL);
  survivors.join();
  EXPECT_GE(rounds_after_kill.load(), 3);
  EXPECT_TRUE(failures.empty()) << failures.front();
  vc.wait(60s);  // its peer is gone: it ends in retry errors, or with its duration
  // Everything the victim had is back: the daemon's counts are as before.
  uroce::service::StatsReply after{};
  for (int i = 0; i < 100; ++i) {
    after = a_->stats();
    if (after.qps == before.qps && after.mrs == before.mrs) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(after.clients, before.clients);
  EXPECT_EQ(after.qps, before.qps);
  EXPECT_EQ(after.cqs, before.cqs);
  EXPECT_EQ(after.mrs, before.mrs);
  EXPECT_EQ(after.pds, before.pds);
  EXPECT_EQ(after.mapped_bytes, before.mapped_bytes);
  // And new clients attach and work.
  auto [s2, c2] = verbs_pair("after-kill");
  expect_passed(s2);
  expect_passed(c2);
}

// A raw connection to the daemon's socket.
int raw_connect(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

uroce::service::Reply exchange(int fd, const void* msg, std::size_t len) {
  uroce::service::Reply reply;
  reply.error = -1;
  if (send(fd, msg, len, MSG_NOSIGNAL) != static_cast<ssize_t>(len)) return reply;
  if (recv(fd, &reply, sizeof reply, 0) != static_cast<ssize_t>(sizeof reply)) reply.error = -2;
  return reply;
}

TEST_F(Service, GarbageOnTheControlSocketGetsAClearErrorAndTheDaemonServesOn) {
  const int fd = raw_connect(a_->socket);
  ASSERT_GE(fd, 0);
  const char garbage[] = "\x01\x02garbage";
  uroce::service::Reply r = exchange(fd, garbage, sizeof garbage);
  EXPECT_EQ(r.error, EPROTO);
  EXPECT_NE(std::string(r.message).find("malformed request"), std::string::npos) << r.message;
  uroce::service::Request bad;
  std::memset(static_cast<void*>(&bad), 0xa5, sizeof bad);
  r = exchange(fd, &bad, sizeof bad);
  EXPECT_EQ(r.error, EINVAL);
  EXPECT_NE(std::string(r.message).find("unknown request"), std::string::npos) << r.message;
  // A create_qp naming handles that were never made.
  uroce::service::Request qp;
  qp.op = uroce::service::Op::kCreateQp;
  qp.create_qp.pd = 77;
  r = exchange(fd, &qp, sizeof qp);
  EXPECT_EQ(r.error, EINVAL);
  close(fd);
  // The daemon still serves: a full client pair works.
  auto [s, c] = verbs_pair("after-garbage");
  expect_passed(s);
  expect_passed(c);
}

TEST_F(Service, AClientCannotNameAnotherClientsObjects) {
  std::string error;
  auto a = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(a) << error;
  auto b = uroce::service::Client::connect(a_->socket, error);
  ASSERT_TRUE(b) << error;
  uroce::ProtectionDomain* pd = a->alloc_pd();
  ASSERT_NE(pd, nullptr);
  uroce::CompletionQueue* cq = a->create_cq(16);
  ASSERT_NE(cq, nullptr);
  // Anonymous pages of its own, not the heap: see README on moving the heap's top.
  auto* buf = static_cast<char*>(mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  uroce::MemoryRegion* mr = pd->reg_mr(buf, 8192, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << a->last_error();
  // b names a's objects by a's handles: unknown to the daemon in b's table.
  uroce::service::Request req;
  uroce::service::Reply reply;
  std::string why;
  req.op = uroce::service::Op::kDeallocPd;
  req.handle = pd->handle();
  EXPECT_EQ(b->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  EXPECT_NE(why.find("no PD"), std::string::npos) << why;
  for (std::uint32_t h = 1; h < 8; ++h) {  // every small handle: a's PD, CQ and MR among them
    req.op = uroce::service::Op::kDeregMr;
    req.handle = h;
    EXPECT_EQ(b->call(req, reply, nullptr, 0, nullptr, why), EINVAL) << h;
    req.op = uroce::service::Op::kDestroyCq;
    EXPECT_EQ(b->call(req, reply, nullptr, 0, nullptr, why), EINVAL) << h;
  }
  req = uroce::service::Request{};
  req.op = uroce::service::Op::kCreateQp;
  req.create_qp.pd = pd->handle();
  req.create_qp.send_cq = req.create_qp.recv_cq = 2;
  req.create_qp.cap.max_send_wr = req.create_qp.cap.max_recv_wr = 4;
  req.create_qp.cap.max_send_sge = req.create_qp.cap.max_recv_sge = 1;
  EXPECT_EQ(b->call(req, reply, nullptr, 0, nullptr, why), EINVAL);
  EXPECT_NE(why.find("not this client's"), std::string::npos) << why;
  // a's objects are untouched: a can still use and free them.
  uroce::QpInitAttr attr;
  attr.send_cq = attr.recv_cq = cq;
  attr.cap = {4, 4, 1, 1, 0};
  uroce::QueuePair* q = pd->create_qp(attr);
  ASSERT_NE(q, nullptr) << a->last_error();
  EXPECT_EQ(pd->destroy_qp(q), 0);
  EXPECT_EQ(pd->dereg_mr(mr), 0) << a->last_error();
  EXPECT_EQ(a->destroy_cq(cq), 0) << a->last_error();
  EXPECT_EQ(a->dealloc_pd(pd), 0) << a->last_error();
}

// A registered region lives on a shared memory file at the same addresses:
// its bytes and those around it in its pages are kept; a second region in
// the same pages shares the file; one overlapping part of them is refused.
TEST_F(Service, RegisteredMemoryKeepsItsBytesAndMovesWithWholePages) {
  std::string error;
  auto ctx = uroce::Context::attach(a_->socket, error);
  ASSERT_TRUE(ctx) << error;
  const long page = sysconf(_SC_PAGESIZE);
  auto* block = static_cast<std::uint8_t*>(mmap(nullptr, 8 * page, PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(block, MAP_FAILED);
  for (long i = 0; i < 8 * page; ++i) block[i] = static_cast<std::uint8_t>(i * 7 + 3);
  uroce::ProtectionDomain* pd = ctx->alloc_pd();
  ASSERT_NE(pd, nullptr);
  // [page + 100, 3 pages + 50): four pages move, partly covered at both ends.
  uroce::MemoryRegion* mr = pd->reg_mr(block + page + 100, 2 * page - 50, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << ctx->last_error();
  for (long i = 0; i < 8 * page; ++i) {
    ASSERT_EQ(block[i], static_cast<std::uint8_t>(i * 7 + 3)) << "byte " << i << " changed by the move";
  }
  EXPECT_NE(read_file("/proc/self/maps").find("uroce-mr"), std::string::npos) << "no shared file over the region";
  const std::uint64_t mapped = a_->stats().mapped_bytes;
  uroce::MemoryRegion* inner = pd->reg_mr(block + page + 4000, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(inner, nullptr) << ctx->last_error();
  EXPECT_EQ(a_->stats().mapped_bytes, mapped) << "a region inside the same pages shares their file";
  EXPECT_EQ(pd->reg_mr(block + 3 * page, 2 * page, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_NE(ctx->last_error().find("overlap part of an earlier registration"), std::string::npos)
      << ctx->last_error();
  // A file mapping is not moved.
  char tmpl[] = "/tmp/uroce-service-file-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_EQ(ftruncate(fd, page), 0);
  void* file = mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  EXPECT_EQ(pd->reg_mr(file, 64, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_NE(ctx->last_error().find("not private anonymous memory"), std::string::npos) << ctx->last_error();
  munmap(file, static_cast<std::size_t>(page));
  close(fd);
  unlink(tmpl);
  // fork: the moved pages are shared with a child (documented), where
  // private memory would be copy-on-write.
  const pid_t child = fork();
  if (child == 0) {
    block[page + 200] = 0x5a;
    _exit(0);
  }
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_EQ(block[page + 200], 0x5a) << "a child's write to a registered page is seen (MAP_SHARED)";
  block[page + 200] = static_cast<std::uint8_t>((page + 200) * 7 + 3);
  EXPECT_EQ(pd->dereg_mr(inner), 0);
  EXPECT_EQ(pd->dereg_mr(mr), 0);
  EXPECT_EQ(block[page + 100], static_cast<std::uint8_t>((page + 100) * 7 + 3)) << "dereg keeps the contents";
  // Freed and registered again over part of those pages and beyond (a heap
  // reusing memory): the old file is merged into a new one, bytes kept.
  uroce::MemoryRegion* again = pd->reg_mr(block + 3 * page, 3 * page, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(again, nullptr) << ctx->last_error();
  for (long i = 0; i < 8 * page; ++i) {
    ASSERT_EQ(block[i], static_cast<std::uint8_t>(i * 7 + 3)) << "byte " << i << " changed by the merge";
  }
  EXPECT_EQ(pd->dereg_mr(again), 0);
  EXPECT_EQ(ctx->dealloc_pd(pd), 0);
}

TEST_F(Service, WithForkSafetyAChildDoesNotGetRegisteredPages) {
  // RDMAV_FORK_SAFE as rdma-core reads it: MADV_DONTFORK on registered
  // pages, so the child faults on them instead of sharing them.
  const pid_t child = fork();
  if (child == 0) {
    setenv("RDMAV_FORK_SAFE", "1", 1);
    std::string error;
    auto ctx = uroce::Context::attach(a_->socket, error);
    if (!ctx) _exit(3);
    const long page = sysconf(_SC_PAGESIZE);
    auto* block = static_cast<volatile std::uint8_t*>(
        mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    block[0] = 1;
    uroce::ProtectionDomain* pd = ctx->alloc_pd();
    if (pd == nullptr || pd->reg_mr(const_cast<std::uint8_t*>(block), 64, IBV_ACCESS_LOCAL_WRITE) == nullptr) _exit(4);
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      signal(SIGSEGV, SIG_DFL);
      block[0] = 2;  // not mapped in this process
      _exit(0);
    }
    int st = 0;
    waitpid(grandchild, &st, 0);
    _exit(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV ? 0 : 5);
  }
  int st = 0;
  waitpid(child, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "3: no attach, 4: no region, 5: the grandchild had the pages";
}

// A daemon of its own with small limits, and what SIGTERM does.
TEST(ServiceLimits, PerClientLimitsGiveAClearErrorAndSigtermEndsCleanly) {
  char tmpl[] = "/tmp/uroce-service-limits-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  {
    Daemon d(dir, "limits", true, 1, "--max-qps 1 --max-mrs 1 --max-cqs 2");
    ASSERT_EQ(d.error, "");
    std::string error;
    auto ctx = uroce::Context::attach(d.socket, error);
    ASSERT_TRUE(ctx) << error;
    uroce::ProtectionDomain* pd = ctx->alloc_pd();
    ASSERT_NE(pd, nullptr);
    uroce::CompletionQueue* cq = ctx->create_cq(8);
    ASSERT_NE(cq, nullptr);
    ASSERT_NE(ctx->create_cq(8), nullptr);
    EXPECT_EQ(ctx->create_cq(8), nullptr);
    EXPECT_NE(ctx->last_error().find("max_cqs"), std::string::npos) << ctx->last_error();
    uroce::QpInitAttr attr;
    attr.send_cq = attr.recv_cq = cq;
    attr.cap = {4, 4, 1, 1, 0};
    uroce::QueuePair* q = pd->create_qp(attr);
    ASSERT_NE(q, nullptr) << ctx->last_error();
    EXPECT_EQ(pd->create_qp(attr), nullptr);
    EXPECT_NE(ctx->last_error().find("max_qps"), std::string::npos) << ctx->last_error();
    attr.qp_type = IBV_QPT_UD;
    EXPECT_EQ(pd->create_qp(attr), nullptr);
    auto* buf = static_cast<char*>(mmap(nullptr, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(pd->reg_mr(buf, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr) << ctx->last_error();
    EXPECT_EQ(pd->reg_mr(buf + 8192, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_NE(ctx->last_error().find("max_mrs"), std::string::npos) << ctx->last_error();
    // SIGTERM: the QP goes to error, the client is told (its next call
    // fails with a clear message), the daemon exits 0.
    const std::string sock = d.socket;
    EXPECT_EQ(d.stop(), 0) << d.proc.out();
    EXPECT_EQ(ctx->create_cq(8), nullptr);
    EXPECT_NE(ctx->last_error().find("uroced"), std::string::npos) << ctx->last_error();
    EXPECT_NE(access(sock.c_str(), F_OK), 0) << "the socket file is removed";
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(ServiceLimits, NoDaemonGivesOneLineSayingWhatToDo) {
  std::string error;
  auto ctx = uroce::Context::attach("/tmp/uroce-no-such-daemon.sock", error);
  EXPECT_FALSE(ctx);
  EXPECT_NE(error.find("start the daemon"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

}  // namespace
