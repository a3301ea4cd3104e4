// Randomised runs of the RC transport on a lossy simulated link: thousands
// of operations of random verb, size (0 B to 1 MiB) and SGE layout, under
// loss, reordering, duplication and corruption. After each run: every work
// request completed exactly once and in order, every byte arrived, atomics
// returned what a model of the target says, and nothing ran out of retries.
// The same runs in selective repeat (sprayed over four paths, and with
// heavy reordering), whose completions must keep the same order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <sstream>

#include "support/rc_fixture.h"
#include "support/test_seed.h"

namespace uroce::test {
namespace {

enum class Mix { kSend, kWrite, kRead, kAtomic, kAll };

const char* mix_name(Mix m) {
  switch (m) {
    case Mix::kSend: return "send";
    case Mix::kWrite: return "write";
    case Mix::kRead: return "read";
    case Mix::kAtomic: return "atomic";
    case Mix::kAll: return "mixed";
  }
  return "?";
}

struct StressConfig {
  Mix mix = Mix::kAll;
  int ops = 10000;
  double loss = 0;
  bool extras = true;  // reordering, duplication, corruption besides loss
  std::uint32_t start_psn = 0x100;
  ibv_mtu mtu = IBV_MTU_1024;
  std::uint64_t seed = 1;
  TransportOptions transport;  // selective repeat, spraying
  double reorder = 0.002;      // with extras
};

constexpr std::size_t kArena = 96u << 20;  // per side
constexpr int kDepth = 48;                 // operations in flight
constexpr int kAtomicSlots = 64;

struct Op {
  std::uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool signaled = true;
  std::uint64_t src = 0;   // offset of the data's source (A for SEND/WRITE, B for READ)
  std::uint64_t dst = 0;   // offset of its destination
  std::uint32_t len = 0;
  std::uint64_t expect_orig = 0;  // atomics
  std::uint32_t imm = 0;
};

// Sizes: mostly small, some medium, a few up to 1 MiB.
std::uint32_t random_size(std::mt19937_64& rng) {
  const auto r = rng() % 100;
  if (r < 45) return static_cast<std::uint32_t>(rng() % 257);
  if (r < 97) return static_cast<std::uint32_t>(257 + rng() % (64u << 10));
  return static_cast<std::uint32_t>(rng() % ((1u << 20) + 1));
}

void fill_random(std::uint8_t* p, std::uint32_t len, std::mt19937_64& rng) {
  std::uint32_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < len; ++i) p[i] = static_cast<std::uint8_t>(rng());
}

// A ring allocator over an arena; space is reused only after the operations
// that used it have completed (kDepth * 1 MiB < kArena guarantees that).
struct Bump {
  std::uint64_t at = 4096;
  std::uint64_t take(std::uint32_t len) {
    const std::uint64_t n = (len + 63) & ~std::uint64_t{63};
    if (at + n + 64 > kArena) at = 4096;
    const std::uint64_t off = at;
    at += n + 64;
    return off;
  }
};

// Splits [off, off + len) of a region into 1..4 SGEs.
int split_sges(std::mt19937_64& rng, std::uint8_t* base, std::uint32_t lkey, std::uint64_t off, std::uint32_t len,
               ibv_sge* out) {
  const int n = len < 4 ? 1 : 1 + static_cast<int>(rng() % 4);
  std::uint32_t left = len;
  for (int i = 0; i < n; ++i) {
    const std::uint32_t take = i + 1 == n ? left : static_cast<std::uint32_t>(rng() % (left + 1));
    out[i] = ibv_sge{reinterpret_cast<std::uint64_t>(base + off), take, lkey};
    off += take;
    left -= take;
  }
  return n;
}

std::string run_stress(const StressConfig& cfg) {
  std::ostringstream fail;
  sim::Impairments imp;
  imp.loss = cfg.loss;
  if (cfg.extras) {
    imp.reorder = cfg.reorder;
    imp.duplicate = 0.002;
    imp.corrupt = 0.002;
  }
  ConnectParams params;
  params.mtu = cfg.mtu;
  params.psn_a = cfg.start_psn;
  params.psn_b = (cfg.start_psn + 0x800000) & 0xffffff;
  params.transport = cfg.transport;
  RcPair p(cfg.seed, kArena, params, imp, imp, 256);
  if (p.connect_rc != 0) return "connect failed: " + p.net.a->last_error();
  std::mt19937_64 rng(cfg.seed * 7919 + 17);

  std::vector<std::uint64_t> atomic_model(kAtomicSlots);
  for (int i = 0; i < kAtomicSlots; ++i) {
    atomic_model[i] = rng();
    std::memcpy(p.bufb + 8 * i, &atomic_model[i], 8);
  }
  Bump bump_a;
  Bump bump_b;
  bump_a.at = bump_b.at = 4096 + 8 * kAtomicSlots;
  std::deque<Op> pending;      // posted on A, in posting order
  std::deque<Op> recvs;        // SENDs awaiting B's receive completion, in order
  std::map<std::uint64_t, int> seen;  // completions per wr_id
  int posted = 0;
  int completed = 0;
  int errors = 0;

  auto verify = [&](const Op& op) {
    switch (op.opcode) {
      case IBV_WR_RDMA_WRITE:
      case IBV_WR_RDMA_WRITE_WITH_IMM:
        if (std::memcmp(p.bufa + op.src, p.bufb + op.dst, op.len) != 0) fail << "WRITE " << op.wr_id << " data differs; ";
        break;
      case IBV_WR_RDMA_READ:
        if (std::memcmp(p.bufb + op.src, p.bufa + op.dst, op.len) != 0) fail << "READ " << op.wr_id << " data differs; ";
        break;
      case IBV_WR_ATOMIC_CMP_AND_SWP:
      case IBV_WR_ATOMIC_FETCH_AND_ADD: {
        std::uint64_t got;
        std::memcpy(&got, p.bufa + op.dst, 8);
        if (got != op.expect_orig) fail << "atomic " << op.wr_id << " returned " << got << " not " << op.expect_orig << "; ";
        break;
      }
      default:
        break;
    }
  };

  auto post_one = [&]() {
    Op op;
    op.wr_id = static_cast<std::uint64_t>(++posted);
    Mix m = cfg.mix;
    if (m == Mix::kAll) m = static_cast<Mix>(rng() % 4);
    ibv_sge sges[4];
    ibv_send_wr wr{};
    wr.wr_id = op.wr_id;
    wr.sg_list = sges;
    switch (m) {
      case Mix::kSend:
      case Mix::kWrite: {
        const bool send = m == Mix::kSend;
        const bool imm = rng() % 4 == 0;
        op.opcode = send ? (imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND) : (imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE);
        op.len = random_size(rng);
        op.src = bump_a.take(op.len);
        op.dst = bump_b.take(op.len + 64);
        fill_random(p.bufa + op.src, op.len, rng);
        const bool inline_data = op.len <= 256 && rng() % 3 == 0;
        wr.num_sge = split_sges(rng, p.bufa, p.mra->lkey, op.src, op.len, sges);
        op.signaled = rng() % 5 != 0;
        wr.send_flags = (op.signaled ? IBV_SEND_SIGNALED : 0) | (inline_data ? IBV_SEND_INLINE : 0);
        op.imm = static_cast<std::uint32_t>(rng());
        wr.imm_data = op.imm;
        wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(p.bufb + op.dst);
        wr.wr.rdma.rkey = p.mrb->rkey;
        if (send || imm) {
          // B's matching receive: scattered over 1..4 SGEs, a little larger.
          ibv_sge rs[4];
          ibv_recv_wr rw{};
          rw.wr_id = op.wr_id;
          rw.sg_list = rs;
          rw.num_sge = split_sges(rng, p.bufb, p.mrb->lkey, op.dst, op.len + static_cast<std::uint32_t>(rng() % 64), rs);
          ibv_recv_wr* bad = nullptr;
          if (p.qb->post_recv(&rw, &bad) != 0) fail << "post_recv failed: " << p.net.b->last_error() << "; ";
          recvs.push_back(op);
        }
        break;
      }
      case Mix::kRead:
        op.opcode = IBV_WR_RDMA_READ;
        op.len = random_size(rng);
        op.src = bump_b.take(op.len);
        op.dst = bump_a.take(op.len);
        fill_random(p.bufb + op.src, op.len, rng);
        wr.num_sge = split_sges(rng, p.bufa, p.mra->lkey, op.dst, op.len, sges);
        op.signaled = true;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(p.bufb + op.src);
        wr.wr.rdma.rkey = p.mrb->rkey;
        break;
      case Mix::kAtomic:
      case Mix::kAll: {
        const int slot = static_cast<int>(rng() % kAtomicSlots);
        const bool cas = rng() % 2;
        op.opcode = cas ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
        op.len = 8;
        op.dst = bump_a.take(8);
        sges[0] = ibv_sge{reinterpret_cast<std::uint64_t>(p.bufa + op.dst), 8, p.mra->lkey};
        wr.num_sge = 1;
        op.signaled = true;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.atomic.remote_addr = reinterpret_cast<std::uint64_t>(p.bufb + 8 * slot);
        wr.wr.atomic.rkey = p.mrb->rkey;
        op.expect_orig = atomic_model[slot];
        if (cas) {
          // Half the compares match.
          wr.wr.atomic.compare_add = rng() % 2 ? atomic_model[slot] : rng();
          wr.wr.atomic.swap = rng();
          if (wr.wr.atomic.compare_add == atomic_model[slot]) atomic_model[slot] = wr.wr.atomic.swap;
        } else {
          wr.wr.atomic.compare_add = rng() % 1000;
          atomic_model[slot] += wr.wr.atomic.compare_add;
        }
        break;
      }
    }
    wr.opcode = op.opcode;
    ibv_send_wr* bad = nullptr;
    if (p.qa->post_send(&wr, &bad) != 0) fail << "post_send failed: " << p.net.a->last_error() << "; ";
    pending.push_back(op);
  };

  ibv_wc wc[64];
  std::uint64_t idle_rounds = 0;
  while ((posted < cfg.ops || !pending.empty() || !recvs.empty()) && fail.str().empty()) {
    while (posted < cfg.ops && static_cast<int>(pending.size()) < kDepth) post_one();
    if (!p.net.step()) ++idle_rounds;
    if (idle_rounds > 3 || p.net.clock.now_ns() > 3'600'000'000'000ull) {
      fail << "stalled with " << pending.size() << " sends and " << recvs.size() << " receives outstanding; ";
      break;
    }
    for (int k; (k = p.cqa->poll(64, wc)) > 0;) {
      for (int i = 0; i < k; ++i) {
        ++completed;
        if (++seen[wc[i].wr_id] > 1) fail << "wr " << wc[i].wr_id << " completed twice; ";
        if (wc[i].status != IBV_WC_SUCCESS) {
          ++errors;
          fail << "wr " << wc[i].wr_id << ": " << wc_status_str(wc[i].status) << "; ";
        }
        // In order: every op before this one (unsignaled) is complete too.
        while (!pending.empty() && pending.front().wr_id != wc[i].wr_id) {
          if (pending.front().signaled) fail << "wr " << wc[i].wr_id << " completed before signaled wr " << pending.front().wr_id << "; ";
          verify(pending.front());
          pending.pop_front();
        }
        if (pending.empty()) {
          fail << "completion for unknown wr " << wc[i].wr_id << "; ";
          continue;
        }
        verify(pending.front());
        pending.pop_front();
      }
    }
    for (int k; (k = p.cqb->poll(64, wc)) > 0;) {
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) fail << "recv " << wc[i].wr_id << ": " << wc_status_str(wc[i].status) << "; ";
        if (recvs.empty() || recvs.front().wr_id != wc[i].wr_id) {
          fail << "receive completion " << wc[i].wr_id << " out of order; ";
          continue;
        }
        const Op op = recvs.front();
        recvs.pop_front();
        if (wc[i].byte_len != op.len) fail << "recv " << op.wr_id << " byte_len " << wc[i].byte_len << " not " << op.len << "; ";
        const bool imm = op.opcode == IBV_WR_SEND_WITH_IMM || op.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
        if (imm != ((wc[i].wc_flags & IBV_WC_WITH_IMM) != 0) || (imm && wc[i].imm_data != op.imm)) {
          fail << "recv " << op.wr_id << " immediate data wrong; ";
        }
        if (op.opcode == IBV_WR_SEND || op.opcode == IBV_WR_SEND_WITH_IMM) {
          if (wc[i].opcode != IBV_WC_RECV) fail << "recv opcode; ";
          if (std::memcmp(p.bufa + op.src, p.bufb + op.dst, op.len) != 0) fail << "SEND " << op.wr_id << " data differs; ";
        } else if (wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
          fail << "recv opcode for WRITE with immediate; ";
        }
      }
    }
    // The last ops may all be unsignaled: flush them out with a signaled one.
    if (posted >= cfg.ops && !pending.empty() && std::none_of(pending.begin(), pending.end(), [](const Op& o) { return o.signaled; })) {
      ibv_send_wr wr{};
      wr.wr_id = static_cast<std::uint64_t>(++posted);
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(p.bufb);
      wr.wr.rdma.rkey = p.mrb->rkey;
      ibv_send_wr* bad = nullptr;
      p.qa->post_send(&wr, &bad);
      Op op;
      op.wr_id = wr.wr_id;
      op.opcode = IBV_WR_RDMA_WRITE;
      pending.push_back(op);
    }
  }
  for (int i = 0; i < kAtomicSlots; ++i) {
    std::uint64_t v;
    std::memcpy(&v, p.bufb + 8 * i, 8);
    if (v != atomic_model[i]) fail << "atomic slot " << i << " holds " << v << " not " << atomic_model[i] << " (executed twice?); ";
  }
  if (p.qa->counter("retry_exceeded") + p.qa->counter("rnr_retry_exceeded") != 0) fail << "retries exhausted; ";
  // Corrupted frames are dropped and counted under a reason: the ICRC, or a
  // check that comes first (the IPv4 header checksum, lengths). A few
  // corruptions hit bytes nothing checks (MAC addresses, the UDP checksum,
  // BTH byte 4), so: no more drops than corruptions, and most of them.
  std::uint64_t corrupted = 0;
  std::uint64_t dropped = 0;
  std::uint64_t icrc_drops = 0;
  for (int side = 0; side < 2; ++side) {
    corrupted += p.net.link.stats(side).corrupted;
    engine::Engine& e = side == 0 ? internal::engine_of(*p.net.b) : internal::engine_of(*p.net.a);
    for (int r = 0; r < wire::kParseStatusCount; ++r) dropped += e.parse_drops(static_cast<wire::ParseStatus>(r));
    dropped += e.counter(engine::EngineCounter::rx_not_roce) + e.counter(engine::EngineCounter::rx_unknown_qp) +
               e.counter(engine::EngineCounter::rx_bad_pkey) + e.counter(engine::EngineCounter::rx_unsupported_transport);
    icrc_drops += e.parse_drops(wire::ParseStatus::kIcrcMismatch);
  }
  if (dropped > corrupted) fail << dropped << " frames dropped but only " << corrupted << " corrupted; ";
  if (corrupted > 20 && (dropped * 2 < corrupted || icrc_drops == 0)) {
    fail << "only " << dropped << " drops (" << icrc_drops << " by the ICRC) for " << corrupted << " corrupted frames; ";
  }
  const auto& s = p.net.link.stats(0);
  std::printf("  %s seed=%llu loss=%.3f ops=%d: %llu frames A->B (%llu lost), retransmitted %llu, timeouts %llu, "
              "NAK seq %llu, dup requests %llu, virtual %.3f s\n",
              mix_name(cfg.mix), static_cast<unsigned long long>(cfg.seed), cfg.loss, posted,
              static_cast<unsigned long long>(s.sent), static_cast<unsigned long long>(s.lost),
              static_cast<unsigned long long>(p.qa->counter("retransmitted_packets")),
              static_cast<unsigned long long>(p.qa->counter("timeouts")),
              static_cast<unsigned long long>(p.qa->counter("nak_seq_received")),
              static_cast<unsigned long long>(p.qb->counter("duplicate_requests")),
              static_cast<double>(p.net.clock.now_ns()) / 1e9);
  return fail.str();
}

struct Case {
  Mix mix;
  double loss;
  std::uint64_t seed;
  int ops;
  std::uint32_t start_psn;
  std::uint8_t sr_spray = 0;  // 0: go-back-N; else selective repeat on this many paths
  double reorder = 0.002;
};

class RcStress : public ::testing::TestWithParam<Case> {};

TEST_P(RcStress, EveryRequestOnceInOrderAndEveryByteRight) {
  const Case& c = GetParam();
  StressConfig cfg;
  cfg.mix = c.mix;
  cfg.loss = c.loss;
  cfg.ops = c.ops;
  cfg.start_psn = c.start_psn;
  cfg.seed = c.seed + test_seed(0);
  cfg.mtu = cfg.seed % 2 ? IBV_MTU_1024 : IBV_MTU_4096;
  cfg.transport.selective_repeat = c.sr_spray != 0;
  cfg.transport.spray_paths = std::max<std::uint8_t>(c.sr_spray, 1);
  cfg.reorder = c.reorder;
  SCOPED_TRACE("stress seed=" + std::to_string(cfg.seed) + " (base from UROCE_TEST_SEED)");
  const std::string failures = run_stress(cfg);
  EXPECT_TRUE(failures.empty()) << failures.substr(0, 2000);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // Each verb alone, then mixed.
  for (Mix m : {Mix::kSend, Mix::kWrite, Mix::kRead, Mix::kAtomic}) v.push_back({m, 0.01, 11, 10000, 0x100});
  // Mixed, at each loss level, over several seeds.
  for (double loss : {0.0, 0.001, 0.01, 0.05}) {
    for (std::uint64_t seed : {1, 2, 3}) v.push_back({Mix::kAll, loss, seed, 10000, 0x100});
  }
  // Starting just below 2^24, so PSNs wrap during the run.
  v.push_back({Mix::kAll, 0.01, 21, 10000, 0xffff00});
  v.push_back({Mix::kAll, 0.05, 22, 10000, 0xfffff0});
  // Selective repeat: each verb alone on one path, mixed and sprayed over
  // four at each loss level, across the PSN wrap, and with one frame in
  // ten held back (out of order by 20 us on a 2 us link).
  for (Mix m : {Mix::kSend, Mix::kWrite, Mix::kRead, Mix::kAtomic}) v.push_back({m, 0.01, 31, 10000, 0x100, 1});
  for (double loss : {0.0, 0.01, 0.05}) {
    for (std::uint64_t seed : {1, 2, 3}) v.push_back({Mix::kAll, loss, 40 + seed, 10000, 0x100, 4});
  }
  v.push_back({Mix::kAll, 0.05, 51, 10000, 0xfffff0, 4});
  v.push_back({Mix::kAll, 0.01, 52, 10000, 0x100, 4, 0.1});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Sim, RcStress, ::testing::ValuesIn(cases()), [](const auto& param_info) {
  const Case& c = param_info.param;
  std::string name = std::string(mix_name(c.mix)) + "_loss" + std::to_string(static_cast<int>(c.loss * 1000)) +
                     "permille_seed" + std::to_string(c.seed);
  if (c.start_psn > 0xff0000) name += "_psn_wrap";
  if (c.sr_spray != 0) name = "sr" + std::to_string(c.sr_spray) + "_" + name;
  if (c.reorder > 0.01) name += "_reorder" + std::to_string(static_cast<int>(c.reorder * 100)) + "pc";
  return name;
});

}  // namespace
}  // namespace uroce::test
