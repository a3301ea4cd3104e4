#!/usr/bin/env bash
# What watching uroce costs its traffic (issue 32): 64 KiB WRITEs through
# uroce-perf with its exporter on, in turns alone, under a Prometheus
# scrape loop at 10 Hz and under uroce-stat at 0.1 s; medians and the
# ratio to alone, printed and written as JSON (tools/bench_metrics.py).
# Run it on a quiet machine: figures of one core hold within a few per cent.
#
# usage: tools/bench-metrics.sh [--runs N] [--iters N] [--qps N] [--idle-qps N] [--json OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/apps/perf/uroce-perf ]] || { echo "bench-metrics: no build/apps/perf/uroce-perf: run tools/setup.sh first" >&2; exit 2; }
exec python3 tools/bench_metrics.py "$@"
