// Shared receive queues and address handles of uroced's clients. An SRQ is
// a shared ring as a QP's receive queue is, drained by the pump of the
// worker that serves every QP on it into the daemon's SRQ; its limit event
// comes back through an eventfd. An address handle is made in the daemon
// (its GID resolved there, as modify_qp resolves a QP's, without holding
// the control loop) under a number the client picks, which its UD send
// slots carry: the pumps look it up in that client's table only.
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "service/shm.h"
#include "service_daemon/server.h"

namespace uroce::daemon {

using service::Reply;
using service::Request;

namespace {

// What the engine holds per SRQ slot (a RecvWqe, rounded up as server.cc's
// kRecvWqeBytes), for the memory budgets.
constexpr std::uint64_t kSrqWqeBytes = 448;

}  // namespace

// --- SRQs ------------------------------------------------------------------------------

void Server::op_create_srq(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>& fds) {
  const service::CreateSrq& r = req.create_srq;
  auto pd = c.pds.find(r.pd);
  auto xrcd = c.xrcds.find(r.xrcd);
  auto cq = c.cqs.find(r.cq);
  if (pd == c.pds.end() || (r.xrcd != 0 && (xrcd == c.xrcds.end() || cq == c.cqs.end()))) {
    fail(reply, EINVAL, "create_srq names a PD, XRC domain or CQ that is not this client's");
    return;
  }
  const DeviceLimits& l = ctx_.limits();
  if (r.max_wr == 0 || r.max_wr > l.max_qp_wr || r.max_sge == 0 || r.max_sge > service::kMaxSge ||
      r.srq_limit > r.max_wr) {
    fail(reply, EINVAL, "bad SRQ attributes: max_wr 1.." + std::to_string(l.max_qp_wr) + ", max_sge 1.." +
                            std::to_string(service::kMaxSge) + ", srq_limit at most max_wr");
    return;
  }
  const std::uint32_t slots = service::ring_slots(r.max_wr);
  const std::size_t bytes = service::page_round(service::Ring<service::RecvSlot>::bytes(slots));
  const Charge add{0, bytes + std::uint64_t{r.max_wr} * kSrqWqeBytes, 1};
  if (std::string e = over_budget(c, add); !e.empty()) {
    fail(reply, ENOMEM, e);
    return;
  }
  auto pump = std::make_unique<PumpSrq>();
  const int file = service::make_memory_file("uroced-srq", bytes, false, service::Sealing::kFinal);
  void* map = file >= 0 ? service::map_shared(file, bytes) : nullptr;
  pump->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  SharedReceiveQueue* srq = nullptr;
  if (map != nullptr && pump->event_fd >= 0) {
    SrqInitAttr attr{r.max_wr, r.max_sge, r.srq_limit};
    if (r.xrcd != 0) {
      attr.xrcd = xrcd->second;
      attr.cq = cq->second.cq;
    }
    srq = pd->second->create_srq(attr, &PumpSrq::on_limit, pump.get());
  }
  if (srq == nullptr) {
    const std::string why = map == nullptr || pump->event_fd < 0 ? "memory file or eventfd: " + std::string(std::strerror(errno))
                                                                 : ctx_.last_error();
    if (map != nullptr) munmap(map, bytes);
    if (file >= 0) close(file);
    if (pump->event_fd >= 0) close(pump->event_fd);
    fail(reply, map == nullptr ? ENOMEM : EINVAL, why);
    return;
  }
  new (map) service::RingHeader();
  pump->srq = srq;
  pump->ring = service::Ring<service::RecvSlot>::work_queue_at(map, slots, slots);
  reply.handle = c.next_handle++;
  reply.create_srq = service::CreateSrqReply{r.max_wr, r.max_sge, slots, srq->srq_num(), bytes};
  fds.push_back(file);
  fds.push_back(dup(pump->event_fd));
  Srq rec;
  rec.srq = srq;
  rec.pd = pd->second;
  rec.map = map;
  rec.bytes = bytes;
  rec.charge = add.objects;
  // An XRC SRQ beside its domain's target QPs (any other: beside its QPs,
  // which go to its worker).
  rec.worker = r.xrcd != 0 ? static_cast<std::size_t>(xrcd->second->engine()) : next_worker_++ % pumps_.size();
  rec.pump = std::move(pump);
  pumps_[rec.worker].add(rec.pump.get());
  c.ring_bytes += bytes;
  charge(c, add, +1);
  ++mappings_total_;
  c.srqs[reply.handle] = std::move(rec);
}

void Server::op_modify_srq(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  const service::ModifySrq& r = req.modify_srq;
  Srq* s = find(c.srqs, r.srq, "SRQ", reply);
  if (s == nullptr) return;
  if (const int e = s->srq->modify(r.attr, r.mask); e != 0) {
    fail(reply, e, "modify_srq: only IBV_SRQ_LIMIT can change (no resizing), and the limit is at most max_wr");
  }
}

void Server::op_query_srq(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  const Srq* s = find(c.srqs, req.handle, "SRQ", reply);
  if (s == nullptr) return;
  reply.query_srq = service::QuerySrqReply{};
  s->srq->query(reply.query_srq.attr);
}

void Server::op_destroy_srq(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  if (const int e = destroy_srq(c, req.handle); e != 0) {
    fail(reply, e, e == EINVAL ? no_object("SRQ", req.handle) : "QPs still use this SRQ; destroy them first");
  }
}

int Server::destroy_srq(Client& c, std::uint32_t handle) {
  auto it = c.srqs.find(handle);
  if (it == c.srqs.end()) return EINVAL;
  Srq& rec = it->second;
  if (rec.users != 0) return EBUSY;
  pumps_[rec.worker].remove(rec.pump.get());
  if (const int e = rec.pd->destroy_srq(rec.srq); e != 0) {
    pumps_[rec.worker].add(rec.pump.get());
    return e;
  }
  munmap(rec.map, rec.bytes);
  close(rec.pump->event_fd);
  c.ring_bytes -= rec.bytes;
  charge(c, Charge{0, rec.charge, 1}, -1);
  --mappings_total_;
  c.srqs.erase(it);
  return 0;
}

// --- Address handles -------------------------------------------------------------------

void Server::op_create_ah(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  const service::CreateAh& r = req.create_ah;
  if (r.ah == 0 || r.ah >= service::kMaxAhNumber || c.ahs.count(r.ah) != 0) {
    fail(reply, EINVAL, "create_ah: number " + std::to_string(r.ah) + " is in use or outside 1.." +
                            std::to_string(service::kMaxAhNumber - 1));
    return;
  }
  if (c.pds.count(r.pd) == 0) {
    fail(reply, EINVAL, no_object("PD", r.pd));
    return;
  }
  // The destination's address is resolved without holding this loop, as
  // for modify_qp (without a GRH ProtectionDomain::create_ah refuses at once).
  if (r.attr.is_global) {
    const Reach reach = ctx_.resolve_gid(r.attr.grh.dgid);
    if (reach != Reach::kKnown) {
      defer(c, req, reach == Reach::kUnreachable ? kRefusalHoldOff : std::chrono::milliseconds{});
      return;
    }
  }
  create_ah(c, r, reply);
}

void Server::create_ah(Client& c, const service::CreateAh& r, Reply& reply) {
  auto pd = c.pds.find(r.pd);
  if (pd == c.pds.end()) {
    fail(reply, EINVAL, no_object("PD", r.pd));
    return;
  }
  if (std::string e = make_ah_table(c); !e.empty()) {
    fail(reply, ENOMEM, e);
    return;
  }
  AddressHandle* ah = pd->second->create_ah(r.attr);
  if (ah == nullptr) {
    const std::string why = ctx_.last_error();
    fail(reply, why.find("resolve") != std::string::npos ? EHOSTUNREACH
                : why.find("in use") != std::string::npos ? ENOMEM
                                                          : EINVAL,
         why);
    return;
  }
  c.ah_table->ah[r.ah].store(ah->ibv(), std::memory_order_release);
  c.ahs[r.ah] = Ah{ah, pd->second};
  reply.handle = r.ah;
}

void Server::op_destroy_ah(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  if (const int e = destroy_ah(c, req.handle); e != 0) {
    fail(reply, e, e == EINVAL ? no_object("address handle", req.handle) : ctx_.last_error());
  }
}

std::string Server::make_ah_table(Client& c) {
  if (c.ah_table) return "";
  // A slot per address-handle number (kMaxAhNumber), charged to the client
  // as its queues are, so the daemon's memory budget counts it.
  const Charge add{0, sizeof(std::atomic<ibv_ah*>) * service::kMaxAhNumber, 0};
  if (std::string e = over_budget(c, add); !e.empty()) return "the table of address handles: " + e;
  c.ah_table = std::make_unique<AhTable>();
  charge(c, add, +1);
  return "";
}

int Server::destroy_ah(Client& c, std::uint32_t number) {
  auto it = c.ahs.find(number);
  if (it == c.ahs.end()) return EINVAL;
  // Out of the table, then every pump waited for: none still holds it.
  c.ah_table->ah[number].store(nullptr, std::memory_order_release);
  with_all_pumps([] {});
  const int e = it->second.pd->destroy_ah(it->second.ah);
  c.ahs.erase(it);
  return e;
}

}  // namespace uroce::daemon
