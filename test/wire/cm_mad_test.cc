// CM MADs (lib/wire/cm_mad.h) against the golden rdma_cm captures: every
// MAD Soft-RoCE sent to QP1 in rping.pcap and ib_write_bw_rdma_cm.pcap
// decodes, its fields say what the capture shows (the rdma_cm service ID of
// rping's port 7174, the two addresses, the QPs that then carry RC traffic,
// the comm IDs pairing REQ, REP, RTU, DREQ and DREP), and encodes back to
// the same 256 bytes. Hostile MADs get the refusal their flaw calls for.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "support/golden_data.h"
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

// A byte pattern no two arrays share: `first`, first + 1, ... (mod 255, never 0).
template <std::size_t N>
std::array<std::uint8_t, N> pattern(unsigned first) {
  std::array<std::uint8_t, N> a{};
  for (std::size_t i = 0; i < N; ++i) a[i] = static_cast<std::uint8_t>(1 + (first + i) % 255);
  return a;
}

// Every field of a path set, none to a value another field or the other
// path holds; sub-byte fields with their top bit set, so a narrow field
// loses it.
wire::CmPath every_path_field(unsigned k) {
  wire::CmPath p;
  p.local_lid = static_cast<std::uint16_t>(0x1234 + k);
  p.remote_lid = static_cast<std::uint16_t>(0x8765 + k);
  p.local_gid = pattern<16>(10 + 40 * k);
  p.remote_gid = pattern<16>(30 + 40 * k);
  p.flow_label = 0xabcde - k;
  p.packet_rate = static_cast<std::uint8_t>(0x2b + k);
  p.traffic_class = static_cast<std::uint8_t>(0xb8 + k);
  p.hop_limit = static_cast<std::uint8_t>(0x9f - k);
  p.sl = static_cast<std::uint8_t>(0xa + k);
  p.subnet_local = true;
  p.local_ack_timeout = static_cast<std::uint8_t>(0x13 + k);
  return p;
}

wire::CmMad with_attr(CmAttr a) {
  wire::CmMad m;
  m.header.status = 0x8421;
  m.header.class_specific = 0x1357;
  m.header.tid = 0x0123456789abcdefull;
  m.header.attr_id = static_cast<std::uint16_t>(a);
  m.header.attr_modifier = 0xcafef00d;
  return m;
}

// encode, then decode: the same message back. `same` compares the one
// message the attribute names.
template <typename Same>
void expect_decodes_to_itself(const wire::CmMad& m, Same same) {
  std::array<std::uint8_t, wire::kMadBytes> bytes{};
  ASSERT_TRUE(wire::encode_cm_mad(m, bytes)) << wire::cm_attr_name(m.header.attr_id);
  wire::CmMad back;
  ASSERT_EQ(wire::decode_cm_mad(bytes, back), wire::MadStatus::kOk) << wire::cm_attr_name(m.header.attr_id);
  EXPECT_EQ(back.header, m.header) << wire::cm_attr_name(m.header.attr_id);
  EXPECT_TRUE(same(back, m)) << wire::cm_attr_name(m.header.attr_id) << " does not decode to what was encoded";
  std::array<std::uint8_t, wire::kMadBytes> again{};
  ASSERT_TRUE(wire::encode_cm_mad(back, again));
  EXPECT_EQ(again, bytes) << wire::cm_attr_name(m.header.attr_id);
}

// Each message with every field a distinct non-zero value (the golden
// captures have no REJ, MRA or alternate path: this is what checks them).
TEST(CmMad, EveryFieldOfEveryMessageSurvivesEncodeAndDecode) {
  {
    wire::CmMad m = with_attr(CmAttr::kReq);
    wire::CmReq& q = m.req;
    q.local_comm_id = 0x11223344;
    q.service_id = 0x0102030405060708ull;
    q.local_ca_guid = 0x8877665544332211ull;
    q.local_qkey = 0x80010005;
    q.local_qpn = 0xabcdef;
    q.responder_resources = 0x21;
    q.local_eecn = 0x123456;
    q.initiator_depth = 0x31;
    q.remote_eecn = 0x654321;
    q.remote_cm_response_timeout = 0x17;
    q.transport = 3;
    q.end_to_end_flow_control = true;
    q.starting_psn = 0xfedcba;
    q.local_cm_response_timeout = 0x1d;
    q.retry_count = 6;
    q.pkey = 0x7ffe;
    q.path_mtu = 0xc;
    q.rdc_exists = true;
    q.rnr_retry_count = 5;
    q.max_cm_retries = 0xe;
    q.srq = true;
    q.extended_transport = 7;
    q.primary = every_path_field(0);
    q.alternate = every_path_field(1);
    q.has_alternate = true;
    q.private_data = pattern<92>(100);
    expect_decodes_to_itself(m, [](const wire::CmMad& a, const wire::CmMad& b) { return a.req == b.req; });
    // Without an alternate path: zero on the wire, absent when decoded.
    q.has_alternate = false;
    std::array<std::uint8_t, wire::kMadBytes> bytes{};
    ASSERT_TRUE(wire::encode_cm_mad(m, bytes));
    EXPECT_TRUE(std::all_of(bytes.begin() + 24 + 96, bytes.begin() + 24 + 140, [](std::uint8_t b) { return b == 0; }));
    wire::CmMad back;
    ASSERT_EQ(wire::decode_cm_mad(bytes, back), wire::MadStatus::kOk);
    EXPECT_FALSE(back.req.has_alternate);
    EXPECT_EQ(back.req.primary, q.primary);
  }
  {
    wire::CmMad m = with_attr(CmAttr::kRep);
    wire::CmRep& p = m.rep;
    p.local_comm_id = 0x11223344;
    p.remote_comm_id = 0x55667788;
    p.local_qkey = 0x99aabbcc;
    p.local_qpn = 0xabcdef;
    p.local_eecn = 0x123456;
    p.starting_psn = 0xfedcba;
    p.responder_resources = 0x21;
    p.initiator_depth = 0x31;
    p.target_ack_delay = 0x1b;
    p.failover_accepted = 2;
    p.end_to_end_flow_control = true;
    p.rnr_retry_count = 6;
    p.srq = true;
    p.local_ca_guid = 0x8877665544332211ull;
    p.private_data = pattern<196>(7);
    expect_decodes_to_itself(m, [](const wire::CmMad& a, const wire::CmMad& b) { return a.rep == b.rep; });
  }
  for (const CmAttr a : {CmAttr::kRtu, CmAttr::kDrep}) {
    wire::CmMad m = with_attr(a);
    m.rtu.local_comm_id = 0x11223344;
    m.rtu.remote_comm_id = 0x55667788;
    m.rtu.private_data = pattern<224>(9);
    expect_decodes_to_itself(m, [](const wire::CmMad& x, const wire::CmMad& y) { return x.rtu == y.rtu; });
  }
  {
    wire::CmMad m = with_attr(CmAttr::kDreq);
    m.dreq.local_comm_id = 0x11223344;
    m.dreq.remote_comm_id = 0x55667788;
    m.dreq.remote_qpn = 0xabcdef;
    m.dreq.private_data = pattern<220>(11);
    expect_decodes_to_itself(m, [](const wire::CmMad& a, const wire::CmMad& b) { return a.dreq == b.dreq; });
  }
  {
    wire::CmMad m = with_attr(CmAttr::kRej);
    m.rej.local_comm_id = 0x11223344;
    m.rej.remote_comm_id = 0x55667788;
    m.rej.rejected = wire::CmMsgKind::kOther;
    m.rej.ari_length = 0x47;
    m.rej.reason = 0x8001;
    m.rej.ari = pattern<72>(13);
    m.rej.private_data = pattern<148>(200);
    expect_decodes_to_itself(m, [](const wire::CmMad& a, const wire::CmMad& b) { return a.rej == b.rej; });
  }
  {
    wire::CmMad m = with_attr(CmAttr::kMra);
    m.mra.local_comm_id = 0x11223344;
    m.mra.remote_comm_id = 0x55667788;
    m.mra.mraed = wire::CmMsgKind::kRep;
    m.mra.service_timeout = 0x19;
    m.mra.private_data = pattern<222>(17);
    expect_decodes_to_itself(m, [](const wire::CmMad& a, const wire::CmMad& b) { return a.mra == b.mra; });
  }
  // rdma_cm's header, in private data that is not zero beyond it.
  wire::RdmaCmHeader h;
  h.ip_version = 6;
  h.src_port = 0xbeef;
  h.src_addr = pattern<16>(21);
  h.dst_addr = pattern<16>(41);
  std::array<std::uint8_t, 92> priv = pattern<92>(61);
  wire::encode_rdma_cm_header(h, priv);
  EXPECT_EQ(priv[1], 0x60) << "the IP version's reserved low nibble goes out zero";
  EXPECT_EQ(priv[wire::kRdmaCmHeaderBytes], pattern<92>(61)[wire::kRdmaCmHeaderBytes])
      << "the user's data is left alone";
  const auto back = wire::decode_rdma_cm_header(priv);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, h);
}

// Sub-byte fields that share a byte: each written alone sets only its own
// bits, at the place IBTA's tables give (REQ byte 43: remote CM response
// timeout 7:3, transport service type 2:1, end-to-end flow control 0; REP
// byte 27: RNR retry count 7:5, SRQ 4, reserved 3:0), whatever the member
// holds beyond its width.
TEST(CmMad, FieldsSharingAByteKeepToTheirBits) {
  const auto byte_of = [](const wire::CmMad& m, std::size_t at) {
    std::array<std::uint8_t, wire::kMadBytes> bytes{};
    EXPECT_TRUE(wire::encode_cm_mad(m, bytes));
    return bytes[24 + at];
  };
  wire::CmMad m = with_attr(CmAttr::kReq);
  m.req.remote_cm_response_timeout = 0xff;  // wider than its 5 bits
  EXPECT_EQ(byte_of(m, 43), 0xf8);
  m.req = {};
  m.req.transport = 0xff;
  EXPECT_EQ(byte_of(m, 43), 0x06);
  m.req = {};
  m.req.end_to_end_flow_control = true;
  EXPECT_EQ(byte_of(m, 43), 0x01);
  m.req = {};
  m.req.primary.flow_label = 0xfffff;
  m.req.primary.packet_rate = 0;
  EXPECT_EQ(byte_of(m, 52 + 38), 0xf0) << "a flow label's last 4 bits";
  EXPECT_EQ(byte_of(m, 52 + 39), 0x00);
  m = with_attr(CmAttr::kRep);
  m.rep.rnr_retry_count = 7;
  m.rep.srq = true;
  EXPECT_EQ(byte_of(m, 27), 0xf0);
  // REJ and MRA (no capture has them): the message named in 7:6 of byte 8,
  // the ARI length in 7:1 and the service timeout in 7:3 of byte 9.
  m = with_attr(CmAttr::kRej);
  m.rej.rejected = wire::CmMsgKind::kRep;
  m.rej.ari_length = 0x7f;
  m.rej.reason = 0x1c;
  EXPECT_EQ(byte_of(m, 8), 0x40);
  EXPECT_EQ(byte_of(m, 9), 0xfe);
  EXPECT_EQ(byte_of(m, 11), 0x1c);
  m = with_attr(CmAttr::kMra);
  m.mra.mraed = wire::CmMsgKind::kOther;
  m.mra.service_timeout = 0x1f;
  EXPECT_EQ(byte_of(m, 8), 0x80);
  EXPECT_EQ(byte_of(m, 9), 0xf8);
}

// ECE where Linux's CM carries it (ibta_vol1_c12.h): REQ's vendor id in
// bytes 5-7, REP's split over bytes 15, 19 and 23, the options in the MAD
// header's attribute modifier; the fields beside them keep their bytes.
TEST(CmMad, EceVendorIdAndOptionsSitWhereLinuxsCmPutsThem) {
  std::array<std::uint8_t, wire::kMadBytes> bytes{};
  wire::CmMad m = with_attr(CmAttr::kReq);
  m.header.attr_modifier = 0x00000001;
  m.req.local_comm_id = 0xffffffff;
  m.req.vendor_id = 0x020000;
  m.req.service_id = ~0ull;
  ASSERT_TRUE(wire::encode_cm_mad(m, bytes));
  EXPECT_EQ((std::vector<std::uint8_t>(bytes.begin() + 20, bytes.begin() + 24)),
            (std::vector<std::uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ((std::vector<std::uint8_t>(bytes.begin() + 24 + 4, bytes.begin() + 24 + 8)),
            (std::vector<std::uint8_t>{0x00, 0x02, 0x00, 0x00}));
  wire::CmMad back;
  ASSERT_EQ(wire::decode_cm_mad(bytes, back), wire::MadStatus::kOk);
  EXPECT_EQ(back.req.vendor_id, 0x020000u);
  EXPECT_EQ(back.req.local_comm_id, 0xffffffffu);
  EXPECT_EQ(back.header.attr_modifier, 1u);

  m = with_attr(CmAttr::kRep);
  m.rep.local_qpn = 0xffffff;
  m.rep.local_eecn = 0xffffff;
  m.rep.starting_psn = 0xffffff;
  wire::set_rep_vendor_id(m.rep, 0x123456);
  bytes = {};
  ASSERT_TRUE(wire::encode_cm_mad(m, bytes));
  EXPECT_EQ(bytes[24 + 15], 0x12);
  EXPECT_EQ(bytes[24 + 19], 0x34);
  EXPECT_EQ(bytes[24 + 23], 0x56);
  EXPECT_EQ(bytes[24 + 14], 0xff);
  EXPECT_EQ(bytes[24 + 22], 0xff);
  ASSERT_EQ(wire::decode_cm_mad(bytes, back), wire::MadStatus::kOk);
  EXPECT_EQ(wire::rep_vendor_id(back.rep), 0x123456u);
  EXPECT_EQ(back.rep.local_qpn, 0xffffffu);
  EXPECT_EQ(back.rep.starting_psn, 0xffffffu);
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
  EXPECT_EQ(with(17, 0x19), wire::MadStatus::kUnknownAttr) << "LAP (SIDR REQ decodes now: cm_sidr_mad_test.cc)";
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
