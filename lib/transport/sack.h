// Selective repeat's bookkeeping (docs/transport.md, "Selective repeat"), one
// class per side of a QP, on PSNs in 24-bit serial arithmetic:
//
//   ReceiveWindow (the responder): which PSNs of the window after the
//     expected one have arrived. A packet at the expected PSN moves the
//     window on past every one that came before it; a packet ahead within
//     the window is taken once; the SACK it sends back names the expected
//     PSN and the bitmap of the ones after it that arrived.
//   SendScoreboard (the requester): which PSNs in flight the peer has
//     (cumulatively acknowledged, or selectively), and so which to send
//     again. A SACK naming PSNs never sent, or going back, is refused.
//
// Both hold kSackWindow PSNs at most: the requester never has more in flight
// in this mode, and the SACK on the wire carries that many bits.
#pragma once

#include <bitset>
#include <cstdint>

#include "transport/psn.h"

namespace uroce::transport {

inline constexpr std::uint32_t kSackWindow = 128;
using SackBits = std::bitset<kSackWindow>;

class ReceiveWindow {
 public:
  enum class Arrival : std::uint8_t {
    kInOrder,    // the expected PSN: executed now, the window moves on
    kAhead,      // later, within the window, not seen before: taken
    kDuplicate,  // before the expected PSN, or taken already
    kOutside,    // at or past the window's end: refused
  };

  void reset(std::uint32_t expected) {
    expected_ = expected & kPsnMask;
    seen_.reset();
  }
  std::uint32_t expected() const { return expected_; }
  // Bit i: PSN expected + 1 + i has arrived.
  const SackBits& seen() const { return seen_; }

  // What `psn` is to the window. Does not change it (see take()).
  Arrival classify(std::uint32_t psn) const {
    const std::int32_t d = psn_diff(psn, expected_);
    if (d < 0) return Arrival::kDuplicate;
    if (d == 0) return Arrival::kInOrder;
    if (static_cast<std::uint32_t>(d) > kSackWindow) return Arrival::kOutside;
    return seen_[static_cast<std::size_t>(d - 1)] ? Arrival::kDuplicate : Arrival::kAhead;
  }

  // Records `psn` as taken; returns how classify() saw it. An in-order PSN
  // moves the expected one past it and past every PSN after it that was
  // taken ahead.
  // Moves the expected PSN on to `to` (a READ or atomic executed in order
  // occupies every PSN up to it), forgetting what was taken before it, then
  // past `to` and every PSN after it taken ahead.
  void advance(std::uint32_t to) {
    const std::int32_t d = psn_diff(to, expected_);
    if (d <= 0) return;
    const bool to_seen = static_cast<std::uint32_t>(d) <= kSackWindow && seen_[static_cast<std::size_t>(d - 1)];
    if (static_cast<std::uint32_t>(d) > kSackWindow) {
      seen_.reset();
    } else {
      seen_ >>= static_cast<std::size_t>(d);
    }
    expected_ = to & kPsnMask;
    if (to_seen) take(expected_);
  }

  Arrival take(std::uint32_t psn) {
    const Arrival a = classify(psn);
    if (a == Arrival::kAhead) {
      seen_.set(static_cast<std::size_t>(psn_diff(psn, expected_) - 1));
    } else if (a == Arrival::kInOrder) {
      std::uint32_t step = 1;
      while (step - 1 < kSackWindow && seen_[step - 1]) ++step;
      seen_ >>= step;
      expected_ = psn_add(expected_, step);
    }
    return a;
  }

 private:
  std::uint32_t expected_ = 0;
  SackBits seen_;
};

class SendScoreboard {
 public:
  void reset(std::uint32_t una) {
    una_ = una & kPsnMask;
    sacked_.reset();
  }
  // The oldest PSN the peer has not acknowledged cumulatively.
  std::uint32_t una() const { return una_; }
  // Bit i: PSN una + i is held by the peer (selectively acknowledged).
  const SackBits& sacked() const { return sacked_; }
  bool has(std::uint32_t psn) const {
    const std::int32_t d = psn_diff(psn, una_);
    if (d < 0) return true;
    return static_cast<std::uint32_t>(d) < kSackWindow && sacked_[static_cast<std::size_t>(d)];
  }

  // A SACK: the peer expects `expected` (it has every PSN before it) and
  // holds expected + 1 + i for each bit i of `bits`. `next` is one past the
  // highest PSN sent. False (nothing changed) if it names a PSN never sent
  // or expects one before una (a stale or forged answer); true otherwise.
  bool on_sack(std::uint32_t expected, const SackBits& bits, std::uint32_t next) {
    const std::int32_t ahead = psn_diff(expected, una_);
    const std::int32_t sent = psn_diff(next, una_);
    if (ahead < 0 || ahead > sent) return false;
    // The highest PSN the bits name must have been sent.
    for (std::size_t i = kSackWindow; i-- > 0;) {
      if (!bits[i]) continue;
      if (psn_diff(psn_add(expected, static_cast<std::uint32_t>(i) + 1), next) >= 0) return false;
      break;
    }
    // Move una to `expected`, then lay the bits in after it.
    if (static_cast<std::uint32_t>(ahead) >= kSackWindow) {
      sacked_.reset();
    } else {
      sacked_ >>= static_cast<std::size_t>(ahead);
    }
    una_ = expected & kPsnMask;
    // Bits past the window's end are not kept: those PSNs were never in it.
    sacked_ |= bits << 1;
    sacked_.reset(0);  // una itself is what the peer still expects
    return true;
  }

  // The first PSN in [from, limit) the peer does not hold, or `limit`: what
  // to send again (only PSNs below the highest one it holds are known lost;
  // the caller gives that bound).
  std::uint32_t next_missing(std::uint32_t from, std::uint32_t limit) const {
    std::uint32_t psn = psn_diff(from, una_) < 0 ? una_ : from & kPsnMask;
    for (; psn_diff(psn, limit) < 0; psn = psn_add(psn, 1)) {
      if (!has(psn)) return psn;
    }
    return limit & kPsnMask;
  }
  // One past the highest PSN the peer holds (una if none is held ahead).
  std::uint32_t highest_held() const {
    for (std::size_t i = kSackWindow; i-- > 0;) {
      if (sacked_[i]) return psn_add(una_, static_cast<std::uint32_t>(i) + 1);
    }
    return una_;
  }

 private:
  std::uint32_t una_ = 0;
  SackBits sacked_;
};

}  // namespace uroce::transport
