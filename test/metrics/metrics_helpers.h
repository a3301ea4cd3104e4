// What the exporter's tests share: QPs made by hand from the registry's
// rows, a strict reader of the exposition text, promtool, and a small HTTP
// client with deadlines.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "uroce/metrics.h"
#include "uroce/stats.h"

namespace uroce::test {

// A QP with every registry row (qp_stat_rows), zero, in state RTS.
inline QpStats make_qp(std::uint32_t qpn) {
  QpStats q;
  q.qp_num = qpn;
  q.state = IBV_QPS_RTS;
  q.qp_type = IBV_QPT_RC;
  q.dest_qp_num = qpn + 1000;
  q.counters = qp_stat_rows();
  return q;
}

inline Stat& row(QpStats& q, const char* name) {
  for (Stat& s : q.counters) {
    if (std::strcmp(s.name, name) == 0) return s;
  }
  ADD_FAILURE() << "no QP row " << name;
  static Stat none;
  return none;
}

// Traffic on a QP: bytes each way, and a packet per KiB.
inline void add_traffic(QpStats& q, std::uint64_t bytes) {
  row(q, "tx_bytes").value += bytes;
  row(q, "rx_bytes").value += bytes / 2;
  row(q, "tx_packets").value += bytes / 1024 + 1;
  row(q, "rx_packets").value += bytes / 2048 + 1;
}

// ----- the exposition text, read back strictly -----

struct Sample {
  std::string name;
  std::vector<metrics::Label> labels;
  std::string value;

  std::string label(const std::string& n) const {
    for (const auto& l : labels) {
      if (l.name == n) return l.value;
    }
    return "<none>";
  }
};

struct Family {
  std::string help;  // unescaped
  std::string type;
  std::vector<Sample> samples;
};

struct Page {
  std::vector<std::string> order;  // families as they came
  std::map<std::string, Family> families;
  std::vector<std::string> problems;  // where the text breaks the format's rules

  const Family* family(const std::string& name) const {
    const auto it = families.find(name);
    return it == families.end() ? nullptr : &it->second;
  }
  // The samples of `name` whose labels include all of `want`.
  std::vector<const Sample*> find(const std::string& name, const std::vector<metrics::Label>& want = {}) const {
    std::vector<const Sample*> out;
    const Family* f = family(name);
    if (f == nullptr) return out;
    for (const Sample& s : f->samples) {
      bool all = true;
      for (const auto& w : want) all = all && s.label(w.name) == w.value;
      if (all) out.push_back(&s);
    }
    return out;
  }
  // The one sample of `name` with labels `want`, as a number; NaN if not exactly one.
  double value(const std::string& name, const std::vector<metrics::Label>& want = {}) const {
    const auto found = find(name, want);
    return found.size() == 1 ? std::strtod(found[0]->value.c_str(), nullptr) : std::nan("");
  }
};

// Undoes the escapes of HELP text (quote false) or a label value (true);
// false on an escape the format does not have.
inline bool unescape(const std::string& s, bool quote, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out.push_back(s[i]);
      continue;
    }
    if (++i == s.size()) return false;
    if (s[i] == '\\') {
      out.push_back('\\');
    } else if (s[i] == 'n') {
      out.push_back('\n');
    } else if (quote && s[i] == '"') {
      out.push_back('"');
    } else {
      return false;
    }
  }
  return true;
}

inline bool valid_name(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (const char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// Reads `text` as version 0.0.4 requires it and as the exporter promises:
// each family's HELP then TYPE once, before its samples; its samples
// together; families sorted by name; every line ended by a newline.
inline Page parse_page(const std::string& text) {
  Page p;
  std::string current;  // the family whose lines these are
  std::size_t pos = 0;
  int n = 0;
  const auto problem = [&](const std::string& what) { p.problems.push_back("line " + std::to_string(n) + ": " + what); };
  while (pos < text.size()) {
    ++n;
    const auto end = text.find('\n', pos);
    if (end == std::string::npos) {
      problem("no newline at the end");
      break;
    }
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const bool help = line[2] == 'H';
      const auto sp = line.find(' ', 7);
      const std::string name = line.substr(7, sp == std::string::npos ? std::string::npos : sp - 7);
      const std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
      if (!valid_name(name)) problem("bad family name " + name);
      if (help) {
        if (p.families.count(name) != 0) {
          problem("a second HELP (or HELP after samples) for " + name);
          continue;
        }
        if (!p.order.empty() && !(p.order.back() < name)) problem(name + " is not sorted after " + p.order.back());
        p.order.push_back(name);
        current = name;
        if (!unescape(rest, false, p.families[name].help)) problem("bad escape in HELP of " + name);
      } else {
        if (name != current || !p.families[name].type.empty() || !p.families[name].samples.empty()) {
          problem("TYPE of " + name + " not right after its HELP");
        }
        if (rest != "counter" && rest != "gauge") problem("type " + rest);
        p.families[name].type = rest;
      }
      continue;
    }
    if (line.empty() || line[0] == '#') {
      problem("unexpected line '" + line + "'");
      continue;
    }
    Sample s;
    std::size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (i != std::string::npos && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const auto eq = line.find("=\"", i);
        if (eq == std::string::npos) break;
        metrics::Label l;
        l.name = line.substr(i, eq - i);
        if (!valid_name(l.name)) problem("bad label name " + l.name);
        std::size_t j = eq + 2;
        std::string raw;
        while (j < line.size() && line[j] != '"') {
          if (line[j] == '\\' && j + 1 < line.size()) raw.push_back(line[j++]);
          raw.push_back(line[j++]);
        }
        if (!unescape(raw, true, l.value)) problem("bad escape in a label value");
        s.labels.push_back(l);
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size() || line[i] != '}') {
        problem("unterminated labels: " + line);
        continue;
      }
      ++i;
    }
    if (i == std::string::npos || i >= line.size() || line[i] != ' ') {
      problem("no value: " + line);
      continue;
    }
    s.value = line.substr(i + 1);
    char* stop = nullptr;
    std::strtod(s.value.c_str(), &stop);
    if (s.value.empty() || *stop != '\0') problem("value '" + s.value + "' is not a number");
    if (s.name != current) problem(s.name + " outside its family's block (current " + current + ")");
    p.families[s.name].samples.push_back(std::move(s));
  }
  return p;
}

// ----- promtool -----

// What `promtool check metrics` says of `text` ("" and exit status 0 when it
// has nothing to say); a failure to run it says so.
inline std::string promtool_findings(const std::string& text) {
  const std::string promtool = UROCE_PROMTOOL;
  if (promtool.empty()) return "promtool not found: install Debian's prometheus package (tools/setup.sh)";
  char path[] = "/tmp/uroce-metrics-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "cannot make a temporary file";
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  std::string out;
  if (written) {
    const std::string cmd = promtool + " check metrics < " + path + " 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    if (f == nullptr) {
      out = "cannot run " + cmd;
    } else {
      char buf[4096];
      for (std::size_t k; (k = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, k);
      const int status = pclose(f);
      if (status != 0 && out.empty()) out = "promtool exited with status " + std::to_string(status);
      if (status != 0) out += " (exit status " + std::to_string(status) + ")";
    }
  } else {
    out = "cannot write the page to " + std::string(path);
  }
  unlink(path);
  return out;
}

// ----- an HTTP client with deadlines -----

inline int connect_to(std::uint16_t port, int rcvbuf = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t k = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (k <= 0) return false;
    off += static_cast<std::size_t>(k);
  }
  return true;
}

// Everything `fd` delivers until the peer closes (or resets), or `limit` passes.
inline std::string read_to_end(int fd, std::chrono::milliseconds limit, bool* closed = nullptr) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  if (closed != nullptr) *closed = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return out;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[65536];
    const ssize_t k = recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) {
      if (closed != nullptr) *closed = true;
      return out;
    }
    out.append(buf, static_cast<std::size_t>(k));
  }
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  bool complete = false;  // the server closed after the whole answer
};

inline Response parse_response(const std::string& raw, bool closed) {
  Response r;
  const auto end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  std::size_t pos = raw.find("\r\n") + 2;
  while (pos < end) {
    const auto eol = raw.find("\r\n", pos);
    const auto colon = raw.find(':', pos);
    if (colon != std::string::npos && colon < eol) {
      std::string name = raw.substr(pos, colon - pos);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = raw.substr(colon + 2, eol - colon - 2);
    }
    pos = eol + 2;
  }
  r.body = raw.substr(end + 4);
  r.complete = closed;
  return r;
}

// One request on a connection of its own; the answer as far as it came in `limit`.
inline Response http(std::uint16_t port, const std::string& request,
                     std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  bool closed = false;
  std::string raw;
  if (send_all(fd, request)) raw = read_to_end(fd, limit, &closed);
  close(fd);
  return parse_response(raw, closed);
}

inline Response get(std::uint16_t port, const std::string& path) {
  return http(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n");
}

}  // namespace uroce::test
