// A PacketIo for tests that feed the engine prepared frames: frames pushed
// into `inbox` are received in order, frames the engine sends are counted
// and, unless `keep_sent` is false, kept flattened in `sent`. Every peer MAC
// resolves to 52:52:52:52:52:52.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cc/dcqcn.h"
#include "engine/engine.h"
#include "uroce/verbs.h"
#include "wire/frame.h"

namespace uroce::test {

class ScriptedPort : public engine::PacketIo {
 public:
  // Nonzero: received frames longer than this come in segments (see rx_burst).
  std::size_t split_rx = 0;
  std::uint16_t rx_burst(engine::RxFrame* frames, std::uint16_t max) override {
    std::uint16_t n = 0;
    while (n < max && !inbox.empty()) {
      in_use.push_back(std::move(inbox.front()));
      inbox.pop_front();
      std::vector<std::uint8_t>& f = in_use.back();
      frames[n] = engine::RxFrame{f.data(), static_cast<std::uint16_t>(f.size()), nullptr};
      if (split_rx > 0 && f.size() > split_rx + 1) {
        // In three segments, as a multi-segment mbuf would come: the first
        // split_rx bytes, then the rest in two halves.
        const std::size_t rest = f.size() - split_rx;
        frames[n].len = static_cast<std::uint16_t>(split_rx);
        frames[n].more[0] = std::span<const std::uint8_t>(f.data() + split_rx, rest / 2);
        frames[n].more[1] = std::span<const std::uint8_t>(f.data() + split_rx + rest / 2, rest - rest / 2);
        frames[n].nmore = 2;
      }
      ++n;
    }
    return n;
  }
  void rx_release(engine::RxFrame*, std::uint16_t) override { in_use.clear(); }
  std::uint16_t tx_burst(const wire::TxFrame* frames, std::uint16_t n) override {
    tx_count += n;
    if (n > 0) ++bursts;
    if (!keep_sent) return n;
    for (std::uint16_t i = 0; i < n; ++i) {
      std::vector<std::uint8_t> bytes(frames[i].frame_bytes());
      frames[i].copy_to(bytes.data());
      sent.push_back(std::move(bytes));
    }
    return n;
  }
  Resolution resolve(const ibv_gid&, std::uint8_t mac[6], bool) override {
    std::memset(mac, 0x52, 6);
    return Resolution::kKnown;
  }

  std::deque<std::vector<std::uint8_t>> inbox;
  std::deque<std::vector<std::uint8_t>> in_use;
  bool keep_sent = true;
  std::uint64_t tx_count = 0;
  std::uint64_t bursts = 0;  // tx_burst calls with frames
  std::vector<std::vector<std::uint8_t>> sent;
};

// A device on a ScriptedPort with one QP (in RESET) and its CQ. On failure
// `qp` is null and `error` says why.
struct ScriptedDevice {
  ScriptedDevice(engine::Clock& clock, const ibv_gid& gid, const ibv_qp_cap& cap, int cq_depth,
                 const cc::DcqcnParams* dcqcn = nullptr) {
    PortConfig cfg;
    cfg.io = &port;
    cfg.clock = &clock;
    cfg.gid = gid;
    cfg.dcqcn = dcqcn;
    ctx = Context::open(cfg, error);
    if (!ctx) return;
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(cq_depth);
    QpInitAttr init;
    init.send_cq = init.recv_cq = cq;
    init.cap = cap;
    qp = pd->create_qp(init);
    if (qp == nullptr) error = ctx->last_error();
  }
  ScriptedPort port;
  std::unique_ptr<Context> ctx;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  QueuePair* qp = nullptr;
  std::string error;
};

}  // namespace uroce::test
