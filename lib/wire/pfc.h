// MAC Control frames (ether_type 0x8808, IEEE 802.3 Annex 31B): the
// link-level PAUSE of 802.3x (opcode 0x0001, every priority) and the
// Priority-based Flow Control of 802.1Qbb (opcode 0x0101, a class-enable
// vector and one pause time per priority). They go to the reserved
// multicast 01:80:c2:00:00:01 untagged, are consumed by the MAC that
// receives them and never forwarded. A pause time is in quanta of 512 bit
// times at the link's speed; 0 resumes the priority at once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/headers.h"

namespace uroce::wire {

inline constexpr std::uint16_t kEtherTypeMacControl = 0x8808;
inline constexpr std::uint16_t kMacControlPause = 0x0001;  // 802.3x
inline constexpr std::uint16_t kMacControlPfc = 0x0101;    // 802.1Qbb
inline constexpr MacAddr kMacControlDst = {0x01, 0x80, 0xc2, 0x00, 0x00, 0x01};
// A MAC Control frame is a minimum-size frame: 60 bytes before the FCS.
inline constexpr std::size_t kMacControlFrameBytes = 60;
inline constexpr int kPriorities = 8;

// The MAC Control payload of a PFC frame (the PAUSE frame's is its first
// four bytes: opcode and one pause time).
struct PfcPayload {
  Be16 opcode;
  Be16 class_enable;  // bit i: quanta[i] applies (the top byte is reserved, 0)
  std::array<Be16, kPriorities> quanta;
};
static_assert(sizeof(PfcPayload) == 20);

// What a PAUSE or PFC frame asks: pause priority i for quanta[i] if bit i
// of `enabled` is set (a PAUSE frame enables all eight with one time).
struct PauseRequest {
  bool pfc = true;  // false: an 802.3x PAUSE
  std::uint8_t enabled = 0;
  std::array<std::uint16_t, kPriorities> quanta{};
};

// Writes the 60-byte frame of `req` from `src` into `out` (which holds at
// least kMacControlFrameBytes); returns kMacControlFrameBytes, or 0 if
// `out` is too short. A PAUSE takes quanta[0] as its one pause time.
std::size_t build_mac_control(const MacAddr& src, const PauseRequest& req, std::span<std::uint8_t> out);

enum class MacControl : std::uint8_t {
  kNone,       // not a MAC Control frame (any other ether_type, or tagged)
  kPause,      // 802.3x PAUSE; `req` enables every priority with its time
  kPfc,        // 802.1Qbb PFC; `req` holds the class-enable vector and times
  kOther,      // another MAC Control opcode (e.g. 802.3 MPCP): not for us
  kMalformed,  // ether_type 0x8808 but shorter than its opcode needs
};

// Classifies `frame` and, for kPause and kPfc, fills `req`. Never reads
// past the frame.
MacControl parse_mac_control(std::span<const std::uint8_t> frame, PauseRequest& req);

// How long `quanta` pause a link of `gbps` (512 bit times each), in ns,
// rounded up.
constexpr std::uint64_t pause_quanta_ns(std::uint16_t quanta, double gbps) {
  const double ns = static_cast<double>(quanta) * 512.0 / gbps;
  const auto whole = static_cast<std::uint64_t>(ns);
  return static_cast<double>(whole) < ns ? whole + 1 : whole;
}

}  // namespace uroce::wire
