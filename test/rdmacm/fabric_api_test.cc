// What libfabric's verbs provider asks of librdmacm.so.1 (ours), where
// rdma-core's behaviour is the contract (issue 27, item 4), in this process
// on net_ring (frames to our own address come back in, so a client and a
// server of one process connect to each other):
//  - rdma_getaddrinfo with neither node nor service takes the hints' own
//    addresses (libfabric passes its endpoints' that way), and gives an
//    IPv6-only name back as IPv6 for the bind to refuse;
//  - an ID has no verbs context until bound; a loopback address binds to no
//    device (libfabric binds "localhost" for a server and, finding no
//    device, offers the devices' own addresses);
//  - rdma_connect and rdma_accept take RDMA_MAX_RESP_RES and
//    RDMA_MAX_INIT_DEPTH as the device's maximum, and refuse a figure
//    beyond it (libfabric's accept got EINVAL).
// The stock programs run in fabric_stock_test.cc.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include "support/rdmacm_rig.h"

namespace {

using uroce::test::Deadline;
using uroce::test::ipv4;
using uroce::test::next_port;
using uroce::test::sa;

const std::array<std::uint8_t, 4>& kOurIp = uroce::test::kRdmacmIp;

void configure() { uroce::test::configure_net_ring("fabricapi"); }

const sockaddr_in& in4(const sockaddr* a) { return *reinterpret_cast<const sockaddr_in*>(a); }

TEST(FabricApi, GetaddrinfoTakesTheHintsAddressesWithNoNodeOrService) {
  configure();
  sockaddr_in src = ipv4(kOurIp, 0);
  sockaddr_in dst = ipv4({10, 0, 0, 9}, 7471);
  rdma_addrinfo hints{};
  hints.ai_src_addr = sa(&src);
  hints.ai_src_len = sizeof src;
  hints.ai_dst_addr = sa(&dst);
  hints.ai_dst_len = sizeof dst;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* r = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &r), 0) << strerror(errno);
  ASSERT_NE(r->ai_src_addr, nullptr);
  ASSERT_NE(r->ai_dst_addr, nullptr);
  EXPECT_NE(r->ai_src_addr, hints.ai_src_addr) << "a copy, freed by rdma_freeaddrinfo";
  EXPECT_EQ(std::memcmp(r->ai_dst_addr, &dst, sizeof dst), 0);
  EXPECT_EQ(std::memcmp(r->ai_src_addr, &src, sizeof src), 0);
  EXPECT_EQ(r->ai_family, AF_INET);
  EXPECT_EQ(r->ai_qp_type, IBV_QPT_RC);
  EXPECT_EQ(r->ai_flags & RAI_PASSIVE, 0);
  rdma_freeaddrinfo(r);

  // A passive one with only a source.
  rdma_addrinfo passive{};
  passive.ai_flags = RAI_PASSIVE;
  passive.ai_src_addr = sa(&src);
  passive.ai_src_len = sizeof src;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &passive, &r), 0) << strerror(errno);
  EXPECT_EQ(r->ai_dst_addr, nullptr);
  ASSERT_NE(r->ai_src_addr, nullptr);
  EXPECT_EQ(std::memcmp(r->ai_src_addr, &src, sizeof src), 0);
  EXPECT_NE(r->ai_flags & RAI_PASSIVE, 0);
  rdma_freeaddrinfo(r);

  // A node and the hints' source: the node is the destination, the
  // source the hints'.
  rdma_addrinfo with_src{};
  with_src.ai_src_addr = sa(&src);
  with_src.ai_src_len = sizeof src;
  ASSERT_EQ(rdma_getaddrinfo("10.0.0.9", "7471", &with_src, &r), 0) << strerror(errno);
  ASSERT_NE(r->ai_dst_addr, nullptr);
  EXPECT_EQ(std::memcmp(r->ai_dst_addr, &dst, sizeof dst), 0);
  ASSERT_NE(r->ai_src_addr, nullptr);
  EXPECT_EQ(std::memcmp(r->ai_src_addr, &src, sizeof src), 0);
  rdma_freeaddrinfo(r);

  errno = 0;
  EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &r), -1);
  EXPECT_EQ(errno, EINVAL);
}

// libfabric walks the kernel's interfaces, IPv6 link-local addresses
// included: rdma_getaddrinfo gives the address back as rdma-core's does, and
// the bind refuses it (uroce's rdma_cm is IPv4).
TEST(FabricApi, AnIpv6OnlyNameComesBackAsIpv6AndDoesNotBind) {
  configure();
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
  rdma_addrinfo* r = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("fe80::1", nullptr, &hints, &r), 0) << strerror(errno);
  ASSERT_NE(r->ai_src_addr, nullptr);
  EXPECT_EQ(r->ai_src_addr->sa_family, AF_INET6);
  EXPECT_EQ(r->ai_family, AF_INET6);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0) << strerror(errno);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(id, r->ai_src_addr), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  rdma_freeaddrinfo(r);
  EXPECT_EQ(rdma_destroy_id(id), 0);
}

TEST(FabricApi, AnIdHasNoDeviceUntilBoundAndALoopbackAddressBindsToNone) {
  configure();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0) << strerror(errno);
  EXPECT_EQ(id->verbs, nullptr) << "not bound yet";
  // "localhost", as libfabric's verbs provider asks for a server's address.
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  rdma_addrinfo* r = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("localhost", nullptr, &hints, &r), 0) << strerror(errno);
  ASSERT_NE(r->ai_src_addr, nullptr);
  ASSERT_EQ(r->ai_src_addr->sa_family, AF_INET) << "IPv4 preferred";
  EXPECT_EQ(ntohl(in4(r->ai_src_addr).sin_addr.s_addr), INADDR_LOOPBACK);
  ASSERT_EQ(rdma_bind_addr(id, r->ai_src_addr), 0) << strerror(errno);
  rdma_freeaddrinfo(r);
  EXPECT_EQ(id->verbs, nullptr) << "a loopback address is no device's";
  EXPECT_EQ(id->pd, nullptr);
  const sockaddr_in& local = in4(rdma_get_local_addr(id));
  EXPECT_EQ(ntohl(local.sin_addr.s_addr), INADDR_LOOPBACK);
  EXPECT_NE(rdma_get_src_port(id), 0) << "a port of its own";
  EXPECT_EQ(rdma_destroy_id(id), 0);

  // The device's address binds to the device.
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in ours = ipv4(kOurIp, next_port());
  ASSERT_EQ(rdma_bind_addr(id, sa(&ours)), 0) << strerror(errno);
  ASSERT_NE(id->verbs, nullptr);
  EXPECT_STREQ(ibv_get_device_name(id->verbs->device), "uroce0");
  EXPECT_NE(id->pd, nullptr);
  EXPECT_EQ(rdma_get_src_port(id), ours.sin_port);
  EXPECT_EQ(rdma_destroy_id(id), 0);

  // A QP other than RC: refused (uroce's rdma_cm connects RC only), and
  // the ID stays as it was.
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  ibv_qp_init_attr ud{};
  ud.qp_type = IBV_QPT_UD;
  ud.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  errno = 0;
  EXPECT_EQ(rdma_create_qp(id, nullptr, &ud), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(id->qp, nullptr);
  EXPECT_EQ(id->send_cq, nullptr);
  EXPECT_EQ(id->verbs, nullptr) << "not bound by a refused call";
  EXPECT_EQ(rdma_destroy_id(id), 0);

  // An address that is neither: refused.
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in other = ipv4({10, 0, 0, 9}, 0);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(id, sa(&other)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  EXPECT_EQ(rdma_destroy_id(id), 0);
}

// Connect and accept with RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH, as
// libfabric's verbs provider does: each asks for the device's maximum, so
// both QPs end with the device's maxima; a figure beyond the device's is
// refused with EINVAL. Synchronous IDs, as libfabric's.
TEST(FabricApi, MaximumReadDepthsMeanTheDevicesAndMoreIsRefused) {
  configure();
  Deadline deadline(30);
  const std::uint16_t port = next_port();
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in at = ipv4(kOurIp, port);
  ASSERT_EQ(rdma_bind_addr(listener, sa(&at)), 0);
  ASSERT_EQ(rdma_listen(listener, 4), 0);
  ibv_device_attr dev{};
  ASSERT_EQ(ibv_query_device(listener->verbs, &dev), 0);
  ASSERT_LT(dev.max_qp_rd_atom, 254) << "room for a figure beyond it";

  // One ID with a QP, connected with `param`; -1 and errno if refused.
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
  rdma_cm_id* client = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &client, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, sa(&at), 1000), 0) << strerror(errno);
  ASSERT_EQ(rdma_resolve_route(client, 1000), 0) << strerror(errno);
  ASSERT_EQ(rdma_create_qp(client, nullptr, &attr), 0) << strerror(errno);
  rdma_conn_param too_many{};
  too_many.responder_resources = static_cast<std::uint8_t>(dev.max_qp_rd_atom + 1);
  too_many.initiator_depth = 1;
  errno = 0;
  EXPECT_EQ(rdma_connect(client, &too_many), -1);
  EXPECT_EQ(errno, EINVAL);

  rdma_conn_param most{};
  most.responder_resources = RDMA_MAX_RESP_RES;
  most.initiator_depth = RDMA_MAX_INIT_DEPTH;
  most.retry_count = 7;
  most.rnr_retry_count = 7;
  // The synchronous connect returns at the REP, which needs the accept:
  // the server's side runs beside it.
  int accepted = -1;
  int accept_errno = 0;
  int beyond = -1;
  int beyond_errno = 0;
  rdma_cm_id* request = nullptr;
  std::thread server([&] {
    if (rdma_get_request(listener, &request) != 0) return;
    ibv_qp_init_attr sattr{};
    sattr.qp_type = IBV_QPT_RC;
    sattr.cap = ibv_qp_cap{4, 4, 1, 1, 0};
    if (rdma_create_qp(request, nullptr, &sattr) != 0) return;
    // The request asked for the device's maximum both ways.
    rdma_conn_param over{};
    over.responder_resources = 1;
    over.initiator_depth = static_cast<std::uint8_t>(dev.max_qp_init_rd_atom + 1);
    errno = 0;
    beyond = rdma_accept(request, &over);
    beyond_errno = errno;
    rdma_conn_param answer{};
    answer.responder_resources = RDMA_MAX_RESP_RES;
    answer.initiator_depth = RDMA_MAX_INIT_DEPTH;
    answer.rnr_retry_count = 7;
    accepted = rdma_accept(request, &answer);
    accept_errno = errno;
  });
  const int connected = rdma_connect(client, &most);
  const int connect_errno = errno;
  server.join();
  EXPECT_EQ(beyond, -1);
  EXPECT_EQ(beyond_errno, EINVAL);
  EXPECT_EQ(accepted, 0) << strerror(accept_errno);
  ASSERT_EQ(connected, 0) << strerror(connect_errno);
  ASSERT_NE(request, nullptr);
  ibv_qp_attr q{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(client->qp, &q, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &qi), 0);
  EXPECT_EQ(q.max_rd_atomic, std::min(dev.max_qp_init_rd_atom, dev.max_qp_rd_atom));
  EXPECT_EQ(q.max_dest_rd_atomic, std::min(dev.max_qp_init_rd_atom, dev.max_qp_rd_atom));
  ASSERT_EQ(ibv_query_qp(request->qp, &q, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &qi), 0);
  EXPECT_EQ(q.max_rd_atomic, std::min(dev.max_qp_init_rd_atom, dev.max_qp_rd_atom));
  EXPECT_EQ(q.max_dest_rd_atomic, std::min(dev.max_qp_init_rd_atom, dev.max_qp_rd_atom));

  EXPECT_EQ(rdma_disconnect(client), 0);
  rdma_destroy_qp(client);
  rdma_destroy_qp(request);
  rdma_destroy_id(client);
  rdma_destroy_id(request);
  rdma_destroy_id(listener);
}

}  // namespace
