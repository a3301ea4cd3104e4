// The RC transport over DPDK ports: two devices on net_ring ports in one
// process (EAL with --no-huge --no-shconf --no-pci), every verb with its
// data verified; and ARP: a port answers for its address and learns peers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <tuple>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <rte_eal.h>

#include "dpdk/eal.h"
#include "dpdk/ring_pair.h"
#include "engine/engine.h"
#include "test_seed.h"

namespace uroce::test {
namespace {

class EalEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    error_ = dpdk::eal_init({"uroce-test", "--no-huge", "--no-shconf", "--no-pci", "-l", "0", "-m", "768",
                             "--log-level=lib.*:error"});
  }
  void TearDown() override { dpdk::eal_cleanup(); }
  static const std::string& error() { return error_; }

 private:
  static inline std::string error_;
};

struct Devices {
  // With `workers`, each device's engine runs on a thread of its own (CPUs 0
  // and 1) before anything is set up: every control call below goes through
  // the worker, and this thread only posts and polls.
  explicit Devices(const std::string& name, bool workers = false) {
    std::string error;
    pair = dpdk::RingPair::create(name, error);
    EXPECT_NE(pair, nullptr) << error;
    if (!pair) return;
    if (workers) {
      EXPECT_EQ(pair->a->start_worker(0), 0);
      EXPECT_EQ(pair->b->start_worker(1), 0);
      EXPECT_EQ(pair->a->start_worker(0), EBUSY);
    }
    pda = pair->a->alloc_pd();
    pdb = pair->b->alloc_pd();
    cqa = pair->a->create_cq(4096);
    cqb = pair->b->create_cq(4096);
    QpInitAttr init;
    init.cap = ibv_qp_cap{256, 256, 4, 4, 64};
    init.send_cq = init.recv_cq = cqa;
    qa = pda->create_qp(init);
    init.send_cq = init.recv_cq = cqb;
    qb = pdb->create_qp(init);
    bufa = static_cast<std::uint8_t*>(pair->a->alloc_buffer(kBytes));
    bufb = static_cast<std::uint8_t*>(pair->b->alloc_buffer(kBytes));
    const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    mra = pda->reg_mr(bufa, kBytes, all);
    mrb = pdb->reg_mr(bufb, kBytes, all);
    ConnectParams params;
    params.mtu = IBV_MTU_4096;
    EXPECT_EQ(pair->connect(qa, qb, params), 0) << pair->a->last_error() << pair->b->last_error();
  }

  std::vector<ibv_wc> wait(CompletionQueue* cq, std::size_t n) {
    std::vector<ibv_wc> got;
    ibv_wc wc[32];
    pair->run_until(
        [&] {
          for (int k; (k = cq->poll(32, wc)) > 0;) got.insert(got.end(), wc, wc + k);
          return got.size() >= n;
        },
        20'000'000'000ull);
    return got;
  }

  static constexpr std::size_t kBytes = 8u << 20;
  std::unique_ptr<dpdk::RingPair> pair;
  ProtectionDomain* pda = nullptr;
  ProtectionDomain* pdb = nullptr;
  CompletionQueue* cqa = nullptr;
  CompletionQueue* cqb = nullptr;
  QueuePair* qa = nullptr;
  QueuePair* qb = nullptr;
  std::uint8_t* bufa = nullptr;
  std::uint8_t* bufb = nullptr;
  MemoryRegion* mra = nullptr;
  MemoryRegion* mrb = nullptr;
};

class DpdkRc : public ::testing::TestWithParam<std::tuple<ibv_wr_opcode, bool>> {};

TEST_P(DpdkRc, EveryMessageArrivesWhole) {
  ASSERT_EQ(EalEnvironment::error(), "");
  const ibv_wr_opcode op = std::get<0>(GetParam());
  const bool workers = std::get<1>(GetParam());
  Devices d("rc" + std::to_string(static_cast<int>(op)) + (workers ? "w" : ""), workers);
  ASSERT_NE(d.pair, nullptr);
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const bool atomic = op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP;
  std::uint64_t model = 1000;
  std::memcpy(d.bufb + Devices::kBytes - 8, &model, 8);
  for (int i = 0; i < 200; ++i) {
    const std::uint32_t len = atomic ? 8 : static_cast<std::uint32_t>(rng() % (256u << 10));
    const std::uint64_t src = 0;
    const std::uint64_t dst = 1u << 20;
    std::uint8_t* from = op == IBV_WR_RDMA_READ ? d.bufb + dst : d.bufa + src;
    for (std::uint32_t k = 0; k < len; ++k) from[k] = static_cast<std::uint8_t>(rng());
    if (op == IBV_WR_SEND) {
      ibv_sge rs{reinterpret_cast<std::uint64_t>(d.bufb + dst), len, d.mrb->lkey};
      ibv_recv_wr rw{};
      rw.sg_list = &rs;
      rw.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      ASSERT_EQ(d.qb->post_recv(&rw, &bad), 0);
    }
    ibv_sge sge{reinterpret_cast<std::uint64_t>(d.bufa + (op == IBV_WR_RDMA_READ ? dst : src)), len, d.mra->lkey};
    ibv_send_wr wr{};
    wr.wr_id = static_cast<std::uint64_t>(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (atomic) {
      wr.wr.atomic.remote_addr = reinterpret_cast<std::uint64_t>(d.bufb + Devices::kBytes - 8);
      wr.wr.atomic.rkey = d.mrb->rkey;
      wr.wr.atomic.compare_add = op == IBV_WR_ATOMIC_CMP_AND_SWP ? model : 3;
      wr.wr.atomic.swap = model + 7;
    } else {
      wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(d.bufb + dst);
      wr.wr.rdma.rkey = d.mrb->rkey;
    }
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(d.qa->post_send(&wr, &bad), 0);
    const auto wc = d.wait(d.cqa, 1);
    ASSERT_EQ(wc.size(), 1u) << "message " << i;
    ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS) << wc_status_str(wc[0].status);
    if (atomic) {
      std::uint64_t orig;
      std::memcpy(&orig, d.bufa, 8);
      ASSERT_EQ(orig, model);
      model = op == IBV_WR_ATOMIC_CMP_AND_SWP ? model + 7 : model + 3;
    } else if (op == IBV_WR_RDMA_READ) {
      ASSERT_EQ(std::memcmp(d.bufa + dst, d.bufb + dst, len), 0) << "message " << i;
    } else {
      if (op == IBV_WR_SEND) {
        const auto r = d.wait(d.cqb, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].byte_len, len);
      }
      ASSERT_EQ(std::memcmp(d.bufa + src, d.bufb + dst, len), 0) << "message " << i;
    }
  }
  std::uint64_t final_value;
  std::memcpy(&final_value, d.bufb + Devices::kBytes - 8, 8);
  if (atomic) {
    EXPECT_EQ(final_value, model);
  }
  // The regions were registered with DPDK (net_ring needs no DMA mapping).
  EXPECT_EQ(d.pair->io_a->counters().regions_registered, 1u);
  EXPECT_EQ(d.pair->io_a->counters().regions_register_failed, 0u);
  // The frames went through the ports; large payloads leave the region
  // itself (zero copy) wherever the port takes multi-segment frames.
  EXPECT_GT(d.pair->frames_sent(), 200u);
  const dpdk::PortIo& sender = op == IBV_WR_RDMA_READ ? *d.pair->io_b : *d.pair->io_a;
  if (!atomic && d.pair->port_a->multi_seg_tx()) {
    EXPECT_GT(sender.counters().tx_zero_copy_frames, 0u);
  } else {
    EXPECT_EQ(sender.counters().tx_zero_copy_frames, 0u);
  }
  EXPECT_EQ(d.pair->a->engine().parse_drops(wire::ParseStatus::kIcrcMismatch), 0u);
}

INSTANTIATE_TEST_SUITE_P(Verbs, DpdkRc,
                         ::testing::Combine(::testing::Values(IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ,
                                                              IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP),
                                            ::testing::Bool()),
                         [](const auto& param_info) {
                           std::string name;
                           switch (std::get<0>(param_info.param)) {
                             case IBV_WR_SEND: name = "send"; break;
                             case IBV_WR_RDMA_WRITE: name = "write"; break;
                             case IBV_WR_RDMA_READ: name = "read"; break;
                             case IBV_WR_ATOMIC_FETCH_AND_ADD: name = "fetch_add"; break;
                             default: name = "cmp_swap"; break;
                           }
                           return name + (std::get<1>(param_info.param) ? "_on_worker_cores" : "_one_thread");
                         });

// A client of DPDK's telemetry socket, as dpdk-telemetry.py is.
std::string telemetry(const std::string& command) {
  const std::string path = std::string(rte_eal_get_runtime_dir()) + "/dpdk_telemetry.v2";
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "cannot connect to " + path;
  }
  char buf[16384];
  const ssize_t hello = read(fd, buf, sizeof buf);  // the server's greeting
  (void)hello;
  if (write(fd, command.data(), command.size()) < 0) {
    close(fd);
    return "write failed";
  }
  const ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "no answer";
}

TEST(DpdkTelemetry, CountersAreReadableAtRunTime) {
  ASSERT_EQ(EalEnvironment::error(), "");
  Devices d("tel");
  ASSERT_NE(d.pair, nullptr);
  std::memset(d.bufa, 7, 4096);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(d.bufa), 4096, d.mra->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(d.bufb);
  wr.wr.rdma.rkey = d.mrb->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(d.qa->post_send(&wr, &bad), 0);
  ASSERT_EQ(d.wait(d.cqa, 1).size(), 1u);
  const std::string devices = telemetry("/uroce/devices");
  EXPECT_NE(devices.find("\"tel-a\""), std::string::npos) << devices;
  // Our devices are the last two exposed.
  const auto a_index = devices.find("tel-a");
  ASSERT_NE(a_index, std::string::npos);
  const std::string index = devices.substr(devices.rfind('"', devices.rfind('"', a_index - 2) - 1) + 1);
  const std::string dev = index.substr(0, index.find('"'));
  const std::string qps = telemetry("/uroce/qps," + dev);
  EXPECT_NE(qps.find(std::to_string(d.qa->qp_num())), std::string::npos) << qps;
  const std::string qp = telemetry("/uroce/qp," + dev + "," + std::to_string(d.qa->qp_num()));
  EXPECT_NE(qp.find("\"state\":\"RTS\""), std::string::npos) << qp;
  EXPECT_NE(qp.find("\"tx_packets\":1,"), std::string::npos) << qp;
  EXPECT_NE(qp.find("\"tx_bytes\":4096"), std::string::npos) << qp;
  const std::string engine = telemetry("/uroce/engine," + dev);
  EXPECT_NE(engine.find("\"drop_icrc_mismatch\":0"), std::string::npos) << engine;
  EXPECT_NE(telemetry("/uroce/qp," + dev + ",999999").find("null"), std::string::npos) << "an unknown QP";
}

TEST(DpdkArp, APortAnswersForItsAddressAndTheOtherLearnsIt) {
  ASSERT_EQ(EalEnvironment::error(), "");
  std::uint16_t ida = 0;
  std::uint16_t idb = 0;
  std::string error;
  ASSERT_TRUE(dpdk::create_ring_pair("arp", ida, idb, error)) << error;
  dpdk::PortConfig cfg;
  cfg.mbufs = 1023;
  cfg.port_id = ida;
  auto pa = dpdk::Port::open(cfg, error);
  cfg.port_id = idb;
  auto pb = dpdk::Port::open(cfg, error);
  ASSERT_TRUE(pa && pb) << error;
  dpdk::PortIo a(*pa, 0, {10, 97, 0, 1});
  dpdk::PortIo b(*pb, 0, {10, 97, 0, 2});
  // A answers from its own poll loop while B waits for the reply.
  std::atomic<bool> stop{false};
  std::thread responder([&] {
    std::array<engine::RxFrame, 32> frames;
    while (!stop) {
      const std::uint16_t n = a.rx_burst(frames.data(), 32);
      a.rx_release(frames.data(), n);
    }
  });
  std::uint8_t mac[6] = {};
  const bool ok = b.resolve(a.gid(), mac);
  stop = true;
  responder.join();
  ASSERT_TRUE(ok) << "no ARP reply";
  EXPECT_EQ(std::memcmp(mac, a.mac().data(), 6), 0);
  EXPECT_EQ(a.counters().arp_requests_answered, 1u);
  EXPECT_EQ(b.counters().arp_replies_learned, 1u);
  // Nobody owns 10.97.0.9: resolution gives up after its second.
  ibv_gid nobody = a.gid();
  nobody.raw[15] = 9;
  EXPECT_FALSE(b.resolve(nobody, mac));
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new uroce::test::EalEnvironment);
  return RUN_ALL_TESTS();
}
