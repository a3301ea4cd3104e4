#include "common/counters.h"

#include <cstdio>
#include <string_view>
#include <vector>

#include "uroce/stats.h"
#include "uroce/verbs.h"

namespace uroce {
namespace {

void print_rows(const std::vector<Stat>& rows) {
  for (const Stat& s : rows) {
    if (s.value == 0) continue;
    // "port.tx_zero_copy_frames 1234": the name and its value one space
    // apart, so a script (or test) finds "name value" in the output.
    char head[96];
    std::snprintf(head, sizeof head, "%s.%s %llu", stat_scope_name(s.scope), s.name,
                  static_cast<unsigned long long>(s.value));
    std::printf("  %-44s %s\n", head, s.description);
  }
}

}  // namespace

void print_counters(Context& ctx, QueuePair* qp) {
  std::printf("counters (non-zero):\n");
  if (qp != nullptr) {
    print_rows(qp->stats());
    if (const QueuePair::CongestionState cs = qp->congestion(); cs.enabled) {
      std::printf("  qp.dcqcn rate %.3f Gb/s, target %.3f Gb/s, alpha %.4f, %llu CNPs\n", cs.rate_bps / 1e9,
                  cs.target_bps / 1e9, cs.alpha, static_cast<unsigned long long>(cs.cnps));
    }
  }
  print_rows(ctx.stats());
  // With several engines (one per port queue), what each received and
  // passed on: RSS spreading flows over the queues shows here.
  if (ctx.engine_stats(1).empty()) return;
  for (std::size_t i = 0;; ++i) {
    const std::vector<Stat> rows = ctx.engine_stats(i);
    if (rows.empty()) break;
    std::printf("  engine %zu (queue %zu):", i, i);
    for (const Stat& s : rows) {
      const std::string_view name = s.name;
      if (s.scope == StatScope::kEngine &&
          (name == "rx_frames" || name == "tx_frames" || name == "rx_handed_over" || name == "rx_handed_in")) {
        std::printf(" %s %llu", s.name, static_cast<unsigned long long>(s.value));
      }
    }
    std::printf("\n");
  }
}

}  // namespace uroce
