#!/usr/bin/env bash
# rdma-core's own Python test suite (the tests/ folder of an rdma-core source
# tree, v44.0 to match Debian 12's python3-pyverbs) on uroce0 under uroce-run:
# the unittest summary, then every skip reason with its count, so that each
# can be checked against the verbs docs/ibverbs.md lists as absent.
#
#   tools/rdma-core-tests.sh TESTS_DIR [memif|service SOCKET] [-- run_tests.py args]
#
#   TESTS_DIR   rdma-core's tests/ folder, not in this repository. To get it:
#                 git clone --depth 1 --branch v44.0 https://github.com/linux-rdma/rdma-core
#               then give rdma-core/tests.
#   memif       (default) in-process on a memif port with no peer: every test's
#               traffic is between QPs of the one device (uroce's loopback).
#   service S   through the uroced daemon listening on socket S.
#
# Installs python3-pyverbs if missing (root). Uses Debian's /usr/bin/python3,
# whose dist-packages hold pyverbs. Exit status: run_tests.py's (0: no
# failure and no error). Needs ./build (tools/setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.."

tests=${1:-}
[[ -n $tests && -f $tests/run_tests.py ]] ||
  { echo "rdma-core-tests: give rdma-core's tests/ folder (see the head of this script for how to get it)"; exit 2; }
shift
mode=memif
socket=
if [[ ${1:-} == memif ]]; then
  shift
elif [[ ${1:-} == service ]]; then
  mode=service
  socket=${2:-}
  [[ -S $socket ]] || { echo "rdma-core-tests: service needs uroced's socket (e.g. /run/uroce/uroced.sock)"; exit 2; }
  shift 2
fi
[[ ${1:-} == -- ]] && shift

if ! dpkg-query -W -f='${Status}' python3-pyverbs 2>/dev/null | grep -q "install ok installed"; then
  [[ $(id -u) -eq 0 ]] || { echo "rdma-core-tests: python3-pyverbs is missing: apt-get install python3-pyverbs"; exit 2; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-pyverbs >/dev/null ||
    { echo "rdma-core-tests: apt-get install python3-pyverbs failed"; exit 2; }
fi
run=build/apps/run/uroce-run
[[ -x $run ]] || { echo "rdma-core-tests: no $run: run tools/setup.sh first"; exit 2; }

log=$(mktemp /tmp/uroce-rdma-core-tests.XXXXXX)
if [[ $mode == memif ]]; then
  dir=$(mktemp -d /tmp/uroce-rdma-core-memif.XXXXXX)
  trap 'rm -rf "$dir"' EXIT
  "$run" --no-huge --no-shconf --no-pci -m 512 -l 0 --log-level=lib.eal:error \
    "--vdev=net_memif0,role=server,socket=$dir/memif.sock,bsize=8192" -- --ip 10.0.0.1/24 \
    /usr/bin/python3 "$tests/run_tests.py" --dev uroce0 -v "$@" >"$log" 2>&1
else
  "$run" --service --socket "$socket" /usr/bin/python3 "$tests/run_tests.py" --dev uroce0 -v "$@" >"$log" 2>&1
fi
status=$?
grep -E '^(FAIL|ERROR):' "$log"
echo "skips, by reason:"
grep -oE "skipped ['\"].*['\"]$" "$log" | sed -E "s/^skipped ['\"](.*)['\"]$/\1/" | sort | uniq -c | sort -rn
grep -E '^Ran [0-9]+ tests' "$log"
tail -n 1 "$log"
echo "(full output: $log)"
exit "$status"
