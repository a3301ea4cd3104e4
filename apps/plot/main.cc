// uroce-plot: line charts for the performance report, from a JSON file of
// series (see chart_spec.h for its shape) to a PNG.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "common/text_file.h"
#include "plot/chart_spec.h"
#include "plot/draw_chart.h"

namespace {

constexpr const char* kUsage = "usage: uroce-plot IN.json OUT.png\n";

// Every fault is one line and exit status 2.
int fail(const std::string& what) {
  std::fprintf(stderr, "uroce-plot: %s\n", what.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc != 3) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string in = argv[1], out = argv[2];
  std::string text, error;
  // An ifstream opens a directory and reads nothing from it.
  std::error_code ec;
  if (std::filesystem::is_directory(in, ec)) return fail("cannot read " + in + ": it is a directory");
  errno = 0;
  if (!uroce::app::read_text_file(in, text)) {
    return fail("cannot read " + in + (errno != 0 ? std::string(": ") + std::strerror(errno) : ""));
  }
  uroce::plotapp::ChartSpec spec;
  if (!uroce::plotapp::parse_chart_spec(text, spec, error)) return fail(in + ": " + error);
  if (!uroce::plotapp::draw_chart(spec, out, error)) return fail(error);
  return 0;
}
