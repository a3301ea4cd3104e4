// Delay-based congestion control (cc = delay, lib/cc/delay.h) in the
// transport, over the simulated link: the device takes it or DCQCN, never
// both.
#include <gtest/gtest.h>

#include "cc/dcqcn.h"
#include "cc/delay.h"
#include "sim/sim_link.h"
#include "uroce/verbs.h"

namespace uroce::test {
namespace {

TEST(CongestionDelay, TheDeviceRefusesBothControllersAndTakesEitherAlone) {
  sim::VirtualClock clock;
  const std::uint8_t mac_a[6] = {2, 0, 0, 0, 0, 0xa};
  const std::uint8_t mac_b[6] = {2, 0, 0, 0, 0, 0xb};
  sim::SimLink link(clock, 1, mac_a, mac_b, {}, {});
  const cc::DcqcnParams dcqcn;
  const cc::DelayParams delay;
  PortConfig port;
  port.io = &link.port(0);
  port.clock = &clock;
  std::copy(mac_a, mac_a + 6, port.mac);
  port.gid = ipv4_gid({10, 99, 0, 1});
  port.dcqcn = &dcqcn;
  port.delay_cc = &delay;
  std::string error;
  EXPECT_EQ(Context::open(port, error), nullptr);
  EXPECT_NE(error.find("both dcqcn and delay_cc"), std::string::npos) << error;
  port.dcqcn = nullptr;
  error.clear();
  EXPECT_NE(Context::open(port, error), nullptr) << error;
  port.dcqcn = &dcqcn;
  port.delay_cc = nullptr;
  EXPECT_NE(Context::open(port, error), nullptr) << error;
}

}  // namespace
}  // namespace uroce::test
