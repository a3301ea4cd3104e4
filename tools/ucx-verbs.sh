#!/usr/bin/env bash
# UCX (Debian's ucx-utils) on uroce through uroce-run: ucx_perftest at the
# UCT level on rc_verbs and ud_verbs, two processes over a veth pair between two network
# namespaces this script creates (net_af_packet). Prints PASS/FAIL per case
# with UCX's "Final" figures and ends "N passed, M failed".
# With --service the programs run through uroced instead (docs/service.md):
# one daemon in each namespace on its end of the veth, every case run with
# both programs on the first daemon (its loopback) and then across the two.
#
# UCX uses a verbs device only if /dev/infiniband/<dev_name> is a character
# device (its IB device check stats it); uroce opens nothing there, so any
# character device serves: this script makes /dev/infiniband/uuroce0 (a null
# device, c 1 3) when it is missing and removes it again at the end.
# Needs root. Usage: tools/ucx-verbs.sh [--service]
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
if ! command -v ucx_perftest >/dev/null; then
  echo "ucx-verbs: installing ucx-utils"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ucx-utils >/dev/null ||
    { echo "ucx-verbs: cannot install ucx-utils (apt-get install ucx-utils)" >&2; exit 1; }
fi
service=
[[ ${1:-} == --service ]] && service=1
build=${UROCE_BUILD_DIR:-build}
run=$PWD/$build/apps/run/uroce-run
uroced=$PWD/$build/apps/uroced/uroced
node=/dev/infiniband/uuroce0
made_node=
nsa=uroce-ucxa-$$
nsb=uroce-ucxb-$$
tmp=$(mktemp -d /tmp/uroce-ucx.XXXXXX)
daemons=()
cleanup() {
  for p in "${daemons[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
  if [[ -n $made_node ]]; then
    rm -f "$node"
    rmdir /dev/infiniband 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
if [[ ! -c $node ]]; then
  mkdir -p /dev/infiniband && mknod "$node" c 1 3 || { echo "ucx-verbs: cannot make $node (root?)" >&2; exit 1; }
  made_node=1
fi
ip netns add "$nsa" && ip netns add "$nsb" || { echo "ucx-verbs: cannot create namespaces (root?)" >&2; exit 1; }
ip -n "$nsa" link add ucxv0 mtu 9000 type veth peer name ucxv1 mtu 9000 netns "$nsb"
ip -n "$nsa" addr add 10.95.0.1/24 dev ucxv0
ip -n "$nsb" addr add 10.95.0.2/24 dev ucxv1
ip -n "$nsa" link set ucxv0 up; ip -n "$nsa" link set lo up
ip -n "$nsb" link set ucxv1 up; ip -n "$nsb" link set lo up

eal=(--no-huge --no-shconf --no-pci -m 512 --log-level=lib.eal:error)
port() { echo "--vdev=net_af_packet0,iface=$1,blocksz=16384,framesz=8192,framecnt=512"; }
passed=0
failed=0
# "TRANSPORT ARGS"; UD carries active messages only (no puts or atomics).
cases=("rc_verbs -t am_lat -s 8 -n 2000" "rc_verbs -t put_lat -s 8 -n 2000" "rc_verbs -t add_lat -n 2000"
       "rc_verbs -t put_bw -D zcopy -s 65536 -n 5000" "rc_verbs -t am_bw -D bcopy -s 4096 -n 5000"
       "ud_verbs -t am_lat -s 8 -n 2000" "ud_verbs -t am_bw -D bcopy -s 1024 -n 5000")
# One case: SERVER_PREFIX CLIENT_PREFIX TRANSPORT ARGS (the prefixes run a
# program in its namespace, in process or on a daemon).
one() {
  local sp=$1 cp=$2 tl=$3 t=$4 where=$5
  timeout 60 $sp ucx_perftest -d uroce0:1 -x "$tl" >"$tmp/server" 2>&1 &
  local server=$!
  sleep 3
  timeout 60 $cp ucx_perftest 10.95.0.1 -d uroce0:1 -x "$tl" $t >"$tmp/client" 2>&1
  rc=$?
  wait "$server"
  final=$(grep -E '^Final' "$tmp/client" | tr -s ' ')
  if [[ $rc -eq 0 && -n $final ]]; then
    printf 'PASS  %sucx_perftest -x %s %-34s %s\n' "$where" "$tl" "$t" "$final"
    passed=$((passed + 1))
  else
    printf 'FAIL  %sucx_perftest -x %s %-34s rc %s\n' "$where" "$tl" "$t" "$rc"
    grep -E 'ERROR' "$tmp/client" | head -3 | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}
if [[ -z $service ]]; then
  for c in "${cases[@]}"; do
    one "ip netns exec $nsa $run ${eal[*]} -l 0 $(port ucxv0) -- --ip 10.95.0.11/24" \
        "ip netns exec $nsb $run ${eal[*]} -l 1 $(port ucxv1) -- --ip 10.95.0.12/24" "${c%% *}" "${c#* }" ""
  done
else
  # A daemon per namespace, each on its end of the veth.
  for side in a:0:ucxv0:11 b:1:ucxv1:12; do
    IFS=: read -r n cpu ifc host <<<"$side"
    ns=$nsa; [[ $n == b ]] && ns=$nsb
    ip netns exec "$ns" "$uroced" --eal "${eal[*]} -l $cpu $(port "$ifc") --file-prefix=uroce-ucx$n-$$" \
      --ip "10.95.0.$host/24" --socket "$tmp/$n.sock" >"$tmp/$n.log" 2>&1 &
    daemons+=($!)
  done
  for n in a b; do
    for _ in $(seq 600); do grep -q 'uroced: ready' "$tmp/$n.log" && break; sleep 0.1; done
    grep -q 'uroced: ready' "$tmp/$n.log" || { echo "ucx-verbs: uroced $n did not start:" >&2; cat "$tmp/$n.log" >&2; exit 1; }
  done
  for c in "${cases[@]}"; do
    one "ip netns exec $nsa $run --service --socket $tmp/a.sock" "ip netns exec $nsa $run --service --socket $tmp/a.sock" \
        "${c%% *}" "${c#* }" "one daemon: "
    one "ip netns exec $nsa $run --service --socket $tmp/a.sock" "ip netns exec $nsb $run --service --socket $tmp/b.sock" \
        "${c%% *}" "${c#* }" "two daemons: "
  done
fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
