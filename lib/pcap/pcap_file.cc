#include "pcap/pcap_file.h"

#include <pcap/pcap.h>

namespace uroce::pcap {
namespace {

pcap_t* as_pcap(void* p) { return static_cast<pcap_t*>(p); }

}  // namespace

std::unique_ptr<Reader> Reader::open(const std::string& path, std::string& error) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO,
                                                      errbuf);
  if (p == nullptr) {
    error = "cannot read " + path + ": " + errbuf;
    return nullptr;
  }
  return std::unique_ptr<Reader>(new Reader(p));
}

Reader::~Reader() { pcap_close(as_pcap(handle_)); }

int Reader::linktype() const { return pcap_datalink(as_pcap(handle_)); }

bool Reader::next(Frame& frame) {
  pcap_pkthdr* hdr = nullptr;
  const u_char* bytes = nullptr;
  const int rc = pcap_next_ex(as_pcap(handle_), &hdr, &bytes);
  if (rc == 1) {
    frame.data.assign(bytes, bytes + hdr->caplen);
    frame.orig_len = hdr->len;
    frame.ts_ns = static_cast<std::int64_t>(hdr->ts.tv_sec) * 1'000'000'000 + hdr->ts.tv_usec;
    return true;
  }
  if (rc == PCAP_ERROR) error_ = pcap_geterr(as_pcap(handle_));
  return false;
}

bool read_all(const std::string& path, std::vector<Frame>& frames, std::string& error) {
  auto reader = Reader::open(path, error);
  if (!reader) return false;
  Frame f;
  while (reader->next(f)) frames.push_back(f);
  if (!reader->error().empty()) {
    error = path + ": " + reader->error();
    return false;
  }
  return true;
}

std::unique_ptr<Writer> Writer::create(const std::string& path, std::string& error) {
  pcap_t* p = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, 65535, PCAP_TSTAMP_PRECISION_NANO);
  if (p == nullptr) {
    error = "cannot create a pcap handle";
    return nullptr;
  }
  pcap_dumper_t* d = pcap_dump_open(p, path.c_str());
  if (d == nullptr) {
    error = "cannot write " + path + ": " + pcap_geterr(p);
    pcap_close(p);
    return nullptr;
  }
  return std::unique_ptr<Writer>(new Writer(p, d));
}

Writer::~Writer() {
  pcap_dump_close(static_cast<pcap_dumper_t*>(dumper_));
  pcap_close(as_pcap(pcap_));
}

void Writer::write(std::span<const std::uint8_t> frame, std::int64_t ts_ns) {
  pcap_pkthdr hdr{};
  hdr.ts.tv_sec = static_cast<time_t>(ts_ns / 1'000'000'000);
  hdr.ts.tv_usec = static_cast<suseconds_t>(ts_ns % 1'000'000'000);  // ns: nano precision
  hdr.caplen = static_cast<bpf_u_int32>(frame.size());
  hdr.len = hdr.caplen;
  pcap_dump(reinterpret_cast<u_char*>(dumper_), &hdr, frame.data());
}

void Writer::flush() { pcap_dump_flush(static_cast<pcap_dumper_t*>(dumper_)); }

}  // namespace uroce::pcap
