// Shared receive queues (include/uroce/verbs.h): the transport's Srq behind
// the public object. Every QP on an SRQ is served by one engine, the SRQ's
// only consumer (transport/queues.h), chosen when its first QP is made.
#include <algorithm>
#include <cerrno>
#include <string>

#include "verbs/local.h"

namespace uroce {

using internal::impl_of;

namespace internal {

std::unique_ptr<SharedReceiveQueue> Access::make_srq(std::unique_ptr<SrqImpl> impl) {
  return std::unique_ptr<SharedReceiveQueue>(new SharedReceiveQueue(std::move(impl)));
}

}  // namespace internal

SharedReceiveQueue::SharedReceiveQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SharedReceiveQueue::~SharedReceiveQueue() = default;

SharedReceiveQueue* ProtectionDomain::create_srq(const SrqInitAttr& attr, void (*on_limit)(void*), void* arg) {
  return impl_of(*ctx_).backend->create_srq(this, attr, on_limit, arg);
}

int ProtectionDomain::destroy_srq(SharedReceiveQueue* srq) { return impl_of(*ctx_).backend->destroy_srq(srq); }

// The in-process bodies.

SharedReceiveQueue* internal::LocalBackend::create_srq(ProtectionDomain* pd, const SrqInitAttr& attr,
                                                       void (*on_limit)(void*), void* arg) {
  ContextImpl& c = c_;
  return control([&]() -> SharedReceiveQueue* {
    const DeviceLimits& l = c.limits;
    if (attr.max_wr == 0 || attr.max_wr > l.max_qp_wr || attr.max_sge == 0 || attr.max_sge > l.max_sge ||
        attr.srq_limit > attr.max_wr) {
      c.fail(EINVAL, "bad SRQ attributes: max_wr 1.." + std::to_string(l.max_qp_wr) + ", max_sge 1.." +
                         std::to_string(l.max_sge) + ", srq_limit at most max_wr");
      return nullptr;
    }
    XrcDomain* xrcd = attr.xrcd;
    if (xrcd != nullptr) {
      const bool ours = std::any_of(c.xrcds.begin(), c.xrcds.end(), [xrcd](const auto& x) { return x.get() == xrcd; });
      const bool cq_ours =
          std::any_of(c.cqs.begin(), c.cqs.end(), [&attr](const auto& q) { return q.get() == attr.cq; });
      if (!ours || !cq_ours) {
        c.fail(EINVAL, "an XRC SRQ needs an XRC domain and a CQ of this context");
        return nullptr;
      }
    }
    auto impl = std::make_unique<internal::SrqImpl>();
    impl->pd = pd;
    impl->init = attr;
    impl->srq.pd = pd->id();
    impl->srq.max_sge = attr.max_sge;
    impl->srq.ring.init(attr.max_wr);
    impl->srq.limit.store(attr.srq_limit, std::memory_order_relaxed);
    impl->srq.on_limit = on_limit;
    impl->srq.arg = arg;
    if (xrcd != nullptr) {
      // Served by its domain's engine, completing on that engine's ring of `cq`.
      impl->engine = xrcd->engine();
      impl->srq.srqn = (++c.next_srqn) & 0xffffff;
      impl->srq.cq = &impl_of(*attr.cq).ring_for(static_cast<std::size_t>(xrcd->engine()));
      ++impl_of(*attr.cq).users;
      ++xrcd->users;
      xrcd->targets()->srqs.push_back(&impl->srq);
    }
    c.srqs.push_back(internal::Access::make_srq(std::move(impl)));
    return c.srqs.back().get();
  });
}

int internal::LocalBackend::destroy_srq(SharedReceiveQueue* srq) {
  ContextImpl& c = c_;
  return control([&] {
    auto it = std::find_if(c.srqs.begin(), c.srqs.end(), [srq](const auto& s) { return s.get() == srq; });
    if (it == c.srqs.end()) return c.fail(EINVAL, "not an SRQ of this context");
    if (impl_of(*srq).users != 0) {
      return c.fail(EBUSY, "QPs still use this SRQ: destroy them first");
    }
    if (XrcDomain* xrcd = impl_of(*srq).init.xrcd) {
      // Target QPs that used it last forget it: a message into it still in
      // progress is lost, and its next packet is refused (no such SRQ).
      transport::Srq* gone = &impl_of(*srq).srq;
      for (auto& q : c.qps) {
        internal::QpImpl& qi = impl_of(*q);
        if (qi.qp.srq != gone) continue;
        qi.qp.srq = nullptr;
        qi.qp.srq_held = false;
        qi.qp.recv_cq = &impl_of(*qi.init.recv_cq).ring_for(qi.engine);
      }
      auto& list = xrcd->targets()->srqs;
      list.erase(std::remove(list.begin(), list.end(), gone), list.end());
      --xrcd->users;
      --impl_of(*impl_of(*srq).init.cq).users;
    }
    c.srqs.erase(it);
    return 0;
  });
}

// Attached to uroced (impl_->remote) each call is the daemon's: the ring it
// drains, or a control call.
int SharedReceiveQueue::post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    const int rc = impl_->remote ? impl_->remote->post_recv(*wr) : transport::srq_post_recv(impl_->srq, *wr);
    if (rc != 0) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return rc;
    }
  }
  return 0;
}

int SharedReceiveQueue::modify(const ibv_srq_attr& attr, int attr_mask) {
  if (impl_->remote) {
    std::string why;
    const int e = impl_->remote->modify(attr, attr_mask, why);
    return e == 0 ? 0 : impl_of(impl_->pd->context()).fail(e, "modify_srq: " + why);
  }
  if ((attr_mask & IBV_SRQ_MAX_WR) != 0) return EINVAL;  // no resizing
  if ((attr_mask & ~IBV_SRQ_LIMIT) != 0) return EINVAL;
  if ((attr_mask & IBV_SRQ_LIMIT) != 0) {
    if (attr.srq_limit > impl_->init.max_wr) return EINVAL;
    impl_->srq.limit.store(attr.srq_limit, std::memory_order_release);
  }
  return 0;
}

int SharedReceiveQueue::query(ibv_srq_attr& attr) const {
  if (impl_->remote) {
    std::string why;
    const int e = impl_->remote->query(attr, why);
    return e == 0 ? 0 : impl_of(impl_->pd->context()).fail(e, "query_srq: " + why);
  }
  attr.max_wr = impl_->init.max_wr;
  attr.max_sge = impl_->init.max_sge;
  attr.srq_limit = impl_->srq.limit.load(std::memory_order_acquire);
  return 0;
}

std::uint32_t SharedReceiveQueue::count() const {
  return impl_->remote ? impl_->remote->count() : transport::srq_count(impl_->srq);
}
ProtectionDomain* SharedReceiveQueue::pd() const { return impl_->pd; }
std::uint32_t SharedReceiveQueue::srq_num() const {
  return impl_->remote ? impl_->remote->srq_num() : impl_->srq.srqn;
}

}  // namespace uroce
