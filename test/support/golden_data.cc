#include "support/golden_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace uroce::test {

std::string testdata_dir() { return UROCE_TESTDATA_DIR; }
std::string golden_dir() { return testdata_dir() + "/rxe-pcaps"; }

std::vector<std::string> golden_files() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(golden_dir())) {
    if (entry.path().extension() == ".pcap") files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<pcap::Frame> load_golden(const std::string& file) {
  std::vector<pcap::Frame> frames;
  std::string error;
  EXPECT_TRUE(pcap::read_all(golden_dir() + "/" + file, frames, error)) << error;
  return frames;
}

std::string capture_test_name(const std::string& file) {
  std::string name = file.substr(0, file.rfind('.'));
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

namespace {

std::size_t to_size(const std::string& s) { return static_cast<std::size_t>(std::stoull(s)); }

// One "| name | count |" table row of a file section.
void add_row(GoldenExpectation& e, const std::string& name, std::size_t count) {
  static const std::regex opcode_row(R"(.*\((\d+)\)$)");
  static const std::string kAeth = "AETH syndrome: ";
  static const std::string kCm = "CM MAD: ";
  std::smatch m;
  if (name.rfind(kAeth, 0) == 0) {
    e.aeth[name.substr(kAeth.size())] += count;
  } else if (name.rfind(kCm, 0) == 0) {
    e.cm_mads[name.substr(kCm.size())] += count;
  } else if (name.rfind("retransmitted packets", 0) == 0) {
    e.retransmitted += count;
  } else if (name == "tshark expert error: Illegal checksum value (0)") {
    e.ipv6_zero_udp_checksum += count;
  } else if (std::regex_match(name, m, opcode_row)) {
    e.opcodes[std::stoi(m[1])] += count;
  } else {
    e.unknown_rows.push_back(name);
  }
}

}  // namespace

std::map<std::string, GoldenExpectation> golden_expectations() {
  std::map<std::string, GoldenExpectation> out;
  std::ifstream in(golden_dir() + "/README.md");
  static const std::regex section(R"(^### (\S+\.pcap)\s*$)");
  static const std::regex totals(
      R"(^\((\d+) bytes, (\d+) frames; (\d+) RoCEv2 frames.*ICRC ok (\d+) / bad (\d+);.*)");
  static const std::regex row(R"(^\| (.+?) \| *(\d+) \|$)");
  GoldenExpectation* current = nullptr;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, section)) {
      current = &out[m[1]];
      current->file = m[1];
    } else if (line.rfind("## ", 0) == 0) {
      current = nullptr;
    } else if (current != nullptr && std::regex_match(line, m, totals)) {
      current->frames = to_size(m[2]);
      current->roce_frames = to_size(m[3]);
      current->icrc_ok = to_size(m[4]);
      current->icrc_bad = to_size(m[5]);
    } else if (current != nullptr && std::regex_match(line, m, row)) {
      add_row(*current, m[1], to_size(m[2]));
    }
  }
  return out;
}

}  // namespace uroce::test
