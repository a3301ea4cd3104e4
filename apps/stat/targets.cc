#include "stat/targets.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "stat/json.h"
#include "stat/telemetry_socket.h"

namespace uroce::statview {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSocketName = "dpdk_telemetry.v2";

// "dpdk_telemetry.v2", or a later DPDK's "dpdk_telemetry.v2:N" for a second
// process on one prefix.
bool is_telemetry_socket_name(const std::string& name) {
  return name == kSocketName || name.rfind(std::string(kSocketName) + ":", 0) == 0;
}

bool exists(const std::string& path) {
  struct stat st{};
  return lstat(path.c_str(), &st) == 0;
}

}  // namespace

std::vector<std::string> runtime_roots() {
  std::vector<std::string> roots;
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  const std::string user_root = std::string(xdg != nullptr && *xdg != '\0' ? xdg : "/tmp") + "/dpdk";
  if (getuid() == 0) {
    roots = {"/var/run/dpdk", user_root};
  } else {
    roots = {user_root, "/var/run/dpdk"};
  }
  if (user_root != "/tmp/dpdk") roots.push_back("/tmp/dpdk");
  return roots;
}

std::string socket_of_prefix(const std::string& prefix) {
  for (const std::string& root : runtime_roots()) {
    const std::string path = root + "/" + prefix + "/" + kSocketName;
    if (exists(path)) return path;
  }
  std::string where;
  for (const std::string& root : runtime_roots()) where += (where.empty() ? "" : ", ") + root + "/" + prefix;
  throw Failure("no DPDK process with file prefix '" + prefix + "' (no telemetry socket in " + where +
                "): see uroce-stat --list");
}

std::string socket_of_path(const std::string& path) {
  const std::string link = path + ".telemetry";
  if (exists(link)) return link;  // uroced's, next to its service socket
  if (!exists(path)) {
    throw Failure(path + ": no such socket, and no " + link + ": is uroced running? (uroce-stat --list)");
  }
  return path;
}

std::vector<Target> list_targets(std::chrono::milliseconds timeout) {
  std::vector<Target> out;
  for (const std::string& root : runtime_roots()) {
    std::error_code ec;
    std::vector<fs::path> prefixes;
    for (const fs::directory_entry& d : fs::directory_iterator(root, ec)) prefixes.push_back(d.path());
    std::sort(prefixes.begin(), prefixes.end());
    for (const fs::path& dir : prefixes) {
      std::vector<std::string> sockets;
      std::error_code ec2;
      for (const fs::directory_entry& f : fs::directory_iterator(dir, ec2)) {
        if (is_telemetry_socket_name(f.path().filename().string())) sockets.push_back(f.path().string());
      }
      std::sort(sockets.begin(), sockets.end());
      for (const std::string& s : sockets) {
        Target t;
        t.prefix = dir.filename().string();
        t.socket = s;
        try {
          TelemetrySocket sock(timeout);
          sock.open(s);
          t.running = true;
          t.pid = sock.pid();
          t.process = process_name(t.pid);
          if (sock.has_command("/uroce/devices")) {
            const Json devices = sock.query("/uroce/devices");
            t.uroce_devices = devices.is_object() ? static_cast<int>(devices.keys.size()) : 0;
          }
          t.uroced = sock.has_command("/uroced/clients");
        } catch (const Failure& f) {
          const std::string why = f.what();
          t.problem = why.find("nothing listens") != std::string::npos ? "not running" : why.substr(s.size() + 2);
        }
        out.push_back(std::move(t));
      }
    }
  }
  return out;
}

std::string format_targets(const std::vector<Target>& targets, bool json) {
  if (json) {
    JsonWriter w;
    w.open_object().open_array("targets");
    for (const Target& t : targets) {
      w.open_object().text("prefix", t.prefix).text("socket", t.socket).boolean("running", t.running);
      if (t.running) {
        w.integer("pid", static_cast<std::uint64_t>(t.pid)).text("process", t.process);
        w.boolean("uroce", t.uroce_devices >= 0);
        if (t.uroce_devices >= 0) w.integer("uroce_devices", static_cast<std::uint64_t>(t.uroce_devices));
        w.boolean("uroced", t.uroced);
      } else {
        w.text("problem", t.problem);
      }
      w.close_object();
    }
    w.close_array().close_object();
    return w.str() + "\n";
  }
  if (targets.empty()) return "no DPDK telemetry sockets under " + runtime_roots()[0] + " (or the other runtime folders)\n";
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-24s %8s  %-16s %-14s %-7s %s\n", "PREFIX", "PID", "PROCESS", "UROCE", "UROCED",
                "SOCKET");
  out += line;
  for (const Target& t : targets) {
    if (!t.running) {
      std::snprintf(line, sizeof line, "%-24s %8s  %-16s %-14s %-7s %s\n", t.prefix.c_str(), "-", t.problem.c_str(), "-",
                    "-", t.socket.c_str());
    } else {
      const std::string uroce =
          t.uroce_devices < 0 ? "no" : "yes, " + std::to_string(t.uroce_devices) + (t.uroce_devices == 1 ? " device" : " devices");
      std::snprintf(line, sizeof line, "%-24s %8ld  %-16s %-14s %-7s %s\n", t.prefix.c_str(), t.pid,
                    t.process.empty() ? "?" : t.process.c_str(), uroce.c_str(), t.uroced ? "yes" : "no", t.socket.c_str());
    }
    out += line;
  }
  return out;
}

}  // namespace uroce::statview
