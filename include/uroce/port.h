// The port interface: what an embedder implements to run uroce on its own
// packet I/O, and hands to Context::open() in PortConfig (verbs.h). A
// PacketIo moves Ethernet frames in bursts; a Clock tells the time. Both are
// injected, so the transport runs on a simulated link and virtual time in
// tests and on DPDK and the TSC in production. The engine makes one virtual
// call per burst, never per packet. It calls the data-path members from the
// thread that runs it (Context::progress()'s, or its worker), and those
// marked "control path" from a control call's thread while it is held;
// resolve(), abandon() and the memory registration say their own.
//
// This header is self-contained: <infiniband/verbs.h> and the standard
// library only. The layers below the API (lib/wire, lib/engine) use these
// types too, under their own names (wire::TxFrame, engine::PacketIo).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace uroce {

// The RoCEv2 GID of an IPv4 address: ::ffff:a.b.c.d (GID index 1).
inline ibv_gid ipv4_gid(const std::array<std::uint8_t, 4>& ip) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  for (int i = 0; i < 4; ++i) g.raw[12 + i] = ip[static_cast<std::size_t>(i)];
  return g;
}
// Whether `g` is an IPv4-mapped GID (::ffff:a.b.c.d), as ipv4_gid() makes.
inline bool is_ipv4_gid(const ibv_gid& g) {
  for (int i = 0; i < 10; ++i) {
    if (g.raw[i] != 0) return false;
  }
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

// Writable memory for a frame's head, from the port or the engine.
struct TxHead {
  std::uint8_t* data = nullptr;
  std::uint16_t room = 0;  // bytes writable at data
  void* cookie = nullptr;  // the owner's handle (an mbuf)
};

// A frame on its way out. Its first part, `head`, is writable memory of the
// port's (an mbuf's data room on DPDK) or of the engine's: the headers are
// written there once, and a short payload is copied behind them. A longer
// payload stays in the registered region as pieces (one per SGE it spans)
// that the port sends in place, followed by a trailer with the pad bytes and
// the ICRC. A port gathers the parts (DPDK: head mbuf -> external-buffer
// mbufs -> trailer mbuf; the simulator: one copy onto the wire), or copies
// the whole frame with copy_to().
struct TxFrame {
  static constexpr int kMaxPieces = 16;  // the device's max_sge

  TxHead head;
  std::uint16_t head_len = 0;   // bytes written at head.data
  std::uint16_t l3_offset = 0;  // where the IP header starts
  std::uint8_t npieces = 0;     // payload pieces sent in place, after the head
  std::uint8_t trailer_len = 0; // pad and ICRC after the pieces (0 when the head holds all)
  std::uint16_t copied = 0;     // payload bytes copied into the head
  std::array<std::uint8_t, 8> trailer{};
  std::array<std::span<const std::uint8_t>, kMaxPieces> pieces;

  std::uint32_t payload_in_pieces() const {
    std::uint32_t n = 0;
    for (int i = 0; i < npieces; ++i) n += static_cast<std::uint32_t>(pieces[i].size());
    return n;
  }
  std::uint32_t frame_bytes() const { return head_len + payload_in_pieces() + trailer_len; }

  // Writes the whole frame (frame_bytes()) to `out`; returns the end.
  // An empty head or piece may have no data pointer: memcpy is not given it.
  std::uint8_t* copy_to(std::uint8_t* out) const {
    if (head_len != 0) std::memcpy(out, head.data, head_len);
    out += head_len;
    for (int i = 0; i < npieces; ++i) {
      if (!pieces[i].empty()) std::memcpy(out, pieces[i].data(), pieces[i].size());
      out += pieces[i].size();
    }
    std::memcpy(out, trailer.data(), trailer_len);
    return out + trailer_len;
  }
};

// A received frame in a buffer the port owns until rx_release(). A frame
// that arrived in a chain of buffers (a multi-segment mbuf: a NIC's
// scattered RX, or net_ring carrying a zero-copy TX chain) may be passed as
// it lies: `data`/`len` are its first segment and `more` the ones after it,
// in order, none empty. The engine then reads the headers from a copy and
// places the payload straight from the segments (one copy on RX, not two).
struct RxFrame {
  static constexpr int kMaxMore = 3;  // segments after the first

  std::uint8_t* data = nullptr;
  std::uint16_t len = 0;  // bytes at `data`: the whole frame when nmore == 0
  void* cookie = nullptr;  // the port's handle (an mbuf)
  std::uint8_t nmore = 0;
  std::array<std::span<const std::uint8_t>, kMaxMore> more{};

  std::uint32_t frame_bytes() const {
    std::uint32_t n = len;
    for (int i = 0; i < nmore; ++i) n += static_cast<std::uint32_t>(more[i].size());
    return n;
  }
};

// One queue of a port (PortConfig::io, or each of PortConfig::queues). The
// pure virtual members are what every port implements; the others have
// defaults that fit a port which copies frames.
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
  virtual std::uint16_t tx_burst(const TxFrame* frames, std::uint16_t n) = 0;
  // Writable heads of the port's own buffers (DPDK: mbufs, taken in bulk):
  // the engine writes each frame's headers, and a payload of up to
  // tx_copy_limit() bytes, straight into one, and tx_burst sends it without
  // another copy. Returns how many it gave (fewer when short of buffers). A
  // port that offers none (the default) gets heads of the engine's memory
  // and copies them in tx_burst.
  virtual bool provides_tx_heads() const { return false; }
  virtual std::uint16_t tx_heads(TxHead* /*heads*/, std::uint16_t /*n*/) { return 0; }
  // Heads given and never sent (the engine stops).
  virtual void tx_heads_return(const TxHead* /*heads*/, std::uint16_t /*n*/) {}
  // Payloads up to this many bytes are copied into a frame's head, behind
  // its headers; longer ones go as pieces, sent from the region in place.
  // Only with provides_tx_heads().
  virtual std::uint16_t tx_copy_limit() const { return 0; }
  // The Ethernet address for a peer's GID (ARP/ND, or static). Called from
  // any thread, beside the engine (not only in a control call), and must
  // never block nor touch the queue's RX or TX itself: a request the port
  // sends (ARP, a neighbour solicitation) is handed to the queue's own
  // engine, which sends it in its next burst and takes the answer in as it
  // takes every ARP/ND frame. `ask` false only looks. Returns:
  //  kKnown        `mac` holds the address;
  //  kPending      not known (yet); with `ask`, a request is on its way, so
  //                a later call may return kKnown. The caller (the Context)
  //                decides how often to ask again and when to give up;
  //  kUnreachable  the port can never reach it (a static link without it).
  enum class Resolution { kKnown, kPending, kUnreachable };
  virtual Resolution resolve(const ibv_gid& gid, std::uint8_t mac[6], bool ask) = 0;
  // The caller stopped waiting for `gid` (no answer in time): the port may
  // forget the request, so a late answer is not taken. Any thread; a no-op
  // by default.
  virtual void abandon(const ibv_gid& /*gid*/) {}
  // The port fills the IPv4 header checksum of the frames it sends (TX
  // offload); the engine then leaves it 0.
  virtual bool ipv4_checksum_offload() const { return false; }
  // A thread that will run the engine on this port (a worker, the helper of
  // caller progress) starts and ends: thread_start() on it before its first
  // poll, thread_stop() after its last. A DPDK port registers it with EAL,
  // so its mbufs come from a cache of its own instead of the pool's shared
  // ring (each alloc and free an atomic otherwise). Both may be called more
  // than once on a thread; no-ops by default.
  virtual void thread_start() {}
  virtual void thread_stop() {}
  // Memory that frames may point into (zero-copy TX) is made known to the
  // port, so a NIC can DMA from it. Called from any thread outside a control
  // call (a slow registration must not hold the engines), possibly by two
  // threads at once: the port serialises them itself. Before a region's
  // first frame (register) and after its last (unregister). No-ops by
  // default.
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

// The engine's time source, in nanoseconds.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::uint64_t now_ns() = 0;
};

}  // namespace uroce
