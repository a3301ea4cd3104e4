// uroce-dump as a user runs it: text and JSON output on golden captures,
// corrupted and truncated input, and bad usage.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/golden_data.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

struct ToolRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  }
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("uroce-dump-test-" + std::to_string(getpid()) + "-" + name)).string();
}

ToolRun run_dump(const std::string& args) {
  const std::string err_file = temp_path("stderr");
  const std::string cmd = std::string(UROCE_DUMP_BIN) + " " + args + " 2>" + err_file;
  ToolRun r;
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  char buf[65536];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_file);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove(err_file);
  return r;
}

// The value of a top-level field in one JSON line (numbers, true/false, null, or a string's text).
std::string field(const std::string& json, const std::string& key) {
  const std::regex re("\"" + key + "\":(\"([^\"]*)\"|[^,}]*)");
  std::smatch m;
  if (!std::regex_search(json, m, re)) return "<absent>";
  return m[2].matched ? m[2].str() : m[1].str();
}

TEST(DumpTool, JsonLinePerFrameWithRoceFields) {
  const ToolRun r = run_dump("--json " + golden_dir() + "/ib_write_bw.pcap");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = r.lines();
  ASSERT_EQ(lines.size(), 199u);
  int roce = 0;
  int with_reth = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    EXPECT_EQ(field(l, "frame"), std::to_string(i + 1));
    if (field(l, "roce") == "false") {
      EXPECT_EQ(field(l, "opcode"), "null") << l;
      EXPECT_EQ(field(l, "status"), "not_udp") << l;  // the TCP exchange
      continue;
    }
    ++roce;
    EXPECT_EQ(field(l, "icrc_ok"), "true") << l;
    for (const char* k : {"opcode", "opcode_name", "dqpn", "psn", "ack_req"}) {
      EXPECT_NE(field(l, k), "<absent>") << k << " in " << l;
    }
    if (field(l, "opcode_name") == "RC_RDMA_WRITE_FIRST") {
      ++with_reth;
      EXPECT_EQ(field(l, "reth_len"), "20000") << l;
      EXPECT_NE(field(l, "reth_rkey"), "<absent>");
      EXPECT_NE(field(l, "reth_va"), "<absent>");
    }
    if (field(l, "opcode") == "17") {
      EXPECT_EQ(field(l, "aeth_kind"), "ACK");
      EXPECT_NE(field(l, "aeth_msn"), "<absent>");
      EXPECT_NE(field(l, "aeth_syndrome"), "<absent>");
    }
  }
  EXPECT_EQ(roce, 80);
  EXPECT_EQ(with_reth, 8);
  EXPECT_NE(r.err.find("80 RoCEv2 (80 ok, 0 bad)"), std::string::npos) << r.err;
}

TEST(DumpTool, TextLinesDecodeAethAndAtomics) {
  const ToolRun rnr = run_dump(golden_dir() + "/ib_send_bw_rnr.pcap");
  ASSERT_EQ(rnr.exit_code, 0);
  EXPECT_NE(rnr.out.find("RC_ACKNOWLEDGE dqpn=0x"), std::string::npos);
  EXPECT_NE(rnr.out.find("AETH[RNR_NAK timer=12 (0.64 ms) msn="), std::string::npos);
  EXPECT_NE(rnr.out.find("AETH[NAK PSN_SEQUENCE_ERROR msn="), std::string::npos);
  const ToolRun atomic = run_dump(golden_dir() + "/ib_atomic_lat.pcap");
  EXPECT_NE(atomic.out.find("RC_COMPARE_SWAP"), std::string::npos);
  EXPECT_NE(atomic.out.find("AtomicETH[va=0x"), std::string::npos);
  EXPECT_NE(atomic.out.find("AtomicAckETH[orig=0x"), std::string::npos);
  const ToolRun ud = run_dump(golden_dir() + "/ud_pingpong.pcap");
  EXPECT_NE(ud.out.find("DETH[qkey=0x11111111"), std::string::npos);
  const ToolRun cm = run_dump(golden_dir() + "/rping.pcap");
  EXPECT_NE(cm.out.find("CM:ConnectRequest"), std::string::npos);
  const ToolRun v6 = run_dump(golden_dir() + "/rc_pingpong_ipv6.pcap");
  EXPECT_NE(v6.out.find("fe80::5054:ff:fe99:2 -> fe80::5054:ff:fe99:3 RC_SEND_FIRST"), std::string::npos);
}

TEST(DumpTool, CorruptedAndCutFramesAreReportedNotFatal) {
  std::vector<pcap::Frame> frames;
  std::string error;
  ASSERT_TRUE(pcap::read_all(golden_dir() + "/rc_pingpong_small.pcap", frames, error));
  const std::string path = temp_path("bad.pcap");
  {
    auto w = pcap::Writer::create(path, error);
    ASSERT_TRUE(w) << error;
    int roce = 0;
    for (auto& f : frames) {
      wire::ParsedFrame p;
      if (wire::parse_frame(f.data, p) == wire::ParseStatus::kOk) {
        ++roce;
        if (roce == 1) f.data[p.payload_offset] ^= 0x01;  // ICRC now wrong
        if (roce == 2) f.data.resize(40);                 // cut inside the IP header
        if (roce == 3) f.data[p.bth_offset] = 0x15;       // reserved opcode
      }
      w->write(f.data, f.ts_ns);
    }
  }
  const ToolRun r = run_dump("--json " + path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto lines = r.lines();
  ASSERT_EQ(lines.size(), frames.size());
  std::string statuses;
  for (const auto& l : lines) {
    if (field(l, "status") != "ok" && field(l, "roce") == "true") statuses += field(l, "status") + " ";
  }
  EXPECT_EQ(statuses, "icrc_mismatch ip_length unknown_opcode ");
  EXPECT_NE(r.out.find("\"icrc_ok\":false"), std::string::npos);
  const ToolRun text = run_dump(path);
  EXPECT_NE(text.out.find("ICRC bad (carried 0x"), std::string::npos);
  EXPECT_NE(text.out.find("malformed RoCEv2: BTH opcode is reserved or not known (unknown_opcode)"),
            std::string::npos);
  const ToolRun check = run_dump("--check --quiet " + path);
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_TRUE(check.out.empty());
  EXPECT_NE(check.err.find("3 bad"), std::string::npos) << check.err;
  std::filesystem::remove(path);
}

// Selective repeat's headers (uroce's mode): an SR WRITE's SRETH and a SACK's
// window, in text and JSON.
TEST(DumpTool, SelectiveRepeatHeadersAreDecoded) {
  const std::string path = temp_path("sr.pcap");
  std::string error;
  {
    auto w = pcap::Writer::create(path, error);
    ASSERT_TRUE(w) << error;
    wire::FrameSpec write;
    write.src4 = {10, 0, 0, 1};
    write.dst4 = {10, 0, 0, 2};
    write.bth.opcode = 0xc8;  // SR_RDMA_WRITE_LAST
    write.bth.pkey.set(0xffff);
    write.bth.psn.set(263);
    write.sreth.offset.set(7168);
    write.sreth.length.set(8192);
    write.sreth.recv_index.set(5);
    write.sreth.flags = wire::kSrethLast;
    write.sreth.first_psn.set(256);
    write.reth.dma_length.set(8192);
    std::vector<std::uint8_t> out(2048);
    out.resize(wire::build_frame(write, std::vector<std::uint8_t>(1024, 7), out));
    ASSERT_FALSE(out.empty());
    w->write(out, 1000);
    wire::FrameSpec ack = write;
    ack.bth.opcode = 0xd1;  // SR_ACKNOWLEDGE
    ack.bth.psn.set(277);
    ack.aeth.syndrome = 0x1f;
    ack.sacketh.expected.set(278);
    ack.sacketh.bits[0] = 0xc0;  // 279 and 280 held
    out.assign(2048, 0);
    out.resize(wire::build_frame(ack, {}, out));
    ASSERT_FALSE(out.empty());
    w->write(out, 2000);
  }
  const ToolRun text = run_dump(path);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("SR_RDMA_WRITE_LAST dqpn=0x000000 psn=263 SRETH[offset=7168 len=8192 recv=5 first_psn=256 last]"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("SR_ACKNOWLEDGE dqpn=0x000000 psn=277 SACKETH[expected=278 held=c0000000000000000000000000000000]"),
            std::string::npos)
      << text.out;
  const ToolRun json = run_dump("--json " + path);
  const auto lines = json.lines();
  ASSERT_EQ(lines.size(), 2u) << json.out;
  EXPECT_EQ(field(lines[0], "sreth_offset"), "7168");
  EXPECT_EQ(field(lines[0], "sreth_recv_index"), "5");
  EXPECT_EQ(field(lines[0], "sreth_last"), "true");
  EXPECT_EQ(field(lines[1], "sack_expected"), "278");
  EXPECT_EQ(field(lines[1], "sack_bits"), "c0000000000000000000000000000000");
  std::filesystem::remove(path);
}

TEST(DumpTool, TruncatedFileStopsWithAnError) {
  const std::string src = golden_dir() + "/rc_pingpong_small.pcap";
  const std::string path = temp_path("cut.pcap");
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  bytes.resize(bytes.size() - 30);  // cut inside the last record
  std::ofstream(path, std::ios::binary) << bytes;
  const ToolRun r = run_dump(path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.lines().size(), 50u);
  EXPECT_NE(r.err.find("stopped after frame 50"), std::string::npos) << r.err;
  std::filesystem::remove(path);
}

TEST(DumpTool, BadUsageGivesAOneLineHint) {
  const ToolRun none = run_dump("");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("no pcap file given"), std::string::npos);
  const ToolRun flag = run_dump("--bogus x.pcap");
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("unknown option '--bogus'"), std::string::npos);
  const ToolRun missing = run_dump("/nonexistent/file.pcap");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("cannot read /nonexistent/file.pcap"), std::string::npos);
  const ToolRun not_pcap = run_dump(std::string(UROCE_SOURCE_ROOT) + "/meson.build");
  EXPECT_EQ(not_pcap.exit_code, 1);
  EXPECT_NE(not_pcap.err.find("cannot read"), std::string::npos);
}

}  // namespace
}  // namespace uroce::test
