// The Soft-RoCE golden captures in test/data/rxe-pcaps and the expectations
// that folder's README states for each (frame counts, per-opcode tables).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pcap/pcap_file.h"

namespace uroce::test {

std::string testdata_dir();
std::string golden_dir();

// Every *.pcap in the golden folder, sorted by name.
std::vector<std::string> golden_files();

// Frames of one golden capture (asserts that it reads whole).
std::vector<pcap::Frame> load_golden(const std::string& file);

// What the README says of one capture.
struct GoldenExpectation {
  std::string file;
  std::size_t frames = 0;
  std::size_t roce_frames = 0;
  std::size_t icrc_ok = 0;
  std::size_t icrc_bad = 0;
  std::map<int, std::size_t> opcodes;                  // BTH opcode -> count
  std::map<std::string, std::size_t> aeth;            // "ACK", "RNR_NAK", "NAK_PSN_SEQUENCE_ERROR"
  std::map<std::string, std::size_t> cm_mads;         // "ConnectRequest" -> count
  std::size_t retransmitted = 0;
  std::size_t ipv6_zero_udp_checksum = 0;             // tshark's "Illegal checksum value (0)"
  std::vector<std::string> unknown_rows;              // table rows this reader does not know
};

// GoogleTest parameter name for a capture file: "ib_write_bw.pcap" -> "ib_write_bw".
std::string capture_test_name(const std::string& file);

// Parses the README's per-file sections. Empty on a missing README.
std::map<std::string, GoldenExpectation> golden_expectations();

}  // namespace uroce::test
