#!/usr/bin/env bash
# The repository's own Linux Soft-RoCE peer: Debian 12 guests under qemu
# (TCG, no KVM needed) whose kernel runs rdma_rxe, with rdma-core,
# ibverbs-utils, rdmacm-utils, perftest and ucx-utils. The guests sit on a
# bridge in network namespace uroce-rxe; a veth end there, urdpdk0, has no
# address and is for a DPDK process (net_af_packet, framesz=8192) that owns
# 10.66.0.1. See docs/testing.md ("Against Soft-RoCE").
#
#   guest.sh build                  make the image (idempotent; minutes the first time)
#   guest.sh up [NAME]              boot guest NAME (default a), return when it answers
#   guest.sh run [-g NAME] [-t SECONDS] [-i FILE] 'CMD'
#                                   CMD in the guest (bash -c): its output, its exit
#                                   code (124 after -t SECONDS); -i feeds FILE to stdin
#   guest.sh gid [NAME]             the GID index of rxe0's RoCEv2 IPv4 GID
#   guest.sh env [NAME]             the layout, key=value per line, for scripts
#   guest.sh status                 the guests that are up
#   guest.sh down [NAME]            stop NAME, or every guest and the namespace
#   guest.sh net                    only the namespace, bridge and veth pair
#   guest.sh smoke                  build if needed, boot two guests, ibv_devinfo and
#                                   ibv_rc_pingpong between them, power off; exit 0 = pass
#
# NAME is a letter: guest a is 10.66.0.2, b 10.66.0.3, ..., z 10.66.0.27. The
# host end of the bridge is 10.66.0.254, for TCP exchanges from kernel sockets.
# Needs root. Large files go to $UROCE_GUEST_DIR (default /var/tmp/uroce-guest).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=${UROCE_GUEST_DIR:-/var/tmp/uroce-guest}
mirror=${UROCE_GUEST_MIRROR:-http://deb.debian.org/debian}
netns=uroce-rxe
bridge=urbr0
subnet=10.66.0
bridge_ip=$subnet.254
dpdk_ip=$subnet.1
dpdk_iface=urdpdk0
bridge_port=urveth0
mtu=9000
mem_mb=1024
agent_port=7000
rootfs=$work/rootfs
image=$work/root.ext4
rundir=$work/run
hostpy=/usr/bin/python3

guest_packages=kmod,iproute2,procps,iputils-ping,ethtool,python3,netbase,initramfs-tools,rdma-core,ibverbs-providers,ibverbs-utils,rdmacm-utils,infiniband-diags,perftest,ucx-utils,tcpdump
host_packages=(qemu-system-x86 seabios debootstrap debian-archive-keyring e2fsprogs iproute2 python3)

note() { echo "rxe-guest: $*" >&2; }
fail() { note "$*"; exit 1; }
[[ $(id -u) == 0 ]] || fail "needs root"
in_ns() { ip netns exec "$netns" "$@"; }

# ---- build ----------------------------------------------------------------

need_host_packages() {
  local missing=() p
  for p in "${host_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return
  note "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

in_root() { chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"; }

unmount_root() {
  local m
  for m in dev/pts dev sys proc; do
    if mountpoint -q "$rootfs/$m"; then umount -l "$rootfs/$m"; fi
  done
}

# Stage 1: debootstrap (minbase) with the user-space packages.
bootstrap() {
  [[ -e $work/.bootstrapped ]] && return
  local tmp=$work/rootfs.partial
  rm -rf "$tmp" "$rootfs" "$work/.kernel-installed"
  note "debootstrap bookworm from $mirror (a few minutes)"
  debootstrap --variant=minbase --include="$guest_packages" bookworm "$tmp" "$mirror"
  mv "$tmp" "$rootfs"
  touch "$work/.bootstrapped"
}

# Stage 2: the kernel, with an initramfs of just what finds the root disk
# (virtio block, ext4); everything else loads from the root filesystem.
install_kernel() {
  [[ -e $work/.kernel-installed ]] && return
  note "installing linux-image-amd64 in the guest root"
  cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF
  # The mirror may serve a snapshot whose Release files are past their dates.
  echo 'Acquire::Check-Valid-Until "false";' >"$rootfs/etc/apt/apt.conf.d/90uroce-guest"
  # No daemon may start inside the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
  chmod +x "$rootfs/usr/sbin/policy-rc.d"
  printf 'MODULES=list\nCOMPRESS=gzip\n' >"$rootfs/etc/initramfs-tools/conf.d/uroce-guest.conf"
  printf '%s\n' virtio_pci virtio_blk ext4 crc32c_generic >"$rootfs/etc/initramfs-tools/modules"
  trap unmount_root EXIT
  mount -t proc proc "$rootfs/proc"
  mount -t sysfs sys "$rootfs/sys"
  mount --bind /dev "$rootfs/dev"
  in_root apt-get update -q
  in_root apt-get install -y -q --no-install-recommends linux-image-amd64
  in_root apt-get clean
  unmount_root
  trap - EXIT
  touch "$work/.kernel-installed"
}

# What the image is made of besides the root: a change to any of it remakes it.
image_inputs() {
  cat "$here/pid1.sh" "$here/rgctl.py" "$work/.kernel-installed"
  declare -f make_image
}

make_image() {
  install -m 755 "$here/pid1.sh" "$rootfs/sbin/rg-init"
  install -m 755 "$here/rgctl.py" "$rootfs/usr/local/sbin/rgctl.py"
  : >"$rootfs/etc/fstab"
  rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* \
    "$rootfs"/var/lib/apt/lists/*_Packages "$rootfs"/var/cache/apt/*.bin
  local kernel
  kernel=$(find "$rootfs/boot" -name 'vmlinuz-*' | sort -V | tail -1)
  [[ -n $kernel ]] || fail "no kernel in $rootfs/boot"
  cp "$kernel" "$work/vmlinuz"
  cp "$rootfs/boot/initrd.img-${kernel##*/vmlinuz-}" "$work/initrd.img"
  # mkfs.ext4 -d fills the file system from a directory: no loop mount.
  local mb
  mb=$(du -sm "$rootfs" | cut -f1)
  rm -f "$image.new"
  mkfs.ext4 -q -F -L uroce-guest -d "$rootfs" "$image.new" "$((mb * 5 / 4 + 200))M"
  mv "$image.new" "$image"
  note "image $image ($((mb * 5 / 4 + 200)) MiB), kernel ${kernel##*/}"
}

cmd_build() {
  local t0=$SECONDS sum
  mkdir -p "$work"
  need_host_packages
  bootstrap
  install_kernel
  sum=$(image_inputs | sha256sum | cut -d' ' -f1)
  if [[ -f $image && $(cat "$work/.image-sum" 2>/dev/null) == "$sum" ]]; then
    note "image up to date"
  else
    make_image
    echo "$sum" >"$work/.image-sum"
  fi
  note "build took $((SECONDS - t0)) s"
}

# ---- network --------------------------------------------------------------

cmd_net() {
  [[ -e /run/netns/$netns ]] || ip netns add "$netns"
  ip -n "$netns" link set lo up
  ip -n "$netns" link show "$bridge" >/dev/null 2>&1 ||
    ip -n "$netns" link add "$bridge" type bridge stp_state 0 forward_delay 0
  ip -n "$netns" link set "$bridge" mtu "$mtu" up
  ip -n "$netns" addr replace "$bridge_ip/24" dev "$bridge"
  ip -n "$netns" link show "$bridge_port" >/dev/null 2>&1 ||
    ip -n "$netns" link add "$bridge_port" mtu "$mtu" type veth peer name "$dpdk_iface" mtu "$mtu"
  ip -n "$netns" link set "$bridge_port" master "$bridge" up
  ip -n "$netns" link set "$dpdk_iface" up
  # Our ports send no IPv6 router or neighbour chatter of their own.
  in_ns sysctl -qw "net.ipv6.conf.$bridge.disable_ipv6=1" "net.ipv6.conf.$bridge_port.disable_ipv6=1" \
    "net.ipv6.conf.$dpdk_iface.disable_ipv6=1"
}

# ---- guests ---------------------------------------------------------------

# pick NAME: sets the guest's number, addresses and files.
pick() {
  [[ $1 =~ ^[a-z]$ ]] || fail "a guest's name is one letter a..z, not '$1'"
  name=$1
  num=$(($(printf '%d' "'$1") - 95))
  guest_ip=$subnet.$num
  mac=$(printf '52:54:00:66:00:%02x' "$num")
  ctlmac=$(printf '52:54:00:66:01:%02x' "$num")
  tap=urtap$num
  port=$((19100 + num))
  pidfile=$rundir/$name.pid
  console=$rundir/$name.console
}

# The qemu pid of the picked guest, if it runs.
qemu_pid() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  grep -qa "uroce-guest-$name" "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

start() {
  pick "$1"
  [[ -f $image ]] || fail "no image: run '$0 build' first"
  qemu_pid >/dev/null && return
  mkdir -p "$rundir"
  cmd_net
  ip -n "$netns" link show "$tap" >/dev/null 2>&1 || ip -n "$netns" tuntap add "$tap" mode tap vnet_hdr
  ip -n "$netns" link set "$tap" mtu "$mtu" master "$bridge" up
  in_ns sysctl -qw "net.ipv6.conf.$tap.disable_ipv6=1"
  rm -f "$console" "$pidfile"
  # tsc=reliable: no clocksource watchdog, whose HPET reads are slow under
  # TCG and which, on a loaded host, may take the TSC away from the guest.
  local cmdline="console=ttyS0 root=/dev/vda rw init=/sbin/rg-init panic=-1 quiet mitigations=off nokaslr tsc=reliable"
  cmdline+=" rg.ip=$guest_ip/24 rg.mac=$mac rg.ctlmac=$ctlmac rg.mtu=$mtu rg.host=guest-$name rg.port=$agent_port"
  # snapshot=on: every guest writes to its own throw-away overlay, so all
  # of them boot from the one image.
  in_ns qemu-system-x86_64 -name "uroce-guest-$name" \
    -machine pc,accel=tcg -cpu max -smp 1 -m "$mem_mb" \
    -nodefaults -no-user-config -display none -no-reboot \
    -kernel "$work/vmlinuz" -initrd "$work/initrd.img" -append "$cmdline" \
    -drive "file=$image,format=raw,if=virtio,snapshot=on,cache=unsafe" \
    -netdev "tap,id=roce,ifname=$tap,script=no,downscript=no" \
    -device "virtio-net-pci,netdev=roce,mac=$mac,romfile=" \
    -netdev "user,id=ctl,restrict=on,hostfwd=tcp:127.0.0.1:$port-10.0.2.15:$agent_port" \
    -device "virtio-net-pci,netdev=ctl,mac=$ctlmac,romfile=" \
    -device virtio-rng-pci \
    -serial "file:$console" -pidfile "$pidfile" -daemonize
}

# Waits until the picked guest's channel answers: its init says rg-ready,
# then the channel must answer within a minute.
await() {
  local t0=$SECONDS limit=${UROCE_GUEST_BOOT_S:-600}
  until grep -q '^rg-ready' "$console" 2>/dev/null; do
    qemu_pid >/dev/null || { tail -15 "$console" >&2; fail "guest $name died while booting"; }
    ((SECONDS - t0 < limit)) || { tail -15 "$console" >&2; fail "guest $name not ready after $limit s"; }
    sleep 1
  done
  in_ns "$hostpy" "$here/rgctl.py" call --port "$port" --wait 60 true >/dev/null ||
    { tail -15 "$console" >&2; fail "guest $name booted, but its channel does not answer"; }
  note "guest $name ($guest_ip) up in $((SECONDS - t0)) s"
}

stop() {
  pick "$1"
  local pid
  if pid=$(qemu_pid); then
    kill "$pid"
    for _ in {1..50}; do [[ -e /proc/$pid ]] || break; sleep 0.1; done
    [[ -e /proc/$pid ]] && kill -9 "$pid"
    note "guest $name stopped"
  fi
  rm -f "$pidfile"
  ip -n "$netns" link del "$tap" 2>/dev/null || true
}

cmd_up() {
  start "${1:-a}"
  await
}

cmd_run() {
  local g=a limit='' input='' opt OPTIND=1
  while getopts g:t:i: opt; do
    case $opt in
      g) g=$OPTARG ;; t) limit=$OPTARG ;; i) input=$OPTARG ;;
      *) fail "usage: $0 run [-g NAME] [-t SECONDS] [-i FILE] 'CMD'" ;;
    esac
  done
  shift $((OPTIND - 1))
  (($# > 0)) || fail "usage: $0 run [-g NAME] [-t SECONDS] [-i FILE] 'CMD'"
  pick "$g"
  qemu_pid >/dev/null || fail "guest $g is not up ($0 up $g)"
  local args=(call --port "$port")
  [[ -n $limit ]] && args+=(--limit "$limit")
  [[ -n $input ]] && args+=(--input "$(realpath "$input")")
  # exec all the way down: a signal to this process (timeout, ^C) reaches
  # the client, whose closed socket stops the command in the guest.
  exec ip netns exec "$netns" "$hostpy" "$here/rgctl.py" "${args[@]}" "$*"
}

cmd_gid() {
  pick "${1:-a}"
  # rdma-core lists a RoCEv2 port's IPv4 GID as ::ffff:a.b.c.d. (The
  # script is the guest's to expand.)
  # shellcheck disable=SC2016
  in_ns "$hostpy" "$here/rgctl.py" call --port "$port" --limit 30 '
    cd /sys/class/infiniband/rxe0/ports/1
    for t in gid_attrs/types/*; do
      i=${t##*/}
      [[ $(<$t) == "RoCE v2" && $(<gids/$i) == 0000:0000:0000:0000:0000:ffff:* ]] && { echo $i; exit 0; }
    done 2>/dev/null
    exit 1'
}

cmd_env() {
  pick "${1:-a}"
  cat <<EOF
netns=$netns
bridge=$bridge
bridge_ip=$bridge_ip
dpdk_iface=$dpdk_iface
dpdk_ip=$dpdk_ip
guest_ip=$guest_ip
EOF
}

cmd_status() {
  local f any=''
  for f in "$rundir"/*.pid; do
    [[ -e $f ]] || continue
    pick "$(basename "$f" .pid)"
    qemu_pid >/dev/null || continue
    echo "guest $name: up, $guest_ip, qemu pid $(qemu_pid), console $console"
    any=1
  done
  [[ -n $any ]] || echo "no guest is up"
}

cmd_down() {
  if (($# > 0)); then
    stop "$1"
    return
  fi
  local f
  for f in "$rundir"/*.pid; do
    [[ -e $f ]] && stop "$(basename "$f" .pid)"
  done
  if [[ -e /run/netns/$netns ]]; then
    ip netns del "$netns"
    note "namespace $netns removed"
  fi
}

# Powers the picked guest off from inside and waits for qemu to end.
power_off() {
  local pid
  pid=$(qemu_pid) || return 0
  in_ns "$hostpy" "$here/rgctl.py" call --port "$port" --limit 5 \
    '(sleep 0.3; sync; echo o >/proc/sysrq-trigger) >/dev/null 2>&1 &' || true
  for _ in {1..100}; do [[ -e /proc/$pid ]] || break; sleep 0.2; done
  if [[ -e /proc/$pid ]]; then
    note "guest $name did not power off; stopping qemu"
    stop "$name"
    return 1
  fi
  rm -f "$pidfile"
  ip -n "$netns" link del "$tap" 2>/dev/null || true
}

# Two fresh guests (y serves, z is the client), so the pingpong crosses the
# bridge as traffic from a DPDK port would.
cmd_smoke() {
  local ok=1 t0=$SECONDS gid log=$rundir/smoke
  [[ -f $image ]] || cmd_build
  trap 'stop y; stop z' EXIT
  start y
  start z
  pick y; await
  pick z; await
  note "smoke: both guests up after $((SECONDS - t0)) s"
  mkdir -p "$log"
  pick y
  in_ns "$hostpy" "$here/rgctl.py" call --port "$port" --limit 60 'ibv_devinfo -d rxe0' >"$log/devinfo" 2>&1 || ok=0
  sed 's/^/  [y] /' "$log/devinfo"
  grep -q 'PORT_ACTIVE' "$log/devinfo" || { note "smoke: rxe0's port is not active"; ok=0; }
  gid=$(cmd_gid y) || { note "smoke: no RoCEv2 IPv4 GID on rxe0"; ok=0; gid=1; }
  in_ns "$hostpy" "$here/rgctl.py" call --port "$port" --limit 30 "ping -c 1 -W 5 $bridge_ip" >/dev/null ||
    { note "smoke: guest y does not reach the bridge's $bridge_ip"; ok=0; }
  local server_ip=$guest_ip server_port=$port
  in_ns "$hostpy" "$here/rgctl.py" call --port "$server_port" --limit 120 \
    "ibv_rc_pingpong -d rxe0 -g $gid -n 100 -c" >"$log/server" 2>&1 &
  local server=$!
  sleep 2
  pick z
  in_ns "$hostpy" "$here/rgctl.py" call --port "$port" --limit 120 \
    "ibv_rc_pingpong -d rxe0 -g $gid -n 100 -c $server_ip" >"$log/client" 2>&1 || ok=0
  wait "$server" || ok=0
  sed 's/^/  [y server] /' "$log/server"
  sed 's/^/  [z client] /' "$log/client"
  grep -q '100 iters in' "$log/client" || ok=0
  pick y; power_off || ok=0
  pick z; power_off || ok=0
  trap - EXIT
  note "smoke took $((SECONDS - t0)) s"
  if ((ok)); then
    echo "smoke: 1 passed, 0 failed"
  else
    echo "smoke: 0 passed, 1 failed"
  fi
  ((ok))
}

usage() { sed -n '2,/^set -e/{/^#/s/^# \{0,1\}//p}' "$0"; }

main() {
  local cmd=${1:-help}
  (($# > 0)) && shift
  case $cmd in
    build) cmd_build ;;
    up) cmd_up "$@" ;;
    run) cmd_run "$@" ;;
    gid) cmd_gid "$@" ;;
    env) cmd_env "$@" ;;
    status) cmd_status ;;
    down) cmd_down "$@" ;;
    net) cmd_net ;;
    smoke) cmd_smoke ;;
    help | -h | --help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}
main "$@"
