// The one single-producer single-consumer ring of the stack: one thread (or
// process) fills slots and publishes its cursor, the other reads them and
// publishes its own. Every ring between two threads uses it: the engine's
// handover of frames between workers, a CQ's completions, a QP's and an
// SRQ's work requests, and uroced's rings in memory shared with a client.
//
// Cursors are 32-bit and run free (wrap-safe: only differences are used);
// a slot is cursor & (capacity - 1), capacity a power of two, of which at
// most `limit` are in use (a CQ holds exactly cqe completions). Each side
// keeps its own cursor privately and only stores it into the shared word,
// and what it loads from the other side's word is bounded before use: a
// peer in another process may write anything there (lib/service).
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace uroce::ring {

// The smallest power of two >= n (1 for 0).
constexpr std::uint32_t pow2_at_least(std::uint32_t n) {
  std::uint32_t c = 1;
  while (c < n) c <<= 1;
  return c;
}

// The shared cursors, each on a cache line of its own: the producer's `head`
// (the next slot it fills), the consumer's `tail` (the next slot it frees).
// Part of uroced's shared-memory protocol (service::RingHeader starts with
// it): the layout is fixed.
struct Cursors {
  alignas(64) std::atomic<std::uint32_t> head{0};
  alignas(64) std::atomic<std::uint32_t> tail{0};
};
static_assert(sizeof(Cursors) == 128, "Cursors is part of uroced's protocol");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "cursors are shared between processes");

// Whether cursor `a` is past cursor `b` (cursors run free and wrap).
inline bool cursor_after(std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(a - b) > 0; }

// Moves `word`, a cursor, forward to `v` unless it is there or beyond
// already; any thread.
inline void advance_cursor(std::atomic<std::uint32_t>& word, std::uint32_t v) {
  std::uint32_t c = word.load(std::memory_order_relaxed);
  while (cursor_after(v, c) &&
         !word.compare_exchange_weak(c, v, std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

// A ring's slots alone: a power of two of them for cheap indexing, `limit`
// of which may be in use. Owned (init) or in mapped memory (attach). Also a
// queue one thread keeps with cursors of its own (the responder's).
template <typename T>
class Slots {
 public:
  Slots() = default;
  Slots(const Slots&) = delete;
  Slots& operator=(const Slots&) = delete;
  Slots(Slots&&) noexcept = default;  // the vector's buffer, and base_ into it, stay put
  Slots& operator=(Slots&&) noexcept = default;

  // Owns pow2_at_least(limit) default slots (control path).
  void init(std::uint32_t limit) {
    const std::uint32_t c = pow2_at_least(limit);
    own_.assign(c, T{});
    base_ = own_.data();
    mask_ = c - 1;
    limit_ = limit;
  }
  // `pow2` slots at `base`, which outlive this.
  void attach(T* base, std::uint32_t pow2, std::uint32_t limit) {
    own_ = {};
    base_ = base;
    mask_ = pow2 - 1;
    limit_ = limit;
  }
  T& operator[](std::uint32_t cursor) { return base_[cursor & mask_]; }
  const T& operator[](std::uint32_t cursor) const { return base_[cursor & mask_]; }
  std::uint32_t index(std::uint32_t cursor) const { return cursor & mask_; }
  std::uint32_t capacity() const { return mask_ + 1; }
  std::uint32_t limit() const { return limit_; }

 private:
  std::vector<T> own_;
  T* base_ = nullptr;
  std::uint32_t mask_ = 0;
  std::uint32_t limit_ = 0;
};

template <typename T>
class SpscRing {
 public:
  SpscRing() = default;
  explicit SpscRing(std::uint32_t limit) { init(limit); }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;
  // Control path (a ring handed out by value): owned cursors move with it.
  SpscRing(SpscRing&& o) noexcept { take(o); }
  SpscRing& operator=(SpscRing&& o) noexcept {
    take(o);
    return *this;
  }

  // Owns pow2_at_least(limit) slots and the cursors; holds at most `limit`
  // entries. Control path.
  void init(std::uint32_t limit) {
    slots_.init(limit);
    prod_.word.store(0);
    cons_.word.store(0);
    attach_cursors(&prod_.word, &cons_.word);
  }
  // On mapped memory: `pow2` slots, at most `limit` in use. The cursors are
  // `shared`'s, or any two words (`tail`: whatever frees the producer's
  // slots). Control path, before the other side has the memory: this side's
  // private cursors start from the words as they are (0 in a new mapping).
  void attach(Cursors* shared, T* slots, std::uint32_t pow2, std::uint32_t limit) {
    attach(&shared->head, &shared->tail, slots, pow2, limit);
  }
  void attach(std::atomic<std::uint32_t>* head, std::atomic<std::uint32_t>* tail, T* slots, std::uint32_t pow2,
              std::uint32_t limit) {
    slots_.attach(slots, pow2, limit);
    attach_cursors(head, tail);
  }
  // Both cursors, shared and private, back to 0: the ring is empty (control
  // path, neither side running).
  void reset() {
    head_at_->store(0);
    tail_at_->store(0);
    prod_.mine = prod_.seen = cons_.mine = cons_.seen = 0;
  }

  std::uint32_t capacity() const { return slots_.capacity(); }
  std::uint32_t limit() const { return slots_.limit(); }
  // Any slot by a cursor of either side (a side that reads or fills ahead
  // of its published cursor keeps its own).
  T& operator[](std::uint32_t cursor) { return slots_[cursor]; }
  const T& operator[](std::uint32_t cursor) const { return slots_[cursor]; }
  std::uint32_t index(std::uint32_t cursor) const { return slots_.index(cursor); }

  // The shared words as anyone sees them (a snapshot).
  std::uint32_t published(std::memory_order order = std::memory_order_acquire) const { return head_at_->load(order); }
  std::uint32_t consumed(std::memory_order order = std::memory_order_acquire) const { return tail_at_->load(order); }

  // --- Producer --------------------------------------------------------------
  std::uint32_t head() const { return prod_.mine; }
  // Free slots under the limit. The consumer's cursor is loaded again only
  // when the one seen last leaves fewer than `want`; a tail more than
  // `limit` behind the head, or ahead of it (a wild peer), leaves none.
  std::uint32_t room(std::uint32_t want = 1) {
    std::uint32_t used = prod_.mine - prod_.seen;
    if (used > limit() || limit() - used < want) {
      prod_.seen = tail_at_->load(std::memory_order_acquire);
      used = prod_.mine - prod_.seen;
    }
    return used > limit() ? 0 : limit() - used;
  }
  // The k-th slot past the head: filled before publish().
  T& slot(std::uint32_t k = 0) { return slots_[prod_.mine + k]; }
  // The next `n` slots to the consumer. Release at least: the slots' contents
  // before the cursor (seq_cst where a flag of the consumer's pairs with it).
  void publish(std::uint32_t n = 1, std::memory_order order = std::memory_order_release) {
    prod_.mine += n;
    head_at_->store(prod_.mine, order);
  }
  // One entry; false when full.
  bool push(const T& v) {
    if (room() == 0) return false;
    slot() = v;
    publish(1);
    return true;
  }

  // --- Consumer --------------------------------------------------------------
  std::uint32_t tail() const { return cons_.mine; }
  // Entries published past the tail (`order`: acquire at least, seq_cst
  // where a flag of the producer's pairs with it).
  std::uint32_t ready(std::memory_order order = std::memory_order_acquire) const {
    return ready_from(cons_.mine, nullptr, order);
  }
  // Entries published past `cursor`, a consumer's read cursor at or ahead of
  // its tail. A head more than the capacity past it is a peer's wild write:
  // none (and `wild` set), so no slot is read twice in one pass.
  std::uint32_t ready_from(std::uint32_t cursor, bool* wild = nullptr,
                           std::memory_order order = std::memory_order_acquire) const {
    const std::uint32_t n = head_at_->load(order) - cursor;
    const bool bad = n > capacity();
    if (wild != nullptr) *wild = bad;
    return bad ? 0 : n;
  }
  // The k-th entry past the tail.
  T& at(std::uint32_t k = 0) { return slots_[cons_.mine + k]; }
  // Frees `n` slots to the producer (release: the reads before the cursor).
  void consume(std::uint32_t n = 1) {
    if (n == 0) return;
    cons_.mine += n;
    tail_at_->store(cons_.mine, std::memory_order_release);
  }
  // Frees every slot before `cursor`; a cursor that has not moved is not
  // stored again (the producer's cache line stays put).
  void consume_to(std::uint32_t cursor) {
    if (cursor == cons_.mine) return;
    cons_.mine = cursor;
    tail_at_->store(cursor, std::memory_order_release);
  }
  // Up to `max` entries into `out`; how many. The producer's cursor is
  // loaded again only when the one seen last shows none.
  std::uint32_t pop(T* out, std::uint32_t max) {
    std::uint32_t avail = cons_.seen - cons_.mine;
    if (avail == 0 || avail > capacity()) {
      cons_.seen = head_at_->load(std::memory_order_acquire);
      avail = cons_.seen - cons_.mine;
      if (avail > capacity()) avail = 0;  // a wild peer
    }
    const std::uint32_t n = avail < max ? avail : max;
    for (std::uint32_t i = 0; i < n; ++i) out[i] = slots_[cons_.mine + i];
    consume(n);
    return n;
  }

 private:
  // One side's state, on a line of its own: its cursor and the other
  // side's as it last loaded it (private), and, in a ring that owns its
  // cursors, the shared word it publishes (so the side writes one line).
  struct alignas(64) Side {
    std::atomic<std::uint32_t> word{0};  // init(): this side's shared cursor; attach(): unused
    std::uint32_t mine = 0;
    std::uint32_t seen = 0;
  };

  void attach_cursors(std::atomic<std::uint32_t>* head, std::atomic<std::uint32_t>* tail) {
    head_at_ = head;
    tail_at_ = tail;
    const std::uint32_t h = head->load(std::memory_order_acquire);
    const std::uint32_t t = tail->load(std::memory_order_acquire);
    prod_.mine = cons_.seen = h;
    prod_.seen = cons_.mine = t;
  }
  bool owns_cursors() const { return head_at_ == &prod_.word; }
  void take(SpscRing& o) {
    const bool owned = o.owns_cursors();
    slots_ = std::move(o.slots_);
    for (auto [to, from] : {std::pair{&prod_, &o.prod_}, std::pair{&cons_, &o.cons_}}) {
      to->word.store(from->word.load());
      to->mine = from->mine;
      to->seen = from->seen;
    }
    head_at_ = owned ? &prod_.word : o.head_at_;
    tail_at_ = owned ? &cons_.word : o.tail_at_;
  }

  // Fixed once set up.
  Slots<T> slots_;
  std::atomic<std::uint32_t>* head_at_ = nullptr;
  std::atomic<std::uint32_t>* tail_at_ = nullptr;
  Side prod_;  // the producer's thread only (and `word` for the consumer to load)
  Side cons_;  // the consumer's thread only (and `word` for the producer to load)
};

}  // namespace uroce::ring
