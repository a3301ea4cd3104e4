#!/usr/bin/env bash
# The main job: install what is missing, build, then run a real RDMA transfer
# through the RC transport: uroce-perf moves 64 KiB RDMA WRITEs between two
# devices joined by the simulated link (0.1% loss, so go-back-N shows), checks
# every byte, prints the figures, and decodes the first frames of the run.
# Arguments replace the uroce-perf options (see build/apps/perf/uroce-perf --help).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
build=${UROCE_BUILD_DIR:-build}
pcap=$(mktemp /tmp/uroce-demo.XXXXXX.pcap)
trap 'rm -f "$pcap"' EXIT
if [[ $# -eq 0 ]]; then
  set -- write -s 65536 -n 5000 --loss 0.001 --verify
fi
"$build/apps/perf/uroce-perf" --sim "$@" --pcap "$pcap"
echo
echo "The first frames on the simulated link (uroce-dump $pcap):"
"$build/apps/dump/uroce-dump" "$pcap" 2>/dev/null | head -8
echo "  ..."
"$build/apps/dump/uroce-dump" --quiet "$pcap"
