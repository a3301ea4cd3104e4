// A Context's address resolution (Context::resolve_gid): asks the port for
// a peer's Ethernet address without ever waiting, and bounds what one
// unreachable or spoofed address may cost. The port sends the request from
// its own engine and takes the answer in (include/uroce/port.h); here a
// request is repeated every 200 ms, given up after a second in which at
// least kMinAsks requests went out, and a GID that got no answer is
// refused at once for kNegativeTtl (the negative cache), so a caller that
// asks again and again (a client retrying modify_qp, a flood of MADs from
// spoofed sources) costs about one second of asking per GID per
// kNegativeTtl, never the engines' time. At most kMaxPending resolutions
// run at once.
//
// Requests go out only when a caller queries (the repeats too): a caller
// kept off its CPU for a second (a loaded host) must not find its
// resolution failed having asked once, so a failure takes kMinAsks
// requests, the last one kRetry unanswered, and not only the time.
//
// Thread-safe (its own mutex); never blocks beyond it; allocation-free
// after construction. Never inside a control call is needed, none holds
// the engines.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "uroce/port.h"
#include "uroce/verbs.h"

namespace uroce {

#define UROCE_RESOLVE_COUNTER_LIST(X)                                                               \
  X(resolve_started, "address resolutions started (ARP request or neighbour solicitation asked)")   \
  X(resolve_asked_again, "requests repeated for resolutions still unanswered (every 200 ms)")       \
  X(resolve_answered, "resolutions answered while pending")                                        \
  X(resolve_failed, "resolutions given up: no answer within a second (the GID is negatively cached)") \
  X(resolve_negative_hits, "resolutions refused at once: the GID failed recently (negative cache)")  \
  X(resolve_negative_evicted, "negative cache entries pushed out by newer ones before they expired") \
  X(resolve_busy, "resolutions not started: kMaxPending already under way (the caller asks again)")

struct ResolveCounters {
#define UROCE_X(name, description) std::uint64_t name = 0;
  UROCE_RESOLVE_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};

class Resolver {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kRetry = std::chrono::milliseconds(200);
  static constexpr auto kTimeout = std::chrono::seconds(1);
  static constexpr std::uint32_t kMinAsks = 3;
  // A pending resolution nobody queries any more is given up this long
  // after it started, however few requests went out, when the table is
  // full (expire()).
  static constexpr auto kAbandoned = std::chrono::seconds(3);
  // How long a GID that got no answer is refused without asking.
  static constexpr auto kNegativeTtl = std::chrono::seconds(5);
  static constexpr std::size_t kMaxPending = 64;
  static constexpr std::size_t kMaxNegative = 1024;

  explicit Resolver(PacketIo* io);

  // Context::resolve_gid(): kKnown (`mac` filled when non-null), kPending
  // or kUnreachable, as include/uroce/verbs.h says.
  Reach query(const ibv_gid& gid, std::uint8_t mac[6], Clock::time_point now = Clock::now());
  // The same without starting a resolution: kKnown, kUnreachable while the
  // negative cache holds the GID, else kPending (nothing asked).
  Reach look(const ibv_gid& gid, std::uint8_t mac[6], Clock::time_point now = Clock::now());
  ResolveCounters counters() const;

 private:
  struct Pending {
    ibv_gid gid{};
    Clock::time_point started;
    Clock::time_point asked;   // the last request
    std::uint32_t asks = 1;    // requests sent
  };
  struct Negative {
    ibv_gid gid{};
    Clock::time_point until;
  };
  // Gives up `p` (an element of pending_): the port forgets it, the GID
  // goes into the negative cache.
  void fail(std::size_t p, Clock::time_point now);
  // Whether pending resolution `p` is given up: kMinAsks requests
  // unanswered over kTimeout.
  static bool unanswered(const Pending& p, Clock::time_point now);
  // Gives up every pending resolution that is unanswered() or older than
  // kAbandoned.
  void expire(Clock::time_point now);
  bool negative(const ibv_gid& gid, Clock::time_point now);

  PacketIo* io_;
  mutable std::mutex mutex_;
  std::vector<Pending> pending_;    // at most kMaxPending
  std::vector<Negative> negative_;  // at most kMaxNegative
  ResolveCounters counters_;
};

}  // namespace uroce
