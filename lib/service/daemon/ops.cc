// The service requests as a table: one row per service::Op, saying whether
// it is allowed before hello and which budget it counts against, and the
// function that runs it. handle() checks those, then runs the row; a new
// request is a row and a function.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

#include "service_daemon/server.h"
#include "uroce/stats.h"
#include <spdlog/spdlog.h>

namespace uroce::daemon {

using service::Op;
using service::Reply;
using service::Request;

constexpr Server::OpRow Server::kOps[] = {
    {Op::kHello, "hello", true, Budget::kNone, &Server::op_hello},
    {Op::kAllocPd, "alloc_pd", false, Budget::kPds, &Server::op_alloc_pd},
    {Op::kDeallocPd, "dealloc_pd", false, Budget::kNone, &Server::op_dealloc_pd},
    {Op::kRegMr, "reg_mr", false, Budget::kMrs, &Server::op_reg_mr},
    {Op::kDeregMr, "dereg_mr", false, Budget::kNone, &Server::op_dereg_mr},
    {Op::kCreateCq, "create_cq", false, Budget::kCqs, &Server::op_create_cq},
    {Op::kDestroyCq, "destroy_cq", false, Budget::kNone, &Server::op_destroy_cq},
    {Op::kCreateQp, "create_qp", false, Budget::kQps, &Server::op_create_qp},
    {Op::kModifyQp, "modify_qp", false, Budget::kNone, &Server::op_modify_qp},
    {Op::kQueryQp, "query_qp", false, Budget::kNone, &Server::op_query_qp},
    {Op::kDestroyQp, "destroy_qp", false, Budget::kNone, &Server::op_destroy_qp},
    {Op::kQpCounters, "qp_counters", false, Budget::kNone, &Server::op_qp_counters},
    {Op::kCreateSrq, "create_srq", false, Budget::kSrqs, &Server::op_create_srq},
    {Op::kModifySrq, "modify_srq", false, Budget::kNone, &Server::op_modify_srq},
    {Op::kQuerySrq, "query_srq", false, Budget::kNone, &Server::op_query_srq},
    {Op::kDestroySrq, "destroy_srq", false, Budget::kNone, &Server::op_destroy_srq},
    {Op::kCreateAh, "create_ah", false, Budget::kAhs, &Server::op_create_ah},
    {Op::kDestroyAh, "destroy_ah", false, Budget::kNone, &Server::op_destroy_ah},
    {Op::kStats, "stats", true, Budget::kNone, &Server::op_stats},
    {Op::kCmOpen, "cm_open", false, Budget::kNone, &Server::op_cm_open},
    {Op::kCmListen, "cm_listen", false, Budget::kNone, &Server::op_cm_listen},
    {Op::kCmUnlisten, "cm_unlisten", false, Budget::kNone, &Server::op_cm_unlisten},
    {Op::kCmConnect, "cm_connect", false, Budget::kNone, &Server::op_cm_connect},
    {Op::kCmAccept, "cm_accept", false, Budget::kNone, &Server::op_cm_accept},
    {Op::kCmReject, "cm_reject", false, Budget::kNone, &Server::op_cm_reject},
    {Op::kCmDisconnect, "cm_disconnect", false, Budget::kNone, &Server::op_cm_disconnect},
    {Op::kCmEvent, "cm_event", false, Budget::kNone, &Server::op_cm_event},
    {Op::kCmSidrRequest, "cm_sidr_request", false, Budget::kNone, &Server::op_cm_sidr_request},
    {Op::kCmInitQpAttr, "cm_init_qp_attr", false, Budget::kNone, &Server::op_cm_init_qp_attr},
    {Op::kCmEstablish, "cm_establish", false, Budget::kNone, &Server::op_cm_establish},
    {Op::kAllocDm, "alloc_dm", false, Budget::kNone, &Server::op_alloc_dm},
    {Op::kFreeDm, "free_dm", false, Budget::kNone, &Server::op_free_dm},
    {Op::kRegDmMr, "reg_dm_mr", false, Budget::kMrs, &Server::op_reg_dm_mr},
    {Op::kAllocMw, "alloc_mw", false, Budget::kMrs, &Server::op_alloc_mw},
    {Op::kDeallocMw, "dealloc_mw", false, Budget::kNone, &Server::op_dealloc_mw},
    {Op::kReregMr, "rereg_mr", false, Budget::kNone, &Server::op_rereg_mr},
    {Op::kResizeCq, "resize_cq", false, Budget::kNone, &Server::op_resize_cq},
    {Op::kQueryClock, "query_clock", false, Budget::kNone, &Server::op_query_clock},
    {Op::kOpenXrcd, "open_xrcd", false, Budget::kPds, &Server::op_open_xrcd},
    {Op::kCloseXrcd, "close_xrcd", false, Budget::kNone, &Server::op_close_xrcd},
    {Op::kSetTransportOptions, "set_transport_options", false, Budget::kNone, &Server::op_set_transport_options},
};

void Server::handle(Client& c, const Request& req, const int* fds, int nfds, Reply& reply,
                    std::vector<int>& reply_fds) {
  // Row i is Op(i + 1), and every Op has its row: a new Op fails here
  // until its row is added, in order.
  static_assert(std::size(kOps) == static_cast<std::size_t>(Op::kSetTransportOptions));
  static_assert([] {
    for (std::size_t i = 0; i < std::size(kOps); ++i) {
      if (kOps[i].op != static_cast<Op>(i + 1)) return false;
    }
    return true;
  }());
  // Op 0 wraps to the largest index: one comparison refuses every number
  // outside the enum before a row is read.
  const std::size_t i = static_cast<std::size_t>(req.op) - 1;
  if (i >= std::size(kOps)) {
    fail(reply, EINVAL, "unknown request " + std::to_string(static_cast<std::uint32_t>(req.op)));
    return;
  }
  const OpRow& row = kOps[i];
  if (!c.attached && !row.before_hello) {
    fail(reply, EINVAL, "no hello yet: a client's first request is hello (uroce's library says it)");
    return;
  }
  if (std::string why = over_budget(c, row.budget); !why.empty()) {
    fail(reply, ENOMEM, why);
    return;
  }
  (this->*row.run)(c, req, fds, nfds, reply, reply_fds);
  if (reply.error != 0) spdlog::debug("uroced: client {} {}: {}", c.id, row.name, reply.message);
}

void Server::op_alloc_pd(Client& c, const Request&, const int*, int, Reply& reply, std::vector<int>&) {
  ProtectionDomain* pd = ctx_.alloc_pd();
  if (pd == nullptr) {
    fail(reply, ENOMEM, ctx_.last_error());
    return;
  }
  reply.handle = c.next_handle++;
  c.pds[reply.handle] = pd;
}

void Server::op_dealloc_pd(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  ProtectionDomain** pd = find(c.pds, req.handle, "PD", reply);
  if (pd == nullptr) return;
  if (const int e = ctx_.dealloc_pd(*pd); e != 0) {
    fail(reply, e, ctx_.last_error());
    return;
  }
  c.pds.erase(req.handle);
}

// Memory windows count against the client's memory-region budget: they
// take keys of the same table.
void Server::op_alloc_mw(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  ProtectionDomain** pd = find(c.pds, req.handle, "PD", reply);
  if (pd == nullptr) return;
  MemoryWindow* mw = (*pd)->alloc_mw(static_cast<ibv_mw_type>(req.alloc_mw.type));
  if (mw == nullptr) {
    fail(reply, req.alloc_mw.type == IBV_MW_TYPE_1 || req.alloc_mw.type == IBV_MW_TYPE_2 ? ENOMEM : EINVAL,
         ctx_.last_error());
    return;
  }
  reply.handle = c.next_handle++;
  reply.reg_mr.rkey = mw->rkey();
  c.mws[reply.handle] = mw;
}

void Server::op_dealloc_mw(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  MemoryWindow** mw = find(c.mws, req.handle, "memory window", reply);
  if (mw == nullptr) return;
  if (const int e = (*mw)->pd()->dealloc_mw(*mw); e != 0) {
    fail(reply, e, ctx_.last_error());
    return;
  }
  c.mws.erase(req.handle);
}

// dereg_mr, destroy_cq and destroy_qp also serve release(): EINVAL from
// them is an unknown handle.
void Server::op_dereg_mr(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  if (const int e = dereg_mr(c, req.handle); e != 0) {
    fail(reply, e, e == EINVAL ? no_object("region", req.handle) : ctx_.last_error());
  }
}

void Server::op_destroy_cq(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  if (const int e = destroy_cq(c, req.handle); e != 0) {
    fail(reply, e, e == EINVAL ? no_object("CQ", req.handle) : "QPs still use this CQ; destroy them first");
  }
}

void Server::op_destroy_qp(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  if (const int e = destroy_qp(c, req.handle); e != 0) {
    fail(reply, e, e == EINVAL ? no_object("QP", req.handle) : ctx_.last_error());
  }
}

void Server::op_modify_qp(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  const service::ModifyQp& r = req.modify_qp;
  Qp* q = find(c.qps, r.qp, "QP", reply);
  if (q == nullptr) return;
  // The peer's address is resolved without holding this loop: not known
  // yet, the reply waits (tick()) while other clients are served.
  if ((r.mask & IBV_QP_AV) && r.attr.ah_attr.is_global) {
    const Reach reach = ctx_.resolve_gid(r.attr.ah_attr.grh.dgid);
    if (reach != Reach::kKnown) {
      defer(c, req, reach == Reach::kUnreachable ? kRefusalHoldOff : std::chrono::milliseconds{});
      return;
    }
  }
  modify_qp(c, *q, r, reply);
}

void Server::op_query_qp(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  Qp* q = find(c.qps, req.handle, "QP", reply);
  if (q == nullptr) return;
  QpInitAttr init;
  if (const int e = q->qp->query(reply.query_qp.attr, ~0, &init); e != 0) {
    fail(reply, e, ctx_.last_error());
    return;
  }
  reply.query_qp.cap = reply.query_qp.attr.cap;
  reply.query_qp.sq_sig_all = init.sq_sig_all ? 1 : 0;
  const TransportOptions t = q->qp->transport_options();
  reply.query_qp.selective_repeat = t.selective_repeat ? 1 : 0;
  reply.query_qp.spray_paths = t.spray_paths;
  reply.query_qp.bdp_packets = t.bdp_packets;
}

void Server::op_qp_counters(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  const Qp* q = find(c.qps, req.handle, "QP", reply);
  if (q == nullptr) return;
  const std::vector<Stat> rows = q->qp->stats();
  reply.counters.count = static_cast<std::uint32_t>(std::min(rows.size(), service::QpCountersReply::kMax));
  for (std::size_t i = 0; i < reply.counters.count; ++i) reply.counters.value[i] = rows[i].value;
}

// The client's own QP only (find); the QP checks state, type and values
// as in process.
void Server::op_set_transport_options(Client& c, const Request& req, const int*, int, Reply& reply,
                                      std::vector<int>&) {
  Qp* q = find(c.qps, req.handle, "QP", reply);
  if (q == nullptr) return;
  const service::SetTransportOptions& r = req.set_transport_options;
  const TransportOptions options{r.selective_repeat != 0, r.spray_paths, r.bdp_packets};
  if (const int e = q->qp->set_transport_options(options); e != 0) fail(reply, e, ctx_.last_error());
}

void Server::op_stats(Client& c, const Request&, const int*, int, Reply& reply, std::vector<int>&) {
  stats(c, reply.stats);
}

}  // namespace uroce::daemon
