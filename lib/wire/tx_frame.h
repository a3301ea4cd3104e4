// A frame on its way out, zero-copy: the headers in a small buffer of their
// own, the payload as pieces of registered memory (one per SGE it spans), and
// a trailer with the pad bytes and the ICRC. A port gathers the three parts
// (DPDK: header mbuf -> external-buffer mbufs -> trailer; the simulator: one
// copy onto the wire).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>

namespace uroce::wire {

struct TxFrame {
  static constexpr int kMaxPieces = 16;  // the device's max_sge

  std::array<std::uint8_t, 128> hdr;  // Ethernet .. last extension header
  std::uint16_t hdr_len = 0;
  std::uint16_t l3_offset = 0;
  std::uint8_t npieces = 0;
  std::array<std::span<const std::uint8_t>, kMaxPieces> pieces;
  std::array<std::uint8_t, 8> trailer{};  // pad (0-3 zero bytes) then the ICRC
  std::uint8_t trailer_len = 0;

  std::uint32_t payload_bytes() const {
    std::uint32_t n = 0;
    for (int i = 0; i < npieces; ++i) n += static_cast<std::uint32_t>(pieces[i].size());
    return n;
  }
  std::uint32_t frame_bytes() const { return hdr_len + payload_bytes() + trailer_len; }

  // Writes the whole frame (frame_bytes()) to `out`; returns the end.
  std::uint8_t* copy_to(std::uint8_t* out) const {
    std::memcpy(out, hdr.data(), hdr_len);
    out += hdr_len;
    for (int i = 0; i < npieces; ++i) {
      std::memcpy(out, pieces[i].data(), pieces[i].size());
      out += pieces[i].size();
    }
    std::memcpy(out, trailer.data(), trailer_len);
    return out + trailer_len;
  }
};

}  // namespace uroce::wire
