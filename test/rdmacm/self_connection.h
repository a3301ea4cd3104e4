// What the rdma_cm teardown tests share (cm_teardown_test.cc in uroce's
// own EAL, cm_own_eal_test.cc in the application's): this process's
// threads by name, and one connection of the process to itself through
// the CM on net_ring (frames to our own address come back in).
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "support/rdmacm_rig.h"

namespace uroce::test {

// The names of this process's threads (/proc/self/task/*/comm).
inline std::vector<std::string> thread_names() {
  std::vector<std::string> names;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string c;
    std::getline(comm, c);
    names.push_back(c);
  }
  closedir(d);
  return names;
}
inline int threads_named(const std::string& name) {
  int n = 0;
  for (const std::string& t : thread_names()) n += t == name;
  return n;
}
inline std::string all_threads() {
  std::string s;
  for (const std::string& t : thread_names()) s += t + " ";
  return s;
}

// One connection of this process to itself through the CM: listen,
// connect, accept, a SEND across, disconnect, and everything destroyed.
inline void connect_to_ourselves() {
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  EXPECT_EQ(threads_named("uroce-cm"), 1) << all_threads();
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in at = ipv4(next_port());
  ASSERT_EQ(rdma_bind_addr(listener, sa(&at)), 0);
  ASSERT_EQ(rdma_listen(listener, 4), 0);
  rdma_cm_id* client = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, sa(&at), 1000), 0);
  ASSERT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(client, 1000), 0);
  ASSERT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ROUTE_RESOLVED);
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(client, nullptr, &attr), 0) << strerror(errno);
  rdma_conn_param param{};
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  ASSERT_EQ(rdma_connect(client, &param), 0);
  const CmEvent request = next_cm_event(ch);
  ASSERT_EQ(request.type, RDMA_CM_EVENT_CONNECT_REQUEST);
  attr = ibv_qp_init_attr{};  // rdma_create_qp wrote the client's CQs into it
  attr.qp_type = IBV_QPT_RC;
  attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(request.id, nullptr, &attr), 0) << strerror(errno);
  // A SEND from the client to the server proves the QPs were connected.
  // Pages of their own, not the stack: through uroced a registered range is
  // shared with the daemon page by page.
  struct Buffers {
    char* in = static_cast<char*>(std::aligned_alloc(4096, 4096));
    char* out = static_cast<char*>(std::aligned_alloc(4096, 4096));
    ~Buffers() {
      std::free(in);
      std::free(out);
    }
  } buffers;
  std::span<char> in(buffers.in, 64), out(buffers.out, 64);
  std::memset(buffers.in, 0, 4096);
  std::strcpy(out.data(), "across the CM");
  ibv_mr* in_mr = ibv_reg_mr(request.id->pd, in.data(), in.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* out_mr = ibv_reg_mr(client->pd, out.data(), out.size(), 0);
  ASSERT_NE(in_mr, nullptr);
  ASSERT_NE(out_mr, nullptr);
  ibv_sge rsge{reinterpret_cast<std::uintptr_t>(in.data()), static_cast<std::uint32_t>(in.size()), in_mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(request.id->qp, &rwr, &rbad), 0);
  ASSERT_EQ(rdma_accept(request.id, &param), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_ESTABLISHED);
  ibv_sge ssge{reinterpret_cast<std::uintptr_t>(out.data()), static_cast<std::uint32_t>(out.size()), out_mr->lkey};
  ibv_send_wr swr{};
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* sbad = nullptr;
  ASSERT_EQ(ibv_post_send(client->qp, &swr, &sbad), 0);
  ibv_wc wc{};
  while (ibv_poll_cq(request.id->recv_cq, 1, &wc) == 0) std::this_thread::yield();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_STREQ(in.data(), "across the CM");
  while (ibv_poll_cq(client->send_cq, 1, &wc) == 0) std::this_thread::yield();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);

  ASSERT_EQ(rdma_disconnect(client), 0);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(next_cm_event(ch).type, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(ibv_dereg_mr(in_mr), 0);
  EXPECT_EQ(ibv_dereg_mr(out_mr), 0);
  rdma_destroy_qp(client);
  rdma_destroy_qp(request.id);
  EXPECT_EQ(rdma_destroy_id(client), 0);
  EXPECT_EQ(rdma_destroy_id(request.id), 0);
  EXPECT_EQ(rdma_destroy_id(listener), 0);
  EXPECT_EQ(threads_named("uroce-cm"), 1) << "the channel still holds the CM";
  rdma_destroy_event_channel(ch);
}

}  // namespace uroce::test
