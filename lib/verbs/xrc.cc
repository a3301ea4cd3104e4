// XRC domains (IBTA annex A14) behind the public API: Context's open_xrcd
// and close_xrcd, and the in-process backend's halves. A domain keeps its
// XRC SRQs by number (XrcDomain::Targets, the transport's XrcDomain) for
// the engine that serves its target QPs: one engine per domain, chosen
// when it opens, since an SRQ has one consumer (transport/queues.h) and
// any target QP of the domain may name any of its SRQs.
#include <algorithm>
#include <cerrno>

#include "verbs/local.h"
#include "verbs/verbs_impl.h"

namespace uroce {

XrcDomain::XrcDomain(Context* ctx, std::uint32_t handle, int engine)
    : ctx_(ctx), handle_(handle), engine_(engine), targets_(std::make_unique<Targets>()) {}
XrcDomain::~XrcDomain() = default;

XrcDomain* Context::open_xrcd() { return impl_->backend->open_xrcd(); }
int Context::close_xrcd(XrcDomain* xrcd) { return impl_->backend->close_xrcd(xrcd); }

namespace internal {

XrcDomain* LocalBackend::open_xrcd() {
  return control([&]() -> XrcDomain* {
    // The engine whose QPs and domains are fewest.
    std::vector<std::size_t> load(engines_.size());
    for (std::size_t i = 0; i < engines_.size(); ++i) load[i] = engines_[i]->qps().size();
    for (const auto& x : c_.xrcds) ++load[static_cast<std::size_t>(x->engine())];
    const auto engine = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    c_.xrcds.push_back(std::make_unique<XrcDomain>(&ctx_, ++c_.next_xrcd, engine));
    return c_.xrcds.back().get();
  });
}

int LocalBackend::close_xrcd(XrcDomain* xrcd) {
  return control([&] {
    const auto it = std::find_if(c_.xrcds.begin(), c_.xrcds.end(), [xrcd](const auto& x) { return x.get() == xrcd; });
    if (it == c_.xrcds.end()) return c_.fail(EINVAL, "not an XRC domain of this context");
    if (xrcd->users != 0) return c_.fail(EBUSY, "XRC SRQs or target QPs of this domain remain: destroy them first");
    c_.xrcds.erase(it);
    return 0;
  });
}

}  // namespace internal
}  // namespace uroce
