#!/usr/bin/env bash
# Debian's own verbs binaries, unmodified, on uroce through uroce-run: two
# processes over net_memif, and over a veth pair between two network
# namespaces this script creates (net_af_packet). ibv_devinfo, ibv_rc_pingpong,
# ibv_srq_pingpong, ibv_ud_pingpong, ibv_uc_pingpong and perftest's eight
# ib_*_{bw,lat} in the variants issue 12 lists (and ib_send_bw --use-srq,
# SEND over UD, SEND and WRITE over UC), and rdma_cm's rping and perftest -R
# on our librdmacm.so.1; over veth, libfabric's verbs provider (fi_info,
# fi_pingpong over verbs MSG and verbs;ofi_rxm RDM), rdma_server/rdma_client,
# rdma_xserver/rdma_xclient and cmtime.
# Prints PASS/FAIL per case with perftest's own figures, then
# "N passed, M failed"; exits 1 if any failed.
#
#   tools/stock-verbs.sh [memif|veth|all] [quick]
#     quick: the -x 1 default run of each binary only (what the suite runs)
#
# Needs root (namespaces), and ibverbs-utils and perftest (tools/setup.sh
# installs them). Cases run one at a time: the two processes take a core
# each (-l 0 / -l 1).
set -uo pipefail
cd "$(dirname "$0")/.."
links=${1:-all}
quick=${2:-}
build=${UROCE_BUILD_DIR:-build}
run=$build/apps/run/uroce-run
[[ -x $run ]] || { echo "stock-verbs: $run missing; run tools/setup.sh first" >&2; exit 1; }
for b in ibv_devinfo ibv_rc_pingpong ib_write_bw; do
  command -v "$b" >/dev/null || { echo "stock-verbs: $b missing; tools/setup.sh installs ibverbs-utils and perftest" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/uroce-stock.XXXXXX)
nsa=uroce-sva-$$
nsb=uroce-svb-$$
cleanup() {
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

eal="--no-huge --no-shconf --no-pci -m 512 --log-level=lib.eal:error"
port=19000
passed=0
failed=0

# side LINK server|client: the command prefix that runs a program on that side.
side() {
  local link=$1 role=$2 core ip
  if [[ $role == server ]]; then core=0; ip=1; else core=1; ip=2; fi
  case $link in
    memif)
      # bsize=8192: with memif's default 2 KiB buffers a ping-pong of 4 KiB-MTU
      # messages of ~20 packets or more stalls in retransmission timeouts (docs/ibverbs.md).
      echo "$run $eal -l $core --vdev=net_memif0,role=$role,socket=$tmp/memif.sock,bsize=8192 -- --ip 10.0.0.$ip/24" ;;
    veth)
      local ns=$nsa dev=svveth0
      [[ $role == client ]] && { ns=$nsb; dev=svveth1; }
      echo "ip netns exec $ns $run $eal -l $core --vdev=net_af_packet0,iface=$dev,blocksz=16384,framesz=8192,framecnt=512 -- --ip 10.96.0.1$ip/24" ;;
  esac
}

# The address the client reaches the server's TCP exchange at.
server_host() { [[ $1 == memif ]] && echo 127.0.0.1 || echo 10.96.0.1; }

# The last figures line perftest or the pingpong printed.
figures() {
  grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+|iters in' "$1" | tail -1 | tr -s ' \t' ' '
}

report() {
  local verdict=$1 link=$2 what=$3 detail=$4
  printf '%s %-6s %-44s %s\n' "$verdict" "$link" "$what" "$detail"
  if [[ $verdict == PASS ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

# pair LINK "PROGRAM ARGS": the server, then the client with the server's
# address appended; both must exit 0 and print figures.
pair() {
  local link=$1 cmd=$2 p=$((port++)) limit=${3:-120}
  local full="$cmd -p $p"
  rm -f "$tmp/memif.sock"
  timeout "$limit" $(side "$link" server) $full >"$tmp/srv" 2>&1 &
  local spid=$!
  sleep 1.5
  timeout "$limit" $(side "$link" client) $full "$(server_host "$link")" >"$tmp/cli" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  local f
  f=$(figures "$tmp/cli")
  if [[ $crc -eq 0 && $src -eq 0 && -n $f ]]; then
    report PASS "$link" "$cmd" "$f"
  else
    report FAIL "$link" "$cmd" "server rc=$src client rc=$crc"
    grep -v 'EAL:\|memif_probe\|TELEMETRY' "$tmp/srv" | tail -3 | sed 's/^/    server: /'
    grep -v 'EAL:\|memif_probe\|TELEMETRY' "$tmp/cli" | tail -3 | sed 's/^/    client: /'
  fi
}

single() {
  local link=$1 cmd=$2
  rm -f "$tmp/memif.sock"
  if timeout 60 $(side "$link" server) $cmd >"$tmp/one" 2>&1 && grep -q 'hca_id:.uroce0' "$tmp/one"; then
    report PASS "$link" "$cmd" "$(grep -c GID "$tmp/one") GIDs listed"
  else
    report FAIL "$link" "$cmd" "$(tail -1 "$tmp/one")"
  fi
}

# rdma_cm (our librdmacm.so.1): the client names the server's RoCE address,
# not the TCP one. cmpair LINK "rping" | "PERFTEST ARGS".
roce_server() { [[ $1 == memif ]] && echo 10.0.0.1 || echo 10.96.0.11; }
cmpair() {
  local link=$1 cmd=$2 p=$((port++)) srv scmd ccmd
  srv=$(roce_server "$link")
  if [[ $cmd == rping ]]; then
    scmd="rping -s -a $srv -p $p -C 100 -v"
    ccmd="rping -c -a $srv -p $p -C 100 -v"
  else
    scmd="$cmd -p $p"
    ccmd="$cmd -p $p $srv"
  fi
  rm -f "$tmp/memif.sock"
  timeout 120 $(side "$link" server) $scmd >"$tmp/srv" 2>&1 &
  local spid=$!
  sleep 1.5
  timeout 120 $(side "$link" client) $ccmd >"$tmp/cli" 2>&1
  local crc=$?
  wait "$spid"
  local src=$? f
  if [[ $cmd == rping ]]; then
    f="$(grep -c 'ping data' "$tmp/cli") pings verified"
    [[ $f == "100 pings verified" ]] || f=""
  else
    f=$(figures "$tmp/cli")
  fi
  if [[ $crc -eq 0 && $src -eq 0 && -n $f ]]; then
    report PASS "$link" "$cmd (rdma_cm)" "$f"
  else
    report FAIL "$link" "$cmd (rdma_cm)" "server rc=$src client rc=$crc"
    grep -v 'EAL:\|memif_probe\|TELEMETRY' "$tmp/srv" | tail -3 | sed 's/^/    server: /'
    grep -v 'EAL:\|memif_probe\|TELEMETRY' "$tmp/cli" | tail -3 | sed 's/^/    client: /'
  fi
}

make_veth() {
  ip netns add "$nsa" && ip netns add "$nsb" || { echo "stock-verbs: cannot create namespaces (root?)" >&2; exit 1; }
  ip -n "$nsa" link add svveth0 mtu 9000 type veth peer name svveth1 mtu 9000 netns "$nsb"
  ip -n "$nsa" addr add 10.96.0.1/24 dev svveth0
  ip -n "$nsb" addr add 10.96.0.2/24 dev svveth1
  ip -n "$nsa" link set svveth0 up; ip -n "$nsa" link set lo up
  ip -n "$nsb" link set svveth1 up; ip -n "$nsb" link set lo up
}

matrix() {
  local link=$1
  single "$link" "ibv_devinfo -v"
  local pp=("-g 1" "-g 1 -e" "-g 1 -s 1 -c" "-g 1 -s 4096 -c" "-g 1 -s 65536 -c -n 200" "-g 1 -e -s 65536 -c -n 200")
  [[ -n $quick ]] && pp=("-g 1" "-g 1 -e -s 65536 -c -n 200")
  for a in "${pp[@]}"; do pair "$link" "ibv_rc_pingpong -d uroce0 $a"; done
  local sp=("-g 1" "-g 1 -e -s 65536 -q 4 -n 50")
  for a in "${sp[@]}"; do pair "$link" "ibv_srq_pingpong -d uroce0 $a"; done
  [[ -z $quick ]] && pair "$link" "ib_send_bw -d uroce0 -x 1 --use-srq -q 2" 300
  local up=("-g 1" "-g 1 -e -s 4000")
  for a in "${up[@]}"; do pair "$link" "ibv_ud_pingpong -d uroce0 $a"; done
  local cp=("-g 1" "-g 1 -e -s 65536 -n 200")
  for a in "${cp[@]}"; do pair "$link" "ibv_uc_pingpong -d uroce0 $a"; done
  cmpair "$link" rping
  local r
  for r in "ib_write_bw -d uroce0 -x 1 -R" "ib_read_bw -d uroce0 -x 1 -R" "ib_send_lat -d uroce0 -x 1 -R -n 500"; do
    [[ -n $quick && $r != ib_write_bw* ]] && continue
    cmpair "$link" "$r"
  done
  local u
  # (No SEND bandwidth over UC: without flow control it loses messages a
  # slower receiver then waits for. UD has none either: its bandwidth run is
  # timed, -D 1, so a datagram dropped by a receiver that fell behind is not
  # waited for.)
  for u in "ib_send_bw -x 1 -c UD -D 1" "ib_send_lat -x 1 -c UD" "ib_write_bw -x 1 -c UC" \
           "ib_send_lat -x 1 -c UC" "ib_write_lat -x 1 -c UC"; do
    [[ -n $quick && $u == *_lat* ]] && continue
    pair "$link" "${u/ -x/ -d uroce0 -x}" 300
  done
  local t v
  for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
    local variants=("-x 1")
    if [[ -z $quick ]]; then
      variants+=("-x 0")
      # Atomics have one size (perftest refuses -a and -s for them).
      [[ $t != ib_atomic_* ]] && variants+=("-x 1 -a -n 20" "-x 1 -s 2" "-x 1 -s 1048576 -n 50")
      [[ $t == *_bw ]] && variants+=("-x 1 --report_gbits" "-x 1 -q 4")
    fi
    for v in "${variants[@]}"; do pair "$link" "$t -d uroce0 $v" 300; done
  done
}

# libfabric's verbs provider (fi_info, fi_pingpong), rdmacm-utils'
# synchronous endpoints and cmtime, over veth. libfabric finds a device
# through a kernel interface carrying its address, and fi_pingpong's TCP
# side channel goes to the address its rdma_cm connects to: uroce's
# addresses are added to the kernel interfaces for these (docs/rdma_cm.md).
fabric() {
  command -v fi_pingpong >/dev/null || { report FAIL veth "libfabric" "no fi_pingpong: tools/setup.sh installs libfabric-bin"; return; }
  ip -n "$nsa" addr add 10.96.0.11/24 dev svveth0
  ip -n "$nsb" addr add 10.96.0.12/24 dev svveth1
  if timeout 60 $(side veth server) fi_info -p verbs >"$tmp/one" 2>&1 && grep -q 'provider: verbs;ofi_rxm' "$tmp/one"; then
    report PASS veth "fi_info -p verbs" "$(grep -c 'provider: verbs;ofi_rxm' "$tmp/one") verbs;ofi_rxm entries"
  else
    report FAIL veth "fi_info -p verbs" "no verbs;ofi_rxm"
  fi
  local e p
  for e in "verbs msg" "verbs;ofi_rxm rdm"; do
    p=$((port++))
    timeout 120 $(side veth server) fi_pingpong -p "${e% *}" -e "${e#* }" -I 100 -B $p -P $p >"$tmp/srv" 2>&1 &
    local spid=$!
    sleep 2
    timeout 120 $(side veth client) fi_pingpong -p "${e% *}" -e "${e#* }" -I 100 -B $p -P $p 10.96.0.11 >"$tmp/cli" 2>&1
    local crc=$?
    wait "$spid"
    local src=$? f
    f=$(grep -E '^1m +100 +=100' "$tmp/cli" | tr -s ' ')
    if [[ $crc -eq 0 && $src -eq 0 && -n $f ]]; then
      report PASS veth "fi_pingpong -p \"${e% *}\" -e ${e#* }" "$f"
    else
      report FAIL veth "fi_pingpong -p \"${e% *}\" -e ${e#* }" "server rc=$src client rc=$crc"
      grep -v 'EAL:\|TELEMETRY' "$tmp/cli" | tail -3 | sed 's/^/    client: /'
    fi
  done
  local sc name
  for sc in "rdma_server -s 10.96.0.11:rdma_client" "rdma_xserver:rdma_xclient"; do
    p=$((port++))
    name=${sc%:*}
    name="${name%% *} / ${sc#*:}"
    timeout 60 $(side veth server) ${sc%:*} -p $p >"$tmp/srv" 2>&1 &
    local spid=$!
    sleep 2
    timeout 60 $(side veth client) ${sc#*:} -s 10.96.0.11 -p $p >"$tmp/cli" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    if [[ $crc -eq 0 && $src -eq 0 ]] && grep -q ': end 0' "$tmp/cli" && grep -q ': end 0' "$tmp/srv"; then
      report PASS veth "$name" "end 0 on both"
    else
      report FAIL veth "$name" "server rc=$src client rc=$crc"
    fi
  done
  # cmtime's server never exits: stopped once its client is done.
  p=$((port++))
  $(side veth server) cmtime -b 10.96.0.11 -p $p -c 100 >"$tmp/srv" 2>&1 &
  local spid=$!
  sleep 2
  timeout 120 $(side veth client) cmtime -s 10.96.0.11 -p $p -c 100 >"$tmp/cli" 2>&1
  local crc=$?
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  local f
  f=$(grep -E '^connect +:' "$tmp/cli" | awk '{print $NF " us/connect"}')
  if [[ $crc -eq 0 && -n $f ]] && ! grep -q failed "$tmp/cli"; then
    report PASS veth "cmtime -c 100" "$f"
  else
    report FAIL veth "cmtime -c 100" "client rc=$crc"
  fi
  ip -n "$nsa" addr del 10.96.0.11/24 dev svveth0
  ip -n "$nsb" addr del 10.96.0.12/24 dev svveth1
}

[[ $links == memif || $links == all ]] && matrix memif
if [[ $links == veth || $links == all ]]; then
  make_veth
  matrix veth
  fabric
fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
