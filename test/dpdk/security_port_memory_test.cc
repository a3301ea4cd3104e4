// Memory registered with a DPDK port (issue 25: L1, L5), on a net_ring port
// that loops what it sends back to its own receive queue, so a zero-copy
// frame stays out (in the ring) until this test receives and frees it:
// - a region inside registered memory (its file) takes no registration of
//   its own, and memory the port has no registration for is copied into
//   frames, never attached;
// - unregistering memory waits for the zero-copy frames that point into it;
//   while one is still out, the registration is kept (and later memory
//   overlapping it is copied), once they are freed it goes.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <vector>

#include "dpdk/port.h"
#include "dpdk/port_io.h"
#include "support/eal_environment.h"
#include "uroce/port.h"

namespace uroce::test {
namespace {

// EAL, and the port every test uses: opened once, closed before EAL goes.
class PortEnvironment : public EalEnvironment {
 public:
  PortEnvironment()
      : EalEnvironment({.name = "uroce-test-svcmem", .vdevs = {"net_ring_svcmem0"}, .log_level = "lib.eal:error"}) {}
  void TearDown() override {
    port_.reset();
    EalEnvironment::TearDown();
  }
  static dpdk::Port* port() {
    if (!port_ && error_.empty()) {
      port_ = dpdk::Port::open({.name = "net_ring_svcmem0", .max_frame = 9018}, error_);
    }
    return port_.get();
  }

 private:
  static inline std::unique_ptr<dpdk::Port> port_;
};

// One frame: 60 bytes of head, then `len` bytes of payload from `data` (a
// zero-copy piece), no trailer.
std::uint16_t send_from(dpdk::PortIo& io, const std::uint8_t* data, std::uint16_t len) {
  TxHead head;
  if (io.tx_heads(&head, 1) != 1) return 0;
  std::memset(head.data, 0xee, 60);
  TxFrame f;
  f.head = head;
  f.head_len = 60;
  f.l3_offset = 14;
  f.npieces = 1;
  f.pieces[0] = std::span<const std::uint8_t>(data, len);
  return io.tx_burst(&f, 1);
}

// Receives what came back (freeing the mbufs); the bytes of each frame
// after its 60-byte head.
std::vector<std::vector<std::uint8_t>> receive(dpdk::Port& port) {
  std::vector<std::vector<std::uint8_t>> frames, out;
  port.receive_copies(0, frames, 8);
  for (const auto& f : frames) out.emplace_back(f.begin() + 60, f.end());
  return out;
}

struct Memory {
  std::size_t bytes;
  std::uint8_t* p;
  explicit Memory(std::size_t n) : bytes(n) {
    p = static_cast<std::uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 7 + 1);
  }
  ~Memory() { munmap(p, bytes); }
};

TEST(PortMemory, RegionsInsideAFileRegisterOnceAndUnregisteredMemoryIsCopied) {
  dpdk::Port* port = PortEnvironment::port();
  ASSERT_NE(port, nullptr) << EalEnvironment::error();
  ASSERT_TRUE(port->multi_seg_tx()) << "net_ring takes chains";
  dpdk::PortIo io(*port, 0, {10, 0, 9, 1});
  Memory file(64 * 4096);
  io.register_memory(file.p, file.bytes);
  for (int i = 0; i < 200; ++i) io.register_memory(file.p + 4096 * (i % 64), 4096);
  EXPECT_EQ(io.counters().regions_registered, 1u);
  EXPECT_EQ(io.counters().regions_in_registered_memory, 200u);
  // From registered memory: attached. From memory never registered: copied.
  Memory stranger(4096);
  ASSERT_EQ(send_from(io, file.p + 4096, 2000), 1);
  ASSERT_EQ(send_from(io, stranger.p, 2000), 1);
  // The second frame's only piece was copied: not a zero-copy frame.
  EXPECT_EQ(io.counters().tx_zero_copy_frames, 1u);
  EXPECT_EQ(io.counters().tx_zero_copy_bytes, 2000u);
  EXPECT_EQ(io.counters().tx_copied_unregistered, 1u);
  const auto got = receive(*port);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], std::vector<std::uint8_t>(file.p + 4096, file.p + 4096 + 2000));
  EXPECT_EQ(got[1], std::vector<std::uint8_t>(stranger.p, stranger.p + 2000));
  for (int i = 0; i < 200; ++i) io.unregister_memory(file.p + 4096 * (i % 64), 4096);
  io.unregister_memory(file.p, file.bytes);
  EXPECT_EQ(io.counters().memory_drain_failed, 0u);
}

TEST(PortMemory, MemoryIsUnregisteredOnlyAfterTheFramesPointingIntoItAreFreed) {
  dpdk::Port* port = PortEnvironment::port();
  ASSERT_NE(port, nullptr) << EalEnvironment::error();
  dpdk::PortIo io(*port, 0, {10, 0, 9, 1});
  Memory region(16 * 4096);
  io.register_memory(region.p, region.bytes);
  ASSERT_EQ(send_from(io, region.p, 3000), 1);  // out, in the ring, pointing into the region
  EXPECT_EQ(io.counters().tx_zero_copy_frames, 1u);
  io.unregister_memory(region.p, region.bytes);
  EXPECT_EQ(io.counters().memory_drain_failed, 1u) << "unregistered while a frame still pointed into it";
  // Kept registered (the NIC may read it): memory registered over it now
  // is not usable for zero copy, so its frames are copied.
  io.register_memory(region.p, region.bytes);
  EXPECT_EQ(io.counters().regions_register_failed, 1u);
  ASSERT_EQ(send_from(io, region.p + 4096, 1000), 1);
  EXPECT_EQ(io.counters().tx_copied_unregistered, 1u);
  EXPECT_EQ(receive(*port).size(), 2u);  // both frames freed
  io.unregister_memory(region.p, region.bytes);
  // Its frames freed, the kept registration went: the memory registers anew.
  io.register_memory(region.p, region.bytes);
  EXPECT_EQ(io.counters().regions_registered, 2u);
  io.unregister_memory(region.p, region.bytes);
  // Once its frames are gone, memory unregisters without waiting.
  Memory next(16 * 4096);
  io.register_memory(next.p, next.bytes);
  ASSERT_EQ(send_from(io, next.p, 3000), 1);
  EXPECT_EQ(receive(*port).size(), 1u);
  io.unregister_memory(next.p, next.bytes);
  EXPECT_EQ(io.counters().memory_drain_failed, 1u);
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new uroce::test::PortEnvironment);
  return RUN_ALL_TESTS();
}
