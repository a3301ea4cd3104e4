// An embedded uroced: a process that runs uroce in-process (it owns the
// port; its engines run on its threads) serves its forked children the way
// uroced serves its clients, so that a child opens uroce0 through the
// service path (lib/service/client.cc) instead of being refused. rdma-core's
// Python tests open the device in the parent and fork the two ends of each
// rdma_cm test (docs/ibverbs.md, "Forked children").
//
// device.cc decides when: started at the first fork after the device is up
// (a process that never forks has no thread or socket of this), stopped at
// the last ibv_close_device that finds no child attached, or at exit.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "uroce/verbs.h"

namespace uroce::daemon {
class Server;
}

namespace uroce::ibverbs {

class ForkService {
 public:
  // Listens on a socket in a new folder of mode 0700 ($TMPDIR or /tmp,
  // uroce-fork-XXXXXX/uroced.sock) and serves `ctx` (`engines`: its port
  // queues, one worker each) on a thread of its own with every signal
  // blocked. Only this uid may attach. The caller then runs the workers
  // with hook(). nullptr and a one-line `why`.
  static std::unique_ptr<ForkService> start(Context& ctx, std::size_t engines, std::string& why);
  // Joins the loop if stop() has not; then the server (its pumps: the
  // workers must no longer run hook()), its socket and its folder.
  ~ForkService();
  ForkService(const ForkService&) = delete;
  ForkService& operator=(const ForkService&) = delete;

  // What the workers run for the server's pumps (as apps/uroced installs it).
  Context::WorkerHook hook() const;
  const std::string& socket() const { return socket_; }
  // A child is attached, or waits for its hello (as last published by the loop).
  bool has_clients() const;

  // Ends the loop: every client's QPs to the error state, their completions
  // out through the pumps (the workers still running hook()), the clients
  // closed; joins its thread.
  void stop();
  // At exit (device.cc's handler): the same, waiting at most `wait` for the
  // loop, which may be blocked on a control call that the exiting thread
  // holds (exit() from a signal handler): then it is left. The socket and
  // its folder are removed either way. Whether the loop ended.
  bool stop_at_exit(std::chrono::milliseconds wait);

 private:
  ForkService() = default;
  void remove_socket();

  std::unique_ptr<daemon::Server> server_;
  std::string folder_, socket_;
  int stop_fd_ = -1;
  std::thread loop_;
  std::atomic<bool> loop_done_{false};
};

}  // namespace uroce::ibverbs
