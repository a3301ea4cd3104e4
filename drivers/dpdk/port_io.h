// The engine's packet I/O on a DPDK port: bursts on one queue pair, a TSC
// clock, and the port's own addresses (it answers ARP for its IPv4 address
// and resolves its peers, so a peer is reached by IP alone).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dpdk/burst_gate.h"
#include "dpdk/iova.h"
#include "dpdk/neighbors.h"
#include "dpdk/port.h"
#include "engine/packet_io.h"

struct rte_device;
struct rte_mbuf;

namespace uroce::dpdk {

class TscClock : public engine::Clock {
 public:
  TscClock();
  std::uint64_t now_ns() override;

 private:
  double ns_per_cycle_;
};

// The port's own counters, declared once (name, description): the fields of
// PortIoCounters and the rows PortIo::visit_counters() reports (telemetry,
// --counters, Context::stats()).
#define UROCE_PORT_COUNTER_LIST(X)                                                                 \
  X(arp_requests_answered, "ARP requests for our address answered")                              \
  X(arp_replies_learned, "ARP replies learned: for addresses being resolved or known")          \
  X(nd_solicitations_answered, "IPv6 neighbour solicitations for our address answered")         \
  X(nd_advertisements_learned, "IPv6 neighbour advertisements learned: targets pending or known") \
  X(neighbors_refused, "ARP replies and NAs for addresses neither being resolved nor known: not stored (RFC 4861 7.2.5)") \
  X(neighbors_evicted, "learned senders (ARP requests, NSes) pushed out by newer ones: a flood shows here") \
  X(neighbors_wanted_evicted, "configured or resolved peers pushed out: more peers than the table holds") \
  X(tx_copied_bytes, "payload bytes gathered (copied) into one mbuf")                           \
  X(tx_zero_copy_frames, "frames whose payload left from the registered region itself")         \
  X(tx_zero_copy_bytes, "payload bytes sent zero-copy from the registered region")              \
  X(tx_dropped_no_mbuf, "frames held back (offered again) for want of mbufs")                   \
  X(tx_dropped_too_long, "frames not sent: longer than the port's max_frame")                   \
  X(tx_ipv4_checksum_offloaded, "frames whose IPv4 header checksum the port fills")             \
  X(rx_linearized, "multi-segment frames copied into one mbuf")                                 \
  X(rx_in_segments, "multi-segment frames passed on as they lie (payload placed from the segments)") \
  X(rx_dropped_too_long, "frames dropped: longer than the largest frame taken")                 \
  X(rx_dropped_no_mbuf, "multi-segment frames dropped: no mbuf to linearize into")              \
  X(rx_other, "frames dropped: neither RoCEv2 nor ARP/ND for us")                               \
  X(rx_dropped_impaired, "frames dropped on arrival on purpose: the lossy link asked for (UROCE_RX_LOSS, PortConfig::rx_loss)") \
  X(rx_pause, "802.3x PAUSE frames that reached the stack (a NIC's MAC normally takes them): dropped") \
  X(rx_pfc, "802.1Qbb PFC frames that reached the stack (a NIC's MAC normally takes them): dropped") \
  X(rx_mac_control_other, "MAC Control frames (ether_type 0x8808) of another opcode: dropped")  \
  X(rx_mac_control_malformed, "MAC Control frames too short for their opcode: dropped")         \
  X(regions_registered, "memory regions registered with DPDK as external memory")               \
  X(regions_dma_mapped, "memory regions DMA-mapped for the device")                             \
  X(regions_dma_unneeded, "memory regions the device needs no mapping for (virtual devices)")   \
  X(regions_register_failed, "memory regions DPDK refused to register (their frames are copied, never DMA'd from)") \
  X(regions_in_registered_memory, "memory regions inside memory already registered (their file's): no DPDK memseg list of their own") \
  X(tx_copied_unregistered, "payload pieces copied, not attached: their memory is not registered with the port") \
  X(memory_drain_failed, "memory unregistered while frames from it could not be shown sent: its registration kept") \
  X(resolve_requests_sent, "ARP requests and neighbour solicitations sent for addresses being resolved") \
  X(resolve_requests_dropped, "resolution requests not sent: more waiting than the port queues (64)") \
  X(tx_pieces_split, "zero-copy payload pieces sent as two or more segments: their pages are not contiguous to the device (IOVA as PA), or the device reads no segment across pages (Port::tx_split_pages)") \
  X(tx_copied_segment_limit, "frames whose payload was copied into one segment: as zero-copy segments it would pass the port's per-frame limit") \
  X(regions_iova_unknown, "memory regions whose device addresses could not be read or pinned (IOVA as PA): copied, never DMA'd from") \
  X(regions_iova_chosen, "memory regions DMA-mapped at an IOVA uroce chose: the IOMMU cannot reach their own addresses (IOVA as VA)")

// Written by the engine's thread (or a control call, which holds it) with
// plain stores: read them in a control call or once the engine is stopped.
struct PortIoCounters {
#define UROCE_X(name, description) std::uint64_t name = 0;
  UROCE_PORT_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};

class PortIo : public engine::PacketIo {
 public:
  // Queue `queue` of `port`, which owns the address `ipv4` (network order bytes).
  PortIo(Port& port, std::uint16_t queue, const std::array<std::uint8_t, 4>& ipv4);
  // Another queue of the same port and address, sharing `first`'s neighbour
  // table (an ARP reply may arrive on any queue).
  PortIo(PortIo& first, std::uint16_t queue);
  ~PortIo() override;

  std::uint16_t rx_burst(engine::RxFrame* frames, std::uint16_t max) override;
  void rx_release(engine::RxFrame* frames, std::uint16_t n) override;
  std::uint16_t tx_burst(const wire::TxFrame* frames, std::uint16_t n) override;
  // Heads are mbufs of the port's pool, taken in bulk; payloads under
  // 512 bytes (all of them on a port without multi-segment TX) are copied
  // into them, longer ones attached as external buffers.
  bool provides_tx_heads() const override { return true; }
  std::uint16_t tx_heads(wire::TxHead* heads, std::uint16_t n) override;
  void tx_heads_return(const wire::TxHead* heads, std::uint16_t n) override;
  std::uint16_t tx_copy_limit() const override;
  // IPv4-mapped GIDs by ARP, IPv6 GIDs by neighbour discovery (RFC 4861):
  // the neighbour table; with `ask`, the address is marked pending and a
  // request is queued for whichever queue of the port polls next (its own
  // engine sends it from rx_burst, so no thread but the queue's owner
  // touches its TX). kKnown or kPending, never kUnreachable (the caller
  // times out). Any thread. A resolved peer stays in the wanted tier.
  Resolution resolve(const ibv_gid& gid, std::uint8_t mac[6], bool ask) override;
  // Drops `gid`'s pending entry: a late answer is refused.
  void abandon(const ibv_gid& gid) override;
  bool ipv4_checksum_offload() const override { return port_.ipv4_checksum_offload(); }
  // Registers the pages of [addr, addr + len) as DPDK external memory and
  // DMA-maps them for the port's device (a physical NIC then reads frames'
  // payloads straight from the region). Virtual devices need no mapping.
  // Memory is registered by span: a span inside one already registered
  // (a region inside its file, as uroced registers whole files first) is
  // counted, not registered again, since DPDK has only 128 memseg lists for
  // the whole process. Frames point only into registered spans: pieces of
  // any other memory are copied. Unregistering the last user of a span
  // first waits until every queue's frames attached before it are freed
  // (zero-copy frames must not outlive the DMA mapping); if a driver cannot
  // show that, the registration is kept (counted as memory_drain_failed).
  // In IOVA-as-PA mode each span's pages are locked (mlock: resident, and
  // at the physical address read once) and their IOVAs read into a table;
  // a zero-copy segment never crosses from one IOVA-contiguous run of
  // pages into the next (a piece that would is split), the span is
  // registered with DPDK with those IOVAs and DMA-mapped run by run.
  void register_memory(void* addr, std::size_t len) override;
  void unregister_memory(void* addr, std::size_t len) override;
  // rte_thread_register / rte_thread_unregister for a thread EAL did not
  // make (one it made has its lcore already): a per-lcore mempool cache.
  void thread_start() override;
  void thread_stop() override;
  // Where the port's queues find page IOVAs (default: EAL's mode,
  // eal_iova_map()). Before any memory is registered: tests give a map of
  // their own.
  void use_iova_map(std::shared_ptr<IovaMap> map);
  // How spans are DMA-mapped for the device: rte_dev_dma_map and
  // rte_dev_dma_unmap unless a test gives its own (a model IOMMU). Each
  // returns 0, or -1 with rte_errno set. Before any memory is registered.
  struct DmaMapper {
    int (*map)(void* arg, void* va, std::uint64_t iova, std::size_t bytes) = nullptr;
    int (*unmap)(void* arg, void* va, std::uint64_t iova, std::size_t bytes) = nullptr;
    void* arg = nullptr;
  };
  void use_dma_mapper(const DmaMapper& mapper);

  // A peer known without asking (wanted tier: no flood evicts it).
  void add_neighbor(const std::array<std::uint8_t, 4>& ip, const std::array<std::uint8_t, 6>& mac);
  // The MAC the neighbour table holds for `gid` (configured, resolved or
  // learned), without asking the link and without changing the table.
  // Returns false if it holds none (or the address is still being resolved).
  bool neighbor(const ibv_gid& gid, std::uint8_t mac[6]) const;
  const std::array<std::uint8_t, 6>& mac() const { return mac_; }
  ibv_gid gid() const;  // ::ffff:a.b.c.d
  ibv_gid link_local() const;  // fe80:: + the MAC's modified EUI-64 (GID index 0)
  const PortIoCounters& counters() const { return counters_; }
  // Every row of UROCE_PORT_COUNTER_LIST, in list order; queue 0 then
  // reports the whole port's UROCE_LINK_COUNTER_LIST (the others report
  // them as 0, so a sum over the queues counts the port once).
  void visit_counters(void (*visit)(void* arg, const char* name, const char* description, std::uint64_t value),
                      void* arg) const override {
#define UROCE_X(name, description) visit(arg, #name, description, counters_.name);
    UROCE_PORT_COUNTER_LIST(UROCE_X)
#undef UROCE_X
    const LinkCounters link = queue_ == 0 ? port_.link_counters() : LinkCounters{};
#define UROCE_X(name, description) visit(arg, #name, description, link.name);
    UROCE_LINK_COUNTER_LIST(UROCE_X)
#undef UROCE_X
  }
  const Port& port() const { return port_; }
  std::uint16_t queue() const { return queue_; }

 private:
  // Learned and configured neighbours, shared by the queues of a port,
  // bounded (neighbors.h). Only control frames (ARP, ND), resolve() and
  // add_neighbor() take the lock, never RoCE frames.
  struct Neighbors {
    static constexpr std::size_t kMaxRequests = 64;
    std::mutex mutex;
    NeighborTable<4> v4;
    NeighborTable<16> v6;
    // Requests resolve() queued for the next queue that polls (under the
    // mutex); `requests_waiting` is what rx_burst looks at without it.
    std::vector<ibv_gid> requests;
    std::atomic<std::uint32_t> requests_waiting{0};
    std::uint64_t requests_dropped = 0;
    Neighbors() { requests.reserve(kMaxRequests); }
    auto& table(const std::array<std::uint8_t, 4>&) { return v4; }
    auto& table(const std::array<std::uint8_t, 16>&) { return v6; }
  };
  PortIo(Port& port, std::uint16_t queue, const std::array<std::uint8_t, 4>& ipv4,
         std::shared_ptr<Neighbors> neighbors);
  // resolve() for an IPv4 (ARP) or IPv6 (ND) address.
  template <std::size_t N>
  Resolution resolve_on_link(const std::array<std::uint8_t, N>& ip, const ibv_gid& gid, std::uint8_t mac[6], bool ask);
  // Sends the requests resolve() queued, on this queue (from rx_burst: the
  // queue's own thread).
  void send_requests();
  // Counts the evictions a table call made.
  void count_evictions(NeighborOutcome o);

  // ARP and other non-RoCE frames: answered or learned here, never passed on.
  bool handle_control(const std::uint8_t* frame, std::uint16_t len);
  // A MAC Control frame (PAUSE, PFC, ...) is counted by kind, never acted
  // on: true. False for any other frame.
  bool count_mac_control(const std::uint8_t* frame, std::uint16_t len);
  // A multi-segment frame gathered into one mbuf (`m` is freed); nullptr,
  // counted, when it is too long or no mbuf is free.
  rte_mbuf* linearize(rte_mbuf* m);
  void send_arp(std::uint16_t oper, const std::array<std::uint8_t, 6>& dst_mac,
                const std::array<std::uint8_t, 4>& dst_ip);
  bool handle_icmp6(const std::uint8_t* frame, std::uint16_t len);
  // True when the port fills this frame's IPv4 header checksum.
  bool mark_offloads(void* mbuf, const wire::TxFrame& f);
  // A neighbour solicitation for `target` (to its solicited-node group), or
  // an advertisement of ours in answer to `to`.
  void send_nd(bool solicit, const ibv_gid& target, const ibv_gid& to, const std::array<std::uint8_t, 6>& to_mac);

  // Memory registered with the port (see register_memory), shared by its
  // queues. The control path changes it under `mutex`; tx_burst reads the
  // usable spans without a lock: a slot's `lo` is written before its `hi`
  // (release), a slot is emptied (hi 0) only while the engines are parked
  // in a control call, and `generation` moves then, so cached hits go.
  struct Memory {
    static constexpr std::size_t kUsable = 128;  // RTE_MAX_MEMSEG_LISTS
    struct Span {
      std::uintptr_t lo = 0, hi = 0;
      std::uint32_t users = 0;
      bool ours = false;     // rte_extmem_register'ed here (and to be unregistered)
      bool usable = false;   // frames may point into it
      bool retired = false;  // users gone, but frames could not be shown sent: kept registered
      int slot = -1;         // its row in lo/hi and in each queue's segment counts; held until it is released
      bool locked = false;   // mlock'ed here (IOVA as PA)
      bool mapped = false;   // DMA-mapped here, run by run
      std::uint64_t iova_window = 0;  // an IOVA range taken for it (take_iova), or 0
      std::shared_ptr<const IovaTable> table;  // its pages' IOVAs (published in `tables` while usable)
      std::vector<std::pair<PortIo*, std::uint64_t>> marks;  // segments of it each queue must have freed
    };
    std::mutex mutex;
    std::vector<Span> spans;
    std::vector<PortIo*> queues;  // the port's queues, to drain
    std::array<std::atomic<std::uintptr_t>, kUsable> lo{}, hi{};
    std::array<std::atomic<const IovaTable*>, kUsable> tables{};  // written before the row's hi
    std::shared_ptr<IovaMap> iova_map = eal_iova_map();
    DmaMapper dma;
    // IOVAs handed out for spans the IOMMU cannot map at their own address:
    // the free ranges (start -> end) of [1 GiB, 3.75 GiB), below x86's MSI
    // window at 0xfee00000 and the addresses EAL reserves for its own
    // memory (from 4 GiB up, where IOVA = VA).
    std::map<std::uint64_t, std::uint64_t> iova_free{{std::uint64_t{1} << 30, std::uint64_t{0xf0000000}}};
    std::array<bool, kUsable> held{};  // control path: a span has the row (usable, or draining)
    std::atomic<std::uint32_t> used{0};  // slots [0, used) may be in use
    std::atomic<std::uint32_t> generation{0};
  };
  // The row of the usable span [p, p + len) lies in, and its IOVA table in
  // `table`; or -1 (the data path: a hit in the last span found, else a
  // scan of the rows).
  int registered(const std::uint8_t* p, std::size_t len, const IovaTable*& table);
  // Every queue's count of zero-copy segments attached into row `slot` so
  // far: once each has freed as many, no frame sent before points into it.
  std::vector<std::pair<PortIo*, std::uint64_t>> tx_marks(int slot) const;
  // Whether the queues have freed row `slot`'s segments up to `marks`; with
  // `wait`, asks each queue's engine to clean up its sent descriptors and
  // waits (bounded) for it.
  bool drained(int slot, const std::vector<std::pair<PortIo*, std::uint64_t>>& marks, bool wait);
  // Unregisters retired spans whose frames have since been freed.
  void reap_retired();
  void release(Memory::Span& span);  // DMA unmap and DPDK unregistration
  // A free IOVA range of `bytes` (0: none left), and giving one back
  // (memory->mutex held).
  std::uint64_t take_iova(std::size_t bytes);
  int dma_map(rte_device* device, void* va, std::uint64_t iova, std::size_t bytes);
  int dma_unmap(rte_device* device, void* va, std::uint64_t iova, std::size_t bytes);
  void give_iova(std::uint64_t start, std::size_t bytes);
  static void on_segment_free(void* addr, void* opaque);

  Port& port_;
  std::uint16_t queue_;
  std::array<std::uint8_t, 4> ip_;
  std::array<std::uint8_t, 6> mac_{};
  std::shared_ptr<Neighbors> neighbors_;
  std::array<void*, 64> rx_mbufs_{};
  PortIoCounters counters_;
  // The port's RxLoss: a frame is dropped when the next draw is below
  // rx_loss_threshold_ (probability * 2^64; 0: never, no draw).
  std::uint64_t rx_loss_threshold_ = 0;
  std::uint64_t rx_loss_state_ = 0;  // splitmix64
  std::uint32_t rx_loss_min_bytes_ = 0;
  // The next draw of the lossy link: true to drop this frame.
  bool impaired();
  std::shared_ptr<Memory> memory_;
  std::uintptr_t hit_lo_ = 0, hit_hi_ = 0;  // the last usable span a piece was found in
  int hit_slot_ = -1;
  const IovaTable* hit_table_ = nullptr;
  std::uint32_t hit_generation_ = ~0u;
  // Zero-copy segments per row of the memory table: attached here (the
  // engine's thread; atomic only so a control call may read it) and freed
  // (whoever frees the mbuf: the driver's TX cleanup, normally that
  // thread). Never freed: a port closed after its queues frees the mbufs
  // its rings still hold, and their free callbacks count here.
  struct SegmentCounts {
    std::array<std::atomic<std::uint64_t>, Memory::kUsable> attached{};
    std::array<std::atomic<std::uint64_t>, Memory::kUsable> freed{};
  };
  static SegmentCounts& new_segment_counts();
  SegmentCounts& segments_;
  // Set by unregister_memory (another thread, outside control calls): the
  // queue's own engine cleans up its sent descriptors in its next rx_burst,
  // so their segments are freed (only the queue's owner may touch its TX).
  std::atomic<bool> tx_cleanup_wanted_{false};
  // This queue's mark in the burst gate (dpdk/burst_gate.h), on a port
  // whose driver tears its rings down on EAL's interrupt thread; nullptr
  // on the others.
  std::unique_ptr<BurstSlot> gate_slot_;
};

// Two ports joined back to back by rte_rings (net_ring), in one process:
// what the in-process benchmark and the integration tests run on. With
// `queues` queue pairs, frames sent on queue i of one port arrive on queue i
// of the other. Returns the two port ids, or false with `error`.
bool create_ring_pair(const char* name, std::uint16_t& port_a, std::uint16_t& port_b, std::string& error,
                      std::uint16_t queues = 1);

}  // namespace uroce::dpdk
