#!/usr/bin/env bash
# UCX (Debian's ucx-utils) on uroce through uroce-run: ucx_perftest at the
# UCT level on rc_verbs and ud_verbs, two processes over a veth pair between two network
# namespaces this script creates (net_af_packet). Prints PASS/FAIL per case
# with UCX's "Final" figures and ends "N passed, M failed".
#
# UCX uses a verbs device only if /dev/infiniband/<dev_name> is a character
# device (its IB device check stats it); uroce opens nothing there, so any
# character device serves: this script makes /dev/infiniband/uuroce0 (a null
# device, c 1 3) when it is missing and removes it again at the end.
# Needs root. Usage: tools/ucx-verbs.sh
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
if ! command -v ucx_perftest >/dev/null; then
  echo "ucx-verbs: installing ucx-utils"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ucx-utils >/dev/null ||
    { echo "ucx-verbs: cannot install ucx-utils (apt-get install ucx-utils)" >&2; exit 1; }
fi
build=${UROCE_BUILD_DIR:-build}
run=$PWD/$build/apps/run/uroce-run
node=/dev/infiniband/uuroce0
made_node=
nsa=uroce-ucxa-$$
nsb=uroce-ucxb-$$
tmp=$(mktemp -d /tmp/uroce-ucx.XXXXXX)
cleanup() {
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
for c in "${cases[@]}"; do
  tl=${c%% *}
  t=${c#* }
  timeout 60 ip netns exec "$nsa" "$run" "${eal[@]}" -l 0 "$(port ucxv0)" -- --ip 10.95.0.11/24 \
    ucx_perftest -d uroce0:1 -x "$tl" >"$tmp/server" 2>&1 &
  sleep 3
  timeout 60 ip netns exec "$nsb" "$run" "${eal[@]}" -l 1 "$(port ucxv1)" -- --ip 10.95.0.12/24 \
    ucx_perftest 10.95.0.1 -d uroce0:1 -x "$tl" $t >"$tmp/client" 2>&1
  rc=$?
  wait
  final=$(grep -E '^Final' "$tmp/client" | tr -s ' ')
  if [[ $rc -eq 0 && -n $final ]]; then
    printf 'PASS  ucx_perftest -x %s %-34s %s\n' "$tl" "$t" "$final"
    passed=$((passed + 1))
  else
    printf 'FAIL  ucx_perftest -x %s %-34s rc %s\n' "$tl" "$t" "$rc"
    grep -E 'ERROR' "$tmp/client" | head -3 | sed 's/^/    /'
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
