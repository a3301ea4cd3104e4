// The service protocol between uroced and its clients (DESIGN.md, "Stock
// programs and the service"): control messages on a UNIX SOCK_SEQPACKET
// socket, one fixed-size Request and one Reply per call, with memory files
// and eventfds passed by SCM_RIGHTS; the data path in shared memory, one
// ring per direction (shm_ring.h), never a system call per work request or
// completion.
//
// Handles name a client's own objects and nothing else: the daemon keeps a
// table per client, so a handle of another client is simply unknown there
// (EINVAL "no such ..."). Everything a client writes, on the socket or into
// shared memory, is checked by the daemon before use.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace uroce::service {

// Bumped when a message or a ring slot changes shape.
// 4: SIDR (kCmSidrRequest, CmEvent's sidr and qkey) and a program's own QPs
// on rdma_cm (kCmInitQpAttr, kCmEstablish, CmConnect's and CmAccept's
// program_qp and srq). 5: StatsReply lists SRQs and AHs.
// 6: reg_mr of an on-demand region (RegMr::addr, no pieces).
// 6: device memory (kAllocDm, kFreeDm, kRegDmMr, HelloReply's max_dm_size).
// 6: memory windows (kAllocMw, kDeallocMw; BIND_MW and LOCAL_INV send slots).
// 6: CQ slots carry a completion timestamp (CqSlot), kReregMr, kResizeCq, kQueryClock.
// 7: XRC (kOpenXrcd, kCloseXrcd; CreateSrq's xrcd and cq, CreateSrqReply's
//    srqn, CreateQp's xrcd; an XRC_SEND slot's remote_qpn is its remote_srqn).
// 8: kSetTransportOptions; CmConnect, CmAccept and CmEvent carry ECE (ece_vendor_id, ece_options),
//    CmReject a reason.
// 9: QueryQpReply carries the QP's transport options (the daemon's CM sets
//    selective repeat when ECE agrees on it); QpCountersReply holds 128
//    counters (40 cut the last ones off).
// 10: CmAccept's timeout may be 0xff (cm::kTimeoutOfReq): the REQ's, as
//    librdmacm accepts unless RDMA_OPTION_ID_ACK_TIMEOUT was set.
inline constexpr std::uint32_t kProtocolVersion = 10;
inline constexpr std::uint32_t kMaxSge = 16;
inline constexpr std::uint32_t kMaxInline = 256;
inline constexpr std::size_t kMessageText = 240;  // Reply::message
// Memory files of one region (RegMr::piece), and so descriptors of one message.
inline constexpr std::uint32_t kMaxPieces = 16;
inline constexpr int kMaxFds = static_cast<int>(kMaxPieces);

enum class Op : std::uint32_t {
  kHello = 1,    // -> HelloReply
  kAllocPd,      // -> handle
  kDeallocPd,    // handle
  kRegMr,        // RegMr + one memory file per piece (none on demand) -> RegMrReply
  kDeregMr,      // handle
  kCreateCq,     // CreateCq -> handle + ring file + eventfd
  kDestroyCq,    // handle
  kCreateQp,     // CreateQp -> CreateQpReply + ring file
  kModifyQp,     // ModifyQp
  kQueryQp,      // handle -> QueryQpReply
  kDestroyQp,    // handle
  kQpCounters,   // handle -> counters (QpCountersReply)
  kCreateSrq,    // CreateSrq -> handle + ring file + eventfd (IBV_EVENT_SRQ_LIMIT_REACHED)
  kModifySrq,    // ModifySrq
  kQuerySrq,     // handle -> QuerySrqReply
  kDestroySrq,   // handle
  kCreateAh,     // CreateAh: the client names it (its number, in every UD send slot)
  kDestroyAh,    // handle: the AH's number
  kStats,        // -> StatsReply: the daemon's totals and clients (uroced --stats, tests)
  // rdma_cm through the daemon's communication manager (QP1 is the
  // daemon's; cm_relay.h). QPs are named by number, and must be this
  // process's (the socket's peer pid): a second connection of the same
  // process carries these, so that its events never wait behind verbs calls.
  kCmOpen,       // -> an eventfd, signalled while events wait for kCmEvent
  kCmListen,     // CmListen: EADDRINUSE if anyone holds the service ID
  kCmUnlisten,   // CmListen (service_id)
  kCmConnect,    // CmConnect -> handle: the connection's comm ID
  kCmAccept,     // CmAccept
  kCmReject,     // CmReject
  kCmDisconnect, // handle: comm ID
  kCmEvent,      // -> CmEvent, the oldest queued; ENOENT when none
  kCmSidrRequest,  // CmSidrRequest -> handle: the request's ID (rdma_connect of a UD ID);
                   // its answer is accepted or rejected with kCmAccept, kCmReject
  kCmInitQpAttr, // CmInitQpAttr -> CmInitQpAttrReply (rdma_init_qp_attr)
  kCmEstablish,  // handle: comm ID, after a kConnectResponse (rdma_establish: the RTU)
  // Device memory: a memory file the daemon makes, owns and maps, passed to
  // the client that asked (and to no other) to map too.
  kAllocDm,      // AllocDm -> handle + the memory file
  kFreeDm,       // handle: EBUSY while regions are on it
  kRegDmMr,      // RegDmMr -> handle + RegMrReply (a region, gone with kDeregMr)
  kAllocMw,      // AllocMw (handle: the PD) -> handle + RegMrReply's rkey
  kDeallocMw,    // handle: the window
  kReregMr,      // handle: the region; ReregMr (+ one memory file per piece with
                 // IBV_REREG_MR_CHANGE_TRANSLATION) -> RegMrReply, the same keys
  kResizeCq,     // handle: the CQ; CreateCq (cqe) -> CreateCqReply + a new ring file,
                 // the completions that waited in the old ring first in it
  kQueryClock,   // -> ClockReply: the engines' clock and the wall clock, read together
  kOpenXrcd,     // -> handle: a new XRC domain of this client's
  kCloseXrcd,    // handle: EBUSY while its XRC SRQs or target QPs remain
  kSetTransportOptions,  // handle: the QP; SetTransportOptions (QueuePair::set_transport_options)
};

struct SetTransportOptions {
  std::uint8_t selective_repeat = 0;
  std::uint8_t spray_paths = 1;
  std::uint32_t bdp_packets = 0;
};

struct AllocMw {
  std::uint32_t type = 0;  // ibv_mw_type
};

struct Hello {
  std::uint32_t version = kProtocolVersion;
};

// A region's pages, in the client's address order: each piece whole pages
// of one memory file (the descriptors passed with the request, one per
// piece, in the same order). The daemon maps the pieces side by side, as
// the client sees them; the region starts `offset` bytes into the first.
struct MemoryPiece {
  std::uint64_t file_offset = 0;
  std::uint64_t bytes = 0;
};
struct RegMr {
  std::uint32_t pd = 0;
  std::int32_t access = 0;
  std::uint64_t iova = 0;    // what SGEs and peers use (the client's address for ibv_reg_mr)
  std::uint64_t length = 0;
  std::uint64_t offset = 0;  // where the region starts in the pieces laid side by side
  std::uint32_t pieces = 0;
  MemoryPiece piece[kMaxPieces];
  // On-demand (access has IBV_ACCESS_ON_DEMAND): no pieces; the region is
  // [addr, addr + length) of the client's own address space (addr 0 and
  // length UINT64_MAX: all of it), never mapped by the daemon, which reaches
  // it through the client's /proc/self/mem: one descriptor, opened read-write
  // and passed with the client's first on-demand region (checked to be the
  // socket peer's own; later ones may pass it again or not at all).
  std::uint64_t addr = 0;
};

struct CreateCq {
  std::uint32_t cqe = 0;
  std::uint32_t timestamps = 0;  // 1: completions stamped (CqSlot::completion_ts)
};

// ibv_rereg_mr: `flags` IBV_REREG_MR_CHANGE_*; `region.pd` the new PD's
// handle (CHANGE_PD), `region.access` (CHANGE_ACCESS), the rest of `region`
// the new memory as RegMr has it (CHANGE_TRANSLATION).
struct ReregMr {
  std::uint32_t flags = 0;
  RegMr region;
};

struct AllocDm {
  std::uint64_t length = 0;
};
// Bytes [offset, offset + length) of device memory `dm`, zero-based.
struct RegDmMr {
  std::uint32_t pd = 0;
  std::uint32_t dm = 0;
  std::int32_t access = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

struct CreateQp {
  std::uint32_t pd = 0;
  std::uint32_t send_cq = 0;
  std::uint32_t recv_cq = 0;
  std::uint32_t qp_type = IBV_QPT_RC;
  std::uint32_t sq_sig_all = 0;
  ibv_qp_cap cap{};
  std::uint32_t srq = 0;  // the SRQ it receives from (its handle); 0: a receive queue of its own
  std::uint32_t xrcd = 0;  // IBV_QPT_XRC_RECV: its XRC domain (handle)
};

struct CreateSrq {
  std::uint32_t pd = 0;
  std::uint32_t max_wr = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t srq_limit = 0;
  std::uint32_t xrcd = 0;  // an XRC SRQ: its domain and the CQ it completes on (handles); 0: basic
  std::uint32_t cq = 0;
};

struct ModifySrq {
  std::uint32_t srq = 0;
  std::int32_t mask = 0;  // IBV_SRQ_LIMIT only (no resizing)
  ibv_srq_attr attr{};
};

// Address handles are numbered by the client, below kMaxAhNumber (its
// library's own handle of the AH, unique in its process): a UD send slot
// names one by that number, and the daemon looks it up in the client's own
// table, so a number is only ever one of the asking client's AHs.
inline constexpr std::uint32_t kMaxAhNumber = 1u << 15;
struct CreateAh {
  std::uint32_t pd = 0;
  std::uint32_t ah = 0;  // 1 .. kMaxAhNumber - 1, not in use by this client
  ibv_ah_attr attr{};
};

struct ModifyQp {
  std::uint32_t qp = 0;
  std::int32_t mask = 0;
  ibv_qp_attr attr{};
};

// The CM's requests. Private data as IBTA's messages carry it (REQ 92
// bytes, REP 196, REJ 148).
struct CmListen {
  std::uint64_t service_id = 0;
  std::uint32_t backlog = 0;
};
struct CmConnect {
  std::uint32_t qpn = 0;        // the QP to connect: RC, RESET or INIT, of this process
  ibv_gid remote_gid{};
  std::uint64_t service_id = 0;
  std::uint32_t mtu = IBV_MTU_1024;
  std::uint8_t sgid_index = 1;
  std::uint8_t responder_resources = 16, initiator_depth = 16;
  std::uint8_t retry_count = 7, rnr_retry_count = 7, timeout = 14;
  std::uint8_t private_data_len = 0;
  std::uint8_t private_data[92] = {};
  // 1: the program moves that QP itself (rdma_connect with qp_num and no
  // rdma_create_qp): the daemon checks it is this process's, names it to
  // the peer, and never moves it.
  std::uint8_t program_qp = 0;
  std::uint8_t srq = 0;         // with program_qp: it receives from an SRQ
  std::uint32_t ece_vendor_id = 0, ece_options = 0;  // cm::ConnectParams's
};
struct CmAccept {
  std::uint32_t comm_id = 0;
  std::uint32_t qpn = 0;
  std::uint8_t responder_resources = 16, initiator_depth = 16, rnr_retry_count = 7, timeout = 14;
  std::uint8_t private_data_len = 0;
  std::uint8_t private_data[196] = {};
  std::uint8_t program_qp = 0, srq = 0;  // as in CmConnect
  std::uint32_t ece_vendor_id = 0, ece_options = 0;  // cm::AcceptParams's
};
struct CmReject {
  std::uint32_t comm_id = 0;
  std::uint8_t private_data_len = 0;
  std::uint8_t private_data[148] = {};
  std::uint16_t reason = 0;  // 0 or 28: consumer reject; 35: vendor option not supported (rdma_reject_ece)
};
// A SIDR_REQ (IBTA 12.11): 216 bytes of private data, no QP of ours.
struct CmSidrRequest {
  ibv_gid remote_gid{};
  std::uint64_t service_id = 0;
  std::uint8_t private_data_len = 0;
  std::uint8_t private_data[216] = {};
};
struct CmInitQpAttr {
  std::uint32_t comm_id = 0;
  std::uint32_t qp_state = 0;  // IBV_QPS_INIT, RTR or RTS
};

struct Request {
  Op op{};
  std::uint32_t handle = 0;  // the object a call names, where it names one
  union {
    Hello hello;
    RegMr reg_mr;
    CreateCq create_cq;
    CreateQp create_qp;
    ModifyQp modify_qp;
    CmListen cm_listen;
    CmConnect cm_connect;
    CmAccept cm_accept;
    CmReject cm_reject;
    CmSidrRequest cm_sidr_request;
    CmInitQpAttr cm_init_qp_attr;
    CreateSrq create_srq;
    ModifySrq modify_srq;
    CreateAh create_ah;
    AllocDm alloc_dm;
    RegDmMr reg_dm_mr;
    AllocMw alloc_mw;
    ReregMr rereg_mr;
    SetTransportOptions set_transport_options;
  };
  Request() : hello{} {}
};

struct HelloReply {
  std::uint32_t client = 0;  // the daemon's number for this client (uroced --stats)
  std::uint32_t workers = 0;
  std::uint8_t mac[6] = {};
  std::uint32_t active_mtu = IBV_MTU_4096;
  ibv_gid gid[2] = {};       // the GID table: 0 link-local, 1 the port's address
  // DeviceLimits, field by field (include/uroce/verbs.h)
  std::uint32_t max_qp = 0, max_qp_wr = 0, max_sge = 0, max_inline_data = 0, max_cqe = 0, max_mr = 0;
  std::uint32_t max_qp_rd_atom = 0, max_qp_init_rd_atom = 0;
  std::uint64_t max_dm_size = 0;  // device memory this client may hold at once
};

struct RegMrReply {
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
};

struct CreateQpReply {
  std::uint32_t qpn = 0;
  ibv_qp_cap cap{};          // what the QP got (at least what was asked)
  std::uint64_t sq_offset = 0, rq_offset = 0;  // the rings in the file passed
  std::uint32_t sq_slots = 0, rq_slots = 0;
  std::uint64_t file_size = 0;
};

struct QueryQpReply {
  ibv_qp_attr attr{};
  ibv_qp_cap cap{};
  std::uint32_t sq_sig_all = 0;
  // TransportOptions as the QP runs them.
  std::uint8_t selective_repeat = 0;
  std::uint8_t spray_paths = 1;
  std::uint32_t bdp_packets = 0;
};

struct CreateCqReply {
  std::uint32_t slots = 0;
  std::uint64_t file_size = 0;
};

struct CreateSrqReply {
  std::uint32_t max_wr = 0, max_sge = 0;  // what the SRQ got
  std::uint32_t slots = 0;
  std::uint32_t srqn = 0;  // an XRC SRQ's number (what XRC requests name)
  std::uint64_t file_size = 0;
};

struct QuerySrqReply {
  ibv_srq_attr attr{};
};

struct QpCountersReply {
  // Room for every counter of transport/counters.h (checked where the
  // daemon fills it); 40 until protocol 9, when there were already 61.
  static constexpr std::size_t kMax = 128;
  std::uint32_t count = 0;
  std::uint64_t value[kMax] = {};
};

struct StatsReply {
  std::uint32_t clients = 0, pds = 0, mrs = 0, cqs = 0, qps = 0;
  std::uint64_t mapped_bytes = 0;  // clients' memory files and rings the daemon maps
  struct Client {
    std::uint32_t id = 0;
    std::int32_t pid = 0;
    std::uint32_t uid = 0;
    std::uint32_t pds = 0, mrs = 0, cqs = 0, qps = 0;
    std::uint64_t mapped_bytes = 0;
    std::uint32_t qpn[4] = {};  // its first QPs' numbers
  };
  static constexpr std::size_t kMaxClients = 8;
  std::uint32_t listed = 0;
  Client client[kMaxClients];
  // Appended (version 4): SRQs and address handles, in all and per listed client.
  std::uint32_t srqs = 0, ahs = 0;
  std::uint32_t client_srqs[kMaxClients] = {};
  std::uint32_t client_ahs[kMaxClients] = {};
};

// One event of the daemon's CM for this client (cm::Event, what rdma_cm
// reports of it).
struct CmEvent {
  std::uint32_t type = 0;        // cm::EventType
  std::uint32_t comm_id = 0;
  std::uint64_t service_id = 0;  // kRequest: the listener's
  ibv_gid peer_gid{};            // kRequest
  std::uint16_t reason = 0;      // kRejected
  std::uint8_t active = 0;       // kEstablished, kConnectResponse: ours was the REQ (the rep fields are set)
  // kRequest: the REQ's; kEstablished (active), kConnectResponse: the REP's.
  std::uint8_t responder_resources = 0, initiator_depth = 0, flow_control = 0;
  std::uint8_t retry_count = 0, rnr_retry_count = 0, srq = 0;
  std::uint32_t qpn = 0;
  std::uint32_t remaining = 0;   // events still queued after this one
  std::uint8_t req_private_data[92] = {};  // kRequest: the REQ's, rdma_cm's header first
  std::uint16_t private_data_len = 0;
  std::uint8_t private_data[224] = {};     // as cm::Event::private_data
  // SIDR (cm::Event::sidr): kRequest of a SIDR_REQ; kEstablished with the
  // peer's UD QP in qpn and its Q_Key here; kUnreachable with the SIDR_REP's
  // status in reason.
  std::uint8_t sidr = 0;
  std::uint32_t qkey = 0;
  std::uint32_t ece_vendor_id = 0, ece_options = 0;  // cm::Event's: the peer's ECE
};

struct ClockReply {
  std::uint64_t raw_ns = 0;       // the daemon's engines' clock (what completions are stamped with)
  std::uint64_t realtime_ns = 0;  // CLOCK_REALTIME at the same moment
};

struct CmInitQpAttrReply {
  ibv_qp_attr attr{};
  std::int32_t mask = 0;
};

struct Reply {
  std::int32_t error = 0;             // 0 or an errno value
  std::uint32_t handle = 0;           // the object made
  char message[kMessageText] = {};    // why, when error != 0
  union {
    HelloReply hello;
    RegMrReply reg_mr;
    CreateCqReply create_cq;
    CreateQpReply create_qp;
    QueryQpReply query_qp;
    QpCountersReply counters;
    StatsReply stats;
    CmEvent cm_event;
    CreateSrqReply create_srq;
    QuerySrqReply query_srq;
    CmInitQpAttrReply cm_init_qp_attr;
    ClockReply clock;
  };
  Reply() : hello{} {}
};

// --- Shared-memory slots ---------------------------------------------------------------

struct WireSge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

// A send work request as the client writes it into the send ring.
// IBV_WR_BIND_MW: remote_addr, rkey (the new one), compare_add (length),
// swap (access), imm_data (the window's key), remote_qkey (the region's
// lkey, 0: none); IBV_WR_LOCAL_INV: imm_data the rkey. Inline
// data travels in the slot itself (IBV_SEND_INLINE: the SGEs' bytes, copied
// at post time as verbs promise).
struct SendSlot {
  std::uint64_t wr_id = 0;
  std::uint32_t opcode = 0;
  std::uint32_t send_flags = 0;
  std::uint32_t imm_data = 0;  // big-endian, as in ibv_send_wr
  std::uint32_t num_sge = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t inline_len = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  WireSge sge[kMaxSge];
  std::uint8_t inline_data[kMaxInline];
  // UD (ibv_send_wr.wr.ud): the address handle's number (CreateAh), the
  // destination QP and its Q_Key.
  std::uint32_t ah = 0;
  std::uint32_t remote_qpn = 0;
  std::uint32_t remote_qkey = 0;
  std::uint32_t pad = 0;
};

struct RecvSlot {
  std::uint64_t wr_id = 0;
  std::uint32_t num_sge = 0;
  std::uint32_t pad = 0;
  WireSge sge[kMaxSge];
};

static_assert(sizeof(SendSlot) == 584, "SendSlot is part of the protocol");
static_assert(sizeof(RecvSlot) == 272, "RecvSlot is part of the protocol");
// A completion as the daemon writes it into a CQ's ring: with the time its
// engine completed the work (the daemon's clock, ClockReply::raw_ns; 0 for
// a CQ made without timestamps).
struct CqSlot {
  ibv_wc wc;
  std::uint64_t completion_ts = 0;
};
static_assert(sizeof(ibv_wc) == 48 && sizeof(CqSlot) == 56, "CqSlot is part of the protocol");

}  // namespace uroce::service
