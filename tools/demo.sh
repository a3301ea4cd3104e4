#!/usr/bin/env bash
# The main job, for now: install what is missing, build, and decode a
# Soft-RoCE capture with uroce-dump (one line per frame, ICRC checked).
# Pass another pcap file, or uroce-dump options (--json), as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
build=${UROCE_BUILD_DIR:-build}
if [[ $# -eq 0 ]]; then
  set -- test/data/rxe-pcaps/ib_write_bw_loss.pcap
fi
exec "$build/apps/dump/uroce-dump" "$@"
