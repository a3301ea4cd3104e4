// A client context on each of two daemons, each with a PD, a CQ and an RC
// QP connected to the other's (MTU 4096, over the daemons' link: 10.0.0.1
// and 10.0.0.2, as MemifUrocedPair sets them up), and a check that moves
// a buffer of one into a buffer of the other: what the service's memory
// tests (heap, stack) run their cases through.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "support/uroced.h"
#include "support/work_requests.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"

namespace uroce::test {

struct ConnectedClients {
  std::unique_ptr<Context> ca, cb;
  ProtectionDomain *pda = nullptr, *pdb = nullptr;
  CompletionQueue *cqa = nullptr, *cqb = nullptr;
  QueuePair *qa = nullptr, *qb = nullptr;

  // "" once both ends are connected, else what failed.
  std::string set_up(const Uroced& a, const Uroced& b) {
    std::string error;
    if (!(ca = Context::attach(a.socket, error))) return "attach to a: " + error;
    if (!(cb = Context::attach(b.socket, error))) return "attach to b: " + error;
    pda = ca->alloc_pd();
    pdb = cb->alloc_pd();
    cqa = ca->create_cq(64);
    cqb = cb->create_cq(64);
    if (!(pda && pdb && cqa && cqb)) return "PDs and CQs: " + ca->last_error() + " / " + cb->last_error();
    QpInitAttr init;
    init.cap = ibv_qp_cap{16, 16, 1, 1, 0};
    init.send_cq = init.recv_cq = cqa;
    qa = pda->create_qp(init);
    init.send_cq = init.recv_cq = cqb;
    qb = pdb->create_qp(init);
    if (!(qa && qb)) return "QPs: " + ca->last_error() + " / " + cb->last_error();
    ConnectParams p;
    p.mtu = IBV_MTU_4096;
    if (connect_rc(qa, ipv4_gid({10, 0, 0, 2}), qb->qp_num(), 0x10, 0x20, p) != 0) return "connect a: " + ca->last_error();
    if (connect_rc(qb, ipv4_gid({10, 0, 0, 1}), qa->qp_num(), 0x20, 0x10, p) != 0) return "connect b: " + cb->last_error();
    return "";
  }
  void tear_down() {
    if (ca) {
      if (qa) pda->destroy_qp(qa);
      if (cqa) ca->destroy_cq(cqa);
      if (pda) ca->dealloc_pd(pda);
    }
    if (cb) {
      if (qb) pdb->destroy_qp(qb);
      if (cqb) cb->destroy_cq(cqb);
      if (pdb) cb->dealloc_pd(pdb);
    }
    qa = qb = nullptr;
    cqa = cqb = nullptr;
    pda = pdb = nullptr;
  }

  static std::string poll_one(CompletionQueue* cq) {
    ibv_wc wc{};
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10); cq->poll(1, &wc) == 0;) {
      if (std::chrono::steady_clock::now() > end) return "no completion in 10 s";
    }
    return wc.status == IBV_WC_SUCCESS ? "" : std::string("completion: ") + wc_status_str(wc.status);
  }

  // Registers src (on a) and dst (on b), moves src into dst by a WRITE or
  // a SEND, checks every byte (and that registering kept the source's),
  // deregisters both: "" or what went wrong.
  std::string carry(std::uint8_t* src, std::uint8_t* dst, std::size_t len, std::uint8_t seed, bool send) {
    for (std::size_t i = 0; i < len; ++i) src[i] = static_cast<std::uint8_t>(i * 13 + seed);
    std::memset(dst, 0, len);
    MemoryRegion* ms = pda->reg_mr(src, len, IBV_ACCESS_LOCAL_WRITE);
    if (ms == nullptr) return "reg_mr of the source: " + ca->last_error();
    MemoryRegion* md = pdb->reg_mr(dst, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (md == nullptr) {
      pda->dereg_mr(ms);
      return "reg_mr of the destination: " + cb->last_error();
    }
    // The bytes the program wrote before registering are still its own.
    std::string what;
    for (std::size_t i = 0; what.empty() && i < len; ++i) {
      if (src[i] != static_cast<std::uint8_t>(i * 13 + seed)) what = "byte " + std::to_string(i) + " lost by reg_mr";
    }
    const auto n = static_cast<std::uint32_t>(len);
    if (what.empty() && send) {
      if (post_recv_one(qb, dst, n, md->lkey, 1) != 0) what = "post_recv: " + cb->last_error();
      if (what.empty() && post_send_one(qa, IBV_WR_SEND, src, n, ms->lkey, 2) != 0) what = "post_send: " + ca->last_error();
      if (what.empty()) what = poll_one(cqa);
      if (what.empty()) what = poll_one(cqb);
    } else if (what.empty()) {
      if (post_rdma(qa, IBV_WR_RDMA_WRITE, src, n, ms->lkey, dst, md->rkey, seed) != 0) {
        what = "post_send: " + ca->last_error();
      }
      if (what.empty()) what = poll_one(cqa);
    }
    for (std::size_t i = 0; what.empty() && i < len; ++i) {
      if (dst[i] != static_cast<std::uint8_t>(i * 13 + seed)) {
        what = "byte " + std::to_string(i) + " of " + std::to_string(len) + " is " + std::to_string(dst[i]);
      }
    }
    pdb->dereg_mr(md);
    pda->dereg_mr(ms);
    return what;
  }
};

}  // namespace uroce::test
