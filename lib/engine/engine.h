// The per-core engine: one loop of receive -> classify -> per-QP receive
// processing -> timers -> transmit (responder answers first, then requests)
// -> one tx_burst. It owns a set of QPs and one queue of the port; the port
// and the clock are injected. With several engines on one port, packets for
// a QP another engine serves are passed to it (engine/handover.h).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/handover.h"
#include "engine/packet_io.h"
#include "engine/qpn_map.h"
#include "transport/qp.h"
#include "wire/parse_status.h"

namespace uroce::engine {

inline constexpr std::uint16_t kBurst = 32;

#define UROCE_ENGINE_COUNTER_LIST(X)                                   \
  X(rx_frames, "frames received from the port")                       \
  X(tx_frames, "frames handed to the port")                           \
  X(rx_not_roce, "frames that are not RoCEv2 (ARP, other traffic)")   \
  X(rx_unknown_qp, "RoCEv2 packets for a QP this engine does not own") \
  X(rx_bad_pkey, "packets with a P_Key other than the default")        \
  X(rx_cnp, "congestion notification packets received")               \
  X(rx_unsupported_transport, "UC/UD/other packets (RC only so far)") \
  X(rx_handed_over, "packets passed to the worker that serves their QP") \
  X(rx_handed_in, "packets another worker passed to this one")         \
  X(rx_handover_full, "packets dropped: the ring to the serving worker was full")

enum class EngineCounter : std::uint8_t {
#define UROCE_X(name, description) name,
  UROCE_ENGINE_COUNTER_LIST(UROCE_X)
#undef UROCE_X
      kCount
};

const char* engine_counter_name(EngineCounter c);

class Engine {
 public:
  Engine(PacketIo& io, Clock& clock, mem::MrTable& mrs);

  // Several engines on queues of one port: this one is worker `self` of
  // `handover`, which says who serves the QPs it does not. Frames released
  // by one engine may have been received by another: the queues must share
  // how frames are released (queues of one DPDK port do).
  void attach(Handover* handover, std::uint32_t self);
  // Frames passed to this engine and not yet taken are released (the
  // workers are stopped).
  void release_handed_in();

  void add_qp(transport::Qp* qp);
  void remove_qp(transport::Qp* qp);
  transport::Qp* find_qp(std::uint32_t qpn) const;

  // One iteration of the loop. Returns frames received + sent.
  std::size_t poll();

  // The earliest time a QP timer (retransmit, RNR wait) falls due; 0 if none
  // is armed. Lets a simulator on virtual time skip idle stretches.
  std::uint64_t next_timer_ns() const;

  std::uint64_t counter(EngineCounter c) const { return counters_[static_cast<std::size_t>(c)]; }
  // Drops by parse reason (index: wire::ParseStatus).
  std::uint64_t parse_drops(wire::ParseStatus s) const { return parse_drops_[static_cast<std::size_t>(s)]; }
  const std::vector<transport::Qp*>& qps() const { return qp_list_; }
  PacketIo& io() { return io_; }
  Clock& clock() { return clock_; }
  transport::Env& env() { return env_; }

 private:
  void receive();
  // Classifies and processes frames; those passed to another worker are
  // taken out of `frames`. Returns how many remain for the caller to release.
  std::uint16_t process(RxFrame* frames, std::uint16_t n, bool handed_in);
  void transmit();

  PacketIo& io_;
  Clock& clock_;
  transport::Env env_;
  void rebuild_index();
  QpnMap<transport::Qp*> index_;
  Handover* handover_ = nullptr;
  std::uint32_t self_ = 0;
  std::vector<transport::Qp*> qp_list_;
  std::size_t tx_cursor_ = 0;  // round-robin start among QPs
  std::array<RxFrame, kBurst> rx_;
  std::array<wire::TxFrame, kBurst> tx_;
  std::uint16_t tx_pending_ = 0;  // frames the port did not take last time
  std::array<std::uint64_t, static_cast<std::size_t>(EngineCounter::kCount)> counters_{};
  std::array<std::uint64_t, wire::kParseStatusCount> parse_drops_{};
};

}  // namespace uroce::engine
