#include "netdev.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

namespace uroce::run {
namespace {

constexpr const char* kClass = "/sys/class";

std::string failed(const std::string& what) { return what + ": " + std::strerror(errno); }

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text << '\n';
  return static_cast<bool>(f);
}

// mkdir -p below /sys/class's tmpfs.
bool make_dirs(const std::string& path) {
  for (std::size_t at = std::strlen(kClass) + 1; at != std::string::npos;) {
    at = path.find('/', at + 1);
    if (mkdir(path.substr(0, at).c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

std::string show_netdev(const std::string& device, const std::string& ifname) {
  if (ifname.empty() || ifname.find('/') != std::string::npos || ifname == "." || ifname == "..")
    return "--netdev '" + ifname + "' is no interface name";
  const std::string net = std::string(kClass) + "/net/" + ifname;
  if (access(net.c_str(), F_OK) != 0)
    return "--netdev " + ifname + ": no such interface in this network namespace (" + net + ")";
  std::vector<std::string> classes, kernel_devices;
  if (DIR* d = opendir(kClass)) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') classes.emplace_back(e->d_name);
    }
    closedir(d);
  }
  if (DIR* d = opendir((std::string(kClass) + "/infiniband").c_str())) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.' && device != e->d_name) kernel_devices.emplace_back(e->d_name);
    }
    closedir(d);
  }
  if (unshare(CLONE_NEWNS) != 0)
    return failed("cannot show uroce0's interface in sysfs (a private mount namespace needs root): unshare");
  // The real /sys/class, reachable through this descriptor once covered; it
  // is opened in the new namespace, since a bind mount takes its source from
  // the caller's own.
  const int real = open(kClass, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (real < 0) return failed(std::string("open ") + kClass);
  std::string error;
  auto fail = [&](const std::string& what) {
    error = failed(what);
    close(real);
    return error;
  };
  // Private from here on: no mount below propagates to the host's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail("mount --make-rprivate /");
  if (mount("uroce-sysfs", kClass, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") != 0)
    return fail(std::string("mount tmpfs on ") + kClass);
  const std::string via = "/proc/self/fd/" + std::to_string(real) + "/";
  for (const std::string& c : classes) {
    if (c == "infiniband") continue;
    const std::string at = std::string(kClass) + "/" + c;
    if (mkdir(at.c_str(), 0755) != 0) return fail("mkdir " + at);
    if (mount((via + c).c_str(), at.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) return fail("bind " + at);
  }
  const std::string ib = std::string(kClass) + "/infiniband/";
  if (!make_dirs(ib + device + "/device/net") || !make_dirs(ib + device + "/ports/1/gid_attrs/ndevs") ||
      !make_dirs(ib + device + "/ports/1/gid_attrs/types"))
    return fail("mkdir " + ib + device);
  // A kernel's RDMA devices stay listed: their entries are links into
  // /sys/devices, which is not covered.
  for (const std::string& k : kernel_devices) {
    char target[4096];
    const ssize_t n = readlinkat(real, ("infiniband/" + k).c_str(), target, sizeof target - 1);
    if (n > 0 && symlink(std::string(target, static_cast<std::size_t>(n)).c_str(), (ib + k).c_str()) != 0)
      return fail("symlink " + ib + k);
  }
  if (symlink(net.c_str(), (ib + device + "/device/net/" + ifname).c_str()) != 0) return fail("symlink " + net);
  // GID 0 (fe80::) and GID 1 (::ffff:ADDR) are both RoCEv2 on that interface.
  for (const char* index : {"0", "1"}) {
    if (!write_file(ib + device + "/ports/1/gid_attrs/ndevs/" + index, ifname) ||
        !write_file(ib + device + "/ports/1/gid_attrs/types/" + index, "RoCE v2"))
      return fail("write " + ib + device + "/ports/1/gid_attrs");
  }
  // Read-only, as sysfs is to a program.
  if (mount(nullptr, kClass, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return fail(std::string("remount ") + kClass + " read-only");
  close(real);
  return "";
}

}  // namespace uroce::run
