// rdma_cm through uroced: one communication manager (lib/cm, QP1) on the
// daemon's device, shared by every client, and what each client may do with
// it. A client's QPs live here, so the manager moves them through their
// states here, as the kernel's CM does for rdma_cm; the client's librdmacm
// (lib/rdmacm/cm_backend.h) sends the calls and reads the events.
//
// What a client reaches is its own: a service ID is one client's at a time
// (EADDRINUSE), a QP it names must be its process's (Server::process_qp), a
// connection it answers or ends must be one of its own (requested on its
// listener, or made by it), and it is told only its own events. When it
// goes, its listeners go, its requests are refused, its connections ended.
// What it can make the daemon hold is bounded (CmLimits).
//
// Single-threaded: the daemon's control loop makes every call; QP1's
// completions wake that loop through wake_fd().
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "cm/manager.h"
#include "service/protocol.h"
#include "uroce/verbs.h"

namespace uroce::daemon {

// Per client (limits.h's budgets are per client too; these are not
// configurable yet).
struct CmLimits {
  static constexpr std::uint32_t kListens = 64;        // service IDs listened on at once
  static constexpr std::uint32_t kBacklog = 128;       // requests waiting on one listener (rdma_listen's backlog, capped)
  static constexpr std::uint32_t kConnections = 1024;  // connections held: being made, requested, up
  static constexpr std::uint32_t kEvents = 1024;       // events waiting to be read (kCmEvent)
};

class CmRelay {
 public:
  explicit CmRelay(Context& ctx);
  ~CmRelay();
  CmRelay(const CmRelay&) = delete;
  CmRelay& operator=(const CmRelay&) = delete;

  // Readable when QP1 has completions: the loop then calls poll().
  int wake_fd() const { return wake_fd_; }
  void clear_wake();

  // Each returns 0 or an errno value with `why`, one line for the client.
  // kCmOpen: the manager opens at the first client's; `fd` is the client's
  // copy of its eventfd (signalled while its events wait).
  int open(std::uint32_t client, int& fd, std::string& why);
  int listen(std::uint32_t client, std::uint64_t service_id, std::uint32_t backlog, std::string& why);
  int unlisten(std::uint32_t client, std::uint64_t service_id, std::string& why);
  // `qp`: the client's process's (the caller checked); nullptr when the
  // program moves its QP itself (r.program_qp: the caller checked r.qpn is
  // its process's all the same).
  int connect(std::uint32_t client, QueuePair* qp, const service::CmConnect& r, std::uint32_t& comm_id,
              std::string& why);
  int accept(std::uint32_t client, QueuePair* qp, const service::CmAccept& r, std::string& why);
  int reject(std::uint32_t client, const service::CmReject& r, std::string& why);
  int disconnect(std::uint32_t client, std::uint32_t comm_id, std::string& why);
  // A SIDR_REQ (rdma_cm's UDP port space): counted as a connection until
  // its answer (or its timeout) is reported.
  int sidr_request(std::uint32_t client, const service::CmSidrRequest& r, std::uint32_t& request_id,
                   std::string& why);
  // rdma_init_qp_attr and rdma_establish on one of the client's connections.
  int init_qp_attr(std::uint32_t client, const service::CmInitQpAttr& r, service::CmInitQpAttrReply& out,
                   std::string& why);
  int establish(std::uint32_t client, std::uint32_t comm_id, std::string& why);
  // The client's oldest event; ENOENT when none waits.
  int next_event(std::uint32_t client, service::CmEvent& out, std::string& why);

  // MADs in, resends out, events to their clients.
  void poll();
  // A QP is being destroyed (its client's request, or its client gone).
  void forget_qp(QueuePair* qp);
  // `client` is gone: its listeners, requests and connections end.
  void release(std::uint32_t client);

  struct Counters {
    std::uint64_t requests_refused_queue_full = 0;  // REJ: its listener's client had kEvents unread
    std::uint64_t events_dropped = 0;               // for a client with kEvents unread, or gone
  };
  const Counters& counters() const { return counters_; }
  // The manager (tests), nullptr until the first kCmOpen.
  const cm::Manager* manager() const { return manager_.get(); }

 private:
  struct ClientCm {
    int event_fd = -1;
    std::deque<service::CmEvent> events;
    std::set<std::uint64_t> listens;
    std::set<std::uint32_t> conns;  // comm IDs
  };
  ClientCm* client_cm(std::uint32_t client, std::string& why);
  // comm_id's owner is `client`, or ENOENT and `why`.
  int owned(std::uint32_t client, std::uint32_t comm_id, std::string& why) const;
  void route(const cm::Event& e);
  void end(std::uint32_t comm_id);  // its owner no longer holds it

  Context& ctx_;
  std::unique_ptr<cm::Manager> manager_;
  int wake_fd_ = -1;
  std::map<std::uint32_t, ClientCm> clients_;
  std::map<std::uint64_t, std::uint32_t> listeners_;  // service ID -> client
  std::map<std::uint32_t, std::uint32_t> conns_;      // comm ID -> client
  std::set<std::uint32_t> sidr_requests_;             // comm IDs of SIDR requests to answer: none
                                                      // is held once answered
  Counters counters_;
};

}  // namespace uroce::daemon
