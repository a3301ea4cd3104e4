#!/usr/bin/env bash
# UCX over UD between uroce and Linux Soft-RoCE (a qemu guest,
# tools/rxe-guest/guest.sh or RXE_PEER: see docs/testing.md), both directions: Debian's ucx_perftest at the UCP
# level with UCX_TLS=ud_verbs, our side under uroce-run on a DPDK af_packet
# port. Prints PASS/FAIL per case with UCX's "Final" line, ends
# "N passed, M failed".
#
# tools/rxe-guest's image has Debian's ucx-utils. A guest without UCX has no
# route to Debian's mirror either, so then this script copies Debian's libucx0
# and ucx-utils (downloaded on this machine) and the two libraries they need
# beyond rdma-core (libnuma, libgomp) into the guest's /opt/ucx. Both sides use GID index 0 (IPv6 link-local): UCX 1.13's UD drops
# every datagram whose completion does not say, in sl, that its GRH holds an
# IPv4 header (mlx5 does, uroce does; Soft-RoCE does not), so on IPv4 GIDs
# the guest's UCX would drop ours. Needs root. Usage: tools/interop-rxe-ucx.sh
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
build=${UROCE_BUILD_DIR:-build}
. tools/rxe-guest/attach.sh
rxe_attach interop-rxe-ucx || exit $?
if ! command -v ucx_perftest >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ucx-utils >/dev/null ||
    { echo "interop-rxe-ucx: cannot install ucx-utils" >&2; exit 1; }
fi

tmp=$(mktemp -d /tmp/uroce-ucx-rxe.XXXXXX)
node=/dev/infiniband/uuroce0
made_node=
cleanup() {
  [[ -n $made_node ]] && { rm -f "$node"; rmdir /dev/infiniband 2>/dev/null; }
  rm -rf "$tmp"
}
trap cleanup EXIT
if [[ ! -c $node ]]; then
  mkdir -p /dev/infiniband && mknod "$node" c 1 3 || { echo "interop-rxe-ucx: cannot make $node" >&2; exit 1; }
  made_node=1
fi

# UCX for the guest, unless it has its own.
guest_env="export UCX_TLS=ud_verbs UCX_NET_DEVICES=rxe0:1 UCX_IB_GID_INDEX=0;"
guest_perftest=/usr/bin/ucx_perftest
if ! "$peer" run "test -x $guest_perftest" >/dev/null 2>&1; then
  (cd "$tmp" && apt-get download -q libucx0 ucx-utils >/dev/null 2>&1) ||
    cp /var/cache/apt/archives/libucx0_*.deb /var/cache/apt/archives/ucx-utils_*.deb "$tmp"/ 2>/dev/null
  ls "$tmp"/libucx0_*.deb "$tmp"/ucx-utils_*.deb >/dev/null 2>&1 || { echo "interop-rxe-ucx: no UCX packages to copy"; exit 1; }
  mkdir -p "$tmp/root/extra"
  for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$tmp/root"; done
  cp -L /usr/lib/x86_64-linux-gnu/libnuma.so.1 /usr/lib/x86_64-linux-gnu/libgomp.so.1 "$tmp/root/extra/"
  tar czf "$tmp/ucx.tgz" -C "$tmp/root" . && base64 -w0 "$tmp/ucx.tgz" >"$tmp/ucx.b64"
  "$peer" run -t 120 -i "$tmp/ucx.b64" "rm -rf /opt/ucx && mkdir -p /opt/ucx && base64 -d >/tmp/ucx.tgz && tar xzf /tmp/ucx.tgz -C /opt/ucx" \
    >/dev/null 2>&1 || { echo "interop-rxe-ucx: cannot copy UCX into the guest"; exit 1; }
  guest_env="export LD_LIBRARY_PATH=/opt/ucx/usr/lib/x86_64-linux-gnu:/opt/ucx/extra \
  UCX_MODULE_DIR=/opt/ucx/usr/lib/x86_64-linux-gnu/ucx UCX_TLS=ud_verbs UCX_NET_DEVICES=rxe0:1 UCX_IB_GID_INDEX=0;"
  guest_perftest=/opt/ucx/usr/bin/ucx_perftest
fi

ours=(ip netns exec "$rxe_ns" env UCX_TLS=ud_verbs UCX_NET_DEVICES=uroce0:1 UCX_IB_GID_INDEX=0 "$build/apps/run/uroce-run"
      --no-huge --no-shconf --no-pci -m 512 -l 1 "--log-level=lib.*:error" --file-prefix=uroce-ucx-rxe
      "--vdev=net_af_packet0,iface=$rxe_iface,blocksz=16384,framesz=8192,framecnt=512" -- --ip "$rxe_ours/24")
passed=0
failed=0
report() {
  local dir=$1 t=$2 rc1=$3 rc2=$4 log=$5 final
  final=$(grep -E '^Final' "$log" | tr -s ' ')
  if [[ $rc1 -eq 0 && $rc2 -eq 0 && -n $final ]]; then
    printf 'PASS  %-13s ucx_perftest %-26s %s\n' "$dir" "$t" "$final"
    passed=$((passed + 1))
  else
    printf 'FAIL  %-13s ucx_perftest %-26s rc %s/%s\n' "$dir" "$t" "$rc1" "$rc2"
    grep -hE 'ERROR|Fatal' "$tmp"/*.log | head -3 | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}
for t in "-t tag_lat -s 8 -n 1000" "-t tag_bw -s 4096 -n 2000"; do
  # Ours serves (its TCP exchange on the kernel end of the bridge).
  timeout 90 "${ours[@]}" ucx_perftest >"$tmp/ours.log" 2>&1 &
  sleep 4
  timeout 80 "$peer" run -t 75 "$guest_env $guest_perftest $rxe_host $t" >"$tmp/guest.log" 2>&1
  grc=$?
  wait $!
  report uroce-server "$t" $? $grc "$tmp/guest.log"
  # The guest serves.
  timeout 90 "$peer" run -t 85 "$guest_env $guest_perftest" >"$tmp/guest.log" 2>&1 &
  sleep 6
  timeout 80 "${ours[@]}" ucx_perftest "$rxe_guest" $t >"$tmp/ours.log" 2>&1
  urc=$?
  wait $!
  report uroce-client "$t" $urc $? "$tmp/ours.log"
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
