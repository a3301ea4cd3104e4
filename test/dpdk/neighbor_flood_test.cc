// The neighbour table under floods (review D11), on a DPDK port (net_ring, no
// hugepages): ARP requests, neighbour solicitations and unsolicited replies
// and advertisements from many senders must not grow it without bound, and
// must not push out the peers we configured or resolved.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "dpdk/port.h"
#include "dpdk/port_io.h"
#include "support/eal_environment.h"
#include "support/port_resolve.h"
#include "uroce/verbs.h"
#include "wire/headers.h"

namespace uroce::test {
namespace {

using Frame = std::vector<std::uint8_t>;

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

constexpr std::array<std::uint8_t, 4> kOurs{10, 0, 0, 1};
constexpr std::uint32_t kLearned = dpdk::NeighborTable<4>::kLearnedEntries;

wire::MacAddr sender_mac(std::uint8_t tag, std::uint32_t i) {
  return {0x02, tag, static_cast<std::uint8_t>(i >> 24), static_cast<std::uint8_t>(i >> 16),
          static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i)};
}

wire::Ipv4Addr sender_ip(std::uint32_t i) {
  return {static_cast<std::uint8_t>(11 + (i >> 24)), static_cast<std::uint8_t>(i >> 16),
          static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i)};
}

// fe80::<tag>:<i>, a distinct link-local address per sender.
ibv_gid sender_ip6(std::uint8_t tag, std::uint32_t i) {
  ibv_gid g{};
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  g.raw[9] = tag;
  for (int k = 0; k < 4; ++k) g.raw[12 + k] = static_cast<std::uint8_t>(i >> (24 - 8 * k));
  return g;
}

Frame arp(std::uint16_t oper, const wire::MacAddr& sha, const wire::Ipv4Addr& spa, const wire::Ipv4Addr& tpa) {
  Frame f(60, 0);
  wire::EthHdr eth{};
  eth.dst = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  eth.src = sha;
  eth.ether_type.set(wire::kEtherTypeArp);
  std::memcpy(f.data(), &eth, sizeof eth);
  wire::ArpHdr a{};
  a.htype.set(1);
  a.ptype.set(wire::kEtherTypeIpv4);
  a.hlen = 6;
  a.plen = 4;
  a.oper.set(oper);
  a.sha = sha;
  a.spa = spa;
  a.tpa = tpa;
  std::memcpy(f.data() + 14, &a, sizeof a);
  return f;
}

Frame arp_request(std::uint32_t i) { return arp(wire::kArpRequest, sender_mac(0xaa, i), sender_ip(i), kOurs); }

// ICMPv6 checksum (RFC 4443 2.3) over the pseudo-header and the message.
std::uint16_t icmp6_checksum(const std::uint8_t* ip6, const std::uint8_t* msg, std::size_t len) {
  std::uint32_t sum = 58 + static_cast<std::uint32_t>(len);
  for (std::size_t k = 8; k < 40; k += 2) sum += static_cast<std::uint32_t>(ip6[k] << 8 | ip6[k + 1]);
  for (std::size_t k = 0; k < len; k += 2) sum += static_cast<std::uint32_t>(msg[k] << 8 | msg[k + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

// A neighbour solicitation (type 135) or advertisement (136) with one
// link-layer address option (RFC 4861 4.3, 4.4).
Frame nd(std::uint8_t type, const ibv_gid& src, const ibv_gid& dst, const wire::MacAddr& eth_dst,
         const wire::MacAddr& lla, const ibv_gid& target) {
  Frame f(14 + 40 + 32, 0);
  std::memcpy(f.data(), eth_dst.data(), 6);
  std::memcpy(f.data() + 6, lla.data(), 6);
  f[12] = 0x86;
  f[13] = 0xdd;
  std::uint8_t* ip = f.data() + 14;
  ip[0] = 0x60;
  ip[5] = 32;
  ip[6] = 58;
  ip[7] = 255;  // RFC 4861 7.1: only from the link
  std::memcpy(ip + 8, src.raw, 16);
  std::memcpy(ip + 24, dst.raw, 16);
  std::uint8_t* icmp = ip + 40;
  icmp[0] = type;
  if (type == 136) icmp[4] = 0x20;  // Override, not Solicited: unasked
  std::memcpy(icmp + 8, target.raw, 16);
  icmp[24] = type == 135 ? 1 : 2;  // source / target link-layer address
  icmp[25] = 1;
  std::memcpy(icmp + 26, lla.data(), 6);
  const std::uint16_t sum = icmp6_checksum(ip, icmp, 32);
  icmp[2] = static_cast<std::uint8_t>(sum >> 8);
  icmp[3] = static_cast<std::uint8_t>(sum);
  return f;
}

// An NS from sender i for `target`, to its solicited-node group.
Frame solicitation(std::uint32_t i, const ibv_gid& target) {
  ibv_gid group{};
  group.raw[0] = 0xff;
  group.raw[1] = 0x02;
  group.raw[11] = 0x01;
  group.raw[12] = 0xff;
  std::memcpy(group.raw + 13, target.raw + 13, 3);
  return nd(135, sender_ip6(0xbb, i), group, {0x33, 0x33, 0xff, target.raw[13], target.raw[14], target.raw[15]},
            sender_mac(0xbb, i), target);
}

// An unsolicited NA from sender i for its own address, to all nodes.
Frame advertisement(std::uint32_t i) {
  ibv_gid all{};
  all.raw[0] = 0xff;
  all.raw[1] = 0x02;
  all.raw[15] = 0x01;
  return nd(136, sender_ip6(0xcc, i), all, {0x33, 0x33, 0, 0, 0, 1}, sender_mac(0xcc, i), sender_ip6(0xcc, i));
}

// Port A (two queues, our PortIo on queue 0) against port B, driven raw as
// the flooding hosts, and a peer PortIo on B for the resolutions before.
class NeighborFlood : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(EalEnvironment::error(), "");
    static int pairs = 0;
    std::uint16_t a = 0;
    std::uint16_t b = 0;
    std::string error;
    ASSERT_TRUE(dpdk::create_ring_pair(("nf" + std::to_string(pairs++)).c_str(), a, b, error, 2)) << error;
    pa_ = dpdk::Port::open({.port_id = a, .queues = 2}, error);
    ASSERT_NE(pa_, nullptr) << error;
    pb_ = dpdk::Port::open({.port_id = b, .queues = 2}, error);
    ASSERT_NE(pb_, nullptr) << error;
    io_ = std::make_unique<dpdk::PortIo>(*pa_, 0, kOurs);
    peer_ = std::make_unique<dpdk::PortIo>(*pb_, 0, wire::Ipv4Addr{10, 0, 0, 3});
    io_->add_neighbor(configured_ip_, configured_mac_);
    // The peer answers from its poll loop while we resolve it by ARP and ND.
    std::atomic<bool> stop{false};
    std::thread responder([&] {
      std::array<engine::RxFrame, 32> frames;
      while (!stop) peer_->rx_release(frames.data(), peer_->rx_burst(frames.data(), 32));
    });
    std::uint8_t mac[6];
    const bool v4 = resolve_on(*io_, peer_->gid(), mac);
    const bool v6 = resolve_on(*io_, peer_->link_local(), mac);
    stop = true;
    responder.join();
    ASSERT_TRUE(v4 && v6) << "the peer did not answer";
    ASSERT_EQ(io_->counters().arp_replies_learned, 1u);
    ASSERT_EQ(io_->counters().nd_advertisements_learned, 1u);
  }

  // Sends `frames` from B to our queue, polling it; returns how many frames
  // (our answers) came back to B.
  std::uint64_t flood(const std::vector<Frame>& frames) {
    std::uint64_t answers = 0;
    std::uint64_t passed_on = 0;
    std::vector<Frame> back;
    std::array<engine::RxFrame, 32> rx;
    const auto poll = [&] {
      const std::uint16_t n = io_->rx_burst(rx.data(), 32);  // control frames are handled inside
      passed_on += n;
      io_->rx_release(rx.data(), n);
      for (back.clear(); pb_->receive_copies(0, back, 32) > 0; back.clear()) answers += back.size();
    };
    for (std::size_t off = 0; off < frames.size();) {
      off += pb_->send_copies(0, std::span(frames).subspan(off, std::min<std::size_t>(32, frames.size() - off)));
      poll();
    }
    for (int k = 0; k < 100; ++k) poll();
    EXPECT_EQ(passed_on, 0u) << "control frames reached the engine";
    return answers;
  }

  // The peers we configured and resolved before the flood still resolve,
  // from the table: nobody on B answers now, so asking would fail.
  void expect_wanted_peers_resolve() {
    std::uint8_t mac[6];
    EXPECT_TRUE(resolve_on(*io_, ipv4_gid(configured_ip_), mac) && std::memcmp(mac, configured_mac_.data(), 6) == 0)
        << "the configured peer was pushed out";
    EXPECT_TRUE(resolve_on(*io_, peer_->gid(), mac) && std::memcmp(mac, peer_->mac().data(), 6) == 0)
        << "the peer resolved by ARP was pushed out";
    EXPECT_TRUE(resolve_on(*io_, peer_->link_local(), mac) && std::memcmp(mac, peer_->mac().data(), 6) == 0)
        << "the peer resolved by ND was pushed out";
    EXPECT_EQ(io_->counters().neighbors_wanted_evicted, 0u);
  }

  const wire::Ipv4Addr configured_ip_{10, 0, 0, 2};
  const wire::MacAddr configured_mac_{0x02, 0, 0, 0, 0, 0x02};
  std::unique_ptr<dpdk::Port> pa_;
  std::unique_ptr<dpdk::Port> pb_;
  std::unique_ptr<dpdk::PortIo> io_;
  std::unique_ptr<dpdk::PortIo> peer_;
};

constexpr std::uint32_t kSenders = 1'000'000;

// Review D11's reproducer: a million ARP requests for our address, each from
// a new sender. They are all answered; the table keeps the newest 256.
TEST_F(NeighborFlood, ArpRequestsFromAMillionSendersStayBounded) {
  // A host that asked us before the flood, then resolved by us: promoted
  // from the learned tier to the wanted one, with no request on the wire.
  const wire::MacAddr early_mac = sender_mac(0xee, 1);
  const wire::Ipv4Addr early_ip{10, 0, 0, 9};
  ASSERT_EQ(flood({arp(wire::kArpRequest, early_mac, early_ip, kOurs)}), 1u);
  std::uint8_t mac[6];
  ASSERT_TRUE(io_->neighbor(ipv4_gid(early_ip), mac));
  ASSERT_TRUE(resolve_on(*io_, ipv4_gid(early_ip), mac));
  EXPECT_EQ(std::memcmp(mac, early_mac.data(), 6), 0);
  const std::uint64_t answered0 = io_->counters().arp_requests_answered;

  const long before = rss_kib();
  std::uint64_t answers = 0;
  std::vector<Frame> chunk;
  for (std::uint32_t i = 0; i < kSenders;) {
    chunk.clear();
    for (int k = 0; k < 4096 && i < kSenders; ++k, ++i) chunk.push_back(arp_request(i));
    answers += flood(chunk);
  }
  const long after = rss_kib();
  const dpdk::PortIoCounters c = io_->counters();
  int sampled = 0;
  for (std::uint32_t i = 0; i < kSenders; i += kSenders / 1000) sampled += io_->neighbor(ipv4_gid(sender_ip(i)), mac);
  int newest = 0;
  for (std::uint32_t i = kSenders - kLearned; i < kSenders; ++i) {
    newest += io_->neighbor(ipv4_gid(sender_ip(i)), mac) && std::memcmp(mac, sender_mac(0xaa, i).data(), 6) == 0;
  }
  std::printf("  %u ARP requests from distinct senders: RSS %ld -> %ld KiB (%+ld KiB), %d/1000 sampled senders in the "
              "table, %d/%u newest, %llu answered, %llu evicted\n",
              kSenders, before, after, after - before, sampled, newest, kLearned,
              static_cast<unsigned long long>(c.arp_requests_answered - answered0),
              static_cast<unsigned long long>(c.neighbors_evicted));
  EXPECT_LT(sampled, 1000) << "every sender that asks is kept for good";
  EXPECT_LT(after - before, 16 * 1024) << "memory grows with the number of distinct ARP senders";
  EXPECT_EQ(c.arp_requests_answered - answered0, kSenders) << "a bounded table must not stop us answering";
  EXPECT_EQ(answers, kSenders);
  EXPECT_EQ(newest, static_cast<int>(kLearned)) << "the learned tier keeps the newest senders";
  // The first 256 senders filled the tier; each later one pushed one out.
  EXPECT_EQ(c.neighbors_evicted, kSenders - kLearned);
  EXPECT_EQ(c.neighbors_refused, 0u);
  EXPECT_TRUE(io_->neighbor(ipv4_gid(early_ip), mac)) << "the promoted sender was pushed out";
  expect_wanted_peers_resolve();
  // The port's other queues share the table.
  dpdk::PortIo second(*io_, 1);
  EXPECT_TRUE(second.neighbor(peer_->gid(), mac) && second.neighbor(ipv4_gid(sender_ip(kSenders - 1)), mac));
}

// Neighbour solicitations for our link-local address from a million
// senders, each with its link-layer address: all answered, 256 kept.
TEST_F(NeighborFlood, SolicitationsFromAMillionSendersStayBounded) {
  const ibv_gid ours = io_->link_local();
  const std::uint64_t answered0 = io_->counters().nd_solicitations_answered;
  const long before = rss_kib();
  std::uint64_t answers = 0;
  std::vector<Frame> chunk;
  for (std::uint32_t i = 0; i < kSenders;) {
    chunk.clear();
    for (int k = 0; k < 4096 && i < kSenders; ++k, ++i) chunk.push_back(solicitation(i, ours));
    answers += flood(chunk);
  }
  const long after = rss_kib();
  const dpdk::PortIoCounters c = io_->counters();
  std::uint8_t mac[6];
  int sampled = 0;
  for (std::uint32_t i = 0; i < kSenders; i += kSenders / 1000) sampled += io_->neighbor(sender_ip6(0xbb, i), mac);
  int newest = 0;
  for (std::uint32_t i = kSenders - kLearned; i < kSenders; ++i) {
    newest += io_->neighbor(sender_ip6(0xbb, i), mac) && std::memcmp(mac, sender_mac(0xbb, i).data(), 6) == 0;
  }
  std::printf("  %u NSes from distinct senders: RSS %ld -> %ld KiB (%+ld KiB), %d/1000 sampled senders in the "
              "table, %d/%u newest, %llu answered, %llu evicted\n",
              kSenders, before, after, after - before, sampled, newest, kLearned,
              static_cast<unsigned long long>(c.nd_solicitations_answered - answered0),
              static_cast<unsigned long long>(c.neighbors_evicted));
  EXPECT_LT(sampled, 1000);
  EXPECT_LT(after - before, 16 * 1024) << "memory grows with the number of distinct solicitors";
  EXPECT_EQ(c.nd_solicitations_answered - answered0, kSenders);
  EXPECT_EQ(answers, kSenders) << "every NS gets its NA";
  EXPECT_EQ(newest, static_cast<int>(kLearned));
  // SetUp only resolved, so our learned tier started empty.
  EXPECT_EQ(c.neighbors_evicted, kSenders - kLearned);
  EXPECT_EQ(c.neighbors_refused, 0u);
  expect_wanted_peers_resolve();
}

// Unasked ARP replies and NAs (Override set, not Solicited) for a million
// addresses: none stored, each counted as refused.
TEST_F(NeighborFlood, UnsolicitedRepliesAndAdvertisementsAreRefused) {
  const long before = rss_kib();
  std::uint64_t answers = 0;
  std::vector<Frame> chunk;
  for (std::uint32_t i = 0; i < kSenders;) {
    chunk.clear();
    for (int k = 0; k < 4096 && i < kSenders; ++k, ++i) {
      chunk.push_back(k % 2 == 0 ? advertisement(i) : arp(wire::kArpReply, sender_mac(0xdd, i), sender_ip(i), kOurs));
    }
    answers += flood(chunk);
  }
  const long after = rss_kib();
  const dpdk::PortIoCounters c = io_->counters();
  std::uint8_t mac[6];
  int stored = 0;
  for (std::uint32_t i = 0; i < kSenders; i += kSenders / 1000) {
    stored += io_->neighbor(sender_ip6(0xcc, i), mac) + io_->neighbor(ipv4_gid(sender_ip(i)), mac);
  }
  std::printf("  %u unsolicited NAs and ARP replies: RSS %ld -> %ld KiB (%+ld KiB), %d/2000 sampled stored, "
              "%llu refused\n",
              kSenders, before, after, after - before, stored, static_cast<unsigned long long>(c.neighbors_refused));
  EXPECT_EQ(stored, 0);
  EXPECT_LT(after - before, 16 * 1024);
  EXPECT_EQ(c.neighbors_refused, kSenders);
  EXPECT_EQ(answers, 0u) << "replies and advertisements are not answered";
  EXPECT_EQ(c.arp_replies_learned, 1u) << "only the peer's, asked for in SetUp";
  EXPECT_EQ(c.nd_advertisements_learned, 1u);
  EXPECT_EQ(c.neighbors_evicted, 0u);
  expect_wanted_peers_resolve();
  // A reply from a peer we know still updates it (RFC 826's merge step).
  const wire::MacAddr moved{0x02, 0, 0, 0, 0x77, 0x02};
  ASSERT_EQ(flood({arp(wire::kArpReply, moved, configured_ip_, kOurs)}), 0u);
  ASSERT_TRUE(io_->neighbor(ipv4_gid(configured_ip_), mac));
  EXPECT_EQ(std::memcmp(mac, moved.data(), 6), 0);
  EXPECT_EQ(io_->counters().arp_replies_learned, 2u);
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new uroce::test::EalEnvironment({.name = "uroce-review", .memory_mb = "1024"}));
  return RUN_ALL_TESTS();
}
