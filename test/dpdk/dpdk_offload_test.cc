// TX offloads on a port that has them: net_tap fills IPv4 header checksums
// (the tap PMD does it in software, as a NIC would in hardware). The test
// runs in a network namespace of its own, so the tap interfaces it makes are
// seen by nobody else; frames the stack sends out of a tap are read on the
// kernel side with a packet socket and checked.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "device/device.h"
#include "engine/engine.h"
#include "support/eal_environment.h"
#include "verbs/connect.h"
#include "verbs/internal.h"
#include "wire/frame.h"
#include "support/work_requests.h"

namespace uroce::test {
namespace {

std::string g_unshare_error;  // "" once the test has a network namespace of its own

// Why the taps are not there, or "".
std::string setup_error() { return g_unshare_error.empty() ? EalEnvironment::error() : g_unshare_error; }

// Frames the kernel received on `iface` within `ms`, as a packet socket sees them.
class Capture {
 public:
  explicit Capture(const char* iface) {
    fd_ = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(if_nametoindex(iface));
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) error_ = std::strerror(errno);
  }
  ~Capture() {
    if (fd_ >= 0) close(fd_);
  }
  const std::string& error() const { return error_; }
  std::size_t seen() const { return seen_; }
  // The RoCEv2 frames (UDP port 4791) among those that arrive while
  // `step` runs, up to `want`.
  template <typename Step>
  std::vector<std::vector<std::uint8_t>> roce(std::size_t want, Step step) {
    std::vector<std::vector<std::uint8_t>> got;
    for (int round = 0; round < 2000 && got.size() < want; ++round) {
      step();
      pollfd p{fd_, POLLIN, 0};
      while (poll(&p, 1, 1) == 1) {
        std::vector<std::uint8_t> f(16384);
        const ssize_t n = recv(fd_, f.data(), f.size(), 0);
        if (n <= 0) break;
        f.resize(static_cast<std::size_t>(n));
        ++seen_;
        wire::ParsedFrame parsed;
        if (wire::parse_frame(f, parsed, wire::ParseOptions{false}) == wire::ParseStatus::kOk) got.push_back(f);
      }
    }
    return got;
  }

 private:
  int fd_ = -1;
  std::size_t seen_ = 0;
  std::string error_;
};

class TapOffload : public ::testing::TestWithParam<bool> {};

// Sends a 4 KiB WRITE (zero-copy where the port chains) and an 8-byte one
// (copied) towards a peer that does not exist, and checks what the kernel
// got: valid IPv4 header checksums and ICRCs, whether the port filled the
// checksum or the stack did.
TEST_P(TapOffload, SentFramesCarryValidIpv4ChecksumsAndIcrc) {
  ASSERT_EQ(setup_error(), "");
  const bool offload = GetParam();
  const char* vdev = offload ? "net_tap0" : "net_tap1";
  const char* iface = offload ? "uroce_tap0" : "uroce_tap1";
  ASSERT_EQ(std::system((std::string("ip link set ") + iface + " up").c_str()), 0);
  dpdk::PortConfig pc;
  pc.name = vdev;
  pc.mbufs = 2047;
  pc.max_frame = 1518;  // net_tap in DPDK 22.11 takes no jumbo frames
  pc.ipv4_checksum_offload = offload;
  std::string error;
  auto port = dpdk::Port::open(pc, error);
  ASSERT_NE(port, nullptr) << error;
  EXPECT_EQ(port->ipv4_checksum_offload(), offload) << "net_tap offers IPv4 checksum offload";
  std::vector<std::unique_ptr<dpdk::PortIo>> queues = device::open_queues(*port, 1, {10, 77, 0, 1});
  queues[0]->add_neighbor({10, 77, 0, 2}, {0x02, 0, 0, 0, 0x77, 0x02});
  dpdk::TscClock clock;
  auto ctx = Context::open(device::device_config(queues, clock), error);
  ASSERT_NE(ctx, nullptr) << error;
  Capture cap(iface);
  ASSERT_EQ(cap.error(), "");

  ProtectionDomain* pd = ctx->alloc_pd();
  CompletionQueue* cq = ctx->create_cq(16);
  QpInitAttr init;
  init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
  init.send_cq = init.recv_cq = cq;
  QueuePair* qp = pd->create_qp(init);
  std::vector<std::uint8_t> buf(8192, 0x3c);
  MemoryRegion* mr = pd->reg_mr(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(qp && mr) << ctx->last_error();
  ibv_gid peer = ctx->gid();
  peer.raw[15] = 2;
  ConnectParams params;
  // 1518-byte frames: a 1024 path MTU, and 4096 is refused.
  EXPECT_NE(connect_rc(qp, peer, 0x99, 0x100, 0x200, ConnectParams{IBV_MTU_4096}), 0);
  QpInitAttr again = init;
  ASSERT_EQ(pd->destroy_qp(qp), 0);
  qp = pd->create_qp(again);
  ASSERT_NE(qp, nullptr);
  params.mtu = IBV_MTU_1024;
  ASSERT_EQ(connect_rc(qp, peer, 0x99, 0x100, 0x200, params), 0) << ctx->last_error();
  for (const std::uint32_t len : {4096u, 8u}) {
    ASSERT_EQ(post_rdma(qp, IBV_WR_RDMA_WRITE, buf.data(), len, mr->lkey, std::uint64_t{0x1000}, 0x1234, 0, 0), 0);
  }
  const auto frames = cap.roce(2, [&] { ctx->progress(); });
  ASSERT_GE(frames.size(), 2u) << "the kernel saw no RoCE frames from the tap; engine sent "
                               << internal::engine_of(*ctx).counter(engine::EngineCounter::tx_frames) << ", QP tx_packets "
                               << qp->counter("tx_packets") << ", no mbuf " << queues[0]->counters().tx_dropped_no_mbuf
                               << ", too long " << queues[0]->counters().tx_dropped_too_long << ", seen " << cap.seen();
  for (const auto& f : frames) {
    wire::ParsedFrame p;
    ASSERT_EQ(wire::parse_frame(f, p), wire::ParseStatus::kOk) << "ICRC";
    const std::uint8_t* ip = f.data() + p.l3_offset;
    EXPECT_NE(ip[10] << 8 | ip[11], 0) << "the checksum was filled";
    EXPECT_EQ(wire::ipv4_header_checksum(ip, 20), 0) << "and it is right";
  }
  EXPECT_EQ(queues[0]->counters().tx_ipv4_checksum_offloaded > 0, offload);
  ctx.reset();
}

INSTANTIATE_TEST_SUITE_P(Tap, TapOffload, ::testing::Bool(),
                         [](const auto& param_info) { return param_info.param ? std::string("port_fills_it") : std::string("stack_fills_it"); });

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // A network namespace of our own before EAL makes the tap interfaces.
  if (unshare(CLONE_NEWNET) != 0) {
    uroce::test::g_unshare_error = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno) + " (run as root)";
  } else {
    ::testing::AddGlobalTestEnvironment(new uroce::test::EalEnvironment(
        {.name = "uroce-test", .vdevs = {"net_tap0,iface=uroce_tap0", "net_tap1,iface=uroce_tap1"}}));
  }
  return RUN_ALL_TESTS();
}
