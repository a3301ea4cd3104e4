// The client's half of the service (protocol.h): the control socket to
// uroced, the shared rings of its CQs and QPs, the memory files behind its
// regions, and a thread that turns the daemon's eventfd signals into the
// completion-event callbacks of Context::create_cq. lib/verbs runs its
// objects on this when a Context is attached to a daemon (Context::attach).
#pragma once

#include <infiniband/verbs.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "service/protocol.h"
#include "service/shm.h"

namespace uroce::service {

// A CQ whose ring the daemon fills.
struct RemoteCq {
  std::uint32_t handle = 0;
  Ring<CqSlot> ring;  // this side's tail: ring.tail()
  void* map = nullptr;
  std::size_t map_bytes = 0;
  int event_fd = -1;  // the daemon's signal (closed by Client::destroy_cq, or with the Client)
  void (*on_event)(void* arg) = nullptr;
  void* arg = nullptr;

  int poll(int n, ibv_wc* wc, std::uint64_t* stamps = nullptr);  // as CompletionQueue::poll
  int arm(bool solicited_only);  // as CompletionQueue::arm
  bool overflowed() const { return ring.header->overflow.load(std::memory_order_acquire) != 0; }
  ~RemoteCq();
};

// A QP whose rings the daemon drains.
struct RemoteQp {
  std::uint32_t handle = 0;
  std::uint32_t qpn = 0;
  Ring<SendSlot> sq;  // this side's heads: sq.head(), rq.head()
  Ring<RecvSlot> rq;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  ibv_qp_type type = IBV_QPT_RC;
  bool on_srq = false;        // receives from an SRQ: post_recv refused
  std::uint32_t mtu = 4096;   // UD: the largest datagram (the port's active MTU)
  ibv_qp_state state = IBV_QPS_RESET;  // as the last modify or query left it
  void* map = nullptr;
  std::size_t map_bytes = 0;

  // ibv_post_send / ibv_post_recv for one WR: 0, ENOMEM (queue full) or
  // EINVAL. The daemon drops what it would refuse, with no completion, so
  // everything it checks is checked here first: the opcode for the QP's
  // type (IBTA table 39), SGEs, inline size, UD's length against the MTU.
  // `ah`: a UD send's address handle, by its number (CreateAh); 0 none.
  int post_send(const ibv_send_wr& wr, std::uint32_t ah = 0);
  int post_recv(const ibv_recv_wr& wr);
  ~RemoteQp();
};

class Client;

// An SRQ whose ring the daemon drains; its limit event comes through an
// eventfd, as a CQ's completion events do.
struct RemoteSrq {
  Client* client = nullptr;
  std::uint32_t handle = 0;
  Ring<RecvSlot> ring;  // this side's head: ring.head()
  std::uint32_t max_wr = 0, max_sge = 0;
  void* map = nullptr;
  std::size_t map_bytes = 0;
  int event_fd = -1;  // the daemon's signal (closed by Client::destroy_srq, or with the Client)
  std::uint32_t srqn = 0;  // an XRC SRQ's number
  std::uint32_t srq_num() const { return srqn; }

  // As SharedReceiveQueue's: post_recv for one WR (0, ENOMEM full, EINVAL
  // too many SGEs); modify and query are calls to the daemon (its errno);
  // count: posted and not yet taken by a QP.
  int post_recv(const ibv_recv_wr& wr);
  int modify(const ibv_srq_attr& attr, int attr_mask, std::string& why);
  int query(ibv_srq_attr& attr, std::string& why);
  std::uint32_t count() const { return ring.head() - ring.consumed(); }
  ~RemoteSrq();
};

// Where a region lies: whole pages of memory files side by side, from the
// page of its first byte to that of its last, and its offset in them.
struct SharedRange {
  struct Piece {
    int fd = -1;  // the client's; stays open (owned by the client library)
    std::uint64_t file_offset = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<Piece> pieces;
  std::uint64_t offset = 0;
};

class Client {
 public:
  // Attaches to the daemon at `path`. nullptr and a one-line `error` (what to
  // do about it) when the socket is missing, refuses us, or speaks another
  // protocol version.
  static std::unique_ptr<Client> connect(const std::string& path, std::string& error);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const HelloReply& hello() const { return hello_; }

  // In a forked child (pthread_atfork): the connection is the parent's, so
  // its descriptors are closed here and every call answers ENODEV without
  // a word to the daemon (the parent's objects are not the child's to
  // destroy). The child attaches anew with connect().
  void forget_after_fork();
  // Known by the pid, not by a flag the child writes: this object may sit
  // in heap pages the process shares with uroced (memory.cc), which a
  // forked child shares too until memory.cc's handler copies them, so a
  // write here in the child could reach the parent's copy.
  bool forked() const { return getpid() != owner_; }

  // One control call: 0 or the daemon's errno, its reason in `message`.
  // Descriptors sent with the request are not closed; those of the reply are
  // returned in `fds` (up to kMaxFds).
  int call(const Request& req, Reply& reply, const int* fds, int nfds, std::vector<int>* got, std::string& message);

  // The memory files holding [addr, addr + len) at the same addresses
  // (lib/service/memory.cc): private anonymous pages among them are moved
  // onto a new file now (copied into it, which is then mapped over them in
  // place); pages already on one of ours are passed as they are. Returns 0
  // and the pieces; otherwise an errno value and why: EINVAL (pages that
  // are not private anonymous memory, or too many pieces), EFAULT (pages
  // not mapped), ENOMEM.
  int share(void* addr, std::size_t len, SharedRange& out, std::string& why);
  // Registrations share() refused in this process (each with a line on
  // stderr): memory it cannot pass or move safely.
  static std::uint64_t refused_shares();
  // Memory already in a file (Context::alloc_buffer in service mode).
  void* alloc_buffer(std::size_t bytes);
  void free_buffer(void* p);

  std::unique_ptr<RemoteCq> create_cq(std::uint32_t cqe, void (*on_event)(void*), void* arg, std::string& why,
                                      int& err, bool timestamps = false);
  int destroy_cq(RemoteCq* cq, std::string& why);
  // ibv_resize_cq: the daemon moves what waits into a new ring of `cqe`,
  // which replaces cq's. 0, or its errno (EINVAL: more wait) and why.
  // Not while cq is polled.
  int resize_cq(RemoteCq* cq, std::uint32_t cqe, std::string& why);
  std::unique_ptr<RemoteQp> create_qp(const CreateQp& attr, std::string& why, int& err);
  int destroy_qp(RemoteQp* qp, std::string& why);
  // `on_limit(arg)` runs on the event thread when the SRQ's armed limit is crossed.
  std::unique_ptr<RemoteSrq> create_srq(const CreateSrq& attr, void (*on_limit)(void*), void* arg, std::string& why,
                                        int& err);
  int destroy_srq(RemoteSrq* srq, std::string& why);

 private:
  Client() = default;
  void watch_events();  // the event thread

  int sock_ = -1;
  const pid_t owner_ = getpid();  // the process that attached
  HelloReply hello_{};
  std::mutex call_mutex_;  // one call at a time on the socket

  // The event thread's waiters_ entry for an object's eventfd (CQ or SRQ).
  void watch_fd(std::uint32_t handle, int fd, void (*on_event)(void*), void* arg);
  void unwatch_fd(std::uint32_t handle, int fd);

  // Completion and SRQ limit events: an epoll set of the CQs' and SRQs' eventfds.
  // The thread finds a CQ by handle under events_mutex_, so destroy_cq
  // (which removes it under the same lock) never races a callback.
  struct Waiter {
    int fd = -1;
    void (*on_event)(void*) = nullptr;
    void* arg = nullptr;
  };
  std::mutex events_mutex_;
  std::map<std::uint32_t, Waiter> waiters_;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;
  std::thread events_;
};

}  // namespace uroce::service
