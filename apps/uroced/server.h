// uroced's control path: the UNIX socket, one table of objects per client,
// and the reclaiming of everything a client had when its socket closes (it
// exited, was killed, or sent what the protocol does not allow).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "pump.h"
#include "service/protocol.h"
#include "uroce/verbs.h"

namespace uroce::daemon {

class Server {
 public:
  Server(Context& ctx, std::size_t workers, const Config& config);
  ~Server();

  // Binds the socket (its mode and group as configured). "" or a one-line
  // reason ("socket ... is in use by a running uroced").
  std::string listen();
  // Serves until SIGTERM or SIGINT (blocked by the caller, read here
  // through a signalfd), then moves every client's QPs to the error state,
  // lets their completions out, and closes the clients. Returns 0.
  int run();
  // Finishes the requests waiting on something other than the client (a
  // modify_qp whose address is being resolved) that can be finished now.
  // run() calls it after each wake-up, and at least every kTickMs while one
  // waits.
  void tick();
  static constexpr int kTickMs = 20;

  // Context::WorkerHook: worker `worker`'s pump, before and after each poll.
  static std::size_t pump_requests(void* self, std::size_t worker) {
    return static_cast<Server*>(self)->pumps_[worker].run_requests();
  }
  static std::size_t pump_completions(void* self, std::size_t worker) {
    return static_cast<Server*>(self)->pumps_[worker].run_completions();
  }

  // One client as DPDK telemetry's /uroced/clients reports it
  // (apps/uroced/telemetry.cc): a copy the control loop publishes after
  // every request, read from telemetry's thread.
  struct ClientRow {
    std::uint32_t id = 0;
    std::int32_t pid = 0;
    std::uint32_t uid = 0;
    std::uint32_t pds = 0, mrs = 0, cqs = 0, qps = 0;
    std::uint64_t mapped_bytes = 0;
    std::vector<std::uint32_t> qpns;
  };
  std::vector<ClientRow> client_table() const;

  struct Totals {
    std::uint32_t clients = 0, pds = 0, mrs = 0, cqs = 0, qps = 0;
    std::uint64_t mapped_bytes = 0;  // clients' memory files and rings mapped here
  };
  Totals totals() const;

 private:
  // A client's memory file, counted against its max_pinned_mb once
  // however many regions lie on it.
  struct File {
    std::uint64_t bytes = 0;
    std::uint32_t users = 0;  // pieces of regions on it
  };
  struct Mr {
    MemoryRegion* mr = nullptr;
    void* view = nullptr;  // the region's pieces mapped side by side, as the client sees them
    std::size_t view_bytes = 0;
    std::vector<std::uint64_t> inodes;  // its pieces' files (Client::files)
  };
  struct Cq {
    CompletionQueue* cq = nullptr;
    void* map = nullptr;
    std::size_t bytes = 0;
    std::size_t worker = 0;
    std::uint32_t users = 0;
    std::unique_ptr<PumpCq> pump;
  };
  struct Qp {
    QueuePair* qp = nullptr;
    ProtectionDomain* pd = nullptr;
    std::uint32_t send_cq = 0, recv_cq = 0;
    void* map = nullptr;
    std::size_t bytes = 0;
    std::size_t worker = 0;
    std::unique_ptr<PumpQp> pump;
  };
  struct Client {
    int sock = -1;
    std::uint32_t id = 0;
    pid_t pid = 0;
    uid_t uid = 0;
    std::uint32_t next_handle = 1;
    std::map<std::uint32_t, ProtectionDomain*> pds;
    std::map<std::uint32_t, Mr> mrs;
    std::map<std::uint32_t, Cq> cqs;
    std::map<std::uint32_t, Qp> qps;
    std::map<std::uint64_t, File> files;  // by inode
    std::uint64_t mapped = 0;             // bytes of memory files
    std::uint64_t ring_bytes = 0;
    // A modify_qp waiting for its peer's address (Context::resolve_gid
    // kPending), or refused (kUnreachable) and held off a moment, answered
    // from tick(). One at most: the client's socket is
    // not read meanwhile, so its requests stay in order and one client's
    // unreachable peers cost the control loop nothing.
    struct Deferred {
      service::ModifyQp req;
      std::chrono::steady_clock::time_point not_before;  // a refusal's reply waits till then
      std::chrono::steady_clock::time_point deadline;
    };
    std::optional<Deferred> deferred;
  };

  void accept_client();
  // Handles one request; false when the client must go (its socket closed,
  // or a message the protocol does not allow).
  bool serve(Client& c);
  void handle(Client& c, const service::Request& req, const int* fds, int nfds, service::Reply& reply,
              std::vector<int>& reply_fds);
  int fail(service::Reply& reply, int err, const std::string& why);
  // kModifyQp on `q`, whose address (if any) resolved or failed already.
  void modify_qp(Client& c, Qp& q, const service::ModifyQp& r, service::Reply& reply);
  // Stops reading c's socket until its deferred request is answered.
  // `hold_off`: the reply waits at least this long (a refusal, so that a
  // client asking again and again for an unreachable address is answered a
  // few times a second, not as fast as it can ask).
  void defer(Client& c, const service::ModifyQp& r, std::chrono::milliseconds hold_off = {});
  static constexpr std::chrono::milliseconds kRefusalHoldOff{100};
  bool any_deferred() const;

  void reg_mr(Client& c, const service::RegMr& r, const int* fds, int nfds, service::Reply& reply);
  void create_cq(Client& c, const service::CreateCq& r, service::Reply& reply, std::vector<int>& fds);
  void create_qp(Client& c, const service::CreateQp& r, service::Reply& reply, std::vector<int>& fds);
  int destroy_qp(Client& c, std::uint32_t handle);
  int destroy_cq(Client& c, std::uint32_t handle);
  int dereg_mr(Client& c, std::uint32_t handle);
  void release(Client& c);  // everything of c, then its socket
  static ClientRow row_of(const Client& c);
  void publish_client_table();

  Context& ctx_;
  Config config_;
  std::vector<Pump> pumps_;
  std::size_t next_worker_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int signal_fd_ = -1;
  std::uint32_t next_client_ = 1;
  std::map<int, std::unique_ptr<Client>> clients_;  // by socket
  bool reply_deferred_ = false;  // handle() deferred its reply: serve() sends none
  mutable std::mutex table_mutex_;
  std::vector<ClientRow> table_;  // clients_ as last published
};

}  // namespace uroce::daemon
