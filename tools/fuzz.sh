#!/usr/bin/env bash
# The libFuzzer harnesses of test/fuzz/ (frame parsing, the pcap reader, the
# receive path of a live RC QP), built with clang and
# -fsanitize=fuzzer,address,undefined in ./build-fuzz (or
# $UROCE_FUZZ_BUILD_DIR), each run for SECONDS (default 60). Prints each
# harness's executions and findings; fails if any harness found something
# (a crash, a sanitizer report, a failed check, a timeout or an input that
# makes it run out of memory). Findings are kept as
# build-fuzz/findings/<harness>-crash-<sha1> (rerun one with
# build-fuzz/test/fuzz/fuzz_<harness> FILE); the corpus grown by earlier runs
# in build-fuzz/corpus/<harness>/.
#
# Seeds: every frame of the golden captures (test/data/rxe-pcaps, extracted
# by tools/fuzz_corpus.py into a temporary directory each run), and the few
# committed inputs of test/fuzz/corpus/<harness>/.
#
# UROCE_FUZZ_RUNS=N runs each harness for N executions instead of SECONDS
# (the long runs of docs/measurements.md: UROCE_FUZZ_RUNS=10000000 tools/fuzz.sh).
#
# usage: [UROCE_FUZZ_HARNESSES="rc_rx"] tools/fuzz.sh [SECONDS] [RESULTS_DIR]
#   RESULTS_DIR: one GoogleTest XML report per harness, fuzz-<harness>.xml,
#   one case each (fuzz.<harness>: passed when it found nothing), counted by
#   tools/test.sh. Without clang (and no way to install it) every harness
#   counts as failed.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
results=${2:-}
build=${UROCE_FUZZ_BUILD_DIR:-build-fuzz}
# UROCE_FUZZ_HARNESSES: a blank-separated subset (a long run of one).
read -r -a harnesses <<<"${UROCE_FUZZ_HARNESSES:-frame pcap rc_rx}"
# fuzz_frame takes inputs up to 64 KiB + headers, past what the 16-bit
# offsets of ParsedFrame can hold; the others the default (the largest seed).
declare -A extra=([frame]=-max_len=66000)

report() {  # harness failed(0|1) message
  [[ -z $results ]] && return
  if [[ $2 == 1 ]]; then
    python3 tools/case_report.py "$results/fuzz-$1.xml" fuzz "$1" "$3"
  else
    python3 tools/case_report.py "$results/fuzz-$1.xml" fuzz "$1"
  fi
}
fail_all() {  # message
  echo "fuzz: $1" >&2
  for h in "${harnesses[@]}"; do report "$h" 1 "$1"; done
  exit 1
}
if [[ -n $results ]]; then
  mkdir -p "$results"
  rm -f "$results"/fuzz-*.xml
fi

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ missing, installing clang (apt-get)"
  { apt-get install -y clang >/dev/null 2>&1 || { apt-get update >/dev/null 2>&1 && apt-get install -y clang >/dev/null 2>&1; }; } ||
    fail_all "clang is not installed and 'apt-get install clang' failed: the fuzzers need clang's libFuzzer"
fi

if [[ ! -f $build/build.ninja ]]; then
  # -fsanitize=fuzzer-no-link: coverage for libFuzzer in the libraries too;
  # test/fuzz/meson.build links the harnesses with -fsanitize=fuzzer.
  CC=clang CXX=clang++ meson setup "$build" -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
    -Db_lundef=false -Dcpp_args=-fsanitize=fuzzer-no-link >/dev/null ||
    fail_all "meson setup failed; see $build/meson-logs/meson-log.txt"
fi
targets=()
for h in "${harnesses[@]}"; do targets+=("test/fuzz/fuzz_$h"); done
ninja -C "$build" -j"$(nproc)" "${targets[@]}" >/dev/null ||
  { ninja -C "$build" "${targets[@]}" | grep -v '^\[' | tail -40 >&2; fail_all "build of ${targets[*]} failed"; }

seeds=$(mktemp -d /tmp/uroce-fuzz.XXXXXX)
trap 'rm -rf "$seeds"' EXIT
python3 tools/fuzz_corpus.py "$seeds" test/data/rxe-pcaps/*.pcap ||
  fail_all "could not extract seeds from test/data/rxe-pcaps"
mkdir -p "$build/findings"
status=0
for h in "${harnesses[@]}"; do
  mkdir -p "$build/corpus/$h"
  committed=()
  [[ -d test/fuzz/corpus/$h ]] && committed=("test/fuzz/corpus/$h")
  log=$build/findings/$h.log
  before=$(ls "$build/findings" | grep -c "^$h-")
  limit=(-max_total_time="$seconds")
  span="in ${seconds} s"
  if [[ -n ${UROCE_FUZZ_RUNS:-} ]]; then
    limit=(-runs="$UROCE_FUZZ_RUNS")
    span="in %d s"
  fi
  started=$SECONDS
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1 ${UBSAN_OPTIONS:-}" \
    ASAN_OPTIONS="detect_leaks=1 ${ASAN_OPTIONS:-}" \
    timeout $((${UROCE_FUZZ_RUNS:+86400 +} seconds + 120)) "$build/test/fuzz/fuzz_$h" "${limit[@]}" -print_final_stats=1 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$build/findings/$h-" ${extra[$h]:-} \
    "$build/corpus/$h" "$seeds/$h" "${committed[@]}" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=$(($(ls "$build/findings" | grep -c "^$h-") - before))
  # shellcheck disable=SC2059
  span=$(printf "$span" $((SECONDS - started)))
  if ((rc == 0 && found == 0)); then
    echo "fuzz: $h: OK, ${execs:-0} executions $span, no finding"
    report "$h" 0 ""
    continue
  fi
  status=1
  why="exit status $rc, $found new finding(s), ${execs:-?} executions"
  echo "fuzz: $h: FAILED, $why:"
  grep -E '^==[0-9]+==ERROR|runtime error:|^    #[0-9]|^artifact_prefix|Test unit written|^SUMMARY' "$log" | head -60
  report "$h" 1 "$why (log $log)"
done
exit $status
