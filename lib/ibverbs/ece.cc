// ECE, rdma-core's enhanced connection establishment: ibv_query_ece and
// ibv_set_ece, and how they and UROCE_TRANSPORT decide an RC QP's transport
// options (issue 30) when it moves to RTR.
//
// uroce's ECE: vendor_id kVendorId (what ibv_query_device reports),
// options bit 0 kEceSelectiveRepeat. A QP offers what UROCE_TRANSPORT asks
// ("sr") and the transport runs (ece_supported); ibv_set_ece records what
// was agreed, which librdmacm gives it from the peer's REQ or REP
// (lib/rdmacm). Another vendor's id, or none (0), agrees to nothing: the QP
// runs plain RoCEv2. Options this build does not run are dropped, as a
// provider keeps only what its device does; ibv_query_ece then shows what
// is left.
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

// UROCE_TRANSPORT, read once: the options, or the one-line reason it is refused.
struct EnvTransport {
  TransportOptions options;
  bool valid = true;
  std::string message;
};

const EnvTransport& env_transport() {
  static const EnvTransport parsed = [] {
    EnvTransport e;
    if (const char* t = std::getenv("UROCE_TRANSPORT"); t != nullptr && *t != '\0') {
      e.valid = parse_transport(t, e.options, e.message);
    }
    return e;
  }();
  return parsed;
}

bool is_default(const TransportOptions& t) { return !t.selective_repeat && t.spray_paths == 1 && t.bdp_packets == 0; }

// The options a QP offers before ibv_set_ece: what UROCE_TRANSPORT asks
// that this build runs.
std::uint32_t ece_offer() {
  const EnvTransport& e = env_transport();
  return e.valid && e.options.selective_repeat ? kEceSelectiveRepeat & ece_supported() : 0;
}

bool parse_number(std::string_view v, std::uint32_t max, std::uint32_t& n) {
  const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
  return !v.empty() && r.ec == std::errc() && r.ptr == v.data() + v.size() && n <= max;
}

}  // namespace

std::uint32_t ece_supported() {
  return QueuePair::transport_capabilities().selective_repeat ? kEceSelectiveRepeat : 0;
}

bool parse_transport(std::string_view text, TransportOptions& options, std::string& message) {
  const std::string whole(text);
  TransportOptions t;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    std::uint32_t n = 0;
    if (item == "sr") {
      t.selective_repeat = true;
    } else if (item == "gbn") {
      t.selective_repeat = false;
    } else if (item.substr(0, 6) == "spray=" && parse_number(item.substr(6), 64, n) && n >= 1) {
      t.spray_paths = static_cast<std::uint8_t>(n);
    } else if (item.substr(0, 4) == "bdp=" && parse_number(item.substr(4), UINT32_MAX, n)) {
      t.bdp_packets = n;
    } else {
      message = "uroce: UROCE_TRANSPORT must be sr or gbn, then ,spray=N (1-64) and ,bdp=N (packets), like "
                "sr,spray=4,bdp=64; not '" + whole + "'";
      return false;
    }
  }
  if (t.spray_paths > 1 && !t.selective_repeat) {
    message = "uroce: UROCE_TRANSPORT '" + whole + "': spray=N above 1 needs sr (sprayed packets arrive out of order)";
    return false;
  }
  const TransportOptions can = QueuePair::transport_capabilities();
  if ((t.selective_repeat && !can.selective_repeat) || t.spray_paths > can.spray_paths) {
    message = "uroce: UROCE_TRANSPORT '" + whole + "': this build's transport does not run selective repeat "
              "or spraying (bdp=N it does)";
    return false;
  }
  options = t;
  return true;
}

int apply_transport(Qp& qp) {
  if (qp.ex.qp_base.qp_type != IBV_QPT_RC || qp.qp->state() != IBV_QPS_INIT) return 0;
  const EnvTransport& e = env_transport();
  if (!e.valid) {
    static std::once_flag said;
    std::call_once(said, [&] { std::fprintf(stderr, "%s\n", e.message.c_str()); });
    return EINVAL;
  }
  TransportOptions t = e.options;
  // Once ECE has spoken, the agreement decides selective repeat; a peer
  // that did not agree gets plain RoCEv2, on one path.
  if (qp.ece_set) t.selective_repeat = (qp.ece_options & kEceSelectiveRepeat) != 0;
  if (e.options.selective_repeat && qp.ex.qp_base.srq != nullptr) {
    // Selective repeat numbers receives in the QP's own queue: a QP on an
    // SRQ runs go-back-N (and offers nothing in ECE), said once.
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr, "uroce: QP %u receives from an SRQ: selective repeat does not run there: go-back-N\n",
                   qp.qp->qp_num());
    });
    t.selective_repeat = false;
  } else if (e.options.selective_repeat && !t.selective_repeat) {
    // Asked for and not agreed (a peer without ECE, of another vendor, or
    // declining): said once a process, so that the program's user, and
    // tools/interop-rxe-verbs.sh, see what the connection runs.
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr,
                   "uroce: QP %u: the peer did not agree to selective repeat (ECE): go-back-N (said for the "
                   "first such QP only)\n",
                   qp.qp->qp_num());
    });
  }
  if (!t.selective_repeat) t.spray_paths = 1;
  if (is_default(t) && is_default(qp.qp->transport_options())) return 0;
  if (const int rc = qp.qp->set_transport_options(t); rc != 0) {
    std::fprintf(stderr, "uroce: QP %u: transport options refused: %s\n", qp.qp->qp_num(),
                 qp.ctx->ctx->last_error().c_str());
    return rc;
  }
  return 0;
}

}  // namespace uroce::ibverbs

using uroce::ibverbs::Qp;

extern "C" {

// The QP's ECE: uroce's vendor id, and what ibv_set_ece recorded or, before
// it, what the QP offers. 0, or EINVAL (no QP or ece).
int ibv_query_ece(ibv_qp* ibv_qp, ibv_ece* ece) {
  Qp* qp = uroce::ibverbs::qp_of(ibv_qp);
  if (qp == nullptr || ece == nullptr) return EINVAL;
  ece->vendor_id = uroce::ibverbs::kVendorId;
  ece->options = qp->ece_set ? qp->ece_options : ibv_qp->srq != nullptr ? 0 : uroce::ibverbs::ece_offer();
  ece->comp_mask = 0;
  return 0;
}

// Records what was agreed, before the QP moves to RTR, which applies it.
// 0; EINVAL: no QP or ece, a comp_mask (none is defined), or the QP past
// INIT (its options are set at RTR). Another vendor's id (or 0) records no
// option: plain RoCEv2. Bits this build does not run are dropped, and a
// QP other than RC takes none (its transport has no options).
int ibv_set_ece(ibv_qp* ibv_qp, ibv_ece* ece) {
  Qp* qp = uroce::ibverbs::qp_of(ibv_qp);
  if (qp == nullptr || ece == nullptr || ece->comp_mask != 0) return EINVAL;
  const ibv_qp_state state = qp->qp->state();
  if (state != IBV_QPS_RESET && state != IBV_QPS_INIT) return EINVAL;
  const bool ours = ece->vendor_id == uroce::ibverbs::kVendorId && ibv_qp->qp_type == IBV_QPT_RC;
  qp->ece_options = ours ? ece->options & uroce::ibverbs::ece_supported() : 0;
  qp->ece_set = true;
  return 0;
}

}  // extern "C"
