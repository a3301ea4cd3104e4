// librdmacm.so.1: rdma_cm's library ABI (rdma-core's <rdma/rdma_cma.h>) on
// uroce, so that rping and perftest's -R run unmodified. Our own code,
// written from the header and the man pages.
//
// One device (our libibverbs.so.1's uroce0) and one communication manager
// (lib/cm: QP1 and the IB CM protocol) per process. A thread of ours polls
// the manager and turns what it reports into rdma_cm events, queued in
// memory on the event channel of the ID they concern; the channel's pipe
// holds one byte while its queue is not empty (a wake-up, written without
// blocking), so its fd polls as the kernel's does. Address resolution is
// ours: the device's IPv4 address is the only local one, and the peer's
// Ethernet address is found by the stack's ARP when the first MAD goes out.
// QP state changes go through ibv_modify_qp, so that libibverbs's view of
// each QP stays right. A synchronous ID (made with no channel) has a
// channel of its own, and its calls wait there for the event they started,
// as rdma-core's do; endpoint.cc builds rdma-core's endpoint helpers on
// them. The device, the manager and the thread live from the first call
// to the destruction of the last ID and event channel (release_if_unused),
// and start again at the next.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/ioctl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cm/manager.h"
#include "ibverbs/internal.h"
#include "rdmacm/cm_backend.h"
#include "rdmacm/internal.h"

namespace uroce::rdmacm {
namespace {

// An event and the private data it points to.
struct EventBox {
  rdma_cm_event ev{};
  std::vector<std::uint8_t> data;
  struct Id* counted = nullptr;  // once reported: the ID whose acknowledgement it owes
};
using EventQueue = std::list<EventBox*>;

// An rdma_cm_id and what we keep beside it; the public struct first.
struct Id {
  rdma_cm_id cm{};
  std::uint32_t comm_id = 0;   // the manager's, once connecting or requested
  bool listening = false;
  bool connected = false;      // ESTABLISHED reported, not yet disconnected
  std::uint16_t port = 0;      // our port (host order)
  // A request's ID while its CONNECT_REQUEST is still queued: the program
  // has not seen it, so if the request goes (timed out, withdrawn by the
  // peer), the event and the ID go with it.
  bool request_queued = false;
  EventQueue::iterator request_event;
  struct Channel* request_channel = nullptr;  // where that event waits (its listener's)
  // A synchronous ID (rdma_create_id with no channel, or a request of a
  // synchronous listener): its channel is its own, and each call waits
  // there for the event it started, as rdma-core's librdmacm does.
  bool sync = false;
  bool holds_device = false;   // counts in State::pd_refs (cm.pd is the default PD)
  // rdma_create_ep's passive side: the QP each rdma_get_request makes.
  bool has_ep_qp_attr = false;
  ibv_qp_init_attr ep_qp_attr{};
  std::vector<std::uint8_t> connect_data;  // rdma_addrinfo's ai_connect, before the caller's
  // RDMA_OPTION_ID_ACK_TIMEOUT (rdma_set_option): the QP's local ACK
  // timeout at connect or accept; the manager's default (14) when unset.
  std::optional<std::uint8_t> ack_timeout;
  // Events rdma_get_cm_event reported for this ID (a CONNECT_REQUEST counts
  // for its listener), and how many of them rdma_ack_cm_event has taken
  // back: rdma_destroy_id waits until they are equal, as rdma-core's does.
  std::uint64_t events_reported = 0;
  std::uint64_t events_acked = 0;
  // ECE (ece.cc has the rules): what rdma_set_local_ece gave (an ID with no
  // QP; vendor_id 0: none), and what the peer's REQ or REP carried.
  ibv_ece local_ece{};
  ibv_ece remote_ece{};
};

struct Channel {
  rdma_event_channel ch{};
  int write_fd = -1;           // non-blocking: at most one byte is ever in the pipe
  EventQueue queue;
  std::atomic<int> readers{0};  // threads inside rdma_get_cm_event
};

struct State {
  std::mutex mutex;            // everything below, and the manager
  bool initialised = false;
  int init_error = 0;  // what every call answers once init() failed (ENODEV, ENOSYS)
  std::string error;
  ibv_context* verbs = nullptr;
  std::unique_ptr<cm::Backend> manager;  // this process's (cm::Manager) or uroced's (ServiceCm)
  std::array<std::uint8_t, 4> ip{};  // the device's IPv4 address
  std::map<std::uint32_t, Id*> by_comm;      // connecting / connected IDs by the manager's comm ID
  std::map<std::uint16_t, Id*> listeners;    // by port
  std::map<QueuePair*, ibv_qp*> qps;         // uroce QP -> the verbs QP over it
  // What exists, so that a call on a destroyed ID or channel (a program's
  // error path) fails with EINVAL or EBADF instead of touching freed memory.
  std::set<const Id*> ids;
  std::set<const Channel*> channels;
  std::uint16_t next_port = 40000;
  // The device's default PD, shared by every ID bound to it (rdma-core
  // allocates one per device on first use and frees it with the last ID).
  ibv_pd* default_pd = nullptr;
  int pd_refs = 0;
  // The device's RDMA READ depths (max_qp_rd_atom, max_qp_init_rd_atom),
  // queried at the first connect or accept.
  bool have_depths = false;
  std::uint8_t max_responder = 0;
  std::uint8_t max_initiator = 0;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::condition_variable acked;  // an event was acknowledged (rdma_destroy_id waits on it)
  State* parent = nullptr;  // in a forked child: the parent's, kept as it was
  // The program is done with rdma_cm (release_if_unused): the CM thread,
  // the manager and the device are being let go outside the mutex; a call
  // that would start them again (start_cm) waits for `torn_down`.
  bool tearing_down = false;
  std::condition_variable torn_down;
  // rdma_get_devices handed `verbs` out since it was opened: the program may
  // hold it as long as the process lives (rdma-core's contexts stay valid
  // until exit; libfabric's verbs provider opens its domain on one after
  // rdma_free_devices), so it stays open when the rest is let go.
  bool verbs_handed_out = false;
};

// Never destroyed: the thread may outlive static destructors. A forked child
// gets a State of its own (fork_child): the parent's CM thread is not in it,
// its mutex may be held by that thread, and its IDs' connections are the
// parent's; the child's first call opens the device and a CM afresh (through
// uroced: a connection of its own; in-process: no device, ibverbs says why).
State* g_state = nullptr;
// Only marked in the fork handler, which must not allocate (see
// lib/ibverbs/device.cc): the State is replaced at the child's first call.
bool g_forked = false;
void fork_child() { g_forked = true; }

void qp_destroyed(QueuePair* qp);

State& state() {
  static const bool made = [] {
    g_state = new State();
    pthread_atfork(nullptr, nullptr, fork_child);
    ibverbs::set_qp_destroy_hook(qp_destroyed);
    return true;
  }();
  (void)made;
  if (g_forked) {
    g_forked = false;
    State* parent = g_state;
    g_state = new State();
    g_state->parent = parent;
  }
  return *g_state;
}

// What a thread blocked in rdma_get_cm_event does when its channel is
// destroyed under it: the kernel's read would never return, so neither
// does this (the process ends around it).
[[noreturn]] void wait_forever() {
  for (;;) pause();
}

// The wake-up byte: written when the queue becomes non-empty, read away when
// it becomes empty (both under the state's mutex), so the pipe never holds
// more than one byte and a write never blocks, however many events wait.
void wake(Channel* c) {
  const char one = 1;
  while (write(c->write_fd, &one, 1) < 0 && errno == EINTR) {
  }
}
void drain(Channel* c) {
  int n = 0;
  if (ioctl(c->ch.fd, FIONREAD, &n) != 0) return;
  char bytes[16];
  while (n > 0) {  // only what is there: the program's fd may be blocking
    const ssize_t got = read(c->ch.fd, bytes, std::min<std::size_t>(sizeof bytes, static_cast<std::size_t>(n)));
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return;
    }
    n -= static_cast<int>(got);
  }
}

// Queues `e` on `c`; false (and `e` freed) if the channel is gone.
bool push(Channel* c, EventBox* e) {
  if (!state().channels.count(c)) {  // destroyed: the event has nowhere to go
    delete e;
    return false;
  }
  c->queue.push_back(e);
  if (c->queue.size() == 1) wake(c);
  return true;
}

Channel* channel_of(rdma_cm_id* id) { return reinterpret_cast<Channel*>(id->channel); }

// A new channel, registered. Under the state's mutex. nullptr and errno set
// if the pipe cannot be made.
Channel* open_channel(State& s) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  // The CM thread writes wake-ups under the library's mutex: never blocking.
  if (fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    errno = err;
    return nullptr;
  }
  auto* c = new Channel();
  c->ch.fd = fds[0];
  c->write_fd = fds[1];
  s.channels.insert(c);
  return c;
}

// Destroys `c` and its unread events. Under the state's mutex.
void close_channel(State& s, Channel* c) {
  if (s.channels.erase(c) == 0) return;  // not a channel (any more)
  for (EventBox* e : c->queue) {
    if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) reinterpret_cast<Id*>(e->ev.id)->request_queued = false;
    delete e;
  }
  c->queue.clear();
  close(c->ch.fd);
  if (c->readers.load() != 0) {
    // A thread still waits in rdma_get_cm_event (rping's event thread
    // while its main thread tears down): as with the kernel's channel, it
    // goes on waiting, never woken with an error. So the write end stays
    // open (closing it would end the wait with EOF) and the channel with it.
    return;
  }
  close(c->write_fd);
  delete c;
}

// `id` is bound to the device: it holds the default PD (rdma-core's
// ucma_get_device). Under the state's mutex. 0 or an errno.
int take_device(State& s, Id* id) {
  if (id->holds_device) return 0;
  if (s.default_pd == nullptr) s.default_pd = ibv_alloc_pd(s.verbs);
  if (s.default_pd == nullptr) return ENOMEM;
  ++s.pd_refs;
  id->holds_device = true;
  id->cm.verbs = s.verbs;
  id->cm.pd = s.default_pd;
  return 0;
}

// The last ID bound to the device frees the default PD; one still in use
// (a QP or MR the program kept) stays for the next ID. Under the mutex.
void put_device(State& s, Id* id) {
  if (!id->holds_device) return;
  id->holds_device = false;
  if (--s.pd_refs == 0 && ibv_dealloc_pd(s.default_pd) == 0) s.default_pd = nullptr;
}

EventBox* make_event(Id* id, rdma_cm_event_type type, int status) {
  auto* e = new EventBox();
  e->ev.id = &id->cm;
  e->ev.event = type;
  e->ev.status = status;
  return e;
}

void set_conn_data(EventBox* e, const std::vector<std::uint8_t>& data) {
  e->data = data;
  e->ev.param.conn.private_data = e->data.empty() ? nullptr : e->data.data();
  e->ev.param.conn.private_data_len = static_cast<std::uint8_t>(std::min<std::size_t>(e->data.size(), 255));
}

// The same for a UD ID's events (rdma_ud_param).
void set_ud_data(EventBox* e, const std::vector<std::uint8_t>& data) {
  e->data = data;
  e->ev.param.ud.private_data = e->data.empty() ? nullptr : e->data.data();
  e->ev.param.ud.private_data_len = static_cast<std::uint8_t>(std::min<std::size_t>(e->data.size(), 255));
}

// What a SIDR request of ours came to (the kernel's cma_sidr_rep_handler):
// ESTABLISHED with the peer's UD QP, its Q_Key and an address handle's
// attributes to reach it; UNREACHABLE with the SIDR_REP's status, or
// -ETIMEDOUT when none came. An ID has nothing more of it: no DISCONNECTED
// follows. Under the state's mutex.
void deliver_sidr(State& s, const cm::Event& e, std::map<std::uint32_t, Id*>::iterator it, Id* id) {
  s.by_comm.erase(it);
  id->comm_id = 0;
  EventBox* box = nullptr;
  if (e.type == cm::EventType::kEstablished) {
    if (id->cm.ps == RDMA_PS_UDP && e.rep.local_qkey != wire::kRdmaUdpQkey) {
      // A Q_Key other than the port space's: our QP could not take its
      // datagrams (the kernel refuses it the same way).
      box = make_event(id, RDMA_CM_EVENT_ADDR_ERROR, -EINVAL);
    } else {
      box = make_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
      set_ud_data(box, e.private_data);
      rdma_ud_param& u = box->ev.param.ud;
      u.ah_attr.is_global = 1;
      u.ah_attr.port_num = 1;
      u.ah_attr.grh.dgid = e.peer_gid;
      u.ah_attr.grh.sgid_index = is_ipv4_gid(e.peer_gid) ? 1 : 0;
      u.ah_attr.grh.hop_limit = 64;
      u.qp_num = e.rep.local_qpn;
      u.qkey = e.rep.local_qkey;
    }
  } else if (e.type == cm::EventType::kUnreachable) {
    box = make_event(id, RDMA_CM_EVENT_UNREACHABLE, e.reason != 0 ? e.reason : -ETIMEDOUT);
    set_ud_data(box, e.private_data);
  }
  if (box != nullptr) push(channel_of(&id->cm), box);
}

sockaddr_in ipv4(const std::array<std::uint8_t, 4>& ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  std::memcpy(&a.sin_addr, ip.data(), 4);
  a.sin_port = htons(port);
  return a;
}

// QP transitions through libibverbs (the manager's hook).
int modify_through_verbs(void* arg, QueuePair* qp, ibv_qp_attr& attr, int mask) {
  auto* s = static_cast<State*>(arg);
  if (s->qps.count(qp) == 0) return ENOENT;  // destroyed (rdma_destroy_qp) before its connection ended
  // Found among the device's live QPs, as refresh_through_verbs below does:
  // a program may destroy the QP with ibv_destroy_qp (perftest does), and
  // then `qps` still names it. The device's mutex keeps it alive through the
  // modify, which takes that mutex only for a move to RESET, and the CM
  // never moves a QP to RESET.
  ibverbs::Ctx* x = ibverbs::ctx_of(s->verbs);
  std::lock_guard<std::mutex> lock(x->mutex);
  for (ibverbs::Qp* q : x->qps) {
    if (q->qp == qp) return ibv_modify_qp(&q->ex.qp_base, &attr, mask);
  }
  return ENOENT;  // destroyed with ibv_destroy_qp
}

// The ECE agreed, given to a QP before the manager moves it to RTR (the
// manager's hook): through ibv_set_ece, which decides its transport
// options at RTR (lib/ibverbs/ece.cc). Found as modify_through_verbs finds it.
int ece_through_verbs(void* arg, QueuePair* qp, std::uint32_t vendor_id, std::uint32_t options) {
  auto* s = static_cast<State*>(arg);
  if (s->qps.count(qp) == 0) return ENOENT;
  ibverbs::Ctx* x = ibverbs::ctx_of(s->verbs);
  std::lock_guard<std::mutex> lock(x->mutex);
  for (ibverbs::Qp* q : x->qps) {
    if (q->qp != qp) continue;
    ibv_ece ece{vendor_id, options, 0};
    return ibv_set_ece(&q->ex.qp_base, &ece);
  }
  return ENOENT;
}

// The library's view of a QP that uroced's CM moved (ServiceCm's hook):
// ibv_query_qp brings libibverbs's and the QP's own state up to date. Found
// among the device's live QPs, not in `qps`: a program may destroy a QP with
// ibv_destroy_qp (perftest does) while its connection still reports events;
// the device's mutex keeps it alive through the query.
void refresh_through_verbs(void* arg, QueuePair* qp) {
  ibverbs::Ctx* x = ibverbs::ctx_of(static_cast<State*>(arg)->verbs);
  std::lock_guard<std::mutex> lock(x->mutex);
  for (ibverbs::Qp* q : x->qps) {
    if (q->qp != qp) continue;
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ibv_query_qp(&q->ex.qp_base, &attr, IBV_QP_STATE, &init);
    return;
  }
}

// Takes a request's still-queued CONNECT_REQUEST out of its channel and
// frees the request's ID. Under the state's mutex.
void withdraw_request(State& s, Id* id) {
  Channel* c = id->request_channel;
  if (id->request_queued) {
    delete *id->request_event;
    c->queue.erase(id->request_event);
    if (c->queue.empty()) drain(c);
    id->request_queued = false;
  }
  s.by_comm.erase(id->comm_id);
  s.ids.erase(id);
  put_device(s, id);
  if (id->sync) close_channel(s, channel_of(&id->cm));
  delete id;
}

// The events of `id` still queued, unread, as it is destroyed go with it
// (as the kernel's rdma_ucm drops a destroyed ID's unread events): read
// later they would name freed memory. A listener's unread connection
// requests are refused and their IDs freed. Events the program has read
// are its own to ack (rdma_destroy_id's contract). Under the state's mutex.
void forget_unread_events(State& s, Id* id) {
  Channel* c = channel_of(&id->cm);
  if (c == nullptr) return;
  for (auto it = c->queue.begin(); it != c->queue.end();) {
    EventBox* box = *it;
    if (box->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && box->ev.listen_id == &id->cm) {
      Id* request = reinterpret_cast<Id*>(box->ev.id);
      ++it;  // withdraw_request erases the request's own event
      s.manager->reject(request->comm_id, {});
      withdraw_request(s, request);
      continue;
    }
    if (box->ev.id == &id->cm) {
      delete box;
      it = c->queue.erase(it);
      continue;
    }
    ++it;
  }
  if (c->queue.empty()) drain(c);
}

// What the manager reported, as rdma_cm events. Under the state's mutex.
void deliver(State& s, cm::Event& e) {
  if (e.type == cm::EventType::kRequest) {
    auto* listener = static_cast<Id*>(e.listener);
    auto* id = new Id();
    id->cm = listener->cm;  // channel, context, port space, verbs
    id->cm.qp = nullptr;
    id->cm.event = nullptr;
    id->cm.pd = nullptr;
    id->cm.send_cq = id->cm.recv_cq = nullptr;
    id->cm.send_cq_channel = id->cm.recv_cq_channel = nullptr;
    id->cm.srq = nullptr;
    id->listening = false;
    id->comm_id = e.comm_id;
    id->port = listener->port;
    id->cm.qp_type = e.sidr ? IBV_QPT_UD : IBV_QPT_RC;
    id->remote_ece = ibv_ece{e.ece_vendor_id, e.ece_options, 0};
    std::array<std::uint8_t, 4> peer{};
    std::memcpy(peer.data(), e.peer_gid.raw + 12, 4);
    std::uint16_t peer_port = 0;
    if (auto h = wire::decode_rdma_cm_header(e.req.private_data)) peer_port = h->src_port;
    const sockaddr_in src = ipv4(s.ip, id->port);
    const sockaddr_in dst = ipv4(peer, peer_port);
    std::memcpy(&id->cm.route.addr.src_addr, &src, sizeof src);
    std::memcpy(&id->cm.route.addr.dst_addr, &dst, sizeof dst);
    Channel* channel = channel_of(&listener->cm);
    // A synchronous listener's requests are synchronous IDs, each on a
    // channel of its own (rdma-core migrates them to a new one); the
    // request itself is read from the listener's channel.
    if (listener->sync) {
      Channel* own = open_channel(s);
      if (own == nullptr || take_device(s, id) != 0) {
        if (own != nullptr) close_channel(s, own);
        s.manager->reject(e.comm_id, {});
        delete id;
        return;
      }
      id->cm.channel = &own->ch;
      id->sync = true;
    } else if (take_device(s, id) != 0) {
      s.manager->reject(e.comm_id, {});
      delete id;
      return;
    }
    s.by_comm[e.comm_id] = id;
    s.ids.insert(id);
    EventBox* box = make_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    box->ev.listen_id = &listener->cm;
    if (e.sidr) {
      // A SIDR_REQ: param.ud with its private data (rdma_cm's header
      // skipped), as the kernel's rdma_cm reports it; no AH, no QPN.
      set_ud_data(box, e.private_data);
      if (push(channel, box)) {
        id->request_queued = true;
        id->request_event = std::prev(channel->queue.end());
        id->request_channel = channel;
      }
      return;
    }
    set_conn_data(box, e.private_data);
    rdma_conn_param& c = box->ev.param.conn;
    // In the receiver's terms, as Linux's CM reports a REQ (cm_format_req_event):
    // what the requester will read from us is what we must take as
    // responder, and the reads it takes are what we may issue.
    c.responder_resources = e.req.initiator_depth;
    c.initiator_depth = e.req.responder_resources;
    c.flow_control = e.req.end_to_end_flow_control;
    c.retry_count = e.req.retry_count;
    c.rnr_retry_count = e.req.rnr_retry_count;
    c.srq = e.req.srq;
    c.qp_num = e.req.local_qpn;
    if (push(channel, box)) {
      id->request_queued = true;
      id->request_event = std::prev(channel->queue.end());
      id->request_channel = channel;
    }
    return;
  }
  auto it = s.by_comm.find(e.comm_id);
  if (it == s.by_comm.end()) return;  // its ID was destroyed meanwhile
  Id* id = it->second;
  if (id->request_queued) {
    // A request the program has not seen yet ends (timed out unanswered,
    // withdrawn by the peer): it never learns of it, as with a connection
    // the kernel refused before accept(2).
    withdraw_request(s, id);
    return;
  }
  if (e.sidr) {
    deliver_sidr(s, e, it, id);
    return;
  }
  EventBox* box = nullptr;
  switch (e.type) {
    case cm::EventType::kEstablished:
    case cm::EventType::kConnectResponse:
      // kConnectResponse: an ID with no QP (rdma_connect with qp_num): the
      // program moves its own QP, then rdma_establish sends the RTU, and no
      // ESTABLISHED follows on this side (rdma-core's ucma the same).
      id->connected = e.type == cm::EventType::kEstablished;
      box = make_event(id, id->connected ? RDMA_CM_EVENT_ESTABLISHED : RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
      set_conn_data(box, e.private_data);
      if (e.active) {
        // The REP in the receiver's terms, as Linux's CM reports it
        // (cm_format_rep_event): swapped as for a REQ.
        rdma_conn_param& c = box->ev.param.conn;
        c.responder_resources = e.rep.initiator_depth;
        c.initiator_depth = e.rep.responder_resources;
        c.flow_control = e.rep.end_to_end_flow_control;
        c.rnr_retry_count = e.rep.rnr_retry_count;
        c.srq = e.rep.srq;
        c.qp_num = e.rep.local_qpn;
        id->remote_ece = ibv_ece{e.ece_vendor_id, e.ece_options, 0};
        if (id->cm.qp != nullptr) uroce::rdmacm::record_agreed_ece(id->cm.qp, id->remote_ece);
      }
      break;
    case cm::EventType::kRejected:
      // The IB reject reason, as the kernel's rdma_cm reports it.
      box = make_event(id, RDMA_CM_EVENT_REJECTED, e.reason);
      set_conn_data(box, e.private_data);
      s.by_comm.erase(it);
      break;
    case cm::EventType::kUnreachable:
      box = make_event(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      s.by_comm.erase(it);
      if (!e.why.empty() && (debug() || counters_wanted())) {
        std::fprintf(stderr, "uroce librdmacm: RDMA_CM_EVENT_UNREACHABLE: %s\n", e.why.c_str());
      }
      break;
    case cm::EventType::kDisconnected:
      id->connected = false;
      box = make_event(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      s.by_comm.erase(it);
      break;
    case cm::EventType::kRequest:
      break;
  }
  if (box != nullptr) push(channel_of(&id->cm), box);
}

void run(State& s) {
  std::vector<cm::Event> events;
  while (!s.stop.load()) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      events.clear();
      s.manager->poll(events);
      for (cm::Event& e : events) deliver(s, e);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Opens the device and the manager, at the first call and again at the
// first call after release_if_unused. Under the mutex. 0 or an errno.
int init(State& s) {
  if (s.initialised) return s.manager ? 0 : s.init_error;
  s.initialised = true;
  s.init_error = ENODEV;
  if (s.verbs == nullptr) {  // else kept open by the last round (verbs_handed_out)
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n == 0) {
      if (ibverbs::in_forked_child_of_in_process()) {
        // ibverbs has said why, once.
        s.error = "a forked child cannot use its parent's in-process device: run the program through uroced";
      } else {
        s.error = "no uroce device: set UROCE_EAL and UROCE_IP (or run under uroce-run)";
        std::fprintf(stderr, "uroce librdmacm: %s\n", s.error.c_str());
      }
      if (list != nullptr) ibv_free_device_list(list);
      return ENODEV;
    }
    s.verbs = ibv_open_device(list[0]);
    ibv_free_device_list(list);
  }
  ibverbs::Ctx* x = s.verbs != nullptr ? ibverbs::ctx_of(s.verbs) : nullptr;
  if (x == nullptr) return ENODEV;
  ibv_gid g{};
  if (x->ctx->query_gid(1, g) != 0) return ENODEV;
  std::memcpy(s.ip.data(), g.raw + 12, 4);
  if (x->ctx->attached()) {
    // QP1 and the QPs are the daemon's: its CM connects them (cm_relay.h),
    // through a connection of our own to it.
    const char* socket = std::getenv("UROCE_SERVICE");
    auto cm = ServiceCm::open(socket != nullptr && *socket != '\0' ? socket : "/run/uroce/uroced.sock", s.error);
    if (!cm) {
      std::fprintf(stderr, "uroce librdmacm: %s\n", s.error.c_str());
      return ENODEV;
    }
    cm->set_refresh(refresh_through_verbs, &s);
    s.manager = std::move(cm);
    // The daemon's port space is every client's (a parent and its forked
    // children among them): each process starts its own ports (those bound
    // as 0) at a point of its own, 32 apart for neighbouring pids, so two
    // processes' first listeners do not take the same service ID.
    s.next_port = static_cast<std::uint16_t>(40000 + (getpid() % 512) * 32);
  } else {
    auto manager = cm::Manager::open(*x->ctx, s.error);
    if (!manager) {
      std::fprintf(stderr, "uroce librdmacm: %s\n", s.error.c_str());
      return ENODEV;
    }
    manager->set_modify(modify_through_verbs, &s);
    manager->set_ece(ece_through_verbs, &s);
    s.manager = std::move(manager);
  }
  s.thread = std::thread([&s] { run(s); });
  // Named, so that a test (or an operator with top -H) sees the CM is up:
  // the program's listen comes a moment later (test/support/uroce_ready.h).
  // Joined by release_if_unused.
  pthread_setname_np(s.thread.native_handle(), "uroce-cm");
  return 0;
}

// init, once a teardown under way (release_if_unused) has ended. `lock`
// holds the mutex.
int start_cm(State& s, std::unique_lock<std::mutex>& lock) {
  s.torn_down.wait(lock, [&s] { return !s.tearing_down; });
  return init(s);
}

// The program is done with rdma_cm: no ID and no event channel left. The
// CM thread stops and is joined, the manager goes (QP1; through uroced, this
// process's CM connection to it), the default PD is freed and the device
// context closed, so an application that owns EAL can close uroce (its last
// ibv_close_device) before rte_eal_cleanup (docs/embedding.md). The next
// call that needs them starts afresh (init). The context stays open if
// rdma_get_devices handed it out (the program may hold it) or a QP or MR
// of the program's still uses the default PD. `lock` holds the mutex, and
// holds it again on return.
void release_if_unused(State& s, std::unique_lock<std::mutex>& lock) {
  if (!s.manager || s.tearing_down || !s.ids.empty() || !s.channels.empty()) return;
  s.tearing_down = true;
  s.stop.store(true);
  // Out of the mutex: the thread's loop takes it. No call reaches the
  // manager meanwhile (every one names an ID or a channel, and none is
  // left; qp_destroyed and start_cm look at tearing_down).
  lock.unlock();
  if (s.thread.joinable()) s.thread.join();
  s.manager.reset();
  lock.lock();
  if (s.default_pd != nullptr && s.pd_refs == 0 && ibv_dealloc_pd(s.default_pd) == 0) s.default_pd = nullptr;
  ibv_context* verbs = s.default_pd == nullptr && !s.verbs_handed_out ? s.verbs : nullptr;
  if (verbs != nullptr) {
    s.verbs = nullptr;
    s.have_depths = false;
  }
  s.by_comm.clear();
  s.listeners.clear();
  s.qps.clear();
  s.error.clear();
  s.init_error = 0;
  s.initialised = false;
  s.stop.store(false);
  if (verbs != nullptr) {
    lock.unlock();
    ibv_close_device(verbs);  // the last one takes the device down (joined EAL, a removable vdev)
    lock.lock();
  }
  s.tearing_down = false;
  s.torn_down.notify_all();
}

// ibv_destroy_qp's hook (set_qp_destroy_hook): a QP the program destroys
// itself, not with rdma_destroy_qp (perftest does), is forgotten by the CM,
// so no later event of its connection (a DREQ, a timer) moves it. Takes the
// mutex: the CM thread is not inside a modify of it meanwhile.
void qp_destroyed(QueuePair* qp) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.qps.erase(qp);
  if (s.manager && !s.tearing_down) s.manager->forget_qp(qp);
}

}  // namespace

bool debug() {
  static const bool on = std::getenv("UROCE_RDMACM_DEBUG") != nullptr;
  return on;
}

bool counters_wanted() {
  static const bool on = [] {
    const char* v = std::getenv("UROCE_COUNTERS");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

int fail_in(const char* where, int err) {
  if (debug()) std::fprintf(stderr, "uroce librdmacm: %s: %s\n", where, std::strerror(err));
  errno = err;
  return -1;
}

namespace {

Id* id_of(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }

// `a` as an IPv4 address: an AF_INET one, or an IPv4 address that came as
// IPv6 (v4-mapped ::ffff:a.b.c.d, as getaddrinfo may give for an IPv4
// literal; and :: for "any", which Linux's rdma_cm binds for both
// families), as rdma-core's librdmacm accepts them. False for anything else.
bool as_ipv4(const sockaddr* a, sockaddr_in& out) {
  if (a == nullptr) return false;
  out = sockaddr_in{};
  out.sin_family = AF_INET;
  if (a->sa_family == AF_INET) {
    std::memcpy(&out, a, sizeof out);
    return true;
  }
  if (a->sa_family != AF_INET6) return false;
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
  out.sin_port = in6->sin6_port;
  if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) return true;  // INADDR_ANY
  if (!IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return false;
  std::memcpy(&out.sin_addr, in6->sin6_addr.s6_addr + 12, 4);
  return true;
}

bool ours(const sockaddr_in& in, const State& s) {
  return in.sin_addr.s_addr == INADDR_ANY || std::memcmp(&in.sin_addr, s.ip.data(), 4) == 0;
}

bool loopback(const sockaddr_in& in) { return (ntohl(in.sin_addr.s_addr) >> 24) == 127; }

// rdma_conn_param's RDMA READ depths as rdma-core's librdmacm takes them
// (ucma_valid_param): RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH ask for the
// device's maximum (libfabric's verbs provider passes them), a figure
// beyond it is refused. Under the mutex. 0 or EINVAL.
int read_depths(State& s, const rdma_conn_param& c, std::uint8_t& responder, std::uint8_t& initiator) {
  if (!s.have_depths) {
    ibv_device_attr a{};
    if (ibv_query_device(s.verbs, &a) != 0) return EINVAL;
    s.max_responder = static_cast<std::uint8_t>(std::min(a.max_qp_rd_atom, 255));
    s.max_initiator = static_cast<std::uint8_t>(std::min(a.max_qp_init_rd_atom, 255));
    s.have_depths = true;
  }
  responder = c.responder_resources == RDMA_MAX_RESP_RES ? s.max_responder : c.responder_resources;
  initiator = c.initiator_depth == RDMA_MAX_INIT_DEPTH ? s.max_initiator : c.initiator_depth;
  if (responder > s.max_responder || initiator > s.max_initiator) {
    std::fprintf(stderr,
                 "uroce librdmacm: responder_resources %u or initiator_depth %u beyond the device's %u and %u\n",
                 c.responder_resources, c.initiator_depth, s.max_responder, s.max_initiator);
    return EINVAL;
  }
  return 0;
}

// rdma-core's ucma_complete: a synchronous ID waits on its own channel for
// the event the call started and keeps it in id->event (acknowledged by
// its next call or rdma_destroy_id); a failed one is the call's error.
int complete(rdma_cm_id* id, bool sync) {
  if (!sync) return 0;
  if (id->event != nullptr) {
    rdma_ack_cm_event(id->event);
    id->event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(id->channel, &e) != 0) return -1;
  id->event = e;
  if (e->status == 0) return 0;
  errno = e->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : (e->status < 0 ? -e->status : e->status);
  return -1;
}

}  // namespace

bool is_synchronous(rdma_cm_id* id) {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().ids.count(id_of(id)) != 0 && id_of(id)->sync;
}

void keep_qp_attr(rdma_cm_id* id, const ibv_qp_init_attr& attr) {
  std::lock_guard<std::mutex> lock(state().mutex);
  id_of(id)->has_ep_qp_attr = true;
  id_of(id)->ep_qp_attr = attr;
}

bool kept_qp_attr(rdma_cm_id* id, ibv_qp_init_attr& attr) {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (!id_of(id)->has_ep_qp_attr) return false;
  attr = id_of(id)->ep_qp_attr;
  return true;
}

void keep_connect_data(rdma_cm_id* id, const void* data, std::size_t len) {
  std::lock_guard<std::mutex> lock(state().mutex);
  const auto* d = static_cast<const std::uint8_t*>(data);
  id_of(id)->connect_data.assign(d, d + len);
}

}  // namespace uroce::rdmacm

using uroce::rdmacm::Channel;
using uroce::rdmacm::EventBox;
using uroce::rdmacm::Id;
using uroce::rdmacm::fail_in;
using uroce::rdmacm::id_of;
using uroce::rdmacm::state;

extern "C" {

rdma_event_channel* rdma_create_event_channel(void) {
  auto& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  if (const int rc = uroce::rdmacm::start_cm(s, lock); rc != 0) {
    errno = rc;
    return nullptr;
  }
  Channel* c = uroce::rdmacm::open_channel(s);
  if (c == nullptr) {
    const int err = errno;
    uroce::rdmacm::release_if_unused(s, lock);
    errno = err;
    return nullptr;
  }
  return &c->ch;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel == nullptr) return;
  auto& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  uroce::rdmacm::close_channel(s, reinterpret_cast<Channel*>(channel));
  uroce::rdmacm::release_if_unused(s, lock);
}

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
  auto& s = state();
  if (id == nullptr) return fail(EINVAL);
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_IB && ps != RDMA_PS_UDP) {
    std::fprintf(stderr, "uroce librdmacm: only RDMA_PS_TCP, RDMA_PS_IB (RC) and RDMA_PS_UDP (UD) are supported\n");
    return fail(EPROTONOSUPPORT);
  }
  std::unique_lock<std::mutex> lock(s.mutex);
  if (const int rc = uroce::rdmacm::start_cm(s, lock); rc != 0) return fail(rc);
  // No channel: a synchronous ID, with a channel of its own.
  const bool sync = channel == nullptr;
  if (sync) {
    Channel* own = uroce::rdmacm::open_channel(s);
    if (own == nullptr) {
      const int err = errno;
      uroce::rdmacm::release_if_unused(s, lock);
      return fail(err);
    }
    channel = &own->ch;
  }
  if (!s.channels.count(reinterpret_cast<Channel*>(channel))) {
    uroce::rdmacm::release_if_unused(s, lock);  // started by this call for a channel that is not one
    return fail(EBADF);
  }
  auto* i = new Id();
  i->sync = sync;
  s.ids.insert(i);
  // id->verbs stays NULL until the ID is bound to the device, as rdma-core's.
  i->cm.channel = channel;
  i->cm.context = context;
  i->cm.ps = ps;
  i->cm.port_num = 1;
  i->cm.qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
  *id = &i->cm;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return fail(EINVAL);
  auto& s = state();
  Id* i = id_of(id);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.ids.count(i)) return fail(EINVAL);
  }
  // The event a synchronous call kept: acknowledged here, as rdma-core does.
  if (id->event != nullptr) {
    rdma_ack_cm_event(id->event);
    id->event = nullptr;
  }
  std::unique_lock<std::mutex> lock(s.mutex);
  // Every event reported for the ID must be acknowledged first (rdma-core's
  // rdma_destroy_id waits the same way): a program's event thread may still
  // be handling one, and after this returns no event of the ID reaches it.
  // rping's client relies on it: its main thread destroys the ID, then the
  // channel, while the event thread goes back to rdma_get_cm_event after
  // acknowledging the DISCONNECTED; without the wait the channel can be gone
  // by then (EBADF, rping exits 255).
  s.acked.wait(lock, [&] { return !s.ids.count(i) || i->events_acked == i->events_reported; });
  if (s.ids.erase(i) == 0) return fail(EINVAL);
  if (i->listening) {
    s.manager->unlisten(uroce::wire::rdma_cm_service_id(static_cast<std::uint16_t>(id->ps), i->port));
    s.listeners.erase(i->port);
  }
  if (i->comm_id != 0) {
    if (i->connected) s.manager->disconnect(i->comm_id);
    // A request neither accepted nor rejected: refused now (REJ), not left
    // to time out holding a place in the listener's backlog.
    if (!i->connected) s.manager->reject(i->comm_id, {});
    s.by_comm.erase(i->comm_id);
  }
  forget_unread_events(s, i);
  uroce::rdmacm::put_device(s, i);
  if (i->sync) uroce::rdmacm::close_channel(s, uroce::rdmacm::channel_of(id));
  delete i;
  uroce::rdmacm::release_if_unused(s, lock);
  return 0;
}

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  auto& s = state();
  if (id == nullptr || addr == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  sockaddr_in in{};
  const bool loopback = uroce::rdmacm::as_ipv4(addr, in) && uroce::rdmacm::loopback(in);
  if (!loopback && (!uroce::rdmacm::as_ipv4(addr, in) || !uroce::rdmacm::ours(in, s))) {
    // For an IPv4 address, once per process: libfabric's verbs provider
    // tries every address of every kernel interface (IPv6 ones included)
    // to find the one that is a device's.
    static bool said = false;
    if (!said && addr->sa_family == AF_INET) {
      std::fprintf(stderr, "uroce librdmacm: rdma_bind_addr: not this device's address (IPv4 %u.%u.%u.%u, or any)\n",
                   s.ip[0], s.ip[1], s.ip[2], s.ip[3]);
      said = true;
    }
    return fail(EADDRNOTAVAIL);
  }
  Id* i = id_of(id);
  i->port = ntohs(in.sin_port);
  if (i->port == 0) i->port = s.next_port++;
  if (loopback) {
    // A loopback address binds, to no device, as with the kernel's rdma_cm
    // (id->verbs stays NULL): libfabric's verbs provider binds "localhost"
    // and, finding no device, offers the devices' own addresses instead.
    // Listening there listens on the device (its only address).
    in.sin_port = htons(i->port);
    std::memcpy(&id->route.addr.src_addr, &in, sizeof in);
    return 0;
  }
  if (const int rc = uroce::rdmacm::take_device(s, i); rc != 0) return fail(rc);
  const sockaddr_in src = uroce::rdmacm::ipv4(s.ip, i->port);
  std::memcpy(&id->route.addr.src_addr, &src, sizeof src);
  return 0;
}

int rdma_listen(rdma_cm_id* id, int backlog) {
  auto& s = state();
  if (id == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  Id* i = id_of(id);
  if (i->port == 0) i->port = s.next_port++;
  // As Linux's ucma: 0, a negative backlog or one over the maximum is the maximum.
  const auto b = backlog > 0 ? static_cast<std::uint32_t>(backlog) : 0u;
  const int rc = s.manager->listen(uroce::wire::rdma_cm_service_id(static_cast<std::uint16_t>(id->ps), i->port), i, b);
  if (rc != 0) return fail(rc);
  i->listening = true;
  s.listeners[i->port] = i;
  // Scripts wait for this line before they start a peer's client
  // (tools/interop-rxe-verbs.sh): a REQ before it is refused.
  if (uroce::rdmacm::debug()) std::fprintf(stderr, "uroce librdmacm: rdma_listen: listening on port %u\n", i->port);
  return 0;
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int /*timeout_ms*/) {
  auto& s = state();
  if (id == nullptr || dst_addr == nullptr) return fail(EINVAL);
  sockaddr_in dst{};
  if (!uroce::rdmacm::as_ipv4(dst_addr, dst) || dst.sin_addr.s_addr == INADDR_ANY) {
    std::fprintf(stderr, "uroce librdmacm: rdma_resolve_addr: IPv4 destinations only\n");
    return fail(EAFNOSUPPORT);
  }
  bool sync = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
    Id* i = id_of(id);
    sockaddr_in src_in{};
    if (src_addr != nullptr && (!uroce::rdmacm::as_ipv4(src_addr, src_in) || !uroce::rdmacm::ours(src_in, s))) {
      return fail(EADDRNOTAVAIL);
    }
    if (const int rc = uroce::rdmacm::take_device(s, i); rc != 0) return fail(rc);
    if (i->port == 0) i->port = src_addr != nullptr && src_in.sin_port != 0 ? ntohs(src_in.sin_port) : s.next_port++;
    const sockaddr_in src = uroce::rdmacm::ipv4(s.ip, i->port);
    std::memcpy(&id->route.addr.src_addr, &src, sizeof src);
    std::memcpy(&id->route.addr.dst_addr, &dst, sizeof dst);
    // The neighbour is resolved when the first MAD leaves (the stack's ARP).
    uroce::rdmacm::push(uroce::rdmacm::channel_of(id), uroce::rdmacm::make_event(i, RDMA_CM_EVENT_ADDR_RESOLVED, 0));
    sync = i->sync;
  }
  return uroce::rdmacm::complete(id, sync);
}

int rdma_resolve_route(rdma_cm_id* id, int /*timeout_ms*/) {
  auto& s = state();
  if (id == nullptr) return fail(EINVAL);
  bool sync = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
    // RoCE: the route is the address; one path, no SA.
    uroce::rdmacm::push(uroce::rdmacm::channel_of(id),
                        uroce::rdmacm::make_event(id_of(id), RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
    sync = id_of(id)->sync;
  }
  return uroce::rdmacm::complete(id, sync);
}

namespace uroce::rdmacm {
namespace {

// A UD ID's QP is ready at once, as rdma-core's librdmacm makes it
// (ucma_init_ud_qp): INIT with the port space's Q_Key, RTR, RTS. No peer
// to wait for: each datagram names its own.
int ud_qp_to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = wire::kRdmaUdpQkey;
  if (const int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return rc;
  a.qp_state = IBV_QPS_RTR;
  if (const int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE)) return rc;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

// rdma_connect of a UD ID: a SIDR_REQ with rdma_cm's header and the
// caller's private data (216 bytes in all). Under the state's mutex.
int sidr_connect(State& s, Id* i, const rdma_conn_param* conn_param) {
  const auto* dst = reinterpret_cast<const sockaddr_in*>(&i->cm.route.addr.dst_addr);
  cm::SidrParams p;
  std::array<std::uint8_t, 4> peer{};
  std::memcpy(peer.data(), &dst->sin_addr, 4);
  p.remote_gid = ipv4_gid(peer);
  p.service_id = wire::rdma_cm_service_id(static_cast<std::uint16_t>(i->cm.ps), ntohs(dst->sin_port));
  wire::RdmaCmHeader h;
  h.src_port = i->port;
  std::memcpy(h.src_addr.data() + 12, s.ip.data(), 4);
  std::memcpy(h.dst_addr.data() + 12, peer.data(), 4);
  p.private_data.assign(wire::kRdmaCmHeaderBytes, 0);
  wire::encode_rdma_cm_header(h, p.private_data);
  p.private_data.insert(p.private_data.end(), i->connect_data.begin(), i->connect_data.end());
  if (conn_param != nullptr && conn_param->private_data != nullptr) {
    const auto* d = static_cast<const std::uint8_t*>(conn_param->private_data);
    p.private_data.insert(p.private_data.end(), d, d + conn_param->private_data_len);
  }
  if (p.private_data.size() > wire::kSidrReqPrivateBytes) {
    std::fprintf(stderr, "uroce librdmacm: rdma_connect: a UD ID's private data is at most %zu bytes\n",
                 wire::kSidrReqPrivateBytes - wire::kRdmaCmHeaderBytes);
    return EINVAL;
  }
  std::uint32_t request = 0;
  if (const int rc = s.manager->sidr_request(p, request); rc != 0) return rc;
  i->comm_id = request;
  i->connect_data.clear();
  s.by_comm[request] = i;
  return 0;
}

}  // namespace
}  // namespace uroce::rdmacm

namespace {

// The CQs rdma_create_qp makes when the caller gives none, each with a
// completion channel and the ID as its context (rdma_get_send_comp and
// rdma_get_recv_comp wait on them), as rdma-core's librdmacm makes them.
// Only CQs made here are in id->send_cq and id->recv_cq; rdma_destroy_qp
// destroys them.
void destroy_cqs(rdma_cm_id* id) {
  if (id->recv_cq != nullptr) {
    ibv_destroy_cq(id->recv_cq);
    if (id->send_cq != nullptr && id->send_cq != id->recv_cq) ibv_destroy_cq(id->send_cq);
  } else if (id->send_cq != nullptr) {
    ibv_destroy_cq(id->send_cq);
  }
  id->recv_cq = id->send_cq = nullptr;
  if (id->recv_cq_channel != nullptr) ibv_destroy_comp_channel(id->recv_cq_channel);
  if (id->send_cq_channel != nullptr && id->send_cq_channel != id->recv_cq_channel) {
    ibv_destroy_comp_channel(id->send_cq_channel);
  }
  id->recv_cq_channel = id->send_cq_channel = nullptr;
}

ibv_cq* create_cq(rdma_cm_id* id, std::uint32_t size, ibv_comp_channel** channel) {
  *channel = ibv_create_comp_channel(id->verbs);
  if (*channel == nullptr) return nullptr;
  return ibv_create_cq(id->verbs, static_cast<int>(std::max<std::uint32_t>(size, 1)), id, *channel, 0);
}

}  // namespace

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  // An ID's QP is of its port space's type: RC, or UD for RDMA_PS_UDP.
  if (attr->qp_type != id->qp_type || (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UD)) {
    std::fprintf(stderr, "uroce librdmacm: rdma_create_qp: %s QPs only on this ID (its port space's)\n",
                 id->qp_type == IBV_QPT_UD ? "UD" : "RC");
    return fail(EOPNOTSUPP);
  }
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
    if (id->qp != nullptr) return fail(EINVAL);
    // An ID not bound yet binds now (there is one device): its verbs
    // context for the CQs, its default PD if none is given.
    if (const int rc = uroce::rdmacm::take_device(s, id_of(id)); rc != 0) return fail(rc);
  }
  if (pd == nullptr) pd = id->pd;
  if ((id->send_cq != nullptr && attr->send_cq != nullptr && attr->send_cq != id->send_cq) ||
      (id->recv_cq != nullptr && attr->recv_cq != nullptr && attr->recv_cq != id->recv_cq)) {
    return fail(EINVAL);
  }
  if (attr->recv_cq == nullptr && id->recv_cq == nullptr) {
    id->recv_cq = create_cq(id, attr->cap.max_recv_wr, &id->recv_cq_channel);
    if (id->recv_cq == nullptr) {
      destroy_cqs(id);
      return fail(ENOMEM);
    }
  }
  if (attr->send_cq == nullptr && id->send_cq == nullptr) {
    id->send_cq = create_cq(id, attr->cap.max_send_wr, &id->send_cq_channel);
    if (id->send_cq == nullptr) {
      destroy_cqs(id);
      return fail(ENOMEM);
    }
  }
  if (attr->send_cq == nullptr) attr->send_cq = id->send_cq;
  if (attr->recv_cq == nullptr) attr->recv_cq = id->recv_cq;
  if (attr->srq == nullptr) attr->srq = id->srq;
  // Inline room of at least one SGE per send SGE, as Soft-RoCE sizes its
  // send queue entries: code written to it (rdma_xclient) sends 16 bytes
  // inline from a QP that asked for no inline data. Without room for that
  // on this device, the caller's figure.
  const std::uint32_t asked_inline = attr->cap.max_inline_data;
  attr->cap.max_inline_data = std::max<std::uint32_t>(
      asked_inline, std::min<std::uint32_t>(attr->cap.max_send_sge, 16) * sizeof(ibv_sge));
  ibv_qp* qp = ibv_create_qp(pd, attr);
  if (qp == nullptr && attr->cap.max_inline_data != asked_inline) {
    attr->cap.max_inline_data = asked_inline;
    qp = ibv_create_qp(pd, attr);
  }
  if (qp == nullptr) {
    const int err = errno;
    destroy_cqs(id);
    return fail(err != 0 ? err : ENOMEM);
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC;
  const int rc = attr->qp_type == IBV_QPT_UD
                     ? uroce::rdmacm::ud_qp_to_rts(qp)
                     : ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) {
    ibv_destroy_qp(qp);
    destroy_cqs(id);
    return fail(rc);
  }
  uroce::ibverbs::Qp* q = uroce::ibverbs::qp_of(qp);
  // UROCE_TRANSPORT's options now, in INIT: through uroced the daemon moves
  // the QP on, never through ibv_modify_qp (which sets them before RTR).
  if (const int e = attr->qp_type == IBV_QPT_RC ? uroce::ibverbs::apply_transport(*q) : 0; e != 0) {
    ibv_destroy_qp(qp);
    destroy_cqs(id);
    return fail(e);
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.qps[q->qp] = qp;
  id->qp = qp;
  id->pd = pd;
  return 0;
}

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  if (attr == nullptr) return fail(EINVAL);
  ibv_qp_init_attr a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  const int rc = rdma_create_qp(id, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr, &a);
  if (rc == 0) {
    attr->cap = a.cap;
    attr->send_cq = a.send_cq;
    attr->recv_cq = a.recv_cq;
    attr->pd = id->pd;
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  return rc;
}

void rdma_destroy_qp(rdma_cm_id* id) {
  if (id == nullptr) return;
  auto& s = state();
  if (id->qp != nullptr) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      uroce::QueuePair* qp = uroce::ibverbs::qp_of(id->qp)->qp;
      s.qps.erase(qp);
      s.manager->forget_qp(qp);
    }
    ibv_destroy_qp(id->qp);
    id->qp = nullptr;
  }
  destroy_cqs(id);
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  auto& s = state();
  if (id != nullptr && id->qp_type == IBV_QPT_UD) {
    // SIDR: no QP of ours in the request (the answer names the peer's).
    std::unique_lock<std::mutex> lock(s.mutex);
    if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
    if (const int rc = uroce::rdmacm::sidr_connect(s, id_of(id), conn_param); rc != 0) return fail(rc);
    const bool sync = id_of(id)->sync;
    lock.unlock();
    return uroce::rdmacm::complete(id, sync);
  }
  // With no QP of the ID's, the program's own, named by conn_param->qp_num.
  if (id == nullptr || (id->qp == nullptr && (conn_param == nullptr || conn_param->qp_num == 0))) {
    std::fprintf(stderr,
                 "uroce librdmacm: rdma_connect: create the QP first (rdma_create_qp), or name yours in "
                 "conn_param->qp_num\n");
    return fail(EINVAL);
  }
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  Id* i = id_of(id);
  const auto* dst = reinterpret_cast<const sockaddr_in*>(&id->route.addr.dst_addr);
  uroce::cm::Manager::ConnectParams p;
  if (id->qp != nullptr) {
    p.qp = uroce::ibverbs::qp_of(id->qp)->qp;
  } else {
    p.qpn = conn_param->qp_num;
    p.srq = conn_param->srq != 0;
  }
  std::array<std::uint8_t, 4> peer{};
  std::memcpy(peer.data(), &dst->sin_addr, 4);
  p.remote_gid = uroce::ipv4_gid(peer);
  p.service_id = uroce::wire::rdma_cm_service_id(static_cast<std::uint16_t>(id->ps), ntohs(dst->sin_port));
  // rdma_cm's header, then the caller's private data.
  uroce::wire::RdmaCmHeader h;
  h.src_port = i->port;
  std::memcpy(h.src_addr.data() + 12, s.ip.data(), 4);
  std::memcpy(h.dst_addr.data() + 12, peer.data(), 4);
  p.private_data.assign(uroce::wire::kRdmaCmHeaderBytes, 0);
  uroce::wire::encode_rdma_cm_header(h, p.private_data);
  // rdma_addrinfo's connect data (rdma_create_ep), then the caller's.
  p.private_data.insert(p.private_data.end(), i->connect_data.begin(), i->connect_data.end());
  if (conn_param != nullptr) {
    if (p.private_data.size() + conn_param->private_data_len > 92) return fail(EINVAL);
    const auto* d = static_cast<const std::uint8_t*>(conn_param->private_data);
    if (d != nullptr) p.private_data.insert(p.private_data.end(), d, d + conn_param->private_data_len);
    if (const int rc = uroce::rdmacm::read_depths(s, *conn_param, p.responder_resources, p.initiator_depth); rc != 0) {
      return fail(rc);
    }
    p.retry_count = std::min<std::uint8_t>(conn_param->retry_count, 7);
    p.rnr_retry_count = std::min<std::uint8_t>(conn_param->rnr_retry_count, 7);
  }
  p.timeout = i->ack_timeout.value_or(uroce::rdmacm::kRoceAckTimeout);
  // ECE in the REQ: the QP's (ibv_query_ece), or rdma_set_local_ece's.
  const ibv_ece offer = uroce::rdmacm::local_ece(id->qp, i->local_ece);
  p.ece_vendor_id = offer.vendor_id;
  p.ece_options = offer.options;
  ibv_port_attr pa{};
  if (ibv_query_port(id->verbs, 1, &pa) == 0) p.mtu = pa.active_mtu;
  if (uroce::rdmacm::debug()) {
    std::fprintf(stderr, "uroce librdmacm: rdma_connect: REQ to %u.%u.%u.%u, service 0x%llx, %zu bytes of private data\n",
                 peer[0], peer[1], peer[2], peer[3], static_cast<unsigned long long>(p.service_id),
                 p.private_data.size());
  }
  std::uint32_t comm = 0;
  if (const int rc = s.manager->connect(p, comm); rc != 0) return fail(rc);
  i->comm_id = comm;
  i->connect_data.clear();
  s.by_comm[comm] = i;
  const bool sync = i->sync;
  lock.unlock();
  return uroce::rdmacm::complete(id, sync);
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  auto& s = state();
  // With no QP of the ID's, the program's own, named by conn_param->qp_num
  // and moved to RTS by the program (rdma_init_qp_attr) before this.
  if (id == nullptr || (id->qp == nullptr && (conn_param == nullptr || conn_param->qp_num == 0))) {
    std::fprintf(stderr,
                 "uroce librdmacm: rdma_accept: create the QP first (rdma_create_qp), or name yours in "
                 "conn_param->qp_num\n");
    return fail(EINVAL);
  }
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  Id* i = id_of(id);
  uroce::cm::Manager::AcceptParams p;
  if (id->qp != nullptr) {
    p.qp = uroce::ibverbs::qp_of(id->qp)->qp;
  } else {
    p.qpn = conn_param->qp_num;
    p.srq = conn_param->srq != 0;
  }
  if (id->qp_type == IBV_QPT_UD) {
    // A SIDR_REP with the QP's number and Q_Key (RDMA_UDP_QKEY, as
    // rdma_create_qp set it); nothing follows, so the ID keeps no
    // connection (rdma-core returns at once for UD too).
    if (conn_param != nullptr && conn_param->private_data != nullptr) {
      const auto* d = static_cast<const std::uint8_t*>(conn_param->private_data);
      p.private_data.assign(d, d + conn_param->private_data_len);
    }
    if (const int rc = s.manager->accept(i->comm_id, p); rc != 0) return fail(rc);
    s.by_comm.erase(i->comm_id);
    i->comm_id = 0;
    return 0;
  }
  if (conn_param != nullptr) {
    const auto* d = static_cast<const std::uint8_t*>(conn_param->private_data);
    if (d != nullptr) p.private_data.assign(d, d + conn_param->private_data_len);
    if (const int rc = uroce::rdmacm::read_depths(s, *conn_param, p.responder_resources, p.initiator_depth); rc != 0) {
      return fail(rc);
    }
    p.rnr_retry_count = std::min<std::uint8_t>(conn_param->rnr_retry_count, 7);
  }
  p.timeout = i->ack_timeout.value_or(uroce::cm::kTimeoutOfReq);
  // ECE in the REP: what the QP (or rdma_set_local_ece) agrees to of the REQ's.
  const ibv_ece answer = uroce::rdmacm::local_ece(id->qp, i->local_ece);
  p.ece_vendor_id = answer.vendor_id;
  p.ece_options = answer.options;
  if (const int rc = s.manager->accept(i->comm_id, p); rc != 0) return fail(rc);
  if (id->qp != nullptr) uroce::rdmacm::record_agreed_ece(id->qp, i->remote_ece);
  const bool sync = i->sync;
  lock.unlock();
  return uroce::rdmacm::complete(id, sync);
}

namespace {
int reject_with(rdma_cm_id* id, const void* private_data, std::uint8_t private_data_len,
                uroce::wire::RejReason reason) {
  auto& s = state();
  if (id == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  Id* i = id_of(id);
  const auto* d = static_cast<const std::uint8_t*>(private_data);
  std::vector<std::uint8_t> data;
  if (d != nullptr) data.assign(d, d + private_data_len);
  if (const int rc = s.manager->reject(i->comm_id, data, reason); rc != 0) return fail(rc);
  s.by_comm.erase(i->comm_id);
  i->comm_id = 0;
  return 0;
}
}  // namespace

int rdma_reject(rdma_cm_id* id, const void* private_data, std::uint8_t private_data_len) {
  return reject_with(id, private_data, private_data_len, uroce::wire::RejReason::kConsumerReject);
}

// A REJ "vendor option not supported" (IBTA's reason 35), as rdma-core's:
// the request's ECE options are not taken.
int rdma_reject_ece(rdma_cm_id* id, const void* private_data, std::uint8_t private_data_len) {
  return reject_with(id, private_data, private_data_len, uroce::wire::RejReason::kVendorOptionNotSupported);
}

int rdma_disconnect(rdma_cm_id* id) {
  auto& s = state();
  if (id == nullptr) return fail(EINVAL);
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  Id* i = id_of(id);
  if (i->comm_id == 0) return fail(EINVAL);
  // Already disconnected by the peer (its DREQ came first): nothing to send.
  bool reported = s.manager->disconnect(i->comm_id) == 0;
  if (!i->sync) return 0;
  // A synchronous ID waits for its DISCONNECTED: the one our DREQ brings,
  // or the peer's, still queued. None coming (never connected, reported
  // already): nothing to wait for.
  for (const EventBox* e : uroce::rdmacm::channel_of(id)->queue) {
    reported = reported || (e->ev.id == id && e->ev.event == RDMA_CM_EVENT_DISCONNECTED);
  }
  lock.unlock();
  return reported ? uroce::rdmacm::complete(id, true) : 0;
}

// After RDMA_CM_EVENT_CONNECT_RESPONSE on an ID with no QP: the program has
// moved its QP to RTS, the RTU goes. No ESTABLISHED event follows on this
// side (as rdma-core's). EINVAL for an ID with a QP (the CM moved it and
// answered already) or one that waits for no such call.
int rdma_establish(rdma_cm_id* id) {
  auto& s = state();
  if (id == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  Id* i = id_of(id);
  if (id->qp != nullptr || i->comm_id == 0) return fail(EINVAL);
  if (const int rc = s.manager->establish(i->comm_id); rc != 0) return fail(rc);
  i->connected = true;
  return 0;
}

// The attributes a QP of `id`'s connection is moved to `qp_attr->qp_state`
// with, as the CM would move one of its own (Linux's rdma_init_qp_attr):
// for a program that made its QP itself (ibv_create_qp) and connects it
// with conn_param->qp_num. With no connection yet, INIT's only (no remote
// access: the connection decides it); RTR and RTS once the peer's REQ or
// REP is in. A UD ID's: INIT with rdma_cm's Q_Key, RTR, RTS (send PSN 0).
int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  auto& s = state();
  if (id == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  Id* i = id_of(id);
  const ibv_qp_state want = qp_attr->qp_state;
  if (want != IBV_QPS_INIT && want != IBV_QPS_RTR && want != IBV_QPS_RTS) return fail(EINVAL);
  ibv_qp_attr a{};
  a.qp_state = want;
  int mask = IBV_QP_STATE;
  if (id->qp_type == IBV_QPT_UD) {
    if (want == IBV_QPS_INIT) {
      a.port_num = 1;
      a.qkey = RDMA_UDP_QKEY;
      mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    } else if (want == IBV_QPS_RTS) {
      mask |= IBV_QP_SQ_PSN;
    }
  } else if (i->comm_id == 0) {
    if (want != IBV_QPS_INIT) return fail(EINVAL);
    a.port_num = 1;
    mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else {
    // A connection the manager no longer holds (ended) has no attributes.
    if (const int rc = s.manager->qp_attr(i->comm_id, want, a, mask); rc != 0) return fail(EINVAL);
    // RDMA_OPTION_ID_ACK_TIMEOUT wins, as in Linux's rdma_init_qp_attr.
    if ((mask & IBV_QP_TIMEOUT) && i->ack_timeout) a.timeout = *i->ack_timeout;
  }
  *qp_attr = a;
  *qp_attr_mask = mask;
  return 0;
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return fail(EINVAL);
  auto& s = state();
  auto* c = reinterpret_cast<Channel*>(channel);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.channels.count(c)) return fail(EBADF);  // destroyed before the call
    c->readers.fetch_add(1);
  }
  struct Leave {
    Channel* c;
    ~Leave() { c->readers.fetch_sub(1); }
  } leave{c};
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      // Destroyed while this thread waited: as on the kernel's channel, a
      // read in progress goes on waiting; it is never ended with an error.
      if (!s.channels.count(c)) uroce::rdmacm::wait_forever();
      if (!c->queue.empty()) {
        EventBox* e = c->queue.front();
        c->queue.pop_front();
        if (c->queue.empty()) drain(c);
        if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) id_of(e->ev.id)->request_queued = false;
        const bool request = e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->ev.listen_id != nullptr;
        e->counted = id_of(request ? e->ev.listen_id : e->ev.id);
        ++e->counted->events_reported;
        *event = &e->ev;
        return 0;
      }
    }
    // Nothing queued: EAGAIN on a channel the program made non-blocking,
    // else wait for the wake-up byte (leaving it for the next reader). A
    // channel destroyed meanwhile never wakes us, as the kernel's would not.
    const int flags = fcntl(c->ch.fd, F_GETFL);
    if (flags < 0) return fail(errno);
    if (flags & O_NONBLOCK) {
      errno = EAGAIN;
      return -1;
    }
    pollfd p{c->ch.fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return fail(errno);
    if (p.revents & POLLNVAL) uroce::rdmacm::wait_forever();  // closed by rdma_destroy_event_channel meanwhile
  }
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return fail(EINVAL);
  auto& s = state();
  auto* e = reinterpret_cast<EventBox*>(event);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (e->counted != nullptr && s.ids.count(e->counted)) {
      ++e->counted->events_acked;
      s.acked.notify_all();
    }
  }
  delete e;
  return 0;
}

const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

// Options are taken and ignored: one traffic class, no timeouts to tune.
// RDMA_OPTION_ID_ACK_TIMEOUT sets the local ACK timeout the ID's QP gets
// when it connects or accepts (Linux's rdma_set_ack_timeout: one byte; a
// QP's timeout field has 5 bits, so above 31 is refused). Other options
// (TOS, REUSEADDR, AFONLY, IB paths) are taken and change nothing: uroce
// has one traffic class per port and no port reuse rules of the kernel's.
int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  auto& s = state();
  if (id == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_ACK_TIMEOUT) {
    if (optval == nullptr || optlen != sizeof(std::uint8_t)) return fail(EINVAL);
    const std::uint8_t t = *static_cast<const std::uint8_t*>(optval);
    if (t > 31) {
      std::fprintf(stderr, "uroce librdmacm: RDMA_OPTION_ID_ACK_TIMEOUT %u: a QP's timeout is 0..31\n", t);
      return fail(EINVAL);
    }
    id_of(id)->ack_timeout = t;
  }
  return 0;
}

__be16 rdma_get_src_port(rdma_cm_id* id) { return reinterpret_cast<sockaddr_in*>(&id->route.addr.src_addr)->sin_port; }
__be16 rdma_get_dst_port(rdma_cm_id* id) { return reinterpret_cast<sockaddr_in*>(&id->route.addr.dst_addr)->sin_port; }

// With no device: NULL with errno ENODEV and *num_devices 0, as rdma-core's
// (its ucma_init fails), not an empty list: SPDK crashed on that in its own
// error path (issue 27).
//
// The context listed stays open for the rest of the process (rdma-core's
// stay valid until exit), but the CM thread and the manager still stop with
// the last ID and channel (release_if_unused).
ibv_context** rdma_get_devices(int* num_devices) {
  auto& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  if (num_devices != nullptr) *num_devices = 0;
  if (const int rc = uroce::rdmacm::start_cm(s, lock); rc != 0) {
    errno = rc;
    return nullptr;
  }
  auto** list = static_cast<ibv_context**>(calloc(2, sizeof(ibv_context*)));
  if (list == nullptr) {
    uroce::rdmacm::release_if_unused(s, lock);
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = s.verbs;
  s.verbs_handed_out = true;
  if (num_devices != nullptr) *num_devices = 1;
  // Started for the list alone: nothing but the context needs to run.
  uroce::rdmacm::release_if_unused(s, lock);
  return list;
}
void rdma_free_devices(ibv_context** list) { free(list); }

namespace {

// A copy of `len` bytes of `a` in `*to` (malloc'd: rdma_freeaddrinfo frees it).
bool copy_addr(sockaddr** to, socklen_t* to_len, const sockaddr* a, socklen_t len) {
  *to = static_cast<sockaddr*>(calloc(1, len));
  if (*to == nullptr) return false;
  std::memcpy(*to, a, len);
  *to_len = len;
  return true;
}

}  // namespace

// As rdma-core's: node:service through getaddrinfo (an IPv4 address
// preferred, one that resolves as v4-mapped IPv6 given as IPv4; an IPv6-only
// name kept as IPv6, for rdma_bind_addr or rdma_resolve_addr to refuse), in
// ai_src_addr when passive, else ai_dst_addr; with neither node nor service,
// the hints' own addresses (libfabric's verbs provider passes its endpoints'
// addresses that way). RC in the TCP port space unless the hints say.
int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (res == nullptr || (node == nullptr && service == nullptr && hints == nullptr)) return fail(EINVAL);
  const rdma_addrinfo none{};
  if (hints == nullptr) hints = &none;
  auto* r = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (r == nullptr) return fail(ENOMEM);
  const auto undo = [r](int err) {
    rdma_freeaddrinfo(r);
    return fail(err);
  };
  const bool passive = hints->ai_flags & RAI_PASSIVE;
  r->ai_flags = hints->ai_flags;
  r->ai_family = hints->ai_family;
  r->ai_port_space = hints->ai_port_space != 0 ? hints->ai_port_space : RDMA_PS_TCP;
  // As rdma-core's (a datagram socket type for the UDP port space): UD there.
  r->ai_qp_type = hints->ai_qp_type != 0 ? hints->ai_qp_type
                                         : (r->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC);
  if (node != nullptr || service != nullptr) {
    addrinfo h{};
    h.ai_family = (hints->ai_flags & RAI_FAMILY) ? hints->ai_family : AF_UNSPEC;
    h.ai_socktype = SOCK_STREAM;
    if (passive) h.ai_flags |= AI_PASSIVE;
    if (hints->ai_flags & RAI_NUMERICHOST) h.ai_flags |= AI_NUMERICHOST;
    addrinfo* got = nullptr;
    if (const int rc = getaddrinfo(node, service, &h, &got); rc != 0) {
      return undo(rc == EAI_SYSTEM ? errno : EADDRNOTAVAIL);
    }
    sockaddr_in v4{};
    const addrinfo* chosen = nullptr;
    for (const addrinfo* a = got; a != nullptr && chosen == nullptr; a = a->ai_next) {
      if (uroce::rdmacm::as_ipv4(a->ai_addr, v4)) chosen = a;
    }
    bool ok = false;
    sockaddr** to = passive ? &r->ai_src_addr : &r->ai_dst_addr;
    socklen_t* to_len = passive ? &r->ai_src_len : &r->ai_dst_len;
    if (chosen != nullptr) {
      r->ai_family = AF_INET;
      ok = copy_addr(to, to_len, reinterpret_cast<const sockaddr*>(&v4), sizeof v4);
    } else {  // getaddrinfo's success has at least one
      r->ai_family = got->ai_family;
      ok = copy_addr(to, to_len, got->ai_addr, got->ai_addrlen);
    }
    freeaddrinfo(got);
    if (!ok) return undo(ENOMEM);
  } else if (hints->ai_dst_len > 0 && hints->ai_dst_addr != nullptr) {
    if (!copy_addr(&r->ai_dst_addr, &r->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len)) return undo(ENOMEM);
  }
  if (r->ai_src_len == 0 && hints->ai_src_len > 0 && hints->ai_src_addr != nullptr) {
    if (!copy_addr(&r->ai_src_addr, &r->ai_src_len, hints->ai_src_addr, hints->ai_src_len)) return undo(ENOMEM);
  }
  if (r->ai_family == 0) {
    const sockaddr* a = r->ai_dst_addr != nullptr ? r->ai_dst_addr : r->ai_src_addr;
    r->ai_family = a != nullptr ? a->sa_family : AF_INET;
  }
  *res = r;
  return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res->ai_src_canonname);
    free(res->ai_dst_canonname);
    free(res->ai_route);
    free(res->ai_connect);
    free(res);
    res = next;
  }
}

// Moves `id` (and its unread events) to `channel`; with none, to a channel
// of its own, making it synchronous (rdma-core's behaviour).
int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  if (id == nullptr) return fail(EINVAL);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Id* i = id_of(id);
  if (!s.ids.count(i)) return fail(EINVAL);  // destroyed
  if (i->sync && channel == nullptr) return fail(EINVAL);
  Channel* to = nullptr;
  if (channel == nullptr) {
    to = uroce::rdmacm::open_channel(s);
    if (to == nullptr) return fail(errno);
  } else {
    to = reinterpret_cast<Channel*>(channel);
    if (!s.channels.count(to)) return fail(EBADF);
  }
  Channel* from = uroce::rdmacm::channel_of(id);
  if (from == to) return 0;
  // Its unread events go with it; a listener's requests too.
  for (auto it = from->queue.begin(); it != from->queue.end();) {
    EventBox* e = *it;
    const bool mine = e->ev.id == id || e->ev.listen_id == id;
    if (!mine) {
      ++it;
      continue;
    }
    it = from->queue.erase(it);
    to->queue.push_back(e);
    if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      Id* request = id_of(e->ev.id);
      request->request_event = std::prev(to->queue.end());
      request->request_channel = to;
    }
    if (to->queue.size() == 1) uroce::rdmacm::wake(to);
  }
  if (from->queue.empty()) uroce::rdmacm::drain(from);
  if (i->sync) {
    if (id->event != nullptr) {
      // Acknowledged, as rdma_ack_cm_event would (under the mutex here).
      auto* kept = reinterpret_cast<EventBox*>(id->event);
      if (kept->counted != nullptr && s.ids.count(kept->counted)) ++kept->counted->events_acked;
      delete kept;
      id->event = nullptr;
    }
    uroce::rdmacm::close_channel(s, from);
  }
  i->sync = channel == nullptr;
  id->channel = &to->ch;
  return 0;
}

int rdma_notify(rdma_cm_id* id, ibv_event_type /*event*/) { return id == nullptr ? fail(EINVAL) : 0; }

// --- what uroce's rdma_cm does not have: one line on stderr, ENOSYS ---------

namespace {
int unsupported(const char* what) {
  std::fprintf(stderr, "uroce librdmacm: %s is not supported\n", what);
  return fail(ENOSYS);
}
}  // namespace

int rdma_create_srq(rdma_cm_id*, ibv_pd*, ibv_srq_init_attr*) { return unsupported("rdma_create_srq"); }
int rdma_create_srq_ex(rdma_cm_id*, ibv_srq_init_attr_ex*) { return unsupported("rdma_create_srq_ex"); }
void rdma_destroy_srq(rdma_cm_id*) {}
int rdma_join_multicast(rdma_cm_id*, sockaddr*, void*) { return unsupported("multicast"); }
int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) { return unsupported("multicast"); }
int rdma_leave_multicast(rdma_cm_id*, sockaddr*) { return unsupported("multicast"); }
// ECE of an ID without a QP of rdma_create_qp's (the program's own, as
// rdma-core's librdmacm allows them): what the REQ or REP carries, and what
// the peer's carried. One with such a QP takes its ECE from the QP
// (ibv_query_ece, ibv_set_ece): EINVAL, as rdma-core answers.
int rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (id == nullptr || id->qp != nullptr || ece == nullptr || ece->vendor_id == 0 || ece->comp_mask != 0) {
    return fail(EINVAL);
  }
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  id_of(id)->local_ece = ibv_ece{ece->vendor_id, ece->options, 0};
  return 0;
}

int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (id == nullptr || id->qp != nullptr || ece == nullptr) return fail(EINVAL);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.ids.count(id_of(id))) return fail(EINVAL);  // destroyed
  *ece = id_of(id)->remote_ece;
  ece->comp_mask = 0;
  return 0;
}

// rsockets: not provided. rpoll on plain fds is poll(2) (rping polls its
// event channel's fd with it); the rest fail with ENOSYS (returning -1 as
// a long, so callers of the ssize_t and off_t ones see -1 too).
int rpoll(pollfd* fds, nfds_t nfds, int timeout) { return poll(fds, nfds, timeout); }
#define UROCE_NO_RSOCKET(name) \
  long name(...) {             \
    errno = ENOSYS;            \
    return -1;                 \
  }
UROCE_NO_RSOCKET(rsocket)
UROCE_NO_RSOCKET(rbind)
UROCE_NO_RSOCKET(rlisten)
UROCE_NO_RSOCKET(raccept)
UROCE_NO_RSOCKET(rconnect)
UROCE_NO_RSOCKET(rshutdown)
UROCE_NO_RSOCKET(rclose)
UROCE_NO_RSOCKET(rrecv)
UROCE_NO_RSOCKET(rrecvfrom)
UROCE_NO_RSOCKET(rrecvmsg)
UROCE_NO_RSOCKET(rsend)
UROCE_NO_RSOCKET(rsendto)
UROCE_NO_RSOCKET(rsendmsg)
UROCE_NO_RSOCKET(rread)
UROCE_NO_RSOCKET(rreadv)
UROCE_NO_RSOCKET(rwrite)
UROCE_NO_RSOCKET(rwritev)
UROCE_NO_RSOCKET(rselect)
UROCE_NO_RSOCKET(rgetpeername)
UROCE_NO_RSOCKET(rgetsockname)
UROCE_NO_RSOCKET(rsetsockopt)
UROCE_NO_RSOCKET(rgetsockopt)
UROCE_NO_RSOCKET(rfcntl)
UROCE_NO_RSOCKET(riomap)
UROCE_NO_RSOCKET(riounmap)
UROCE_NO_RSOCKET(riowrite)
#undef UROCE_NO_RSOCKET

}  // extern "C"
