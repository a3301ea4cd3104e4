#!/usr/bin/env bash
# Raw DPDK on the links uroce's benchmarks use, two processes with one core
# each (uroce-bench-raw): the baseline the performance report holds uroce's
# figures against, in the same run.
#   memif:  ping-pong of 82-byte frames (the size of an 8-byte RDMA WRITE
#           Only frame), 20,000 round trips; packet rate of 82-byte and
#           4170-byte frames (a 4 KiB-MTU RoCE WRITE), 3 s each.
#   veth:   the same over af_packet on a veth pair (MTU 9000) in two network
#           namespaces, when UROCE_RAW_VETH=1 (needs root).
# Prints one line per run and writes JSON ($1, default build/bench-raw.json).
# Rates between two processes swing from run to run on shared machines:
# compare figures from one run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build=${UROCE_BUILD_DIR:-build}
out=${1:-$build/bench-raw.json}
raw="$build/apps/bench/uroce-bench-raw"
[[ -x $raw ]] || { echo "bench-raw: $raw missing; run: ninja -C $build apps/bench/uroce-bench-raw" >&2; exit 1; }
eal="--no-huge --no-shconf --no-pci -m 1024 --log-level=lib.*:error"
tmp=$(mktemp -d /tmp/uroce-bench-raw.XXXXXX)
sock=/tmp/uroce-bench-raw-$$.sock
nsa=uroce-raw-a nsb=uroce-raw-b
cleanup() {
  if [[ ${UROCE_RAW_VETH:-} == 1 ]]; then ip netns del $nsa 2>/dev/null; ip netns del $nsb 2>/dev/null; fi
  rm -f "$sock"
  if [[ -n ${KEEP_TMP:-} ]]; then echo "bench-raw: logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
failed=0

# $1 name, $2 server command prefix, $3 server EAL, $4 client prefix,
# $5 client EAL, rest: the mode and its flags. The server (bouncing or
# receiving side) starts first; the measuring side writes $tmp/$1.json.
raw_pair() {
  local name=$1 sp=$2 seal=$3 cp=$4 ceal=$5
  shift 5
  local mode=$1 sjson=() cjson=(--json "$tmp/$name.json")
  [[ $mode == rate ]] && sjson=(--json "$tmp/$name.json") cjson=(--json "$tmp/$name.tx.json")
  rm -f "$sock"
  $sp timeout 60 "$raw" $seal -- "$@" --server "${sjson[@]}" >"$tmp/$name.server" 2>&1 &
  local spid=$!
  sleep 1.5
  $cp timeout 60 "$raw" $ceal -- "$@" "${cjson[@]}" >"$tmp/$name.client" 2>&1
  local crc=$?
  wait $spid
  local src=$?
  local side=$tmp/$name.client
  [[ $mode == rate ]] && side=$tmp/$name.server
  if ((crc != 0 || src != 0)) || [[ ! -s $tmp/$name.json ]]; then
    echo "$name: failed (client exit $crc, server exit $src):" >&2
    tail -n 3 "$tmp/$name.server" "$tmp/$name.client" >&2
    failed=1
    return
  fi
  printf '%-22s %s\n' "$name" "$(grep -E '^(pingpong|rate) ' "$side" | tail -1)"
}

memif() { echo "$eal -l $1 --file-prefix=$2$$ --vdev=net_memif0,role=$3,bsize=8192,socket=$sock"; }
runs=()
run_link() {
  local link=$1 sp=$2 seal=$3 cp=$4 ceal=$5
  raw_pair "${link}_pingpong_82" "$sp" "$seal" "$cp" "$ceal" pingpong --size 82 -n 20000
  raw_pair "${link}_rate_82" "$sp" "$seal" "$cp" "$ceal" rate --size 82 --seconds 3
  raw_pair "${link}_rate_4170" "$sp" "$seal" "$cp" "$ceal" rate --size 4170 --seconds 3
  runs+=("${link}_pingpong_82" "${link}_rate_82" "${link}_rate_4170")
}

run_link memif "" "$(memif 0 rs server)" "" "$(memif 1 rc client)"

if [[ ${UROCE_RAW_VETH:-} == 1 ]]; then
  ip netns del $nsa 2>/dev/null; ip netns del $nsb 2>/dev/null
  if ! { ip netns add $nsa && ip netns add $nsb &&
    ip -n $nsa link add rveth0 mtu 9000 type veth peer name rveth1 mtu 9000 netns $nsb &&
    ip -n $nsa link set rveth0 up && ip -n $nsb link set rveth1 up; }; then
    echo "bench-raw: cannot make the veth pair (root?)" >&2
    exit 1
  fi
  afp() { echo "$eal -l $1 --file-prefix=$2$$ --vdev=net_af_packet0,iface=$3,blocksz=16384,framesz=8192,framecnt=512"; }
  run_link veth "ip netns exec $nsa" "$(afp 0 vs rveth0)" "ip netns exec $nsb" "$(afp 1 vc rveth1)"
fi

python3 - "$tmp" "$out" "${runs[@]}" <<'PY'
import json, sys
d, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
result = {}
for n in names:
    try:
        result[n] = json.load(open(f"{d}/{n}.json"))
    except Exception:
        result[n] = None
    try:
        if result[n] is not None and result[n]["mode"] == "rate":
            tx = json.load(open(f"{d}/{n}.tx.json"))
            result[n]["tx_mpps"] = tx["tx_mpps"]
    except Exception:
        pass
json.dump(result, open(out, "w"), indent=1)
print(f"JSON: {out}")
PY
exit $failed
