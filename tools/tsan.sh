#!/usr/bin/env bash
# The thread-safety tests under ThreadSanitizer: builds only them in
# ./build-tsan (or $UROCE_TSAN_BUILD_DIR) with -fsanitize=thread and runs
# them, 10 minutes at most each. Fails if a test fails or TSan reports
# anything (the first report stops the binary).
#
# usage: tools/tsan.sh [RESULTS_DIR]
#   RESULTS_DIR: where each binary's GoogleTest XML report goes, named
#   tsan-<binary>.xml (tools/test.sh counts them with the main suite). A
#   binary that failed with no failed case in its own report (TSan stopped
#   it, it crashed or timed out, or its cases passed but TSan reported) gets
#   one failed case, tsan.<binary>, in tsan-<binary>-run.xml; a failed build
#   one case, tsan.build.
#
# DPDK's libraries are not instrumented, so TSan cannot see the
# synchronisation inside them (rings, mempools): the tests do not pass mbufs
# between threads of ours. tools/tsan.supp lists the one race TSan reports
# inside DPDK itself (EAL's alarm list), with the reason.
set -uo pipefail
cd "$(dirname "$0")/.."

build=${UROCE_TSAN_BUILD_DIR:-build-tsan}
results=${1:-}
# test_metrics: the exporter's thread collecting and serving while other
# threads scrape, stop and start it.
tests=(test_worker_race test_window_race test_telemetry_race test_metrics)
# Left out here (it runs in the main suite): workers passing mbufs to each
# other through net_ring, whose synchronisation lives inside DPDK's
# uninstrumented rings and mempools, where TSan cannot see it.
declare -A filter=([test_telemetry_race]='-TelemetryRace.QpsComeAndGoWhileWorkersCarryTraffic')

kind=tsan
# shellcheck source=tools/run_lib.sh
source tools/run_lib.sh

if [[ ! -f $build/build.ninja ]]; then
  meson setup "$build" -Dbuildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false >/dev/null ||
    build_failed "meson setup failed; see $build/meson-logs/meson-log.txt"
fi
targets=()
for t in "${tests[@]}"; do targets+=("test/$t"); done
ninja -C "$build" "${targets[@]}" >/dev/null ||
  { ninja -C "$build" "${targets[@]}" | tail -40 >&2; build_failed "build of ${targets[*]} failed"; }

logs=$(mktemp -d /tmp/uroce-tsan.XXXXXX)
trap 'rm -rf "$logs"' EXIT
status=0
for t in "${tests[@]}"; do
  report=${results:+$results/tsan-$t.xml}
  # halt_on_error: the first report ends the run with exit status 66.
  TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/tools/tsan.supp ${TSAN_OPTIONS:-}" \
    GTEST_OUTPUT=${report:+xml:$report} GTEST_COLOR=no timeout 600 "$build/test/$t" ${filter[$t]:+--gtest_filter=${filter[$t]}} >"$logs/$t.log" 2>&1
  rc=$?
  reports=$(grep -c '^WARNING: ThreadSanitizer' "$logs/$t.log")
  if ((rc == 0 && reports == 0)); then
    echo "tsan: $t: OK ($(grep -c '^\[       OK \]' "$logs/$t.log") passed," \
      "$(grep -c '^\[  SKIPPED \] .* ms)$' "$logs/$t.log") skipped, no report)"
    continue
  fi
  status=1
  why="exit status $rc$( ((rc == 124)) && echo ' (timed out)'), $reports ThreadSanitizer report(s)"
  echo "tsan: $t: FAILED, $why:"
  sed -n '/^WARNING: ThreadSanitizer/,/^==================$/p; /^\[  FAILED  \]/p' "$logs/$t.log" | head -150
  ((reports == 0)) && tail -30 "$logs/$t.log"
  # Unless its own report already holds the failure.
  if [[ -n $results ]] && { [[ ! -s $report ]] || ! grep -q '<failure' "$report"; }; then
    failed_report "$results/tsan-$t-run.xml" "$t" "$why"
  fi
done
exit $status
