#include "engine/engine.h"

#include <algorithm>

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

Engine::Engine(PacketIo& io, Clock& clock, mem::MrTable& mrs) : io_(io), clock_(clock) {
  env_.mrs = &mrs;
  rebuild_index();
}

void Engine::add_qp(transport::Qp* qp) {
  qp_list_.push_back(qp);
  rebuild_index();
}

void Engine::remove_qp(transport::Qp* qp) {
  qp_list_.erase(std::remove(qp_list_.begin(), qp_list_.end(), qp), qp_list_.end());
  tx_cursor_ = 0;
  rebuild_index();
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

std::size_t Engine::poll() {
  env_.now = clock_.now_ns();
  const std::size_t before = counters_[static_cast<std::size_t>(EngineCounter::rx_frames)] +
                             counters_[static_cast<std::size_t>(EngineCounter::tx_frames)];
  for (transport::Qp* qp : qp_list_) transport::sync_from_app(*qp);
  receive();
  for (transport::Qp* qp : qp_list_) transport::completer_on_timer(*qp, env_);
  transmit();
  for (transport::Qp* qp : qp_list_) transport::publish_to_app(*qp);
  return counters_[static_cast<std::size_t>(EngineCounter::rx_frames)] +
         counters_[static_cast<std::size_t>(EngineCounter::tx_frames)] - before;
}

std::uint64_t Engine::next_timer_ns() const {
  std::uint64_t t = 0;
  for (const transport::Qp* qp : qp_list_) {
    if (qp->comp.deadline != 0 && (t == 0 || qp->comp.deadline < t)) t = qp->comp.deadline;
    if (qp->req.rnr_wait && (t == 0 || qp->req.rnr_until < t)) t = qp->req.rnr_until;
  }
  return t;
}

void Engine::receive() {
  std::uint16_t n = io_.rx_burst(rx_.data(), kBurst);
  counters_[static_cast<std::size_t>(EngineCounter::rx_frames)] += n;
  if (n > 0) {
    const std::uint16_t keep = process(rx_.data(), n, false);
    if (keep > 0) io_.rx_release(rx_.data(), keep);
  }
  if (handover_ == nullptr) return;
  n = handover_->pop(self_, rx_.data(), kBurst);
  if (n == 0) return;
  counters_[static_cast<std::size_t>(EngineCounter::rx_handed_in)] += n;
  process(rx_.data(), n, true);
  io_.rx_release(rx_.data(), n);
}

std::uint16_t Engine::process(RxFrame* frames, std::uint16_t n, bool handed_in) {
  // Handed-in frames passed every check on the worker that received them;
  // their ICRC is not computed twice.
  wire::ParseOptions options;
  options.verify_icrc = !handed_in;
  Handover* const handover = handed_in ? nullptr : handover_;
  std::uint16_t keep = 0;
  for (std::uint16_t i = 0; i < n; ++i) {
    const RxFrame frame = frames[i];
    frames[keep++] = frame;
    wire::ParsedFrame p;
    const wire::ParseStatus s = wire::parse_frame_in_place(std::span(frame.data, frame.len), p, options);
    if (s != wire::ParseStatus::kOk) [[unlikely]] {
      if (wire::is_not_roce(s)) ++counters_[static_cast<std::size_t>(EngineCounter::rx_not_roce)];
      else ++parse_drops_[static_cast<std::size_t>(s)];
      continue;
    }
    const wire::Bth bth = p.bth();
    if (p.info->transport != wire::Transport::kRc) [[unlikely]] {
      ++counters_[static_cast<std::size_t>(p.info->has(wire::kCnpOp) ? EngineCounter::rx_cnp
                                                                      : EngineCounter::rx_unsupported_transport)];
      continue;
    }
    // One P_Key, the default (0xffff; the membership bit aside).
    if ((bth.pkey.get() & 0x7fff) != 0x7fff) [[unlikely]] {
      ++counters_[static_cast<std::size_t>(EngineCounter::rx_bad_pkey)];
      continue;
    }
    transport::Qp* qp = find_qp(bth.dest_qp.get());
    if (qp == nullptr) {
      // A QP of another worker's (one destroyed meanwhile is unknown on
      // the worker it was passed to, never passed on again).
      const std::uint32_t* owner = handover != nullptr ? handover->owner(bth.dest_qp.get()) : nullptr;
      if (owner == nullptr || *owner == self_) {
        ++counters_[static_cast<std::size_t>(EngineCounter::rx_unknown_qp)];
      } else if (handover->push(self_, *owner, frame)) {
        ++counters_[static_cast<std::size_t>(EngineCounter::rx_handed_over)];
        --keep;  // the owner releases it
      } else {
        ++counters_[static_cast<std::size_t>(EngineCounter::rx_handover_full)];
      }
      continue;
    }
    if (p.info->has(wire::kRequest)) transport::responder_on_request(*qp, env_, p);
    else transport::completer_on_response(*qp, env_, p);
  }
  return keep;
}

void Engine::transmit() {
  std::uint16_t count = tx_pending_;
  const std::size_t nq = qp_list_.size();
  // Responder answers first (they free the peer's window), then requests;
  // QPs take turns from a rotating start so none starves.
  for (std::size_t k = 0; k < nq && count < kBurst; ++k) {
    transport::Qp* qp = qp_list_[(tx_cursor_ + k) % nq];
    count = static_cast<std::uint16_t>(count + transport::responder_fill(*qp, env_, tx_.data() + count, kBurst - count));
  }
  for (std::size_t k = 0; k < nq && count < kBurst; ++k) {
    transport::Qp* qp = qp_list_[(tx_cursor_ + k) % nq];
    count = static_cast<std::uint16_t>(count + transport::requester_fill(*qp, env_, tx_.data() + count, kBurst - count));
  }
  if (nq > 0) tx_cursor_ = (tx_cursor_ + 1) % nq;
  if (count == 0) return;
  const std::uint16_t sent = io_.tx_burst(tx_.data(), count);
  counters_[static_cast<std::size_t>(EngineCounter::tx_frames)] += sent;
  // Whatever the port did not take goes first next time.
  std::copy(tx_.begin() + sent, tx_.begin() + count, tx_.begin());
  tx_pending_ = static_cast<std::uint16_t>(count - sent);
}

}  // namespace uroce::engine
