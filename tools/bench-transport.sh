#!/usr/bin/env bash
# The RC transport's CPU cost on one core (both ends, simulated link): CPU ns
# per data packet for 64 B and 4 KiB RDMA WRITEs, and the ratio of the 4 KiB
# payload rate to the bare ICRC-plus-copies work on the same bytes, all from
# one run of this script; and the 64 B cost again with 1000 idle connected QP
# pairs beside the busy one (the engine looks only at QPs with work, so the
# ratio should stay near 1). Prints a table; writes JSON to $1 (default
# build/bench-transport.json).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
build=${UROCE_BUILD_DIR:-build}
out=${1:-$build/bench-transport.json}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/apps/perf/uroce-perf" --sim write -s 64 -n 1000000 -t 128 --json "$tmp/64.json" >/dev/null
"$build/apps/perf/uroce-perf" --sim write -s 4096 -n 500000 -t 128 --json "$tmp/4k.json" >/dev/null
"$build/apps/perf/uroce-perf" --sim write -s 8 --lat -n 100000 --json "$tmp/lat.json" >/dev/null
"$build/apps/perf/uroce-perf" --sim write -s 64 -n 1000000 -t 128 --idle-qps 1000 --json "$tmp/64idle.json" >/dev/null
python3 - "$tmp" "$out" <<'PY'
import json, sys
d = sys.argv[1]
r64, r4k, lat, idle = (json.load(open(f"{d}/{n}.json")) for n in ("64", "4k", "lat", "64idle"))
print(f"{'case':<28}{'CPU ns/packet':>15}{'Mpps':>10}{'Gb/s':>10}")
for name, r in (("write 64 B, bw", r64), ("write 4 KiB, bw", r4k), ("write 64 B, 1000 idle QPs", idle)):
    print(f"{name:<28}{r['cpu_ns_per_packet']:>15.1f}{r['msg_rate_mpps']:>10.3f}{r['bw_gbps']:>10.2f}")
print(f"bare ICRC (TX+RX) + copies on 4 KiB packets: {r4k['bare_icrc_copy_gbytes_s']:.2f} GB/s")
print(f"4 KiB WRITE payload rate / bare rate: {r4k['ratio_to_bare']:.3f} (aim >= 0.5)")
print(f"64 B cost with 1000 idle QPs / without: {idle['cpu_ns_per_packet'] / r64['cpu_ns_per_packet']:.3f}")
l = lat["lat_us"]
print(f"write 8 B latency, both ends on one core: p50 {l['p50']:.2f} us, p99 {l['p99']:.2f} us")
json.dump({"write_64B": r64, "write_4KiB": r4k, "write_8B_lat": lat, "write_64B_1000_idle_qps": idle,
           "idle_qps_cost_ratio": idle["cpu_ns_per_packet"] / r64["cpu_ns_per_packet"]}, open(sys.argv[2], "w"), indent=1)
print(f"JSON: {sys.argv[2]}")
PY
