// What librdmacm's files share beside rdma_cma.h: the error convention and
// what rdma_create_ep keeps on an ID for rdma_get_request and rdma_connect
// (rdmacm.cc holds the IDs; endpoint.cc builds rdma-core's synchronous
// helpers on the public calls and these).
#pragma once

#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>

namespace uroce::rdmacm {

// The local ACK timeout of an active side's QP, and of its REQ, unless
// RDMA_OPTION_ID_ACK_TIMEOUT says otherwise: 4.096 us * 2^19, about 2.1 s.
// Linux's rdma_cm gives a RoCE path a packet life time of 18 and its CM adds
// one (Soft-RoCE's REQs in rping.pcap and ib_write_bw_rdma_cm.pcap carry
// 19; kernels after 6.1 use 16, so 17). The passive side takes the REQ's
// (cm::kTimeoutOfReq). Programs on rdma_cm count on this: perftest -R sets
// no timeout of its own, and 67 ms (ibv's usual 14) gave up on a slow peer.
inline constexpr std::uint8_t kRoceAckTimeout = 19;

// UROCE_RDMACM_DEBUG: one line on stderr per failed call and per REQ sent.
bool debug();
// UROCE_COUNTERS set (and not 0): a connection that ends unreachable also
// says why, in one line on stderr, as under debug().
bool counters_wanted();
// A failed call: errno `err` and -1, as librdmacm's (a line if debug()).
int fail_in(const char* where, int err);
#define fail(err) ::uroce::rdmacm::fail_in(__func__, err)

// Whether `id` exists and is synchronous (made with no channel, or a
// request of a synchronous listener).
bool is_synchronous(rdma_cm_id* id);
// A passive endpoint's QP attributes, for the QP of each request it takes.
void keep_qp_attr(rdma_cm_id* id, const ibv_qp_init_attr& attr);
bool kept_qp_attr(rdma_cm_id* id, ibv_qp_init_attr& attr);
// rdma_addrinfo's connect data, sent by the next rdma_connect before the
// caller's private data.
void keep_connect_data(rdma_cm_id* id, const void* data, std::size_t len);

// ECE (ece.cc). What a REQ or REP of `qp` carries: its ibv_query_ece; with
// no QP, `set` (rdma_set_local_ece's; vendor_id 0: none).
ibv_ece local_ece(ibv_qp* qp, const ibv_ece& set);
// The connection is made: `qp`'s ECE becomes what it offered that the
// peer's `remote` (its REQ or REP) agreed to, as ibv_query_ece reports.
void record_agreed_ece(ibv_qp* qp, const ibv_ece& remote);

}  // namespace uroce::rdmacm
