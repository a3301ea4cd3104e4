// What an engine runs on: a port that moves frames in bursts, and a clock.
// Both are injected, so the transport runs on a simulated link and virtual
// time in tests and on DPDK and the TSC in production. One virtual call per
// burst, never per packet.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "wire/tx_frame.h"

namespace uroce::engine {

// A received frame in a buffer the port owns until rx_release().
struct RxFrame {
  std::uint8_t* data = nullptr;
  std::uint16_t len = 0;
  void* cookie = nullptr;  // the port's handle (an mbuf)
};

class PacketIo {
 public:
  virtual ~PacketIo() = default;
  // Up to `max` received frames.
  virtual std::uint16_t rx_burst(RxFrame* frames, std::uint16_t max) = 0;
  // The engine is done with these frames.
  virtual void rx_release(RxFrame* frames, std::uint16_t n) = 0;
  // Sends frames; returns how many were taken (the rest stay with the engine,
  // which offers them again). A taken frame's payload pieces may be read
  // until the port has sent it; the region they point into outlives that.
  // A taken frame's head is the port's again (tx_heads()); heads of the
  // engine's own memory are the engine's again when tx_burst returns.
  virtual std::uint16_t tx_burst(const wire::TxFrame* frames, std::uint16_t n) = 0;
  // Writable heads of the port's own buffers (DPDK: mbufs, taken in bulk):
  // the engine writes each frame's headers, and a payload of up to
  // tx_copy_limit() bytes, straight into one, and tx_burst sends it without
  // another copy. Returns how many it gave (fewer when short of buffers). A
  // port that offers none (the default) gets heads of the engine's memory
  // and copies them in tx_burst.
  virtual bool provides_tx_heads() const { return false; }
  virtual std::uint16_t tx_heads(wire::TxHead* /*heads*/, std::uint16_t /*n*/) { return 0; }
  // Heads given and never sent (the engine stops).
  virtual void tx_heads_return(const wire::TxHead* /*heads*/, std::uint16_t /*n*/) {}
  // Payloads up to this many bytes are copied into a frame's head, behind
  // its headers; longer ones go as pieces, sent from the region in place.
  // Only with provides_tx_heads().
  virtual std::uint16_t tx_copy_limit() const { return 0; }
  // Control path: the Ethernet address for a peer's GID (ARP/ND, or static).
  virtual bool resolve(const ibv_gid& gid, std::uint8_t mac[6]) = 0;
  // The port fills the IPv4 header checksum of the frames it sends (TX
  // offload); the engine then leaves it 0.
  virtual bool ipv4_checksum_offload() const { return false; }
  // Control path: memory that frames may point into (zero-copy TX) is made
  // known to the port, so a NIC can DMA from it. No-ops by default.
  virtual void register_memory(void* /*addr*/, std::size_t /*len*/) {}
  virtual void unregister_memory(void* /*addr*/, std::size_t /*len*/) {}
  // Control path (the engine not polling): calls visit(arg, name,
  // description, value) once for each of the port's own counters, always in
  // the same order; name and description are static strings. How the stats
  // registry (include/uroce/stats.h) reads a port it cannot name. None by
  // default.
  virtual void visit_counters(
      [[maybe_unused]] void (*visit)(void* arg, const char* name, const char* description, std::uint64_t value),
      [[maybe_unused]] void* arg) const {}
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::uint64_t now_ns() = 0;
};

}  // namespace uroce::engine
