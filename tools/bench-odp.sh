#!/usr/bin/env bash
# What on-demand paging costs: the same runs with pinned regions and with ODP
# regions (uroce-perf --odp: every byte of an ODP region moves through
# process_vm_readv/writev, docs/transport.md "On-demand paging"), both ends on
# one core over the simulated link, side by side in one run: CPU ns per
# packet and throughput for 64 B and 4 KiB WRITEs, 4 KiB READs and SENDs, and
# 8 B WRITE and atomic latency. Prints a table; writes JSON to $1 (default
# build/bench-odp.json).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${UROCE_BUILD_DIR:-build}
out=${1:-$build/bench-odp.json}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
perf="$build/apps/perf/uroce-perf"
cases=("write_64B:write -s 64 -n 1000000 -t 128"
       "write_4KiB:write -s 4096 -n 500000 -t 128"
       "read_4KiB:read -s 4096 -n 500000 -t 16"
       "send_4KiB:send -s 4096 -n 500000 -t 128"
       "write_8B_lat:write -s 8 --lat -n 100000"
       "atomic_lat:atomic --lat -n 100000")
for c in "${cases[@]}"; do
  name=${c%%:*}
  args=${c#*:}
  # shellcheck disable=SC2086
  "$perf" --sim $args --json "$tmp/$name.pinned.json" >/dev/null
  # shellcheck disable=SC2086
  "$perf" --sim $args --odp --json "$tmp/$name.odp.json" >/dev/null
done
python3 - "$tmp" "$out" "${cases[@]%%:*}" <<'PY'
import json, sys
d, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
res = {}
print(f"{'case':<16}{'pinned ns/pkt':>14}{'ODP ns/pkt':>12}{'ratio':>7}{'pinned Gb/s':>13}{'ODP Gb/s':>10}"
      f"{'pinned p50 us':>15}{'ODP p50 us':>12}")
for n in names:
    p = json.load(open(f"{d}/{n}.pinned.json"))
    o = json.load(open(f"{d}/{n}.odp.json"))
    res[n] = {"pinned": p, "odp": o, "cpu_ratio": o["cpu_ns_per_packet"] / p["cpu_ns_per_packet"]}
    lat = lambda r: r.get("lat_us", {}).get("p50", float("nan"))
    print(f"{n:<16}{p['cpu_ns_per_packet']:>14.1f}{o['cpu_ns_per_packet']:>12.1f}{res[n]['cpu_ratio']:>7.2f}"
          f"{p['bw_gbps']:>13.2f}{o['bw_gbps']:>10.2f}{lat(p):>15.2f}{lat(o):>12.2f}")
json.dump(res, open(out, "w"), indent=1)
print(f"JSON: {out}")
PY
