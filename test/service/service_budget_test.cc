// What uroced charges to a client's budgets is what it allocates for it
// (issue 27): a CQ's engine rings in their power-of-two slots, the
// client's table of address handles; and what it lists per client: SRQs
// and address handles beside PDs, MRs, CQs and QPs (--stats, telemetry).
// Each test starts a daemon of its own on a net_null port.
#include <gtest/gtest.h>

#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "service/client.h"
#include "service/protocol.h"
#include "service/shm.h"
#include "support/telemetry_client.h"
#include "support/uroced.h"
#include "uroce/verbs.h"

namespace {

namespace svc = uroce::service;
constexpr std::uint64_t kMiB = 1ull << 20;

struct Daemon : uroce::test::TempDir, uroce::test::Uroced {
  explicit Daemon(const std::string& extra = "")
      : TempDir("/tmp/uroce-svcbud-"),
        Uroced({.eal = "--no-huge --no-shconf --no-pci -m 256 --log-level=lib.eal:error -l 0 --vdev=net_null0",
                .prefix = "uroce-svcbud-" + std::to_string(getpid()) + "-" + std::to_string(counter()++),
                .ip = "10.0.9.1/24",
                .socket = dir + "/uroced.sock",
                .log = dir + "/uroced.log",
                .extra = extra}) {}
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// What the daemon allocates for a CQ of `cqe`: its shared ring and an
// engine ring per worker, each of the smallest power of two of slots
// holding cqe completions.
std::uint64_t cq_bytes(std::uint32_t cqe, std::uint32_t workers) {
  const std::uint32_t slots = svc::ring_slots(cqe);
  return svc::page_round(svc::Ring<ibv_wc>::bytes(slots)) + std::uint64_t{workers} * slots * sizeof(ibv_wc);
}
// What it charged before: cqe completions per engine ring.
std::uint64_t cq_bytes_as_once_charged(std::uint32_t cqe, std::uint32_t workers) {
  const std::uint32_t slots = svc::ring_slots(cqe);
  return svc::page_round(svc::Ring<ibv_wc>::bytes(slots)) + std::uint64_t{workers} * cqe * sizeof(ibv_wc);
}

struct Raw {
  std::unique_ptr<svc::Client> c;
  std::string why;
  explicit Raw(const Daemon& d) { c = svc::Client::connect(d.socket, why); }
  std::uint32_t workers() const { return std::max<std::uint32_t>(c->hello().workers, 1); }
  std::uint32_t pd() {
    svc::Request r;
    r.op = svc::Op::kAllocPd;
    svc::Reply y;
    return c->call(r, y, nullptr, 0, nullptr, why) == 0 ? y.handle : 0;
  }
  std::unique_ptr<svc::RemoteCq> cq(std::uint32_t cqe, int& err) { return c->create_cq(cqe, nullptr, nullptr, why, err); }
  std::unique_ptr<svc::RemoteQp> qp(std::uint32_t pd, std::uint32_t cq, ibv_qp_type type, int& err) {
    svc::CreateQp a;
    a.pd = pd;
    a.send_cq = a.recv_cq = cq;
    a.qp_type = type;
    a.cap = ibv_qp_cap{1, 1, 1, 1, 0};
    return c->create_qp(a, why, err);
  }
};

// A CQ whose cqe is one past a power of two takes twice the slots in each
// engine ring: the budget counts them. A cqe and a budget are picked so
// that the old charge (cqe completions) fits and the allocation does not.
TEST(ServiceBudget, ACqIsChargedTheRingSlotsItAllocates) {
  std::uint32_t cqe = 0, mb = 0;
  std::string probe_why;
  std::uint32_t workers = 1;
  {
    Daemon probe;
    ASSERT_EQ(probe.error, "");
    Raw r(probe);
    ASSERT_TRUE(r.c) << r.why;
    workers = r.workers();
  }
  for (std::uint32_t k = 10; k <= 18 && cqe == 0; ++k) {
    const std::uint32_t n = (1u << k) + 1;
    const std::uint64_t real = cq_bytes(n, workers), old = cq_bytes_as_once_charged(n, workers);
    for (std::uint32_t m = 1; m <= 64; ++m) {
      if (old <= m * kMiB && m * kMiB < real) {
        cqe = n;
        mb = m;
        break;
      }
    }
  }
  ASSERT_NE(cqe, 0u) << "no cqe between a charge of cqe and one of its slots for " << workers << " workers";
  Daemon d("--max-object-mb " + std::to_string(mb));
  ASSERT_EQ(d.error, "");
  Raw r(d);
  ASSERT_TRUE(r.c) << r.why;
  int err = 0;
  EXPECT_EQ(r.cq(cqe, err), nullptr) << "a CQ of " << cqe << " (" << cq_bytes(cqe, workers) << " bytes) under "
                                     << mb << " MiB";
  EXPECT_EQ(err, ENOMEM);
  EXPECT_NE(r.why.find("max_object_mb"), std::string::npos) << r.why;
  // One of the power of two below fits: the budget itself is not the refusal.
  auto fits = r.cq(cqe - 1, err);
  EXPECT_NE(fits, nullptr) << r.why;
  EXPECT_TRUE(d.alive());
}

// The table of address handles (a slot per AH number) is charged when a
// client's first UD QP makes it: with less room left than the table, a
// UD QP is refused with the reason, while an RC QP of the same size fits.
TEST(ServiceBudget, TheAddressHandleTableIsChargedToTheClient) {
  Daemon d("--max-object-mb 1");
  ASSERT_EQ(d.error, "");
  Raw r(d);
  ASSERT_TRUE(r.c) << r.why;
  const std::uint32_t pd = r.pd();
  ASSERT_NE(pd, 0u) << r.why;
  const std::uint64_t table = sizeof(void*) * std::uint64_t{svc::kMaxAhNumber};
  // CQs until between 120 KiB and 200 KiB of the MiB are left: room for a
  // small QP (about 75 KiB), not for it and the table (256 KiB).
  std::vector<std::unique_ptr<svc::RemoteCq>> cqs;
  std::uint64_t left = kMiB;
  while (left > 200 * 1024) {
    std::uint32_t cqe = 1u << 15;
    while (cqe > 16 && cq_bytes(cqe, r.workers()) + 120 * 1024 > left) cqe /= 2;
    int err = 0;
    cqs.push_back(r.cq(cqe, err));
    ASSERT_NE(cqs.back(), nullptr) << r.why << " (a CQ of " << cqe << " with " << left << " bytes left)";
    left -= cq_bytes(cqe, r.workers());
  }
  ASSERT_LT(left, table);
  int err = 0;
  auto rc = r.qp(pd, cqs[0]->handle, IBV_QPT_RC, err);
  ASSERT_NE(rc, nullptr) << r.why;
  EXPECT_EQ(r.c->destroy_qp(rc.get(), r.why), 0) << r.why;
  auto ud = r.qp(pd, cqs[0]->handle, IBV_QPT_UD, err);
  EXPECT_EQ(ud, nullptr);
  EXPECT_EQ(err, ENOMEM);
  EXPECT_NE(r.why.find("address handles"), std::string::npos) << r.why;
  EXPECT_NE(r.why.find("max_object_mb"), std::string::npos) << r.why;
  // With the largest CQ given back the table fits, and the UD QP with it.
  ASSERT_GE(cqs.size(), 2u);
  EXPECT_EQ(r.c->destroy_cq(cqs.front().get(), r.why), 0) << r.why;
  ud = r.qp(pd, cqs.back()->handle, IBV_QPT_UD, err);
  EXPECT_NE(ud, nullptr) << r.why;
}

// --stats and /uroced/clients list each client's SRQs and address handles.
TEST(ServiceBudget, StatsAndTelemetryListSrqsAndAddressHandles) {
  Daemon d;
  ASSERT_EQ(d.error, "");
  std::string error;
  auto ctx = uroce::Context::attach(d.socket, error);
  ASSERT_TRUE(ctx) << error;
  uroce::ProtectionDomain* pd = ctx->alloc_pd();
  ASSERT_NE(pd, nullptr);
  uroce::SharedReceiveQueue* srq = pd->create_srq(uroce::SrqInitAttr{8, 1, 0});
  ASSERT_NE(srq, nullptr) << ctx->last_error();
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  attr.grh.dgid = ctx->gid();
  attr.grh.sgid_index = 1;
  uroce::AddressHandle* ah1 = pd->create_ah(attr);
  ASSERT_NE(ah1, nullptr) << ctx->last_error();
  uroce::AddressHandle* ah2 = pd->create_ah(attr);
  ASSERT_NE(ah2, nullptr) << ctx->last_error();

  uroce::test::Process stats = uroce::test::spawn(std::string(UROCED) + " --stats --socket " + d.socket,
                                                  d.dir + "/stats.log");
  ASSERT_EQ(stats.wait(std::chrono::seconds(60)), 0) << stats.out();
  const std::string out = stats.out();
  EXPECT_NE(out.find("srqs 1  ahs 2  mapped"), std::string::npos) << out;  // the totals line
  const std::size_t mine = out.find("pid " + std::to_string(getpid()) + " ");
  ASSERT_NE(mine, std::string::npos) << out;
  const std::string line = out.substr(mine, out.find('\n', mine) - mine);
  EXPECT_NE(line.find("srqs 1  ahs 2  mapped"), std::string::npos) << line;  // this client's
  const std::string clients = uroce::test::telemetry_query(d.telemetry, "/uroced/clients");
  EXPECT_NE(clients.find("\"srqs 1\""), std::string::npos) << clients;
  EXPECT_NE(clients.find("\"ahs 2\""), std::string::npos) << clients;
  EXPECT_EQ(pd->destroy_ah(ah2), 0);
  EXPECT_EQ(pd->destroy_ah(ah1), 0);
  EXPECT_EQ(pd->destroy_srq(srq), 0);
  EXPECT_EQ(ctx->dealloc_pd(pd), 0);
}

}  // namespace
