// uroce-bench-icrc: ICRC throughput on RoCEv2 RDMA WRITE Only frames that
// carry 64 B, 1 KiB and 4 KiB (one 4096-byte path MTU) of payload,
// side by side with a plain CRC-32 of the same bytes in the same run, for
// each CRC implementation this CPU runs. Prints a table; --json writes it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "uroce/version.h"
#include "wire/frame.h"
#include "wire/icrc.h"

namespace {

using Clock = std::chrono::steady_clock;
using uroce::wire::Crc32Impl;

constexpr const char* kUsage =
    "usage: uroce-bench-icrc [--impl NAME|all] [--seconds S] [--json FILE]\n"
    "  Measures the RoCEv2 ICRC on WRITE Only frames with 64 B, 1 KiB and 4 KiB of payload\n"
    "  and a plain CRC-32 of the same bytes,"
    "  alternating the two in one run, and prints GB/s and the ratio.\n"
    "  --impl     one CRC implementation (see the table), or 'all' (default: all but 'bitwise')\n"
    "  --seconds  time per measurement round (default 0.1; 5 rounds, median reported)\n"
    "  --json     also write the results to FILE\n";

struct Result {
  std::string impl;
  std::size_t payload_bytes;
  std::size_t frame_bytes;
  std::size_t covered_bytes;
  double icrc_gbps;
  double in_place_gbps;
  double crc_gbps;
  double icrc_mpps;
};

volatile std::uint32_t g_sink;

constexpr std::size_t kHeaderBytes = 14 + 20 + 8 + 12 + 16;  // Eth, IPv4, UDP, BTH, RETH

// A pool of distinct WRITE Only frames carrying `payload` bytes each, so the
// CRC reads memory that varies (as received frames do) but stays in cache.
std::vector<std::vector<std::uint8_t>> make_frames(std::size_t payload, std::size_t count) {
  std::mt19937_64 rng(payload);
  std::vector<std::vector<std::uint8_t>> frames;
  const std::size_t frame_bytes = kHeaderBytes + payload + 4;
  for (std::size_t i = 0; i < count; ++i) {
    uroce::wire::FrameSpec spec;
    spec.bth.opcode = 0x0a;  // RC RDMA WRITE Only
    spec.bth.psn.set(static_cast<std::uint32_t>(i));
    std::vector<std::uint8_t> data(payload);
    for (auto& b : data) b = static_cast<std::uint8_t>(rng());
    std::vector<std::uint8_t> f(frame_bytes);
    if (uroce::wire::build_frame(spec, data, f) != frame_bytes) {
      std::fprintf(stderr, "uroce-bench-icrc: cannot build a %zu-byte frame\n", frame_bytes);
      std::exit(1);
    }
    frames.push_back(std::move(f));
  }
  return frames;
}

// Bytes per second of `work` over the pool for about `seconds`.
template <typename Frames, typename Work>
double rate(Frames& frames, std::size_t bytes_each,
            double seconds, Work work) {
  std::size_t iters = 0;
  std::uint32_t acc = 0;
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  auto now = start;
  do {
    for (int rep = 0; rep < 16; ++rep) {
      for (auto& f : frames) acc ^= work(f);
    }
    iters += 16 * frames.size();
    now = Clock::now();
  } while (now < until);
  g_sink = acc;
  return static_cast<double>(iters * bytes_each) / std::chrono::duration<double>(now - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string impl_name;
  std::string json_path;
  double seconds = 0.1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* what) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "uroce-bench-icrc: %s needs a value (see --help)\n", what);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--impl") impl_name = value("--impl");
    else if (a == "--json") json_path = value("--json");
    else if (a == "--seconds") seconds = std::atof(value("--seconds").c_str());
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "uroce-bench-icrc: unknown argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (seconds <= 0 || seconds > 10) {
    std::fputs("uroce-bench-icrc: --seconds must be in (0, 10]\n", stderr);
    return 2;
  }

  std::vector<const Crc32Impl*> impls;
  for (const Crc32Impl& impl : uroce::wire::crc32_impls()) {
    const bool wanted = impl_name == "all" || impl_name == impl.name ||
                        (impl_name.empty() && std::strcmp(impl.name, "bitwise") != 0);
    if (wanted && impl.available()) impls.push_back(&impl);
  }
  if (impls.empty()) {
    std::fprintf(stderr, "uroce-bench-icrc: no usable implementation '%s'; choose one of:", impl_name.c_str());
    for (const Crc32Impl& impl : uroce::wire::crc32_impls()) {
      if (impl.available()) std::fprintf(stderr, " %s", impl.name);
    }
    std::fputs("\n", stderr);
    return 2;
  }

  std::printf("uroce-bench-icrc %s: median of 5 rounds of %.2f s; ICRC and plain CRC-32 alternate\n",
              uroce::kVersion, seconds);
  std::printf("%-12s %8s %7s %9s %11s %9s %14s %12s %7s %7s\n", "impl", "payload", "frame",
              "covered", "ICRC GB/s", "Mpps", "in-place GB/s", "CRC-32 GB/s", "ratio", "ratio-ip");
  std::vector<Result> results;
  for (const Crc32Impl* impl : impls) {
    for (std::size_t payload : {64u, 1024u, 4096u}) {
      const auto frames = make_frames(payload, 64);
      const std::size_t frame_bytes = frames.front().size();
      const std::size_t covered = frame_bytes - 14 - 4;  // IP header .. payload
      auto mutable_frames = frames;
      std::vector<double> icrc_rates;
      std::vector<double> in_place_rates;
      std::vector<double> crc_rates;
      for (int round = 0; round < 5; ++round) {
        icrc_rates.push_back(rate(frames, covered, seconds, [&](const std::vector<std::uint8_t>& f) {
          return uroce::wire::icrc_compute(impl->fn, std::span(f).subspan(14, covered));
        }));
        in_place_rates.push_back(rate(mutable_frames, covered, seconds, [&](std::vector<std::uint8_t>& f) {
          return uroce::wire::icrc_of(impl->fn, std::span<const std::uint8_t>(f).subspan(14, covered));
        }));
        crc_rates.push_back(rate(frames, covered, seconds, [&](const std::vector<std::uint8_t>& f) {
          return impl->fn(0, f.data() + 14, covered);
        }));
      }
      const double icrc = median(icrc_rates);
      const double in_place = median(in_place_rates);
      const double crc = median(crc_rates);
      results.push_back({impl->name, payload, frame_bytes, covered, icrc / 1e9, in_place / 1e9, crc / 1e9,
                         icrc / static_cast<double>(covered) / 1e6});
      const Result& r = results.back();
      std::printf("%-12s %6zu B %5zu B %7zu B %11.2f %9.2f %14.2f %12.2f %7.3f %7.3f\n",
                  r.impl.c_str(), r.payload_bytes, r.frame_bytes, r.covered_bytes, r.icrc_gbps,
                  r.icrc_mpps, r.in_place_gbps, r.crc_gbps, r.icrc_gbps / r.crc_gbps,
                  r.in_place_gbps / r.crc_gbps);
      std::fflush(stdout);
    }
  }
  std::puts("ICRC: headers and payload as two pieces (wire::icrc_compute, frames in segments); in-place:\n"
            "the contiguous packet where it lies, its masked copy made in 16-byte blocks (wire::icrc_of,\n"
            "received frames and copied TX frames). ratio, ratio-ip = each / plain CRC-32 of the\n"
            "same bytes (1.0: masking costs nothing).");

  if (!json_path.empty()) {
    std::ofstream out(json_path);
    if (!out) {
      std::fprintf(stderr, "uroce-bench-icrc: cannot write %s\n", json_path.c_str());
      return 1;
    }
    out << "{\"benchmark\":\"icrc\",\"seconds_per_round\":" << seconds << ",\"results\":[";
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      out << (i ? "," : "") << "{\"impl\":\"" << r.impl << "\",\"payload_bytes\":" << r.payload_bytes << ",\"frame_bytes\":" << r.frame_bytes
          << ",\"covered_bytes\":" << r.covered_bytes << ",\"icrc_gbps\":" << r.icrc_gbps
          << ",\"icrc_mpps\":" << r.icrc_mpps << ",\"icrc_in_place_gbps\":" << r.in_place_gbps << ",\"crc32_gbps\":" << r.crc_gbps
          << ",\"ratio\":" << r.icrc_gbps / r.crc_gbps << "}";
    }
    out << "]}\n";
  }
  return 0;
}
