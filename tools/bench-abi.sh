#!/usr/bin/env bash
# What lib/ibverbs (libibverbs.so.1) costs over uroce's own API, side by
# side in one run on this machine, RUNS times in turns (medians):
#
#  1. one process, two RC QPs of one device on net_ring0, the engine on a
#     worker thread on CPU 1 and the test on CPU 0 (the machine's two cores): uroce-bench-abi-uroce (uroce's API) against
#     uroce-bench-abi-verbs (the same code on rdma-core's header and our
#     libibverbs.so.1): 8 B SEND and 8 B WRITE half round trips p50 (the
#     WRITE ping-pong polled in memory, as ib_write_lat does), 64 KiB WRITE Gb/s.
#  2. two processes over net_memif: ib_write_bw -s 65536 under uroce-run
#     (the engine on a worker in each) against uroce-perf write -s 65536 -t 128
#     (perftest's depth), with --workers (the same threads, and its poll loop
#     yields as ibv_poll_cq does) and without (the engine on the test's own
#     thread). Two processes of two busy threads each on two cores
#     time-slice, and how each program's polling loop gives way decides more
#     than the library does: here only case 1 measures the ABI layer.
#
# Prints a table and writes JSON. Usage: tools/bench-abi.sh [RUNS] [OUT.json]
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
build=${UROCE_BUILD_DIR:-build}
out=${2:-$build/bench-abi.json}
lib=$build/lib/ibverbs
for b in "$build/apps/bench/uroce-bench-abi-uroce" "$build/apps/bench/uroce-bench-abi-verbs" "$build/apps/perf/uroce-perf"; do
  [[ -x $b ]] || { echo "bench-abi: $b missing; run tools/setup.sh" >&2; exit 1; }
done
command -v ib_write_bw >/dev/null || { echo "bench-abi: ib_write_bw missing; tools/setup.sh installs perftest" >&2; exit 1; }
tmp=$(mktemp -d /tmp/uroce-bench-abi.XXXXXX)
trap '[[ -n ${UROCE_BENCH_KEEP:-} ]] && cp -r "$tmp" "$UROCE_BENCH_KEEP"; rm -rf "$tmp"' EXIT

# shellcheck source=tools/bench_lib.sh
source tools/bench_lib.sh

# --- 1. one process -------------------------------------------------------
for ((r = 0; r < runs; r++)); do
  "$build/apps/bench/uroce-bench-abi-uroce" -- --json "$tmp/uroce.json" --seconds 2 >/dev/null 2>&1 || echo "bench-abi: uroce run failed" >&2
  LD_LIBRARY_PATH=$lib "$build/apps/bench/uroce-bench-abi-verbs" -- --json "$tmp/verbs.json" --seconds 2 >/dev/null 2>&1 ||
    echo "bench-abi: verbs run failed" >&2
done
field() { grep -o "\"$2\":[0-9.]*" "$tmp/$1.json" | cut -d: -f2 | median; }
least() { grep -o "\"$2\":[0-9.]*" "$tmp/$1.json" | cut -d: -f2 | sort -g | head -1; }
u_lat=$(field uroce lat_p50_us)
v_lat=$(field verbs lat_p50_us)
u_wlat=$(field uroce write_lat_p50_us)
v_wlat=$(field verbs write_lat_p50_us)
u_lat_min=$(least uroce lat_p50_us)
v_lat_min=$(least verbs lat_p50_us)
u_bw=$(field uroce write_64k_gbps)
v_bw=$(field verbs write_64k_gbps)
# Each run's verbs/API ratio (the two ran back to back), their median: a
# pair shares the machine's mood, which moves single runs by ±10%.
pair_bw=$(paste <(grep -o '"write_64k_gbps":[0-9.]*' "$tmp/uroce.json" | cut -d: -f2) \
                <(grep -o '"write_64k_gbps":[0-9.]*' "$tmp/verbs.json" | cut -d: -f2) |
          awk '$1 > 0 {print $2 / $1}' | median)

# --- 2. two processes over memif -------------------------------------------
eal="--no-huge --no-shconf --no-pci -m 512 --log-level=lib.eal:error"
memif() { echo "--vdev=net_memif0,role=$1,socket=$tmp/memif.sock,bsize=8192"; }
port=19500
perf_pair() {  # KIND [--workers]: uroce-perf's two processes, the client's Gb/s into $tmp/KIND
  local kind=$1
  shift
  rm -f "$tmp/memif.sock"
  timeout 120 "$build/apps/perf/uroce-perf" $eal -l 0 $(memif server) -- --ip 10.0.0.1/24 "$@" write -s 65536 -t 128 -n 20000 >/dev/null 2>&1 &
  sleep 1.5
  timeout 120 "$build/apps/perf/uroce-perf" $eal -l 1 $(memif client) -- --ip 10.0.0.2/24 "$@" write -s 65536 -t 128 -n 20000 127.0.0.1 \
    >"$tmp/perf.out" 2>&1
  wait
  awk '/BW \[Gb\/s\]/ {getline; print $3}' "$tmp/perf.out" >>"$tmp/$kind"
}
for ((r = 0; r < runs; r++)); do
  perf_pair perf_inline
  perf_pair perf_workers --workers
  rm -f "$tmp/memif.sock"
  p=$((port++))
  timeout 120 "$build/apps/run/uroce-run" $eal -l 0 $(memif server) -- --ip 10.0.0.1/24 \
    ib_write_bw -d uroce0 -x 1 -s 65536 -n 20000 --report_gbits -p $p >/dev/null 2>&1 &
  sleep 1.5
  timeout 120 "$build/apps/run/uroce-run" $eal -l 1 $(memif client) -- --ip 10.0.0.2/24 \
    ib_write_bw -d uroce0 -x 1 -s 65536 -n 20000 --report_gbits -p $p 127.0.0.1 >"$tmp/ibw.out" 2>&1
  wait
  awk '/#bytes/ {getline; print $4}' "$tmp/ibw.out" >>"$tmp/ibw_bw"
done
p_bw=$(median <"$tmp/perf_workers")
pi_bw=$(median <"$tmp/perf_inline")
i_bw=$(median <"$tmp/ibw_bw")

printf '%-58s %12s %12s %10s\n' "medians of $runs runs in turns" "uroce API" "libibverbs" "verbs/API"
printf '%-58s %12s %12s %10s\n' "one process, 8 B SEND half round trip p50 (us)" "$u_lat" "$v_lat" "$(diff_us "$v_lat" "$u_lat")"
printf '%-58s %12s %12s %10s\n' "  the same, the best run of each" "$u_lat_min" "$v_lat_min" "$(diff_us "$v_lat_min" "$u_lat_min")"
printf '%-58s %12s %12s %10s\n' "one process, 8 B WRITE half round trip p50 (us)" "$u_wlat" "$v_wlat" "$(diff_us "$v_wlat" "$u_wlat")"
printf '%-58s %12s %12s %10s\n' "one process, 64 KiB WRITE (Gb/s)" "$u_bw" "$v_bw" "$(ratio "$v_bw" "$u_bw")"
printf '%-58s %12s %12s %10.3f\n' "  the same, median of each run pair's ratio" "" "" "$pair_bw"
printf '%-58s %12s %12s %10s\n' "memif, 2 processes, 64 KiB WRITE (Gb/s): uroce-perf --workers" "$p_bw" "$i_bw" "$(ratio "$i_bw" "$p_bw")"
printf '%-58s %12s %12s %10s\n' "  the same, uroce-perf's engine on its own thread (no worker)" "$pi_bw" "$i_bw" "$(ratio "$i_bw" "$pi_bw")"
cat >"$out" <<EOF
{"test":"bench-abi","runs":$runs,"one_process":{"lat_p50_us":{"uroce":$u_lat,"verbs":$v_lat},"lat_p50_us_best_run":{"uroce":$u_lat_min,"verbs":$v_lat_min},"write_lat_p50_us":{"uroce":$u_wlat,"verbs":$v_wlat},"write_64k_gbps":{"uroce":$u_bw,"verbs":$v_bw,"median_pair_ratio":$pair_bw}},"memif_two_processes":{"write_64k_gbps":{"uroce_perf_workers":${p_bw:-null},"uroce_perf_inline":${pi_bw:-null},"ib_write_bw":${i_bw:-null}}}}
EOF
echo "JSON: $out"
