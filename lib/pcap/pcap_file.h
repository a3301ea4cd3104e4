// Reading and writing classic pcap files of Ethernet frames (libpcap).
// Control-path code: used by tools, tests and the simulated link's tap,
// never per packet on a worker core.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace uroce::pcap {

struct Frame {
  std::vector<std::uint8_t> data;  // the captured bytes
  std::uint32_t orig_len = 0;      // length on the wire (> data.size() if cut by snaplen)
  std::int64_t ts_ns = 0;          // capture time
};

class Reader {
 public:
  // Opens `path`. On failure returns nullptr and sets `error` to a one-line
  // message ("cannot open X: No such file or directory").
  static std::unique_ptr<Reader> open(const std::string& path, std::string& error);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Reads the next frame. Returns false at the end of the file, or on a read
  // error (then error() is non-empty: a truncated file, for instance).
  bool next(Frame& frame);
  const std::string& error() const { return error_; }
  int linktype() const;  // DLT_EN10MB (1) for Ethernet

 private:
  explicit Reader(void* handle) : handle_(handle) {}
  void* handle_;
  std::string error_;
};

// Every frame of `path`; false (with `error` set) if it cannot be read whole.
bool read_all(const std::string& path, std::vector<Frame>& frames, std::string& error);

class Writer {
 public:
  // Creates `path` (Ethernet link type, nanosecond timestamps). nullptr and
  // `error` on failure.
  static std::unique_ptr<Writer> create(const std::string& path, std::string& error);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void write(std::span<const std::uint8_t> frame, std::int64_t ts_ns);
  void flush();

 private:
  Writer(void* pcap, void* dumper) : pcap_(pcap), dumper_(dumper) {}
  void* pcap_;
  void* dumper_;
};

}  // namespace uroce::pcap
