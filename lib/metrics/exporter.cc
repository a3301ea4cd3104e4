// The exporter's HTTP server: one thread, one poll() loop, non-blocking
// sockets, every connection bounded in time and size, so that a slow or
// hostile scraper costs this thread at most a slot until its deadline and
// never touches an engine; the page is collected at most once per
// min_interval whatever the scrapers do. See include/uroce/metrics.h.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "uroce/metrics.h"

namespace uroce::metrics {
namespace {

using Clock = std::chrono::steady_clock;

// The CPU time the calling thread has used, in seconds.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

constexpr std::size_t kHeadLimit = 8192;                  // a request head longer is refused (431)
constexpr auto kDrainTime = std::chrono::seconds(1);      // after the answer, for the client to close
constexpr auto kAcceptPause = std::chrono::milliseconds(100);  // after accept() ran out of descriptors
constexpr int kBacklog = 64;

std::string bad_address(const std::string& text, const std::string& why) {
  return "metrics: bad listen address \"" + text + "\": " + why +
         " (expected ADDR:PORT, [IPv6]:PORT or PORT, such as 127.0.0.1:9464)";
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string errno_text(int e) { return std::strerror(e); }

// What to do about a bind() that failed, after the error.
std::string bind_advice(int e) {
  switch (e) {
    case EACCES: return "(ports below 1024 need privileges: choose another with --metrics ADDR:PORT)";
    case EADDRNOTAVAIL: return "(choose an address of this host with --metrics ADDR:PORT)";
    default: return "(choose another with --metrics ADDR:PORT)";
  }
}

struct Response {
  int status = 200;
  const char* reason = "OK";
  const char* content_type = "text/plain; charset=utf-8";
  const char* extra_header = "";  // "Allow: GET, HEAD\r\n"
  std::shared_ptr<const std::string> body;
};

std::shared_ptr<const std::string> text(std::string s) { return std::make_shared<const std::string>(std::move(s)); }

Response plain(int status, const char* reason, std::string body) {
  Response r;
  r.status = status;
  r.reason = reason;
  r.body = text(std::move(body));
  return r;
}

struct Connection {
  enum class Phase { kReading, kWriting, kDraining };
  int fd = -1;
  Phase phase = Phase::kReading;
  Clock::time_point accepted;
  Clock::time_point deadline;
  std::string in;  // the request head so far
  std::string head;  // the answer's status line and headers
  std::shared_ptr<const std::string> body;
  bool send_body = true;  // not for HEAD
  std::size_t sent = 0;   // of head, then body
};

}  // namespace

std::string parse_listen_address(const std::string& text, sockaddr_storage& out, socklen_t& len) {
  std::string host;
  std::string port;
  if (all_digits(text)) {
    host = "127.0.0.1";
    port = text;
  } else if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) return bad_address(text, "no ] after the IPv6 address");
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad_address(text, "no :PORT after ]");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    if (host.find(':') == std::string::npos) return bad_address(text, "brackets are for IPv6 addresses");
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos) return bad_address(text, "no :PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad_address(text, "an IPv6 address goes in brackets, [::1]:9464");
    if (host.empty()) return bad_address(text, "no address before the port (127.0.0.1: this host only; 0.0.0.0: every address)");
    if (host == "localhost") host = "127.0.0.1";
  }
  if (!all_digits(port) || port.size() > 5 || std::stoul(port) > 65535) {
    return bad_address(text, "the port must be a number from 0 to 65535");
  }
  const auto port_number = static_cast<std::uint16_t>(std::stoul(port));
  std::memset(&out, 0, sizeof(out));
  if (host.find(':') != std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port_number);
    if (inet_pton(AF_INET6, host.c_str(), &a->sin6_addr) != 1) return bad_address(text, "not an IPv6 address");
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&out);
    a->sin_family = AF_INET;
    a->sin_port = htons(port_number);
    if (inet_pton(AF_INET, host.c_str(), &a->sin_addr) != 1) {
      return bad_address(text, "not an IPv4 address (names other than localhost are not looked up)");
    }
    len = sizeof(sockaddr_in);
  }
  return "";
}

std::string check_listen_address(const std::string& text) {
  sockaddr_storage ss;
  socklen_t len = 0;
  return parse_listen_address(text, ss, len);
}

namespace {

// A forked child has the exporter's descriptors but not its thread. Left
// alone, the child would keep the port bound after the parent is gone (a
// restart fails: Address already in use), and its stop() would wake the
// parent's thread through the shared eventfd and then wait forever for a
// thread it does not have. So a fork handler closes them in the child and
// marks each exporter forked away: there stop() only forgets the thread.
struct Descriptors {
  int listen_fd = -1;
  int wake_fd = -1;
  bool forked_away = false;
};

std::mutex g_running_mutex;
std::vector<Descriptors*> g_running;  // of exporters whose thread runs

// Nothing may change the list while a fork copies it.
void before_fork() { g_running_mutex.lock(); }
void after_fork_in_parent() { g_running_mutex.unlock(); }
void after_fork_in_child() {
  for (Descriptors* d : g_running) {
    ::close(d->listen_fd);
    ::close(d->wake_fd);
    d->listen_fd = d->wake_fd = -1;
    d->forked_away = true;
  }
  g_running.clear();  // no allocation: the capacity stays
  g_running_mutex.unlock();
}

void register_running(Descriptors* d) {
  static std::once_flag handlers;
  std::call_once(handlers, [] { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  std::lock_guard<std::mutex> lock(g_running_mutex);
  g_running.push_back(d);
}

void unregister_running(Descriptors* d) {
  std::lock_guard<std::mutex> lock(g_running_mutex);
  std::erase(g_running, d);
}

}  // namespace

struct Exporter::Impl : Descriptors {
  Impl(Options o, std::function<void(Snapshot&)> c)
      : options(std::move(o)), collect(std::move(c)), exposition(options.max_qps, options.qp_idle) {
    options.max_connections = std::max<std::size_t>(options.max_connections, 1);
  }

  void run(std::future<bool> go);
  void poll_once();
  void accept_all(Clock::time_point now);
  void read_request(Connection& c, Clock::time_point now);
  void answer(Connection& c, const Response& r, bool send_body, Clock::time_point now);
  void write_answer(Connection& c, Clock::time_point now);
  void drain(Connection& c);
  Response respond(std::string_view head);
  Response metrics_page();
  void refresh_page(Clock::time_point now);
  std::string index_page() const;
  void close_connection(Connection& c);

  Options options;
  std::function<void(Snapshot&)> collect;
  Exposition exposition;
  std::thread thread;
  bool stopping = false;  // the thread's own
  std::vector<Connection> connections;
  Clock::time_point accept_paused_until;

  // The last page (or the collection's failure), reused for min_interval.
  Response page;
  bool have_page = false;
  Clock::time_point page_at;
  double collect_seconds = 0;
  Snapshot last_snapshot;  // refresh_page's, kept between collections
  // When the page may be collected again: min_interval, or longer after a
  // long collection (Options::max_collect_share).
  Clock::duration refresh_after{};

  std::atomic<std::uint64_t> collections{0};
  std::atomic<std::uint64_t> scrapes{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> timed_out{0};
};

void Exporter::Impl::run(std::future<bool> go) {
  if (!go.get()) return;
  pthread_setname_np(pthread_self(), "uroce-metrics");
  // The baseline: QPs move from the next collection on (Exposition::render).
  // Its page has no QP of its own, so the first scrape collects afresh.
  refresh_page(Clock::now());
  have_page = false;
  while (!stopping) poll_once();
  for (Connection& c : connections) close_connection(c);
  connections.clear();
}

void Exporter::Impl::close_connection(Connection& c) {
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
}

void Exporter::Impl::poll_once() {
  std::vector<pollfd> fds;
  fds.reserve(connections.size() + 2);
  fds.push_back({wake_fd, POLLIN, 0});
  auto now = Clock::now();
  fds.push_back({now >= accept_paused_until ? listen_fd : -1, POLLIN, 0});
  Clock::time_point next = now >= accept_paused_until ? Clock::time_point::max() : accept_paused_until;
  for (const Connection& c : connections) {
    fds.push_back({c.fd, static_cast<short>(c.phase == Connection::Phase::kWriting ? POLLOUT : POLLIN), 0});
    next = std::min(next, c.deadline);
  }
  int timeout = -1;
  if (next != Clock::time_point::max()) {
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
    timeout = static_cast<int>(std::clamp<long long>(wait, 0, 60'000));
  }
  const int n = ::poll(fds.data(), fds.size(), timeout);
  if (n < 0 && errno != EINTR) {
    // Not expected (EFAULT, EINVAL, ENOMEM): do not spin on it.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return;
  }
  if (n > 0 && (fds[0].revents & POLLIN) != 0) {
    stopping = true;
    return;
  }
  now = Clock::now();
  for (std::size_t i = 0; i < connections.size(); ++i) {
    Connection& c = connections[i];
    const short ev = n > 0 ? fds[i + 2].revents : 0;
    if (ev != 0) {
      if (c.phase == Connection::Phase::kReading) {
        read_request(c, now);
      } else if (c.phase == Connection::Phase::kWriting) {
        write_answer(c, now);
      } else {
        drain(c);
      }
    }
    if (c.fd >= 0 && now >= c.deadline) {
      // A drained connection's deadline is its last chance to close, not a fault.
      if (c.phase != Connection::Phase::kDraining) timed_out.fetch_add(1, std::memory_order_relaxed);
      close_connection(c);
    }
  }
  std::erase_if(connections, [](const Connection& c) { return c.fd < 0; });
  if (n > 0 && (fds[1].revents & POLLIN) != 0) accept_all(now);
}

void Exporter::Impl::accept_all(Clock::time_point now) {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EMFILE and friends: the pending connection stays; wait before trying again.
      if (errno != EAGAIN && errno != EWOULDBLOCK) accept_paused_until = now + kAcceptPause;
      return;
    }
    if (connections.size() >= options.max_connections) {
      // Make room by closing a connection that is not being answered: a
      // finished one first, else the one waiting longest for its request
      // (a scraper sends its request at once; what waits is idle or
      // hostile). If every slot is being answered, the newcomer goes.
      auto victim = connections.end();
      for (auto it = connections.begin(); it != connections.end(); ++it) {
        if (it->phase == Connection::Phase::kWriting) continue;
        const auto rank = [](const Connection& c) { return c.phase == Connection::Phase::kDraining ? 0 : 1; };
        if (victim == connections.end() || rank(*it) < rank(*victim) ||
            (rank(*it) == rank(*victim) && it->accepted < victim->accepted)) {
          victim = it;
        }
      }
      refused.fetch_add(1, std::memory_order_relaxed);
      if (victim == connections.end()) {
        ::close(fd);
        continue;
      }
      close_connection(*victim);
      connections.erase(victim);
    }
    now = Clock::now();  // the last one's request may have run a collection
    Connection c;
    c.fd = fd;
    c.accepted = now;
    c.deadline = now + options.read_timeout;
    connections.push_back(std::move(c));
    // A scraper's request is usually here already: answered now, its
    // connection is no longer one a newcomer would evict unanswered.
    read_request(connections.back(), now);
    if (connections.back().fd < 0) connections.pop_back();
  }
}

void Exporter::Impl::read_request(Connection& c, Clock::time_point now) {
  char buf[4096];
  for (;;) {
    const ssize_t got = ::recv(c.fd, buf, sizeof(buf), 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      close_connection(c);
      return;
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      return;  // the rest later
    }
    c.in.append(buf, static_cast<std::size_t>(got));
    const auto end = std::min(c.in.find("\r\n\r\n"), c.in.find("\n\n"));
    if (end != std::string::npos && end <= kHeadLimit) {
      const auto line_end = c.in.find_first_of("\r\n");
      const std::string_view line(c.in.data(), line_end);
      const Response r = respond(line);
      const bool head_only = line.rfind("HEAD ", 0) == 0;
      answer(c, r, !head_only, now);
      return;
    }
    if (c.in.size() > kHeadLimit) {
      answer(c, plain(431, "Request Header Fields Too Large", "request head over 8 KiB\n"), true, now);
      return;
    }
  }
}

// The answer to a request line "GET /metrics HTTP/1.1".
Response Exporter::Impl::respond(std::string_view line) {
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/", 0) != 0) {
    return plain(400, "Bad Request", "not an HTTP request\n");
  }
  const auto method = line.substr(0, sp1);
  auto path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    Response r = plain(405, "Method Not Allowed", "only GET and HEAD\n");
    r.extra_header = "Allow: GET, HEAD\r\n";
    return r;
  }
  if (path == "/metrics") return metrics_page();
  if (path == "/") return plain(200, "OK", index_page());
  return plain(404, "Not Found", "no such page: the metrics are at /metrics\n");
}

Response Exporter::Impl::metrics_page() {
  scrapes.fetch_add(1, std::memory_order_relaxed);
  const auto now = Clock::now();
  if (!have_page || now - page_at >= refresh_after) refresh_page(now);
  return page;
}

void Exporter::Impl::refresh_page(Clock::time_point now) {
  // The last collection's, handed back to be written over: its memory
  // reused (a collection that frees megabytes has the kernel shoot down
  // the engines' TLBs as the heap shrinks).
  refresh_after = options.min_interval;
  Snapshot& snapshot = last_snapshot;
  snapshot.extra.clear();
  for (DeviceSnapshot& d : snapshot.devices) d.qp_labels.clear();
  const auto t0 = Clock::now();
  const double cpu0 = thread_cpu_seconds();
  std::string failure;
  try {
    collect(snapshot);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  collect_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto count = collections.fetch_add(1, std::memory_order_relaxed) + 1;
  have_page = true;
  page_at = now;
  if (!failure.empty()) {
    page = plain(500, "Internal Server Error", "metrics: the collection failed: " + failure + "\n");
    return;
  }
  const auto counter = [&](const char* name, const char* help, std::uint64_t v) {
    snapshot.extra.push_back({name, help, StatKind::kCounter, {}, static_cast<double>(v)});
  };
  counter("uroce_metrics_scrapes_total", "requests for /metrics answered (a page is reused for the minimum interval)",
          scrapes.load(std::memory_order_relaxed));
  counter("uroce_metrics_collections_total", "collections made (each makes control calls that hold the engines briefly)",
          count);
  counter("uroce_metrics_connections_refused_total", "connections closed to keep within the most open at once",
          refused.load(std::memory_order_relaxed));
  counter("uroce_metrics_connections_timed_out_total",
          "connections closed because the request did not arrive, or the answer was not taken, in time",
          timed_out.load(std::memory_order_relaxed));
  snapshot.extra.push_back({"uroce_metrics_collect_seconds", "time the last collection took", StatKind::kGauge, {},
                            collect_seconds});
  Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = text(exposition.render(snapshot, now));
  page = std::move(r);
  // The next collection waits for the whole of this one, rendering
  // included, over max_collect_share: at 10,000 QPs the rendering walks
  // tens of megabytes, and that memory traffic slows the engines' cores
  // too (a 10 Hz scrape cost a 64 KiB WRITE run 11% with only the
  // collection's control calls counted). This thread's CPU time, not the
  // wall clock's: on a loaded machine a page of one QP took 20 ms of wall
  // time, and Prometheus at 1 s got the same page twice (its rate() then
  // read a quarter low).
  const double spent = thread_cpu_seconds() - cpu0;
  if (options.max_collect_share > 0) {
    refresh_after = std::max(refresh_after, std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(spent / options.max_collect_share)));
  }
}

std::string Exporter::Impl::index_page() const {
  return "uroce: Prometheus metrics of this process's RoCEv2 counters are at /metrics (text format 0.0.4): "
         "per engine, per port, summed over each port's QPs, and per QP for the " +
         std::to_string(options.max_qps) + " QPs that moved the most (a QP's series go " +
         std::to_string(options.qp_idle.count()) +
         " s after it last moved). A page is collected at most every " +
         std::to_string(options.min_interval.count()) + " ms.\n";
}

void Exporter::Impl::answer(Connection& c, const Response& r, bool send_body, Clock::time_point now) {
  const std::size_t length = r.body ? r.body->size() : 0;
  c.head = "HTTP/1.1 " + std::to_string(r.status) + " " + r.reason + "\r\nContent-Type: " + r.content_type +
           "\r\nContent-Length: " + std::to_string(length) + "\r\n" + r.extra_header + "Connection: close\r\n\r\n";
  c.body = r.body;
  c.send_body = send_body && c.body;
  c.sent = 0;
  c.in.clear();
  c.in.shrink_to_fit();
  c.phase = Connection::Phase::kWriting;
  // From now, not from when the request came: a collection may have run since.
  now = Clock::now();
  c.deadline = now + options.write_timeout;
  write_answer(c, now);
}

void Exporter::Impl::write_answer(Connection& c, Clock::time_point now) {
  const std::size_t body_size = c.send_body ? c.body->size() : 0;
  while (c.sent < c.head.size() + body_size) {
    iovec iov[2];
    int count = 0;
    if (c.sent < c.head.size()) {
      iov[count++] = {const_cast<char*>(c.head.data()) + c.sent, c.head.size() - c.sent};
      if (body_size > 0) iov[count++] = {const_cast<char*>(c.body->data()), body_size};
    } else {
      const std::size_t off = c.sent - c.head.size();
      iov[count++] = {const_cast<char*>(c.body->data()) + off, body_size - off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(count);
    const ssize_t put = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (put < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) close_connection(c);
      return;
    }
    c.sent += static_cast<std::size_t>(put);
  }
  // All sent: say so, and wait briefly for the client to close first, so
  // that what it sent after its request does not reset the answer away.
  ::shutdown(c.fd, SHUT_WR);
  c.head.clear();
  c.body.reset();
  c.phase = Connection::Phase::kDraining;
  c.deadline = now + std::min<Clock::duration>(kDrainTime, options.read_timeout);
}

void Exporter::Impl::drain(Connection& c) {
  char buf[4096];
  for (;;) {
    const ssize_t got = ::recv(c.fd, buf, sizeof(buf), 0);
    if (got > 0) continue;
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close_connection(c);
    return;
  }
}

Exporter::Exporter(Options options, std::function<void(Snapshot&)> collect)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(collect))) {}

Exporter::~Exporter() { stop(); }

bool Exporter::start(std::string& error) {
  Impl& m = *impl_;
  if (m.thread.joinable()) {
    error = "metrics: the exporter is running already";
    return false;
  }
  sockaddr_storage addr;
  socklen_t len = 0;
  error = parse_listen_address(m.options.listen, addr, len);
  if (!error.empty()) return false;
  const auto fail = [&](const std::string& what) {
    error = what;
    unregister_running(&m);
    if (m.listen_fd >= 0) ::close(m.listen_fd);
    if (m.wake_fd >= 0) ::close(m.wake_fd);
    m.listen_fd = m.wake_fd = -1;
    return false;
  };
  const std::string where = "metrics: cannot listen on " + m.options.listen + ": ";
  m.listen_fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (m.listen_fd < 0) return fail(where + errno_text(errno));
  const int one = 1;
  // A restarted program gets its port back while old connections linger
  // in TIME_WAIT; a port another socket listens on still fails.
  ::setsockopt(m.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(m.listen_fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    const int e = errno;
    return fail(where + errno_text(e) + " " + bind_advice(e));
  }
  if (::listen(m.listen_fd, kBacklog) != 0) return fail(where + errno_text(errno));
  sockaddr_storage bound;
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    return fail(where + errno_text(errno));
  }
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  m.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.wake_fd < 0) return fail("metrics: cannot make the exporter's wake-up descriptor: " + errno_text(errno));
  // From here a fork closes the descriptors in the child.
  register_running(&m);

  // Signals stay with the program's threads: the new thread starts with
  // all of them blocked.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  std::promise<bool> go;
  try {
    m.thread = std::thread(&Impl::run, &m, go.get_future());
  } catch (const std::system_error& e) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    port_ = 0;
    return fail(std::string("metrics: cannot start the exporter's thread: ") + e.what());
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!m.options.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    bool valid = true;
    for (const int cpu : m.options.cpus) {
      if (cpu < 0 || cpu >= CPU_SETSIZE) valid = false;
      if (valid) CPU_SET(cpu, &set);
    }
    const int rc = valid ? pthread_setaffinity_np(m.thread.native_handle(), sizeof(set), &set) : EINVAL;
    if (rc != 0) {
      go.set_value(false);
      m.thread.join();
      port_ = 0;
      return fail("metrics: cannot run the exporter on the CPUs given: " + errno_text(rc) +
                  " (give CPUs this process may use)");
    }
  }
  go.set_value(true);
  return true;
}

void Exporter::stop() {
  Impl& m = *impl_;
  if (m.forked_away) {
    // A forked child: the thread is the parent's. Its handle is let go of
    // without a call on it (joining would wait forever; ~thread would abort).
    if (m.thread.joinable()) static_cast<void>(new std::thread(std::move(m.thread)));
    m.forked_away = false;
    return;
  }
  if (m.thread.joinable()) {
    const std::uint64_t one = 1;
    // The eventfd is non-blocking and read by nobody: one write always fits.
    [[maybe_unused]] const ssize_t w = ::write(m.wake_fd, &one, sizeof(one));
    m.thread.join();
  }
  {
    // Closed and forgotten together, so a fork sees both or neither.
    std::lock_guard<std::mutex> lock(g_running_mutex);
    if (m.listen_fd >= 0) ::close(m.listen_fd);
    if (m.wake_fd >= 0) ::close(m.wake_fd);
    m.listen_fd = m.wake_fd = -1;
    std::erase(g_running, static_cast<Descriptors*>(&m));
  }
  m.stopping = false;
}

std::uint64_t Exporter::collections() const { return impl_->collections.load(std::memory_order_relaxed); }
std::uint64_t Exporter::connections_refused() const { return impl_->refused.load(std::memory_order_relaxed); }
std::uint64_t Exporter::connections_timed_out() const { return impl_->timed_out.load(std::memory_order_relaxed); }

}  // namespace uroce::metrics
