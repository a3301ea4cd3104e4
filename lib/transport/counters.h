// Transport counters, declared once (name, description). Per QP and summed
// per engine; exposed by name to the API, telemetry and the tools.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace uroce::transport {

#define UROCE_QP_COUNTER_LIST(X)                                                         \
  X(tx_packets, "packets sent")                                                        \
  X(tx_bytes, "payload bytes sent")                                                    \
  X(rx_packets, "packets received and accepted")                                       \
  X(rx_bytes, "payload bytes received and placed")                                     \
  X(retransmitted_packets, "request packets sent again (go-back-N, or selectively)")                   \
  X(timeouts, "local ACK timeouts")                                                    \
  X(retry_exceeded, "requests ended by retry_cnt exhaustion")                          \
  X(rnr_naks_received, "RNR NAKs received (requester)")                                \
  X(rnr_naks_sent, "RNR NAKs sent: a SEND found no receive posted (responder)")        \
  X(rnr_retry_exceeded, "requests ended by rnr_retry exhaustion")                      \
  X(duplicate_requests, "duplicate request packets received (responder)")              \
  X(duplicate_responses, "duplicate or stale responses received (requester)")          \
  X(drop_response_not_sent, "responses dropped: their PSN was never sent (requester)") \
  X(out_of_sequence, "request packets ahead of the expected PSN (responder)")          \
  X(out_of_sequence_responses, "responses ahead of the expected PSN (requester)")      \
  X(nak_seq_sent, "NAK PSN sequence error sent")                                       \
  X(nak_inv_req_sent, "NAK invalid request sent")                                      \
  X(nak_rem_access_sent, "NAK remote access error sent")                               \
  X(nak_rem_op_sent, "NAK remote operational error sent")                              \
  X(nak_seq_received, "NAK PSN sequence error received")                               \
  X(nak_inv_req_received, "NAK invalid request received")                              \
  X(nak_rem_access_received, "NAK remote access error received")                       \
  X(nak_rem_op_received, "NAK remote operational error received")                      \
  X(acks_sent, "ACK packets sent")                                                     \
  X(acks_received, "ACK packets received")                                             \
  X(implicit_naks, "READ/atomic responses found missing behind a later ACK")           \
  X(read_restart_lost, "resent READ answers that lost their first packets too: asked again at once, not at the timeout") \
  X(read_responses_sent, "RDMA READ response packets sent")                            \
  X(atomics_executed, "atomic operations executed")                                    \
  X(atomics_replayed, "duplicate atomics answered from the response cache")            \
  X(drop_bad_state, "packets dropped: QP not in a state that receives them")           \
  X(drop_bad_opcode_sequence, "packets dropped or NAKed: opcode out of message order") \
  X(drop_bad_length, "requests NAKed: payload not fitting the path MTU, DMA length over 2^31") \
  X(mr_revoked_in_flight, "messages ended: their memory region was deregistered while in flight") \
  X(drop_duplicate_unanswered, "duplicate READs/atomics dropped: too old to answer, or no room") \
  X(drop_qp_access, "requests NAKed: the QP's access flags forbid the operation")     \
  X(drop_unsupported_opcode, "requests NAKed: FLUSH, not supported")                  \
  X(drop_no_resources, "READs/atomics NAKed: no responder resource free")              \
  X(drop_recv_too_short, "SENDs NAKed: longer than the receive WQE")                   \
  X(drop_recv_lkey, "SENDs NAKed: the receive WQE's lkey failed its check")            \
  X(drop_invalidate_refused, "SENDs NAKed: the rkey to invalidate may not be invalidated") \
  X(drop_rkey_violation, "requests NAKed: R_Key, bounds, access or PD check failed")   \
  X(drop_misaligned_atomic, "atomics NAKed: address not 8-byte aligned")               \
  X(drop_reserved_syndrome, "responses dropped: reserved AETH syndrome (requester)")   \
  X(drop_answer_ring_full, "ACKs/NAKs not sent: the response queue was full (responder)") \
  X(messages_dropped, "UC/UD messages dropped unanswered: no receive WQE, too long, refused, or cut by a lost packet") \
  X(drop_bad_qkey, "UD datagrams dropped: their Q_Key is not the QP's")                 \
  X(odp_unmapped, "accesses refused: a page of an on-demand region was not mapped")   \
  X(completions, "work completions generated")                                         \
  X(completion_errors, "work completions with an error status")                        \
  X(flushed, "work requests flushed by the QP entering ERR")                            \
  X(ce_marked_received, "packets received with ECN CE (congestion experienced)")       \
  X(cnps_sent, "congestion notification packets sent (notification point)")            \
  X(cnps_received, "congestion notification packets received (reaction point)")       \
  X(drop_window_rkey, "requests NAKed: a memory window's rkey unbound, invalidated, of another QP, or exceeded") \
  X(mw_binds, "memory windows bound (IBV_WR_BIND_MW, ibv_bind_mw)")                     \
  X(mw_bind_errors, "binds refused: window, region, PD, rights or bounds (IBV_WC_MW_BIND_ERR)") \
  X(mw_invalidations, "type 2 windows invalidated: LOCAL_INV or a peer's SEND with Invalidate") \
  X(local_inv_errors, "LOCAL_INVs refused: no type 2 window of the QP's PD with that rkey") \
  X(atomic_writes_executed, "ATOMIC WRITEs executed (responder)")                      \
  X(drop_xrc_srq, "XRC requests NAKed: the XRCETH named no XRC SRQ of the target QP's domain") \
  X(sr_ahead_placed, "selective repeat: request packets placed ahead of the expected PSN (responder)") \
  X(sr_ahead_refused, "selective repeat: packets ahead not taken: READs and atomics (run in order), or failing a check (judged again in order)") \
  X(sr_out_of_window, "selective repeat: request packets beyond the receive window, dropped (responder)") \
  X(drop_bad_sreth, "selective repeat: requests NAKed: SRETH disagreeing with opcode, PSN, payload or RETH") \
  X(sr_sack_refused, "selective repeat: SACKs dropped: naming PSNs never sent, or going back (requester)") \
  X(sr_rto_low, "selective repeat: short retransmit timeouts (RTO_low: a lost tail) (requester)") \
  X(cc_cwnd, "cc = delay: the congestion window now, in thousandths of a packet (a gauge; summed: the QPs' total)") \
  X(cc_rtt_us, "cc = delay: the smoothed round trip now, us (a gauge)")               \
  X(cc_decreases, "cc = delay: window decreases (delay above target, loss, timeout)") \
  X(cc_increases, "cc = delay: ACKs below the target delay (additive increases)")
// Through uroced the counters travel in order in QpCountersReply (room for 96).

enum class QpCounter : std::uint8_t {
#define UROCE_X(name, description) name,
  UROCE_QP_COUNTER_LIST(UROCE_X)
#undef UROCE_X
      kCount
};

inline constexpr std::size_t kQpCounterCount = static_cast<std::size_t>(QpCounter::kCount);

// A counter has one writer, the engine that owns it (or a control call,
// which holds that engine), and readers on any thread (the API, telemetry).
// Relaxed atomic accesses make those reads race-free and untorn; a load and
// a store, not a locked read-modify-write, since nobody else writes. On x86
// both are plain moves. Every access goes through these two.
static_assert(std::atomic_ref<std::uint64_t>::required_alignment == alignof(std::uint64_t),
              "counters are plain, naturally aligned uint64_t");
inline void counter_add(std::uint64_t& counter, std::uint64_t n) {
  std::atomic_ref<std::uint64_t> c(counter);
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
inline std::uint64_t counter_load(const std::uint64_t& counter) {
  // atomic_ref<const T> is C++26; the load does not write.
  return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(counter)).load(std::memory_order_relaxed);
}

// Where each counter is kept: the ones nearly every packet or message
// moves first, on one cache line (of an aligned QpCounters), the rest
// after them in list order. The list's order (what readers see) is not
// changed by it.
inline constexpr std::array<std::uint8_t, kQpCounterCount> kQpCounterSlot = [] {
  constexpr QpCounter kHot[] = {QpCounter::tx_packets,    QpCounter::tx_bytes,      QpCounter::rx_packets,
                                QpCounter::rx_bytes,      QpCounter::acks_sent,     QpCounter::acks_received,
                                QpCounter::completions,   QpCounter::read_responses_sent};
  std::array<std::uint8_t, kQpCounterCount> slot{};
  std::array<bool, kQpCounterCount> placed{};
  std::size_t next = 0;
  for (const QpCounter c : kHot) {
    slot[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(next++);
    placed[static_cast<std::size_t>(c)] = true;
  }
  for (std::size_t i = 0; i < kQpCounterCount; ++i) {
    if (!placed[i]) slot[i] = static_cast<std::uint8_t>(next++);
  }
  return slot;
}();
static_assert(kQpCounterCount <= 256);

struct alignas(64) QpCounters {
  std::array<std::uint64_t, kQpCounterCount> value{};  // by kQpCounterSlot
  void add(QpCounter c, std::uint64_t n = 1) { counter_add(value[slot(c)], n); }
  // For the gauges (cc_cwnd, cc_rtt_us): one writer, as add.
  void set(QpCounter c, std::uint64_t v) {
    std::atomic_ref<std::uint64_t>(value[slot(c)]).store(v, std::memory_order_relaxed);
  }
  std::uint64_t get(QpCounter c) const { return counter_load(value[slot(c)]); }

 private:
  static std::size_t slot(QpCounter c) { return kQpCounterSlot[static_cast<std::size_t>(c)]; }
};

const char* qp_counter_name(QpCounter c);
const char* qp_counter_description(QpCounter c);
// The counter called `name`, or kCount.
QpCounter qp_counter_by_name(std::string_view name);

}  // namespace uroce::transport
