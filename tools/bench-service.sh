#!/usr/bin/env bash
# What the service costs (docs/service.md, Cost): the same
# verbs program, uroce-bench-abi-verbs on lib/ibverbs (two RC QPs of one
# device in loopback on net_ring0: 8 B SEND and 8 B WRITE ping-pongs, 64 KiB
# WRITEs with 16 outstanding), in turns RUNS times:
#
#  1. in-process: the program owns the port, the engine on a worker on CPU 1,
#     the program's thread on CPU 0;
#  2. through uroced: the daemon owns the port, its worker on CPU 1; the
#     program attached with UROCE_SERVICE, its thread on CPU 0;
#  3. two such programs at once through the same daemon (both on CPU 0):
#     their 64 KiB WRITE figures added up, beside one program's.
#
# Prints a table of medians and writes JSON. Usage: tools/bench-service.sh [RUNS] [OUT.json]
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
build=${UROCE_BUILD_DIR:-build}
out=${2:-$build/bench-service.json}
bench=$build/apps/bench/uroce-bench-abi-verbs
lib=$build/lib/ibverbs
for b in "$bench" "$build/apps/uroced/uroced"; do
  [[ -x $b ]] || { echo "bench-service: $b missing; run tools/setup.sh" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/uroce-bench-service.XXXXXX)
daemon=
cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  [[ -n ${UROCE_BENCH_KEEP:-} ]] && cp -r "$tmp" "$UROCE_BENCH_KEEP"
  rm -rf "$tmp"
}
trap cleanup EXIT
eal="--no-huge --no-shconf --no-pci -l 0 -m 512 --vdev=net_ring0 --log-level=lib.eal:error"
seconds=${UROCE_BENCH_SECONDS:-2}

# shellcheck source=tools/bench_lib.sh
source tools/bench_lib.sh
field() { grep -o "\"$2\":[0-9.]*" "$1" | cut -d: -f2; }

start_daemon() {
  rm -f "$tmp/d.sock"
  "$build/apps/uroced/uroced" --eal "$eal" --ip 10.0.0.1/24 --workers 1 --socket "$tmp/d.sock" >"$tmp/d.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do
    grep -q "uroced: ready" "$tmp/d.log" && return 0
    sleep 0.1
  done
  echo "bench-service: uroced did not start: $(tail -1 "$tmp/d.log")" >&2
  exit 1
}
stop_daemon() {
  kill "$daemon" 2>/dev/null
  wait "$daemon" 2>/dev/null
  daemon=
}
client() {  # JSON: one program through the daemon
  UROCE_SERVICE=$tmp/d.sock LD_LIBRARY_PATH=$lib taskset -c 0 "$bench" -- --json "$1" --seconds "$seconds" >/dev/null 2>&1 ||
    echo "bench-service: a client through uroced failed" >&2
}

for ((r = 0; r < runs; r++)); do
  LD_LIBRARY_PATH=$lib "$bench" $eal -- --json "$tmp/inproc.json" --seconds "$seconds" >/dev/null 2>&1 ||
    echo "bench-service: the in-process run failed" >&2
  start_daemon
  client "$tmp/service.json"
  rm -f "$tmp/pair.json"
  client "$tmp/pair.json" &
  other=$!
  client "$tmp/pair.json"
  wait "$other"
  field "$tmp/pair.json" write_64k_gbps | awk '{s += $1} END {print s}' >>"$tmp/pair_sum"
  stop_daemon
done

i_bw=$(field "$tmp/inproc.json" write_64k_gbps | median)
s_bw=$(field "$tmp/service.json" write_64k_gbps | median)
i_wl=$(field "$tmp/inproc.json" write_lat_p50_us | median)
s_wl=$(field "$tmp/service.json" write_lat_p50_us | median)
i_sl=$(field "$tmp/inproc.json" lat_p50_us | median)
s_sl=$(field "$tmp/service.json" lat_p50_us | median)
p_bw=$(median <"$tmp/pair_sum")

printf '%-52s %12s %14s %12s\n' "medians of $runs runs in turns" "in-process" "through uroced" "uroced/in"
printf '%-52s %12s %14s %12s\n' "64 KiB WRITE, 16 outstanding (Gb/s)" "$i_bw" "$s_bw" "$(ratio "$s_bw" "$i_bw")"
printf '%-52s %12s %14s %12s\n' "8 B WRITE half round trip p50 (us)" "$i_wl" "$s_wl" "$(diff_us "$s_wl" "$i_wl")"
printf '%-52s %12s %14s %12s\n' "8 B SEND half round trip p50 (us)" "$i_sl" "$s_sl" "$(diff_us "$s_sl" "$i_sl")"
printf '%-52s %12s %14s %12s\n' "64 KiB WRITE through uroced: one program, two at once (sum)" "$s_bw" "$p_bw" "$(ratio "$p_bw" "$s_bw")"
cat >"$out" <<EOF
{"test":"bench-service","runs":$runs,"seconds":$seconds,"write_64k_gbps":{"in_process":$i_bw,"service":$s_bw,"service_two_clients_sum":$p_bw},"write_lat_p50_us":{"in_process":$i_wl,"service":$s_wl},"send_lat_p50_us":{"in_process":$i_sl,"service":$s_sl}}
EOF
echo "JSON: $out"
