// The in-process backend's QPs (verbs/local.h): the choice of QPN, the
// engine that serves each, the modify and query control calls, and the data
// path straight into the transport.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "log/log.h"
#include "transport/qp_state.h"
#include "verbs/local.h"
#include "wire/headers.h"

namespace uroce {
namespace internal {
namespace {

// A bijection of the 24-bit QPN space under `key`: four Feistel rounds on
// 12-bit halves, each round a 64-bit mix (splitmix64's finaliser) of the
// other half and its round key. Distinct counters give distinct QPNs, and
// without the key one QPN says little about the next.
std::uint32_t permute_qpn(std::uint32_t n, const std::array<std::uint64_t, 4>& key) {
  std::uint32_t left = n >> 12 & 0xfff;
  std::uint32_t right = n & 0xfff;
  for (const std::uint64_t k : key) {
    std::uint64_t x = right ^ k;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    const std::uint32_t next = left ^ static_cast<std::uint32_t>(x & 0xfff);
    left = right;
    right = next;
  }
  return left << 12 | right;
}

// The in-process data path (QueuePair::Impl::post_send, post_recv), set by
// create_qp_with_qpn.

// One doorbell per list: each WR is published as it is taken, the engine
// told once, after the last (or after the WRs before a bad one).
int local_post_send(QueuePair& qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  QpImpl& q = impl_of(qp);
  const bool ud = q.qp.type == IBV_QPT_UD;
  bool posted = false;
  for (; wr != nullptr; wr = wr->next) {
    const wire::PathHeader* to = nullptr;
    if (ud) {
      // The AH must be one of ours, of the QP's PD (IBTA 10.2.1.x).
      const AddressHandle* ah = AddressHandle::of(wr->wr.ud.ah);
      if (ah == nullptr || ah->pd() != q.pd) [[unlikely]] {
        if (posted) transport::qp_ring_doorbell(q.qp);
        if (bad_wr != nullptr) *bad_wr = wr;
        return impl_of(q.pd->context())
            .note(EINVAL, "UD send WR: wr.ud.ah is not an address handle of the QP's PD");
      }
      to = &internal::Access::impl(const_cast<AddressHandle&>(*ah)).path;
    }
    if (const int rc = transport::qp_post_send(q.qp, *wr, to, wr->next == nullptr); rc != 0) {
      if (posted) transport::qp_ring_doorbell(q.qp);
      if (bad_wr != nullptr) *bad_wr = wr;
      return impl_of(q.pd->context()).note(rc, rc == ENOMEM ? "send queue full (max_send_wr)"
                                                               : "bad send WR: opcode (for the QP type), SGE count, "
                                                                 "inline size, length (UD: at most the MTU) or QP state");
    }
    posted = true;
  }
  return 0;
}

int local_post_recv(QueuePair& qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  QpImpl& q = impl_of(qp);
  if (q.qp.srq != nullptr) [[unlikely]] {
    if (bad_wr != nullptr) *bad_wr = wr;
    return impl_of(q.pd->context()).note(EINVAL, "this QP receives from an SRQ: post to the SRQ");
  }
  bool posted = false;
  for (; wr != nullptr; wr = wr->next) {
    if (const int rc = transport::qp_post_recv(q.qp, *wr, wr->next == nullptr); rc != 0) {
      if (posted) transport::qp_recv_posted(q.qp);
      if (bad_wr != nullptr) *bad_wr = wr;
      return impl_of(q.pd->context()).note(rc, rc == ENOMEM ? "receive queue full (max_recv_wr)"
                                                               : "bad receive WR: SGE count or QP state (RESET)");
    }
    posted = true;
  }
  return 0;
}

int query_now(const QpImpl& q, ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) {
  (void)attr_mask;  // everything is returned, as providers commonly do
  const transport::Qp& qp = q.qp;
  attr = qp.attr;
  attr.qp_state = qp.state;
  attr.cur_qp_state = qp.state;
  attr.cap.max_send_wr = qp.caps.max_send_wr;
  attr.cap.max_recv_wr = qp.caps.max_recv_wr;
  attr.cap.max_send_sge = qp.caps.max_send_sge;
  attr.cap.max_recv_sge = qp.caps.max_recv_sge;
  attr.cap.max_inline_data = qp.caps.max_inline_data;
  if (init_attr != nullptr) *init_attr = q.init;
  return 0;
}

}  // namespace

QueuePair* LocalBackend::create_qp_with_qpn(ProtectionDomain* pd, const QpInitAttr& asked, std::uint32_t qpn) {
  ContextImpl& c = c_;
  QpInitAttr attr = asked;
  if (attr.qp_type == IBV_QPT_XRC_SEND) {
    // An initiator receives nothing (IBTA annex A14): no receive queue, and
    // its recv_cq is its send_cq when none is given.
    attr.cap.max_recv_wr = attr.cap.max_recv_sge = 0;
    if (attr.recv_cq == nullptr) attr.recv_cq = attr.send_cq;
  } else if (attr.qp_type == IBV_QPT_XRC_RECV) {
    attr.cap = ibv_qp_cap{};  // a target QP neither sends nor has a receive queue
  }
  const bool target = attr.qp_type == IBV_QPT_XRC_RECV;
  if (attr.qp_type != IBV_QPT_RC && attr.qp_type != IBV_QPT_UC && attr.qp_type != IBV_QPT_UD &&
      attr.qp_type != IBV_QPT_XRC_SEND && !target) {
    c.fail(EOPNOTSUPP, "qp_type must be IBV_QPT_RC, UC, UD, XRC_SEND or XRC_RECV (raw packet QPs are not supported)");
    return nullptr;
  }
  if (target != (attr.xrcd != nullptr) || (target && attr.srq != nullptr) ||
      (attr.qp_type == IBV_QPT_XRC_SEND && attr.srq != nullptr)) {
    c.fail(EINVAL, "an XRC_RECV QP needs an XRC domain (and no SRQ); no other QP takes one, nor an XRC_SEND QP an SRQ");
    return nullptr;
  }
  if (target && std::none_of(c.xrcds.begin(), c.xrcds.end(), [&](const auto& x) { return x.get() == attr.xrcd; })) {
    c.fail(EINVAL, "not an XRC domain of this context");
    return nullptr;
  }
  if (attr.send_cq == nullptr || attr.recv_cq == nullptr) {
    c.fail(EINVAL, "send_cq and recv_cq are required");
    return nullptr;
  }
  const DeviceLimits& l = c.limits;
  const ibv_qp_cap& cap = attr.cap;
  if (cap.max_send_wr > l.max_qp_wr || cap.max_recv_wr > l.max_qp_wr || cap.max_send_sge > l.max_sge ||
      cap.max_recv_sge > l.max_sge || cap.max_inline_data > l.max_inline_data) {
    c.fail(EINVAL, "QP capabilities exceed the device limits (max_qp_wr, max_sge, max_inline_data)");
    return nullptr;
  }
  if (attr.worker < -1 || attr.worker >= static_cast<int>(engines_.size())) {
    c.fail(EINVAL, "worker " + std::to_string(attr.worker) + " does not exist: this context has " +
                       std::to_string(engines_.size()) + " engine(s); -1 picks one");
    return nullptr;
  }
  if (qpn > 0xffffff || find_qp(qpn) != nullptr || c.qps.size() >= l.max_qp) {
    c.fail(ENOMEM, "no QP number available");
    return nullptr;
  }
  // The engine serving the fewest QPs, unless one is named, or the SRQ's.
  std::size_t engine = 0;
  internal::SrqImpl* srq = attr.srq != nullptr ? &impl_of(*attr.srq) : nullptr;
  if (srq != nullptr && srq->pd != pd) {
    c.fail(EINVAL, "the SRQ belongs to another PD");
    return nullptr;
  }
  if (srq != nullptr && srq->init.xrcd != nullptr) {
    c.fail(EINVAL, "an XRC SRQ serves XRC target QPs only (requests name it by its number)");
    return nullptr;
  }
  if (target) {
    if (attr.worker >= 0 && attr.worker != attr.xrcd->engine()) {
      c.fail(EINVAL, "an XRC domain's target QPs share one worker: this domain's is " +
                         std::to_string(attr.xrcd->engine()));
      return nullptr;
    }
    engine = static_cast<std::size_t>(attr.xrcd->engine());
  } else if (srq != nullptr && srq->engine >= 0) {
    if (attr.worker >= 0 && attr.worker != srq->engine) {
      c.fail(EINVAL, "the QPs of an SRQ share one worker: this SRQ's is " + std::to_string(srq->engine));
      return nullptr;
    }
    engine = static_cast<std::size_t>(srq->engine);
  } else if (attr.worker >= 0) {
    engine = static_cast<std::size_t>(attr.worker);
  } else {
    for (std::size_t i = 1; i < engines_.size(); ++i) {
      if (engines_[i]->qps().size() < engines_[engine]->qps().size()) engine = i;
    }
  }
  auto impl = std::make_unique<internal::QpImpl>();
  impl->pd = pd;
  impl->init = attr;
  impl->engine = static_cast<std::uint32_t>(engine);
  impl->post_send = &local_post_send;
  impl->post_recv = &local_post_recv;
  transport::QpCaps caps{cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge,
                         cap.max_inline_data, attr.sq_sig_all};
  transport::qp_init(impl->qp, qpn, pd->id(), caps, &impl_of(*attr.send_cq).ring_for(engine),
                     &impl_of(*attr.recv_cq).ring_for(engine), attr.qp_type);
  // A datagram is one packet of at most the port's MTU (UD has no path MTU).
  if (attr.qp_type == IBV_QPT_UD) impl->qp.mtu = 128u << c.port.active_mtu;
  if (srq != nullptr) transport::attach_srq(impl->qp, &srq->srq);
  if (target) {
    // Its SRQ is the one each request names (transport/responder.cc).
    transport::attach_srq(impl->qp, nullptr);
    impl->qp.xrcd = attr.xrcd->targets();
  }
  auto qp = internal::Access::make_qp(&pd->context(), std::move(impl));
  if (!engines_[engine]->add_qp(&impl_of(*qp).qp)) {
    c.fail(ENOMEM, "engine " + std::to_string(engine) + " serves as many QPs as it can; pick another worker");
    return nullptr;
  }
  ++impl_of(*attr.send_cq).users;
  ++impl_of(*attr.recv_cq).users;
  if (srq != nullptr) {
    srq->engine = static_cast<int>(engine);
    ++srq->users;
  }
  if (target) ++attr.xrcd->users;
  c.qps.push_back(std::move(qp));
  publish_owners();
  if (!qpn_low_used_.empty()) ++qpn_low_used_[qpn & (qpn_low_used_.size() - 1)];
  return c.qps.back().get();
}


QueuePair* LocalBackend::create_qp_now(ProtectionDomain* pd, const QpInitAttr& attr) {
  // An unpredictable QPN (a spoofed packet must name one) that is not
  // QP0/QP1 and whose low bits no live QP has: the engines index QPs by
  // those bits (engine/qpn_map.h), so they stay a direct, collision-free
  // table. The table is at most half full, so each pick is free with odds
  // of at least one half.
  std::size_t low = std::max<std::size_t>(64, qpn_low_used_.size());
  while (low < 2 * (c_.qps.size() + 1)) low *= 2;
  std::vector<std::uint32_t>& used = qpn_low_used_;
  if (used.size() != low) {
    used.assign(low, 0);
    for (const auto& q : c_.qps) ++used[q->qp_num() & (low - 1)];
  }
  auto taken = [&](std::uint32_t qpn) { return qpn < 2 || used[qpn & (low - 1)] != 0; };
  if (!qpn_keyed_) {
    if (c_.port.seeded_qpns) {
      // splitmix64 on the port's seed: the same QP numbers every run.
      std::uint64_t x = c_.port.seed;
      auto next = [&x] {
        std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
      };
      for (auto& k : qpn_key_) k = next();
      next_qpn_ = static_cast<std::uint32_t>(next());
    } else {
      random_bytes(qpn_key_.data(), sizeof qpn_key_);
      random_bytes(&next_qpn_, sizeof next_qpn_);
    }
    qpn_keyed_ = true;
  }
  std::uint32_t qpn = permute_qpn(next_qpn_++ & 0xffffff, qpn_key_);
  for (std::uint32_t tries = 0; taken(qpn) && tries < 0x1000000; ++tries) {
    qpn = permute_qpn(next_qpn_++ & 0xffffff, qpn_key_);
  }
  return create_qp_with_qpn(pd, attr, qpn);  // counts itself into `used`
}

QueuePair* LocalBackend::create_qp(ProtectionDomain* pd, const QpInitAttr& attr, bool gsi) {
  if (gsi) {
    QpInitAttr qp1 = attr;
    qp1.qp_type = IBV_QPT_UD;
    return control([&] { return create_qp_with_qpn(pd, qp1, 1); });
  }
  return control([&] { return create_qp_now(pd, attr); }, Access::kAddsQp);
}

int LocalBackend::destroy_qp_now(QueuePair* qp) {
  QpImpl& q = impl_of(*qp);
  if (std::find_if(c_.qps.begin(), c_.qps.end(), [qp](const auto& u) { return u.get() == qp; }) == c_.qps.end()) {
    return c_.fail(EINVAL, "not a QP of this context");
  }
  send_held_ack(q);
  engines_[q.engine]->remove_qp(&q.qp);
  if (std::vector<std::uint32_t>& used = qpn_low_used_; !used.empty()) {
    std::uint32_t& n = used[q.qp.qpn & (used.size() - 1)];
    if (n > 0) --n;  // create_qp's table: these low bits are free again
  }
  --impl_of(*q.init.send_cq).users;
  --impl_of(*q.init.recv_cq).users;
  if (q.init.srq != nullptr && --impl_of(*q.init.srq).users == 0) impl_of(*q.init.srq).engine = -1;
  if (q.init.xrcd != nullptr) --q.init.xrcd->users;
  erase_owned(c_.qps, qp);
  publish_owners();
  return 0;
}

// A QP leaving its engine or changing state first sends the ACK the last
// poll held back (engine::Poll::kHoldingAcks), as the next poll would have:
// the peer's last request is acknowledged even by a program that destroys
// the QP right after polling its completion. A control call: nothing else
// polls meanwhile (and only caller progress, without workers, holds ACKs).
void LocalBackend::send_held_ack(const QpImpl& q) {
  engine::Engine& e = *engines_[q.engine];
  if (e.holds_ack(q.qp)) e.poll();
}

int LocalBackend::destroy_qp(ProtectionDomain*, QueuePair* qp) {
  return control([&] { return destroy_qp_now(qp); });
}

// `peer_mac`: the address vector's destination, resolved before the control
// call (QueuePair::modify).
int LocalBackend::modify_now(QpImpl& q, const ibv_qp_attr& attr, int attr_mask,
                             const std::uint8_t peer_mac[6]) {
  transport::Qp& qp = q.qp;
  // max_rd_atomic (initiator) is bounded by max_qp_init_rd_atom,
  // max_dest_rd_atomic (responder) by max_qp_rd_atom (ibv_query_device(3)).
  const transport::ModifyLimits limits{c_.limits.max_qp_init_rd_atom, c_.limits.max_qp_rd_atom, c_.port.active_mtu};
  const transport::ModifyCheck check = transport::check_modify(qp.type, qp.state, attr, attr_mask, limits);
  if (check.error != 0) {
    return c_.fail(check.error, std::string("modify QP ") + transport::qp_state_name(qp.state) + "->" +
                                   transport::qp_state_name(check.next) + ": " + check.why);
  }
  // The source address is the GID the address vector names (index 0 IPv6
  // link-local, 1 the port's address), of the destination's family: RoCEv2
  // carries both in one IP header.
  ibv_gid local = c_.port.gid;
  if ((attr_mask & IBV_QP_AV) && query_gid(attr.ah_attr.grh.sgid_index, local) != 0) return EINVAL;
  if ((attr_mask & IBV_QP_AV) && is_ipv4_gid(local) != is_ipv4_gid(attr.ah_attr.grh.dgid)) {
    return c_.fail(EINVAL, std::string("modify QP: GID index ") + std::to_string(attr.ah_attr.grh.sgid_index) + " is " +
                              (is_ipv4_gid(local) ? "IPv4" : "IPv6") + " but the destination GID is " +
                              (is_ipv4_gid(local) ? "IPv6" : "IPv4") +
                              "; use the GID index of the destination's family (0: IPv6 link-local, 1: the port's address)");
  }
  if ((attr_mask & IBV_QP_AV) && peer_mac == nullptr) {
    // Not resolved before the call: it looked invalid then (the QP's state
    // has moved since). Never applied with no address.
    return c_.fail(EAGAIN, "modify QP: the QP changed state while the peer's address was looked up; try again");
  }
  const ibv_qp_state from = qp.state;
  // The address vector as sent (a PFC priority fills in DSCP 0); the QP's
  // attributes keep the one asked, which query_qp returns.
  ibv_qp_attr sent = attr;
  if (attr_mask & IBV_QP_AV) {
    sent.ah_attr.grh.traffic_class = sent_traffic_class(attr.ah_attr, q.engine, fmt::format("qp {:#x}", qp.qpn));
  }
  send_held_ack(q);
  transport::qp_apply(qp, sent, attr_mask, check.next, peer_mac, c_.port.mac, local, c_.port.dcqcn,
                      c_.port.delay_cc);
  if (attr_mask & IBV_QP_AV) qp.attr.ah_attr.grh.traffic_class = attr.ah_attr.grh.traffic_class;
  if (from != check.next) {
    logger().debug("qp {:#x}: {} -> {}", qp.qpn, transport::qp_state_name(from), transport::qp_state_name(check.next));
  } else {
    logger().debug("qp {:#x}: attributes changed in {} (mask {:#x})", qp.qpn, transport::qp_state_name(from),
                   static_cast<unsigned>(attr_mask));
  }
  return 0;
}

// The GID an address vector sends from (its sgid_index); the port's IPv4
// one for an index that does not exist (modify_now then refuses it).
ibv_gid LocalBackend::source_gid(const ibv_ah_attr& ah) const {
  ibv_gid local = c_.port.gid;
  if (ah.grh.sgid_index == 0) {
    const wire::Ipv6Addr a = wire::ipv6_link_local(c_.port.mac);
    std::memcpy(local.raw, a.data(), 16);
  }
  return local;
}

int LocalBackend::modify_qp(QueuePair& qp, const ibv_qp_attr& attr, int attr_mask) {
  QpImpl& q = impl_of(qp);
  // The address is resolved before the control call, never inside it: the
  // engines keep running while the port waits for an answer.
  // Only a modify that passes its checks (as far as they can be made
  // outside: against the QP's last published state) resolves; the others
  // fail inside with their own reason.
  std::uint8_t mac[6] = {};
  const std::uint8_t* peer_mac = nullptr;
  if (attr_mask & IBV_QP_AV) {
    const transport::ModifyLimits limits{c_.limits.max_qp_init_rd_atom, c_.limits.max_qp_rd_atom,
                                         c_.port.active_mtu};
    const ibv_qp_state now = q.qp.app_state.load(std::memory_order_acquire);
    const bool valid = transport::check_modify(q.qp.type, now, attr, attr_mask, limits).error == 0 &&
                       is_ipv4_gid(attr.ah_attr.grh.dgid) == is_ipv4_gid(source_gid(attr.ah_attr));
    if (valid) {
      if (const int rc = wait_resolved(attr.ah_attr.grh.dgid, mac, "modify QP"); rc != 0) return rc;
      peer_mac = mac;
    }
  }
  return control([&] {
    const int rc = modify_now(q, attr, attr_mask, peer_mac);
    if (rc == 0 && (attr_mask & IBV_QP_STATE) != 0 && attr.qp_state == IBV_QPS_RESET) forget_completions(q);
    return rc;
  }, Access::kOneQp, &qp);
}

// A QP moved to RESET leaves nothing of its past in its CQs: completions of
// it still waiting there (the flushes of its move to ERR, say) are taken
// out, as rdma-core's mlx5 provider cleans the CQs at this transition
// (mlx5_modify_qp, mlx5_cq_clean), so that a program that resets a QP and
// uses it again never polls a completion of its earlier life. In the
// control call; the QP's completions go to its engine's ring of each CQ.
void LocalBackend::forget_completions(QpImpl& q) {
  for (CompletionQueue* cq : {q.init.send_cq, q.init.recv_cq}) {
    if (cq == nullptr) continue;
    CqImpl& c = impl_of(*cq);
    if (c.rings[q.engine]) c.rings[q.engine]->remove_qp(q.qp.qpn);
  }
}

int LocalBackend::query_qp(const QueuePair& qp, ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr) {
  return control([&] { return query_now(impl_of(qp), attr, attr_mask, init_attr); }, Access::kReadsOnly);
}

QueuePair::CongestionState LocalBackend::congestion(const QueuePair& qp) {
  return control([&] {
    const transport::Qp::Congestion& c = impl_of(qp).qp.congestion;
    QueuePair::CongestionState s;
    if (!c.started) return s;
    s.enabled = true;
    s.rate_bps = c.rate.rate_bps();
    s.target_bps = c.rate.target_bps();
    s.alpha = c.rate.alpha();
    s.cnps = c.rate.cnps();
    return s;
  }, Access::kReadsOnly);
}

}  // namespace internal

namespace testing {

QueuePair* create_qp_with_qpn(ProtectionDomain* pd, const QpInitAttr& attr, std::uint32_t qpn) {
  return internal::LocalBackend::of(pd->context()).create_qp_with_qpn(pd, attr, qpn);
}

transport::Qp& transport_qp(QueuePair* qp) { return internal::impl_of(*qp).qp; }

}  // namespace testing
}  // namespace uroce
