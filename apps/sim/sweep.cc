#include "sweep.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace uroce::simapp {
namespace {

const char* outcome_name(RunResult::Outcome o) {
  switch (o) {
    case RunResult::Outcome::ok: return "ok";
    case RunResult::Outcome::failed: return "failed";
    case RunResult::Outcome::refused: return "refused";
    case RunResult::Outcome::unusable: return "unusable";
  }
  return "?";
}

struct Row {
  Scenario point;
  std::string dir;  // under out
  RunResult result;
  double ratio = -1;  // goodput over the same transport's lossless run's; -1: no such run
};

// A point's loss; on the switch (no loss key) none: `none`.
std::string loss_text(const Scenario& point, const char* none = "") {
  if (!point.fabric) return none;
  char b[32];
  std::snprintf(b, sizeof b, "%g", point.loss);
  return b;
}

// A JSON string (the messages are ours, but may quote a file's text).
std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) q += c;
  }
  return q + "\"";
}

// The ratio of each row's goodput to that of the run of its transport at
// loss 0 (the lossless goodput), where that run is in the sweep and ran.
void set_ratios(std::vector<Row>& rows) {
  for (Row& r : rows) {
    if (r.result.outcome != RunResult::Outcome::ok || !r.point.fabric) continue;
    for (const Row& base : rows) {
      if (base.point.selective_repeat == r.point.selective_repeat && base.point.loss == 0 &&
          base.result.outcome == RunResult::Outcome::ok && base.result.goodput_bps > 0) {
        r.ratio = r.result.goodput_bps / base.result.goodput_bps;
      }
    }
  }
}

void write_csv(const std::string& path, const std::vector<Row>& rows, std::uint64_t seed) {
  std::ofstream csv(path);
  csv << "transport,loss,outcome,goodput_bps,ratio_to_lossless,fct_p50_us,fct_p99_us,fct_max_us,transfers,"
         "retransmitted_packets,lost_packets,queue_drops,data_intact,seed,dir\n";
  for (const Row& r : rows) {
    const RunResult& x = r.result;
    const bool ran = x.outcome == RunResult::Outcome::ok || x.outcome == RunResult::Outcome::failed;
    csv << transport_name(r.point) << ',' << loss_text(r.point) << ',' << outcome_name(x.outcome) << ',';
    if (ran) {
      csv << static_cast<std::uint64_t>(x.goodput_bps) << ',';
      if (r.ratio >= 0) csv << r.ratio;
      csv << ',' << x.fct_p50_us << ',' << x.fct_p99_us << ',' << x.fct_max_us << ',' << x.transfers << ','
          << x.retransmitted_packets << ',' << x.lost_packets << ',' << x.queue_drops << ',';
    } else {
      csv << ",,,,,,,,,";
    }
    csv << (x.data_intact ? "true" : "false") << ',' << seed << ',' << r.dir << '\n';
  }
}

void write_json(const std::string& path, const Scenario& sc, const std::vector<Row>& rows, std::uint64_t seed,
                bool dcqcn, bool complete) {
  std::ofstream js(path);
  js << "{\n  \"scenario\": \"" << sc.name << "\",\n  \"seed\": " << seed << ",\n  \"dcqcn\": " << (dcqcn ? "true" : "false")
     << ",\n  \"complete\": " << (complete ? "true" : "false") << ",\n  \"runs\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const RunResult& x = r.result;
    js << (i ? "," : "") << "\n    {\"transport\": \"" << transport_name(r.point) << "\", \"loss\": " << loss_text(r.point, "null")
       << ", \"outcome\": \"" << outcome_name(x.outcome) << "\"";
    if (x.outcome == RunResult::Outcome::ok || x.outcome == RunResult::Outcome::failed) {
      js << ", \"goodput_bps\": " << static_cast<std::uint64_t>(x.goodput_bps) << ", \"ratio_to_lossless\": ";
      if (r.ratio >= 0) js << r.ratio;
      else js << "null";
      js << ", \"fct_p50_us\": " << x.fct_p50_us << ", \"fct_p99_us\": " << x.fct_p99_us << ", \"fct_max_us\": " << x.fct_max_us
         << ", \"transfers\": " << x.transfers << ", \"retransmitted_packets\": " << x.retransmitted_packets
         << ", \"lost_packets\": " << x.lost_packets << ", \"queue_drops\": " << x.queue_drops;
    }
    if (!x.message.empty()) js << ", \"message\": " << quoted(x.message);
    js << ", \"data_intact\": " << (x.data_intact ? "true" : "false") << ", \"seed\": " << seed << ", \"dir\": \"" << r.dir
       << "\"}";
  }
  js << "\n  ]\n}\n";
}

void print_table(const Scenario& sc, const std::vector<Row>& rows, std::uint64_t seed, bool dcqcn) {
  std::printf("\nuroce-sim sweep %s: %zu runs, seed %llu, DCQCN %s\n", sc.name.c_str(), rows.size(),
              static_cast<unsigned long long>(seed), dcqcn ? "on" : "off");
  std::printf("  %-9s %-7s %12s %9s %26s %8s %6s %6s  %s\n", "transport", "loss", "goodput Gb/s", "/lossless",
              "FCT p50 / p99 / max us", "resent", "lost", "drops", "data");
  for (const Row& r : rows) {
    const RunResult& x = r.result;
    std::printf("  %-9s %-7s ", transport_name(r.point), loss_text(r.point, "-").c_str());
    if (x.outcome == RunResult::Outcome::ok || x.outcome == RunResult::Outcome::failed) {
      char ratio[16] = "-";
      if (r.ratio >= 0) std::snprintf(ratio, sizeof ratio, "%.3f", r.ratio);
      char fct[48];
      std::snprintf(fct, sizeof fct, "%.0f / %.0f / %.0f", x.fct_p50_us, x.fct_p99_us, x.fct_max_us);
      std::printf("%12.2f %9s %26s %8llu %6llu %6llu  %s\n", x.goodput_bps / 1e9, ratio, fct,
                  static_cast<unsigned long long>(x.retransmitted_packets), static_cast<unsigned long long>(x.lost_packets),
                  static_cast<unsigned long long>(x.queue_drops), x.data_intact ? "intact" : "NOT intact");
    } else {
      std::printf("%s: %s\n", outcome_name(x.outcome), x.message.c_str());
    }
  }
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int run_sweep(const Scenario& sc, std::uint64_t seed, bool dcqcn, const std::string& out, const RunPoint& run) {
  std::vector<Row> rows;
  for (const Scenario& point : sweep_points(sc)) {
    Row r;
    r.point = point;
    r.dir = transport_name(point);
    if (sc.fabric) r.dir += "-loss" + loss_text(point);
    const std::string dir = out + "/" + r.dir;
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      std::fprintf(stderr, "uroce-sim: cannot create %s: %s\n", dir.c_str(), std::strerror(errno));
      return 2;
    }
    r.result = run(point, dir);
    if (r.result.outcome == RunResult::Outcome::unusable) return 2;
    if (r.result.outcome == RunResult::Outcome::refused) {
      rmdir(dir.c_str());  // no run, no files
      r.dir.clear();
    }
    rows.push_back(r);
  }
  set_ratios(rows);
  bool complete = true;
  for (const Row& r : rows) complete = complete && r.result.outcome == RunResult::Outcome::ok;
  write_csv(out + "/sweep.csv", rows, seed);
  write_json(out + "/sweep.json", sc, rows, seed, dcqcn, complete);
  print_table(sc, rows, seed, dcqcn);
  if (!complete) std::fprintf(stderr, "uroce-sim: the sweep is incomplete: a run was refused or failed (sweep.csv)\n");
  return complete ? 0 : 1;
}

}  // namespace uroce::simapp
