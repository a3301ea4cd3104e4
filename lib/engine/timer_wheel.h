// A hashed timer wheel for QP deadlines (retransmit, RNR wait): inserting is
// O(1), and a poll looks only at the slots whose tick has passed since the
// last, however many QPs there are. Each QP has one entry at most, a node
// of its own (by handle: the engine's slot for the QP) linked into the slot
// of its tick; a new deadline moves the node. Nodes are sized on the control
// path (reserve()), so the data path never allocates. The engine drops an
// entry whose QP has a different deadline by the time it fires.
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
      : tick_ns_(tick_ns), heads_(slots, kNone) {}

  // Room for handles 0 .. handles - 1. Control path.
  void reserve(std::size_t handles) {
    if (handles <= nodes_.size()) return;
    nodes_.resize(handles);
    fired_.reserve(handles);
  }

  // Sets the deadline of `handle` (a reserved one) to `at` for QP `qpn`,
  // replacing the one it had.
  void insert(std::uint32_t handle, std::uint32_t qpn, std::uint64_t at) {
    if (handle >= nodes_.size()) reserve(handle + 1);  // unreserved: only in tests
    Node& n = nodes_[handle];
    if (n.linked) {
      if (n.at == earliest_) earliest_valid_ = false;
      unlink(handle);
    } else {
      ++size_;
    }
    // Never behind the cursor: a deadline already past fires at the next
    // expire().
    const std::uint64_t tick = at / tick_ns_ > cursor_ ? at / tick_ns_ : cursor_;
    const auto slot = static_cast<std::uint32_t>(tick % heads_.size());
    n.qpn = qpn;
    n.at = at;
    n.slot = slot;
    n.prev = kNone;
    n.next = heads_[slot];
    n.linked = true;
    if (n.next != kNone) nodes_[n.next].prev = handle;
    heads_[slot] = handle;
    if (earliest_valid_ && (earliest_ == 0 || at < earliest_)) earliest_ = at;
  }

  // Forgets the deadline of `handle`, if it has one (its QP leaves).
  void remove(std::uint32_t handle) {
    if (handle >= nodes_.size() || !nodes_[handle].linked) return;
    if (nodes_[handle].at == earliest_) earliest_valid_ = false;
    unlink(handle);
    --size_;
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
    const std::uint64_t first = last - cursor_ >= heads_.size() ? last - heads_.size() + 1 : cursor_;
    fired_.clear();
    for (std::uint64_t t = first; t <= last; ++t) {
      for (std::uint32_t h = heads_[t % heads_.size()]; h != kNone;) {
        Node& n = nodes_[h];
        const std::uint32_t next = n.next;
        if (n.at <= now) {  // else a later turn's
          fired_.push_back(Entry{n.qpn, n.at});
          unlink(h);
        }
        h = next;
      }
    }
    size_ -= fired_.size();
    if (!fired_.empty()) earliest_valid_ = false;
    cursor_ = last;
    for (const Entry& e : fired_) due(e);
  }

  std::size_t size() const { return size_; }

  // The earliest deadline of any entry; 0 if none. Kept up on insert; after
  // entries fired or moved, found again by looking at every node once (for a
  // simulator skipping idle time, not for polls).
  std::uint64_t earliest() {
    if (!earliest_valid_) {
      earliest_ = 0;
      for (const Node& n : nodes_) {
        if (n.linked && (earliest_ == 0 || n.at < earliest_)) earliest_ = n.at;
      }
      earliest_valid_ = true;
    }
    return earliest_;
  }

 private:
  static constexpr std::uint32_t kNone = ~0u;
  struct Node {
    std::uint64_t at = 0;
    std::uint32_t qpn = 0;
    std::uint32_t slot = 0;
    std::uint32_t prev = kNone;
    std::uint32_t next = kNone;
    bool linked = false;
  };

  void unlink(std::uint32_t handle) {
    Node& n = nodes_[handle];
    if (n.prev != kNone) nodes_[n.prev].next = n.next;
    else heads_[n.slot] = n.next;
    if (n.next != kNone) nodes_[n.next].prev = n.prev;
    n.linked = false;
  }

  std::uint64_t tick_ns_;
  std::vector<std::uint32_t> heads_;  // per slot: the first node, or kNone
  std::vector<Node> nodes_;           // per handle
  std::uint64_t cursor_ = 0;          // the last tick expired
  std::size_t size_ = 0;
  std::vector<Entry> fired_;
  std::uint64_t earliest_ = 0;
  bool earliest_valid_ = true;
};

}  // namespace uroce::engine
