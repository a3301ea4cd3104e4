// libFuzzer harness: the pcap reader (lib/pcap) on arbitrary files. The
// input is written to a memory file (memfd) that Reader::open() reads
// through /proc/self/fd; every frame it returns is checked against the
// Frame contract and handed to parse_frame(), as uroce-dump and the golden
// tests do.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "pcap/pcap_file.h"
#include "wire/frame.h"

namespace {

int memory_file() {
  static const int fd = memfd_create("uroce-fuzz-pcap", 0);
  if (fd < 0) std::abort();
  return fd;
}

volatile std::uint64_t g_sink;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = memory_file();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  std::string error;
  auto reader = uroce::pcap::Reader::open(path, error);
  if (!reader) {
    if (error.empty()) std::abort();  // a failure always says why
    return 0;
  }
  g_sink = g_sink + static_cast<std::uint64_t>(reader->linktype());
  uroce::pcap::Frame frame;
  // A frame's bytes come from the file, so their count is bounded by it.
  std::size_t bytes = 0;
  while (reader->next(frame)) {
    bytes += frame.data.size();
    if (bytes > size) std::abort();
    uroce::wire::ParsedFrame p;
    uroce::wire::ParseOptions options;
    options.verify_icrc = false;
    g_sink = g_sink + static_cast<std::uint64_t>(uroce::wire::parse_frame(frame.data, p, options));
  }

  std::vector<uroce::pcap::Frame> frames;
  const bool whole = uroce::pcap::read_all(path, frames, error);
  if (!whole && error.empty()) std::abort();
  return 0;
}
