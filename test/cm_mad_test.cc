// CM MADs (lib/wire/cm_mad.h) against the golden rdma_cm captures: every
// MAD Soft-RoCE sent to QP1 in rping.pcap and ib_write_bw_rdma_cm.pcap
// decodes, its fields say what the capture shows (the rdma_cm service ID of
// rping's port 7174, the two addresses, the QPs that then carry RC traffic,
// the comm IDs pairing REQ, REP, RTU, DREQ and DREP), and encodes back to
// the same 256 bytes. Hostile MADs get the refusal their flaw calls for.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "golden_data.h"
#include "wire/cm_mad.h"
#include "wire/frame.h"

namespace uroce::test {
namespace {

using wire::CmAttr;

struct Mad {
  std::vector<std::uint8_t> bytes;
  std::array<std::uint8_t, 4> src_ip{};
  std::array<std::uint8_t, 4> dst_ip{};
};

// The payloads of the UD datagrams to QP1, in order.
std::vector<Mad> cm_mads(const std::string& file) {
  std::vector<Mad> out;
  for (const auto& fr : load_golden(file)) {
    wire::ParsedFrame p;
    if (wire::parse_frame(fr.data, p) != wire::ParseStatus::kOk) continue;
    if (p.info->transport != wire::Transport::kUd || p.bth().dest_qp.get() != wire::kGsiQpn) continue;
    EXPECT_EQ(p.deth().qkey.get(), wire::kGsiQkey);
    Mad m;
    m.bytes.assign(p.payload().begin(), p.payload().end());
    const wire::Ipv4Hdr ip = p.ipv4();
    std::copy(ip.src.begin(), ip.src.end(), m.src_ip.begin());
    std::copy(ip.dst.begin(), ip.dst.end(), m.dst_ip.begin());
    out.push_back(m);
  }
  return out;
}

// RC request destination QPs seen in the capture (where the data went).
std::set<std::uint32_t> rc_dest_qps(const std::string& file) {
  std::set<std::uint32_t> qps;
  for (const auto& fr : load_golden(file)) {
    wire::ParsedFrame p;
    if (wire::parse_frame(fr.data, p) == wire::ParseStatus::kOk && p.info->transport == wire::Transport::kRc) {
      qps.insert(p.bth().dest_qp.get());
    }
  }
  return qps;
}

void expect_round_trip(const Mad& m, const wire::CmMad& d) {
  std::array<std::uint8_t, wire::kMadBytes> again{};
  ASSERT_TRUE(wire::encode_cm_mad(d, again)) << wire::cm_attr_name(d.header.attr_id);
  EXPECT_TRUE(std::equal(again.begin(), again.end(), m.bytes.begin()))
      << wire::cm_attr_name(d.header.attr_id) << " does not encode back to its bytes";
}

TEST(CmMad, RpingsConnectionDecodesAndEncodesBackByteForByte) {
  const auto mads = cm_mads("rping.pcap");
  ASSERT_EQ(mads.size(), 5u);
  const std::set<std::uint32_t> rc = rc_dest_qps("rping.pcap");
  std::vector<wire::CmMad> d(mads.size());
  for (std::size_t i = 0; i < mads.size(); ++i) {
    ASSERT_EQ(mads[i].bytes.size(), wire::kMadBytes);
    ASSERT_EQ(wire::decode_cm_mad(mads[i].bytes, d[i]), wire::MadStatus::kOk) << i;
    expect_round_trip(mads[i], d[i]);
  }
  ASSERT_EQ(d[0].attr(), CmAttr::kReq);
  ASSERT_EQ(d[1].attr(), CmAttr::kRep);
  ASSERT_EQ(d[2].attr(), CmAttr::kRtu);
  ASSERT_EQ(d[3].attr(), CmAttr::kDreq);
  ASSERT_EQ(d[4].attr(), CmAttr::kDrep);
  const wire::CmReq& req = d[0].req;
  // rping's port 7174 in rdma_cm's TCP port space.
  EXPECT_EQ(req.service_id, wire::rdma_cm_service_id(wire::kRdmaPsTcp, 7174));
  const auto svc = wire::rdma_cm_service(req.service_id);
  ASSERT_TRUE(svc.has_value());
  EXPECT_EQ(svc->port, 7174);
  EXPECT_EQ(req.transport, 0) << "RC";
  EXPECT_EQ(req.pkey, 0xffff);
  EXPECT_TRUE(rc.count(req.local_qpn)) << "the client's QP receives RC traffic";
  EXPECT_TRUE(rc.count(d[1].rep.local_qpn)) << "the server's QP receives RC traffic";
  // The path: GIDs of the two addresses; rdma_cm's header in the private data.
  EXPECT_TRUE(std::equal(mads[0].src_ip.begin(), mads[0].src_ip.end(), req.primary.local_gid.begin() + 12));
  EXPECT_TRUE(std::equal(mads[0].dst_ip.begin(), mads[0].dst_ip.end(), req.primary.remote_gid.begin() + 12));
  EXPECT_EQ(req.primary.hop_limit, 64);
  const auto cma = wire::decode_rdma_cm_header(req.private_data);
  ASSERT_TRUE(cma.has_value());
  EXPECT_EQ(cma->ip_version, 4);
  EXPECT_TRUE(std::equal(mads[0].src_ip.begin(), mads[0].src_ip.end(), cma->src_addr.begin() + 12));
  EXPECT_TRUE(std::equal(mads[0].dst_ip.begin(), mads[0].dst_ip.end(), cma->dst_addr.begin() + 12));
  // The comm IDs pair the messages: each answer names the other's ID as remote.
  const std::uint32_t client = req.local_comm_id;
  const std::uint32_t server = d[1].rep.local_comm_id;
  EXPECT_EQ(d[1].rep.remote_comm_id, client);
  EXPECT_EQ(d[2].rtu.local_comm_id, client);
  EXPECT_EQ(d[2].rtu.remote_comm_id, server);
  EXPECT_EQ(d[3].dreq.local_comm_id, client);
  EXPECT_EQ(d[3].dreq.remote_comm_id, server);
  EXPECT_EQ(d[3].dreq.remote_qpn, d[1].rep.local_qpn) << "a DREQ names the receiver's QP";
  EXPECT_EQ(d[4].rtu.local_comm_id, server);
  EXPECT_EQ(d[4].rtu.remote_comm_id, client);
  // One transaction per exchange: REP answers the REQ's TID.
  EXPECT_EQ(d[1].header.tid, d[0].header.tid);
  // A starting PSN is the one the *other* side sends from: the server's
  // first request (a READ) carries the REQ's, the client's first SEND the REP's.
  std::uint32_t client_first = 0, server_first = 0;
  bool client_seen = false, server_seen = false;
  for (const auto& fr : load_golden("rping.pcap")) {
    wire::ParsedFrame p;
    if (wire::parse_frame(fr.data, p) != wire::ParseStatus::kOk || p.info->transport != wire::Transport::kRc ||
        !p.info->has(wire::kRequest)) {
      continue;
    }
    const bool from_client = std::equal(mads[0].src_ip.begin(), mads[0].src_ip.end(), p.ipv4().src.begin());
    if (from_client && !client_seen) client_first = p.bth().psn.get(), client_seen = true;
    if (!from_client && !server_seen) server_first = p.bth().psn.get(), server_seen = true;
  }
  EXPECT_EQ(server_first, req.starting_psn);
  EXPECT_EQ(client_first, d[1].rep.starting_psn);
}

TEST(CmMad, PerftestsTwoConnectionsDecodeAndEncodeBack) {
  const auto mads = cm_mads("ib_write_bw_rdma_cm.pcap");
  ASSERT_GE(mads.size(), 10u);
  std::map<CmAttr, int> kinds;
  for (const Mad& m : mads) {
    wire::CmMad d;
    ASSERT_EQ(wire::decode_cm_mad(m.bytes, d), wire::MadStatus::kOk);
    expect_round_trip(m, d);
    ++kinds[d.attr()];
    if (d.attr() == CmAttr::kReq) {
      const auto svc = wire::rdma_cm_service(d.req.service_id);
      ASSERT_TRUE(svc.has_value());
      EXPECT_EQ(svc->ps, wire::kRdmaPsTcp);
    }
  }
  EXPECT_EQ(kinds[CmAttr::kReq], 2);
  EXPECT_EQ(kinds[CmAttr::kRep], 2);
  EXPECT_EQ(kinds[CmAttr::kRtu], 2);
  EXPECT_GE(kinds[CmAttr::kDreq], 2) << "simultaneous DREQs from both sides";
}

TEST(CmMad, HostileMadsAreRefusedForTheirFlaw) {
  const auto mads = cm_mads("rping.pcap");
  ASSERT_FALSE(mads.empty());
  const std::vector<std::uint8_t> good = mads[0].bytes;
  wire::CmMad d;
  EXPECT_EQ(wire::decode_cm_mad(std::span(good.data(), 255), d), wire::MadStatus::kTooShort);
  EXPECT_EQ(wire::decode_cm_mad(std::span(good.data(), 0), d), wire::MadStatus::kTooShort);
  auto with = [&](std::size_t at, std::uint8_t v) {
    std::vector<std::uint8_t> m = good;
    m[at] = v;
    return wire::decode_cm_mad(m, d);
  };
  EXPECT_EQ(with(0, 2), wire::MadStatus::kNotCm) << "base version";
  EXPECT_EQ(with(1, 0x04), wire::MadStatus::kNotCm) << "performance management";
  EXPECT_EQ(with(2, 1), wire::MadStatus::kBadClassVersion);
  EXPECT_EQ(with(3, 0x01), wire::MadStatus::kNotSend) << "Get";
  EXPECT_EQ(with(17, 0x17), wire::MadStatus::kUnknownAttr) << "SIDR REQ";
  EXPECT_EQ(with(17, 0x01), wire::MadStatus::kUnknownAttr) << "ClassPortInfo";
  EXPECT_EQ(with(17, 0x99), wire::MadStatus::kUnknownAttr);
  // Any bytes at all decode or are refused, never read past 256.
  std::vector<std::uint8_t> junk(256);
  for (std::uint32_t seed = 1; seed < 2000; ++seed) {
    for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<std::uint8_t>((seed * 2654435761u) >> (i % 24));
    junk[0] = 1;
    junk[1] = 7;
    junk[2] = 2;
    junk[3] = 3;
    junk[16] = 0;
    junk[17] = static_cast<std::uint8_t>(0x10 + seed % 8);
    const wire::MadStatus s = wire::decode_cm_mad(junk, d);
    EXPECT_TRUE(s == wire::MadStatus::kOk || s == wire::MadStatus::kUnknownAttr) << seed;
  }
  // rdma_cm's header: only version 0 with IP version 4 or 6.
  std::array<std::uint8_t, 92> priv{};
  priv[1] = 0x40;
  EXPECT_TRUE(wire::decode_rdma_cm_header(priv).has_value());
  priv[1] = 0x50;
  EXPECT_FALSE(wire::decode_rdma_cm_header(priv).has_value());
  priv[1] = 0x60;
  priv[0] = 1;
  EXPECT_FALSE(wire::decode_rdma_cm_header(priv).has_value());
  EXPECT_FALSE(wire::rdma_cm_service(0x1234'0106'1c06ull).has_value()) << "high bits set";
  EXPECT_FALSE(wire::rdma_cm_service(0x0999'1c06ull).has_value()) << "no such port space";
}

}  // namespace
}  // namespace uroce::test
