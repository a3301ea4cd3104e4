// The TCP exchange of uroce-perf's two-process mode, perftest style: what
// each side tells the other at the start. The test, so both run the same
// one, and where its QPs and buffer are: a fixed line of kHelloBytes
// ("uroce-perf2:OP:SIZE:ITERS:DEPTH:MTU:QPS:QPN:PSN:RKEY:VADDR:GID", NUL
// padded), then, with several QPs, a 16-byte line "QPN:PSN" for each.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace uroce::perf {

struct Hello {
  char op[8] = {};
  std::uint32_t size = 0;
  std::uint64_t iters = 0;
  std::uint32_t depth = 0;
  std::uint32_t mtu = 0;
  std::uint32_t qps = 1;
  std::vector<std::uint32_t> qpns;  // per QP, and its first PSN
  std::vector<std::uint32_t> psns;
  std::uint32_t rkey = 0;
  std::uint64_t vaddr = 0;
  ibv_gid gid{};
};

constexpr std::size_t kHelloBytes = 160;

// What a side sends: the fixed line, then the QP lines when qps > 1.
std::string encode_hello(const Hello& h);

// Reads the peer's Hello from `fd`, calling `idle` while nothing is there.
// False if the connection ends first or the text is not a Hello. A peer
// that runs another number of QPs than `qps`: true, with only the fixed
// line read (the caller reports a different test).
bool read_hello(int fd, std::uint32_t qps, Hello& h, const std::function<void()>& idle);

}  // namespace uroce::perf
