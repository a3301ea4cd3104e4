#!/usr/bin/env bash
# Open MPI over UCX (rc_verbs,ud_verbs,self) on uroce: Intel's IMB-MPI1
# PingPong and Allreduce between two ranks in two network namespaces joined
# by a veth pair, each rank on its own af_packet port through uroce-run.
# Runs it N times, prints MB/s per message size and run, and flags a cliff
# (a "!" after the rate): a size above 64 KiB whose rate falls below a tenth
# of the best rate of the smaller sizes (from 64 KiB) of that benchmark in
# that run (2x swings are load on a shared machine; a 10x drop is not). Exit 0 when every run completed without a cliff.
#
# IMB-MPI1 is not packaged in Debian 12: build it from
# https://github.com/intel/mpi-benchmarks with `make IMB-MPI1 CC=mpicc CXX=mpicxx`
# (see docs/mpi.md). Needs root and openmpi-bin (installed when missing).
#
# Usage: tools/mpi-imb.sh [--service] [IMB-MPI1] [RUNS]   (or IMB=..., RUNS=...)
#   --service  each namespace runs a uroced on its end of the veth, and each
#              rank runs through its namespace's daemon (uroce-run --service)
#              instead of owning the port (docs/service.md)
#   IMB_ARGS   extra IMB-MPI1 arguments (default "-msglog 16:22 -iter 20 -time 10": 64 KiB to 4 MiB)
#   UROCE_COUNTERS=1  print both ranks' QP and port counters (DPDK telemetry) after each run
#   KEEP=DIR   keep each run's output in DIR
#   UROCE_LIB=DIR  uroce's libibverbs.so.1 from DIR (uroce-run --lib), e.g. another build's
set -uo pipefail
cd "$(dirname "$0")/.."
service=
[[ ${1:-} == --service ]] && { service=1; shift; }
imb=${1:-${IMB:-}}
runs=${2:-${RUNS:-5}}
imb_args=${IMB_ARGS:--msglog 16:22 -iter 20 -time 10}
if [[ -z $imb || ! -x $imb ]]; then
  echo "mpi-imb: give the IMB-MPI1 binary: tools/mpi-imb.sh PATH [RUNS] (see docs/mpi.md)" >&2
  exit 2
fi
imb=$(readlink -f "$imb")
if ! command -v mpirun >/dev/null; then
  echo "mpi-imb: installing openmpi-bin"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openmpi-bin >/dev/null ||
    { echo "mpi-imb: cannot install openmpi-bin (apt-get install openmpi-bin)" >&2; exit 1; }
fi
build=${UROCE_BUILD_DIR:-build}
run=$PWD/$build/apps/run/uroce-run
uroced=$PWD/$build/apps/uroced/uroced
[[ -x $run && -x $uroced ]] || { echo "mpi-imb: $run or $uroced missing: build uroce first (tools/setup.sh)" >&2; exit 1; }
node=/dev/infiniband/uuroce0
made_node=
nsa=uroce-mpia-$$
nsb=uroce-mpib-$$
tmp=$(mktemp -d /tmp/uroce-mpi.XXXXXX)
daemons=()
cleanup() {
  for d in "${daemons[@]}"; do kill "$d" 2>/dev/null; done
  for d in "${daemons[@]}"; do wait "$d" 2>/dev/null; done
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
  if [[ -n $made_node ]]; then
    rm -f "$node"
    rmdir /dev/infiniband 2>/dev/null
  fi
  rm -rf "$tmp" /var/run/dpdk/"$nsa" /var/run/dpdk/"$nsb"
}
trap cleanup EXIT
# UCX takes a verbs device only if /dev/infiniband/<dev_name> is a character
# device; uroce opens nothing there, so a null device serves (as tools/ucx-verbs.sh).
if [[ ! -c $node ]]; then
  mkdir -p /dev/infiniband && mknod "$node" c 1 3 || { echo "mpi-imb: cannot make $node (root?)" >&2; exit 1; }
  made_node=1
fi
ip netns add "$nsa" && ip netns add "$nsb" || { echo "mpi-imb: cannot create namespaces (root?)" >&2; exit 1; }
ip -n "$nsa" link add mpiv0 mtu 9000 type veth peer name mpiv1 mtu 9000 netns "$nsb"
ip -n "$nsa" addr add 10.96.0.1/24 dev mpiv0
ip -n "$nsb" addr add 10.96.0.2/24 dev mpiv1
ip -n "$nsa" link set mpiv0 up; ip -n "$nsa" link set lo up
ip -n "$nsb" link set mpiv1 up; ip -n "$nsb" link set lo up

# mpirun (in namespace A) starts each rank's orted through this "remote
# shell": the host name is the namespace. orted in B reaches mpirun over the
# kernel's TCP on the veth (10.96.0.x); the ranks' MPI traffic is RoCEv2 on
# their own addresses (10.96.0.1x), which the kernel does not answer for.
cat >"$tmp/netns-rsh" <<'EOF'
#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
exec ip netns exec "$host" /bin/sh -c "$*"
EOF
chmod +x "$tmp/netns-rsh"

eal() {  # namespace interface cpu
  echo "--no-huge --no-pci -m 512 --log-level=lib.eal:error --file-prefix=$1 -l $3" \
       "--vdev=net_af_packet0,iface=$2,blocksz=16384,framesz=8192,framecnt=512"
}
mpi=(--allow-run-as-root --oversubscribe --mca plm_rsh_agent "$tmp/netns-rsh"
     --mca oob_tcp_if_include 10.96.0.0/24 --mca pml ucx --mca btl self --mca osc ^ucx
     -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=uroce0:1 -x UCX_WARN_UNUSED_ENV_VARS=n)

counters() {  # namespace: the QPs' non-zero counters and the port's, from DPDK telemetry
  local sock=/var/run/dpdk/$1/dpdk_telemetry.v2 q
  [[ -S $sock ]] || return
  python3 - "$sock" <<'EOF'
import json, socket, sys
def ask(cmd):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1]); s.recv(1024); s.send(cmd.encode())
    out = json.loads(s.recv(1 << 20).decode()); s.close()
    return list(out.values())[0]
def show(label, d):
    rows = {k: v for k, v in (d or {}).items() if isinstance(v, int) and v}
    print("   ", label, " ".join(f"{k}={v}" for k, v in sorted(rows.items())))
qps = ask("/uroce/qps,0") or {}
for qpn in (qps.get("qps", qps) if isinstance(qps, dict) else qps):
    show(f"qp {qpn}:", ask(f"/uroce/qp,0,{qpn}"))
show("engine:", ask("/uroce/engine,0"))
show("port:", ask("/uroce/port,0"))
show("ethdev:", ask("/ethdev/stats,0"))
EOF
}

lib=()
[[ -n ${UROCE_LIB:-} ]] && lib=(--lib "$UROCE_LIB")
# What runs a rank in namespace A or B: uroce-run owning that side's port, or
# uroce-run attaching to that side's daemon.
rank_a=("$run" $(eal "$nsa" mpiv0 0) -- --ip 10.96.0.11/24)
rank_b=("$run" $(eal "$nsb" mpiv1 1) -- --ip 10.96.0.12/24)
if [[ -n $service ]]; then
  for side in a:mpiv0:0:11 b:mpiv1:1:12; do
    IFS=: read -r n ifc cpu host <<<"$side"
    ns=$nsa; [[ $n == b ]] && ns=$nsb
    # shellcheck disable=SC2046
    ip netns exec "$ns" "$uroced" --eal "$(eal "$ns" "$ifc" "$cpu")" --ip "10.96.0.$host/24" \
      --socket "$tmp/$n.sock" >"$tmp/uroced-$n.log" 2>&1 &
    daemons+=($!)
  done
  for n in a b; do
    for _ in $(seq 600); do grep -q 'uroced: ready' "$tmp/uroced-$n.log" && break; sleep 0.1; done
    grep -q 'uroced: ready' "$tmp/uroced-$n.log" ||
      { echo "mpi-imb: uroced in namespace $n did not start:" >&2; cat "$tmp/uroced-$n.log" >&2; exit 1; }
  done
  rank_a=("$run" --service --socket "$tmp/a.sock")
  rank_b=("$run" --service --socket "$tmp/b.sock")
fi
cliffs=0
failed=0
for ((i = 1; i <= runs; ++i)); do
  out=$tmp/run$i
  # shellcheck disable=SC2086
  ip netns exec "$nsa" timeout 900 mpirun "${mpi[@]}" \
    -np 1 -host "$nsa" "${rank_a[@]}" "${lib[@]}" "$imb" PingPong Allreduce $imb_args : \
    -np 1 -host "$nsb" "${rank_b[@]}" "${lib[@]}" "$imb" PingPong Allreduce $imb_args \
    >"$out" 2>&1 &
  pid=$!
  if [[ ${UROCE_COUNTERS:-} == 1 ]]; then
    # The last snapshot taken while both ranks still ran: counters only grow.
    while kill -0 "$pid" 2>/dev/null; do
      { echo "  counters, rank A:"; counters "$nsa"; echo "  counters, rank B:"; counters "$nsb"; } >"$out.snap" 2>/dev/null
      # Both ranks' QPs still there (they go at MPI_Finalize).
      [[ $(grep -c "acks_received" "$out.snap") -ge 2 ]] && mv "$out.snap" "$out.counters"
      sleep 1
    done
  fi
  wait "$pid"
  rc=$?
  [[ -n ${KEEP:-} ]] && mkdir -p "$KEEP" && cp "$out"* "$KEEP/"
  result=$(python3 - "$out" "$i" "$rc" <<'EOF'
import re, sys
path, run, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
bench, rows, cliff = None, {}, 0
for line in open(path, errors="replace"):
    m = re.match(r"# Benchmarking (\S+)", line)
    if m:
        bench = m.group(1); rows[bench] = []; continue
    f = line.split()
    if bench and len(f) >= 4 and f[0].isdigit() and f[1].isdigit():
        size = int(f[0])
        if bench == "PingPong":
            rate = float(f[3])
        else:  # Allreduce: bytes over t_avg
            t = float(f[4]) if len(f) >= 5 else float(f[2])
            rate = size / t if t > 0 else 0.0
        rows[bench].append((size, rate))
for b, rs in rows.items():
    big = [(s, r) for s, r in rs if s >= 65536]
    marks, best = [], 0.0
    for s, r in big:
        flag = r < best / 10  # a tenth of the best of the smaller sizes
        best = max(best, r)
        cliff += flag
        marks.append(f"{s >> 10}K:{r:.0f}{'!' if flag else ''}")
    print(f"run {run} {b:9s} MB/s " + " ".join(marks) + ("  CLIFF" if any(m.endswith('!') for m in marks) else ""))
if rc != 0 or not rows:
    print(f"run {run} FAILED (rc {rc})")
print(f"#cliff {cliff}")
EOF
)
  grep -v '^#cliff' <<<"$result"
  c=$(sed -n 's/^#cliff //p' <<<"$result")
  cliffs=$((cliffs + ${c:-0}))
  if [[ $rc -ne 0 ]]; then
    failed=$((failed + 1))
    grep -E "ERROR|error|timeout|Timeout" "$out" | head -5 | sed 's/^/    /'
  fi
  [[ -f $out.counters ]] && cat "$out.counters"
done
echo "$runs runs: $failed failed, $cliffs sizes below a tenth of a smaller size's rate"
[[ $failed -eq 0 && $cliffs -eq 0 ]]
