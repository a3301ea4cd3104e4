// The requester's messages in flight, the same in every mode: message m in
// slot m mod depth, a slot reused once its message has completed (over
// several QPs messages complete out of order). Latency, post to completion
// with queueing included, of every message with --lat and of every 16th
// otherwise, to keep the clock reads cheap.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace uroce::perf {

class InFlight {
 public:
  using Clock = std::chrono::steady_clock;

  InFlight(std::uint32_t depth, bool every_latency)
      : depth_(depth), every_latency_(every_latency), message_(depth), posted_at_(depth), busy_(depth, false) {}

  std::uint32_t slot_of(std::uint64_t msg) const { return static_cast<std::uint32_t>(msg % depth_); }
  // Whether message `next` may be posted, `done` messages having completed.
  bool may_post(std::uint64_t next, std::uint64_t done) const { return next - done < depth_ && !busy_[slot_of(next)]; }
  // Message `msg` is being posted now: its slot is busy until it completes.
  void posted(std::uint64_t msg) {
    const std::uint32_t s = slot_of(msg);
    message_[s] = msg;
    if (sampled(msg)) posted_at_[s] = Clock::now();
    busy_[s] = true;
  }
  // The message in slot `s` completed at `now`; returns which it was.
  std::uint64_t completed(std::uint32_t s, Clock::time_point now) {
    const std::uint64_t msg = message_[s];
    if (sampled(msg)) latency_us_.push_back(std::chrono::duration<double, std::micro>(now - posted_at_[s]).count());
    busy_[s] = false;
    return msg;
  }
  const std::vector<double>& latency_us() const { return latency_us_; }

 private:
  bool sampled(std::uint64_t msg) const { return every_latency_ || msg % 16 == 0; }

  std::uint32_t depth_;
  bool every_latency_;
  std::vector<std::uint64_t> message_;  // per slot: the message it holds
  std::vector<Clock::time_point> posted_at_;
  std::vector<bool> busy_;  // per slot: its message is outstanding
  std::vector<double> latency_us_;
};

}  // namespace uroce::perf
