// The per-core engine: one loop of receive -> classify -> per-QP receive
// processing -> timers -> transmit (responder answers first, then requests)
// -> one tx_burst. It owns a set of QPs and one queue of the port; the port
// and the clock are injected. With several engines on one port, packets for
// a QP another engine serves are passed to it (engine/handover.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/handover.h"
#include "engine/packet_io.h"
#include "engine/qpn_map.h"
#include "engine/timer_wheel.h"
#include "transport/qp.h"
#include "wire/parse_status.h"

namespace uroce::engine {

inline constexpr std::uint16_t kBurst = 32;
inline constexpr std::uint32_t kMaxQpsPerEngine = 65536;

enum class Poll : std::uint8_t { kPlain, kHoldingAcks, kSendingFirst };  // Engine::poll

#define UROCE_ENGINE_COUNTER_LIST(X)                                   \
  X(rx_frames, "frames received from the port")                       \
  X(tx_frames, "frames handed to the port")                           \
  X(rx_not_roce, "frames that are not RoCEv2 (ARP, other traffic)")   \
  X(rx_unknown_qp, "RoCEv2 packets for a QP this engine does not own") \
  X(rx_bad_pkey, "packets with a P_Key other than the default")        \
  X(rx_wrong_address, "packets for a connected QP not from its peer's address to ours") \
  X(rx_cnp, "congestion notification packets received (any QP)")       \
  X(rx_unsupported_transport, "RD and other packets of no service uroce runs") \
  X(rx_wrong_service, "packets of another service than their QP's (a UC packet for an RC QP, ...)") \
  X(rx_handed_over, "packets passed to the worker that serves their QP") \
  X(rx_handed_in, "packets another worker passed to this one")         \
  X(rx_handover_full, "packets dropped: the ring to the serving worker was full") \
  X(paths_outside_pfc_priority, "QPs and address handles set to a DSCP whose priority (DSCP >> 3) is not the PFC one: lossy") \
  X(rx_requests, "request packets (SEND, WRITE, READ, atomic, UD datagrams) handed to QPs") \
  X(busy_polls, "polls that moved frames (bursts): rx_frames + tx_frames over this is the frames per burst") \
  X(busy_ns, "time in polls that moved frames, ns: its rate is the fraction of the engine's core doing work")

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
  // Heads the port gave and frames it did not take go back to it.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Several engines on queues of one port: this one is worker `self` of
  // `handover`, which says who serves the QPs it does not. Frames released
  // by one engine may have been received by another: the queues must share
  // how frames are released (queues of one DPDK port do).
  void attach(Handover* handover, std::uint32_t self);
  // Frames passed to this engine and not yet taken are released (the
  // workers are stopped).
  void release_handed_in();

  // Control path (the engine not polling). add_qp returns false when the
  // engine serves kMaxQpsPerEngine QPs already.
  bool add_qp(transport::Qp* qp);
  void remove_qp(transport::Qp* qp);
  transport::Qp* find_qp(std::uint32_t qpn) const;
  // DCQCN for this engine's QPs (nullptr: off). Control path.
  void set_congestion_control(const cc::DcqcnParams* params) { env_.dcqcn = params; }
  // Delay-based congestion control for this engine's QPs (nullptr: off).
  // Control path.
  void set_delay_control(const cc::DelayParams* params) { env_.delay = params; }
  // A floor under the local ACK timeout of this engine's QPs
  // (PortConfig::min_ack_timeout). Control path.
  void set_min_ack_timeout(std::uint8_t timeout) { env_.min_ack_timeout = timeout; }
  // After a control call changed QPs (state, attributes): every QP is
  // looked at in the next poll.
  void wake_all();
  // The same for one QP of this engine's (a control call changed only it).
  void wake(transport::Qp* qp);

  // One iteration of the loop. Returns frames received + sent. It looks only
  // at the QPs with something to do: those whose doorbell rang (new work
  // posted), that received a packet, whose timer fell due, or that still
  // had frames to send when the last burst filled.
  //
  // `kind` (Context::ProgressFor): kPlain receives, runs timers, sends.
  // kHoldingAcks does the same, but a QP whose only answer is a plain ACK
  // keeps it for the next poll, which sends it whatever its kind (an ACK
  // waits one poll at most): for a poll run on the program's own thread
  // just before it looks at what came (ibv_poll_cq in caller progress), so
  // that a program that answers at once (a ping-pong) sends the ACK with
  // its answer, in one burst instead of in a burst of its own ahead of it
  // (a memif burst costs 300-500 ns). kSendingFirst sends before it
  // receives (then sends again): for a poll run right after work was
  // posted, whose frames then leave without waiting for the receive.
  std::size_t poll(Poll kind = Poll::kPlain);
  // Whether an ACK waits for the next poll (control path: a QP about to be
  // destroyed or moved sends it first).
  bool holds_ack(const transport::Qp& qp) const { return qp.sched.ack_held; }

  // The earliest time a QP timer (retransmit, RNR wait) may fall due; 0 if
  // none is armed. Lets a simulator on virtual time skip idle stretches.
  std::uint64_t next_timer_ns();

  // Any thread may read the counters while the engine polls
  // (transport/counters.h): each value is current, not a consistent set.
  std::uint64_t counter(EngineCounter c) const {
    return transport::counter_load(counters_[static_cast<std::size_t>(c)]);
  }
  // Drops by parse reason (index: wire::ParseStatus).
  std::uint64_t parse_drops(wire::ParseStatus s) const {
    return transport::counter_load(parse_drops_[static_cast<std::size_t>(s)]);
  }
  // The engine's own counters: only its thread (or a control call, which
  // holds it: paths_outside_pfc_priority) adds.
  void add_counter(EngineCounter c, std::uint64_t n = 1) {
    transport::counter_add(counters_[static_cast<std::size_t>(c)], n);
  }
  const std::vector<transport::Qp*>& qps() const { return qp_list_; }
  // Counts add_qp and remove_qp: a reader's index of the QPs is stale when
  // it changed (control path).
  std::uint64_t qp_changes() const { return qp_changes_; }
  PacketIo& io() { return io_; }
  Clock& clock() { return clock_; }
  transport::Env& env() { return env_; }

 private:
  void ring_in();
  void ring_in_word(std::uint32_t w);  // the QPs of doorbell word w with new work
  void receive();
  void run_timers();
  void finish();
  void touch(transport::Qp* qp) {
    if (!qp->sched.active) {
      qp->sched.active = true;
      qp->sched.sated = false;
      active_.push_back(qp);
    }
  }
  // Classifies and processes frames; those passed to another worker are
  // taken out of `frames`. Returns how many remain for the caller to release.
  std::uint16_t process(RxFrame* frames, std::uint16_t n, bool handed_in);
  // Prefetches the QPs a burst's frames go to, when the engine serves at
  // least kPrefetchFromQps (with fewer, their lines stay in cache and the
  // passes only cost; the figure is a round one, not a measured knee).
  static constexpr std::size_t kPrefetchFromQps = 256;
  void prefetch_qps(std::uint16_t n) const;
  // Parses frame `i` of a burst into parsed_[i]: a contiguous one's headers,
  // its ICRC left to process() when it is to be verified (icrc_pending_[i]);
  // one in segments is verified at once (its headers copied into
  // head_copies_[i], which parsed_[i] refers to).
  wire::ParseStatus parse(const RxFrame& frame, std::uint16_t i, bool verify_icrc);
  void transmit();
  void transmit_frames();
  void add_parse_drop(wire::ParseStatus s) { transport::counter_add(parse_drops_[static_cast<std::size_t>(s)], 1); }

  PacketIo& io_;
  Clock& clock_;
  transport::Env env_;
  void rebuild_index();
  QpnMap<transport::Qp*> index_;
  Handover* handover_ = nullptr;
  std::uint32_t self_ = 0;
  std::vector<transport::Qp*> qp_list_;
  std::uint64_t qp_changes_ = 0;
  // Doorbells: one bit per slot, rung by application threads; slots_ maps
  // a slot back to its QP (nullptr: free).
  std::unique_ptr<std::atomic<std::uint64_t>[]> doorbells_;
  std::uint32_t doorbell_words_ = 0;  // words in use (the highest slot's + 1)
  // One bit per doorbell word that may have bits (transport::ring_doorbell).
  std::unique_ptr<std::atomic<std::uint64_t>[]> doorbell_summary_;
  std::uint32_t summary_words_ = 0;
  std::vector<transport::Qp*> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::vector<transport::Qp*> active_;  // QPs to serve in this poll
  std::vector<transport::Qp*> still_active_;  // finish()'s scratch, sized like active_
  std::vector<std::uint32_t> cnp_due_;  // QPNs that owe their peer a CNP
  std::vector<std::uint32_t> held_acks_;  // QPNs whose ACK the last poll held back (Poll::kHoldingAcks)
  bool hold_acks_ = false;                // this poll's
  bool burst_full_ = false;             // the last transmit filled its burst
  TimerWheel timers_;
  std::size_t tx_cursor_ = 0;  // round-robin start among active QPs
  std::array<RxFrame, kBurst> rx_;
  // The burst being processed, frame by frame.
  std::array<wire::ParsedFrame, kBurst> parsed_{};
  std::array<wire::ParseStatus, kBurst> status_{};
  std::array<bool, kBurst> icrc_pending_{};
  std::array<std::array<std::uint8_t, wire::kHeadCopyBytes>, kBurst> head_copies_{};
  // The frames of a burst, their ICRC computed after all of them are
  // written (wire::finish_icrc_tx).
  std::array<wire::TxFrame, kBurst> tx_;
  std::uint16_t tx_pending_ = 0;  // frames the port did not take last time
  // Heads for the frames of the next bursts, taken from the top: the port's
  // (refilled in bulk), or blocks of own_heads_ for ports that have none.
  // Ethernet .. the largest extension headers, and room for a whole UC/UD
  // packet at the largest path MTU (those are copied into their heads).
  static constexpr std::uint16_t kOwnHeadBytes = 128 + 4096 + 8;
  std::array<wire::TxHead, 2 * kBurst> heads_{};
  std::uint16_t nheads_ = 0;
  std::vector<std::uint8_t> own_heads_;
  std::array<std::uint64_t, static_cast<std::size_t>(EngineCounter::kCount)> counters_{};
  std::array<std::uint64_t, wire::kParseStatusCount> parse_drops_{};
};

}  // namespace uroce::engine
