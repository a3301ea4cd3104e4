// The stats registry (include/uroce/stats.h): the counter lists turned into
// rows of (scope, name, description, value). Engines and QPs belong to the
// workers, so everything but a QP's own counters is copied in a read-only
// control call; a QP's counters are relaxed atomics (transport/counters.h).
#include "uroce/stats.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>

#include "engine/engine.h"
#include "transport/counters.h"
#include "verbs/local.h"
#include "wire/parse_status.h"

namespace uroce {
namespace {

struct Row {
  const char* name;
  const char* description;
};

constexpr Row kQpRows[] = {
#define UROCE_X(name, description) {#name, description},
    UROCE_QP_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};
static_assert(std::size(kQpRows) == transport::kQpCounterCount);

constexpr Row kEngineRows[] = {
#define UROCE_X(name, description) {#name, description},
    UROCE_ENGINE_COUNTER_LIST(UROCE_X)
#undef UROCE_X
};
static_assert(std::size(kEngineRows) == static_cast<std::size_t>(engine::EngineCounter::kCount));

// Drops by parse reason, named drop_<reason> (drop_icrc_mismatch).
constexpr Row kDropRows[] = {
#define UROCE_X(status, short_name, description) {"drop_" short_name, description},
    UROCE_PARSE_STATUS_LIST(UROCE_X)
#undef UROCE_X
};
static_assert(std::size(kDropRows) == wire::kParseStatusCount);

// The lists mark their gauges in the description (uroce/stats.h).
StatKind kind_of(const char* description) {
  return std::strstr(description, "(a gauge") != nullptr ? StatKind::kGauge : StatKind::kCounter;
}

// Rows being summed over a device's engines: the first engine sets the
// order, the others add into the row in the same place (their lists are
// the same), found by name only where they are not. Linear, not a search
// a row: this runs inside the control call that holds the engines.
struct RowSum {
  std::vector<Stat>& rows;
  std::size_t next = 0;  // where this engine's next row should be

  void add(StatScope scope, const char* name, const char* description, std::uint64_t value) {
    auto same = [&](const Stat& s) { return s.scope == scope && std::strcmp(s.name, name) == 0; };
    if (next < rows.size() && same(rows[next])) {
      rows[next++].value += value;
      return;
    }
    // Out of place: found by name. Past the rows there are (the first
    // engine), a new one: a list's names are unique within their scope.
    if (next < rows.size()) {
      for (Stat& s : rows) {
        if (same(s)) {
          s.value += value;
          return;
        }
      }
    }
    rows.push_back({scope, name, description, value, kind_of(description)});
    next = rows.size();
  }
};

void add_port_row(void* sum, const char* name, const char* description, std::uint64_t value) {
  static_cast<RowSum*>(sum)->add(StatScope::kPort, name, description, value);
}

// Engine `e`'s rows and those of its port queue. In a control call.
void add_engine(engine::Engine& e, std::vector<Stat>& rows) {
  RowSum sum{rows};
  for (std::size_t i = 0; i < std::size(kEngineRows); ++i) {
    sum.add(StatScope::kEngine, kEngineRows[i].name, kEngineRows[i].description,
            e.counter(static_cast<engine::EngineCounter>(i)));
  }
  for (std::size_t i = 0; i < std::size(kDropRows); ++i) {
    const auto s = static_cast<wire::ParseStatus>(i);
    // Not drops: accepted frames, and frames that are not RoCEv2 (rx_not_roce).
    if (s == wire::ParseStatus::kOk || wire::is_not_roce(s)) continue;
    sum.add(StatScope::kEngine, kDropRows[i].name, kDropRows[i].description, e.parse_drops(s));
  }
  e.io().visit_counters(add_port_row, &sum);
}

std::vector<Stat> qp_rows(const transport::Qp& qp) {
  std::vector<Stat> rows;
  rows.reserve(std::size(kQpRows));
  for (std::size_t i = 0; i < std::size(kQpRows); ++i) {
    rows.push_back({StatScope::kQp, kQpRows[i].name, kQpRows[i].description,
                    qp.counters.get(static_cast<transport::QpCounter>(i)), kind_of(kQpRows[i].description)});
  }
  return rows;
}

// What a reader keeps of QP `q` (of engine `engine`), copied in a control
// call: plain values only, the rows made after, outside it, so that a
// page of QPs holds the engines for a copy of a few hundred bytes a QP.
struct RawQp {
  QpStats head;  // everything but `counters`
  std::array<std::uint64_t, transport::kQpCounterCount> counters{};
};

void copy_raw(const transport::Qp& q, std::size_t engine, RawQp& out) {
  QpStats& h = out.head;
  h.qp_num = q.qpn;
  h.engine = engine;
  h.state = q.state;
  h.dest_qp_num = q.attr.dest_qp_num;
  h.qp_type = q.type;
  h.dest_gid = q.type == IBV_QPT_UD ? ibv_gid{} : q.attr.ah_attr.grh.dgid;
  // The engine's cursors as of its last poll (sync_from_app): what it has
  // taken in and not yet retired. Receives: every one published (the
  // engine takes them in only when a message needs one).
  h.send_outstanding = q.sq_posted - q.comp_next;
  h.recv_outstanding = q.srq != nullptr ? (q.srq_held ? 1 : 0) : q.rq.ready_from(q.rq_next);
  const transport::Qp::Congestion& cg = q.congestion;
  h.congestion = {};
  if (cg.started) {
    h.congestion.enabled = true;
    h.congestion.rate_bps = cg.rate.rate_bps();
    h.congestion.target_bps = cg.rate.target_bps();
    h.congestion.alpha = cg.rate.alpha();
    h.congestion.cnps = cg.rate.cnps();
  }
  for (std::size_t i = 0; i < out.counters.size(); ++i) out.counters[i] = q.counters.get(static_cast<transport::QpCounter>(i));
}

// The QpStats of a raw copy: its head and a row per counter, written over
// `out` (its rows' memory kept).
void expand(const RawQp& raw, QpStats& out) {
  std::vector<Stat> rows = std::move(out.counters);
  out = raw.head;
  out.counters = std::move(rows);
  out.counters.clear();
  out.counters.reserve(std::size(kQpRows));
  for (std::size_t i = 0; i < std::size(kQpRows); ++i) {
    out.counters.push_back(
        {StatScope::kQp, kQpRows[i].name, kQpRows[i].description, raw.counters[i], kind_of(kQpRows[i].description)});
  }
}

}  // namespace

const char* stat_scope_name(StatScope scope) {
  switch (scope) {
    case StatScope::kQp:
      return "qp";
    case StatScope::kEngine:
      return "engine";
    case StatScope::kPort:
      return "port";
  }
  return "?";
}

std::vector<Stat> qp_stat_rows() {
  std::vector<Stat> rows;
  for (const Row& r : kQpRows) rows.push_back({StatScope::kQp, r.name, r.description, 0, kind_of(r.description)});
  return rows;
}

const Stat* find_stat(const std::vector<Stat>& stats, StatScope scope, const char* name) {
  for (const Stat& s : stats) {
    if (s.scope == scope && std::strcmp(s.name, name) == 0) return &s;
  }
  return nullptr;
}

std::vector<Stat> Context::stats() const { return impl_->backend->stats(); }

std::vector<Stat> Context::engine_stats(std::size_t engine) const { return impl_->backend->engine_stats(engine); }

std::vector<std::uint32_t> Context::qp_nums() const { return impl_->backend->qp_nums(); }

bool Context::qp_stats(std::uint32_t qpn, QpStats& out) const { return impl_->backend->qp_stats(qpn, out); }

std::vector<QpStats> Context::qp_stats_page(std::uint32_t first_qpn, std::size_t max) const {
  std::vector<QpStats> out;
  impl_->backend->qp_stats_page(first_qpn, max, out, 0);
  return out;
}

std::size_t Context::qp_stats_page(std::uint32_t first_qpn, std::size_t max, std::vector<QpStats>& out,
                                   std::size_t at) const {
  return impl_->backend->qp_stats_page(first_qpn, max, out, at);
}

// The in-process bodies, read-only control calls.

std::vector<Stat> internal::LocalBackend::stats() {
  return control(
      [this] {
        std::vector<Stat> rows;
        for (const auto& e : engines_) add_engine(*e, rows);
        return rows;
      },
      Access::kReadsOnly);
}

std::vector<Stat> internal::LocalBackend::engine_stats(std::size_t engine) {
  if (engine >= engines_.size()) return {};
  return control(
      [this, engine] {
        std::vector<Stat> rows;
        add_engine(*engines_[engine], rows);
        return rows;
      },
      Access::kReadsOnly);
}

std::vector<std::uint32_t> internal::LocalBackend::qp_nums() {
  return control(
      [this] {
        std::vector<std::uint32_t> out;
        for (const auto& e : engines_) {
          for (const transport::Qp* qp : e->qps()) out.push_back(qp->qpn);
        }
        return out;
      },
      Access::kReadsOnly);
}

bool internal::LocalBackend::qp_stats(std::uint32_t qpn, QpStats& out) {
  return control(
      [this, &out, qpn] {
        for (std::size_t k = 0; k < engines_.size(); ++k) {
          const transport::Qp* q = engines_[k]->find_qp(qpn);
          if (q == nullptr) continue;
          RawQp raw;
          copy_raw(*q, k, raw);
          expand(raw, out);
          return true;
        }
        return false;
      },
      Access::kReadsOnly);
}

std::size_t internal::LocalBackend::qp_stats_page(std::uint32_t first_qpn, std::size_t max, std::vector<QpStats>& out,
                                                  std::size_t at) {
  if (max == 0) return 0;
  // Memory taken before the call, and kept by the thread for its next
  // page: inside the call, only the index (when QPs came or went) and the
  // copies. (A reader that allocates and frees megabytes a collection has
  // the kernel flush the engines' TLBs as its heap shrinks: 6% of a
  // 64 KiB WRITE run at 10,000 QPs.)
  thread_local std::vector<RawQp> raw;
  raw.clear();
  raw.reserve(std::min<std::size_t>(max, 4096));
  control(
      [this, first_qpn, max] {
        std::uint64_t changes = 0;
        for (const auto& e : engines_) changes += e->qp_changes();
        if (changes != qp_index_changes_) {
          qp_index_.clear();
          for (std::size_t k = 0; k < engines_.size(); ++k) {
            for (const transport::Qp* q : engines_[k]->qps()) qp_index_.emplace_back(q->qpn, static_cast<std::uint32_t>(k));
          }
          std::sort(qp_index_.begin(), qp_index_.end());
          qp_index_changes_ = changes;
        }
        auto it = std::lower_bound(qp_index_.begin(), qp_index_.end(), std::make_pair(first_qpn, std::uint32_t{0}));
        for (; it != qp_index_.end() && raw.size() < max; ++it) {
          const transport::Qp* q = engines_[it->second]->find_qp(it->first);
          if (q == nullptr) continue;  // cannot be: the index is current
          raw.emplace_back();
          copy_raw(*q, it->second, raw.back());
        }
      },
      Access::kReadsOnly);
  // The rows, with the engines running again.
  if (out.size() < at + raw.size()) out.resize(at + raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) expand(raw[i], out[at + i]);
  return raw.size();
}

std::vector<Stat> QueuePair::stats() const {
  internal::impl_of(*ctx_).backend->refresh_counters(*this);
  return qp_rows(impl_->qp);
}

}  // namespace uroce
