#!/usr/bin/env bash
# Live interop with Linux Soft-RoCE: rdma-core's stock ibv_rc_pingpong in a
# qemu guest (tools/rxe-guest/guest.sh, or RXE_PEER: see docs/testing.md)
# against uroce-pingpong on a DPDK af_packet port, both directions, sizes 1, 4096 and 65536, MTUs 1024 and
# 4096 over IPv4 (GID index 1), and 4096 B at MTU 1024 over IPv6 link-local
# (GID index 0), buffers validated (-c). Prints PASS/FAIL per case and
# writes JSON.
# Needs root. Usage: tools/interop-rxe.sh [OUT.json]   (builds the guest
# image if missing: a few minutes the first time).
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
build=${UROCE_BUILD_DIR:-build}
out=${1:-$build/interop-rxe.json}
iters=${ITERS:-200}
. tools/rxe-guest/attach.sh
rxe_attach interop-rxe || exit $?

eal=(--no-huge --no-shconf --no-pci -m 512 -l 1 "--log-level=lib.*:error"
     "--vdev=net_af_packet0,iface=$rxe_iface,blocksz=16384,framesz=8192,framecnt=512")
pp="$build/apps/pingpong/uroce-pingpong"
results=()
pass=0
fail=0
cases=()
for size in 1 4096 65536; do for mtu in 1024 4096; do cases+=("1 $size $mtu"); done; done
cases+=("0 4096 1024")
for dir in uroce-server uroce-client; do
  for c in "${cases[@]}"; do
    read -r gid size mtu <<<"$c"
    {
      log=$(mktemp)
      glog=$(mktemp)
      if [[ $dir == uroce-server ]]; then
        ip netns exec "$rxe_ns" timeout 90 "$pp" "${eal[@]}" -- --ip "$rxe_ours/24" -g "$gid" -s "$size" -m "$mtu" -n "$iters" -c >"$log" 2>&1 &
        upid=$!
        sleep 2
        timeout 90 "$peer" run -t 80 "ibv_rc_pingpong -d rxe0 -g $gid -s $size -m $mtu -n $iters -c $rxe_host" >"$glog" 2>&1
        grc=$?
        wait $upid
        urc=$?
      else
        timeout 90 "$peer" run -t 80 "ibv_rc_pingpong -d rxe0 -g $gid -s $size -m $mtu -n $iters -c" >"$glog" 2>&1 &
        gpid=$!
        sleep 3
        ip netns exec "$rxe_ns" timeout 90 "$pp" "${eal[@]}" -- --ip "$rxe_ours/24" -g "$gid" -s "$size" -m "$mtu" -n "$iters" -c "$rxe_guest" >"$log" 2>&1
        urc=$?
        wait $gpid
        grc=$?
      fi
      ok=PASS
      if [[ $urc -ne 0 || $grc -ne 0 ]] || grep -q "invalid data" "$log" "$glog" || ! grep -q "iters in" "$log" || ! grep -q "iters in" "$glog"; then
        ok=FAIL
      fi
      usec=$(grep -o "[0-9.]* usec/iter" "$log" | head -1 | cut -d' ' -f1)
      printf '%-13s -g %s -s %-6s -m %-5s %s  (uroce rc %s, rxe rc %s, %s usec/iter)\n' "$dir" "$gid" "$size" "$mtu" "$ok" "$urc" "$grc" "${usec:-?}"
      [[ $ok == PASS ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); tail -n 5 "$log" "$glog" | sed 's/^/    /'; }
      results+=("{\"direction\":\"$dir\",\"gid_index\":$gid,\"size\":$size,\"mtu\":$mtu,\"result\":\"$ok\",\"usec_per_iter\":${usec:-null}}")
      rm -f "$log" "$glog"
    }
  done
done
(IFS=,; echo "{\"test\":\"interop-rxe\",\"iters\":$iters,\"cases\":[${results[*]}]}") >"$out"
echo "$pass passed, $fail failed (JSON: $out)"
[[ $fail -eq 0 ]]
