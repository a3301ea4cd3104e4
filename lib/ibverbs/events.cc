// Asynchronous events (ibv_get_async_event, ibv_ack_async_event): one
// thread per process looks at the open contexts every 10 ms and writes an
// ibv_async_event record to the context's async_fd (a pipe) for what it
// finds:
//   IBV_EVENT_COMM_EST     an RC QP in RTR received its first packet
//                          (IBTA 11.6.3: communication established);
//   IBV_EVENT_CQ_ERR       a CQ overflowed;
//   IBV_EVENT_QP_FATAL     a QP entered ERR because its CQ overflowed, so
//                          the error cannot be reported by a completion;
//   IBV_EVENT_QP_REQ_ERR / IBV_EVENT_QP_ACCESS_ERR
//                          a QP entered ERR as responder after NAKing an
//                          invalid request / a remote access error
//                          (IBTA 11.6.3.1, affiliated errors);
//   IBV_EVENT_QP_LAST_WQE_REACHED
//                          a QP on an SRQ is in ERR, for whatever reason
//                          (the application's modify too): it takes no
//                          more WQEs from the SRQ (IBTA 11.6.3.2, 10.3.1.1);
//   IBV_EVENT_SRQ_LIMIT_REACHED
//                          an SRQ's armed limit was crossed (its engine
//                          flags it; srq.cc).
// A QP that enters ERR as requester (retry exceeded, a NAK received)
// reports it through its error completion only, as RNICs do.
// A QP that a transport error or a CQ overflow put in ERR also gets one
// warning line with its non-zero counters: a program prints only the
// completion's status ("Failed status 12"), and the counters (timeouts,
// NAKs, losses) say why, before the QP is gone. (A QP the CM moves to ERR
// at a disconnect gets none.)
// Polling, not a hook in the engine: events are rare, and the engines'
// loops stay free of them.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "ibverbs/internal.h"
#include "log/log.h"
#include "uroce/stats.h"

namespace uroce::ibverbs {
namespace {

struct Monitor {
  std::mutex mutex;  // guards contexts
  std::condition_variable wake;
  std::vector<Ctx*> contexts;
  bool running = false;
  Monitor* parent = nullptr;  // in a forked child: the parent's, kept as it was
};

Monitor* g_monitor = nullptr;  // never freed: the thread may outlive static destructors

Monitor& monitor() {
  static const bool made = [] {
    if (g_monitor == nullptr) g_monitor = new Monitor;
    return true;
  }();
  (void)made;
  return *g_monitor;
}

// Called with x->mutex held. The event waits in the context's queue; the
// pipe carries one byte per event, so the fd is readable when one waits.
void post(Ctx* x, const ibv_async_event& e) {
  x->events.push_back(e);
  const char one = 1;
  [[maybe_unused]] const ssize_t n = write(x->async_write, &one, 1);
}

// The counters that only an error ending the QP moves (IBTA 9.7.5, 9.7.6:
// retries spent, NAKs that end a request, sent or received).
bool ended_by_error(const Qp& qp) {
  for (const char* name : {"retry_exceeded", "rnr_retry_exceeded", "nak_inv_req_sent", "nak_rem_access_sent",
                           "nak_rem_op_sent", "nak_inv_req_received", "nak_rem_access_received",
                           "nak_rem_op_received"}) {
    if (qp.qp->counter(name) != 0) return true;
  }
  return false;
}

void warn_error_state(const Qp& qp) {
  std::string counters;
  for (const Stat& st : qp.qp->stats()) {
    if (st.value == 0) continue;
    counters += ' ';
    counters += st.name;
    counters += '=';
    counters += std::to_string(st.value);
  }
  logger().warn("qp {:#x} entered the error state by itself; its counters:{}", qp.ex.qp_base.qp_num, counters);
}

void look_at(Ctx* x) {
  std::lock_guard<std::mutex> lock(x->mutex);
  for (Cq* cq : x->cqs) {
    if (!cq->overflow_reported && cq->cq->overflowed()) {
      cq->overflow_reported = true;
      ibv_async_event e{};
      e.element.cq = ibv_cq_ex_to_cq(&cq->ex);
      e.event_type = IBV_EVENT_CQ_ERR;
      post(x, e);
    }
  }
  for (Srq* srq : x->srqs) {
    if (srq->limit_reached.exchange(false, std::memory_order_acq_rel)) {
      ibv_async_event e{};
      e.element.srq = &srq->ibv;
      e.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
      post(x, e);
    }
  }
  for (Qp* qp : x->qps) {
    const ibv_qp_state s = qp->qp->state();
    ibv_async_event e{};
    e.element.qp = &qp->ex.qp_base;
    // Hardware raises it for a packet that arrives while the QP is in RTR.
    if (!qp->established_reported && s == IBV_QPS_RTR && qp->qp->counter("rx_packets") != qp->rx_base) {
      qp->established_reported = true;
      e.event_type = IBV_EVENT_COMM_EST;
      post(x, e);
    }
    if (s == IBV_QPS_ERR && !qp->last_wqe_reported && qp->ex.qp_base.srq != nullptr) {
      qp->last_wqe_reported = true;
      e.event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
      post(x, e);
    }
    if (s != IBV_QPS_ERR || qp->fatal_reported || qp->requested_state.load() == IBV_QPS_ERR) continue;
    qp->fatal_reported = true;
    // An XRC target QP has no CQs of its own (IBTA annex A14).
    const auto overflowed = [](ibv_cq* cq) { return cq != nullptr && cq_of(cq)->cq->overflowed(); };
    const bool cq_overflow = overflowed(qp->ex.qp_base.send_cq) || overflowed(qp->ex.qp_base.recv_cq);
    if (cq_overflow || ended_by_error(*qp)) warn_error_state(*qp);
    if (cq_overflow) {
      e.event_type = IBV_EVENT_QP_FATAL;
    } else if (qp->qp->counter("nak_rem_access_sent") != qp->nak_access_base) {
      e.event_type = IBV_EVENT_QP_ACCESS_ERR;
    } else if (qp->qp->counter("nak_inv_req_sent") != qp->nak_invalid_base) {
      e.event_type = IBV_EVENT_QP_REQ_ERR;
    } else {
      continue;  // a requester's error: its completion says it
    }
    post(x, e);
  }
}

void run() {
  Monitor& m = monitor();
  std::unique_lock<std::mutex> lock(m.mutex);
  for (;;) {
    m.wake.wait_for(lock, std::chrono::milliseconds(10));
    for (Ctx* x : m.contexts) look_at(x);
  }
}

// An event handed to the program: its object waits for the ack.
void count_delivered(const ibv_async_event& e) {
  switch (e.event_type) {
    case IBV_EVENT_CQ_ERR:
      reinterpret_cast<Cq*>(e.element.cq)->async_events.fetch_add(1);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      reinterpret_cast<Qp*>(e.element.qp)->async_events.fetch_add(1);
      break;
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      reinterpret_cast<Srq*>(e.element.srq)->async_events.fetch_add(1);
      break;
    default:
      break;
  }
}

}  // namespace

void print_counters_on_close(uroce::Context& ctx, const char* when) {
  const char* want = std::getenv("UROCE_COUNTERS");
  if (want == nullptr || *want == '\0' || std::strcmp(want, "0") == 0) return;
  std::string out = std::string("uroce: counters (non-zero) ") + when + ":\n";
  for (const Stat& st : ctx.stats()) {
    if (st.value == 0) continue;
    out += "uroce:   " + std::string(stat_scope_name(st.scope)) + '.' + st.name + ' ' + std::to_string(st.value) + '\n';
  }
  if (!ctx.engine_stats(1).empty()) {
    for (std::size_t i = 0;; ++i) {
      const std::vector<Stat> rows = ctx.engine_stats(i);
      if (rows.empty()) break;
      out += "uroce:   engine " + std::to_string(i) + " (queue " + std::to_string(i) + "):";
      for (const Stat& st : rows) {
        const std::string_view name = st.name;
        if (st.scope == StatScope::kEngine && (name == "rx_frames" || name == "tx_frames" ||
                                               name == "rx_handed_over" || name == "rx_handed_in")) {
          out += ' ' + std::string(name) + ' ' + std::to_string(st.value);
        }
      }
      out += '\n';
    }
  }
  std::fputs(out.c_str(), stderr);
}

void print_qp_counters_on_destroy(const QueuePair& qp) {
  const char* want = std::getenv("UROCE_COUNTERS");
  if (want == nullptr || *want == '\0' || std::strcmp(want, "0") == 0) return;
  const TransportOptions t = qp.transport_options();
  char head[160];
  std::snprintf(head, sizeof head, "uroce: QP 0x%06x (%s, %u path%s, BDP %u) counters (non-zero) at ibv_destroy_qp:",
                qp.qp_num(), t.selective_repeat ? "selective repeat" : "go-back-N", t.spray_paths,
                t.spray_paths == 1 ? "" : "s", t.bdp_packets);
  std::string out = head;
  for (const Stat& st : qp.stats()) {
    if (st.value != 0) out += " qp." + std::string(st.name) + ' ' + std::to_string(st.value);
  }
  out += '\n';
  std::fputs(out.c_str(), stderr);
}

void warn_if_ended_by_error(Qp* qp) {
  if (qp->fatal_reported || qp->qp->state() != IBV_QPS_ERR || qp->requested_state.load() == IBV_QPS_ERR) return;
  if (ended_by_error(*qp)) warn_error_state(*qp);
}

void forget_events(Ctx* x, const void* object) {
  std::erase_if(x->events, [object](const ibv_async_event& e) {
    return e.element.qp == object || e.element.cq == object || e.element.srq == object;
  });
}

void watch_events(Ctx* x) {
  Monitor& m = monitor();
  std::lock_guard<std::mutex> lock(m.mutex);
  m.contexts.push_back(x);
  if (!m.running) {
    m.running = true;
    std::thread(run).detach();
  }
}

void forget_watched_contexts_in_child() {
  Monitor* old = &monitor();
  g_monitor = new Monitor;
  g_monitor->parent = old;  // the parent's stays as it was: its mutex may be held by its thread
}

void unwatch_events(Ctx* x) {
  Monitor& m = monitor();
  std::lock_guard<std::mutex> lock(m.mutex);
  std::erase(m.contexts, x);
}

}  // namespace uroce::ibverbs

using uroce::ibverbs::ctx_of;

extern "C" {

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  if (ctx_of(context) == nullptr || event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  uroce::ibverbs::Ctx* x = ctx_of(context);
  for (;;) {
    char byte;
    const ssize_t n = read(context->async_fd, &byte, 1);
    if (n != 1) {
      if (n == 0) errno = EIO;
      return -1;  // EAGAIN on an O_NONBLOCK fd with nothing to read, EINTR, ...
    }
    std::lock_guard<std::mutex> lock(x->mutex);
    if (x->events.empty()) continue;  // its QP or CQ was destroyed meanwhile
    *event = x->events.front();
    x->events.pop_front();
    // Counted while the lock keeps the object alive: ibv_destroy_qp/cq then
    // waits for this event's ack.
    uroce::ibverbs::count_delivered(*event);
    break;
  }
  return 0;
}

void ibv_ack_async_event(ibv_async_event* event) {
  if (event == nullptr) return;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
      uroce::ibverbs::count_ack(event->element.cq, &ibv_cq::async_events_completed);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      uroce::ibverbs::count_ack(event->element.qp, &ibv_qp::events_completed);
      break;
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      uroce::ibverbs::count_ack(event->element.srq, &ibv_srq::events_completed);
      break;
    default:
      break;
  }
}

}  // extern "C"
