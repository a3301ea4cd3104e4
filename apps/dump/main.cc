// uroce-dump: prints every frame of a pcap file, one line each, decoding
// RoCEv2 headers and checking the ICRC.
#include <cstdio>
#include <cstring>
#include <string>

#include "dump/frame_printer.h"
#include "uroce/version.h"

namespace {

constexpr const char* kUsage =
    "usage: uroce-dump [--json] [--check] [--quiet] FILE.pcap\n"
    "  Prints one line per frame: addresses, BTH opcode, destination QP, PSN,\n"
    "  AckReq/SE, extension headers, AETH, payload length and ICRC check.\n"
    "  --json    one JSON object per line instead of text\n"
    "  --check   exit 1 if any RoCEv2 frame is malformed or fails its ICRC\n"
    "  --quiet   print only the closing summary (on stderr)\n"
    "Exit status: 0 ok, 1 unreadable file (or --check found bad frames), 2 bad usage.\n";

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  bool check = false;
  bool quiet = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") json = true;
    else if (arg == "--check") check = true;
    else if (arg == "--quiet" || arg == "-q") quiet = true;
    else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--version") {
      std::printf("uroce-dump %s\n", uroce::kVersion);
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "uroce-dump: unknown option '%s' (see uroce-dump --help)\n", arg.c_str());
      return 2;
    } else if (path.empty()) {
      path = arg;
    } else {
      std::fprintf(stderr, "uroce-dump: one file at a time ('%s' is extra; see --help)\n", arg.c_str());
      return 2;
    }
  }
  if (path.empty()) {
    std::fputs("uroce-dump: no pcap file given\n", stderr);
    std::fputs(kUsage, stderr);
    return 2;
  }

  std::string error;
  auto reader = uroce::pcap::Reader::open(path, error);
  if (!reader) {
    std::fprintf(stderr, "uroce-dump: %s\n", error.c_str());
    return 1;
  }
  if (reader->linktype() != 1) {
    std::fprintf(stderr, "uroce-dump: %s: link type %d is not Ethernet (EN10MB); capture on an Ethernet interface\n",
                 path.c_str(), reader->linktype());
    return 1;
  }

  uroce::dump::Totals totals;
  uroce::pcap::Frame frame;
  std::int64_t first_ts = 0;
  while (reader->next(frame)) {
    if (totals.frames == 0) first_ts = frame.ts_ns;
    const auto report = uroce::dump::analyse(totals.frames + 1, frame, first_ts);
    totals.add(report);
    if (!quiet) {
      const std::string line = json ? format_json(report) : format_text(report);
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
    }
  }
  std::fflush(stdout);
  std::fprintf(stderr, "%s: %s\n", path.c_str(), totals.summary().c_str());
  if (!reader->error().empty()) {
    std::fprintf(stderr, "uroce-dump: %s: stopped after frame %zu: %s\n", path.c_str(),
                 totals.frames, reader->error().c_str());
    return 1;
  }
  return (check && totals.malformed() != 0) ? 1 : 0;
}
