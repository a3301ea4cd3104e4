// uroced's connections, replies and budgets, tried as a local attacker would
// (issue 25: H4, M2, L2, L3, L4). A client that sends and never reads its
// replies; one user's many connections, idle or attached, against another
// user's attach (the other user: a child that setuid()s to 65534); a
// connection that never says hello; PDs without end; what --stats tells
// another user; the socket's path swapped for a link or a file.
// Each daemon is alone on a memif port nobody joins: only its control
// socket matters here.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "service/protocol.h"
#include "service/shm.h"
#include "support/uroced.h"

namespace {

using namespace std::chrono_literals;
namespace svc = uroce::service;
using Clock = std::chrono::steady_clock;

constexpr uid_t kNobody = 65534;

uroce::test::TempDir make_dir(const char* name, mode_t mode) {
  return uroce::test::TempDir(std::string("/tmp/uroce-svcconn-") + name + "-", mode);
}

// A uroced alone on a memif server port, its socket in `dir`, its output in
// NAME.log there.
struct Daemon : uroce::test::Uroced {
  Daemon(const std::string& dir, const std::string& name, const std::string& extra)
      : Uroced({.eal = "--no-huge --no-shconf --no-pci -m 256 --log-level=lib.eal:error -l 1 --vdev=net_memif0,"
                       "role=server,socket=" + dir + "/" + name + "-memif.sock,bsize=8192",
                .prefix = "uroce-svcconn-" + name + "-" + std::to_string(getpid()),
                .ip = "10.0.0.1/24",
                .socket = dir + "/" + name + ".sock",
                .log = dir + "/" + name + ".log",
                .extra = extra}) {}
};

// --- A client that speaks the protocol itself, as a hostile one does ---------------

int raw_connect(const std::string& path) {
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(s);
    return -1;
  }
  timeval tv{5, 0};  // a send never waits longer
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return s;
}

// One call: the reply's error; -1 no reply within `limit`; -2 the daemon
// closed the connection (or it broke). Descriptors that come back are closed.
int call(int sock, const svc::Request& req, svc::Reply& reply, std::chrono::milliseconds limit = 5000ms) {
  if (svc::send_message(sock, &req, sizeof req, nullptr, 0) != 0) return -2;
  pollfd p{sock, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(limit.count())) <= 0) return -1;
  int fds[svc::kMaxFds];
  int n = 0;
  const long len = svc::recv_message(sock, &reply, sizeof reply, fds, svc::kMaxFds, n);
  for (int i = 0; i < n; ++i) close(fds[i]);
  return len == static_cast<long>(sizeof reply) ? reply.error : -2;
}

int hello(int sock, std::string* why = nullptr) {
  svc::Request req;
  req.op = svc::Op::kHello;
  svc::Reply reply;
  const int e = call(sock, req, reply);
  if (why != nullptr) *why = reply.message;
  return e;
}

// A handle of a new object (0 if refused, its reason in `why`).
std::uint32_t make(int sock, svc::Op op, std::string* why = nullptr, std::uint32_t pd = 0, std::uint32_t cq = 0) {
  svc::Request req;
  req.op = op;
  if (op == svc::Op::kCreateCq) req.create_cq.cqe = 1;
  if (op == svc::Op::kCreateQp) {
    req.create_qp = svc::CreateQp{};
    req.create_qp.pd = pd;
    req.create_qp.send_cq = req.create_qp.recv_cq = cq;
    req.create_qp.cap = ibv_qp_cap{1, 1, 1, 1, 0};
  }
  svc::Reply reply;
  const int e = call(sock, req, reply);
  if (why != nullptr) *why = e == 0 ? "" : "error " + std::to_string(e) + ": " + reply.message;
  return e == 0 ? reply.handle : 0;
}

// Runs `body` in a child process as uid and gid 65534 with no other
// groups; its exit code (-1000 if it did not end within `limit`). `body`
// prints what it saw to stderr.
int as_nobody(const std::function<int()>& body, std::chrono::seconds limit = 60s) {
  return uroce::test::run_in_child(
      [&] {
        if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) return 99;
        return body();
      },
      limit);
}

// uid 65534 attaches (hello answered): 0, or 1 with why on stderr.
int nobody_attaches(const std::string& path) {
  const int s = raw_connect(path);
  std::string why;
  const int e = s < 0 ? -3 : hello(s, &why);
  if (e != 0) std::fprintf(stderr, "uid 65534: hello: %d %s\n", e, why.c_str());
  return e == 0 ? 0 : 1;
}

// Sends requests on `sock` (non-blocking, never reading a reply) until the
// daemon has taken none for `quiet`; how many were sent.
int flood_without_reading(int sock, std::chrono::milliseconds quiet) {
  svc::Request req;
  req.op = svc::Op::kQueryQp;
  req.handle = 12345;  // no such QP: an EINVAL reply each, a full Reply
  int sent = 0;
  auto quiet_since = Clock::now();
  for (auto end = Clock::now() + 30s; Clock::now() < end && Clock::now() - quiet_since < quiet;) {
    if (send(sock, &req, sizeof req, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof req)) {
      ++sent;
      quiet_since = Clock::now();
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
  return sent;
}

// True if the daemon closes its end of `sock` within `limit` (seen
// without reading: replies may still lie there unread).
bool closed_by_daemon(int sock, std::chrono::milliseconds limit) {
  for (auto end = Clock::now() + limit; Clock::now() < end;) {
    pollfd p{sock, POLLRDHUP, 0};
    if (poll(&p, 1, 100) > 0 && (p.revents & (POLLRDHUP | POLLHUP)) != 0) return true;
  }
  return false;
}

// --- One daemon for most of the tests: its socket admits every user ----------

class ServiceConn : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new uroce::test::TempDir("/tmp/uroce-svcconn-suite-", 0755);  // uid 65534 reaches the socket in it
    daemon_ = new Daemon(dir_->dir, "suite", "--socket-mode 0666");
  }
  static void TearDownTestSuite() {
    delete daemon_;
    delete dir_;
  }
  void SetUp() override { ASSERT_EQ(daemon_->error, ""); }
  // Until the daemon has let go of every connection the test made (it sees
  // them close when it next polls): only the asking one is left.
  void TearDown() override {
    for (auto end = Clock::now() + 15s; Clock::now() < end; std::this_thread::sleep_for(100ms)) {
      const int s = raw_connect(socket());
      svc::Request req;
      req.op = svc::Op::kStats;
      svc::Reply reply;
      const bool alone = s >= 0 && hello(s) == 0 && call(s, req, reply) == 0 && reply.stats.clients == 1;
      if (s >= 0) close(s);
      if (alone) return;
    }
  }
  static std::string socket() { return daemon_->socket; }
  static uroce::test::TempDir* dir_;
  static Daemon* daemon_;
};
uroce::test::TempDir* ServiceConn::dir_ = nullptr;
Daemon* ServiceConn::daemon_ = nullptr;

// H4: replies the attacker leaves unread never hold the daemon: another
// client is answered at once, and the attacker is dropped.
TEST_F(ServiceConn, AClientThatNeverReadsItsRepliesDelaysNobody) {
  const int attacker = raw_connect(socket());
  ASSERT_GE(attacker, 0);
  ASSERT_EQ(hello(attacker), 0);
  const int sent = flood_without_reading(attacker, 1500ms);
  EXPECT_GT(sent, 200) << "the daemon took only " << sent << " requests";
  const int victim = raw_connect(socket());
  ASSERT_GE(victim, 0);
  std::string why;
  EXPECT_EQ(hello(victim, &why), 0) << "another client's hello while " << sent << " replies lie unread: " << why;
  EXPECT_NE(make(victim, svc::Op::kAllocPd, &why), 0u) << why;
  close(victim);
  // The attacker's replies end with the daemon closing its connection.
  EXPECT_TRUE(closed_by_daemon(attacker, 20s)) << "a client that does not read its replies is never dropped";
  close(attacker);
}

// M2: 64 connections that never say hello (max_clients of them) keep
// nobody out, not even the same uid's next client.
TEST_F(ServiceConn, OneUidsIdleConnectionsKeepNoOtherUidOut) {
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    const int s = raw_connect(socket());
    if (s >= 0) idle.push_back(s);
  }
  ASSERT_EQ(idle.size(), 64u);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(as_nobody([&] { return nobody_attaches(socket()); }), 0) << "uid 65534 was refused";
  const int mine = raw_connect(socket());
  std::string why;
  EXPECT_EQ(hello(mine, &why), 0) << "the idle connections' own uid: " << why;
  close(mine);
  for (int s : idle) close(s);
}

// M2: one uid attaches as many clients as it can; another uid still gets in.
TEST_F(ServiceConn, OneUidsAttachedConnectionsKeepNoOtherUidOut) {
  std::vector<int> held;
  int refused = 0;
  std::string why;
  for (int i = 0; i < 64; ++i) {
    const int s = raw_connect(socket());
    ASSERT_GE(s, 0);
    std::string w;
    if (hello(s, &w) == 0) {
      held.push_back(s);
    } else {
      ++refused;
      why = w;
      close(s);
    }
  }
  EXPECT_GT(refused, 0) << "one uid attached " << held.size() << " clients";
  EXPECT_NE(why.find("uid_max_connections"), std::string::npos) << why;
  EXPECT_EQ(as_nobody([&] { return nobody_attaches(socket()); }), 0) << "uid 65534 was refused";
  for (int s : held) close(s);
}

// M2: a connection that never says hello does not hold a slot for long.
TEST_F(ServiceConn, AConnectionThatNeverSaysHelloIsClosed) {
  const int s = raw_connect(socket());
  ASSERT_GE(s, 0);
  EXPECT_TRUE(closed_by_daemon(s, 15s)) << "an idle connection is kept for good";
  close(s);
}

// M2: however many connections one uid opens, its QPs stop at its budget,
// far below the device's max_qp; another uid still makes QPs.
TEST_F(ServiceConn, OneUidCannotTakeTheDevicesQpsThroughManyConnections) {
  std::vector<int> conns;
  int qps = 0;
  std::string why;
  for (int c = 0; c < 6 && why.empty(); ++c) {
    const int s = raw_connect(socket());
    ASSERT_GE(s, 0);
    ASSERT_EQ(hello(s), 0);
    conns.push_back(s);
    const std::uint32_t pd = make(s, svc::Op::kAllocPd);
    const std::uint32_t cq = make(s, svc::Op::kCreateCq);
    ASSERT_TRUE(pd != 0 && cq != 0);
    for (int i = 0; i < 256; ++i) {
      std::string w;
      if (make(s, svc::Op::kCreateQp, &w, pd, cq) == 0) {
        if (w.find("max_qps") == std::string::npos || w.find("uid") != std::string::npos) why = w;
        break;  // this connection's own limit (max_qps) or the uid's
      }
      ++qps;
    }
  }
  EXPECT_NE(why.find("uid_max_qps"), std::string::npos) << qps << " QPs for one uid; " << why;
  EXPECT_LE(qps, 4096);
  EXPECT_EQ(as_nobody([&] {
              const int s = raw_connect(socket());
              std::string w;
              const std::uint32_t pd = s >= 0 && hello(s) == 0 ? make(s, svc::Op::kAllocPd, &w) : 0;
              const std::uint32_t cq = pd != 0 ? make(s, svc::Op::kCreateCq, &w) : 0;
              const std::uint32_t qp = cq != 0 ? make(s, svc::Op::kCreateQp, &w, pd, cq) : 0;
              if (qp == 0) std::fprintf(stderr, "uid 65534: %s\n", w.c_str());
              return qp != 0 ? 0 : 1;
            }),
            0);
  for (int s : conns) close(s);
}

// L3: PDs end somewhere, per client and per uid.
TEST_F(ServiceConn, PdsStopAtTheClientsAndTheUidsBudget) {
  std::vector<int> conns;
  int first = 0, all = 0;
  std::string why;
  for (int c = 0; c < 8 && why.find("uid_max_pds") == std::string::npos; ++c) {
    const int s = raw_connect(socket());
    ASSERT_GE(s, 0);
    ASSERT_EQ(hello(s), 0);
    conns.push_back(s);
    for (int i = 0; i < 2000; ++i) {
      if (make(s, svc::Op::kAllocPd, &why) == 0) break;
      ++all;
      first += c == 0;
    }
    if (c == 0) {
      EXPECT_NE(why.find("max_pds"), std::string::npos) << first << " PDs for one client; " << why;
      ASSERT_LT(first, 2000);
    }
  }
  EXPECT_NE(why.find("uid_max_pds"), std::string::npos) << all << " PDs for one uid; " << why;
  for (int s : conns) close(s);
}

// L2: --stats (kStats) as another user lists that user's clients only;
// root still sees everyone.
TEST_F(ServiceConn, AnotherUserSeesOnlyItsOwnClientsInStats) {
  const int root = raw_connect(socket());
  ASSERT_GE(root, 0);
  ASSERT_EQ(hello(root), 0);
  ASSERT_NE(make(root, svc::Op::kAllocPd), 0u);
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  std::thread root_side([&] {
    // While uid 65534's client is attached: root lists it.
    char b = 0;
    if (read(ready[0], &b, 1) == 1) {
      svc::Request req;
      req.op = svc::Op::kStats;
      svc::Reply reply;
      EXPECT_EQ(call(root, req, reply), 0);
      bool nobody = false;
      for (std::uint32_t i = 0; i < reply.stats.listed; ++i) nobody |= reply.stats.client[i].uid == kNobody;
      EXPECT_TRUE(nobody) << "root's --stats lists every client";
    }
    [[maybe_unused]] ssize_t w = write(done[1], "x", 1);
  });
  const int rc = as_nobody([&] {
    const int s = raw_connect(socket());
    if (s < 0 || hello(s) != 0) return 2;
    svc::Request req;
    req.op = svc::Op::kStats;
    svc::Reply reply;
    if (call(s, req, reply) != 0) return 3;
    int others = 0;
    for (std::uint32_t i = 0; i < reply.stats.listed; ++i) {
      const auto& c = reply.stats.client[i];
      if (c.uid != kNobody) {
        ++others;
        std::fprintf(stderr, "uid 65534 sees client %u: pid %d uid %u pds %u qpn %#x\n", c.id, c.pid, c.uid, c.pds,
                     c.qpn[0]);
      }
    }
    const svc::StatsReply& t = reply.stats;
    if (t.clients != 1 || t.pds != 0 || t.mrs != 0 || t.cqs != 0 || t.qps != 0 || t.mapped_bytes != 0) {
      std::fprintf(stderr, "uid 65534 sees totals: clients %u pds %u mrs %u cqs %u qps %u mapped %llu\n", t.clients,
                   t.pds, t.mrs, t.cqs, t.qps, static_cast<unsigned long long>(t.mapped_bytes));
      ++others;
    }
    [[maybe_unused]] ssize_t w = write(ready[1], "x", 1);
    char b;
    [[maybe_unused]] ssize_t r = read(done[0], &b, 1);
    return others == 0 ? 0 : 1;
  });
  close(ready[1]);  // the root side's read ends if the child never got there
  root_side.join();
  EXPECT_EQ(rc, 0) << "uid 65534 saw other users' clients (or could not ask)";
  for (int fd : {ready[0], done[0], done[1]}) close(fd);
  close(root);
}

// --- Daemons of their own -----------------------------------------------------------

// H4: SIGTERM is handled at once while a client leaves its replies unread.
TEST(ServiceConnAlone, SigtermEndsTheDaemonWhileAClientLeavesRepliesUnread) {
  const auto tmp = make_dir("term", 0755);
  const std::string& dir = tmp.dir;
  {
    Daemon d(dir, "term", "");
    ASSERT_EQ(d.error, "");
    const int attacker = raw_connect(d.socket);
    ASSERT_GE(attacker, 0);
    ASSERT_EQ(hello(attacker), 0);
    // Until the daemon stops taking requests: its replies fill our socket.
    const int sent = flood_without_reading(attacker, 500ms);
    ASSERT_GT(sent, 200);
    const auto t0 = Clock::now();
    kill(d.pid, SIGTERM);
    const int rc = d.exit_code(15s);
    EXPECT_EQ(rc, 0) << "uroced did not end on SIGTERM within 15 s while " << sent
                     << " requests were answered into a socket nobody reads";
    std::printf("  uroced ended %.2f s after SIGTERM\n", std::chrono::duration<double>(Clock::now() - t0).count());
    close(attacker);
  }
}

// M2/L3: a uid's own budgets from the configuration file ("uid.N.KEY").
TEST(ServiceConnAlone, AUidsOwnBudgetsComeFromTheConfigurationFile) {
  const auto tmp = make_dir("conf", 0755);
  const std::string& dir = tmp.dir;
  {
    std::ofstream(dir + "/uroced.conf") << "uid.65534.max_pds = 2\nuid.0.uid_max_connections = 2\n";
    Daemon d(dir, "conf", "--conf " + dir + "/uroced.conf --socket-mode 0666");
    ASSERT_EQ(d.error, "");
    EXPECT_EQ(as_nobody([&] {
                const int s = raw_connect(d.socket);
                if (s < 0 || hello(s) != 0) return 2;
                std::string why;
                const bool two = make(s, svc::Op::kAllocPd) != 0 && make(s, svc::Op::kAllocPd) != 0;
                const bool third = make(s, svc::Op::kAllocPd, &why) != 0;
                if (!two || third || why.find("max_pds") == std::string::npos) {
                  std::fprintf(stderr, "uid 65534, PDs: two %d third %d: %s\n", two, third, why.c_str());
                  return 1;
                }
                return 0;
              }),
              0);
    // One after another: connections that have not said hello yet count
    // against the same budget (the oldest gives way), so a third opened
    // before the first's hello is read could push the first out instead.
    const int a = raw_connect(d.socket);
    EXPECT_EQ(hello(a), 0);
    const int b = raw_connect(d.socket);
    EXPECT_EQ(hello(b), 0);
    const int c = raw_connect(d.socket);
    std::string why;
    EXPECT_EQ(hello(c, &why), EUSERS);
    EXPECT_NE(why.find("uid.0.uid_max_connections"), std::string::npos) << why;
    for (int s : {a, b, c}) close(s);
  }
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 ? st.st_mode : 0;
}

// L4: in a folder any user may write, the attacker keeps replacing the
// socket's name with a link to a file of root's: uroced refuses the folder
// (and so never chmods through a link); a sticky root folder is accepted.
TEST(ServiceConnAlone, ASocketFolderOtherUsersCanChangeIsRefused) {
  const auto tmp = make_dir("open", 0777);
  const auto safe_tmp = make_dir("target", 0755);
  const std::string& dir = tmp.dir;
  const std::string& safe = safe_tmp.dir;
  const std::string target = safe + "/secret";
  std::ofstream(target) << "root's\n";
  chmod(target.c_str(), 0600);
  {
    std::atomic<bool> stop{false};
    std::thread swapper([&] {
      const std::string link = dir + "/swap", sock = dir + "/open.sock";
      while (!stop) {
        unlink(link.c_str());
        if (symlink(target.c_str(), link.c_str()) == 0) rename(link.c_str(), sock.c_str());
        std::this_thread::yield();
      }
    });
    Daemon d(dir, "open", "--socket-mode 0666");
    stop = true;
    swapper.join();
    EXPECT_NE(d.error, "") << "uroced serves on a socket in a folder every user can write";
    EXPECT_NE(uroce::test::read_text_file(d.log).find("writable by other users"), std::string::npos) << uroce::test::read_text_file(d.log);
    EXPECT_EQ(mode_of(target) & 07777, 0600u) << "the link's target had its mode changed";
  }
  // The same folder sticky: only a name's owner may replace it.
  chmod(dir.c_str(), 01777);
  unlink((dir + "/open.sock").c_str());
  {
    Daemon d(dir, "sticky", "--socket-mode 0640 --socket-group nogroup");
    ASSERT_EQ(d.error, "");
    struct stat st {};
    ASSERT_EQ(lstat(d.socket.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    const group* g = getgrnam("nogroup");
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(st.st_gid, g->gr_gid);
  }
}

// L4: a file, or a link, where the socket should be is not uroced's to
// remove or to change.
TEST(ServiceConnAlone, AFileOrALinkAtTheSocketPathIsLeftAlone) {
  const auto tmp = make_dir("path", 0755);
  const std::string& dir = tmp.dir;
  const std::string target = dir + "/secret";
  std::ofstream(target) << "root's\n";
  chmod(target.c_str(), 0600);
  {
    const std::string file = dir + "/file.sock";
    std::ofstream(file) << "not a socket\n";
    chmod(file.c_str(), 0600);
    Daemon d(dir, "file", "--socket-mode 0666");
    EXPECT_NE(d.error, "") << "uroced replaced a file at its socket path";
    EXPECT_NE(uroce::test::read_text_file(d.log).find("is not a socket"), std::string::npos) << uroce::test::read_text_file(d.log);
    EXPECT_EQ(uroce::test::read_text_file(file), "not a socket\n");
    EXPECT_EQ(mode_of(file) & 07777, 0600u);
  }
  {
    const std::string link = dir + "/link.sock";
    ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
    Daemon d(dir, "link", "--socket-mode 0666");
    EXPECT_NE(d.error, "") << "uroced replaced a link at its socket path";
    EXPECT_TRUE(S_ISLNK(mode_of(link))) << "the link was removed";
    EXPECT_EQ(mode_of(target) & 07777, 0600u);
    EXPECT_EQ(uroce::test::read_text_file(target), "root's\n");
  }
}

}  // namespace
