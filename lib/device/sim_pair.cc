#include "device/sim_pair.h"

#include "device/step.h"

namespace uroce::device {
namespace {

constexpr std::uint8_t kMacA[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x0a};
constexpr std::uint8_t kMacB[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0x0b};

std::unique_ptr<Context> make(engine::PacketIo& io, engine::Clock& clock, const std::uint8_t mac[6], std::uint8_t ip,
                              std::uint64_t seed, const cc::DcqcnParams* dcqcn, std::uint8_t min_ack_timeout,
                              const cc::DelayParams* delay_cc) {
  PortConfig port;
  port.dcqcn = dcqcn;
  port.delay_cc = delay_cc;
  port.min_ack_timeout = min_ack_timeout;
  port.io = &io;
  port.clock = &clock;
  std::copy(mac, mac + 6, port.mac);
  port.gid = ipv4_gid({10, 99, 0, ip});
  port.seed = seed;
  std::string error;
  return Context::open(port, error);
}

}  // namespace

SimPair::SimPair(std::uint64_t seed, sim::Impairments a_to_b, sim::Impairments b_to_a, const cc::DcqcnParams* dcqcn,
                 std::uint8_t min_ack_timeout, const cc::DelayParams* delay_cc)
    : link(clock, seed, kMacA, kMacB, a_to_b, b_to_a),
      a(make(link.port(0), clock, kMacA, 1, seed, dcqcn, min_ack_timeout, delay_cc)),
      b(make(link.port(1), clock, kMacB, 2, seed + 1, dcqcn, min_ack_timeout, delay_cc)) {}

int SimPair::connect(QueuePair* qa, QueuePair* qb, const ConnectParams& p) {
  if (int rc = connect_rc(qa, b->gid(), qb->qp_num(), p.psn_a, p.psn_b, p)) return rc;
  return connect_rc(qb, a->gid(), qa->qp_num(), p.psn_b, p.psn_a, p);
}

bool SimPair::step() {
  Context* const devices[] = {a.get(), b.get()};
  return step_devices(clock, devices, link.next_delivery_ns());
}

}  // namespace uroce::device
