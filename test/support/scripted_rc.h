// One RC QP on a ScriptedPort, connected to a peer that the test plays by
// hand: the test builds the peer's frames (valid ICRC), injects them, polls
// the device on virtual time and reads back what it sent.
#pragma once

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "support/scripted_port.h"
#include "verbs/connect.h"
#include "wire/frame.h"

namespace uroce::test {

class ManualClock : public engine::Clock {
 public:
  std::uint64_t now_ns() override { return now; }
  std::uint64_t now = 1'000'000'000;
};

inline constexpr std::uint32_t kPeerQpn = 0x42;
inline constexpr std::uint32_t kSqPsn = 0x1000;  // our send PSN (the peer's expected PSN)
inline constexpr std::uint32_t kRqPsn = 0x2000;  // our receive PSN (what the peer sends from)
inline constexpr int kAll =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

inline std::uint8_t nak(wire::NakCode c) {
  return wire::make_syndrome(wire::AethKind::kNak, static_cast<std::uint8_t>(c));
}

// Our QP at 10.0.0.1, connected to QP 0x42 at 10.0.0.`peer_host`.
struct ScriptedRc {
  explicit ScriptedRc(ConnectParams params = ConnectParams{}, std::uint8_t peer_host = 2)
      : dev(clock, ipv4_gid({10, 0, 0, 1}), ibv_qp_cap{64, 64, 4, 4, 64}, 64), host(peer_host) {
    EXPECT_NE(dev.qp, nullptr) << dev.error;
    EXPECT_EQ(connect_rc(dev.qp, ipv4_gid({10, 0, 0, host}), kPeerQpn, kSqPsn, kRqPsn, params), 0)
        << dev.ctx->last_error();
  }
  // A frame of the peer's (`from`: another host on 10.0.0.0/24) to `to`.
  wire::FrameSpec spec(wire::Opcode op, std::uint32_t psn, QueuePair* to = nullptr, std::uint8_t from = 0) {
    wire::FrameSpec s;
    s.src4 = {10, 0, 0, from ? from : host};
    s.dst4 = {10, 0, 0, 1};
    s.bth.opcode = static_cast<std::uint8_t>(op);
    s.bth.pkey.set(0xffff);
    s.bth.dest_qp.set((to ? to : dev.qp)->qp_num());
    s.bth.psn.set(psn & 0xffffff);
    s.aeth.syndrome = 0x1f;
    return s;
  }
  // An ACK (or, with `syndrome`, a NAK) from the peer for `psn`.
  wire::FrameSpec ack(std::uint32_t psn, std::uint8_t syndrome = 0x1f) {
    wire::FrameSpec s = spec(wire::Opcode::kRcAcknowledge, psn);
    s.aeth.syndrome = syndrome;
    return s;
  }
  void inject(const wire::FrameSpec& s, const std::vector<std::uint8_t>& payload = {}) {
    std::vector<std::uint8_t> out(payload.size() + 256);
    out.resize(wire::build_frame(s, payload, out));
    ASSERT_FALSE(out.empty());
    dev.port.inbox.push_back(std::move(out));
  }
  void run(int polls = 4) {
    for (int i = 0; i < polls; ++i) dev.ctx->progress();
  }
  // The frames sent so far, parsed.
  std::vector<wire::ParsedFrame> sent() {
    std::vector<wire::ParsedFrame> v;
    for (const auto& f : dev.port.sent) {
      wire::ParsedFrame p;
      EXPECT_EQ(wire::parse_frame(f, p), wire::ParseStatus::kOk);
      v.push_back(p);
    }
    return v;
  }
  ManualClock clock;
  ScriptedDevice dev;
  std::uint8_t host;
};

}  // namespace uroce::test
