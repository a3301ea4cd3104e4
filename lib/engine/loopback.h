// Loopback: frames a device sends to its own addresses come back to it
// inside uroce, never on the wire. An RNIC (and Soft-RoCE) loops traffic
// between two QPs of one device internally; a port does not (memif, a NIC,
// af_packet on a veth all send such a frame out and never see it again), so
// without this a QP could not talk to a QP of its own device: rdma-core's
// tests, MPI's connection of a rank to itself, two programs on one uroced.
//
// LoopbackPort wraps the queues of one port, one LoopbackQueue each, between
// the port and its engines. A frame whose destination IP is one of the
// device's GIDs (0: fe80:: from the MAC, 1: the port's GID) is copied whole
// into a buffer of the queue that sent it and received by that queue's
// engine in its next poll, the headers, ICRC and every rule of the receive
// path applying as to a frame from the wire. Its own GIDs resolve to the
// port's own MAC. Everything else passes through untouched; the cost on the
// way out is a look at each frame's destination address, per burst one call.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/packet_io.h"

namespace uroce::engine {

#define UROCE_LOOPBACK_COUNTER_LIST(X)                                                          \
  X(loopback_frames, "frames to the device's own GIDs delivered inside uroce, never on the wire") \
  X(loopback_bytes, "bytes of those frames")                                                     \
  X(loopback_held_back, "times a frame to an own GID waited: every loopback buffer of its queue in use")

class LoopbackPort;

class LoopbackQueue final : public PacketIo {
 public:
  std::uint16_t rx_burst(RxFrame* frames, std::uint16_t max) override;
  void rx_release(RxFrame* frames, std::uint16_t n) override;
  std::uint16_t tx_burst(const TxFrame* frames, std::uint16_t n) override;
  bool provides_tx_heads() const override { return inner_.provides_tx_heads(); }
  std::uint16_t tx_heads(TxHead* heads, std::uint16_t n) override { return inner_.tx_heads(heads, n); }
  void tx_heads_return(const TxHead* heads, std::uint16_t n) override { inner_.tx_heads_return(heads, n); }
  std::uint16_t tx_copy_limit() const override { return inner_.tx_copy_limit(); }
  Resolution resolve(const ibv_gid& gid, std::uint8_t mac[6], bool ask) override;
  void abandon(const ibv_gid& gid) override { inner_.abandon(gid); }
  bool ipv4_checksum_offload() const override { return inner_.ipv4_checksum_offload(); }
  void register_memory(void* addr, std::size_t len) override { inner_.register_memory(addr, len); }
  void unregister_memory(void* addr, std::size_t len) override { inner_.unregister_memory(addr, len); }
  // The port's counters, then this queue's loopback counters.
  void visit_counters(void (*visit)(void* arg, const char* name, const char* description, std::uint64_t value),
                      void* arg) const override;

  PacketIo& inner() { return inner_; }

 private:
  friend class LoopbackPort;
  LoopbackQueue(LoopbackPort& port, PacketIo& inner, std::uint32_t first_slot);
  // Whether the frame goes to one of the device's own GIDs.
  bool to_self(const TxFrame& f) const;
  // Copies `f` into a free buffer and queues it for rx_burst; false when
  // every buffer of this queue is in use.
  bool loop(const TxFrame& f);

  LoopbackPort& port_;
  PacketIo& inner_;
  const std::uint32_t first_slot_;  // this queue's buffers: [first_slot_, first_slot_ + kSlotsPerQueue)
  std::uint32_t next_free_ = 0;     // the buffer loop() takes next (they free up in about that order)
  // Looped frames not yet received: slot numbers, FIFO (the queue's engine
  // alone sends and receives on it, so nothing here is shared).
  std::vector<std::uint32_t> pending_;
  std::uint32_t pending_head_ = 0;
  std::uint32_t pending_count_ = 0;
  std::array<std::uint64_t, 3> counters_{};
};

class LoopbackPort {
 public:
  // Buffers per queue: frames looped and not yet released. A burst is 32;
  // frames handed to another worker may be held a while longer.
  static constexpr std::uint32_t kSlotsPerQueue = 256;
  // A whole RoCEv2 frame at the largest path MTU (4096) with the largest
  // headers (Ethernet + VLAN, IPv6, UDP, BTH, RETH/AtomicETH, ImmDt, ICRC).
  static constexpr std::uint32_t kSlotBytes = 4352;

  // The device's addresses: `mac`, GID 0 (fe80:: from the MAC) and `gid`
  // (GID 1, IPv4-mapped or IPv6). `queues` are the port's, not owned.
  LoopbackPort(const std::vector<PacketIo*>& queues, const std::uint8_t mac[6], const ibv_gid& gid);
  ~LoopbackPort();
  LoopbackPort(const LoopbackPort&) = delete;
  LoopbackPort& operator=(const LoopbackPort&) = delete;

  // What the engine of queue i runs on.
  LoopbackQueue& queue(std::size_t i) { return *queues_[i]; }
  std::size_t size() const { return queues_.size(); }

  // Whether `gid` is one of the device's own.
  bool own(const std::uint8_t gid[16]) const;

 private:
  friend class LoopbackQueue;
  struct Slot {
    std::atomic<bool> busy{false};  // looped, not yet released (released by any engine: handover)
    std::uint16_t len = 0;
  };
  bool owns(const void* cookie) const {
    const auto* s = static_cast<const Slot*>(cookie);
    return s >= slots_.get() && s < slots_.get() + nslots_;
  }
  std::uint8_t* data(std::uint32_t slot) { return buffers_.get() + std::size_t{slot} * kSlotBytes; }

  std::array<std::uint8_t, 6> mac_{};
  std::array<std::array<std::uint8_t, 16>, 2> gids_{};
  bool ipv4_ = false;           // GID 1 is IPv4-mapped: own_ipv4_ is its address
  std::uint32_t own_ipv4_ = 0;  // as it lies in a header
  std::uint32_t nslots_ = 0;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<std::uint8_t[]> buffers_;
  std::vector<std::unique_ptr<LoopbackQueue>> queues_;
};

}  // namespace uroce::engine
