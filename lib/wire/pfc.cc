#include "wire/pfc.h"

#include <algorithm>
#include <cstring>

namespace uroce::wire {

std::size_t build_mac_control(const MacAddr& src, const PauseRequest& req, std::span<std::uint8_t> out) {
  if (out.size() < kMacControlFrameBytes) return 0;
  std::memset(out.data(), 0, kMacControlFrameBytes);
  EthHdr eth;
  eth.dst = kMacControlDst;
  eth.src = src;
  eth.ether_type.set(kEtherTypeMacControl);
  std::memcpy(out.data(), &eth, sizeof eth);
  PfcPayload p{};
  if (req.pfc) {
    p.opcode.set(kMacControlPfc);
    p.class_enable.set(req.enabled);
    for (int i = 0; i < kPriorities; ++i) p.quanta[i].set((req.enabled >> i & 1) ? req.quanta[i] : 0);
    std::memcpy(out.data() + sizeof eth, &p, sizeof p);
  } else {
    p.opcode.set(kMacControlPause);
    p.class_enable.set(req.quanta[0]);  // a PAUSE's one pause time sits where PFC has its vector
    std::memcpy(out.data() + sizeof eth, &p, 4);
  }
  return kMacControlFrameBytes;
}

MacControl parse_mac_control(std::span<const std::uint8_t> frame, PauseRequest& req) {
  if (frame.size() < sizeof(EthHdr)) return MacControl::kNone;
  EthHdr eth;
  std::memcpy(&eth, frame.data(), sizeof eth);
  if (eth.ether_type.get() != kEtherTypeMacControl) return MacControl::kNone;
  const std::span<const std::uint8_t> body = frame.subspan(sizeof eth);
  if (body.size() < 2) return MacControl::kMalformed;
  PfcPayload p{};
  std::memcpy(&p, body.data(), std::min(body.size(), sizeof p));
  req = PauseRequest{};
  switch (p.opcode.get()) {
    case kMacControlPause:
      if (body.size() < 4) return MacControl::kMalformed;
      req.pfc = false;
      req.enabled = 0xff;
      req.quanta.fill(p.class_enable.get());
      return MacControl::kPause;
    case kMacControlPfc:
      if (body.size() < sizeof p) return MacControl::kMalformed;
      req.enabled = static_cast<std::uint8_t>(p.class_enable.get());
      for (int i = 0; i < kPriorities; ++i) req.quanta[i] = p.quanta[i].get();
      return MacControl::kPfc;
    default:
      return MacControl::kOther;
  }
}

}  // namespace uroce::wire
