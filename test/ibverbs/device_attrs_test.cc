// Issue 27's libibverbs items through a C program built against rdma-core's
// stock headers (device_attrs.c), run with LD_LIBRARY_PATH at our
// libibverbs.so.1 and librdmacm.so.1 and the device named by the
// environment (EAL on --no-huge, net_ring), as ibverbs_test.cc runs its
// client: the device's attributes (vendor id, capability flags, completion
// vectors, fork status), the lines that say why a GID index is refused,
// XRC's objects and their errors, the device lists with no device, and
// exit() from a signal handler while a thread is inside a control verb.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "support/command.h"

namespace {

using uroce::test::Outcome;

const std::string kEal = "--no-huge --no-shconf --no-pci -l 0 -m 256 --vdev=net_ring0 --log-level=lib.eal:error";
const std::string kConfigured = "UROCE_EAL='" + kEal + "' UROCE_IP=10.0.0.1/24 ";

// Runs `command` under sh with no uroce variable inherited, then `env`
// (VAR=value ...) and LD_LIBRARY_PATH at our libraries; killed after
// `seconds` (timeout's status 137 then).
Outcome run(const std::string& env, const std::string& command, int seconds = 60) {
  const std::string line = uroce::test::kNoUroceEnv + "LD_LIBRARY_PATH=" UROCE_IBVERBS_DIR " " +
                           env + "timeout -s KILL " + std::to_string(seconds) + " " + command + " 2>&1";
  return uroce::test::run_command(line);
}

// The text of `out` between the marker line `from` and the next "--- ".
std::string section(const std::string& out, const std::string& from) {
  const auto at = out.find("--- " + from + "\n");
  if (at == std::string::npos) return "";
  const auto begin = at + from.size() + 5;
  return out.substr(begin, out.find("--- ", begin) - begin);
}

// Items 8 and 10: the attributes, and the refusals' lines. The checks of
// the values are the C program's; the lines on stderr are read here.
TEST(IbverbsAttrs, AttributesAreRdmaCoresAndRefusalsSayWhy) {
  const Outcome r = run(kConfigured, UROCE_DEVICE_ATTRS " attrs");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("device_attrs attrs: all checks passed"), std::string::npos) << r.out;
  // A GID index beyond the table: each verb says which entries exist.
  for (const auto& [marker, verb] : {std::pair{"query_gid 3", "ibv_query_gid"}, std::pair{"modify_qp 3", "ibv_modify_qp"},
                                     std::pair{"create_ah 3", "ibv_create_ah"}}) {
    const std::string said = section(r.out, marker);
    EXPECT_NE(said.find(std::string("uroce libibverbs: ") + verb + ": GID index 3 does not exist"), std::string::npos)
        << marker << ":\n" << r.out;
    EXPECT_NE(said.find("entries 0 (IPv6 link-local, fe80::) and 1 (IPv4-mapped, ::ffff:a.b.c.d)"), std::string::npos)
        << marker << ":\n" << r.out;
  }
  // XRC works through the inline verbs (device_attrs.c checks each answer):
  // nothing is said to be unsupported.
  EXPECT_EQ(section(r.out, "xrc").find("not supported"), std::string::npos) << r.out;
  // Raw packet QPs and tag-matching SRQs: a line each that says why.
  const std::string raw = section(r.out, "raw");
  for (const char* s : {"uroce libibverbs: ibv_create_qp: raw packet QPs are not supported: the DPDK port is uroce's",
                        "uroce libibverbs: ibv_create_srq_ex: tag-matching SRQs are not supported: uroce's engines "
                        "do not match MPI tags"}) {
    EXPECT_NE(raw.find(s), std::string::npos) << "no '" << s << "' in:\n" << r.out;
  }
}

// Item 15: with no device, rdma_get_devices is NULL with ENODEV, and
// ibv_get_device_list an empty list, both as rdma-core's.
TEST(IbverbsAttrs, WithNoDeviceRdmaGetDevicesIsNullAndTheVerbsListEmpty) {
  const Outcome r = run("", UROCE_DEVICE_ATTRS " nodevice");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("device_attrs nodevice: all checks passed"), std::string::npos) << r.out;
}

// Item 5: exit() from a signal handler while a thread is inside a control
// verb (a signal handler that interrupted that very thread; the main
// thread's while the other is inside; any thread the kernel picks for a
// process-directed signal), 100 runs in all, four at a time (a run mostly
// waits for EAL): each exits 0, none hangs (killed after 60 s, status 137;
// a run takes under 3 s on two loaded cores).
TEST(IbverbsAttrs, ExitFromASignalHandlerDuringAControlVerbNeverHangs) {
  constexpr unsigned kRuns = 100;
  constexpr unsigned kAtOnce = 4;
  const char* modes[] = {"thread", "main", "process"};
  std::array<Outcome, kRuns> outcomes;
  std::vector<std::thread> runners;
  for (unsigned k = 0; k < kAtOnce; ++k) {
    runners.emplace_back([&, k] {
      for (unsigned n = k; n < kRuns; n += kAtOnce) {
        outcomes[n] = run(kConfigured, UROCE_DEVICE_ATTRS " exit-in-verb " + std::string(modes[n % 3]) + " " +
                                           std::to_string(n),
                          60);
      }
    });
  }
  for (std::thread& t : runners) t.join();
  for (unsigned n = 0; n < kRuns; ++n) {
    const Outcome& r = outcomes[n];
    const std::string run_name = std::string(modes[n % 3]) + " " + std::to_string(n);
    EXPECT_EQ(r.status, 0) << "run " << run_name << (r.status == 137 ? ": hung" : "") << "\n" << r.out;
    EXPECT_NE(r.out.find("exit-in-verb " + run_name + ": signalling"), std::string::npos) << r.out;
  }
}

}  // namespace
