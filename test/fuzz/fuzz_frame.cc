// libFuzzer harness: wire::parse_frame() on arbitrary bytes. Beyond "no
// crash, no sanitizer report" it checks what a caller relies on: every
// offset an accepted frame reports lies inside it, and a frame rebuilt from
// an accepted one (build_frame(spec_from_parsed())) parses again. The burst
// parser's two halves (parse_headers_of, check_icrc), the ICRC of the bytes
// copied aside (icrc_compute, as a TX frame in pieces has it) and the
// parser of frames in segments (split where the input's last byte
// says) agree with them, field for field and byte for byte of payload.
// And wire::parse_mac_control: a PAUSE or PFC frame is never taken for
// RoCE, and what it asks survives a rebuild.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "wire/frame.h"
#include "wire/pfc.h"

namespace {

using uroce::wire::ExtHdr;
using uroce::wire::ParsedFrame;
using uroce::wire::ParseStatus;

void check(bool ok) {
  if (!ok) std::abort();
}

// Reads every field an accepted (or ICRC-mismatched) frame offers, the way
// the transport would; the sum keeps the reads from being optimised away.
std::uint64_t touch(const ParsedFrame& p) {
  check(p.info != nullptr);
  check(p.l3_offset < p.udp_offset && p.udp_offset < p.bth_offset);
  check(p.bth_offset + p.info->header_bytes == p.payload_offset);
  check(p.payload_offset + p.payload_length + p.pad == p.icrc_offset);
  check(p.icrc_offset + 4u == p.l3_end && p.l3_end <= p.frame.size());
  std::uint64_t sum = p.eth().ether_type.get() + p.udp().dst_port.get() + p.bth().psn.get() + p.ecn();
  sum += p.ip_version == 6 ? p.ipv6().payload_length.get() : p.ipv4().total_length.get();
  if (p.has(ExtHdr::kReth)) sum += p.reth().va.get() + p.reth().dma_length.get();
  if (p.has(ExtHdr::kAeth)) sum += p.aeth().syndrome;
  if (p.has(ExtHdr::kAtomicEth)) sum += p.atomic_eth().swap_add.get();
  if (p.has(ExtHdr::kAtomicAckEth)) sum += p.atomic_ack_eth().orig_data.get();
  if (p.has(ExtHdr::kImmDt)) sum += p.immdt().imm.get();
  if (p.has(ExtHdr::kIeth)) sum += p.ieth().rkey.get();
  if (p.has(ExtHdr::kDeth)) sum += p.deth().qkey.get();
  if (p.has(ExtHdr::kFeth)) sum += p.feth().bits.get();
  for (std::uint8_t b : p.payload()) sum += b;
  return sum + p.icrc() + p.icrc_covered().size();
}

volatile std::uint64_t g_sink;

// MAC Control frames: never RoCE; a PAUSE or PFC request rebuilds to the
// same request.
void check_mac_control(std::span<const std::uint8_t> in) {
  namespace wire = uroce::wire;
  wire::PauseRequest req;
  const wire::MacControl kind = wire::parse_mac_control(in, req);
  if (kind == wire::MacControl::kNone) return;
  ParsedFrame p;
  check(wire::parse_frame(in, p) != ParseStatus::kOk);
  if (kind != wire::MacControl::kPause && kind != wire::MacControl::kPfc) return;
  std::array<std::uint8_t, wire::kMacControlFrameBytes> out;
  check(wire::build_mac_control(wire::MacAddr{}, req, out) == out.size());
  wire::PauseRequest again;
  check(wire::parse_mac_control(out, again) == kind);
  check(again.enabled == req.enabled);
  for (int i = 0; i < wire::kPriorities; ++i) check((req.enabled >> i & 1) == 0 || again.quanta[i] == req.quanta[i]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> in(data, size);
  check_mac_control(in);
  for (bool verify : {false, true}) {
    uroce::wire::ParseOptions options;
    options.verify_icrc = verify;
    ParsedFrame p;
    const ParseStatus s = uroce::wire::parse_frame(in, p, options);
    if (s == ParseStatus::kOk || s == ParseStatus::kIcrcMismatch) g_sink = g_sink + touch(p);

    // The burst parser: the same verdict; and the ICRC over the headers
    // copied aside agrees with the one over the packet where it lies.
    if (verify) {
      ParsedFrame b;
      ParseStatus sb = uroce::wire::parse_headers_of(in, b);
      if (sb == ParseStatus::kOk) sb = uroce::wire::check_icrc(in, b);
      check(sb == s);
      if (s == ParseStatus::kOk || s == ParseStatus::kIcrcMismatch) {
        const auto covered = b.icrc_covered();
        const std::size_t split = std::min<std::size_t>(covered.size(), data[size - 1] % 96 + 64);  // past the masked bytes (IPv6: 60)
        const std::span<const std::uint8_t> rest[] = {covered.subspan(split)};
        check(uroce::wire::icrc_compute(uroce::wire::crc32_default, covered.first(split), rest) ==
              uroce::wire::icrc_of(uroce::wire::crc32_default, covered));
      }
    }

    // In segments: up to four, cut at points the last input byte picks.
    if (size >= 2) {
      const std::uint8_t key = data[size - 1];
      std::vector<std::span<const std::uint8_t>> segs;
      std::size_t at = 0;
      for (int k = 0; k < (key & 3) && at < size; ++k) {
        const std::size_t cut = std::min(size, at + 1 + (static_cast<std::size_t>(key >> 2) * (k + 7)) % size);
        segs.emplace_back(data + at, cut - at);
        at = cut;
      }
      if (at < size) segs.emplace_back(data + at, size - at);
      std::array<std::uint8_t, uroce::wire::kHeadCopyBytes> head;
      ParsedFrame g;
      check(uroce::wire::parse_frame_scattered(segs, head, g, options) == s);
      if (s == ParseStatus::kOk || s == ParseStatus::kIcrcMismatch) {
        check(g.opcode == p.opcode && g.payload_offset == p.payload_offset && g.payload_length == p.payload_length);
        std::size_t seen = 0;
        g.visit_payload([&](const std::uint8_t* d, std::size_t n, std::size_t off) {
          check(off == seen && off + n <= p.payload_length);
          check(std::memcmp(d, p.payload().data() + off, n) == 0);
          seen += n;
        });
        check(seen == p.payload_length);
      }
    }

    if (s == ParseStatus::kOk && p.info->supported()) {
      std::vector<std::uint8_t> rebuilt(size + 64);
      rebuilt.resize(uroce::wire::build_frame(uroce::wire::spec_from_parsed(p), p.payload(), rebuilt));
      check(!rebuilt.empty());
      ParsedFrame r;
      check(uroce::wire::parse_frame(rebuilt, r) == ParseStatus::kOk);
      check(r.opcode == p.opcode && r.payload_length == p.payload_length);
    }
  }
  return 0;
}
