// librdmacm through uroced (UROCE_SERVICE) lets go of what it holds when
// the program is done with rdma_cm (issue 27, item 13), as in process
// (rdmacm/cm_teardown_test.cc): with the last ID and channel destroyed the
// uroce-cm thread is joined and its CM connection to the daemon is closed
// (the process has the sockets it had before its first rdma_cm call); a
// second round connects again. One uroced on net_ring0 (frames to its own
// address come back in), the program in a forked child attached to it.
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "rdmacm/self_connection.h"
#include "support/uroced.h"

namespace {

using namespace uroce::test;

// This process's open sockets (/proc/self/fd).
int sockets() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    struct stat st {};
    if (e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISSOCK(st.st_mode)) ++n;
  }
  closedir(d);
  return n;
}

// The program, in a forked child: 0, or the first check that failed.
int program(const std::string& socket) {
  unsetenv("UROCE_EAL");
  setenv("UROCE_SERVICE", socket.c_str(), 1);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);  // attached: ibverbs's own connection
  ibv_free_device_list(list);
  if (n != 1) return 2;
  const int before = sockets();
  std::printf("sockets before rdma_cm: %d\n", before);
  for (int round = 0; round < 2; ++round) {
    rdma_event_channel* ch = rdma_create_event_channel();
    if (ch == nullptr) return 3;
    if (threads_named("uroce-cm") != 1) return 4;
    std::printf("round %d: sockets while rdma_cm is in use: %d\n", round, sockets());
    if (sockets() <= before) return 5;  // the CM's connection to the daemon (and librdmacm's context's)
    rdma_destroy_event_channel(ch);
    if (threads_named("uroce-cm") != 0) return 6;
    if (sockets() != before) {
      std::fprintf(stderr, "sockets: %d before rdma_cm, %d after\n", before, sockets());
      return 7;
    }
    connect_to_ourselves();
    if (::testing::Test::HasFailure()) return 8;
    if (threads_named("uroce-cm") != 0) return 9;
    if (sockets() != before) return 10;
  }
  return 0;
}

TEST(CmTeardownService, TheCmConnectionToUrocedClosesWithTheLastIdAndChannel) {
  TempDir dir("/tmp/uroce-cmteardown-svc-");
  Uroced daemon(ring_uroced("cmteardown-svc", dir.dir));
  ASSERT_EQ(daemon.error, "");
  const int rc = run_in_child(
      [&] {
        const int r = program(daemon.socket);
        std::fflush(nullptr);  // the child ends with _exit
        return r;
      },
      std::chrono::seconds(90));
  EXPECT_EQ(rc, 0) << "the child's first failed check (see its lines above); uroced:\n" << daemon.out();
}

}  // namespace
