#!/usr/bin/env bash
# Issue 31's congestion-control scenarios with DCQCN (as it is and as it was),
# and delay-based control (on switches that mark and that never do), side by
# side in one run on uroce-sim: prints docs/congestion.md's tables ("Both
# controllers side by side"), writes docs/plots/cc-report.json and the plots
# docs/plots/cc-*.png. Arguments go to tools/cc_report.py (--seeds N, --jobs N,
# --quick: 2 seeds, short runs, no plots, nothing written to docs/).
# About 4 minutes on 2 cores. Rerun after changing the transport, a
# controller or the switch.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh >/dev/null
build=${UROCE_BUILD_DIR:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
/usr/bin/python3 tools/cc_report.py "$build/apps/sim/uroce-sim" "$tmp" "$@" || status=$?
if [[ " $* " != *" --quick "* ]]; then
  mkdir -p docs/plots
  cp "$tmp"/cc-*.png "$tmp/cc-report.json" docs/plots/
  echo "plots in docs/plots/cc-*.png"
fi
exit "$status"
