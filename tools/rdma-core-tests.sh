#!/usr/bin/env bash
# rdma-core's own Python test suite (the tests/ folder of an rdma-core source
# tree, v44.0 to match Debian 12's python3-pyverbs) on uroce0 under uroce-run:
# the unittest summary, then every skip reason with its count, so that each
# can be checked against the verbs docs/ibverbs.md lists as absent.
#
#   tools/rdma-core-tests.sh TESTS_DIR [MODE] [-- run_tests.py args]
#
#   TESTS_DIR   rdma-core's tests/ folder, not in this repository. To get it:
#                 git clone --depth 1 --branch v44.0 https://github.com/linux-rdma/rdma-core
#               then give rdma-core/tests.
#   MODE        where uroce0 runs; every mode but `service` makes a network
#               namespace uroce-rct-PID with a veth pair urct0/urct1 (MTU 9000)
#               whose urct0 holds uroce's address 10.0.0.1/24 too, and gives
#               urct0 to uroce-run --netdev: the suite's rdma_cm tests take the
#               device's interface from sysfs and its first address from
#               `ip addr` (docs/testing.md).
#     veth      in-process on an af_packet port on urct0 (framesz=8192: 4 KiB MTU)
#     memif     (default) in-process on a memif port with no peer (urct0 only
#               names the address); every test's traffic is between QPs of the
#               one device (uroce's loopback), as on veth.
#     veth-service
#               through a uroced this script starts on an af_packet port on
#               urct0, with its own socket.
#     service SOCKET [IF]
#               through the uroced listening on SOCKET, in this namespace; IF:
#               the interface holding the daemon's address, for --netdev.
#
# Needs root (namespaces, af_packet). Installs python3-pyverbs if missing.
# Uses Debian's /usr/bin/python3, whose dist-packages hold pyverbs. Exit
# status: run_tests.py's (0: no failure and no error). Needs ./build
# (tools/setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.."

tests=${1:-}
[[ -n $tests && -f $tests/run_tests.py ]] ||
  { echo "rdma-core-tests: give rdma-core's tests/ folder (see the head of this script for how to get it)"; exit 2; }
shift
mode=memif
socket=
netdev=
case ${1:-} in
  memif | veth | veth-service) mode=$1; shift ;;
  service)
    mode=service
    socket=${2:-}
    [[ -S $socket ]] || { echo "rdma-core-tests: service needs uroced's socket (e.g. /run/uroce/uroced.sock)"; exit 2; }
    shift 2
    if [[ -n ${1:-} && ${1:-} != -- ]]; then netdev=$1; shift; fi
    ;;
esac
[[ ${1:-} == -- ]] && shift

if ! dpkg-query -W -f='${Status}' python3-pyverbs 2>/dev/null | grep -q "install ok installed"; then
  [[ $(id -u) -eq 0 ]] || { echo "rdma-core-tests: python3-pyverbs is missing: apt-get install python3-pyverbs"; exit 2; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-pyverbs >/dev/null ||
    { echo "rdma-core-tests: apt-get install python3-pyverbs failed"; exit 2; }
fi
run=build/apps/run/uroce-run
[[ -x $run ]] || { echo "rdma-core-tests: no $run: run tools/setup.sh first"; exit 2; }

log=$(mktemp /tmp/uroce-rdma-core-tests.XXXXXX)
dir=$(mktemp -d /tmp/uroce-rdma-core.XXXXXX)
ns=uroce-rct-$$
daemon=
cleanup() {
  if [[ -n $daemon ]]; then kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; fi
  [[ $mode == service ]] || ip netns del "$ns" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
suite=(/usr/bin/python3 "$tests/run_tests.py" --dev uroce0 -v "$@")
eal=(--no-huge --no-shconf --no-pci -m 512 -l 0 --log-level=lib.eal:error)
afp=--vdev=net_af_packet0,iface=urct0,blocksz=16384,framesz=8192,framecnt=512
if [[ $mode != service ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "rdma-core-tests: mode $mode needs root (a network namespace)"; exit 2; }
  ip netns add "$ns" &&
    ip -n "$ns" link add urct0 mtu 9000 type veth peer name urct1 mtu 9000 &&
    ip -n "$ns" addr add 10.0.0.1/24 dev urct0 &&
    ip -n "$ns" link set urct0 up && ip -n "$ns" link set urct1 up && ip -n "$ns" link set lo up ||
    { echo "rdma-core-tests: cannot make namespace $ns with veth urct0/urct1"; exit 2; }
fi
case $mode in
  memif)
    ip netns exec "$ns" "$run" "${eal[@]}" "--vdev=net_memif0,role=server,socket=$dir/memif.sock,bsize=8192" \
      -- --ip 10.0.0.1/24 --netdev urct0 "${suite[@]}" >"$log" 2>&1 ;;
  veth)
    ip netns exec "$ns" "$run" "${eal[@]}" "$afp" -- --ip 10.0.0.1/24 --netdev urct0 "${suite[@]}" >"$log" 2>&1 ;;
  veth-service)
    socket=$dir/uroced.sock
    ip netns exec "$ns" build/apps/uroced/uroced --eal "${eal[*]} --file-prefix=uroce-rct-$$ $afp" \
      --ip 10.0.0.1/24 --socket "$socket" >"$dir/uroced.log" 2>&1 &
    daemon=$!
    for _ in $(seq 600); do
      grep -q "uroced: ready" "$dir/uroced.log" && break
      kill -0 "$daemon" 2>/dev/null || break
      sleep 0.1
    done
    grep -q "uroced: ready" "$dir/uroced.log" ||
      { echo "rdma-core-tests: uroced did not get ready:"; cat "$dir/uroced.log"; exit 2; }
    ip netns exec "$ns" "$run" --service --socket "$socket" --netdev urct0 "${suite[@]}" >"$log" 2>&1 ;;
  service)
    "$run" --service --socket "$socket" ${netdev:+--netdev "$netdev"} "${suite[@]}" >"$log" 2>&1 ;;
esac
status=$?
grep -E '^(FAIL|ERROR):' "$log"
echo "skips, by reason:"
grep -oE "skipped ['\"].*['\"]$" "$log" | sed -E "s/^skipped ['\"](.*)['\"]$/\1/" | sort | uniq -c | sort -rn
grep -E '^Ran [0-9]+ tests' "$log"
tail -n 1 "$log"
echo "(full output: $log)"
exit "$status"
