// uroced's changes to a client's live objects: ibv_rereg_mr (a new
// translation mapped as reg_mr maps memory, the region changed in place so
// its keys stay), ibv_resize_cq (a new shared ring, what waited in the old
// one moved into it in order), and the clock completions are stamped with.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "service/shm.h"
#include "service_daemon/server.h"
#include "verbs/internal.h"

namespace uroce::daemon {

using service::Reply;
using service::Request;

void Server::op_rereg_mr(Client& c, const Request& req, const int* fds, int nfds, Reply& reply, std::vector<int>&) {
  Mr* m = find(c.mrs, req.handle, "region", reply);
  if (m == nullptr) return;
  const service::ReregMr& r = req.rereg_mr;
  ReregAttr change;
  change.flags = static_cast<int>(r.flags);
  if ((r.flags & IBV_REREG_MR_CHANGE_PD) != 0) {
    ProtectionDomain** pd = find(c.pds, r.region.pd, "PD", reply);
    if (pd == nullptr) return;
    change.pd = *pd;
  }
  if ((r.flags & IBV_REREG_MR_CHANGE_ACCESS) != 0) change.access = r.region.access;
  const bool translation = (r.flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
  if (!translation && nfds != 0) {
    fail(reply, EINVAL, "rereg_mr passes memory files without IBV_REREG_MR_CHANGE_TRANSLATION");
    return;
  }
  RegionMapping fresh;
  if (translation) {
    if (!map_region(c, r.region, fds, nfds, reply, fresh)) return;
    change.addr = static_cast<char*>(fresh.view) + r.region.offset;
    change.length = r.region.length;
    change.iova = r.region.iova;
  }
  // The client's region, changed in place in the daemon's table (its keys
  // stay); from the return on no frame reaches the old view.
  const int e = translation ? internal::rereg_mr_as(m->mr->pd, m->mr, change, !fresh.ported)
                            : m->mr->pd->rereg_mr(m->mr, change);
  if (e != 0) {
    fail(reply, e, ctx_.last_error());
    if (translation) unmap_region(fresh);
    return;
  }
  if (translation) {
    keep_region(c, fresh);
    release_view(c, *m);
    m->view = fresh.view;
    m->view_bytes = fresh.own_view ? fresh.total : 0;
    m->own_view = fresh.own_view;
    m->files = std::move(fresh.keys);
  }
  reply.handle = req.handle;
  reply.reg_mr.lkey = m->mr->lkey;
  reply.reg_mr.rkey = m->mr->rkey;
}

void Server::op_resize_cq(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>& fds) {
  Cq* rec = find(c.cqs, req.handle, "CQ", reply);
  if (rec == nullptr) return;
  const std::uint32_t cqe = req.create_cq.cqe;
  if (cqe == 0 || cqe > ctx_.limits().max_cqe) {
    fail(reply, EINVAL, "cqe must be between 1 and the device's max_cqe (" + std::to_string(ctx_.limits().max_cqe) + ")");
    return;
  }
  const std::uint32_t slots = service::ring_slots(cqe);
  const std::size_t bytes = service::page_round(service::Ring<service::CqSlot>::bytes(slots));
  const std::uint64_t charge_after = bytes + pumps_.size() * std::uint64_t{slots} * sizeof(ibv_wc);
  if (charge_after > rec->charge) {
    if (std::string e = over_budget(c, Charge{0, charge_after - rec->charge, 0}); !e.empty()) {
      fail(reply, ENOMEM, e);
      return;
    }
  }
  const int file = service::make_memory_file("uroced-cq", bytes, false, service::Sealing::kFinal);
  void* map = file >= 0 ? service::map_shared(file, bytes) : nullptr;
  if (map == nullptr) {
    fail(reply, ENOMEM, std::string("memory file for the resized CQ: ") + std::strerror(errno));
    if (file >= 0) close(file);
    return;
  }
  new (map) service::RingHeader();
  auto ring = service::Ring<service::CqSlot>::at(map, slots);
  int err = 0;
  std::string why;
  // The CQ's pump holds off meanwhile: nothing moves into the old ring, and
  // the client, inside this call, polls neither.
  pumps_[rec->worker].with_lock([&] {
    PumpCq& p = *rec->pump;
    const std::uint32_t in_ring = p.ring.head() - p.ring.consumed();
    if (in_ring > p.ring.slots()) {
      err = EINVAL;
      why = "the CQ's ring has a tail beyond its head (written by hand?)";
      return;
    }
    // Send work requests the client posted and the engine has not retired
    // complete into this CQ too (each count bounded: the client's word).
    std::uint64_t waiting = std::uint64_t{in_ring} + internal::cq_waiting(*rec->cq);
    for (const auto& [h, qp] : c.qps) {
      if (qp.send_cq != req.handle) continue;
      const std::uint32_t posted = qp.pump->sq.published() - qp.pump->sq.consumed();
      waiting += std::min(posted, qp.pump->sq.capacity());
    }
    if (waiting > cqe) {
      err = EINVAL;
      why = std::to_string(waiting) + " completions wait or will come from send work requests posted, more than " +
            std::to_string(cqe) + ": poll them first";
      return;
    }
    if (rec->cq->resize(static_cast<int>(cqe)) != 0) {  // the engines added some meanwhile
      err = EINVAL;
      why = ctx_.last_error();
      return;
    }
    for (std::uint32_t i = 0; i < in_ring; ++i) ring.slot(i) = p.ring[p.ring.consumed() + i];
    ring.publish(in_ring);
    ring.header->armed.store(p.ring.header->armed.load());
    ring.header->overflow.store(p.ring.header->overflow.load());
    p.ring = std::move(ring);
  });
  if (err != 0) {
    munmap(map, bytes);
    close(file);
    fail(reply, err, why);
    return;
  }
  munmap(rec->map, rec->bytes);
  c.ring_bytes += bytes;
  c.ring_bytes -= rec->bytes;
  charge(c, Charge{0, rec->charge, 0}, -1);
  charge(c, Charge{0, charge_after, 0}, +1);
  rec->map = map;
  rec->bytes = bytes;
  rec->charge = charge_after;
  reply.handle = req.handle;
  reply.create_cq.slots = slots;
  reply.create_cq.file_size = bytes;
  fds.push_back(file);
}

// The completions the client has not polled yet, but those of the QP,
// moved up to its tail in order; the head comes back by as many. The
// client is inside its modify_qp call (its library holds the CQs' poll
// locks), so it reads neither ring meanwhile.
void Server::forget_completions(Client& c, const Qp& q) {
  const std::uint32_t qpn = q.qp->qp_num();
  const std::uint32_t handles[2] = {q.send_cq, q.recv_cq};
  for (int which = 0; which < 2; ++which) {
    if (which == 1 && q.recv_cq == q.send_cq) continue;  // one CQ for both
    const auto it = c.cqs.find(handles[which]);
    if (it == c.cqs.end()) continue;
    Cq& rec = it->second;
    pumps_[rec.worker].with_lock([&] {
      PumpCq& p = *rec.pump;
      const std::uint32_t tail = p.ring.consumed();
      const std::uint32_t in_ring = p.ring.head() - tail;
      if (in_ring > p.ring.slots()) return;  // a wild tail: left as it is
      std::uint32_t kept = 0;
      for (std::uint32_t i = 0; i < in_ring; ++i) {
        const service::CqSlot slot = p.ring[tail + i];
        if (slot.wc.qp_num == qpn) continue;
        p.ring[tail + kept++] = slot;
      }
      if (kept == in_ring) return;
      p.ring.header->head.store(tail + kept, std::memory_order_release);
      p.ring = service::Ring<service::CqSlot>::at(rec.map, p.ring.slots());  // this side's cursors from the words
    });
  }
}

void Server::op_query_clock(Client&, const Request&, const int*, int, Reply& reply, std::vector<int>&) {
  ClockValues v;
  if (const int e = ctx_.query_clock(v); e != 0) {
    fail(reply, e, ctx_.last_error());
    return;
  }
  reply.clock.raw_ns = v.raw_ns;
  reply.clock.realtime_ns = v.realtime_ns;
}

}  // namespace uroce::daemon
