// Two network namespaces joined by a veth pair (MTU 9000), for tests whose
// programs run one in each: made once per test binary (a function-local
// static) and removed at exit. The kernels hold SUBNET.1 and SUBNET.2 (the
// programs' own TCP exchanges); DPDK ports take other addresses on the same
// links.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace uroce::test {

class VethNamespaces {
 public:
  // Namespaces uroce-TAG-a-PID and uroce-TAG-b-PID, interfaces IFACE0 (in a)
  // and IFACE1 (in b), addresses SUBNET.1/24 and SUBNET.2/24.
  VethNamespaces(const std::string& tag, const std::string& iface, const std::string& subnet)
      : a("uroce-" + tag + "-a-" + std::to_string(getpid())), b("uroce-" + tag + "-b-" + std::to_string(getpid())) {
    const std::string i0 = iface + "0", i1 = iface + "1";
    const std::string cmds[] = {
        "ip netns add " + a,
        "ip netns add " + b,
        "ip -n " + a + " link add " + i0 + " mtu 9000 type veth peer name " + i1 + " mtu 9000 netns " + b,
        "ip -n " + a + " addr add " + subnet + ".1/24 dev " + i0,
        "ip -n " + b + " addr add " + subnet + ".2/24 dev " + i1,
        "ip -n " + a + " link set " + i0 + " up",
        "ip -n " + a + " link set lo up",
        "ip -n " + b + " link set " + i1 + " up",
        "ip -n " + b + " link set lo up"};
    for (const std::string& c : cmds) {
      if (std::system((c + " >/dev/null 2>&1").c_str()) != 0) {
        error_ = "'" + c + "' failed: needs root and iproute2 (tools/setup.sh installs it)";
        return;
      }
    }
  }
  ~VethNamespaces() {
    std::system(("ip netns del " + a + " 2>/dev/null").c_str());
    std::system(("ip netns del " + b + " 2>/dev/null").c_str());
  }
  VethNamespaces(const VethNamespaces&) = delete;
  VethNamespaces& operator=(const VethNamespaces&) = delete;

  const std::string& error() const { return error_; }
  const std::string a;
  const std::string b;

 private:
  std::string error_;
};

}  // namespace uroce::test
