#!/usr/bin/env bash
# Runs uroce-sim's built-in scenarios and copies their plots to apps/sim/plots/
# for the README (rates above, the bottleneck queue and Kmax below), with the
# summaries beside them. Rerun after changing the transport or DCQCN.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh >/dev/null
build=${UROCE_BUILD_DIR:-build}
mkdir -p apps/sim/plots
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # name, args...
  local name=$1
  shift
  "$build/apps/sim/uroce-sim" "$@" --out "$tmp/$name" | sed "s/^/[$name] /"
  cp "$tmp/$name/plot.png" "apps/sim/plots/$name.png"
  cp "$tmp/$name/summary.json" "apps/sim/plots/$name.json"
}
run fairness fairness
run fairness-dcqcn-off fairness --dcqcn off
run incast incast --flows 8
run incast-dcqcn-off incast --flows 8 --dcqcn off
run join-leave join-leave
run join-leave-dcqcn-off join-leave --dcqcn off
echo "plots in apps/sim/plots/"
