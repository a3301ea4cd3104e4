// Building test frames from fields.
#pragma once

#include <cstdint>
#include <vector>

#include "wire/frame.h"

namespace uroce::test {

// A plausible RoCEv2 frame spec: 10.99.0.2 -> 10.99.0.3 (or fe80::2 -> ::3),
// destination QP 0x11, PSN 0x75b942.
inline wire::FrameSpec make_spec(std::uint8_t opcode, std::uint8_t ip_version = 4) {
  wire::FrameSpec s;
  s.eth_dst = {0x52, 0x54, 0x00, 0x99, 0x00, 0x03};
  s.eth_src = {0x52, 0x54, 0x00, 0x99, 0x00, 0x02};
  s.ip_version = ip_version;
  s.src4 = {10, 99, 0, 2};
  s.dst4 = {10, 99, 0, 3};
  s.src6 = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x99, 0, 2};
  s.dst6 = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x99, 0, 3};
  s.udp_src_port = 0xc123;
  s.bth.opcode = opcode;
  s.bth.pkey.set(0xffff);
  s.bth.dest_qp.set(0x11);
  s.bth.psn.set(0x75b942);
  s.reth.va.set(0x55c6df3b1000);
  s.reth.rkey.set(0x9ae);
  s.aeth.syndrome = 0x1f;
  s.aeth.msn.set(1);
  return s;
}

inline std::vector<std::uint8_t> build(const wire::FrameSpec& spec,
                                       const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out(payload.size() + 256);
  const std::size_t n = wire::build_frame(spec, payload, out);
  out.resize(n);
  return out;
}

// A CNP as a notification point sends it: BTH opcode 0x81 with BECN for
// `dest_qp`, DSCP 48, from `src` to `dst` (IPv4); 16 reserved bytes follow.
inline wire::FrameSpec cnp_spec(std::uint32_t dest_qp, const wire::Ipv4Addr& src, const wire::Ipv4Addr& dst) {
  wire::FrameSpec s;
  s.eth_dst = {0x02, 0, 0, 0, 0, 0x0b};
  s.eth_src = {0x02, 0, 0, 0, 0, 0x0a};
  s.src4 = src;
  s.dst4 = dst;
  s.tos = 48 << 2;
  s.udp_src_port = 0xc000;
  s.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kCnp);
  s.bth.pkey.set(0xffff);
  s.bth.set_becn(true);
  s.bth.dest_qp.set(dest_qp);
  return s;
}

inline std::vector<std::uint8_t> cnp_frame(const wire::FrameSpec& spec) {
  return build(spec, std::vector<std::uint8_t>(16, 0));
}

}  // namespace uroce::test
