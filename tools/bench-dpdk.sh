#!/usr/bin/env bash
# Benchmarks of the DPDK datapath between two processes with one core each,
# side by side with their baselines in the same run. Prints a table and
# writes JSON ($1, default build/bench-dpdk.json).
#   memif:  uroce-perf 64 KiB RDMA WRITE bandwidth (RoCE MTU 4096) and 8-byte
#           WRITE latency; 4 KiB WRITEs over 1,000 QP pairs paced at 10 Mb/s
#           each (a 10 Gb/s line together) and unpaced.
#   veth:   two network namespaces joined by a veth pair (MTU 9000), af_packet
#           on each end: uroce-perf's 64 KiB WRITE bandwidth and 8-byte
#           latency; dpdk-testpmd's raw rate (txonly -> rxonly) with frames of
#           the same size as a 4 KiB-MTU RoCE WRITE (4170 bytes); kernel TCP
#           (iperf3 bandwidth, sockperf ping-pong latency).
# Rates between two processes swing 2-4x from run to run on shared machines:
# compare the ratios within one run.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
for p in iperf3 sockperf; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$p" >/dev/null
done
build=${UROCE_BUILD_DIR:-build}
out=${1:-$build/bench-dpdk.json}
perf="$build/apps/perf/uroce-perf"
eal="--no-huge --no-shconf --no-pci -m 1024 --log-level=lib.*:error"
tmp=$(mktemp -d)
nsa=uroce-bench-a nsb=uroce-bench-b
cleanup() { ip netns del $nsa 2>/dev/null; ip netns del $nsb 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
[[ -n ${KEEP_TMP:-} ]] && trap "ip netns del $nsa 2>/dev/null; ip netns del $nsb 2>/dev/null; echo kept $tmp" EXIT
cleanup; tmp=$(mktemp -d)

# $1 name, $2 server prefix, $3 server EAL, $4 server ip, $5 client prefix, $6 client EAL, $7 client ip, $8 connect to, rest: test
perf_pair() {
  local name=$1 sp=$2 seal=$3 sip=$4 cp=$5 ceal=$6 cip=$7 to=$8
  shift 8
  $sp "$perf" $seal -- --ip "$sip" "$@" >"$tmp/$name.server" 2>&1 &
  local spid=$!
  sleep 2
  $cp "$perf" $ceal -- --ip "$cip" "$@" --json "$tmp/$name.json" "$to" >"$tmp/$name.client" 2>&1
  wait $spid
}

echo "memif: uroce-perf, two processes"
sock=/tmp/uroce-bench-$$.sock
perf_pair memif_bw "" "$eal -l 0 --file-prefix=bs --vdev=net_memif0,role=server,bsize=8192,socket=$sock" 10.92.0.1/24 \
  "" "$eal -l 1 --file-prefix=bc --vdev=net_memif0,role=client,bsize=8192,socket=$sock" 10.92.0.2/24 127.0.0.1 \
  write -s 65536 -n 50000 -m 4096
perf_pair memif_lat "" "$eal -l 0 --file-prefix=bs --vdev=net_memif0,role=server,bsize=8192,socket=$sock" 10.92.0.1/24 \
  "" "$eal -l 1 --file-prefix=bc --vdev=net_memif0,role=client,bsize=8192,socket=$sock" 10.92.0.2/24 127.0.0.1 \
  write -s 8 -n 20000 --lat
# 1,000 QP pairs on one core each side, 4 KiB WRITEs: each QP paced at
# 10 Mb/s (DCQCN's line rate per QP; together a 10 Gb/s line), and the same
# unpaced (what the cores can do).
sed 's/^rp_line_rate_gbps = .*/rp_line_rate_gbps = 0.01/' conf/dcqcn.conf >"$tmp/pace10.conf"
for v in paced unpaced; do
  cc=off; [[ $v == paced ]] && cc="$tmp/pace10.conf"
  perf_pair memif_1000qp_$v "" "$eal -l 0 --file-prefix=bs --vdev=net_memif0,role=server,bsize=8192,socket=$sock" 10.92.0.1/24 \
    "" "$eal -l 1 --file-prefix=bc --vdev=net_memif0,role=client,bsize=8192,socket=$sock" 10.92.0.2/24 127.0.0.1 \
    write -s 4096 -n 400000 -m 4096 -q 1000 -t 2000 --dcqcn "$cc"
done
rm -f "$sock"

# testpmd over the same kind of link: memif, txonly -> rxonly, frames of a
# 4 KiB-MTU RoCE WRITE (4170 bytes). Each side's forwarding lcore on a CPU of
# its own (the other lcore is testpmd's idle main lcore). stdbuf keeps the
# periodic statistics when timeout ends the runs.
tp="stdbuf -oL dpdk-testpmd --no-huge --no-shconf --no-pci -m 1024 --log-level=lib.*:error"
tpopts="--mbuf-size=9216 --total-num-mbufs=16384 --nb-cores=1 --auto-start --stats-period=1"
timeout -s INT 16 $tp -l 0,1 --main-lcore 1 --file-prefix=tms --vdev=net_memif0,role=server,bsize=8192,socket=$sock \
  -- --forward-mode=rxonly $tpopts >"$tmp/tpm_rx" 2>&1 &
rxpid=$!
sleep 2
timeout -s INT 12 $tp -l 0,1 --main-lcore 0 --file-prefix=tmc --vdev=net_memif0,role=client,bsize=8192,socket=$sock \
  -- $tpopts --txpkts=4170 --forward-mode=txonly >"$tmp/tpm_tx" 2>&1
wait $rxpid 2>/dev/null  # testpmd on memif may crash at its exit; its figures are written by then
rm -f "$sock"
tpm_pps=$(grep -E "Rx-pps" "$tmp/tpm_rx" | awk '{print $2}' | sort -n | tail -1)

echo "veth: two namespaces"
ip netns add $nsa && ip netns add $nsb
ip -n $nsa link add bveth0 mtu 9000 type veth peer name bveth1 mtu 9000 netns $nsb
ip -n $nsa addr add 10.91.0.1/24 dev bveth0 && ip -n $nsb addr add 10.91.0.2/24 dev bveth1
ip -n $nsa link set bveth0 up && ip -n $nsa link set lo up && ip -n $nsb link set bveth1 up && ip -n $nsb link set lo up
afp() { echo "$eal -l $1 --file-prefix=$2 --vdev=net_af_packet0,iface=$3,blocksz=16384,framesz=8192,framecnt=512"; }
perf_pair veth_bw "ip netns exec $nsa" "$(afp 0 vs bveth0)" 10.91.0.11/24 "ip netns exec $nsb" "$(afp 1 vc bveth1)" 10.91.0.12/24 10.91.0.1 \
  write -s 65536 -n 20000 -m 4096
perf_pair veth_lat "ip netns exec $nsa" "$(afp 0 vs bveth0)" 10.91.0.11/24 "ip netns exec $nsb" "$(afp 1 vc bveth1)" 10.91.0.12/24 10.91.0.1 \
  write -s 8 -n 10000 --lat

# testpmd over the veth pair, as over memif above.
ip netns exec $nsb timeout -s INT 16 $tp -l 0,1 --main-lcore 1 --file-prefix=tr \
  --vdev=net_af_packet0,iface=bveth1,blocksz=16384,framesz=8192,framecnt=512 -- --forward-mode=rxonly $tpopts >"$tmp/tp_rx" 2>&1 &
rxpid=$!
sleep 2
ip netns exec $nsa timeout -s INT 12 $tp -l 0,1 --main-lcore 0 --file-prefix=tt \
  --vdev=net_af_packet0,iface=bveth0,blocksz=16384,framesz=8192,framecnt=512 -- $tpopts --txpkts=4170 --forward-mode=txonly >"$tmp/tp_tx" 2>&1
wait $rxpid 2>/dev/null
tp_pps=$(grep -E "Rx-pps" "$tmp/tp_rx" | awk '{print $2}' | sort -n | tail -1)

ip netns exec $nsa iperf3 -s -1 -D --logfile "$tmp/iperf_s" >/dev/null 2>&1
sleep 1
ip netns exec $nsb iperf3 -c 10.91.0.1 -t 5 -J >"$tmp/iperf.json" 2>/dev/null
ip netns exec $nsa sockperf server -i 10.91.0.1 --tcp >/dev/null 2>&1 &
spid=$!
sleep 1
ip netns exec $nsb sockperf ping-pong -i 10.91.0.1 --tcp -m 16 -t 5 >"$tmp/sockperf" 2>&1
kill $spid 2>/dev/null

python3 - "$tmp" "$out" "${tp_pps:-0}" "${tpm_pps:-0}" <<'PY'
import json, re, sys
d, out, tp_pps, tpm_pps = sys.argv[1], sys.argv[2], float(sys.argv[3] or 0), float(sys.argv[4] or 0)
def perf(name):
    try:
        return json.load(open(f"{d}/{name}.json"))
    except Exception:
        return None
r = {n: perf(n) for n in ("memif_bw", "memif_lat", "memif_1000qp_paced", "memif_1000qp_unpaced", "veth_bw", "veth_lat")}
iperf = None
try:
    iperf = json.load(open(f"{d}/iperf.json"))["end"]["sum_received"]["bits_per_second"] / 1e9
except Exception:
    pass
sock = None
m = re.search(r"avg-latency=([0-9.]+)", open(f"{d}/sockperf").read())
if m:
    sock = float(m.group(1))  # us, round trip / 2
tp_gbps = tp_pps * 4170 * 8 / 1e9
tpm_gbps = tpm_pps * 4170 * 8 / 1e9
def g(x, k):
    return x[k] if x else None
rows = [
    ("uroce WRITE 64 KiB, memif", g(r["memif_bw"], "bw_gbps"), "Gb/s"),
    ("uroce WRITE 8 B p50 latency, memif", r["memif_lat"]["lat_us"]["p50"] if r["memif_lat"] else None, "us"),
    ("uroce WRITE 4 KiB, 1,000 QPs at 10 Mb/s, memif", g(r["memif_1000qp_paced"], "bw_gbps"), "Gb/s"),
    ("uroce WRITE 4 KiB, 1,000 QPs unpaced, memif", g(r["memif_1000qp_unpaced"], "bw_gbps"), "Gb/s"),
    ("uroce WRITE 64 KiB, veth af_packet", g(r["veth_bw"], "bw_gbps"), "Gb/s"),
    ("uroce WRITE 8 B p50 latency, veth", r["veth_lat"]["lat_us"]["p50"] if r["veth_lat"] else None, "us"),
    ("testpmd raw 4170 B frames, memif", tpm_gbps or None, "Gb/s"),
    ("testpmd raw 4170 B frames, memif", tpm_pps / 1e6 if tpm_pps else None, "Mpps"),
    ("testpmd raw 4170 B frames, veth af_packet", tp_gbps or None, "Gb/s"),
    ("kernel TCP iperf3, veth", iperf, "Gb/s"),
    ("kernel TCP sockperf 16 B latency, veth (min size 14)", sock, "us"),
]
for name, v, unit in rows:
    print(f"{name:<44}{'n/a' if v is None else f'{v:10.2f}'} {unit}")
ratios = {}
if r["memif_bw"] and tpm_pps:
    # Payload bits over testpmd's frame bits (the stricter figure), and
    # RoCE data frames (4096 bytes of payload each) over testpmd's frames.
    ratios["uroce_bw_over_testpmd_raw_memif"] = r["memif_bw"]["bw_gbps"] / tpm_gbps
    ratios["uroce_frames_over_testpmd_frames_memif"] = r["memif_bw"]["bw_gbps"] * 1e9 / 8 / 4096 / tpm_pps
if r["memif_1000qp_paced"]:
    # A 10 Gb/s line carries 4096 of every 4194 bytes (headers with RETH,
    # ICRC, preamble, IFG, FCS) of 4 KiB WRITEs as payload.
    ratios["uroce_1000_paced_qps_over_10g_line"] = r["memif_1000qp_paced"]["bw_gbps"] / (10 * 4096 / 4194)
if r["veth_bw"] and tp_gbps:
    ratios["uroce_bw_over_testpmd_raw_veth"] = r["veth_bw"]["bw_gbps"] / tp_gbps
if r["veth_lat"] and sock:
    ratios["uroce_lat_over_kernel_tcp_veth"] = r["veth_lat"]["lat_us"]["p50"] / sock
for k, v in ratios.items():
    print(f"{k}: {v:.3f}")
if not tp_gbps:
    print("testpmd over af_packet: n/a. In DPDK 22.11 here, testpmd txonly stalls after its first")
    print("burst on af_packet; see the logs with KEEP_TMP=1.")
if not tpm_pps:
    print("testpmd over memif: n/a (no Rx-pps in its log; see the logs with KEEP_TMP=1).")
json.dump({"uroce": r, "testpmd_raw_gbps_memif": tpm_gbps, "testpmd_raw_mpps_memif": tpm_pps / 1e6,
           "testpmd_raw_gbps_veth": tp_gbps, "iperf3_gbps_veth": iperf,
           "sockperf_lat_us_veth": sock, "ratios": ratios}, open(out, "w"), indent=1)
print(f"JSON: {out}")
PY
