// QP control path: creation, attribute changes, the error state and flushes.
// Posting work requests and the completion ring are in queues.cc.
#include <algorithm>
#include <cstring>

#include "transport/psn.h"
#include "transport/qp.h"
#include "transport/rules.h"

namespace uroce::transport {

void qp_init(Qp& qp, std::uint32_t qpn, std::uint64_t pd, const QpCaps& caps, CompletionRing* send_cq,
             CompletionRing* recv_cq, ibv_qp_type type) {
  qp.qpn = qpn;
  qp.type = type;
  qp.pd = pd;
  qp.caps = caps;
  qp.send_cq = send_cq;
  qp.recv_cq = recv_cq;
  qp.sq.init(std::max<std::uint32_t>(caps.max_send_wr, 1));
  qp.rq.init(std::max<std::uint32_t>(caps.max_recv_wr, 1));
  qp.inline_buf.assign(static_cast<std::size_t>(qp.sq.capacity()) * std::max<std::uint32_t>(caps.max_inline_data, 1), 0);
  qp.ud_dest.assign(type == IBV_QPT_UD ? qp.sq.capacity() : 0, UdDest{});
  qp.state = IBV_QPS_RESET;
  qp.app_state.store(IBV_QPS_RESET, std::memory_order_release);
  qp.attr = ibv_qp_attr{};
  qp.attr.qp_state = IBV_QPS_RESET;
  qp.attr.path_mtu = IBV_MTU_1024;
}

namespace {

void reset_queues(Qp& qp) {
  qp.sq_posted = qp.req_next = qp.comp_next = 0;
  qp.rq_posted = qp.rq_next = 0;
  qp.sq_retired = qp.rq_retired = 0;
  qp.srq_held = false;  // a WQE taken from the SRQ for a message cut short is gone, as RESET discards work
  qp.sq.reset();
  qp.rq.reset();
  qp.req = Qp::Requester{};
  qp.comp = Qp::Completer{};
  std::vector<ResponderResource> resources = std::move(qp.resp.resources);
  ring::Slots<Response> out = std::move(qp.resp.out);
  qp.comp.window = window_cap(qp);
  qp.resp = Qp::Responder{};
  qp.resp.resources = std::move(resources);
  qp.resp.out = std::move(out);
  for (auto& r : qp.resp.resources) r = ResponderResource{};
  if (qp.sr != nullptr) {
    sr_reset_responder(*qp.sr, 0);
    sr_reset_requester(*qp.sr, 0);
  }
}

void push_flush(CompletionRing* cq, std::uint64_t wr_id, std::uint32_t qpn, ibv_wc_opcode opcode) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  wc.opcode = opcode;
  wc.qp_num = qpn;
  if (cq != nullptr) cq->push(wc);
}

}  // namespace

void qp_apply(Qp& qp, const ibv_qp_attr& attr, int mask, ibv_qp_state next, const std::uint8_t peer_mac[6],
              const std::uint8_t local_mac[6], const ibv_gid& local_gid, const cc::DcqcnParams* dcqcn,
              const cc::DelayParams* delay) {
  if (mask & IBV_QP_ACCESS_FLAGS) qp.attr.qp_access_flags = attr.qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) qp.attr.pkey_index = attr.pkey_index;
  if (mask & IBV_QP_PORT) qp.attr.port_num = attr.port_num;
  if (mask & IBV_QP_PATH_MTU) {
    qp.attr.path_mtu = attr.path_mtu;
    qp.mtu = 128u << attr.path_mtu;
  }
  if (mask & IBV_QP_DEST_QPN) qp.attr.dest_qp_num = attr.dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) {
    qp.attr.rq_psn = attr.rq_psn;
    qp.resp.psn = attr.rq_psn & kPsnMask;
    if (qp.sr != nullptr) sr_reset_responder(*qp.sr, qp.resp.psn);
  }
  if (mask & IBV_QP_SQ_PSN) {
    qp.attr.sq_psn = attr.sq_psn;
    qp.req.psn = qp.req.high_psn = qp.comp.psn = attr.sq_psn & kPsnMask;
    if (qp.sr != nullptr) sr_reset_requester(*qp.sr, qp.req.psn);
  }
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    qp.attr.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    const std::uint32_t n = std::max<std::uint32_t>(attr.max_dest_rd_atomic, 1);
    qp.resp.resources.assign(n, ResponderResource{});
    qp.resp.next_resource = 0;
    // Responses queue in PSN order; ACKs between READs coalesce, so twice the
    // resources plus a few ACK/NAK slots always suffice.
    qp.resp.out.init(2 * n + 8);
    qp.resp.out_head = qp.resp.out_tail = 0;
  }
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp.attr.max_rd_atomic = attr.max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) qp.attr.min_rnr_timer = attr.min_rnr_timer;
  if (mask & IBV_QP_QKEY) qp.attr.qkey = attr.qkey;
  if (mask & IBV_QP_TIMEOUT) qp.attr.timeout = attr.timeout;
  if (mask & IBV_QP_RETRY_CNT) {
    qp.attr.retry_cnt = attr.retry_cnt;
    qp.comp.retry_left = attr.retry_cnt;
  }
  if (mask & IBV_QP_RNR_RETRY) {
    qp.attr.rnr_retry = attr.rnr_retry;
    qp.comp.rnr_left = attr.rnr_retry;
  }
  if (mask & IBV_QP_AV) {
    qp.attr.ah_attr = attr.ah_attr;
    const auto vlan = qp.path_spec.vlan_tci;  // a tag set on the path stays
    qp.path_spec = av_frame_spec(attr.ah_attr, peer_mac, local_mac, local_gid, qp.qpn);
    qp.path_spec.vlan_tci = vlan;
    qp_build_paths(qp, dcqcn);
  }
  qp.bth_base.pkey.set(0xffff);
  if (mask & IBV_QP_DEST_QPN) qp.bth_base.dest_qp.set(attr.dest_qp_num);

  // Congestion control's BDP cap, from the path MTU the QP now has. The
  // completer's window starts there (nothing is in flight before RTS).
  if (next == IBV_QPS_RTR && qp.state != IBV_QPS_RTR && qp.reliable()) {
    qp.cc_window = dcqcn != nullptr && dcqcn->enabled ? cc::window_packets(*dcqcn, qp.mtu) : 0;
    delay_start(qp, delay);
    qp.comp.window = window_cap(qp);
  }
  const ibv_qp_state prev = qp.state;
  qp.state = next;
  qp.app_state.store(next, std::memory_order_release);
  qp.attr.qp_state = next;
  qp.attr.cur_qp_state = next;
  if (next == IBV_QPS_RESET && prev != IBV_QPS_RESET) reset_queues(qp);
  if (next == IBV_QPS_ERR && prev != IBV_QPS_ERR) {
    qp.state = prev;  // qp_enter_error flushes from the state it leaves
    qp_enter_error(qp);
  }
}

wire::FrameSpec av_frame_spec(const ibv_ah_attr& ah, const std::uint8_t peer_mac[6], const std::uint8_t local_mac[6],
                              const ibv_gid& local_gid, std::uint32_t flow) {
  wire::FrameSpec t;
  std::memcpy(t.eth_dst.data(), peer_mac, 6);
  std::memcpy(t.eth_src.data(), local_mac, 6);
  const std::uint8_t* dgid = ah.grh.dgid.raw;
  static constexpr std::uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(dgid, kV4Mapped, 12) == 0) {
    t.ip_version = 4;
    std::memcpy(t.dst4.data(), dgid + 12, 4);
    std::memcpy(t.src4.data(), local_gid.raw + 12, 4);
    t.tos = ah.grh.traffic_class;
    t.ttl = ah.grh.hop_limit ? ah.grh.hop_limit : 64;
  } else {
    t.ip_version = 6;
    std::memcpy(t.dst6.data(), dgid, 16);
    std::memcpy(t.src6.data(), local_gid.raw, 16);
    t.traffic_class = ah.grh.traffic_class;
    t.flow_label = ah.grh.flow_label;
    t.hop_limit = ah.grh.hop_limit ? ah.grh.hop_limit : 64;
  }
  // The source port spreads flows over the fabric's ECMP paths and the
  // peer's receive queues (A17.5.1 leaves the choice to the sender).
  t.udp_src_port = static_cast<std::uint16_t>(0xc000 | (flow & 0x3fff));
  t.udp_dst_port = wire::kRoceV2Port;
  return t;
}

wire::PathHeader data_path(wire::FrameSpec data, const cc::DcqcnParams* dcqcn) {
  if (dcqcn != nullptr && dcqcn->enabled) {
    // ECN-capable transport on everything the QP sends, so congested
    // switches mark it instead of dropping it (RFC 3168).
    data.tos = static_cast<std::uint8_t>((data.tos & 0xfc) | dcqcn->data_ecn);
    data.traffic_class = static_cast<std::uint8_t>((data.traffic_class & 0xfc) | dcqcn->data_ecn);
  }
  return wire::build_path_header(data);
}

void qp_build_paths(Qp& qp, const cc::DcqcnParams* dcqcn) {
  const bool cc_on = dcqcn != nullptr && dcqcn->enabled;
  qp.path = data_path(qp.path_spec, dcqcn);
  if (qp.sr != nullptr) {
    // Spraying: path i differs from the QP's own in the UDP source port
    // only, the entropy ECMP switches hash on (RoCEv2's range, 0xc000 up).
    qp.sr->paths.clear();
    for (std::uint32_t i = 0; i < qp.options.spray_paths; ++i) {
      wire::FrameSpec spec = qp.path_spec;
      spec.udp_src_port = static_cast<std::uint16_t>(0xc000 | ((spec.udp_src_port + i * 0x0f1b) & 0x3fff));
      qp.sr->paths.push_back(data_path(spec, dcqcn));
    }
  }
  if (!cc_on) {
    qp.cnp_path = qp.path;
    return;
  }
  // A CNP travels in its own class (its DSCP, ECN-capable like the rest)
  // and, on a VLAN-tagged path, with its own 802.1p priority (PCP, the top
  // 3 bits).
  wire::FrameSpec cnp = qp.path_spec;
  const auto cnp_class = static_cast<std::uint8_t>(dcqcn->cnp_dscp << 2 | (dcqcn->data_ecn & 3));
  cnp.tos = cnp_class;
  cnp.traffic_class = cnp_class;
  if (cnp.vlan_tci) cnp.vlan_tci = static_cast<std::uint16_t>((*cnp.vlan_tci & 0x1fff) | (dcqcn->cnp_priority & 7) << 13);
  qp.cnp_path = wire::build_path_header(cnp);
}

void qp_enter_error(Qp& qp) {
  qp.state = IBV_QPS_ERR;
  // Receive WRs ring no doorbell outside ERR (qp_recv_posted): those
  // published before a poster could see ERR are taken in here (both seq_cst,
  // as the poster's store of the head and load of the state).
  qp.app_state.store(IBV_QPS_ERR, std::memory_order_seq_cst);
  rq_sync(qp, std::memory_order_seq_cst);
  qp.attr.qp_state = IBV_QPS_ERR;
  qp.comp.deadline = 0;
  qp.req.rnr_wait = false;
  for (; qp.comp_next != qp.sq_posted; ++qp.comp_next) {
    const SendWqe& w = qp.sq[qp.comp_next];
    push_flush(qp.send_cq, w.wr_id, qp.qpn, wc_opcode_for(w.opcode));
    qp.counters.add(QpCounter::flushed);
  }
  qp.req_next = qp.comp_next;
  qp.req.pkt_index = 0;
  for (; qp.rq_next != qp.rq_posted; ++qp.rq_next) {
    push_flush(qp.recv_cq, qp.rq[qp.rq_next].wr_id, qp.qpn, IBV_WC_RECV);
    qp.counters.add(QpCounter::flushed);
  }
  // On an SRQ only the WQE this QP held is its own to flush (IBTA
  // 10.3.1.1: the others stay for the SRQ's other QPs).
  if (qp.srq != nullptr && qp.srq_held) {
    qp.srq_held = false;
    push_flush(qp.recv_cq, qp.srq_wqe->wr_id, qp.qpn, IBV_WC_RECV);
    qp.counters.add(QpCounter::flushed);
  }
  // Only a fatal NAK may still leave; everything else owed is dropped.
  qp.resp.ack_owed = false;
  std::uint32_t keep = qp.resp.out_head;
  for (std::uint32_t i = qp.resp.out_head; i != qp.resp.out_tail; ++i) {
    if (qp.resp.out[i].fatal) qp.resp.out[keep++] = qp.resp.out[i];
  }
  qp.resp.out_tail = keep;
}

}  // namespace uroce::transport
