// The simulated link's pcap tap: both directions of a lossy run, every
// frame with a good ICRC, readable by uroce-dump and dissected by tshark as
// InfiniBand with nothing malformed.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "support/rc_fixture.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

std::string run(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  status = pclose(p);
  return out;
}

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(SimTap, BothDirectionsDecodeInUroceDumpAndTshark) {
  const std::string path = (std::filesystem::temp_directory_path() / ("uroce-tap-" + std::to_string(getpid()) + ".pcap")).string();
  std::size_t sent = 0;
  {
    sim::Impairments lossy;
    lossy.loss = 0.05;
    RcPair p(9, 1 << 20, {}, lossy, lossy);
    ASSERT_EQ(p.connect_rc, 0);
    std::string error;
    ASSERT_TRUE(p.net.link.tap(path, error)) << error;
    fill_pattern(p.bufa, 1 << 19, 1);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(p.post_recv_b(static_cast<std::uint64_t>(i) * 8192, 8192, 100 + i), 0);
    int posted = 0;
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(p.post_send(IBV_WR_SEND, 0, 5000, 0, static_cast<std::uint64_t>(++posted)), 0);
      ASSERT_EQ(p.post_send(IBV_WR_RDMA_WRITE, 0, 20000, 65536, static_cast<std::uint64_t>(++posted)), 0);
      ASSERT_EQ(p.post_send(IBV_WR_RDMA_READ, 200000, 9000, 65536, static_cast<std::uint64_t>(++posted)), 0);
    }
    const auto done = p.wait(p.cqa, static_cast<std::size_t>(posted));
    ASSERT_EQ(done.size(), static_cast<std::size_t>(posted));
    for (const auto& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    sent = p.net.link.stats(0).sent + p.net.link.stats(1).sent;
    p.net.link.close_tap();
  }
  std::vector<pcap::Frame> frames;
  std::string error;
  ASSERT_TRUE(pcap::read_all(path, frames, error)) << error;
  ASSERT_EQ(frames.size(), sent) << "the tap records what is sent, lost frames included";
  std::size_t naks = 0;
  for (const auto& f : frames) {
    wire::ParsedFrame parsed;
    ASSERT_EQ(wire::parse_frame(f.data, parsed), wire::ParseStatus::kOk);
    if (parsed.has(wire::ExtHdr::kAeth) && wire::aeth_kind(parsed.aeth().syndrome) == wire::AethKind::kNak) ++naks;
  }
  EXPECT_GT(naks, 0u) << "5% loss should have caused sequence NAKs";

  int status = 0;
  const std::string dump = run(std::string(UROCE_DUMP_BIN) + " --check --json " + path, status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(lines(dump), frames.size());

  // tshark, as the golden captures were checked: payload guessers off.
  const std::string tshark = "tshark -n --disable-protocol rpcordma --disable-protocol smb_direct -r " + path;
  const std::string ib = run(tshark + " -Y infiniband -T fields -e infiniband.bth.opcode 2>/dev/null", status);
  ASSERT_EQ(WEXITSTATUS(status), 0) << "tshark failed (tools/setup.sh installs it): " << ib.substr(0, 300);
  EXPECT_EQ(lines(ib), frames.size()) << ib.substr(0, 300);
  const std::string malformed = run(tshark + " -Y _ws.malformed -T fields -e frame.number 2>/dev/null", status);
  EXPECT_EQ(lines(malformed), 0u) << malformed;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace uroce::test
