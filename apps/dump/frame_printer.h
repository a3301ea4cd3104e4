// One line per captured frame, as text (like tshark's one-line summary) or as
// a JSON object, for uroce-dump and the tests that read its output.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "pcap/pcap_file.h"
#include "wire/frame.h"

namespace uroce::dump {

// What one frame turned out to be.
struct FrameReport {
  std::size_t index = 0;  // 1-based frame number
  double time_s = 0;      // seconds since the first frame
  const pcap::Frame* frame = nullptr;
  wire::ParseStatus status = wire::ParseStatus::kOk;
  wire::ParsedFrame parsed;
  bool cut_by_snaplen = false;  // captured fewer bytes than were on the wire

  bool is_roce() const { return !wire::is_not_roce(status); }
  // The headers could be read in full (OK, or only the ICRC is wrong).
  bool headers_valid() const {
    return status == wire::ParseStatus::kOk || status == wire::ParseStatus::kIcrcMismatch;
  }
};

FrameReport analyse(std::size_t index, const pcap::Frame& frame, std::int64_t first_ts_ns);

std::string format_text(const FrameReport& r);
std::string format_json(const FrameReport& r);

// For a UD SEND to QP1 carrying a Communication Management MAD: the CM
// message name ("ConnectRequest", ...); otherwise "".
std::string cm_mad_name(const FrameReport& r);

// Counts over a whole file, for the closing summary.
struct Totals {
  std::size_t frames = 0;
  std::size_t roce = 0;
  std::size_t icrc_ok = 0;
  std::size_t non_roce = 0;
  std::array<std::size_t, wire::kParseStatusCount> by_status{};
  void add(const FrameReport& r);
  std::string summary() const;
  std::size_t malformed() const { return roce - icrc_ok; }
};

}  // namespace uroce::dump
