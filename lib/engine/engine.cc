#include "engine/engine.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>

#include "wire/frame.h"

namespace uroce::engine {
namespace {

constexpr const char* kCounterNames[] = {
#define UROCE_X(name, description) #name,
    UROCE_ENGINE_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};

}  // namespace

const char* engine_counter_name(EngineCounter c) {
  return c < EngineCounter::kCount ? kCounterNames[static_cast<std::size_t>(c)] : "invalid";
}

Engine::Engine(PacketIo& io, Clock& clock, mem::MrTable& mrs)
    : io_(io),
      clock_(clock),
      doorbells_(std::make_unique<std::atomic<std::uint64_t>[]>(kMaxQpsPerEngine / 64)),
      doorbell_summary_(std::make_unique<std::atomic<std::uint64_t>[]>(kMaxQpsPerEngine / 64 / 64)) {
  env_.mrs = &mrs;
  env_.ipv4_checksum_offload = io.ipv4_checksum_offload();
  // Frames are written into tx_ with their ICRC left to transmit_frames().
  env_.defer_icrc = true;
  if (io.provides_tx_heads()) {
    env_.copy_limit = io.tx_copy_limit();
  } else {
    own_heads_.resize(std::size_t{kOwnHeadBytes} * heads_.size());
    for (std::size_t i = 0; i < heads_.size(); ++i) {
      heads_[nheads_++] = wire::TxHead{own_heads_.data() + i * kOwnHeadBytes, kOwnHeadBytes, nullptr};
    }
  }
  rebuild_index();
}

Engine::~Engine() {
  if (!io_.provides_tx_heads()) return;
  io_.tx_heads_return(heads_.data(), nheads_);
  for (std::uint16_t i = 0; i < tx_pending_; ++i) io_.tx_heads_return(&tx_[i].head, 1);
}

bool Engine::add_qp(transport::Qp* qp) {
  std::uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else if (slots_.size() < kMaxQpsPerEngine) {
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.push_back(nullptr);
    doorbell_words_ = static_cast<std::uint32_t>(slots_.size() + 63) / 64;
    summary_words_ = (doorbell_words_ + 63) / 64;
  } else {
    return false;
  }
  slots_[slot] = qp;
  qp->sched = transport::Qp::Sched{};
  qp->sched.slot = slot;
  qp->doorbell = &doorbells_[slot / 64];
  qp->doorbell_bit = std::uint64_t{1} << (slot % 64);
  qp->doorbell_summary = &doorbell_summary_[slot / 64 / 64];
  qp->summary_bit = std::uint64_t{1} << (slot / 64 % 64);
  qp_list_.push_back(qp);
  // Each QP is on the active list and the CNP due list at most once: sized
  // here, they never grow on the data path.
  // (Doubling: 10,000 QPs must not copy the lists 10,000 times.)
  const std::size_t room = std::bit_ceil(qp_list_.size());
  active_.reserve(room);
  still_active_.reserve(room);
  cnp_due_.reserve(room);
  held_acks_.reserve(room);
  timers_.reserve(slots_.size());
  // In place while the table has room (creating 10,000 QPs stays linear).
  if (!index_.insert(qp->qpn, qp, qp_list_.size())) rebuild_index();
  ++qp_changes_;
  touch(qp);
  return true;
}

void Engine::remove_qp(transport::Qp* qp) {
  if (std::find(qp_list_.begin(), qp_list_.end(), qp) == qp_list_.end()) return;
  qp_list_.erase(std::remove(qp_list_.begin(), qp_list_.end(), qp), qp_list_.end());
  active_.erase(std::remove(active_.begin(), active_.end(), qp), active_.end());
  slots_[qp->sched.slot] = nullptr;
  timers_.remove(qp->sched.slot);
  free_slots_.push_back(qp->sched.slot);
  qp->doorbell = nullptr;
  tx_cursor_ = 0;
  index_.erase(qp->qpn);  // in place: destroying 10,000 QPs stays linear
  ++qp_changes_;
}

void Engine::wake_all() {
  for (transport::Qp* qp : qp_list_) {
    transport::sync_from_app(*qp);
    touch(qp);
  }
}

void Engine::wake(transport::Qp* qp) {
  if (slots_[qp->sched.slot] != qp) return;  // not (or no longer) ours
  transport::sync_from_app(*qp);
  touch(qp);
}

void Engine::attach(Handover* handover, std::uint32_t self) {
  handover_ = handover;
  self_ = self;
}

void Engine::release_handed_in() {
  if (handover_ == nullptr) return;
  for (std::uint16_t n; (n = handover_->pop(self_, rx_.data(), kBurst)) > 0;) io_.rx_release(rx_.data(), n);
}

void Engine::rebuild_index() {
  std::vector<std::pair<std::uint32_t, transport::Qp*>> entries;
  entries.reserve(qp_list_.size());
  for (transport::Qp* qp : qp_list_) entries.emplace_back(qp->qpn, qp);
  index_.rebuild(entries);
}

transport::Qp* Engine::find_qp(std::uint32_t qpn) const {
  transport::Qp* const* qp = index_.find(qpn);
  return qp != nullptr ? *qp : nullptr;
}

std::size_t Engine::poll(Poll kind) {
  env_.now = clock_.now_ns();
  hold_acks_ = kind == Poll::kHoldingAcks;
  const std::size_t before = counter(EngineCounter::rx_frames) + counter(EngineCounter::tx_frames);
  ring_in();
  if (!held_acks_.empty()) [[unlikely]] {
    // The ACKs the last poll held go out in this one (unless the QP went, or
    // a control call sent them).
    for (const std::uint32_t qpn : held_acks_) {
      if (transport::Qp* qp = find_qp(qpn); qp != nullptr && qp->sched.ack_held) touch(qp);
    }
    held_acks_.clear();
  }
  if (kind == Poll::kSendingFirst) transmit();
  receive();
  run_timers();
  transmit();
  finish();
  const std::size_t moved = counter(EngineCounter::rx_frames) + counter(EngineCounter::tx_frames) - before;
  // Only a poll that did work reads the clock again: an idle loop pays nothing.
  if (moved != 0) {
    add_counter(EngineCounter::busy_polls);
    add_counter(EngineCounter::busy_ns, clock_.now_ns() - env_.now);
  }
  return moved;
}

void Engine::ring_in() {
  for (std::uint32_t s = 0; s < summary_words_; ++s) {
    if (doorbell_summary_[s].load(std::memory_order_relaxed) == 0) continue;
    for (std::uint64_t words = doorbell_summary_[s].exchange(0, std::memory_order_acq_rel); words != 0;
         words &= words - 1) {
      ring_in_word(s * 64 + static_cast<std::uint32_t>(__builtin_ctzll(words)));
    }
  }
}

void Engine::ring_in_word(std::uint32_t w) {
  const std::uint64_t rung = doorbells_[w].exchange(0, std::memory_order_acq_rel);
  if (qp_list_.size() >= kPrefetchFromQps) {
    // As for received frames (prefetch_qps): every rung QP's lines asked
    // for before the first is read.
    for (std::uint64_t bits = rung; bits != 0; bits &= bits - 1) {
      if (const transport::Qp* qp = slots_[w * 64 + static_cast<std::uint32_t>(__builtin_ctzll(bits))]) {
        transport::prefetch_posts(*qp);
      }
    }
  }
  for (std::uint64_t bits = rung; bits != 0; bits &= bits - 1) {
    transport::Qp* qp = slots_[w * 64 + static_cast<std::uint32_t>(__builtin_ctzll(bits))];
    if (qp == nullptr) continue;  // a slot freed since
    transport::sync_from_app(*qp);
    touch(qp);
  }
}

void Engine::run_timers() {
  timers_.expire(env_.now, [this](const TimerWheel::Entry& e) {
    transport::Qp* qp = find_qp(e.qpn);
    // Gone, or its deadline moved (a newer entry stands for it).
    if (qp == nullptr || qp->sched.timer_at != e.at) return;
    qp->sched.timer_at = 0;
    transport::completer_on_timer(*qp, env_);
    touch(qp);
  });
}

void Engine::finish() {
  // QPs that were served: completions and retired slots go to the
  // application, deadlines to the wheel. While bursts fill, they stay on the
  // list (some may have more to send); otherwise each has sent all it could
  // and comes back with its next doorbell, packet or timer.
  for (transport::Qp* qp : active_) {
    transport::publish_to_app(*qp);
    std::uint64_t want = qp->comp.deadline;
    const std::uint64_t rnr = transport::requester_wakeup(*qp);
    if (rnr != 0 && (want == 0 || rnr < want)) want = rnr;
    const std::uint64_t paced = transport::paced_until(*qp, env_);
    if (paced != 0 && (want == 0 || paced < want)) want = paced;
    if (want != 0 && (qp->sched.timer_at == 0 || want < qp->sched.timer_at)) {
      timers_.insert(qp->sched.slot, qp->qpn, want);
      qp->sched.timer_at = want;
    } else if (want == 0 && qp->sched.timer_at != 0) {
      // Nothing to wait for any more (all acknowledged): the entry goes
      // now. Left to fire, it would bring the QP back, cold, for nothing:
      // with thousands of QPs, each message's QP a second time.
      timers_.remove(qp->sched.slot);
      qp->sched.timer_at = 0;
    }
  }
  if (burst_full_) {
    // Only the QPs that may have more to send stay, in turn order from the
    // cursor: with thousands of QPs, the ones served to the full would
    // otherwise be visited by every poll while bursts fill.
    const std::size_t nq = active_.size();
    still_active_.clear();
    for (std::size_t k = 0; k < nq; ++k) {
      transport::Qp* qp = active_[(tx_cursor_ + k) % nq];
      if (qp->sched.sated) qp->sched.active = false;
      else still_active_.push_back(qp);
    }
    active_.swap(still_active_);
    tx_cursor_ = 0;
    return;
  }
  for (transport::Qp* qp : active_) qp->sched.active = false;
  active_.clear();
  tx_cursor_ = 0;
}

std::uint64_t Engine::next_timer_ns() { return timers_.earliest(); }

void Engine::receive() {
  std::uint16_t n = io_.rx_burst(rx_.data(), kBurst);
  add_counter(EngineCounter::rx_frames, n);
  if (n > 0) {
    const std::uint16_t keep = process(rx_.data(), n, false);
    if (keep > 0) io_.rx_release(rx_.data(), keep);
  }
  if (handover_ == nullptr) return;
  n = handover_->pop(self_, rx_.data(), kBurst);
  if (n == 0) return;
  add_counter(EngineCounter::rx_handed_in, n);
  process(rx_.data(), n, true);
  io_.rx_release(rx_.data(), n);
}

namespace {

// The transport field of the opcodes a QP of this type takes.
wire::Transport service_of(ibv_qp_type type) {
  switch (type) {
    case IBV_QPT_UC: return wire::Transport::kUc;
    case IBV_QPT_UD: return wire::Transport::kUd;
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV: return wire::Transport::kXrc;
    default: return wire::Transport::kRc;
  }
}

}  // namespace

wire::ParseStatus Engine::parse(const RxFrame& frame, std::uint16_t i, bool verify_icrc) {
  wire::ParsedFrame& p = parsed_[i];
  icrc_pending_[i] = false;
  if (frame.nmore == 0) [[likely]] {
    const wire::ParseStatus s = wire::parse_headers_of(std::span<const std::uint8_t>(frame.data, frame.len), p);
    icrc_pending_[i] = verify_icrc && s == wire::ParseStatus::kOk;
    return s;
  }
  // In segments: the headers from a copy, the payload placed from where it
  // lies.
  std::array<std::span<const std::uint8_t>, 1 + RxFrame::kMaxMore> segs;
  segs[0] = std::span<const std::uint8_t>(frame.data, frame.len);
  const int nmore = std::min<int>(frame.nmore, RxFrame::kMaxMore);
  for (int k = 0; k < nmore; ++k) segs[1 + static_cast<std::size_t>(k)] = frame.more[static_cast<std::size_t>(k)];
  wire::ParseOptions options;
  options.verify_icrc = verify_icrc;
  return wire::parse_frame_scattered(std::span(segs.data(), 1 + static_cast<std::size_t>(nmore)), head_copies_[i], p,
                                     options);
}

// With thousands of QPs each frame's QP is cold: its index slot, then the
// lines of it that a packet reads, are asked for for the whole burst before
// the first frame is processed, so the misses overlap instead of coming
// one after another. With few QPs they are all in cache and this would only
// cost (8-byte WRITEs, one QP: about 5% more a packet).
void Engine::prefetch_qps(std::uint16_t n) const {
  if (n < 2 || qp_list_.size() < kPrefetchFromQps) return;
  for (std::uint16_t i = 0; i < n; ++i) {
    if (status_[i] == wire::ParseStatus::kOk) __builtin_prefetch(index_.slot_of(parsed_[i].bth().dest_qp.get()));
  }
  for (std::uint16_t i = 0; i < n; ++i) {
    if (status_[i] != wire::ParseStatus::kOk) continue;
    if (const transport::Qp* qp = find_qp(parsed_[i].bth().dest_qp.get())) transport::prefetch_data_path(*qp);
  }
}

std::uint16_t Engine::process(RxFrame* frames, std::uint16_t n, bool handed_in) {
  // Handed-in frames passed every check on the worker that received them;
  // their ICRC is not computed twice. The others: every frame's headers
  // first, then the ICRCs.
  Handover* const handover = handed_in ? nullptr : handover_;
  for (std::uint16_t i = 0; i < n; ++i) status_[i] = parse(frames[i], i, !handed_in);
  prefetch_qps(n);
  std::uint16_t keep = 0;
  for (std::uint16_t i = 0; i < n; ++i) {
    const RxFrame frame = frames[i];
    frames[keep++] = frame;
    const wire::ParsedFrame& p = parsed_[i];
    const wire::ParseStatus s =
        icrc_pending_[i] ? wire::check_icrc(std::span<const std::uint8_t>(frame.data, frame.len), p) : status_[i];
    if (s != wire::ParseStatus::kOk) [[unlikely]] {
      if (wire::is_not_roce(s)) add_counter(EngineCounter::rx_not_roce);
      else add_parse_drop(s);
      continue;
    }
    const wire::Bth bth = p.bth();
    const bool cnp = p.info->has(wire::kCnpOp);
    if (cnp) [[unlikely]] {
      add_counter(EngineCounter::rx_cnp);
    } else if (p.info->transport == wire::Transport::kRd || p.info->transport == wire::Transport::kOther) [[unlikely]] {
      // RD and the rest: no service uroce has.
      add_counter(EngineCounter::rx_unsupported_transport);
      continue;
    }
    // One P_Key, the default (0xffff; the membership bit aside).
    if ((bth.pkey.get() & 0x7fff) != 0x7fff) [[unlikely]] {
      add_counter(EngineCounter::rx_bad_pkey);
      continue;
    }
    transport::Qp* qp = find_qp(bth.dest_qp.get());
    if (qp == nullptr) {
      // A QP of another worker's (one destroyed meanwhile is unknown on
      // the worker it was passed to, never passed on again).
      const std::uint32_t* owner = handover != nullptr ? handover->owner(bth.dest_qp.get()) : nullptr;
      if (owner == nullptr || *owner == self_) {
        add_counter(EngineCounter::rx_unknown_qp);
      } else if (handover->push(self_, *owner, frame)) {
        add_counter(EngineCounter::rx_handed_over);
        --keep;  // the owner releases it
      } else {
        add_counter(EngineCounter::rx_handover_full);
      }
      continue;
    }
    if (!transport::from_peer(*qp, p)) [[unlikely]] {
      add_counter(EngineCounter::rx_wrong_address);
      continue;
    }
    if (cnp) [[unlikely]] {
      transport::rp_on_cnp(*qp, env_);
    } else {
      // CE: congestion on the way here; the sender hears of it by CNP.
      if (p.ecn() == 3 && env_.dcqcn != nullptr && transport::np_on_ce(*qp, env_)) [[unlikely]] {
        cnp_due_.push_back(qp->qpn);
      }
      // A QP in selective repeat takes that mode's opcodes only (both ends
      // agreed on it); every other QP never takes them.
      const wire::Transport service = qp->sr != nullptr ? wire::Transport::kSr : service_of(qp->type);
      if (p.info->transport != service) [[unlikely]] {
        add_counter(EngineCounter::rx_wrong_service);
        continue;
      }
      if (p.info->has(wire::kRequest)) {
        add_counter(EngineCounter::rx_requests);
        if (p.info->transport == wire::Transport::kUd) transport::ud_on_datagram(*qp, env_, p);
        else transport::responder_on_request(*qp, env_, p);
      } else {
        transport::completer_on_response(*qp, env_, p);
      }
    }
    touch(qp);
  }
  return keep;
}

void Engine::transmit_frames() {
  std::uint16_t count = tx_pending_;
  // A head for every frame this burst may add: the port's, refilled in
  // bulk; own heads come back after each burst.
  const bool port_heads = own_heads_.empty();
  if (port_heads && nheads_ < kBurst) {
    nheads_ = static_cast<std::uint16_t>(nheads_ + io_.tx_heads(heads_.data() + nheads_, kBurst - nheads_));
  }
  env_.heads = heads_.data();
  env_.heads_left = nheads_;
  const std::uint16_t first_new = count;  // those before went out unsent last time, complete
  const auto room = [&] { return std::min<std::uint16_t>(static_cast<std::uint16_t>(kBurst - count), env_.heads_left); };

  const std::size_t nq = active_.size();
  if (tx_cursor_ >= nq) tx_cursor_ = 0;
  // CNPs first (the sender should slow down soonest), then responder
  // answers (they free the peer's window), then requests; QPs take turns
  // from a rotating start so none starves.
  std::size_t last = tx_cursor_;
  std::size_t cnps = 0;
  for (; cnps < cnp_due_.size() && room() > 0; ++cnps) {
    // By QPN: a QP destroyed since owes nothing.
    if (transport::Qp* qp = find_qp(cnp_due_[cnps])) {
      count = static_cast<std::uint16_t>(count + transport::cnp_fill(*qp, env_, tx_.data() + count, room()));
    }
  }
  cnp_due_.erase(cnp_due_.begin(), cnp_due_.begin() + static_cast<std::ptrdiff_t>(cnps));
  for (std::size_t k = 0; k < nq && room() > 0; ++k) {
    transport::Qp* qp = active_[(tx_cursor_ + k) % nq];
    if (hold_acks_ && !qp->sched.ack_held && transport::only_an_ack_queued(*qp)) [[unlikely]] {
      qp->sched.ack_held = true;
      held_acks_.push_back(qp->qpn);
    } else {
      qp->sched.ack_held = false;
      count = static_cast<std::uint16_t>(count +
                                         transport::responder_fill(*qp, env_, tx_.data() + count, room()));
    }
    // All its answers out and nothing to request: done (a responder whose
    // ACKs fill every burst would otherwise keep each QP it ever answered).
    qp->sched.sated = room() > 0 && !qp->requests_unsent();
  }
  for (std::size_t k = 0; k < nq && room() > 0; ++k) {
    last = (tx_cursor_ + k) % nq;
    count = static_cast<std::uint16_t>(count + transport::requester_fill(*active_[last], env_, tx_.data() + count, room()));
    // Room left: its answers and requests are all out (the responder pass
    // ran to the end, as room only shrinks).
    active_[last]->sched.sated = room() > 0;
  }
  nheads_ = env_.heads_left;
  burst_full_ = room() == 0;  // a full burst, or out of heads: QPs may have more
  // The next burst starts after the last QP that had its turn.
  if (nq > 0) tx_cursor_ = (last + 1) % nq;
  if (count == 0) return;
  for (std::uint16_t k = first_new; k < count; ++k) wire::finish_icrc_tx(tx_[k], env_.crc32);
  const std::uint16_t sent = io_.tx_burst(tx_.data(), count);
  add_counter(EngineCounter::tx_frames, sent);
  if (!port_heads) {
    for (std::uint16_t k = 0; k < sent; ++k) heads_[nheads_++] = tx_[k].head;
  }
  // Whatever the port did not take goes first next time, with its head.
  std::copy(tx_.begin() + sent, tx_.begin() + count, tx_.begin());
  tx_pending_ = static_cast<std::uint16_t>(count - sent);
}

#ifdef UROCE_PROFILE_TX
namespace {

// A build with -DUROCE_PROFILE_TX times the engines' TX path (frames built
// and handed to the port) and prints it at exit, for same-run A/B
// comparisons (tools/bench-ab.sh). Off in normal builds.
struct TxProfile {
  std::uint64_t ns = 0;
  std::uint64_t frames = 0;
  ~TxProfile() {
    if (frames != 0) {
      std::fprintf(stderr, "uroce profile: TX path %.1f ns per frame sent (%llu frames)\n",
                   static_cast<double>(ns) / static_cast<double>(frames), static_cast<unsigned long long>(frames));
    }
  }
};
TxProfile g_tx_profile;

}  // namespace
#endif

void Engine::transmit() {
#ifdef UROCE_PROFILE_TX
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t before = counter(EngineCounter::tx_frames);
  transmit_frames();
  g_tx_profile.ns += static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  g_tx_profile.frames += counter(EngineCounter::tx_frames) - before;
#else
  transmit_frames();
#endif
}

}  // namespace uroce::engine
