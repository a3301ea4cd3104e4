// Runs uroce-sim as a user does and reads what it writes: its exit status
// and output, summary.json (fields by name), the CSV header and its number
// of rows (what tools/plot.py draws from). For the tests of uroce-sim's
// scenarios.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace uroce::test {

struct SimRun {
  int status = -1;
  std::string output;
  std::string summary;
  std::string csv_header;
  double csv_rows = 0;  // after the header
  // A sweep: sweep.csv's lines (the header first) and sweep.json, and each
  // run's summary.json by its directory's name; empty for a single run.
  std::vector<std::string> sweep_csv;
  std::string sweep_json;
  std::map<std::string, std::string> point_summary;
};

inline std::string read_whole(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `args` after the binary's path; the output goes to a directory of its
// own, removed afterwards (runs may go in parallel).
inline SimRun run_sim(const std::string& args) {
  namespace fs = std::filesystem;
  static std::atomic<int> runs{0};
  const fs::path dir =
      fs::temp_directory_path() / ("uroce-sim-" + std::to_string(getpid()) + "-" + std::to_string(runs++));
  fs::remove_all(dir);
  SimRun r;
  FILE* p = popen((std::string(UROCE_SIM_BIN) + " " + args + " --out " + dir.string() + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  r.status = WEXITSTATUS(pclose(p));
  r.summary = read_whole(dir / "summary.json");
  std::ifstream sweep(dir / "sweep.csv");
  for (std::string row; std::getline(sweep, row);) r.sweep_csv.push_back(row);
  r.sweep_json = read_whole(dir / "sweep.json");
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_directory()) r.point_summary[e.path().filename().string()] = read_whole(e.path() / "summary.json");
    }
  }
  std::ifstream csv(dir / "timeseries.csv");
  std::getline(csv, r.csv_header);
  for (std::string row; std::getline(csv, row);) r.csv_rows += 1;
  fs::remove_all(dir);
  return r;
}

// A scenario file with `text`; removed with the object.
class ScenarioFile {
 public:
  explicit ScenarioFile(const std::string& text) {
    static int n = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("uroce-sim-scenario-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".conf");
    std::ofstream(path_) << text;
  }
  ~ScenarioFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// A number (or true/false as 1/0) of summary.json; -1 if it is missing.
inline double field(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": ([0-9.e+-]+|true|false)"))) return -1;
  if (m[1] == "true") return 1;
  if (m[1] == "false") return 0;
  return std::stod(m[1]);
}

// A list of numbers of summary.json; empty if it is missing.
inline std::vector<double> list_field(const std::string& json, const std::string& key) {
  std::smatch m;
  std::vector<double> out;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": \\[([^\\]]*)\\]"))) return out;
  std::stringstream items(m[1].str());
  for (std::string item; std::getline(items, item, ',');) out.push_back(std::stod(item));
  return out;
}

struct Phase {
  double flows, jain, utilisation, worst_deviation;
};

inline std::vector<Phase> phases(const std::string& summary) {
  std::vector<Phase> out;
  const std::regex re(
      R"(\{"from_us": [0-9]+, "to_us": [0-9]+, "flows": ([0-9]+), "jain": ([0-9.e+-]+), "utilisation": ([0-9.e+-]+), "worst_deviation": ([0-9.e+-]+)\})");
  for (auto it = std::sregex_iterator(summary.begin(), summary.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back(Phase{std::stod((*it)[1]), std::stod((*it)[2]), std::stod((*it)[3]), std::stod((*it)[4])});
  }
  return out;
}

}  // namespace uroce::test
