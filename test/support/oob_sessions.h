// The out-of-band exchanges of the golden captures (TCP port 18515): each
// client connection's first message per side names its QP number and PSN
// (and, from perftest, its rkey and buffer address). Shared by the replays.
#pragma once

#include <cstdint>
#include <map>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "pcap/pcap_file.h"

namespace uroce::test {

// One side of a TCP exchange (rdma-core pingpong or perftest).
struct Peer {
  std::uint32_t ip = 0;
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  std::uint32_t rkey = 0;  // perftest only
  std::uint64_t vaddr = 0;
  bool has_memory = false;
};

struct Session {
  Peer client;
  Peer server;
};

inline std::uint32_t ipv4_at(const std::vector<std::uint8_t>& f, std::size_t off) {
  return static_cast<std::uint32_t>(f[off] << 24 | f[off + 1] << 16 | f[off + 2] << 8 | f[off + 3]);
}

// The exchanges on TCP port 18515, one session per client connection: the
// first message each side sends carries its QP number, PSN (and, from
// perftest, its rkey and buffer address).
inline std::vector<Session> sessions_of(const std::vector<pcap::Frame>& frames) {
  struct Key {
    std::uint32_t src;
    std::uint16_t sport;
    std::uint16_t dport;
    bool operator<(const Key& o) const { return std::tie(src, sport, dport) < std::tie(o.src, o.sport, o.dport); }
  };
  std::map<Key, std::string> streams;
  std::vector<Key> clients;  // in connection order
  for (const auto& fr : frames) {
    const auto& f = fr.data;
    if (f.size() < 54 || f[12] != 0x08 || f[13] != 0x00 || f[23] != 6) continue;
    const std::size_t tcp = 14 + (f[14] & 0x0f) * 4u;
    const std::size_t payload = tcp + (f[tcp + 12] >> 4) * 4u;
    const std::size_t end = 14 + static_cast<std::size_t>(f[16] << 8 | f[17]);
    const Key key{ipv4_at(f, 26), static_cast<std::uint16_t>(f[tcp] << 8 | f[tcp + 1]),
                  static_cast<std::uint16_t>(f[tcp + 2] << 8 | f[tcp + 3])};
    if (key.dport == 18515 && !streams.count(key)) clients.push_back(key);
    streams[key].append(reinterpret_cast<const char*>(f.data() + payload), end - payload);
  }
  static const std::regex pingpong(R"(([0-9a-f]{4}):([0-9a-f]{6}):([0-9a-f]{6}):([0-9a-f]{32}))");
  static const std::regex perftest(
      R"(([0-9a-f]{4}):([0-9a-f]{4}):([0-9a-f]{6}):([0-9a-f]{6}):([0-9a-f]{8}):([0-9a-f]{16}):)");
  auto peer = [](std::uint32_t ip, const std::string& stream) {
    Peer p;
    p.ip = ip;
    std::smatch m;
    if (std::regex_search(stream, m, perftest)) {
      p.qpn = static_cast<std::uint32_t>(std::stoul(m[3], nullptr, 16));
      p.psn = static_cast<std::uint32_t>(std::stoul(m[4], nullptr, 16));
      p.rkey = static_cast<std::uint32_t>(std::stoul(m[5], nullptr, 16));
      p.vaddr = std::stoull(m[6], nullptr, 16);
      p.has_memory = p.rkey != 0;  // the SEND tests exchange no memory
    } else if (std::regex_search(stream, m, pingpong)) {
      p.qpn = static_cast<std::uint32_t>(std::stoul(m[2], nullptr, 16));
      p.psn = static_cast<std::uint32_t>(std::stoul(m[3], nullptr, 16));
    }
    return p;
  };
  std::vector<Session> out;
  for (const Key& c : clients) {
    for (const auto& [k, bytes] : streams) {
      if (k.sport != 18515 || k.dport != c.sport || k.src == c.src) continue;
      Session s{peer(c.src, streams[c]), peer(k.src, bytes)};
      if (s.client.qpn != 0 && s.server.qpn != 0) out.push_back(s);
    }
  }
  return out;
}

}  // namespace uroce::test
