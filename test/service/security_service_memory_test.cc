// The memory uroced maps for its clients, attacked as a hostile client would
// (issue 25: H1, H2, M3, M4, L1): the raw protocol of lib/service, files
// made by hand. Each test starts a daemon of its own on a net_null port.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "service/client.h"
#include "service/protocol.h"
#include "service/shm.h"
#include "support/telemetry_client.h"
#include "support/uroced.h"

namespace {

using namespace std::chrono_literals;
namespace svc = uroce::service;

// uroced on a net_null port, in a folder of its own; killed at the end.
struct Daemon : uroce::test::TempDir, uroce::test::Uroced {
  explicit Daemon(const std::string& extra = "")
      : TempDir("/tmp/uroce-svcmem-"),
        Uroced({.eal = "--no-huge --no-shconf --no-pci -m 256 --log-level=lib.eal:error -l 0 --vdev=net_null0",
                .prefix = "uroce-svcmem-" + std::to_string(getpid()) + "-" + std::to_string(counter()++),
                .ip = "10.0.9.1/24",
                .socket = dir + "/uroced.sock",
                .log = dir + "/uroced.log",
                .extra = extra}) {}
  long rss_mib() const {
    std::istringstream in(uroce::test::read_text_file("/proc/" + std::to_string(pid) + "/status"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6) / 1024;
    }
    return -1;
  }
  long mappings() const {
    std::istringstream in(uroce::test::read_text_file("/proc/" + std::to_string(pid) + "/maps"));
    long n = 0;
    std::string line;
    while (std::getline(in, line)) ++n;
    return n;
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// A client speaking the protocol itself.
struct Raw {
  std::unique_ptr<svc::Client> c;
  std::string why;
  explicit Raw(const Daemon& d) {
    std::string e;
    c = svc::Client::connect(d.socket, e);
    if (!c) why = e;
  }
  int call(svc::Request& req, svc::Reply& reply, const int* fds = nullptr, int nfds = 0,
           std::vector<int>* got = nullptr) {
    std::vector<int> mine;
    const int e = c->call(req, reply, fds, nfds, got != nullptr ? got : &mine, why);
    for (int fd : mine) close(fd);
    return e;
  }
  std::uint32_t pd() {
    svc::Request r;
    std::memset(static_cast<void*>(&r), 0, sizeof r);
    r.op = svc::Op::kAllocPd;
    svc::Reply y;
    return call(r, y) == 0 ? y.handle : 0;
  }
  // A region of `pieces` pieces (fd, offset, bytes each); 0 or the errno.
  int reg_mr(std::uint32_t pd, const std::vector<std::tuple<int, std::uint64_t, std::uint64_t>>& pieces,
             std::uint64_t iova, svc::Reply& y) {
    svc::Request r;
    std::memset(static_cast<void*>(&r), 0, sizeof r);
    r.op = svc::Op::kRegMr;
    r.reg_mr.pd = pd;
    r.reg_mr.access = IBV_ACCESS_LOCAL_WRITE;
    r.reg_mr.iova = iova;
    r.reg_mr.pieces = static_cast<std::uint32_t>(pieces.size());
    std::vector<int> fds;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      r.reg_mr.piece[i].file_offset = std::get<1>(pieces[i]);
      r.reg_mr.piece[i].bytes = std::get<2>(pieces[i]);
      total += std::get<2>(pieces[i]);
      fds.push_back(std::get<0>(pieces[i]));
    }
    r.reg_mr.length = total;
    return call(r, y, fds.data(), static_cast<int>(fds.size()));
  }
  int create_cq(std::uint32_t cqe, std::uint32_t& handle) {
    svc::Request r;
    std::memset(static_cast<void*>(&r), 0, sizeof r);
    r.op = svc::Op::kCreateCq;
    r.create_cq.cqe = cqe;
    svc::Reply y;
    const int e = call(r, y);
    handle = y.handle;
    return e;
  }
  int create_qp(std::uint32_t pd, std::uint32_t cq, std::uint32_t wr) {
    svc::Request r;
    std::memset(static_cast<void*>(&r), 0, sizeof r);
    r.op = svc::Op::kCreateQp;
    r.create_qp.pd = pd;
    r.create_qp.send_cq = r.create_qp.recv_cq = cq;
    r.create_qp.qp_type = IBV_QPT_RC;
    r.create_qp.cap = ibv_qp_cap{wr, wr, 1, 1, 0};
    svc::Reply y;
    return call(r, y);
  }
};

void ensure_folder(const std::string& d) { mkdir(d.c_str(), 0700); }

// H1: the daemon once skipped the seal check for any file whose inode
// NUMBER it had seen, so an unsealed file of another filesystem with the
// same number was mapped, then truncated under it: SIGBUS. The attacker
// makes that file on a tmpfs of its own, creating files until the number
// matches its registered memfd's.
TEST(ServiceMemory, AFileWithAKnownInodeNumberOnAnotherFilesystemIsCheckedAndRefused) {
  Daemon d;
  ASSERT_EQ(d.error, "");
  Raw a(d);
  ASSERT_TRUE(a.c) << a.why;
  const std::uint32_t pd = a.pd();
  ASSERT_NE(pd, 0u);
  const int good = svc::make_memory_file("svcmem-good", 4096);
  ASSERT_GE(good, 0);
  svc::Reply y;
  ASSERT_EQ(a.reg_mr(pd, {{good, 0, 4096}}, 0x10000, y), 0) << a.why;
  struct stat gs {};
  ASSERT_EQ(fstat(good, &gs), 0);

  // In a child of its own mount namespace (nothing left mounted here): a
  // fresh tmpfs numbers its inodes 2, 3, ...; files are made until one has
  // the memfd's number (bounded by it, and by time), and sent back.
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
  const std::string mnt = d.dir + "/tmpfs";
  ensure_folder(mnt);
  const pid_t child = fork();
  if (child == 0) {
    int twin = -1;
    if (unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
        mount("svcmem", mnt.c_str(), "tmpfs", 0, "size=1m") == 0) {
      const auto until = std::chrono::steady_clock::now() + 60s;
      for (long i = 0; i < 4'000'000 && std::chrono::steady_clock::now() < until; ++i) {
        const int fd = open(mnt.c_str(), O_TMPFILE | O_RDWR, 0600);
        if (fd < 0) break;
        struct stat st {};
        fstat(fd, &st);
        if (st.st_ino == gs.st_ino) {
          twin = fd;
          break;
        }
        close(fd);
        if (st.st_ino > gs.st_ino) break;
      }
    }
    const char found = twin >= 0 ? 1 : 0;
    svc::send_message(pair[1], &found, 1, twin >= 0 ? &twin : nullptr, twin >= 0 ? 1 : 0);
    _exit(0);
  }
  char found = 0;
  int twin = -1, nfds = 0;
  const long got = svc::recv_message(pair[0], &found, 1, &twin, 1, nfds);
  waitpid(child, nullptr, 0);
  close(pair[0]);
  close(pair[1]);
  if (got != 1 || nfds != 1) GTEST_SKIP() << "no file with inode " << gs.st_ino << " on a fresh tmpfs (root needed; bounded in time)";
  ASSERT_EQ(ftruncate(twin, 4096), 0);
  struct stat ts {};
  fstat(twin, &ts);
  ASSERT_EQ(ts.st_ino, gs.st_ino);
  ASSERT_NE(ts.st_dev, gs.st_dev);
  std::printf("  a tmpfs file with the memfd's inode %lu (device %lu, not %lu)\n", static_cast<unsigned long>(ts.st_ino),
              static_cast<unsigned long>(ts.st_dev), static_cast<unsigned long>(gs.st_dev));
  // Alone, and beside the known memfd in one request.
  EXPECT_EQ(a.reg_mr(pd, {{twin, 0, 4096}}, 0x20000, y), EINVAL) << "the unsealed twin was registered";
  EXPECT_NE(a.why.find("sealed"), std::string::npos) << a.why;
  EXPECT_EQ(a.reg_mr(pd, {{good, 0, 4096}, {twin, 0, 4096}}, 0x30000, y), EINVAL) << "registered beside its twin";
  // What the attack did next: the file shrunk to nothing. The daemon lives.
  ASSERT_EQ(ftruncate(twin, 0), 0);
  close(twin);
  Raw probe(d);
  EXPECT_TRUE(probe.c) << probe.why;
  EXPECT_TRUE(d.alive());
  close(good);
}

// Sets vm.nr_hugepages to what is there plus `more` for its life (root).
struct Hugepages {
  const std::string knob = "/proc/sys/vm/nr_hugepages";
  long before = 0;
  bool set = false;
  explicit Hugepages(long more) {
    before = std::atol(uroce::test::read_text_file(knob).c_str());
    set = std::system(("echo " + std::to_string(before + more) + " > " + knob + " 2>/dev/null").c_str()) == 0 &&
          std::atol(uroce::test::read_text_file(knob).c_str()) >= before + more;
  }
  ~Hugepages() {
    if (set) std::system(("echo " + std::to_string(before) + " > " + knob).c_str());
  }
};

// H2: F_SEAL_SHRINK does not stop FALLOC_FL_PUNCH_HOLE, and a hugetlb page
// punched out of a file faults in the daemon with SIGBUS (its reservation
// went with it). Once the daemon maps a hugepage file nobody can punch a
// hole in it any more; one sealed shut (F_SEAL_SEAL) before the daemon
// could add that seal is refused; the file registers again after its
// regions are gone. (A hole in a normal-page memfd only reads back as
// zeros: the client's own data.)
TEST(ServiceMemory, NoHoleCanBePunchedInARegisteredHugepageFile) {
  Hugepages pages(2);
  const std::size_t bytes = 2u << 20;
  Daemon d;
  ASSERT_EQ(d.error, "");
  Raw a(d);
  ASSERT_TRUE(a.c) << a.why;
  const std::uint32_t pd = a.pd();
  svc::Reply y;
  const int fd = memfd_create("svcmem-punch", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(ftruncate(fd, bytes), 0);
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  // Mapping it reserves its hugepage: none to be had (not root, or other
  // programs took them) leaves only the refusal to check.
  auto* p = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED) {
    // No hugepage to be had (not root, or none free): the file cannot be
    // backed, and the daemon says so instead of mapping what faults later.
    EXPECT_EQ(a.reg_mr(pd, {{fd, 0, bytes}}, 0x40000000, y), ENOMEM) << a.why;
    EXPECT_TRUE(d.alive());
    close(fd);
    std::printf("  no hugepages: only the refusal was checked\n");
    return;
  }
  std::memset(p, 0x42, bytes);
  ASSERT_EQ(a.reg_mr(pd, {{fd, 0, bytes}}, 0x40000000, y), 0) << a.why;
  const std::uint32_t mr = y.handle;
  EXPECT_NE(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, bytes), 0)
      << "a hole was punched in registered hugepage memory";
  EXPECT_NE(madvise(p, bytes, MADV_REMOVE), 0) << "registered hugepages were removed";
  p[100] = 7;  // the client's own mapping still writes
  EXPECT_EQ(p[100], 7);
  EXPECT_TRUE(d.alive());
  // Its region gone and made again (the file keeps the daemon's seal).
  svc::Request r;
  std::memset(static_cast<void*>(&r), 0, sizeof r);
  r.op = svc::Op::kDeregMr;
  r.handle = mr;
  EXPECT_EQ(a.call(r, y), 0) << a.why;
  EXPECT_NE(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, bytes), 0) << "punched once deregistered";
  EXPECT_EQ(a.reg_mr(pd, {{fd, 0, bytes}}, 0x40000000, y), 0) << a.why;
  munmap(p, bytes);
  close(fd);

  // The reproducer's file: sealed shut before the daemon saw it.
  const int shut = memfd_create("svcmem-shut", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
  ASSERT_GE(shut, 0);
  ASSERT_EQ(ftruncate(shut, bytes), 0);
  ASSERT_EQ(fcntl(shut, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
  EXPECT_EQ(a.reg_mr(pd, {{shut, 0, bytes}}, 0x80000000, y), EINVAL) << "a file the daemon cannot seal was registered";
  EXPECT_NE(a.why.find("F_SEAL_SEAL"), std::string::npos) << a.why;
  close(shut);
  EXPECT_TRUE(d.alive());
}

// M3: CQ and QP memory (the shared rings and the engine's arrays) is
// charged to the client: huge CQs and QPs are refused once they pass its
// budget, and the daemon's memory stays bounded.
TEST(ServiceMemory, HugeCqsAndQpsAreRefusedAtTheClientsMemoryBudget) {
  Daemon d;
  ASSERT_EQ(d.error, "");
  const long rss0 = d.rss_mib();
  Raw a(d);
  ASSERT_TRUE(a.c) << a.why;
  const std::uint32_t pd = a.pd();
  int made = 0;
  int refused = 0;
  for (int i = 0; i < 8 && refused == 0; ++i) {
    std::uint32_t cq = 0;
    int e = a.create_cq(1u << 20, cq);
    if (e == 0) e = a.create_qp(pd, cq, 16384);
    if (e == 0) {
      ++made;
    } else {
      EXPECT_EQ(e, ENOMEM) << a.why;
      EXPECT_NE(a.why.find("max_object_mb"), std::string::npos) << a.why;
      ++refused;
    }
  }
  std::printf("  %d (CQ of 2^20 + QP of 16384) made before the budget refused one; RSS %ld -> %ld MiB\n", made, rss0,
              d.rss_mib());
  EXPECT_EQ(refused, 1) << "8 pairs of ~110 MiB each were all accepted";
  EXPECT_LT(d.rss_mib(), rss0 + 256 + 64);
  // Another client still gets what it asks for.
  Raw b(d);
  ASSERT_TRUE(b.c) << b.why;
  std::uint32_t cq = 0;
  EXPECT_EQ(b.create_cq(64, cq), 0) << b.why;
  EXPECT_EQ(b.create_qp(b.pd(), cq, 64), 0) << b.why;
}

// M4: regions of many pieces on one page once cost one mapping each:
// 4,096 x 16 passed vm.max_map_count. Now they are counted against the
// client's mapping budget, a file is mapped once however many single-piece
// regions lie on it, and another client still gets CQs and regions.
TEST(ServiceMemory, RegionsOnOnePageAreBoundedByTheMappingBudget) {
  Daemon d;
  ASSERT_EQ(d.error, "");
  Raw a(d);
  ASSERT_TRUE(a.c) << a.why;
  const std::uint32_t pd = a.pd();
  const int page = svc::make_memory_file("svcmem-page", 4096);
  ASSERT_GE(page, 0);
  const long maps0 = d.mappings();
  svc::Reply y;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(a.reg_mr(pd, {{page, 0, 4096}}, 0x100000ull * (i + 1), y), 0) << i << ": " << a.why;
  }
  EXPECT_LT(d.mappings() - maps0, 16) << "1000 regions on one page mapped it " << d.mappings() - maps0 << " times";
  std::vector<std::tuple<int, std::uint64_t, std::uint64_t>> sixteen(16, {page, 0, 4096});
  int made = 0;
  int e = 0;
  for (; made < 3000; ++made) {
    e = a.reg_mr(pd, sixteen, 0x40000000ull + 0x100000ull * made, y);
    if (e != 0) break;
  }
  std::printf("  %d regions of 16 pieces on one page before refusal; daemon mappings %ld -> %ld\n", made, maps0,
              d.mappings());
  EXPECT_EQ(e, ENOMEM) << a.why;
  EXPECT_NE(a.why.find("max_mappings"), std::string::npos) << a.why;
  EXPECT_LT(d.mappings(), 32768);
  Raw b(d);
  ASSERT_TRUE(b.c) << b.why;
  std::uint32_t cq = 0;
  EXPECT_EQ(b.create_cq(64, cq), 0) << b.why;
  const int mine = svc::make_memory_file("svcmem-victim", 65536);
  EXPECT_EQ(b.reg_mr(b.pd(), {{mine, 0, 65536}}, 0x1000, y), 0) << b.why;
  close(mine);
  close(page);
}

// L1: every region once took one of DPDK's 128 external-memory lists; 200
// small regions of one file now take one registration, and another
// client's region is still registered.
TEST(ServiceMemory, SmallRegionsOfOneFileRegisterWithThePortOnce) {
  Daemon d;
  ASSERT_EQ(d.error, "");
  Raw a(d);
  ASSERT_TRUE(a.c) << a.why;
  const std::uint32_t pd = a.pd();
  const int file = svc::make_memory_file("svcmem-small", 4096 * 256);
  ASSERT_GE(file, 0);
  svc::Reply y;
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(a.reg_mr(pd, {{file, 4096ull * i, 4096}}, 0x1000ull * (i + 1), y), 0) << i << ": " << a.why;
  }
  Raw b(d);
  ASSERT_TRUE(b.c) << b.why;
  const int other = svc::make_memory_file("svcmem-other", 65536);
  ASSERT_EQ(b.reg_mr(b.pd(), {{other, 0, 65536}}, 0x1000, y), 0) << b.why;
  const std::string port = uroce::test::telemetry_query(d.telemetry, "/uroce/port,0");
  std::printf("  %s\n", port.substr(0, 400).c_str());
  auto counter = [&](const std::string& name) { return uroce::test::telemetry_number(port, name); };
  EXPECT_EQ(counter("regions_register_failed"), 0) << port;
  EXPECT_EQ(counter("regions_registered"), 2) << "one per file: " << port;
  close(other);
  close(file);
}

// L1, the rest: one client with many memory files, and regions of several
// pieces (each a view with addresses of its own), used to take one of
// DPDK's 128 external-memory lists each, until none was left for anyone.
// Now a client's files take at most max_port_registrations (its further
// files, and every view, are sent by copy), and another client's file
// still registers with the port.
TEST(ServiceMemory, OneClientsFilesAndViewsLeaveThePortsRegistrationsToOthers) {
  Daemon d;
  ASSERT_EQ(d.error, "");
  Raw a(d);
  ASSERT_TRUE(a.c) << a.why;
  const std::uint32_t pd = a.pd();
  svc::Reply y;
  std::vector<int> files;
  for (int i = 0; i < 150; ++i) {
    const int f = svc::make_memory_file("svcmem-many", 8192);
    ASSERT_GE(f, 0);
    files.push_back(f);
    ASSERT_EQ(a.reg_mr(pd, {{f, 0, 8192}}, 0x100000ull * (i + 1), y), 0) << i << ": " << a.why;
  }
  for (int i = 0; i < 150; ++i) {
    ASSERT_EQ(a.reg_mr(pd, {{files[i], 0, 4096}, {files[(i + 1) % 150], 4096, 4096}}, 0x40000000ull + 0x100000ull * i, y),
              0)
        << "view " << i << ": " << a.why;
  }
  Raw b(d);
  ASSERT_TRUE(b.c) << b.why;
  const int other = svc::make_memory_file("svcmem-other", 65536);
  ASSERT_EQ(b.reg_mr(b.pd(), {{other, 0, 65536}}, 0x1000, y), 0) << b.why;
  const std::string port = uroce::test::telemetry_query(d.telemetry, "/uroce/port,0");
  auto counter = [&](const std::string& name) { return uroce::test::telemetry_number(port, name); };
  EXPECT_EQ(counter("regions_register_failed"), 0) << "DPDK's lists ran out: " << port;
  EXPECT_EQ(counter("regions_registered"), 16 + 1) << "the client's share (max_port_registrations) and the other's file: "
                                                   << port;
  close(other);
  for (int f : files) close(f);
}

}  // namespace

namespace {

// The descriptors uroced holds on some process's /proc/PID/mem.
std::vector<std::string> memory_descriptors(pid_t daemon) {
  std::vector<std::string> out;
  const std::string dir = "/proc/" + std::to_string(daemon) + "/fd";
  for (int fd = 0; fd < 4096; ++fd) {
    char target[256];
    const std::string link = dir + "/" + std::to_string(fd);
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    const std::string t(target);
    if (t.size() > 4 && t.compare(t.size() - 4, 4, "/mem") == 0 && t.rfind("/proc/", 0) == 0) out.push_back(t);
  }
  return out;
}

}  // namespace

// On-demand regions through the raw protocol: no memory files, a sane
// range (or the implicit one), and the memory the daemon then reaches is
// the connecting process's own: the first region passes its /proc/self/mem,
// and nothing else passes for it (a memory file, another process's memory,
// a read-only one); the descriptor goes with the client.
TEST(ServiceMemory, OnDemandRegionsReachTheClientsOwnMemoryOnly) {
  Daemon d;
  ASSERT_EQ(d.error, "");
  auto a = std::make_unique<Raw>(d);
  ASSERT_TRUE(a->c) << a->why;
  const std::uint32_t pd = a->pd();
  auto odp = [&](std::uint64_t addr, std::uint64_t length, const int* fds, int nfds, svc::Reply& y,
                 std::uint32_t pieces = 0) {
    svc::Request r;
    std::memset(static_cast<void*>(&r), 0, sizeof r);
    r.op = svc::Op::kRegMr;
    r.reg_mr.pd = pd;
    r.reg_mr.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND;
    r.reg_mr.addr = addr;
    r.reg_mr.iova = addr;
    r.reg_mr.length = length;
    r.reg_mr.pieces = pieces;
    if (pieces > 0) r.reg_mr.piece[0] = svc::MemoryPiece{0, 4096};
    return a->call(r, y, fds, nfds);
  };
  svc::Reply y;
  const int file = svc::make_memory_file("svcmem-odp", 4096);
  ASSERT_GE(file, 0);
  EXPECT_EQ(odp(0x10000, 4096, &file, 1, y, 1), EINVAL) << "an ODP region with a memory file";
  EXPECT_EQ(odp(0x10000, 4096, &file, 1, y), EINVAL) << "a memory file for the client's memory";
  close(file);
  EXPECT_EQ(odp(0x10000, 4096, nullptr, 0, y), EINVAL) << "the first region without the client's memory";
  const int daemons = open(("/proc/" + std::to_string(d.pid) + "/mem").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(daemons, 0);
  EXPECT_EQ(odp(0x10000, 4096, &daemons, 1, y), EINVAL) << "another process's memory (the daemon's own)";
  close(daemons);
  const int read_only = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  EXPECT_EQ(odp(0x10000, 4096, &read_only, 1, y), EINVAL) << "the client's memory opened read-only";
  close(read_only);
  const int self = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  ASSERT_GE(self, 0);
  EXPECT_EQ(odp(0, 4096, &self, 1, y), EINVAL) << "address 0 is only the implicit region's";
  EXPECT_EQ(odp(~0ull - 100, 4096, &self, 1, y), EINVAL) << "a range past the end";
  EXPECT_TRUE(memory_descriptors(d.pid).empty());
  ASSERT_EQ(odp(0, UINT64_MAX, &self, 1, y), 0) << a->why;
  close(self);
  // Later regions need not pass it again.
  ASSERT_EQ(odp(0x10000, 4096, nullptr, 0, y), 0) << a->why;
  const std::vector<std::string> held = memory_descriptors(d.pid);
  ASSERT_EQ(held.size(), 1u) << "one per client";
  EXPECT_EQ(held[0], "/proc/" + std::to_string(getpid()) + "/mem");
  a.reset();  // the client goes: its regions, then the descriptor
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = memory_descriptors(d.pid).empty();
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "the daemon still holds the client's memory";
}
