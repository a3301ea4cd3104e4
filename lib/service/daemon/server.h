// uroced's control path: the UNIX socket, one table of objects per client,
// and the reclaiming of everything a client had when its socket closes (it
// exited, was killed, or sent what the protocol does not allow).
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "service/protocol.h"
#include "service/shm.h"
#include "service_daemon/limits.h"
#include "service_daemon/pump.h"
#include "uroce/verbs.h"

namespace uroce::daemon {

class CmRelay;

class Server {
 public:
  Server(Context& ctx, std::size_t workers, const ServerConfig& config);
  ~Server();

  // Binds the socket (its mode and group as configured). "" or a one-line
  // reason ("socket ... is in use by a running uroced"). Nothing is done by
  // path that a link could redirect: the socket's folder must be one only
  // root (or this user) can change, or sticky and root's; the socket is
  // created with its mode (umask) and its group set without following links.
  std::string listen();
  // Serves until SIGTERM or SIGINT (blocked by the caller, read here
  // through a signalfd), or embedded until ServerConfig::stop_fd is
  // readable (no signal taken), then moves every client's QPs to the error state,
  // lets their completions out, and closes the clients. Returns 0. Never
  // blocks on a client: sockets are non-blocking, a reply the client does
  // not take is held (and the client not read) until it does, or dropped
  // after reply_timeout_ms. Wakes at least every kTick to run tick().
  int run();
  static constexpr std::chrono::milliseconds kTick{20};

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
    std::uint32_t pds = 0, mrs = 0, cqs = 0, qps = 0, srqs = 0, ahs = 0;
    std::uint64_t mapped_bytes = 0;
    std::vector<std::uint32_t> qpns;
  };
  std::vector<ClientRow> client_table() const;

  // What the clients of one uid hold together, against its budgets
  // (limits.h Limits, uid_*). Summed from the clients when a request would
  // add to it (at most connections_per_uid() clients attached, as many again
  // waiting for hello), so it is never out of step with them.
  struct UidUsage {
    std::uint32_t connections = 0;  // attached (said hello)
    std::uint32_t waiting = 0;      // not yet said hello
    std::uint32_t pds = 0, mrs = 0, cqs = 0, qps = 0, srqs = 0, ahs = 0;
  };

  struct Totals {
    std::uint32_t clients = 0, pds = 0, mrs = 0, cqs = 0, qps = 0, srqs = 0, ahs = 0;
    std::uint64_t mapped_bytes = 0;  // clients' memory files and rings mapped here
  };
  Totals totals() const;

 private:
  // A memory file by identity: an inode number repeats across filesystems.
  struct FileKey {
    std::uint64_t dev = 0, ino = 0;
    auto operator<=>(const FileKey&) const = default;
  };
  // A memory file as the daemon maps it: once, whole, however many regions
  // of however many clients lie on it, sealed by the daemon against hole
  // punching (F_SEAL_FUTURE_WRITE) right after that mapping.
  struct MappedFile {
    void* base = nullptr;
    std::size_t bytes = 0;
    bool huge = false;
    std::uint32_t clients = 0;         // clients with regions on it
    MemoryRegion* port_mr = nullptr;   // the whole file made known to the port once (not per region)
    std::uint64_t port_client = 0;     // with port_mr: the client and uid whose share it takes
    uid_t port_uid = 0;
  };
  // The port's registrations of memory files (DPDK has 128 memseg lists for
  // the whole process, one per registration), per client and per uid
  // (max_port_registrations, uid_max_port_registrations) and in all (at
  // most kPortRegistrations). A file past a share is mapped but not made
  // known to the port: frames from its regions are copied, never DMA'd.
  static constexpr std::uint32_t kPortRegistrations = 96;
  std::map<std::uint64_t, std::uint32_t> port_regs_client_;
  std::map<uid_t, std::uint32_t> port_regs_uid_;
  std::uint32_t port_regs_total_ = 0;
  std::uint64_t files_not_ported_ = 0;  // files past a share: their regions copied from
  // A client's use of a memory file, counted against its budgets once
  // however many regions lie on it.
  struct File {
    std::uint64_t bytes = 0;
    std::uint32_t users = 0;  // pieces of regions on it; 0: an idle hugepage file (drop_idle_files)
  };
  struct Mr {
    MemoryRegion* mr = nullptr;
    void* view = nullptr;  // the region's pieces side by side, as the client sees them
    std::size_t view_bytes = 0;
    bool own_view = false;          // a view of several pieces, mapped for this region; else inside its file's mapping
    std::vector<FileKey> files;     // its pieces' files (Client::files)
    std::uint32_t dm = 0;           // reg_dm_mr's: the device memory it lies in (its handle)
  };
  // Device memory (dm.cc): a memory file of the daemon's, mapped here and
  // by the client.
  struct Dm {
    void* map = nullptr;
    std::size_t bytes = 0;     // mapped: whole pages
    std::uint64_t length = 0;  // asked for
    std::uint32_t regions = 0;
  };
  struct Cq {
    CompletionQueue* cq = nullptr;
    void* map = nullptr;
    std::size_t bytes = 0;
    std::uint64_t charge = 0;  // against the memory budgets: ring and engine arrays
    std::size_t worker = 0;
    std::uint32_t users = 0;
    std::unique_ptr<PumpCq> pump;
  };
  struct Srq {
    SharedReceiveQueue* srq = nullptr;
    ProtectionDomain* pd = nullptr;
    void* map = nullptr;
    std::size_t bytes = 0;
    std::uint64_t charge = 0;  // against the memory budgets: ring and WQE array
    std::size_t worker = 0;    // its QPs' too (one engine takes from an SRQ)
    std::uint32_t users = 0;   // QPs on it
    std::unique_ptr<PumpSrq> pump;
  };
  struct Ah {
    AddressHandle* ah = nullptr;
    ProtectionDomain* pd = nullptr;
  };
  struct Qp {
    QueuePair* qp = nullptr;
    ProtectionDomain* pd = nullptr;
    std::uint32_t send_cq = 0, recv_cq = 0;
    std::uint32_t srq = 0;  // its SRQ's handle, 0 none
    void* map = nullptr;
    std::size_t bytes = 0;
    std::uint64_t charge = 0;  // against the memory budgets: rings and WQE arrays
    std::size_t worker = 0;
    std::unique_ptr<PumpQp> pump;
  };
  using Clock = std::chrono::steady_clock;
  struct Client {
    int sock = -1;
    std::uint32_t id = 0;
    pid_t pid = 0;
    uid_t uid = 0;
    // Its /proc/PID/mem, passed with its first on-demand region
    // (reg_mr_odp), closed when it goes: how the engines reach its ODP memory.
    int odp_mem = -1;
    Limits limits;              // its uid's (limits_for)
    bool attached = false;      // said hello (until then: only hello and stats, and hello_timeout_ms)
    bool leaving = false;       // refused: closed once its last reply is out
    Clock::time_point accepted;  // for the hello deadline
    // A reply the socket would not take (the client does not read): held,
    // with its descriptors, and the client not read until it is out.
    std::unique_ptr<service::Reply> out;
    std::vector<int> out_fds;
    Clock::time_point held;      // since when `out` waits
    std::uint32_t next_handle = 1;
    std::map<std::uint32_t, ProtectionDomain*> pds;
    std::map<std::uint32_t, Mr> mrs;
    std::map<std::uint32_t, MemoryWindow*> mws;  // counted as regions in the budgets
    std::map<std::uint32_t, Cq> cqs;
    std::map<std::uint32_t, Qp> qps;
    std::map<std::uint32_t, Srq> srqs;
    std::map<std::uint32_t, Ah> ahs;  // by the client's number for them (service::CreateAh)
    std::map<std::uint32_t, Dm> dms;
    std::map<std::uint32_t, XrcDomain*> xrcds;  // counted as PDs in the budgets
    std::uint64_t dm_bytes = 0;       // held, in whole pages (HelloReply::max_dm_size)
    std::unique_ptr<AhTable> ah_table;  // the same for the pumps, made with its first UD QP or AH
    std::map<FileKey, File> files;
    std::uint64_t mapped = 0;             // bytes of memory files
    std::uint64_t ring_bytes = 0;
    std::uint64_t object_bytes = 0;       // CQs and QPs: rings and engine arrays (max_object_mb)
    std::uint32_t mappings = 0;           // made for it: its files, region views, rings (max_mappings)
    // A modify_qp or create_ah waiting for its peer's address
    // (Context::resolve_gid kPending), or refused (kUnreachable) and held
    // off a moment, answered from tick(). One at most: the client's socket
    // is not read meanwhile, so its requests stay in order and one client's
    // unreachable peers cost the control loop nothing.
    struct Deferred {
      service::Request req;
      std::chrono::steady_clock::time_point not_before;  // a refusal's reply waits till then
      std::chrono::steady_clock::time_point deadline;
    };
    std::optional<Deferred> deferred;
  };
  // What one uid's clients make the daemon hold, together (uid_max_memory_mb,
  // uid_max_mappings). The connection and object budgets per uid are kept
  // apart from this.
  struct UidMemory {
    std::uint64_t bytes = 0;
    std::uint32_t mappings = 0;
  };
  // What a request would add: memory files (pinned), objects, mappings.
  struct Charge {
    std::uint64_t pinned = 0, objects = 0;
    std::uint32_t mappings = 0;
  };
  // "" when `add` fits every budget of `c`, its uid and the daemon; else
  // the one-line reason. charge()/uncharge() book it.
  std::string over_budget(const Client& c, const Charge& add) const;
  // The client's table of address handles (its first UD QP or AH makes
  // it), charged to its budgets: "" or why not.
  std::string make_ah_table(Client& c);
  void charge(Client& c, const Charge& add, int sign);

  void accept_client();
  // Handles one request; false when the client must go (its socket closed,
  // or a message the protocol does not allow).
  bool serve(Client& c);
  // Sends `reply` without waiting; held in c.out if the socket is full.
  // false when the client must go.
  bool send_reply(Client& c, const service::Reply& reply, std::vector<int>& fds);
  bool flush(Client& c);  // c.out, once the socket takes it; false: the client must go
  void watch(const Client& c);  // epoll: its requests, or (c.out held) room for its reply
  // Closes clients past their hello or reply deadline; true if any.
  bool expire();
  // "" or why `c` may not attach (say hello): max_clients, its uid's connections.
  std::string admit(const Client& c) const;
  // Pending work of the control path, once per loop (at least every kTick):
  // finishes the requests waiting on something other than the client (a
  // modify_qp whose address is being resolved) that can be finished now.
  void tick();
  void drop(int sock, const std::string& why);  // release() and forget
  UidUsage usage(uid_t uid) const;

  // The requests. One function per service::Op, all of this type (so
  // declared below as `OpFn op_hello, ...`): each fills `reply` or fail()s
  // it, `fds` are the descriptors that came with the request (closed by
  // serve() after), `reply_fds` go back with the reply.
  using OpFn = void(Client& c, const service::Request& req, const int* fds, int nfds, service::Reply& reply,
                    std::vector<int>& reply_fds);
  // The object count a request adds one to, checked against the client's
  // and its uid's budget before the request runs.
  enum class Budget : std::uint8_t { kNone, kPds, kMrs, kCqs, kQps, kSrqs, kAhs };
  // One row per service::Op, in the enum's order (ops.cc kOps).
  struct OpRow {
    service::Op op;
    const char* name;   // as in logs
    bool before_hello;  // allowed before the client said hello
    Budget budget;
    OpFn Server::*run;
  };
  static const OpRow kOps[];
  // Bounds check, hello check, budget check, then the op's row.
  void handle(Client& c, const service::Request& req, const int* fds, int nfds, service::Reply& reply,
              std::vector<int>& reply_fds);
  OpFn op_hello, op_alloc_pd, op_dealloc_pd, op_reg_mr, op_dereg_mr, op_create_cq, op_destroy_cq, op_create_qp,
      op_modify_qp, op_query_qp, op_destroy_qp, op_qp_counters, op_stats, op_create_srq, op_modify_srq, op_query_srq,
      op_destroy_srq, op_create_ah, op_destroy_ah, op_alloc_mw, op_dealloc_mw;
  // Device memory (dm.cc).
  OpFn op_alloc_dm, op_free_dm, op_reg_dm_mr;
  int free_dm(Client& c, std::uint32_t handle);
  // ibv_rereg_mr, ibv_resize_cq, ibv_query_rt_values_ex (rereg_resize.cc).
  OpFn op_rereg_mr, op_resize_cq, op_query_clock;
  OpFn op_open_xrcd, op_close_xrcd;  // xrc.cc
  OpFn op_set_transport_options;      // ops.cc
  // A QP moved to RESET: its completions still in its CQs' shared rings
  // are taken out (the daemon's own CQs forgot theirs in the modify).
  void forget_completions(Client& c, const Qp& q);
  // rdma_cm (cm_relay.cc).
  OpFn op_cm_open, op_cm_listen, op_cm_unlisten, op_cm_connect, op_cm_accept, op_cm_reject, op_cm_disconnect,
      op_cm_event, op_cm_sidr_request, op_cm_init_qp_attr, op_cm_establish;
  // QP number `qpn` of c's process (any of its clients), or nullptr.
  QueuePair* process_qp(const Client& c, std::uint32_t qpn) const;
  // "" or why `c` may not make one more object counted by `b` (its budget
  // and its uid's).
  std::string over_budget(const Client& c, Budget b) const;
  static int fail(service::Reply& reply, int err, const std::string& why);
  // What a request naming an object the client does not have is told.
  static std::string no_object(const char* what, std::uint32_t handle) {
    return std::string("no ") + what + " " + std::to_string(handle) + " of this client";
  }
  // The client's object `handle` in `objects` (one of its pds, mrs, cqs,
  // qps), or nullptr with `reply` failed (EINVAL, no_object).
  template <class Map>
  static typename Map::mapped_type* find(Map& objects, std::uint32_t handle, const char* what, service::Reply& reply) {
    auto it = objects.find(handle);
    if (it != objects.end()) return &it->second;
    fail(reply, EINVAL, no_object(what, handle));
    return nullptr;
  }
  // kModifyQp on `q`, whose address (if any) resolved or failed already.
  void modify_qp(Client& c, Qp& q, const service::ModifyQp& r, service::Reply& reply);
  // kCreateAh once its destination's address is resolved (or refused).
  void create_ah(Client& c, const service::CreateAh& r, service::Reply& reply);
  // The GID a deferred request waits on (modify_qp's or create_ah's).
  static const ibv_gid& awaited_gid(const service::Request& req);
  // Stops reading c's socket until its deferred request is answered.
  // `hold_off`: the reply waits at least this long (a refusal, so that a
  // client asking again and again for an unreachable address is answered a
  // few times a second, not as fast as it can ask).
  void defer(Client& c, const service::Request& r, std::chrono::milliseconds hold_off = {});
  static constexpr std::chrono::milliseconds kRefusalHoldOff{100};

  int destroy_qp(Client& c, std::uint32_t handle);
  int destroy_cq(Client& c, std::uint32_t handle);
  int dereg_mr(Client& c, std::uint32_t handle);
  // A region's memory as map_region made it ready: its view, the files it
  // lies on, and what it costs; not yet booked to the client.
  struct RegionMapping {
    void* view = nullptr;
    std::uint64_t total = 0;     // the pieces' bytes
    bool own_view = false;       // a view of several pieces, mapped for it
    bool ported = false;         // inside one file the port knows (else: copied from)
    std::vector<FileKey> keys;   // its pieces' files
    std::vector<FileKey> used;   // files mapped for it (unmap_region gives them up)
    std::vector<FileKey> fresh;  // files new to the client
    Charge add;
  };
  // The memory files of a RegMr checked and mapped (reg_mr, and rereg_mr's
  // new translation): true and `out`, or false with `reply` failed.
  bool map_region(Client& c, const service::RegMr& r, const int* fds, int nfds, service::Reply& reply,
                  RegionMapping& out);
  void unmap_region(RegionMapping& m);                  // its region was refused
  void keep_region(Client& c, const RegionMapping& m);  // its region was made: booked to c
  void release_view(Client& c, const Mr& mr);           // the region no longer uses its memory
  int destroy_srq(Client& c, std::uint32_t handle);
  int destroy_ah(Client& c, std::uint32_t number);
  // Runs f while no pump runs (every worker between two rounds).
  template <typename F>
  void with_all_pumps(F&& f, std::size_t i = 0) {
    if (i == pumps_.size()) {
      f();
      return;
    }
    pumps_[i].with_lock([&] { with_all_pumps(f, i + 1); });
  }
  // The daemon's mapping of a checked memory file (made, sealed and made
  // known to the port at first sight); nullptr and `why`.
  MappedFile* map_file(const Client& c, int fd, const service::MemoryFileInfo& info, std::string& why);
  void unuse_file(const FileKey& key);  // one client fewer; unmapped after the last
  // Unmaps c's files with no region on them (hugepage files kept for
  // registering again), but those in `keep`; whether there were any.
  bool drop_idle_files(Client& c, const std::vector<FileKey>& keep);
  // op_reg_mr of an on-demand region (memory.cc): none of the client's
  // memory is mapped here; the engines reach it through the client's own
  // /proc/PID/mem, which it passes (checked against the socket's peer pid),
  // so a client reaches its own memory only.
  void reg_mr_odp(Client& c, ProtectionDomain* pd, const service::RegMr& r, const int* fds, int nfds,
                  service::Reply& reply);
  void release(Client& c);  // everything of c, then its socket
  static ClientRow row_of(const Client& c);
  void publish_client_table();
  void stats(const Client& asking, service::StatsReply& s) const;

  Context& ctx_;
  ServerConfig config_;
  std::vector<Pump> pumps_;
  std::size_t next_worker_ = 0;
  int listen_fd_ = -1;
  int socket_dir_ = -1;  // the socket's folder (O_PATH), for *at() calls that follow no link
  std::string socket_name_;
  int epoll_fd_ = -1;
  int signal_fd_ = -1;
  std::uint32_t next_client_ = 1;
  std::map<int, std::unique_ptr<Client>> clients_;  // by socket
  bool reply_deferred_ = false;  // handle() deferred its reply: serve() sends none
  mutable std::mutex table_mutex_;
  std::vector<ClientRow> table_;  // clients_ as last published
  // Memory (see UidMemory): per uid, the daemon's totals and its budgets.
  std::map<uid_t, UidMemory> uid_memory_;
  std::uint64_t memory_total_ = 0;
  std::uint32_t mappings_total_ = 0;
  std::uint64_t memory_budget_ = 0;    // max_memory_mb, or half the machine's memory
  std::uint32_t mappings_budget_ = 0;  // half of vm.max_map_count
  std::map<FileKey, MappedFile> mapped_files_;
  ProtectionDomain* files_pd_ = nullptr;  // the port's registrations of whole files; no QP in it
  std::unique_ptr<CmRelay> cm_;  // rdma_cm: QP1 and the clients' listeners and connections
};

}  // namespace uroce::daemon
