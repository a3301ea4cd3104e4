#include "sim/sim_pair.h"

#include "engine/engine.h"

namespace uroce::sim {
namespace {

constexpr std::uint8_t kMacA[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x0a};
constexpr std::uint8_t kMacB[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x0b};

ibv_gid v4_gid(std::uint8_t last) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = 10;
  g.raw[13] = 99;
  g.raw[14] = 0;
  g.raw[15] = last;
  return g;
}

std::unique_ptr<Context> make(engine::PacketIo& io, engine::Clock& clock, const std::uint8_t mac[6], std::uint8_t ip,
                              std::uint64_t seed) {
  PortConfig port;
  port.io = &io;
  port.clock = &clock;
  std::copy(mac, mac + 6, port.mac);
  port.gid = v4_gid(ip);
  port.seed = seed;
  std::string error;
  return Context::open(port, error);
}

}  // namespace

int connect_rc(QueuePair* qp, const ibv_gid& remote_gid, std::uint32_t remote_qpn, std::uint32_t send_psn,
               std::uint32_t recv_psn, const ConnectParams& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = p.access;
  if (int rc = qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return rc;
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = recv_psn;
  a.max_dest_rd_atomic = p.max_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = remote_gid;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (int rc = qp->modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return rc;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.sq_psn = send_psn;
  a.max_rd_atomic = p.max_rd_atomic;
  return qp->modify(a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

SimPair::SimPair(std::uint64_t seed, Impairments a_to_b, Impairments b_to_a)
    : link(clock, seed, kMacA, kMacB, a_to_b, b_to_a),
      a(make(link.port(0), clock, kMacA, 1, seed)),
      b(make(link.port(1), clock, kMacB, 2, seed + 1)) {}

int SimPair::connect(QueuePair* qa, QueuePair* qb, const ConnectParams& p) {
  if (int rc = connect_rc(qa, b->gid(), qb->qp_num(), p.psn_a, p.psn_b, p)) return rc;
  return connect_rc(qb, a->gid(), qa->qp_num(), p.psn_b, p.psn_a, p);
}

bool SimPair::step() {
  if (a->progress() + b->progress() > 0) return true;
  std::uint64_t next = 0;
  for (std::uint64_t t : {link.next_delivery_ns(), a->engine().next_timer_ns(), b->engine().next_timer_ns()}) {
    if (t != 0 && (next == 0 || t < next)) next = t;
  }
  if (next == 0) return false;
  if (next <= clock.now_ns()) clock.advance(1);
  else clock.advance_to(next);
  return true;
}

}  // namespace uroce::sim
