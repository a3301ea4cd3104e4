#include "verbs/resolver.h"

#include <algorithm>
#include <cstring>

namespace uroce {
namespace {

bool same(const ibv_gid& a, const ibv_gid& b) { return std::memcmp(a.raw, b.raw, sizeof a.raw) == 0; }

}  // namespace

Resolver::Resolver(PacketIo* io) : io_(io) {
  pending_.reserve(kMaxPending);
  negative_.reserve(kMaxNegative);
}

ResolveCounters Resolver::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

bool Resolver::negative(const ibv_gid& gid, Clock::time_point now) {
  for (std::size_t i = 0; i < negative_.size(); ++i) {
    if (!same(negative_[i].gid, gid)) continue;
    if (now < negative_[i].until) return true;
    negative_[i] = negative_.back();
    negative_.pop_back();
    return false;
  }
  return false;
}

void Resolver::fail(std::size_t p, Clock::time_point now) {
  const ibv_gid gid = pending_[p].gid;
  pending_[p] = pending_.back();
  pending_.pop_back();
  io_->abandon(gid);
  ++counters_.resolve_failed;
  const Negative entry{gid, now + kNegativeTtl};
  for (Negative& n : negative_) {
    if (same(n.gid, gid)) {
      n = entry;
      return;
    }
  }
  if (negative_.size() < kMaxNegative) {
    negative_.push_back(entry);
    return;
  }
  // Full: the entry that expires first makes room (expired ones first of all).
  auto oldest = std::min_element(negative_.begin(), negative_.end(),
                                 [](const Negative& a, const Negative& b) { return a.until < b.until; });
  if (oldest->until > now) ++counters_.resolve_negative_evicted;
  *oldest = entry;
}

bool Resolver::unanswered(const Pending& p, Clock::time_point now) {
  return p.asks >= kMinAsks && now - p.asked >= kRetry && now - p.started >= kTimeout;
}

void Resolver::expire(Clock::time_point now) {
  for (std::size_t i = 0; i < pending_.size();) {
    if (unanswered(pending_[i], now) || now - pending_[i].started >= kAbandoned) {
      fail(i, now);  // moves the last one to i
    } else {
      ++i;
    }
  }
}

Reach Resolver::look(const ibv_gid& gid, std::uint8_t mac[6], Clock::time_point now) {
  std::uint8_t scratch[6];
  std::lock_guard<std::mutex> lock(mutex_);
  if (negative(gid, now)) return Reach::kUnreachable;
  return io_->resolve(gid, mac != nullptr ? mac : scratch, false) == PacketIo::Resolution::kKnown ? Reach::kKnown
                                                                                               : Reach::kPending;
}

Reach Resolver::query(const ibv_gid& gid, std::uint8_t mac[6], Clock::time_point now) {
  std::uint8_t scratch[6];
  std::uint8_t* out = mac != nullptr ? mac : scratch;
  std::lock_guard<std::mutex> lock(mutex_);
  if (negative(gid, now)) {
    ++counters_.resolve_negative_hits;
    return Reach::kUnreachable;
  }
  auto p = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& e) { return same(e.gid, gid); });
  switch (io_->resolve(gid, out, false)) {
    case PacketIo::Resolution::kKnown:
      if (p != pending_.end()) {
        *p = pending_.back();
        pending_.pop_back();
        ++counters_.resolve_answered;
      }
      return Reach::kKnown;
    case PacketIo::Resolution::kUnreachable:
      if (p == pending_.end()) {
        // Never asked: a port that cannot reach it says so at once, and the
        // negative cache keeps the answer as it keeps a timeout's.
        pending_.push_back(Pending{gid, now, now});
        p = pending_.end() - 1;
      }
      fail(static_cast<std::size_t>(p - pending_.begin()), now);
      return Reach::kUnreachable;
    case PacketIo::Resolution::kPending: break;
  }
  if (p != pending_.end()) {
    if (unanswered(*p, now)) {
      fail(static_cast<std::size_t>(p - pending_.begin()), now);
      return Reach::kUnreachable;
    }
    if (now - p->asked >= kRetry) {
      p->asked = now;
      ++p->asks;
      ++counters_.resolve_asked_again;
      io_->resolve(gid, out, true);
    }
    return Reach::kPending;
  }
  if (pending_.size() >= kMaxPending) expire(now);
  if (pending_.size() >= kMaxPending) {
    ++counters_.resolve_busy;
    return Reach::kPending;
  }
  pending_.push_back(Pending{gid, now, now});
  ++counters_.resolve_started;
  // The answer may be in already (a port that resolves at once).
  if (io_->resolve(gid, out, true) == PacketIo::Resolution::kKnown) {
    pending_.pop_back();
    return Reach::kKnown;
  }
  return Reach::kPending;
}

}  // namespace uroce
