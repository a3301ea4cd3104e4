#include "perf/exchange.h"

#include <cstdio>

#include "common/oob.h"

namespace uroce::perf {
namespace {

constexpr std::size_t kQpLineBytes = 16;

std::string encode_fixed_line(const Hello& h) {
  const std::string gid = oob::gid_to_hex(h.gid);
  char buf[kHelloBytes] = {};
  std::snprintf(buf, sizeof buf, "uroce-perf2:%s:%u:%llu:%u:%u:%u:%06x:%06x:%08x:%016llx:%s", h.op, h.size,
                static_cast<unsigned long long>(h.iters), h.depth, h.mtu, h.qps, h.qpns.at(0), h.psns.at(0), h.rkey,
                static_cast<unsigned long long>(h.vaddr), gid.c_str());
  return std::string(buf, sizeof buf);
}

bool decode_fixed_line(const char* buf, Hello& h) {
  char gid[33] = {};
  unsigned long long iters = 0;
  unsigned long long vaddr = 0;
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  if (std::sscanf(buf, "uroce-perf2:%7[a-z]:%u:%llu:%u:%u:%u:%x:%x:%x:%llx:%32s", h.op, &h.size, &iters, &h.depth,
                  &h.mtu, &h.qps, &qpn, &psn, &h.rkey, &vaddr, gid) != 11) {
    return false;
  }
  h.iters = iters;
  h.vaddr = vaddr;
  h.qpns = {qpn};
  h.psns = {psn};
  return oob::gid_from_hex(gid, h.gid);
}

std::string encode_qp_lines(const Hello& h) {
  std::string out;
  for (std::size_t i = 0; i < h.qpns.size(); ++i) {
    char line[32];
    std::snprintf(line, sizeof line, "%06x:%06x", h.qpns[i] & 0xffffff, h.psns[i] & 0xffffff);
    std::string l(line);
    l.resize(kQpLineBytes - 1, ' ');
    out += l + '\n';
  }
  return out;
}

bool decode_qp_lines(const std::string& in, Hello& h) {
  h.qpns.resize(h.qps);
  h.psns.resize(h.qps);
  for (std::size_t i = 0; i < h.qps; ++i) {
    if (std::sscanf(in.c_str() + i * kQpLineBytes, "%6x:%6x", &h.qpns[i], &h.psns[i]) != 2) return false;
  }
  return true;
}

}  // namespace

std::string encode_hello(const Hello& h) { return encode_fixed_line(h) + (h.qps > 1 ? encode_qp_lines(h) : std::string()); }

bool read_hello(int fd, std::uint32_t qps, Hello& h, const std::function<void()>& idle) {
  char in[kHelloBytes];
  if (!oob::read_full(fd, in, sizeof in, idle) || !decode_fixed_line(in, h)) return false;
  if (h.qps != qps || qps == 1) return true;
  std::string lines(kQpLineBytes * qps, '\0');
  return oob::read_full(fd, lines.data(), lines.size(), idle) && decode_qp_lines(lines, h);
}

}  // namespace uroce::perf
