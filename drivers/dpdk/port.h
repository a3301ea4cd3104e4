// An ethdev port, any kind (physical, net_ring, net_memif, net_af_packet,
// net_tap): set up with one RX/TX queue pair per worker and an mbuf pool
// sized to the frame. The copying send/receive calls here serve tools and
// tests; the zero-copy datapath builds on the same set-up.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::dpdk {

// A lossy link for tests and measurements, made at the receiver: each
// frame that is not ARP, ND or MAC control is dropped on arrival with
// `probability`, drawn from a generator seeded with `seed` (and the queue),
// and counted (rx_dropped_impaired). For links where the kernel's netem is
// absent (memif, or a kernel without sch_netem). Off at 0.
struct RxLoss {
  double probability = 0;
  std::uint64_t seed = 1;
  // Frames shorter than this always pass: a loss of data packets only,
  // their ACKs and the programs' small control messages spared (0: any
  // frame may go).
  std::uint32_t min_bytes = 0;
};

// UROCE_RX_LOSS's text, "P", "P,SEED" or "P,SEED,MIN_BYTES" (0 <= P < 1,
// SEED and MIN_BYTES decimal numbers): true and `loss` filled, or false
// with a one-line `error`.
bool parse_rx_loss(std::string_view text, RxLoss& loss, std::string& error);

struct PortConfig {
  std::string name{};          // device name ("net_ring0", "0000:3b:00.0"); empty: port_id
  std::uint16_t port_id = 0;
  std::uint16_t queues = 1;    // RX/TX queue pairs, one per worker core
  std::uint16_t rx_desc = 1024;
  std::uint16_t tx_desc = 1024;
  std::uint32_t mbufs = 8191;
  std::uint16_t max_frame = 1518;  // largest frame to receive (Ethernet header included)
  bool zero_copy_tx = true;        // chain region memory into TX frames where the port takes chains
  bool ipv4_checksum_offload = true;  // let the port fill IPv4 header checksums where it can
  // The lossless priority (802.1p, 0-7) to enable 802.1Qbb priority flow
  // control for on the port; -1: leave the port's flow control as it is.
  int pfc_priority = -1;
  // Frames dropped on arrival, on purpose (see RxLoss). Port::open takes
  // UROCE_RX_LOSS from the environment instead when it is set, so any
  // program on a port (uroce-perf, uroce-run's, uroced) runs over a lossy
  // link without a flag of its own.
  RxLoss rx_loss{};
};

// What became of PortConfig::pfc_priority.
enum class PortPfc : std::uint8_t {
  kOff,          // none asked
  kOn,           // the driver enabled PFC on that priority
  kUnsupported,  // the driver has no PFC control (every virtual one): configure the NIC and switch instead
};

// The NIC's own counters for the whole port (rte_eth_stats, and the
// driver's extended statistics for pause frames), declared once: reported
// by the port's queue 0 beside UROCE_PORT_COUNTER_LIST. Virtual devices
// count what they can (net_ring: packets and bytes) and 0 for the rest.
#define UROCE_LINK_COUNTER_LIST(X)                                                                          \
  X(link_rx_packets, "frames the port received (the NIC's count, every queue)")                             \
  X(link_tx_packets, "frames the port sent (the NIC's count, every queue)")                                 \
  X(link_rx_bytes, "bytes the port received (the NIC's count, every queue)")                                \
  X(link_tx_bytes, "bytes the port sent (the NIC's count, every queue)")                                    \
  X(link_rx_missed, "frames the NIC dropped: its receive queues were full (the engines fell behind)")      \
  X(link_rx_errors, "frames the NIC received in error (bad FCS, runts)")                                    \
  X(link_tx_errors, "frames the NIC failed to send")                                                        \
  X(link_rx_no_mbuf, "frames the NIC dropped: no mbuf to receive into (the pool ran dry)")                  \
  X(link_rx_pause_frames, "PAUSE and PFC XOFF frames the NIC received: the link partner paused us (driver xstats)") \
  X(link_tx_pause_frames, "PAUSE and PFC XOFF frames the NIC sent: we paused the link partner (driver xstats)") \
  X(link_rx_paused_us, "time the link partner's PAUSE and PFC frames held our sending, us, where the NIC counts it (mlx5: rx_prioN_pause_duration); 0 elsewhere")

struct LinkCounters {
#define UROCE_X(name, description) std::uint64_t name = 0;
  UROCE_LINK_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};

class Port {
 public:
  // Configures and starts the port. nullptr and a one-line `error` on failure
  // (no such port, not enough memory for the pool, the device refused, a
  // PFC priority outside 0-7 or one the driver refused). A driver without
  // PFC support is no failure: one warning names the port and the driver
  // and says where to enable PFC instead, and pfc() says kUnsupported.
  static std::unique_ptr<Port> open(const PortConfig& config, std::string& error);
  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  std::uint16_t id() const { return port_id_; }
  void* pool() const { return pool_; }  // rte_mempool of this port's mbufs
  // The port sends multi-segment mbufs (and zero-copy TX is asked for).
  bool multi_seg_tx() const { return multi_seg_tx_; }
  // The port fills IPv4 header checksums (and it was asked to).
  bool ipv4_checksum_offload() const { return ipv4_cksum_; }
  // The largest frame sent or received (PortConfig::max_frame).
  std::uint16_t max_frame() const { return max_frame_; }
  PortPfc pfc() const { return pfc_; }
  // What PortConfig::rx_loss or UROCE_RX_LOSS asked (probability 0: none).
  const RxLoss& rx_loss() const { return rx_loss_; }
  // The most segments one frame may have on this port (its driver's limit).
  std::uint16_t max_tx_segments() const { return max_tx_segments_; }
  // Zero-copy segments must not cross a page even where the IOMMU makes
  // the IOVAs contiguous: qemu's e1000e and vmxnet3 models (qemu 7.1-8.1,
  // hw/net/net_tx_pkt.c) map a transmit buffer into their own memory in one
  // piece and drop the frame, silently, when the pages behind it are not
  // neighbours in guest-physical memory. A real NIC reads through the IOMMU
  // page by page; for it the split costs one descriptor per page crossed.
  bool tx_split_pages() const { return tx_split_pages_; }
  // The driver unmaps the port's rings on EAL's interrupt thread, on its
  // own (memif, when its peer goes): bursts on it go through the burst
  // gate (dpdk/burst_gate.h).
  bool rings_torn_down_by_interrupt_thread() const { return rings_torn_down_by_interrupt_thread_; }

  // Copies each frame into an mbuf and sends the burst on `queue`. Returns
  // how many the device took; the rest are freed, not retried.
  std::uint16_t send_copies(std::uint16_t queue, std::span<const std::vector<std::uint8_t>> frames);

  // The NIC's counters now (rte_eth_stats_get, and the pause xstats found
  // by name the first time). Any thread; the driver's own locking applies.
  LinkCounters link_counters() const;

  // Receives up to `max` frames from `queue`, appending a copy of each to `out`.
  std::uint16_t receive_copies(std::uint16_t queue, std::vector<std::vector<std::uint8_t>>& out,
                               std::uint16_t max = 32);

 private:
  Port(std::uint16_t port_id, void* pool, bool multi_seg, bool ipv4_cksum, std::uint16_t max_frame, PortPfc pfc)
      : port_id_(port_id), pool_(pool), multi_seg_tx_(multi_seg), ipv4_cksum_(ipv4_cksum), max_frame_(max_frame),
        pfc_(pfc) {}
  std::uint16_t port_id_;
  void* pool_;  // rte_mempool
  bool multi_seg_tx_;
  bool ipv4_cksum_;
  std::uint16_t max_frame_;
  PortPfc pfc_;
  std::uint16_t max_tx_segments_ = UINT16_MAX;
  bool tx_split_pages_ = false;
  bool rings_torn_down_by_interrupt_thread_ = false;
  RxLoss rx_loss_{};
  // The ids of the driver's xstats that count pause frames received and
  // sent (found once: their names differ by driver).
  mutable std::once_flag pause_ids_found_;
  mutable std::vector<std::uint64_t> rx_pause_ids_, tx_pause_ids_, rx_paused_us_ids_;
};

// Ports EAL found (physical and virtual).
std::uint16_t port_count();

}  // namespace uroce::dpdk
