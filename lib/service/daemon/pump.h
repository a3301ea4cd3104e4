// uroced's data path: on each worker, after every poll of its engine, the
// work the worker's clients have put into their shared rings goes to their
// QPs, and the completions of their CQs go into the CQs' shared rings. No
// system call but the eventfd write of a completion event.
//
// Everything read from a shared ring is the client's word: cursors are
// bounded before a slot is read, a slot is copied out before it is checked,
// and a request that fails the QP's checks is dropped and counted (the
// client's library checks the same before it posts, so only a client that
// writes its rings by hand meets this). Nothing a client writes can make the
// daemon touch memory other than its own rings and its own regions: the
// engine resolves every SGE under the QP's PD.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "service/protocol.h"
#include "service/shm.h"
#include "uroce/verbs.h"

namespace uroce::daemon {

// A client's address handles by their numbers (service::CreateAh), read by
// the pumps of its UD QPs: a send slot names an AH by number, so it can
// only ever reach one of its own client's. Set and cleared by the control
// path; an entry is cleared, then every pump waited for, before its AH goes.
struct AhTable {
  std::unique_ptr<std::atomic<ibv_ah*>[]> ah{new std::atomic<ibv_ah*>[service::kMaxAhNumber]{}};
  ibv_ah* find(std::uint32_t number) const {
    return number < service::kMaxAhNumber ? ah[number].load(std::memory_order_acquire) : nullptr;
  }
};

// A client QP's two rings as this side drains them.
struct PumpQp {
  QueuePair* qp = nullptr;
  const AhTable* ahs = nullptr;  // a UD QP's: its client's address handles
  service::Ring<service::SendSlot> sq;
  service::Ring<service::RecvSlot> rq;
  std::uint32_t sq_next = 0, rq_next = 0;          // next slot to take (the rings' tails: retired)
  std::uint32_t sq_rejected = 0, rq_rejected = 0;  // taken but refused by the QP
  std::uint64_t bad_cursor = 0;                    // a head more than a ring ahead
};

// A client SRQ's ring as this side drains it into the SRQ. A slot is free
// again once a QP has taken its WQE (as in process: max_wr posted and not
// yet taken), so `retired` is what was posted less what the SRQ still holds.
struct PumpSrq {
  SharedReceiveQueue* srq = nullptr;
  service::Ring<service::RecvSlot> ring;
  std::uint32_t next = 0;      // next slot to take
  std::uint32_t posted = 0;    // taken and accepted by the SRQ
  std::uint32_t rejected = 0;  // taken but refused by it
  std::uint64_t bad_cursor = 0;
  int event_fd = -1;           // IBV_EVENT_SRQ_LIMIT_REACHED to the client
  // SharedReceiveQueue's on_limit, on the engine's thread: one eventfd
  // write (never blocks), once per arming of the limit.
  static void on_limit(void* self);
};

// A client CQ's ring as this side fills it.
struct PumpCq {
  CompletionQueue* cq = nullptr;
  service::Ring<service::CqSlot> ring;  // this side's head: ring.head()
  bool timestamps = false;              // the CQ stamps its completions (CreateCq::timestamps)
  int event_fd = -1;
  bool solicited_armed = false;      // cq->arm(true) done for the client's current arming
  std::atomic<bool> fire_due{false}; // the daemon CQ's solicited event came (engine thread)
  bool overflow_told = false;
  static void on_event(void* self) { static_cast<PumpCq*>(self)->fire_due.store(true, std::memory_order_release); }
};

// The rings one worker serves. The server changes the lists under `lock`;
// the worker only try-locks it (and skips a round when it cannot), so a
// control call that holds the workers never waits for this.
class Pump {
 public:
  // One round, in two halves around each poll of the worker's engine:
  // requests from the clients' rings to the QPs before it (so they go out
  // in that poll), completions from the CQs to the rings after it (so they
  // reach the clients before the next). Each returns what it moved.
  std::size_t run_requests();
  std::size_t run_completions();
  void add(PumpQp* q);
  void remove(PumpQp* q);
  void add(PumpCq* c);
  void remove(PumpCq* c);
  void add(PumpSrq* s);
  void remove(PumpSrq* s);
  // Runs f with the lists held (the worker does not run the pump meanwhile).
  template <typename F>
  void with_lock(F&& f) {
    while (lock_.exchange(true, std::memory_order_acquire)) {
    }
    f();
    lock_.store(false, std::memory_order_release);
  }

 private:
  void publish_retired(PumpQp& q);
  std::size_t drain_sq(PumpQp& q);
  std::size_t drain_rq(PumpQp& q);
  std::size_t drain_srq(PumpSrq& s);
  static void publish_retired(PumpSrq& s);
  std::size_t fill(PumpCq& c);

  std::atomic<bool> lock_{false};
  std::vector<PumpQp*> qps_;
  std::vector<PumpCq*> cqs_;
  std::vector<PumpSrq*> srqs_;
};

}  // namespace uroce::daemon
