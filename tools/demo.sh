#!/usr/bin/env bash
# The main job: install what is missing, build, then run real RDMA transfers
# through DPDK: uroce-perf joins two DPDK ports with net_ring in one process
# (no NIC, no hugepages: EAL runs with --no-huge), runs RDMA WRITEs and READs
# of 64 KiB between a device on each port, checks every byte, and prints the
# figures. Arguments replace the uroce-perf options after "--ring"
# (see build/apps/perf/uroce-perf --help).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
build=${UROCE_BUILD_DIR:-build}
perf="$build/apps/perf/uroce-perf"
eal=(--no-huge --no-shconf --no-pci -l 0 -m 512 --log-level=lib.*:error)
if [[ $# -gt 0 ]]; then
  exec "$perf" "${eal[@]}" -- --ring "$@"
fi
"$perf" "${eal[@]}" -- --ring write -s 65536 -n 20000 --verify
echo
"$perf" "${eal[@]}" -- --ring read -s 65536 -n 20000 --verify
