#!/usr/bin/env bash
# Differential probe of the RC responder's packet-length rules (IBTA C9-92,
# 9.7.5.2): the same hand-made SEND packets (First/Middle of other than the
# path MTU, Only/Last over it, an empty Last, and legal ones as controls) go
# to Linux Soft-RoCE (ibv_rc_pingpong server in the rxe-peer guest) and to
# uroce (uroce-pingpong server on a DPDK af_packet port), one fresh server
# per case. Each case's answers (opcode, PSN, AETH syndrome, MSN) are judged
# against the rule: MATCH (uroce follows it and answers as Soft-RoCE did),
# SPEC (uroce follows it where this Soft-RoCE does not: the guest's kernel
# 6.1 rxe has no length checks; later kernels added them), DIFF or FAIL
# (look). Exit 0 unless a case is DIFF, FAIL or ERROR. Writes JSON. Needs root and the guest
# (a Soft-RoCE peer under qemu, tools/rxe-guest/guest.sh or RXE_PEER: see
# docs/testing.md; built if missing, booted if down).
# Usage: tools/probe-rxe.sh [OUT.json]
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
build=${UROCE_BUILD_DIR:-build}
out=${1:-$build/probe-rxe.json}
. tools/rxe-guest/attach.sh
rxe_attach probe-rxe || exit $?

mtu=1024
eal=(--no-huge --no-shconf --no-pci -m 512 -l 1 "--log-level=lib.*:error"
     "--vdev=net_af_packet0,iface=$rxe_iface,blocksz=16384,framesz=8192,framecnt=512")
pp="$build/apps/pingpong/uroce-pingpong"
probe=(ip netns exec "$rxe_ns" python3 tools/probe_rc.py --iface "$rxe_bridge" --mtu "$mtu")
cases=(only_within_mtu only_over_mtu first_short first_over middle_short last_within_mtu last_empty last_over_mtu)
match=0
spec=0
diff=0
rows=()
for c in "${cases[@]}"; do
  # Soft-RoCE.
  timeout 60 "$peer" run -t 50 "ibv_rc_pingpong -d rxe0 -g 1 -s 4096 -m $mtu -n 1" >/dev/null 2>&1 &
  gpid=$!
  sleep 3
  rxe=$("${probe[@]}" --case "$c" --tcp "$rxe_guest" --ip "$rxe_guest" 2>&1 | tail -1)
  "$peer" run 'pkill ibv_rc_pingpong' >/dev/null 2>&1
  wait $gpid 2>/dev/null
  # uroce.
  ip netns exec "$rxe_ns" timeout 30 "$pp" "${eal[@]}" -- --ip "$rxe_ours/24" -g 1 -s 4096 -m "$mtu" -n 1 >/tmp/uroce-probe-pp.log 2>&1 &
  upid=$!
  sleep 2
  ours=$("${probe[@]}" --case "$c" --tcp 127.0.0.1 --ip "$rxe_ours" 2>&1 | tail -1)
  kill "$upid" 2>/dev/null
  wait "$upid" 2>/dev/null
  verdict=$(python3 - "$c" "$rxe" "$ours" <<'PY'
import json, sys
# What IBTA asks (C9-92, 9.7.5.2): a First or Middle packet carries exactly
# the path MTU, an Only or Last packet 1 byte .. the path MTU (Only may be
# empty); otherwise NAK Invalid Request (syndrome 0x61) at that packet's PSN.
# The controls are ACKed (syndrome 0x1f here: no credit count).
nak_at = {"only_over_mtu": 0, "first_short": 0, "first_over": 0, "middle_short": 1, "last_empty": 1, "last_over_mtu": 1}
case = sys.argv[1]
try:
    rxe, ours = json.loads(sys.argv[2])["answers"], json.loads(sys.argv[3])["answers"]
except (ValueError, IndexError):
    print("ERROR"); sys.exit()
def follows_ibta(answers):
    if case in nak_at:
        return any(a["opcode"] == 0x11 and a.get("syndrome") == 0x61 and a["psn_offset"] == nak_at[case] for a in answers) \
            and not any(a["opcode"] == 0x11 and a.get("syndrome", 0) & 0x60 == 0 and a["psn_offset"] >= nak_at[case] for a in answers)
    return bool(answers) and all(a["opcode"] == 0x11 and a.get("syndrome", 0) & 0x60 == 0 for a in answers)
if not follows_ibta(ours):
    print("FAIL")  # uroce breaks the rule
elif rxe == ours:
    print("MATCH")
elif follows_ibta(rxe):
    print("DIFF")  # both follow the rule, differently: look
else:
    print("SPEC")  # uroce follows IBTA where this Soft-RoCE does not
PY
)
  printf '%-16s %-5s  rxe %s\n%-16s %-5s  ours %s\n' "$c" "$verdict" "$rxe" "" "" "$ours"
  case $verdict in
    MATCH) match=$((match + 1)) ;;
    SPEC) spec=$((spec + 1)) ;;
    *) diff=$((diff + 1)) ;;
  esac
  rows+=("{\"case\":\"$c\",\"verdict\":\"$verdict\",\"rxe\":${rxe:-null},\"uroce\":${ours:-null}}")
done
(IFS=,; echo "{\"test\":\"probe-rxe\",\"mtu\":$mtu,\"cases\":[${rows[*]}]}") >"$out" 2>/dev/null
echo "$match match Soft-RoCE, $spec follow IBTA where Soft-RoCE does not, $diff fail (JSON: $out)"
[[ $diff -eq 0 ]]
