// The objects behind include/uroce/verbs.h, and the small testing interface
// (tests that replay captured traffic need a given QPN and rkey).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "mem/arena.h"
#include "mem/mr_table.h"
#include "transport/qp.h"
#include "uroce/verbs.h"

namespace uroce {

struct CompletionQueue::Impl {
  explicit Impl(std::uint32_t capacity) : ring(capacity) {}
  transport::CompletionRing ring;
};

struct QueuePair::Impl {
  transport::Qp qp;
  ProtectionDomain* pd = nullptr;
  QpInitAttr init;
};

struct Context::Impl {
  Impl(const PortConfig& p) : port(p), mrs(limits.max_mr), engine(*p.io, *p.clock, mrs) {}
  PortConfig port;
  DeviceLimits limits;
  mem::MrTable mrs;
  engine::Engine engine;
  std::string last_error;
  std::uint32_t next_pd = 1;
  std::uint32_t next_qpn = 0x11;  // QP0 and QP1 are the management QPs
  std::vector<std::unique_ptr<ProtectionDomain>> pds;
  std::vector<std::unique_ptr<MemoryRegion>> mrs_owned;
  std::vector<std::unique_ptr<CompletionQueue>> cqs;
  std::vector<std::unique_ptr<QueuePair>> qps;
  std::map<void*, mem::Buffer> buffers;

  // GID table: 0 IPv6 link-local, 1 IPv4-mapped (Context::query_gid).
  int query_gid(int index, ibv_gid& gid);

  int fail(int err, std::string message) {
    last_error = std::move(message);
    return err;
  }

  // The engine's own thread, and the one-slot queue through which control
  // calls reach it: a caller posts a job and waits; the worker runs it
  // between two polls. Without a worker the job runs in the caller.
  std::thread worker;
  std::atomic<bool> worker_running{false};
  std::atomic<bool> worker_stop{false};
  std::mutex control_mutex;  // one control call at a time, from any thread
  std::function<void()> control_job;
  std::atomic<int> control_state{0};  // 0 idle, 1 posted, 2 done

  template <typename F>
  auto control(F&& f) -> decltype(f()) {
    if (!worker_running.load(std::memory_order_acquire)) return f();
    std::lock_guard<std::mutex> lock(control_mutex);
    using R = decltype(f());
    if constexpr (std::is_void_v<R>) {
      control_job = [&] { f(); };
      run_control_job();
    } else {
      std::optional<R> result;
      control_job = [&] { result.emplace(f()); };
      run_control_job();
      return std::move(*result);
    }
  }

  void run_control_job() {
    control_state.store(1, std::memory_order_release);
    while (control_state.load(std::memory_order_acquire) != 2) std::this_thread::yield();
    control_state.store(0, std::memory_order_relaxed);
  }
};

namespace testing {

QueuePair* create_qp_with_qpn(ProtectionDomain* pd, const QpInitAttr& attr, std::uint32_t qpn);
MemoryRegion* reg_mr_with_key(ProtectionDomain* pd, void* addr, std::size_t length, std::uint64_t iova,
                              int access, std::uint32_t key);
transport::Qp& transport_qp(QueuePair* qp);

}  // namespace testing
}  // namespace uroce
