// uroce-stat: an operator's live view of a running uroce program or uroced,
// read from its DPDK telemetry (what lib/device/telemetry.cc and uroced
// register): ports, engines and the busiest QPs, with rates taken from
// successive reads. It links nothing of the stack: every counter's name
// comes from the process's answers.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "stat/options.h"
#include "stat/snapshot.h"
#include "stat/targets.h"
#include "stat/telemetry_socket.h"
#include "stat/view.h"

namespace {

using namespace uroce::statview;

void on_signal(int) { request_stop(); }

// Ctrl-C and SIGTERM end the view; no SA_RESTART, so a wait in progress
// returns at once.
void catch_stop_signals() {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// Sleeps until monotonic second `at`; Interrupted on Ctrl-C.
void sleep_until(double at) {
  timespec t{};
  t.tv_sec = static_cast<time_t>(at);
  t.tv_nsec = static_cast<long>((at - static_cast<double>(t.tv_sec)) * 1e9);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, nullptr) == EINTR) {
    if (stop_requested()) throw Interrupted{};
  }
  if (stop_requested()) throw Interrupted{};
}

// Prints one refresh: JSON one object a line; a table over the last one on
// a terminal, else after it, a blank line between.
void show(const std::string& text, const Options& o) {
  const bool redraw = !o.json && isatty(STDOUT_FILENO);
  if (redraw) std::fputs("\x1b[H\x1b[2J", stdout);
  std::fputs(text.c_str(), stdout);
  if (!o.json && !redraw) std::fputs("\n", stdout);
  std::fflush(stdout);
}

// The next read's time: one interval on, or from now if a read ran late.
double next_read(double planned, double interval) {
  const double next = planned + interval;
  return next > now_seconds() ? next : now_seconds() + interval;
}

int watch(const Options& o, SnapshotReader& reader) {
  TelemetrySocket& sock = reader.socket();
  Snapshot before = reader.read(true, o.device);
  double planned = before.at + o.interval_s;
  for (;;) {
    sleep_until(planned);
    Snapshot after = reader.read(true, o.device);
    Report r = make_report(before, after, o.top);
    r.socket = sock.path();
    r.pid = sock.pid();
    r.process = process_name(sock.pid());
    r.uroced = reader.uroced();
    // The type and peer of the QPs shown only (one query each).
    for (QpView& q : r.qps) {
      const std::optional<Json> detail = reader.qp_detail(q.device, q.qpn);
      if (!detail) continue;
      if (const Json* t = detail->find("type"); t != nullptr && t->is_string()) q.type = t->text;
      if (const Json* g = detail->find("dest_gid"); g != nullptr && g->is_string()) q.peer_gid = g->text;
    }
    show(o.json ? format_json(r) : format_table(r), o);
    if (o.once) return 0;
    before = std::move(after);
    planned = next_read(planned, o.interval_s);
  }
}

int watch_qp(const Options& o, SnapshotReader& reader) {
  QpDetail d;
  d.qpn = *o.qp;
  bool found = false;
  for (const auto& [index, name] : reader.devices()) {
    if (o.device && static_cast<std::uint32_t>(index) != *o.device) continue;
    if (std::optional<Json> qp = reader.qp_detail(index, d.qpn)) {
      d.at_a = now_seconds();  // as the snapshots: when the answer arrived
      d.before = std::move(*qp);
      d.device = index;
      d.device_name = name;
      found = true;
      break;
    }
  }
  if (!found) {
    throw Failure(reader.socket().path() + ": no QP " + std::to_string(d.qpn) +
                  (o.device ? " on device " + std::to_string(*o.device) : std::string(" on any device")) +
                  " of the process (uroce-stat --once lists its QPs)");
  }
  double planned = d.at_a + o.interval_s;
  for (;;) {
    sleep_until(planned);
    timespec wall{};
    clock_gettime(CLOCK_REALTIME, &wall);
    d.wall = static_cast<double>(wall.tv_sec) + static_cast<double>(wall.tv_nsec) / 1e9;
    std::optional<Json> qp = reader.qp_detail(d.device, d.qpn);
    if (!qp) throw Failure(reader.socket().path() + ": QP " + std::to_string(d.qpn) + " is gone (destroyed)");
    d.at_b = now_seconds();
    d.after = std::move(*qp);
    show(o.json ? format_qp_json(d) : format_qp_table(d), o);
    if (o.once) return 0;
    d.before = std::move(d.after);
    d.at_a = d.at_b;
    planned = next_read(planned, o.interval_s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse_options(std::vector<std::string>(argv, argv + argc));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "uroce-stat: %s\n", e.what());
    return 2;
  }
  catch_stop_signals();
  try {
    if (o.list) {
      std::fputs(format_targets(list_targets(std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000))), o.json).c_str(),
                 stdout);
      return 0;
    }
    TelemetrySocket sock(std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000)));
    sock.open(o.file_prefix.empty() ? socket_of_path(o.socket) : socket_of_prefix(o.file_prefix));
    SnapshotReader reader(sock);
    return o.qp ? watch_qp(o, reader) : watch(o, reader);
  } catch (const Failure& f) {
    std::fflush(stdout);
    std::fprintf(stderr, "uroce-stat: %s\n", f.what());
    return 1;
  } catch (const Interrupted&) {
    return 0;
  }
}
