#!/usr/bin/env bash
# Runs uroce-sim's built-in scenarios (and conf/sim's fabric ones) and draws their plots into docs/plots/
# with tools/plot.py, for docs/congestion.md (rates above, the bottleneck queue
# and Kmax below, with PFC the senders' paused time under that), with the
# summaries beside them, and
# prints docs/congestion.md's incast table (N-to-1 with and without PFC and DCQCN).
# Rerun after changing the transport, DCQCN or the switch.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh >/dev/null
build=${UROCE_BUILD_DIR:-build}
mkdir -p docs/plots
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # name, args...
  local name=$1
  shift
  "$build/apps/sim/uroce-sim" "$@" --out "$tmp/$name" | sed "s/^/[$name] /"
  tools/plot.py sim "$tmp/$name" "docs/plots/$name.png"
  cp "$tmp/$name/summary.json" "docs/plots/$name.json"
}
run fairness fairness
run fairness-dcqcn-off fairness --dcqcn off
run incast incast --flows 8
run incast-dcqcn-off incast --flows 8 --dcqcn off
run join-leave join-leave
run join-leave-dcqcn-off join-leave --dcqcn off
run incast-64-pfc incast --flows 64 --pfc on
run incast-64 incast --flows 64
run victim-pfc victim --pfc on --dcqcn off
run victim-pfc-dcqcn victim --pfc on
# The fabric scenarios (conf/sim/): goodput over time and the spine links'
# utilisation.
run fabric-alltoall conf/sim/leafspine-alltoall.conf
run fabric-alltoall-fail conf/sim/leafspine-fail.conf
run fabric-allreduce conf/sim/leafspine-allreduce.conf
# The sweeps (issue 30): selective repeat beside go-back-N, the table in
# sweep.json. uroce-sim exits 1 while the transport refuses sr (those rows
# say so); the plot shows what ran.
sweep() {  # name, args...
  local name=$1
  shift
  "$build/apps/sim/uroce-sim" "$@" --out "$tmp/$name" | sed "s/^/[$name] /" || true
  tools/plot.py sweep "$tmp/$name" "docs/plots/$name.png"
  cp "$tmp/$name/sweep.json" "docs/plots/$name.json"
}
sweep sweep-loss conf/sim/loss-sweep.conf --seed 1
sweep sweep-incast conf/sim/incast-sr.conf --seed 1
echo "plots in docs/plots/"

# Incast at 8 to 64 flows: where drops begin without PFC, and what PFC
# costs in pauses.
echo
echo "| N-to-1 | PFC | DCQCN | drops | utilisation | max queue | pauses | most paused sender | Jain |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for n in 8 16 32 64; do
  for pfc in off on; do
    for dcqcn in on off; do
      "$build/apps/sim/uroce-sim" incast --flows "$n" --pfc "$pfc" --dcqcn "$dcqcn" --out "$tmp/t" >/dev/null
      python3 - "$tmp/t/summary.json" "$n" "$pfc" "$dcqcn" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
paused = max(s["paused_us_per_sender"]) / 1000 if s["pfc"] else 0
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {s['drops']:,} | {s['utilisation']:.2f} | "
      f"{s['max_queue_bytes'] / 1e6:.2f} MB | {s['pauses']:,} | "
      f"{f'{paused:.1f} of 10 ms' if s['pfc'] else '-'} | {s['jain_last_half']:.3f} |")
PY
    done
  done
done
