// QueuePair::set_transport_options (include/uroce/verbs.h): the options a QP
// runs with beyond RoCEv2, checked and set before it receives or sends.
#include <cerrno>
#include <cstdint>

#include "verbs/local.h"
#include "verbs/verbs_impl.h"

namespace uroce {

int QueuePair::set_transport_options(const TransportOptions& options) {
  return internal::Access::impl(*ctx_).backend->set_transport_options(*this, options);
}

TransportOptions QueuePair::transport_options() const {
  const transport::Qp::Options& o = impl_->qp.options;
  return TransportOptions{o.selective_repeat, o.spray_paths, o.bdp_packets};
}

// In step with LocalBackend::set_transport_options's refusals below.
TransportOptions QueuePair::transport_capabilities() {
  return TransportOptions{true, static_cast<std::uint8_t>(transport::kMaxSprayPaths), UINT32_MAX};
}

namespace internal {

int LocalBackend::set_transport_options(QueuePair& qp, const TransportOptions& options) {
  return control(
      [&] {
        transport::Qp& q = impl_of(qp).qp;
        if (q.state != IBV_QPS_RESET && q.state != IBV_QPS_INIT) {
          return c_.fail(EINVAL, "transport options are set in RESET or INIT, before the QP receives or sends");
        }
        const bool defaults = !options.selective_repeat && options.spray_paths == 1 && options.bdp_packets == 0;
        if (q.type != IBV_QPT_RC && !defaults) return c_.fail(EINVAL, "transport options apply to RC QPs only");
        if (options.spray_paths == 0 || options.spray_paths > 64 ||
            (options.spray_paths > 1 && !options.selective_repeat)) {
          return c_.fail(EINVAL, "spray_paths is 1 to 64, and more than 1 needs selective_repeat (packets "
                                 "on several paths arrive out of order)");
        }
        if (options.selective_repeat && q.srq != nullptr) {
          return c_.fail(EOPNOTSUPP, "selective repeat takes receives from the QP's own queue, not an SRQ");
        }
        q.options = transport::Qp::Options{options.selective_repeat, options.spray_paths, options.bdp_packets};
        if (options.selective_repeat && q.sr == nullptr) {
          q.sr = std::make_unique<transport::SrState>();
          transport::sr_reset_responder(*q.sr, q.resp.psn);
          transport::sr_reset_requester(*q.sr, q.req.psn);
        }
        if (!options.selective_repeat) q.sr.reset();
        q.comp.window = transport::window_cap(q);
        return 0;
      },
      Access::kOneQp, &qp);
}

}  // namespace internal
}  // namespace uroce
