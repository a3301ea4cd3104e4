#!/bin/bash
# Selective repeat against go-back-N on a real port: uroce-perf in two
# processes over a veth pair between two network namespaces (af_packet, MTU
# 4096, one core each), each end's port dropping a share of the RoCE frames
# it receives (UROCE_RX_LOSS; the kernel's netem would do on a veth where
# sch_netem exists, but DPDK's af_packet sends past the qdisc). For each
# loss rate, RUNS rounds, each round one selective-repeat run and one
# go-back-N run back to back; every run verified. Prints one line per run
# and, per loss rate and mode, the median rate and resends.
#
# usage: tools/sr-veth-loss.sh [BUILD_DIR] [RUNS] [LOSSES] [PERF_ARGS]
#   defaults: build 3 "0 0.01 0.03" "write -s 65536 -n 1000 -m 4096"
# Needs root (namespaces). Two cores shared with anything else swing a run's
# rate 2-4x: compare the medians, and rerun.
set -euo pipefail

BUILD=${1:-build}
RUNS=${2:-3}
LOSSES=${3:-"0 0.01 0.03"}
PERF_ARGS=${4:-"write -s 65536 -n 1000 -m 4096"}
PERF=$(realpath "$BUILD/apps/perf/uroce-perf")
[ -x "$PERF" ] || { echo "sr-veth-loss: no $PERF (build first)" >&2; exit 2; }

A=uroce-srl-a-$$
B=uroce-srl-b-$$
OUT=$(mktemp -d /tmp/uroce-srl-XXXXXX)
cleanup() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  rm -rf "$OUT" /var/run/dpdk/srls$$ /var/run/dpdk/srlc$$
}
trap cleanup EXIT
ip netns add "$A"
ip netns add "$B"
ip -n "$A" link add srl0 mtu 9000 type veth peer name srl1 mtu 9000 netns "$B"
ip -n "$A" addr add 10.99.1.1/24 dev srl0
ip -n "$B" addr add 10.99.1.2/24 dev srl1
for n in "$A srl0" "$B srl1"; do
  set -- $n
  ip -n "$1" link set "$2" up
  ip -n "$1" link set lo up
done

EAL="--no-huge --no-shconf --no-pci -m 512 --log-level=lib.*:error"
VDEV="blocksz=16384,framesz=8192,framecnt=512"
# One pair; prints "Gb/s resent verified".
run_pair() {
  local loss=$1 transport=$2 seed=$3 port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])')
  local env_loss=()
  [ "$loss" != 0 ] && env_loss=("UROCE_RX_LOSS=$loss,$seed")
  ip netns exec "$A" env "${env_loss[@]}" "$PERF" $EAL -l 0 --file-prefix=srls$$ \
    --vdev=net_af_packet0,iface=srl0,$VDEV -- --ip 10.99.1.11/24 $PERF_ARGS --verify $transport -p "$port" \
    >"$OUT/server" 2>&1 &
  local server=$!
  for _ in $(seq 600); do
    ip netns exec "$A" ss -ltn | grep -q ":$port " && break
    sleep 0.05
  done
  [ "$loss" != 0 ] && env_loss=("UROCE_RX_LOSS=$loss,$((seed + 1))")
  ip netns exec "$B" env "${env_loss[@]}" "$PERF" $EAL -l 1 --file-prefix=srlc$$ \
    --vdev=net_af_packet0,iface=srl1,$VDEV -- --ip 10.99.1.12/24 $PERF_ARGS --verify $transport -p "$port" \
    10.99.1.1 >"$OUT/client" 2>&1 || true
  wait "$server" || true
  local gbps resent verified
  gbps=$(awk '/#bytes/ {getline; print $3; exit}' "$OUT/client")
  resent=$(sed -n 's/^retransmitted \([0-9]*\) packets.*/\1/p' "$OUT/client")
  verified=$(grep -q "verification: PASSED (both sides)" "$OUT/client" && echo PASSED || echo FAILED)
  echo "${gbps:-?} ${resent:-?} $verified"
  if [ "$verified" != PASSED ]; then
    sed 's/^/  client: /' "$OUT/client" >&2
    sed 's/^/  server: /' "$OUT/server" >&2
  fi
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

echo "uroce-perf $PERF_ARGS over veth (af_packet), $RUNS rounds per loss rate; loss per frame at each receiver"
printf '%-6s %-5s %-3s %10s %10s %s\n' loss mode run "Gb/s" resent verified
declare -A rates resends
for loss in $LOSSES; do
  for run in $(seq "$RUNS"); do
    for mode in sr gbn; do
      transport=""
      [ $mode = sr ] && transport="--sr"
      read -r gbps resent verified < <(run_pair "$loss" "$transport" "$((run * 1000 + 7))")
      printf '%-6s %-5s %-3s %10s %10s %s\n' "$loss" "$mode" "$run" "$gbps" "$resent" "$verified"
      rates[$loss,$mode]+="$gbps "
      resends[$loss,$mode]+="$resent "
    done
  done
done
echo
echo "medians:"
printf '%-6s %12s %12s %14s %14s\n' loss "SR Gb/s" "GBN Gb/s" "SR resent" "GBN resent"
for loss in $LOSSES; do
  printf '%-6s %12s %12s %14s %14s\n' "$loss" \
    "$(tr ' ' '\n' <<<"${rates[$loss,sr]}" | grep . | median)" "$(tr ' ' '\n' <<<"${rates[$loss,gbn]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${resends[$loss,sr]}" | grep . | median)" "$(tr ' ' '\n' <<<"${resends[$loss,gbn]}" | grep . | median)"
done
