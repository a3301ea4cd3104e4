// A program that opens uroce0 and then forks (rdma-core's rdma_cm tests do,
// through python's multiprocessing), through our libibverbs and librdmacm
// in this process:
// - through uroced: each forked child attaches on a connection of its own,
//   creates its PD, CQ and QPs, runs traffic and an rdma_cm connection in
//   the daemon, two children at once, while the parent's objects stay
//   intact (the daemon's, the parent's, not destroyed by a child);
// - in-process: the child cannot run a second engine on its parent's port;
//   the parent serves it as uroced would (lib/ibverbs/fork_service.h), so
//   the child attaches to its parent, runs traffic and rdma_cm, and the
//   parent's own objects are still not the child's (ENODEV);
// - both ways, the context and device the child inherited are its own
//   attached ones: new objects on them work (traffic, device memory), the
//   parent's objects on them are refused; with
//   UROCE_FORK_SERVE=off the child gets ENODEV at once with one line on
//   stderr, and the parent keeps working.
// Each case runs in a child of this test process of its own, so that each
// starts from a process that has not touched the device.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/rc_connect.h"
#include "support/uroced.h"

namespace {

using namespace std::chrono_literals;

const std::string kEal = "--no-huge --no-shconf --no-pci -l 0 -m 256 --vdev=net_ring0 --log-level=lib.eal:error";

// 0 or the line number of the first step that failed: a child's exit code.
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::fprintf(stderr, "fork_test:%d: %s failed (errno %d)\n", __LINE__, #cond, errno); \
      return __LINE__ % 200 + 1;                                      \
    }                                                                 \
  } while (0)

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

bool poll_one(ibv_cq* cq, ibv_wc& wc) {
  for (const auto end = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < end;) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return false;
    if (n == 1) return true;
    usleep(100);
  }
  return false;
}

// A SEND from one RC QP of `c` to another, looped back by the device: its
// payload arrives. 0 or a step's line.
int traffic(ibv_context* c, const char* text) {
  ibv_pd* pd = ibv_alloc_pd(c);
  CHECK(pd != nullptr);
  ibv_cq* cq = ibv_create_cq(c, 16, nullptr, nullptr, 0);
  CHECK(cq != nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  ibv_qp* a = ibv_create_qp(pd, &ia);
  ibv_qp* b = ibv_create_qp(pd, &ia);
  CHECK(a != nullptr && b != nullptr);
  ibv_gid gid{};
  CHECK(ibv_query_gid(c, 1, 1, &gid) == 0);
  CHECK(uroce::test::rc_to_rts(a, b->qp_num, gid) == 0);
  CHECK(uroce::test::rc_to_rts(b, a->qp_num, gid) == 0);
  void* buf = nullptr;
  CHECK(posix_memalign(&buf, 4096, 8192) == 0);
  std::memset(buf, 0, 8192);
  char* out = static_cast<char*>(buf);
  char* in = out + 4096;
  std::snprintf(out, 64, "%s", text);
  ibv_mr* mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(mr != nullptr);
  ibv_sge rs{reinterpret_cast<std::uintptr_t>(in), 64, mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 2;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  CHECK(ibv_post_recv(b, &rwr, &bad_r) == 0);
  ibv_sge ss{reinterpret_cast<std::uintptr_t>(out), 64, mr->lkey};
  ibv_send_wr swr{};
  swr.wr_id = 1;
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad_s = nullptr;
  CHECK(ibv_post_send(a, &swr, &bad_s) == 0);
  bool sent = false, received = false;
  for (int i = 0; i < 2; ++i) {
    ibv_wc wc{};
    CHECK(poll_one(cq, wc));
    CHECK(wc.status == IBV_WC_SUCCESS);
    (wc.wr_id == 1 ? sent : received) = true;
  }
  CHECK(sent && received && std::strcmp(in, text) == 0);
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  return 0;
}

// Device memory on `c`: allocated, written and read back, registered on a
// PD of `c` and freed. 0 or a step's line.
int device_memory(ibv_context* c, const char* text) {
  ibv_pd* pd = ibv_alloc_pd(c);
  CHECK(pd != nullptr);
  ibv_alloc_dm_attr attr{};
  attr.length = 4096;
  ibv_dm* dm = ibv_alloc_dm(c, &attr);
  CHECK(dm != nullptr);
  char out[64] = {};
  char in[64] = {};
  std::snprintf(out, sizeof out, "%s", text);
  CHECK(ibv_memcpy_to_dm(dm, 128, out, sizeof out) == 0);
  CHECK(ibv_memcpy_from_dm(in, dm, 128, sizeof in) == 0);
  CHECK(std::strcmp(in, text) == 0);
  ibv_mr* mr = ibv_reg_dm_mr(pd, dm, 0, 4096, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr != nullptr);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_free_dm(dm) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  return 0;
}

// The next event's type (-1 none), acknowledged.
int next_event(rdma_event_channel* ch, rdma_cm_id** id) {
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e) != 0) return -1;
  const int t = e->event;
  if (id != nullptr) *id = e->id;
  rdma_ack_cm_event(e);
  return t;
}

// An rdma_cm connection from this process to itself (its device's IPv4
// address), QPs made by rdma_create_qp with librdmacm's defaults. 0 or a
// step's line.
int rdma_cm_connection(ibv_context* c) {
  ibv_gid gid{};
  CHECK(ibv_query_gid(c, 1, 1, &gid) == 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  std::memcpy(&addr.sin_addr, gid.raw + 12, 4);
  rdma_event_channel* lch = rdma_create_event_channel();
  rdma_event_channel* cch = rdma_create_event_channel();
  CHECK(lch != nullptr && cch != nullptr);
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* client = nullptr;
  CHECK(rdma_create_id(lch, &listener, nullptr, RDMA_PS_TCP) == 0);
  CHECK(rdma_create_id(cch, &client, nullptr, RDMA_PS_TCP) == 0);
  CHECK(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)) == 0);
  CHECK(rdma_listen(listener, 4) == 0);
  addr.sin_port = rdma_get_src_port(listener);
  CHECK(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) == 0);
  CHECK(next_event(cch, nullptr) == RDMA_CM_EVENT_ADDR_RESOLVED);
  CHECK(rdma_resolve_route(client, 2000) == 0);
  CHECK(next_event(cch, nullptr) == RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr ia{};
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  CHECK(rdma_create_qp(client, nullptr, &ia) == 0);
  rdma_conn_param cp{};
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  CHECK(rdma_connect(client, &cp) == 0);
  rdma_cm_id* server = nullptr;
  CHECK(next_event(lch, &server) == RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(rdma_create_qp(server, nullptr, &ia) == 0);
  CHECK(rdma_accept(server, &cp) == 0);
  CHECK(next_event(cch, nullptr) == RDMA_CM_EVENT_ESTABLISHED);
  CHECK(next_event(lch, nullptr) == RDMA_CM_EVENT_ESTABLISHED);
  CHECK(client->qp->state == IBV_QPS_RTS);
  CHECK(rdma_disconnect(client) == 0);
  CHECK(next_event(cch, nullptr) == RDMA_CM_EVENT_DISCONNECTED);
  CHECK(next_event(lch, nullptr) == RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_qp(client);
  rdma_destroy_qp(server);
  CHECK(rdma_destroy_id(server) == 0 && rdma_destroy_id(client) == 0 && rdma_destroy_id(listener) == 0);
  rdma_destroy_event_channel(lch);
  rdma_destroy_event_channel(cch);
  return 0;
}

// The parent's objects, kept across its children's lives: a PD, a CQ and a
// QP moved to INIT, whose state the daemon answers for afterwards.
struct Kept {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
};
int keep(ibv_context* c, Kept& k) {
  k.pd = ibv_alloc_pd(c);
  CHECK(k.pd != nullptr);
  k.cq = ibv_create_cq(c, 8, nullptr, nullptr, 0);
  CHECK(k.cq != nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = k.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {2, 2, 1, 1, 0};
  k.qp = ibv_create_qp(k.pd, &ia);
  CHECK(k.qp != nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  CHECK(ibv_modify_qp(k.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  return 0;
}
// In a forked child, on the context `c` it inherited: the parent's objects
// are refused (their handles are the parent's: nothing reaches the daemon
// or the parent), also as parts of new ones; new objects work (SEND traffic,
// device memory), as rdma-core's test_device.DMTest.test_multi_process_alloc_dm
// needs. 0 or a step's line.
int inherited_context(ibv_context* c, const Kept& k, const char* text) {
  errno = 0;
  CHECK(ibv_destroy_qp(k.qp) != 0);
  CHECK(ibv_destroy_cq(k.cq) != 0);
  CHECK(ibv_dealloc_pd(k.pd) != 0);
  static char buf[4096];
  CHECK(ibv_reg_mr(k.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  ibv_qp_attr a{};
  ibv_qp_init_attr got{};
  CHECK(ibv_query_qp(k.qp, &a, IBV_QP_STATE, &got) != 0);
  ibv_pd* pd = ibv_alloc_pd(c);
  CHECK(pd != nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = k.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {2, 2, 1, 1, 0};
  CHECK(ibv_create_qp(pd, &ia) == nullptr);
  CHECK(ibv_dealloc_pd(pd) == 0);
  ibv_device_attr_ex attr{};
  CHECK(ibv_query_device_ex(c, nullptr, &attr) == 0 && attr.max_dm_size > 0);
  if (const int e = traffic(c, text); e != 0) return e;
  return device_memory(c, text);
}

int still_kept(const Kept& k) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  CHECK(ibv_query_qp(k.qp, &a, IBV_QP_STATE, &ia) == 0);
  CHECK(a.qp_state == IBV_QPS_INIT);
  CHECK(ibv_destroy_qp(k.qp) == 0);
  CHECK(ibv_destroy_cq(k.cq) == 0);
  CHECK(ibv_dealloc_pd(k.pd) == 0);
  return 0;
}

// Forks a child running `body`; its pid.
template <typename F>
pid_t fork_running(F body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  return pid;
}

TEST(Fork, ChildrenThroughUrocedAttachAfreshAndLeaveTheParentsObjects) {
  uroce::test::TempDir dir("/tmp/uroce-fork-");
  uroce::test::Uroced d({.eal = kEal,
                         .prefix = "uroce-fork-" + std::to_string(getpid()),
                         .ip = "10.0.0.1/24",
                         .socket = dir.dir + "/uroced.sock",
                         .log = dir.dir + "/uroced.log"});
  ASSERT_EQ(d.error, "");
  const std::string socket = d.socket;
  const int rc = uroce::test::run_in_child(
      [&socket] {
        setenv("UROCE_SERVICE", socket.c_str(), 1);
        ibv_context* c = open_uroce0();
        CHECK(c != nullptr);
        Kept k;
        if (const int e = keep(c, k); e != 0) return e;
        // Two children at once, each with verbs traffic and an rdma_cm
        // connection of its own through the daemon.
        const pid_t one = fork_running([&k, c] {
          // The parent's objects are not the child's to destroy: nothing
          // reaches the daemon (still_kept below finds them); the inherited
          // context makes new objects of the child's.
          if (const int e = inherited_context(c, k, "first child, inherited context"); e != 0) return e;
          ibv_context* cc = open_uroce0();
          CHECK(cc != nullptr);
          if (const int e = traffic(cc, "first child"); e != 0) return e;
          return rdma_cm_connection(cc);
        });
        const pid_t two = fork_running([] {
          ibv_context* cc = open_uroce0();
          CHECK(cc != nullptr);
          if (const int e = traffic(cc, "second child"); e != 0) return e;
          return rdma_cm_connection(cc);
        });
        // Both waited for (or killed) before either is judged: a child left
        // running would outlive the test, blocked on the daemon.
        const int first = uroce::test::wait_exit(one, 60s);
        const int second = uroce::test::wait_exit(two, 60s);
        CHECK(first == 0);
        CHECK(second == 0);
        // The parent's objects are as they were, and it still works.
        if (const int e = still_kept(k); e != 0) return e;
        if (const int e = traffic(c, "parent"); e != 0) return e;
        if (const int e = rdma_cm_connection(c); e != 0) return e;
        CHECK(ibv_close_device(c) == 0);
        return 0;
      },
      150s);
  EXPECT_EQ(rc, 0) << d.out();
}

TEST(Fork, InProcessChildGetsAClearErrorAtOnceAndTheParentKeepsWorking) {
  uroce::test::TempDir dir("/tmp/uroce-fork-");
  const std::string err = dir.dir + "/child.err";
  const std::string eal = kEal + " --file-prefix=uroce-fork-ip-" + std::to_string(getpid());
  const int rc = uroce::test::run_in_child(
      [&] {
        setenv("UROCE_EAL", eal.c_str(), 1);
        setenv("UROCE_IP", "10.0.0.1/24", 1);
        unsetenv("UROCE_SERVICE");
        // Refused as before a parent served its children: the program asked
        // for no service (InProcessChildIsServedByItsParent: the default).
        setenv("UROCE_FORK_SERVE", "off", 1);
        ibv_context* c = open_uroce0();
        CHECK(c != nullptr);
        ibv_device* dev = c->device;
        const auto start = std::chrono::steady_clock::now();
        const pid_t child = fork_running([&] {
          const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
          dup2(fd, 2);
          int n = -1;
          ibv_device** list = ibv_get_device_list(&n);
          CHECK(list != nullptr && n == 0 && list[0] == nullptr);
          ibv_free_device_list(list);
          errno = 0;
          CHECK(ibv_open_device(dev) == nullptr && errno == ENODEV);
          errno = 0;
          CHECK(ibv_alloc_pd(c) == nullptr);
          rdma_event_channel* ch = rdma_create_event_channel();
          rdma_cm_id* id = nullptr;
          CHECK(ch == nullptr || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0);
          return 0;
        });
        CHECK(uroce::test::wait_exit(child, 20s) == 0);
        CHECK(std::chrono::steady_clock::now() - start < 10s);
        // The parent keeps working.
        if (const int e = traffic(c, "parent"); e != 0) return e;
        CHECK(ibv_close_device(c) == 0);
        return 0;
      },
      120s);
  EXPECT_EQ(rc, 0);
  const std::string text = uroce::test::read_text_file(err);
  const std::string line =
      "uroce: a forked child cannot use its parent's in-process device (one process owns the port): run the "
      "program through uroced (uroce-run --service)\n";
  EXPECT_NE(text.find(line), std::string::npos) << text;
  // Said once, whatever the child asked.
  EXPECT_EQ(text.find(line), text.rfind(line)) << text;
}

TEST(Fork, InProcessChildIsServedByItsParent) {
  uroce::test::TempDir dir("/tmp/uroce-fork-");
  const std::string err = dir.dir + "/child.err";
  const std::string eal = kEal + " --file-prefix=uroce-fork-sv-" + std::to_string(getpid());
  const int rc = uroce::test::run_in_child(
      [&] {
        setenv("UROCE_EAL", eal.c_str(), 1);
        setenv("UROCE_IP", "10.0.0.1/24", 1);
        unsetenv("UROCE_SERVICE");
        unsetenv("UROCE_FORK_SERVE");
        ibv_context* c = open_uroce0();
        CHECK(c != nullptr);
        ibv_device* dev = c->device;
        Kept k;
        if (const int e = keep(c, k); e != 0) return e;
        // Two children at once, each with verbs traffic and an rdma_cm
        // connection of its own through the parent.
        const pid_t one = fork_running([&] {
          const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
          dup2(fd, 2);
          // The parent's objects are still not the child's; its device and
          // context are this child's attached ones.
          if (const int e = inherited_context(c, k, "first child, inherited context"); e != 0) return e;
          ibv_context* again = ibv_open_device(dev);
          CHECK(again != nullptr && again != c);
          if (const int e = device_memory(again, "first child, reopened device"); e != 0) return e;
          CHECK(ibv_close_device(again) == 0);
          ibv_context* cc = open_uroce0();
          CHECK(cc != nullptr && cc != c);
          if (const int e = traffic(cc, "first child"); e != 0) return e;
          if (const int e = rdma_cm_connection(cc); e != 0) return e;
          return ibv_close_device(cc) == 0 ? 0 : 150;
        });
        const pid_t two = fork_running([] {
          ibv_context* cc = open_uroce0();
          CHECK(cc != nullptr);
          if (const int e = traffic(cc, "second child"); e != 0) return e;
          if (const int e = rdma_cm_connection(cc); e != 0) return e;
          return ibv_close_device(cc) == 0 ? 0 : 151;
        });
        const int first = uroce::test::wait_exit(one, 90s);
        const int second = uroce::test::wait_exit(two, 90s);
        CHECK(first == 0);
        CHECK(second == 0);
        // The parent's objects are as they were, and it still works.
        if (const int e = still_kept(k); e != 0) return e;
        if (const int e = traffic(c, "parent"); e != 0) return e;
        CHECK(ibv_close_device(c) == 0);
        return 0;
      },
      200s);
  EXPECT_EQ(rc, 0) << uroce::test::read_text_file(err);
  // No refusal: the child had a device.
  EXPECT_EQ(uroce::test::read_text_file(err).find("cannot use its parent's"), std::string::npos);
}

}  // namespace
