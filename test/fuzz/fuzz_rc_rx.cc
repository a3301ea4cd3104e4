// libFuzzer harness: the receive path of a live RC, UC or UD QP. Each input gets a
// fresh QP and region on one long-lived device on a ScriptedPort (virtual
// clock; opening a device per input would cost 5 ms of table set-up under
// ASan), connected to a peer that the fuzzer plays: receives posted, a region open for remote
// access with a type 2 memory window bound over its first half, and a
// SEND, a WRITE, a READ, an atomic and an ATOMIC WRITE outstanding, so that
// requests and responses both have something to hit. The input is a list of
// frames, each
//
//   [flags] [n] [4n bytes: BTH, extension headers, payload and pad]
//
// wrapped in Ethernet/IPv4/UDP from the peer and given a valid ICRC, so it
// gets past the parser to the transport. Flags: bit 0 keeps the fuzzed
// destination QP (otherwise ours), bit 1 sets the RETH/AtomicETH rkey to
// our region's and an IETH's to our window's (SEND with Invalidate), bit 2 makes the PSN relative to the one the QP expects
// (request) or sent (response), bit 3 advances the clock 100 ms first
// (retransmit and RNR timers), bit 4 runs the engine before this frame,
// bit 5 carries it in an 802.1Q tag (its VLAN ID from the PSN).
// Bit 6 of the first frame's flags connects this input's QP over IPv6
// (link-local GIDs, index 0) and wraps every frame in IPv6 instead; bit 7
// makes it a UC QP (a SEND and a WRITE outstanding), or with bit 5 (not 4)
// too a UD QP (Q_Key 0x11111111, one datagram sent to the peer), or with bit 4
// (not 5) XRC: an XRC target QP with the receives on an XRC SRQ of its
// domain, and an XRC initiator QP with a SEND, a WRITE, a READ, an atomic
// and an ATOMIC WRITE outstanding; requests go to the target, responses
// to the initiator, and bit 1 also names our SRQ in an XRCETH. Bits 7, 5
// and 4 together make it an RC QP in selective repeat (docs/transport.md;
// path MTU 256, so that a frame holds a whole packet of a multi-packet
// message) with RC's work outstanding; its frames carry the mode's opcodes
// (0xc0-0xdd) with their SRETH and SACKETH as fuzzed, except that bit 1
// also moves a RETH's or AtomicETH's address into the 8 KiB from 2 KiB
// before our region to 2 KiB past its end (across its edges, into the guard
// bytes, whatever the offsets add), and bit 2 makes an SRETH's first PSN and a SACKETH's
// expected PSN relative as the BTH's. Inputs whose
// length is a multiple of 3 reach the engine in segments, the first of
// 14-110 bytes (cut anywhere in the headers), as multi-segment mbufs do.
//
// Checked besides sanitizer reports: the QP is in RTS or ERR (nothing
// else is reachable from the wire), completions are only for work requests
// we posted with a known status, a receive completed successfully holds no
// more than its buffer, and no byte outside the region moves.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../support/scripted_port.h"
#include "verbs/connect.h"
#include "wire/frame.h"
#include "wire/icrc.h"

namespace {

using namespace uroce;

class FuzzClock : public engine::Clock {
 public:
  std::uint64_t now_ns() override { return now; }
  std::uint64_t now = 1'000'000'000;
};

constexpr std::uint32_t kPeerQpn = 0x42;
constexpr std::uint32_t kSqPsn = 0x1000;
constexpr std::uint32_t kRqPsn = 0x2000;
constexpr std::size_t kRegion = 4096;
constexpr std::size_t kGuard = 2048;  // selective repeat's addresses reach 2 KiB either side
constexpr std::uint8_t kGuardByte = 0xa5;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;

void check(bool ok) {
  if (!ok) std::abort();
}

int post(QueuePair* qp, ibv_wr_opcode op, std::uint8_t* local, std::uint32_t len, std::uint32_t lkey,
         std::uint64_t wr_id, AddressHandle* ah = nullptr) {
  ibv_sge sge{reinterpret_cast<std::uint64_t>(local), len, lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (op == IBV_WR_ATOMIC_CMP_AND_SWP) {
    wr.wr.atomic.remote_addr = 0x10000;
    wr.wr.atomic.rkey = 0x77;
    wr.wr.atomic.compare_add = 1;
    wr.wr.atomic.swap = 2;
  } else if (ah != nullptr) {
    wr.wr.ud.ah = ah->ibv();
    wr.wr.ud.remote_qpn = kPeerQpn;
    wr.wr.ud.remote_qkey = 0x11111111;
  } else {
    wr.wr.rdma.remote_addr = 0x10000;
    wr.wr.rdma.rkey = 0x77;
  }
  ibv_send_wr* bad = nullptr;
  return qp->post_send(&wr, &bad);
}

// How the peer's frames travel: IPv4 (10.0.0.2 -> 10.0.0.1) or IPv6
// between the link-local GIDs, with an optional 802.1Q tag.
struct Path {
  bool ipv6 = false;
  ibv_gid ours{};
  ibv_gid peer{};
  std::optional<std::uint16_t> vlan_tci;
};

// The peer's frame carrying `transport` (BTH onwards, a multiple of 4 bytes,
// at least a BTH) to us along `path`: headers from build_headers() for a
// SEND of the same length, then the fuzzed bytes over the BTH, then the ICRC.
std::vector<std::uint8_t> wrap(const std::uint8_t* transport, std::size_t len, const Path& path) {
  wire::FrameSpec s;
  s.vlan_tci = path.vlan_tci;
  if (path.ipv6) {
    s.ip_version = 6;
    std::memcpy(s.src6.data(), path.peer.raw, 16);
    std::memcpy(s.dst6.data(), path.ours.raw, 16);
  } else {
    s.src4 = {10, 0, 0, 2};
    s.dst4 = {10, 0, 0, 1};
  }
  s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
  std::vector<std::uint8_t> out(len + 128);  // room for Ethernet, 802.1Q, IPv6 and UDP
  const wire::HeaderLayout l = wire::build_headers(s, len - sizeof(wire::Bth), out);
  check(l.header_bytes != 0 && l.pad == 0);
  const std::size_t bth = l.header_bytes - sizeof(wire::Bth);
  std::memcpy(out.data() + bth, transport, len);
  out.resize(bth + len + 4);
  const std::uint32_t icrc =
      wire::icrc_of(wire::crc32_default, std::span<const std::uint8_t>(out.data() + l.l3_offset, bth + len - l.l3_offset));
  wire::icrc_store(out.data() + bth + len, icrc);
  return out;
}

}  // namespace

// The device, built on the first input and kept: its QPs and regions are
// made and destroyed per input.
struct Fixture {
  FuzzClock clock;
  test::ScriptedPort port;
  std::unique_ptr<Context> ctx;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  Fixture() {
    port.keep_sent = false;
    PortConfig cfg;
    cfg.io = &port;
    cfg.clock = &clock;
    cfg.gid = ipv4_gid({10, 0, 0, 1});
    std::string error;
    ctx = Context::open(cfg, error);
    check(ctx != nullptr);
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(64);
    check(pd != nullptr && cq != nullptr);
  }
};

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Fixture fx;
  FuzzClock& clock = fx.clock;
  fx.port.split_rx = size % 3 == 0 ? 14 + size % 97 : 0;
  QpInitAttr init;
  init.send_cq = init.recv_cq = fx.cq;
  init.cap = ibv_qp_cap{16, 16, 2, 2, 64};
  const bool xrc = size > 0 && (data[0] & 0xb0) == 0x90;
  const bool sr = size > 0 && (data[0] & 0xb0) == 0xb0;
  if (size > 0 && (data[0] & 0x80) != 0 && !xrc && !sr) {
    init.qp_type = (data[0] & 0x20) != 0 ? IBV_QPT_UD : IBV_QPT_UC;
  }
  // XRC: `qp` is the target, `ini` the initiator.
  XrcDomain* xrcd = nullptr;
  SharedReceiveQueue* srq = nullptr;
  QueuePair* ini = nullptr;
  if (xrc) {
    xrcd = fx.ctx->open_xrcd();
    check(xrcd != nullptr);
    SrqInitAttr sa;
    sa.max_wr = 8;
    sa.max_sge = 1;
    sa.xrcd = xrcd;
    sa.cq = fx.cq;
    srq = fx.pd->create_srq(sa);
    check(srq != nullptr);
    QpInitAttr ia = init;
    ia.qp_type = IBV_QPT_XRC_SEND;
    ini = fx.pd->create_qp(ia);
    check(ini != nullptr);
    init.qp_type = IBV_QPT_XRC_RECV;
    init.xrcd = xrcd;
  }
  QueuePair* qp = fx.pd->create_qp(init);
  check(qp != nullptr);
  ConnectParams params;
  params.timeout = 10;  // 4 ms: the clock steps below expire it
  params.retry_cnt = 3;
  params.rnr_retry = 3;
  if (sr) {
    params.transport.selective_repeat = true;
    params.mtu = IBV_MTU_256;
  }
  Path path;
  path.ipv6 = size > 0 && (data[0] & 0x40) != 0;
  if (path.ipv6) {
    check(fx.ctx->query_gid(0, path.ours) == 0);
    const std::uint8_t peer_mac[6] = {0x52, 0x52, 0x52, 0x52, 0x52, 0x52};
    const wire::Ipv6Addr ll = wire::ipv6_link_local(peer_mac);
    std::memcpy(path.peer.raw, ll.data(), 16);
    params.sgid_index = 0;
  } else {
    path.peer = ipv4_gid({10, 0, 0, 2});
  }
  AddressHandle* ah = nullptr;
  if (init.qp_type == IBV_QPT_UD) {
    check(ready_ud(qp, 0x11111111, kSqPsn) == 0);
    ibv_ah_attr a{};
    a.is_global = 1;
    a.port_num = 1;
    a.grh.dgid = path.peer;
    a.grh.sgid_index = params.sgid_index;
    ah = fx.pd->create_ah(a);
    check(ah != nullptr);
  } else {
    check(connect_rc(qp, path.peer, kPeerQpn, kSqPsn, kRqPsn, params) == 0);
    if (ini != nullptr) check(connect_rc(ini, path.peer, kPeerQpn, kSqPsn, kRqPsn, params) == 0);
  }

  // The region sits between guard bytes that nothing may touch.
  std::vector<std::uint8_t> memory(kGuard + kRegion + kGuard, kGuardByte);
  std::uint8_t* region = memory.data() + kGuard;
  MemoryRegion* mr = fx.pd->reg_mr(region, kRegion, kAll);
  check(mr != nullptr);
  for (std::uint64_t i = 0; i < 4; ++i) {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(region + i * 1024), 1024, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 100 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    check(srq != nullptr ? srq->post_recv(&wr, &bad) == 0 : qp->post_recv(&wr, &bad) == 0);
  }
  // The window first: a bind runs once every WR before it has completed.
  MemoryWindow* mw = nullptr;
  std::uint32_t window_rkey = 0;
  if (init.qp_type != IBV_QPT_UD && !xrc) {
    mw = fx.pd->alloc_mw(IBV_MW_TYPE_2);
    check(mw != nullptr);
    ibv_mr verbs_mr{};
    verbs_mr.lkey = mr->lkey;
    window_rkey = (mw->rkey() & ~0xffu) | ((mw->rkey() + 1) & 0xffu);
    ibv_send_wr wr{};
    wr.wr_id = 6;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw->ibv();
    wr.bind_mw.rkey = window_rkey;
    wr.bind_mw.bind_info = ibv_mw_bind_info{&verbs_mr, reinterpret_cast<std::uint64_t>(region), kRegion / 2,
                                            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
    ibv_send_wr* bad = nullptr;
    check(qp->post_send(&wr, &bad) == 0);
    fx.ctx->progress();
  }
  QueuePair* sender = ini != nullptr ? ini : qp;
  check(post(sender, IBV_WR_SEND, region, 64, mr->lkey, 1, ah) == 0);
  if (init.qp_type != IBV_QPT_UD) check(post(sender, IBV_WR_RDMA_WRITE, region, 2000, mr->lkey, 2) == 0);
  if (init.qp_type == IBV_QPT_RC || xrc) {
    check(post(sender, IBV_WR_RDMA_READ, region + 2048, 1500, mr->lkey, 3) == 0);
    check(post(sender, IBV_WR_ATOMIC_CMP_AND_SWP, region + 4088, 8, mr->lkey, 4) == 0);
    check(post(sender, IBV_WR_ATOMIC_WRITE, region + 4080, 8, mr->lkey, 5) == 0);
  }
  fx.ctx->progress();

  std::size_t at = 0;
  while (at + 2 <= size) {
    const std::uint8_t flags = data[at];
    std::size_t len = std::size_t{data[at + 1]} * 4;
    at += 2;
    len = std::min(len, (size - at) / 4 * 4);
    if (len < sizeof(wire::Bth)) break;
    std::vector<std::uint8_t> transport(data + at, data + at + len);
    at += len;
    wire::Bth bth;
    std::memcpy(&bth, transport.data(), sizeof bth);
    const wire::OpcodeInfo& info = wire::opcode_info(bth.opcode);
    if (!(flags & 1)) bth.dest_qp.set((ini != nullptr && !info.has(wire::kRequest) ? ini : qp)->qp_num());
    if ((flags & 2) && srq != nullptr && info.offset_of(wire::ExtHdr::kXrceth) != 0 &&
        info.offset_of(wire::ExtHdr::kXrceth) + 4u <= len) {
      wire::Be32 srqn;
      srqn.set(srq->srq_num());
      std::memcpy(transport.data() + info.offset_of(wire::ExtHdr::kXrceth), &srqn, sizeof srqn);
    }
    if ((flags & 2) && info.offset_of(wire::ExtHdr::kIeth) != 0 && info.offset_of(wire::ExtHdr::kIeth) + 4u <= len) {
      wire::Be32 rkey;
      rkey.set(window_rkey);
      std::memcpy(transport.data() + info.offset_of(wire::ExtHdr::kIeth), &rkey, sizeof rkey);
    }
    if (flags & 2) {
      for (wire::ExtHdr h : {wire::ExtHdr::kReth, wire::ExtHdr::kAtomicEth}) {
        // Both carry the address at byte 0 and the rkey at byte 8.
        const std::size_t hdr = info.offset_of(h);
        if (hdr != 0 && hdr + 12 <= len) {
          wire::Be32 rkey;
          rkey.set(mr->rkey);
          std::memcpy(transport.data() + hdr + 8, &rkey, sizeof rkey);
          if (sr) {
            wire::Be64 va;
            std::memcpy(&va, transport.data() + hdr, sizeof va);
            va.set(reinterpret_cast<std::uint64_t>(region) + (va.get() & 0x1fff) - 0x800);
            std::memcpy(transport.data() + hdr, &va, sizeof va);
          }
        }
      }
    }
    if (flags & 4) {
      const std::uint32_t base = info.has(wire::kRequest) ? kRqPsn : kSqPsn;
      const auto relative = [base](wire::Be24& psn) { psn.set((base + (psn.get() & 0xff)) & 0xffffff); };
      relative(bth.psn);
      // Selective repeat: a request's message's first PSN, a SACK's expected PSN.
      const std::size_t sreth = info.offset_of(wire::ExtHdr::kSreth);
      if (sreth != 0 && sreth + sizeof(wire::Sreth) <= len) {
        wire::Sreth h;
        std::memcpy(&h, transport.data() + sreth, sizeof h);
        relative(h.first_psn);
        std::memcpy(transport.data() + sreth, &h, sizeof h);
      }
      const std::size_t sacketh = info.offset_of(wire::ExtHdr::kSacketh);
      if (sacketh != 0 && sacketh + sizeof(wire::Sacketh) <= len) {
        wire::Sacketh h;
        std::memcpy(&h, transport.data() + sacketh, sizeof h);
        relative(h.expected);
        std::memcpy(transport.data() + sacketh, &h, sizeof h);
      }
    }
    std::memcpy(transport.data(), &bth, sizeof bth);
    if (flags & 8) clock.now += 100'000'000;
    if (flags & 16) fx.ctx->progress();
    // VLAN IDs 1..4094 (0 and 4095 are reserved, and build_headers refuses them).
    path.vlan_tci = (flags & 0x20) ? std::optional<std::uint16_t>((3u << 13) | (1 + bth.psn.get() % 4094))
                                   : std::nullopt;
    fx.port.inbox.push_back(wrap(transport.data(), len, path));
  }
  for (int i = 0; i < 4; ++i) {
    fx.ctx->progress();
    clock.now += 10'000'000;
  }

  for (QueuePair* q : {qp, ini}) {
    if (q == nullptr) continue;
    const ibv_qp_state state = q->state();
    check(state == IBV_QPS_RTS || state == IBV_QPS_ERR);
  }
  ibv_wc wc[16];
  int n;
  int completions = 0;
  while ((n = fx.cq->poll(16, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      check(wc[i].status <= IBV_WC_TM_RNDV_INCOMPLETE);
      check((wc[i].wr_id >= 1 && wc[i].wr_id <= 6) || (wc[i].wr_id >= 100 && wc[i].wr_id <= 103));
      // A receive (1024 bytes, a UD one's GRH included) never holds more.
      check(wc[i].wr_id < 100 || wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len <= 1024);
    }
    completions += n;
  }
  check(n == 0 && completions <= 10);
  check(fx.pd->destroy_qp(qp) == 0);
  if (ini != nullptr) check(fx.pd->destroy_qp(ini) == 0);
  if (srq != nullptr) check(fx.pd->destroy_srq(srq) == 0);
  if (xrcd != nullptr) check(fx.ctx->close_xrcd(xrcd) == 0);
  if (mw != nullptr) check(fx.pd->dealloc_mw(mw) == 0);
  check(fx.pd->dereg_mr(mr) == 0);
  if (ah != nullptr) check(fx.pd->destroy_ah(ah) == 0);
  fx.port.inbox.clear();
  fx.ctx->progress();
  check(fx.cq->poll(16, wc) == 0);  // nothing completes for a destroyed QP
  for (std::size_t i = 0; i < kGuard; ++i) check(memory[i] == kGuardByte && memory[kGuard + kRegion + i] == kGuardByte);
  return 0;
}
