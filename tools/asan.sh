#!/usr/bin/env bash
# The whole test suite under AddressSanitizer and UndefinedBehaviorSanitizer:
# builds it in ./build-asan (or $UROCE_ASAN_BUILD_DIR) with
# -fsanitize=address,undefined and runs every meson test there. Fails if a
# test fails or a sanitizer reports anything (ASan stops the binary at its
# first report; UBSan too, halt_on_error=1).
#
# usage: tools/asan.sh [RESULTS_DIR]
#   RESULTS_DIR: where each binary's GoogleTest XML report goes, named
#   asan-<binary>.xml (tools/test.sh counts them with the main suite). A
#   binary that failed with no failed case in its own report (a sanitizer
#   stopped it, it crashed or timed out, or its cases passed but a sanitizer
#   reported) gets one failed case, asan.<binary>, in asan-<binary>-run.xml;
#   a failed build one case, asan.build.
#
# -O1 -g1: ASan's advice, and half the compile time of -O2 -g (the build is
# most of this run's cost). GCC 12's -Wmaybe-uninitialized misfires inside
# libstdc++ (std::function in <regex>) when code is instrumented, so that one
# warning is off here; -Werror stays on.
#
# Left out or adjusted, with the reason:
# - leak checking (detect_leaks=0): DPDK's EAL keeps allocations for the
#   life of the process (memzones, per-lcore state, the plugin list) and
#   never frees them; LeakSanitizer reports them at exit.
# - neighbor_flood runs with quarantine_size_mb=0: its tests bound the
#   process's RSS growth over a million frames (16 MiB), which ASan's
#   quarantine (freed blocks held back, 256 MiB by default) would exceed on
#   its own.
# - ibverbs' Stock*, */StockPair.*, */RdmaCmPair.* and UroceRun* cases: they run rdma-core's own tools (ibv_devices,
#   ibv_devinfo), not instrumented, which load our ASan-built provider
#   library; the ASan runtime then refuses to start ("ASan runtime does not
#   come first"). The rest of test_ibverbs runs. The same for service's
#   Stock* and AClientKilled* cases (stock ibv_rc_pingpong, ib_write_bw), service_rdmacm's (rping, perftest -R),
#   service_transports' StockPingpongs (stock ibv_srq/ud/uc_pingpong), service_ucx's (ucx_perftest),
#   and every case of rdmacm_stock (stock rdma_server/rdma_client,
#   rdma_xserver/rdma_xclient, rping, udaddy) and of fabric_stock (libfabric's
#   fi_info and fi_pingpong, rdmacm-utils, cmtime), and sr_ports' StockSr*
#   cases (perftest under uroce-run with selective repeat), and
#   metrics_prometheus's MetricsPrometheus case (ib_write_bw between two
#   daemons that a Prometheus server scrapes; its MetricsUroced case runs);
#   the daemons and the C verbs program run instrumented in the rest.
# DPDK's libraries are not instrumented (Debian's packages), so ASan does
# not see inside mbufs and mempools; EAL runs with --no-huge, whose memory
# ASan leaves alone.
set -uo pipefail
cd "$(dirname "$0")/.."

build=${UROCE_ASAN_BUILD_DIR:-build-asan}
results=${1:-}
# Tests that need ASan options of their own (see above).
declare -A options=([neighbor_flood]=quarantine_size_mb=0)
# Tests with a GoogleTest filter here (see above).
declare -A filter=([ibverbs]='-Ibverbs.Stock*:*/StockPair.*:*/RdmaCmPair.*:Ibverbs.UroceRun*'
                   [service]='-Service.Stock*:Service.AClientKilled*'
                   [service_rdmacm]='-ServiceRdmaCm.Stock*:ServiceRdmaCm.AClientKilled*:ServiceRdmaCm.AListenerThatGoes*'
                   [service_transports]='-*/Transports.StockPingpongs/*'
                   [service_ucx]='-*/Ucx.Stock*/*'
                   [rdmacm_stock]='-RdmacmUtils*'
                   [fabric_stock]='-Fabric.*:Fabric/*'
                   [sr_ports]='-StockSr*:*/StockSr*'
                   [metrics_prometheus]='-MetricsPrometheus.*')

kind=asan
# shellcheck source=tools/run_lib.sh
source tools/run_lib.sh

if [[ ! -f $build/build.ninja ]]; then
  meson setup "$build" -Dbuildtype=plain -Doptimization=1 -Db_sanitize=address,undefined \
    -Db_lundef=false "-Dcpp_args=['-g1','-Wno-maybe-uninitialized']" >/dev/null ||
    build_failed "meson setup failed; see $build/meson-logs/meson-log.txt"
fi
ninja -C "$build" -j"$(nproc)" >/dev/null ||
  { ninja -C "$build" | grep -v '^\[' | tail -40 >&2; build_failed "build failed"; }

logs=$(mktemp -d /tmp/uroce-asan.XXXXXX)
trap 'rm -rf "$logs"' EXIT
# Test names only (a regeneration may print its own lines first).
all=$(meson test -C "$build" --no-rebuild --list 2>/dev/null | grep -E '^[A-Za-z0-9_]+$')
[[ -n $all ]] || build_failed "meson test --list found no tests in $build"
plain=()
special=()
for t in $all; do
  if [[ -n ${options[$t]:-}${filter[$t]:-} ]]; then special+=("$t"); else plain+=("$t"); fi
done

# One meson test run; its per-test log goes to $logs/<n>.json.
run() {  # n asan_options gtest_filter tests...
  local n=$1 extra=$2 only=$3
  shift 3
  touch "$logs/$n.out.start"
  ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0${extra:+:$extra}" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    GTEST_OUTPUT="xml:$logs/xml/" GTEST_COLOR=no GTEST_FILTER="${only:-*}" \
    meson test -C "$build" --no-rebuild --num-processes "$(nproc)" "$@" >"$logs/$n.out" 2>&1
  # A fresh log, or meson test did not run at all.
  if [[ $build/meson-logs/testlog.json -nt $logs/$n.out.start ]]; then
    cp "$build/meson-logs/testlog.json" "$logs/$n.json"
  else
    tail -20 "$logs/$n.out" >&2
    build_failed "meson test did not run: $*"
  fi
}
mkdir -p "$logs/xml"
run 0 "" "" "${plain[@]}"
n=1
for t in "${special[@]}"; do
  run $((n++)) "${options[$t]:-}" "${filter[$t]:-}" "$t"
done

# Per binary: its result, its sanitizer reports, its report renamed.
python3 - "$logs" "${results:-}" <<'PY'
import glob, json, os, re, shutil, sys
sys.path.insert(0, "tools")
from case_report import write_case
logs, results = sys.argv[1], sys.argv[2]
pattern = re.compile(r"^(==\d+==ERROR: AddressSanitizer|.*: runtime error: |SUMMARY: (Address|UndefinedBehavior)Sanitizer)", re.M)
status = 0
for path in sorted(glob.glob(os.path.join(logs, "*.json"))):
    for line in open(path):
        if not line.strip():
            continue
        t = json.loads(line)
        exe = os.path.basename(t["cmd"][0]) if t.get("cmd") else "test_" + t["name"]
        out = (t.get("stdout") or "") + (t.get("stderr") or "")
        reports = len(re.findall(r"^==\d+==ERROR: AddressSanitizer|: runtime error: ", out, re.M))
        report = os.path.join(logs, "xml", exe + ".xml")
        has_failure = os.path.exists(report) and "<failure" in open(report, errors="replace").read()
        if results and os.path.exists(report):
            shutil.copy(report, os.path.join(results, "asan-%s.xml" % exe))
        ok = t.get("result") in ("OK", "SKIP") and reports == 0
        passed = len(re.findall(r"^\[       OK \]", out, re.M))
        if ok:
            print("asan: %s: OK (%d passed, no report)" % (t["name"], passed))
            continue
        status = 1
        why = "%s, %d sanitizer report(s)" % (t.get("result"), reports)
        print("asan: %s: FAILED, %s:" % (t["name"], why))
        lines = out.splitlines()
        shown = [l for l in lines if pattern.match(l) or l.startswith("    #") or l.startswith("[  FAILED  ]")]
        print("\n".join(shown[:150] if shown else lines[-30:]))
        if results and not has_failure:
            write_case(os.path.join(results, "asan-%s-run.xml" % exe), "asan", exe, why)
sys.exit(status)
PY
