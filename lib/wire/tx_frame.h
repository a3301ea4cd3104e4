// A frame on its way out. Its first part, `head`, is writable memory of the
// port's (an mbuf's data room on DPDK) or of the engine's: the headers are
// written there once, and a short payload is copied behind them. A longer
// payload stays in the registered region as pieces (one per SGE it spans)
// that the port sends in place, followed by a trailer with the pad bytes and
// the ICRC. A port gathers the parts (DPDK: head mbuf -> external-buffer
// mbufs -> trailer mbuf; the simulator: one copy onto the wire).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>

namespace uroce::wire {

// Writable memory for a frame's head, from the port or the engine.
struct TxHead {
  std::uint8_t* data = nullptr;
  std::uint16_t room = 0;  // bytes writable at data
  void* cookie = nullptr;  // the owner's handle (an mbuf)
};

struct TxFrame {
  static constexpr int kMaxPieces = 16;  // the device's max_sge

  TxHead head;
  std::uint16_t head_len = 0;   // bytes written at head.data
  std::uint16_t l3_offset = 0;  // where the IP header starts
  std::uint8_t npieces = 0;     // payload pieces sent in place, after the head
  std::uint8_t trailer_len = 0; // pad and ICRC after the pieces (0 when the head holds all)
  std::uint16_t copied = 0;     // payload bytes copied into the head
  std::array<std::uint8_t, 8> trailer{};
  std::array<std::span<const std::uint8_t>, kMaxPieces> pieces;

  std::uint32_t payload_in_pieces() const {
    std::uint32_t n = 0;
    for (int i = 0; i < npieces; ++i) n += static_cast<std::uint32_t>(pieces[i].size());
    return n;
  }
  std::uint32_t frame_bytes() const { return head_len + payload_in_pieces() + trailer_len; }

  // Writes the whole frame (frame_bytes()) to `out`; returns the end.
  std::uint8_t* copy_to(std::uint8_t* out) const {
    std::memcpy(out, head.data, head_len);
    out += head_len;
    for (int i = 0; i < npieces; ++i) {
      std::memcpy(out, pieces[i].data(), pieces[i].size());
      out += pieces[i].size();
    }
    std::memcpy(out, trailer.data(), trailer_len);
    return out + trailer_len;
  }
};

}  // namespace uroce::wire
