#!/usr/bin/env bash
# A screenshot-like capture of the Grafana dashboard (conf/grafana/uroce-dashboard.json)
# without Grafana: two uroced joined by memif, a Prometheus of its own scraping both,
# stock perftest for about 75 s, then every panel's queries drawn in the dashboard's
# layout: docs/plots/dashboard.png and docs/plots/dashboard.json. Builds nothing: run
# `ninja -C build apps/uroced/uroced apps/run/uroce-run lib/ibverbs/libibverbs.so.1` first.
# Arguments go to tools/dashboard_capture.py: --smoke (15 s, output to a temporary
# folder, exit 1 unless every panel got data), --out DIR, --keep (keep logs and Prometheus's data).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${UROCE_BUILD_DIR:-build}
need() {  # program package
  command -v "$1" >/dev/null ||
    { echo "dashboard-capture: no $1; install Debian's $2 package (tools/setup.sh does)" >&2; exit 1; }
}
need prometheus prometheus
for b in apps/uroced/uroced apps/run/uroce-run lib/ibverbs/libibverbs.so.1; do
  [[ -e $build/$b ]] || { echo "dashboard-capture: $build/$b missing; run: ninja -C $build $b" >&2; exit 1; }
done
for t in ib_write_bw ib_send_bw ib_read_bw; do need "$t" perftest; done
exec /usr/bin/python3 tools/dashboard_capture.py --build "$build" "$@"
