// A hashed timer wheel for QP deadlines (retransmit, RNR wait): inserting is
// O(1), and a poll looks only at the slots whose tick has passed since the
// last, however many QPs there are. Entries name a QPN and the deadline they
// were made for; the engine drops an entry whose QP has gone or has a
// different deadline by then (deadlines move: each insertion is a new entry,
// the stale one is skipped when it fires).
#pragma once

#include <cstdint>
#include <vector>

namespace uroce::engine {

class TimerWheel {
 public:
  struct Entry {
    std::uint32_t qpn;
    std::uint64_t at;  // ns
  };

  // `slots` ticks of `tick_ns` each make one turn; later deadlines wait in
  // their slot for the turn they fall in.
  explicit TimerWheel(std::uint64_t tick_ns = 8192, std::uint32_t slots = 1024)
      : tick_ns_(tick_ns), slots_(slots) {}

  void insert(std::uint32_t qpn, std::uint64_t at) {
    // Never behind the cursor: a deadline already past fires at the next
    // expire().
    const std::uint64_t tick = at / tick_ns_ > cursor_ ? at / tick_ns_ : cursor_;
    slots_[tick % slots_.size()].push_back(Entry{qpn, at});
    ++size_;
    if (earliest_valid_ && (earliest_ == 0 || at < earliest_)) earliest_ = at;
  }

  // Calls due(entry) for every entry whose deadline is at or before `now`.
  // Entries that due() inserts wait for the next call.
  template <typename Due>
  void expire(std::uint64_t now, Due&& due) {
    const std::uint64_t last = now / tick_ns_;
    if (size_ == 0 || last < cursor_) {
      if (last > cursor_) cursor_ = last;
      return;
    }
    // Each slot once at most, however long since the last call.
    const std::uint64_t first = last - cursor_ >= slots_.size() ? last - slots_.size() + 1 : cursor_;
    fired_.clear();
    for (std::uint64_t t = first; t <= last; ++t) {
      std::vector<Entry>& slot = slots_[t % slots_.size()];
      for (std::size_t i = 0; i < slot.size();) {
        if (slot[i].at > now) {
          ++i;  // a later turn's
          continue;
        }
        fired_.push_back(slot[i]);
        slot[i] = slot.back();
        slot.pop_back();
      }
    }
    size_ -= fired_.size();
    if (!fired_.empty()) earliest_valid_ = false;
    cursor_ = last;
    for (const Entry& e : fired_) due(e);
  }

  std::size_t size() const { return size_; }

  // The earliest deadline of any entry (stale ones included); 0 if none.
  // Kept up on insert; after entries fired, found again by looking at every
  // entry once (for a simulator skipping idle time, not for polls).
  std::uint64_t earliest() {
    if (!earliest_valid_) {
      earliest_ = 0;
      for (const auto& slot : slots_) {
        for (const Entry& e : slot) {
          if (earliest_ == 0 || e.at < earliest_) earliest_ = e.at;
        }
      }
      earliest_valid_ = true;
    }
    return earliest_;
  }

 private:
  std::uint64_t tick_ns_;
  std::vector<std::vector<Entry>> slots_;
  std::uint64_t cursor_ = 0;  // the last tick expired
  std::size_t size_ = 0;
  std::vector<Entry> fired_;
  std::uint64_t earliest_ = 0;
  bool earliest_valid_ = true;
};

}  // namespace uroce::engine
