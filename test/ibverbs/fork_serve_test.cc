// A process that runs uroce in-process (it owns the port) and forks serves
// its children as uroced serves its clients (lib/ibverbs/fork_service.h):
// each child opens uroce0, attached to the owner over a socket of the
// owner's; the children's QPs and the owner's own share the one port and
// engines, and talk to each other through the device's loopback (memif with
// no peer: nothing comes back from the wire). Our libibverbs in this process.
//
// Each case runs in a child of this test process of its own (the owner), so
// that each starts from a process that has not touched the device.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "support/rc_connect.h"
#include "support/uroced.h"

namespace {

using namespace std::chrono_literals;

// 0 or the line number of the first step that failed: a process's exit code.
#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "fork_serve_test:%d: %s failed (errno %d)\n", __LINE__, #cond, errno); \
      return __LINE__ % 200 + 1;                                                             \
    }                                                                                        \
  } while (0)

// The owner's device: in-process, on a memif port nobody connects to.
void set_in_process(const std::string& dir) {
  const std::string eal = "--no-huge --no-shconf --no-pci -l 0 -m 256 --log-level=lib.eal:error --vdev=net_memif0,role=server,socket=" +
                          dir + "/memif.sock --file-prefix=uroce-fserve-" + std::to_string(getpid());
  setenv("UROCE_EAL", eal.c_str(), 1);
  setenv("UROCE_IP", "10.0.0.1/24", 1);
  unsetenv("UROCE_SERVICE");
  unsetenv("UROCE_FORK_SERVE");
}

ibv_context* open_uroce0() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n != 1) {
    if (list != nullptr) ibv_free_device_list(list);
    return nullptr;
  }
  ibv_context* c = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  return c;
}

// This process's threads named `name` (uroce's are named: uroce-serve).
int threads_named(const char* name) {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string comm;
    std::getline(in, comm);
    if (comm == name) ++n;
  }
  closedir(d);
  return n;
}

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

// What one end tells the other: its QP and where the peer may write.
struct Info {
  std::uint32_t qpn = 0;
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  ibv_gid gid{};
};

// A one-way pipe pair between two processes.
struct Link {
  int to_peer = -1, from_peer = -1;
};

bool send_all(int fd, const void* p, std::size_t n) { return write(fd, p, n) == static_cast<ssize_t>(n); }
bool recv_all(int fd, void* p, std::size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool poll_one(ibv_cq* cq, ibv_wc& wc) {
  for (const auto end = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < end;) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return false;
    if (n == 1) return true;
    usleep(100);
  }
  return false;
}

// One RC end on `c` talking to the end at the other side of `link`: each
// RDMA WRITEs "write from <name>" into the peer's buffer, then SENDs "send
// from <name>"; each checks both of the peer's arrived, byte for byte (the
// WRITE is visible once the SEND after it completes: IBTA C9-28, RC
// requests execute in order). 0 or a step's line.
int exchange(ibv_context* c, const Link& link, const char* name, const char* peer_name) {
  ibv_pd* pd = ibv_alloc_pd(c);
  CHECK(pd != nullptr);
  ibv_cq* cq = ibv_create_cq(c, 16, nullptr, nullptr, 0);
  CHECK(cq != nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(pd, &ia);
  CHECK(qp != nullptr);
  void* buf = nullptr;
  CHECK(posix_memalign(&buf, 4096, 4 * 4096) == 0);
  std::memset(buf, 0, 4 * 4096);
  char* written = static_cast<char*>(buf);  // the peer's WRITE lands here
  char* received = written + 4096;          // its SEND here
  char* out = written + 2 * 4096;           // what this end sends from
  ibv_mr* mr = ibv_reg_mr(pd, buf, 4 * 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(mr != nullptr);
  ibv_sge rs{reinterpret_cast<std::uintptr_t>(received), 4096, mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 3;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;

  Info mine;
  mine.qpn = qp->qp_num;
  mine.addr = reinterpret_cast<std::uintptr_t>(written);
  mine.rkey = mr->rkey;
  CHECK(ibv_query_gid(c, 1, 1, &mine.gid) == 0);
  Info peer;
  CHECK(send_all(link.to_peer, &mine, sizeof mine) && recv_all(link.from_peer, &peer, sizeof peer));
  CHECK(uroce::test::rc_to_rts(qp, peer.qpn, peer.gid) == 0);
  ibv_recv_wr* bad_r = nullptr;
  CHECK(ibv_post_recv(qp, &rwr, &bad_r) == 0);  // not in RESET (IBTA 10.8.2)
  char step = 'r';  // both in RTS, their receives posted, before either sends
  CHECK(send_all(link.to_peer, &step, 1) && recv_all(link.from_peer, &step, 1));

  std::snprintf(out, 64, "write from %s", name);
  std::snprintf(out + 64, 64, "send from %s", name);
  ibv_sge ws{reinterpret_cast<std::uintptr_t>(out), 64, mr->lkey};
  ibv_sge ss{reinterpret_cast<std::uintptr_t>(out + 64), 64, mr->lkey};
  ibv_send_wr send{};
  send.wr_id = 2;
  send.sg_list = &ss;
  send.num_sge = 1;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr write{};
  write.wr_id = 1;
  write.sg_list = &ws;
  write.num_sge = 1;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.send_flags = IBV_SEND_SIGNALED;
  write.wr.rdma.remote_addr = peer.addr;
  write.wr.rdma.rkey = peer.rkey;
  write.next = &send;
  ibv_send_wr* bad_s = nullptr;
  CHECK(ibv_post_send(qp, &write, &bad_s) == 0);
  bool wrote = false, sent = false, got = false;
  for (int i = 0; i < 3; ++i) {
    ibv_wc wc{};
    CHECK(poll_one(cq, wc));
    CHECK(wc.status == IBV_WC_SUCCESS);
    if (wc.wr_id == 1) wrote = wc.opcode == IBV_WC_RDMA_WRITE;
    if (wc.wr_id == 2) sent = wc.opcode == IBV_WC_SEND;
    if (wc.wr_id == 3) got = wc.opcode == IBV_WC_RECV && wc.byte_len == 64;
  }
  CHECK(wrote && sent && got);
  const std::string want_write = std::string("write from ") + peer_name;
  const std::string want_send = std::string("send from ") + peer_name;
  CHECK(want_write == written);
  CHECK(want_send == received);
  // Neither end's QP goes while the other may still wait for an ACK.
  step = 'd';
  CHECK(send_all(link.to_peer, &step, 1) && recv_all(link.from_peer, &step, 1));
  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  std::free(buf);
  return 0;
}

// Two pipes: the two ends of a Link.
struct Wire {
  int ab[2] = {-1, -1}, ba[2] = {-1, -1};
  bool open() { return pipe(ab) == 0 && pipe(ba) == 0; }
  Link a() const { return {ab[1], ba[0]}; }
  Link b() const { return {ba[1], ab[0]}; }
};

template <typename F>
pid_t fork_running(F body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  return pid;
}

TEST(ForkServe, TwoChildrenOfAnInProcessOwnerRunRcSendAndWriteBetweenThem) {
  uroce::test::TempDir dir("/tmp/uroce-fserve-");
  const int rc = uroce::test::run_in_child(
      [&] {
        set_in_process(dir.dir);
        ibv_context* c = open_uroce0();
        CHECK(c != nullptr);
        // No fork yet: no service thread.
        CHECK(threads_named("uroce-serve") == 0);
        Wire w;
        CHECK(w.open());
        int where[2];
        CHECK(pipe(where) == 0);
        const pid_t one = fork_running([&] {
          ibv_context* cc = open_uroce0();
          CHECK(cc != nullptr);
          // Attached to the owner: UROCE_SERVICE names its socket now.
          const char* s = std::getenv("UROCE_SERVICE");
          CHECK(s != nullptr);
          char path[108] = {};
          std::snprintf(path, sizeof path, "%s", s);
          CHECK(send_all(where[1], path, sizeof path));
          if (const int e = exchange(cc, w.a(), "one", "two"); e != 0) return e;
          return ibv_close_device(cc) == 0 ? 0 : 150;
        });
        const pid_t two = fork_running([&] {
          ibv_context* cc = open_uroce0();
          CHECK(cc != nullptr);
          if (const int e = exchange(cc, w.b(), "two", "one"); e != 0) return e;
          return ibv_close_device(cc) == 0 ? 0 : 151;
        });
        char path[108] = {};
        const bool told = recv_all(where[0], path, sizeof path);
        CHECK(threads_named("uroce-serve") == 1);
        const int first = uroce::test::wait_exit(one, 90s);
        const int second = uroce::test::wait_exit(two, 90s);
        CHECK(first == 0);
        CHECK(second == 0);
        CHECK(told);
        // The owner's socket: in a folder only its uid can enter.
        const std::string socket = path;
        const std::string folder = socket.substr(0, socket.rfind('/'));
        struct stat st {};
        CHECK(stat(folder.c_str(), &st) == 0 && (st.st_mode & 0777) == 0700 && st.st_uid == geteuid());
        CHECK(exists(socket));
        // The last close with no child attached ends the service: its
        // thread, its socket and its folder.
        for (const auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;) {
          usleep(50 * 1000);  // the loop publishes the children's leaving within a tick
          if (ibv_close_device(c) != 0) return 160;
          c = nullptr;
          if (!exists(socket)) break;
          c = open_uroce0();  // a child still counted: close again a moment later
          CHECK(c != nullptr);
        }
        CHECK(c == nullptr);
        CHECK(!exists(socket) && !exists(folder));
        CHECK(threads_named("uroce-serve") == 0);
        return 0;
      },
      180s);
  EXPECT_EQ(rc, 0);
}

TEST(ForkServe, TheOwnersOwnQpTalksToAChildsQp) {
  uroce::test::TempDir dir("/tmp/uroce-fserve-");
  const int rc = uroce::test::run_in_child(
      [&] {
        set_in_process(dir.dir);
        ibv_context* c = open_uroce0();
        CHECK(c != nullptr);
        Wire w;
        CHECK(w.open());
        const pid_t child = fork_running([&] {
          ibv_context* cc = open_uroce0();
          CHECK(cc != nullptr);
          if (const int e = exchange(cc, w.b(), "child", "owner"); e != 0) return e;
          return ibv_close_device(cc) == 0 ? 0 : 150;
        });
        const int mine = exchange(c, w.a(), "owner", "child");
        const int theirs = uroce::test::wait_exit(child, 90s);
        if (mine != 0) return mine;
        CHECK(theirs == 0);
        // The owner keeps working after its child is gone.
        Wire again;
        CHECK(again.open());
        const pid_t second = fork_running([&] {
          ibv_context* cc = open_uroce0();
          CHECK(cc != nullptr);
          if (const int e = exchange(cc, again.b(), "second", "owner"); e != 0) return e;
          return ibv_close_device(cc) == 0 ? 0 : 151;
        });
        const int mine2 = exchange(c, again.a(), "owner", "second");
        const int theirs2 = uroce::test::wait_exit(second, 90s);
        if (mine2 != 0) return mine2;
        CHECK(theirs2 == 0);
        CHECK(ibv_close_device(c) == 0);
        return 0;
      },
      180s);
  EXPECT_EQ(rc, 0);
}

// An owner that exits (from a signal handler, as qperf's does) while a child
// is attached: the exit handler stops the service, the socket and its
// folder go, the child's connection closes; nothing hangs.
TEST(ForkServe, AnOwnerThatExitsWithAChildAttachedRemovesItsSocket) {
  uroce::test::TempDir dir("/tmp/uroce-fserve-");
  int where[2];
  ASSERT_EQ(pipe(where), 0);
  const int rc = uroce::test::run_in_child(
      [&] {
        close(where[0]);
        set_in_process(dir.dir);
        ibv_context* c = open_uroce0();
        CHECK(c != nullptr);
        int hold[2], ready[2];
        CHECK(pipe(hold) == 0 && pipe(ready) == 0);
        const pid_t child = fork_running([&] {
          close(hold[1]);
          ibv_context* cc = open_uroce0();
          CHECK(cc != nullptr);
          ibv_pd* pd = ibv_alloc_pd(cc);
          CHECK(pd != nullptr);
          char path[108] = {};
          std::snprintf(path, sizeof path, "%s", std::getenv("UROCE_SERVICE"));
          CHECK(send_all(where[1], path, sizeof path));
          CHECK(send_all(ready[1], "r", 1));
          char x;
          [[maybe_unused]] const ssize_t n = read(hold[0], &x, 1);  // end of file: the owner is gone
          // The owner's service went with it: this child's calls fail, at once.
          CHECK(ibv_alloc_pd(cc) == nullptr);
          CHECK(send_all(where[1], "k", 1));  // this child is not the test's to wait for: it says
          return 0;
        });
        close(hold[0]);
        char r;
        CHECK(recv_all(ready[0], &r, 1));
        // exit() from a signal handler, with a context open and a child attached.
        signal(SIGALRM, [](int) { std::exit(0); });
        alarm(1);
        for (;;) pause();
        (void)child;
      },
      60s);
  close(where[1]);
  EXPECT_EQ(rc, 0);
  char path[108] = {};
  ASSERT_TRUE(recv_all(where[0], path, sizeof path));
  const std::string socket = path;
  ASSERT_FALSE(socket.empty());
  EXPECT_FALSE(exists(socket)) << socket;
  EXPECT_FALSE(exists(socket.substr(0, socket.rfind('/'))));
  // The orphaned child's verdict ('k'), or end of file if it failed or died.
  pollfd pfd{where[0], POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 30000), 1) << "the child neither answered nor ended";
  char verdict = 0;
  EXPECT_EQ(read(where[0], &verdict, 1), 1);
  EXPECT_EQ(verdict, 'k');
  close(where[0]);
}

// The socket's folder is the owner's uid's alone (0700), and the server
// takes only that uid: a child that has become another user gets no device.
TEST(ForkServe, AChildOfAnotherUidGetsNoDevice) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (a child that changes its uid)";
  uroce::test::TempDir dir("/tmp/uroce-fserve-");
  const int rc = uroce::test::run_in_child(
      [&] {
        set_in_process(dir.dir);
        ibv_context* c = open_uroce0();
        CHECK(c != nullptr);
        const pid_t child = fork_running([&] {
          CHECK(setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0);
          int n = -1;
          ibv_device** list = ibv_get_device_list(&n);
          CHECK(list != nullptr && n == 0);
          ibv_free_device_list(list);
          return 0;
        });
        CHECK(uroce::test::wait_exit(child, 30s) == 0);
        CHECK(ibv_close_device(c) == 0);
        return 0;
      },
      120s);
  EXPECT_EQ(rc, 0);
}

}  // namespace
