#!/usr/bin/env bash
# Installs what is missing, builds, and runs the full test suite, then (with
# no arguments) the thread-safety tests under ThreadSanitizer (tools/tsan.sh,
# in ./build-tsan; UROCE_TSAN=0 skips it), the whole suite under ASan and
# UBSan (tools/asan.sh, in ./build-asan; UROCE_ASAN=0 skips it) and each
# libFuzzer harness for UROCE_FUZZ_SECONDS (default 10; tools/fuzz.sh, in
# ./build-fuzz; UROCE_FUZZ=0 skips it). The last line is "N passed, N
# failed", counting individual GoogleTest cases of every run (one case per
# fuzz harness).
set -uo pipefail
cd "$(dirname "$0")/.."

if ! tools/setup.sh; then
  echo "uroce: setup or build failed (see above)"
  echo "0 passed, 1 failed"
  exit 1
fi

build=${UROCE_BUILD_DIR:-build}
results=$(mktemp -d /tmp/uroce-gtest.XXXXXX)
trap 'rm -rf "$results"' EXIT
GTEST_OUTPUT="xml:$results/" GTEST_COLOR=no \
  meson test -C "$build" --no-rebuild --print-errorlogs --num-processes "$(nproc)" "$@"
# Its failures are counted from the reports it leaves in $results.
if (($# == 0)) && [[ ${UROCE_TSAN:-1} != 0 ]]; then
  tools/tsan.sh "$results"
fi
if (($# == 0)) && [[ ${UROCE_ASAN:-1} != 0 ]]; then
  tools/asan.sh "$results"
fi
if (($# == 0)) && [[ ${UROCE_FUZZ:-1} != 0 ]]; then
  tools/fuzz.sh "${UROCE_FUZZ_SECONDS:-10}" "$results"
fi
python3 tools/gtest_summary.py "$results" "$build/meson-logs/testlog.json"
