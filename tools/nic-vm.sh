#!/usr/bin/env bash
# uroce on PCI NICs that qemu emulates (issue 28): Debian 12 guests under qemu
# TCG with DPDK 22.11 and uroce's build inside, the RoCE NIC a virtio-net-pci,
# e1000e or vmxnet3 that DPDK drives with its real PMD, with or without an
# emulated IOMMU, next to a Soft-RoCE (rdma_rxe) guest on the same bridge.
# See docs/nic-vm.md.
#
#   nic-vm.sh build                 the image (idempotent; minutes the first time)
#   nic-vm.sh up [NAME] [--role uroce|rxe] [--nic virtio|e1000e|vmxnet3]
#                [--iommu on|off] [--iommu-bits 39|48] [--pages 4k|2m] [--queues N] [--mem MB]
#                [--smp N]
#                                   boot guest NAME (default u), return when it answers
#   nic-vm.sh run [-g NAME] [-t SECONDS] [-i FILE] 'CMD'
#                                   CMD in the guest (bash -c): its output, its exit code
#   nic-vm.sh status | env [NAME]   the guests that are up | a guest's layout
#   nic-vm.sh down [NAME]           stop NAME, or every guest and the namespace
#   nic-vm.sh check --nic virtio|e1000e|vmxnet3 --iommu on|off --pages 4k|2m
#                [--sizes S1,S2,...] [--offset BYTES] [--iters N] [--iommu-bits 39|48]
#                [--driver vfio-pci|vfio-noiommu|uio] [--queues N] [--min-ack-timeout N] [--smoke]
#                                   the acceptance matrix of one set-up against Soft-RoCE:
#                                   one PASS/FAIL line a case, then "N passed, N failed"
#                                   (uroce's local ACK timeout at least 4.096 us * 2^N,
#                                   default 18: 1.07 s; 0: the programs' own)
#   nic-vm.sh compare [--nic N] [--iters N]
#                                   ib_write_bw 64 KiB, ib_write_lat and ib_send_lat 8 B between
#                                   two uroce guests, then two Soft-RoCE guests, same NIC
#                                   and qemu settings: the figures and their ratios
#
# Guests: NAME is a letter; guest u is 10.77.0.21 (u = 21st letter), r is 10.77.0.18.
# Role rxe (default for r): rdma_rxe on its NIC (--nic, default virtio). Role uroce (default for the
# others): the RoCE NIC stays with its kernel driver until `nv-bind` in the guest
# hands it to DPDK. The control channel is a second virtio NIC on qemu user
# networking that DPDK never binds. Needs root. State in $UROCE_NIC_VM_DIR
# (default /var/tmp/uroce-nic-vm); the build carried in is $UROCE_BUILD_DIR
# (default build). UROCE_NIC_VM_QEMU_ARGS is appended to each qemu command
# (split at blanks), e.g. -trace enable=virtqueue_pop,file=/tmp/q.log.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
work=${UROCE_NIC_VM_DIR:-/var/tmp/uroce-nic-vm}
build_dir=$(cd "$repo" && realpath -m "${UROCE_BUILD_DIR:-build}")
mirror=${UROCE_GUEST_MIRROR:-http://deb.debian.org/debian}
netns=nicvm
bridge=nvbr0
subnet=10.77.0
bridge_ip=$subnet.254
mtu=9000
agent_port=7000
rootfs=$work/rootfs
image=$work/root.ext4
rundir=$work/run
hostpy=/usr/bin/python3
rgctl=$here/rxe-guest/rgctl.py
nic_setup=$here/nic-setup.sh

base_packages=kmod,iproute2,procps,iputils-ping,ethtool,python3,netbase,initramfs-tools,pciutils,rdma-core,ibverbs-providers,ibverbs-utils,rdmacm-utils,infiniband-diags,perftest,dpdk,libibverbs1,tcpdump
# DPDK's drivers are plugins it loads at start (the `dpdk` package only
# recommends them): the NICs' PMDs, the mempool driver, and the vdevs the
# project's docs use.
pmd_packages="librte-net-virtio23 librte-net-e1000-23 librte-net-vmxnet3-23 librte-mempool-ring23 librte-bus-pci23 librte-bus-vdev23 librte-net-af-packet23 librte-net-memif23 librte-net-ring23"
host_packages=(qemu-system-x86 seabios debootstrap debian-archive-keyring e2fsprogs iproute2 python3)

note() { echo "nic-vm: $*" >&2; }
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

mount_root() {
  trap unmount_root EXIT
  mount -t proc proc "$rootfs/proc"
  mount -t sysfs sys "$rootfs/sys"
  mount --bind /dev "$rootfs/dev"
}

# Stage 1: debootstrap (minbase) with the user-space packages.
bootstrap() {
  [[ -e $work/.bootstrapped ]] && return
  local tmp=$work/rootfs.partial
  rm -rf "$tmp" "$rootfs" "$work/.kernel-installed" "$work/.runtime-sum"
  note "debootstrap bookworm from $mirror (a few minutes)"
  timeout 1800 debootstrap --variant=minbase --include="$base_packages" bookworm "$tmp" "$mirror"
  mv "$tmp" "$rootfs"
  touch "$work/.bootstrapped"
}

# Stage 2: the kernel (vfio-pci, uio_pci_generic, rdma_rxe, e1000e, vmxnet3 are
# its modules), with an initramfs of just what finds the root disk.
install_kernel() {
  [[ -e $work/.kernel-installed ]] && return
  note "installing linux-image-amd64 in the guest root"
  cat >"$rootfs/etc/apt/sources.list" <<EOS
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOS
  echo 'Acquire::Check-Valid-Until "false";' >"$rootfs/etc/apt/apt.conf.d/90uroce-nic-vm"
  printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
  chmod +x "$rootfs/usr/sbin/policy-rc.d"
  printf 'MODULES=list\nCOMPRESS=gzip\n' >"$rootfs/etc/initramfs-tools/conf.d/uroce-nic-vm.conf"
  printf '%s\n' virtio_pci virtio_blk ext4 crc32c_generic >"$rootfs/etc/initramfs-tools/modules"
  mount_root
  timeout 1800 chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 apt-get update -q
  timeout 1800 chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
    apt-get install -y -q --no-install-recommends linux-image-amd64
  unmount_root
  trap - EXIT
  touch "$work/.kernel-installed"
}

# What uroce's build carries in: its programs and its shared libraries, in
# the build tree's layout (uroce-run finds lib/ibverbs/ beside apps/run/).
carried_files() {
  (cd "$build_dir" &&
    find apps -path '*.p' -prune -o -type f -perm -u+x -name 'uroce*' -print &&
    find lib* -path '*.p' -prune -o \( -type f -o -type l \) -name '*.so*' -print) | sort
}

# Stage 3: the Debian packages the carried binaries link to (the guest is
# the same Debian, so the host's dpkg names them).
install_runtime() {
  local pkgs sum
  pkgs=$(cd "$build_dir" && carried_files | while read -r f; do
    ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $3}'
  done | sort -u | while read -r lib; do
    dpkg -S "$(realpath "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true
  done | cut -d: -f1 | sort -u | tr '\n' ' ')
  pkgs+=" $pmd_packages"
  sum=$(echo "$pkgs" | sha256sum | cut -d' ' -f1)
  [[ $(cat "$work/.runtime-sum" 2>/dev/null) == "$sum" ]] && return
  note "runtime packages: $pkgs"
  mount_root
  # make_image drops the package lists: fetch them again.
  timeout 600 chroot "$rootfs" /usr/bin/env LANG=C.UTF-8 apt-get update -q
  # shellcheck disable=SC2086  # a list of package names
  timeout 1800 chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
    apt-get install -y -q --no-install-recommends $pkgs
  in_root apt-get clean
  unmount_root
  trap - EXIT
  echo "$sum" >"$work/.runtime-sum"
}

image_inputs() {
  cat "$here/nic-vm/init.sh" "$here/nic-vm/nv-bind" "$here/nic-vm/nv-uroce" "$rgctl" \
    "$work/.kernel-installed" "$work/.runtime-sum"
  [[ -f $nic_setup ]] && cat "$nic_setup"
  (cd "$build_dir" && carried_files | xargs sha256sum)
  declare -f make_image
}

make_image() {
  install -m 755 "$here/nic-vm/init.sh" "$rootfs/sbin/nv-init"
  install -m 755 "$rgctl" "$rootfs/usr/local/sbin/rgctl.py"
  install -m 755 "$here/nic-vm/nv-bind" "$here/nic-vm/nv-uroce" "$rootfs/usr/local/sbin/"
  # The project's NIC set-up tool, when the tree has it, binds the NIC (nv-bind
  # hands over to it); the inline binding of nv-bind otherwise.
  rm -f "$rootfs/usr/local/sbin/nic-setup.sh"
  [[ -f $here/nic-setup.sh ]] && install -m 755 "$here/nic-setup.sh" "$rootfs/usr/local/sbin/nic-setup.sh"
  rm -rf "$rootfs/opt/uroce"
  mkdir -p "$rootfs/opt/uroce/build"
  (cd "$build_dir" && carried_files | xargs cp -a --parents -t "$rootfs/opt/uroce/build")
  : >"$rootfs/etc/fstab"
  rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* \
    "$rootfs"/var/lib/apt/lists/*_Packages "$rootfs"/var/cache/apt/*.bin
  local kernel mb
  kernel=$(find "$rootfs/boot" -name 'vmlinuz-*' | sort -V | tail -1)
  [[ -n $kernel ]] || fail "no kernel in $rootfs/boot"
  cp "$kernel" "$work/vmlinuz"
  cp "$rootfs/boot/initrd.img-${kernel##*/vmlinuz-}" "$work/initrd.img"
  mb=$(du -sm "$rootfs" | cut -f1)
  rm -f "$image.new"
  mkfs.ext4 -q -F -L uroce-nic-vm -d "$rootfs" "$image.new" "$((mb * 5 / 4 + 300))M"
  mv "$image.new" "$image"
  note "image $image ($((mb * 5 / 4 + 300)) MiB), kernel ${kernel##*/}, uroce from $build_dir"
}

cmd_build() {
  local t0=$SECONDS sum
  [[ -x $build_dir/apps/pingpong/uroce-pingpong && -x $build_dir/apps/run/uroce-run ]] ||
    fail "no uroce build in $build_dir (meson setup build && ninja -C build, or set UROCE_BUILD_DIR)"
  mkdir -p "$work"
  need_host_packages
  bootstrap
  install_kernel
  install_runtime
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
  in_ns sysctl -qw "net.ipv6.conf.$bridge.disable_ipv6=1"
}

# A tap on the bridge; multi-queue when queues > 1.
make_tap() {
  local tap=$1 queues=$2 flags=(vnet_hdr)
  ((queues > 1)) && flags+=(multi_queue)
  ip -n "$netns" link del "$tap" 2>/dev/null || true
  ip -n "$netns" tuntap add "$tap" mode tap "${flags[@]}"
  ip -n "$netns" link set "$tap" mtu "$mtu" master "$bridge" up
  in_ns sysctl -qw "net.ipv6.conf.$tap.disable_ipv6=1"
}

# ---- guests ---------------------------------------------------------------

# pick NAME: the guest's number, addresses and files. The RoCE NIC has
# $subnet.N; a uroce guest's exchange NIC (kernel TCP for the pingpong and
# perftest handshakes, since DPDK owns the RoCE NIC) has $subnet.(100+N).
pick() {
  [[ $1 =~ ^[a-z]$ ]] || fail "a guest's name is one letter a..z, not '$1'"
  name=$1
  num=$(($(printf '%d' "'$1") - 96))
  guest_ip=$subnet.$num
  xchg_ip=$subnet.$((100 + num))
  mac=$(printf '52:54:00:77:00:%02x' "$num")
  ctlmac=$(printf '52:54:00:77:01:%02x' "$num")
  xmac=$(printf '52:54:00:77:02:%02x' "$num")
  tap=nvt$num
  xtap=nvx$num
  port=$((19300 + num))
  pidfile=$rundir/$name.pid
  console=$rundir/$name.console
  setupfile=$rundir/$name.setup
}

qemu_pid() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  grep -qa "uroce-nic-vm-$name" "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

# The RoCE NIC's qemu device for --nic/--iommu/--queues.
roce_device() {
  local nic=$1 iommu=$2 queues=$3 d
  case $nic in
    virtio)
      d="virtio-net-pci,netdev=roce,mac=$mac,romfile="
      # A device behind the IOMMU is a modern (virtio 1.0) one only: qemu
      # refuses VIRTIO_F_IOMMU_PLATFORM on a transitional device.
      [[ $iommu == on ]] && d+=",disable-legacy=on,iommu_platform=on,ats=on"
      ((queues > 1)) && d+=",mq=on,vectors=$((2 * queues + 2)),rss=on"
      ;;
    e1000e) d="e1000e,netdev=roce,mac=$mac,romfile=" ;;
    vmxnet3) d="vmxnet3,netdev=roce,mac=$mac,romfile=" ;;
    *) fail "--nic is virtio, e1000e or vmxnet3, not '$nic'" ;;
  esac
  echo "$d"
}

# start NAME ROLE NIC IOMMU PAGES QUEUES MEM_MB IOMMU_BITS [SMP]
start() {
  local role=$2 nic=$3 iommu=$4 pages=$5 queues=$6 mem=$7 bits=$8 vcpus=${9:-}
  pick "$1"
  [[ -f $image ]] || fail "no image: run '$0 build' first"
  [[ $iommu == on || $iommu == off ]] || fail "--iommu is on or off, not '$iommu'"
  [[ $pages == 4k || $pages == 2m ]] || fail "--pages is 4k or 2m, not '$pages'"
  [[ $queues =~ ^[1-8]$ ]] || fail "--queues is 1..8, not '$queues'"
  # A Soft-RoCE guest runs on any of them: the kernel drives each (virtio_net,
  # e1000e, vmxnet3), and rdma_rxe sits on the netdev.
  [[ $role == rxe && $iommu == on ]] && fail "a Soft-RoCE guest runs without --iommu"
  qemu_pid >/dev/null && fail "guest $name is up already ($0 down $name)"
  mkdir -p "$rundir"
  cmd_net
  make_tap "$tap" "$queues"
  local machine=q35,accel=tcg smp=1 pre=() cmdline netq=''
  local cmdline="console=ttyS0 root=/dev/vda rw init=/sbin/nv-init panic=-1 quiet mitigations=off nokaslr tsc=reliable"
  cmdline+=" nv.role=$role nv.ip=$guest_ip/24 nv.mac=$mac nv.ctlmac=$ctlmac nv.nic=$nic nv.iommu=$iommu"
  cmdline+=" nv.pages=$pages nv.queues=$queues nv.host=nv-$name nv.port=$agent_port"
  if [[ $iommu == on ]]; then
    # The IOMMU comes before the devices it translates for.
    machine+=",kernel-irqchip=split"
    # shellcheck disable=SC2054  # commas inside one qemu argument
    # aw-bits: the IOMMU's address width. qemu's default, 39, is below the
    # user addresses of a process (2^47), which VA-as-IOVA then cannot map
    # (see docs/nic-vm.md); 48 covers them.
    [[ $bits == 39 || $bits == 48 ]] || fail "--iommu-bits is 39 or 48, not '$bits'"
    pre=(-device "intel-iommu,intremap=on,caching-mode=on,aw-bits=$bits")
    cmdline+=" intel_iommu=on iommu=pt"
  fi
  # Hugepages for EAL with --pages 2m, and without an IOMMU whatever the
  # pages: IOVA as PA needs memory with physical addresses, which --no-huge
  # memory has not. With --pages 4k the regions are still on 4 KiB pages
  # (nv-uroce: uroce-pingpong --normal-pages; the stock programs' own).
  [[ $role == uroce && ( $pages == 2m || $iommu == off ) ]] && cmdline+=" default_hugepagesz=2M hugepagesz=2M hugepages=$((mem / 4 / 2))"
  ((queues > 1)) && netq=",queues=$queues"
  # uroce polls from two threads (the program's and the engine's worker).
  [[ $role == uroce ]] && smp=2
  if [[ -n $vcpus ]]; then
    [[ $vcpus =~ ^[1-4]$ ]] || fail "--smp is 1..4, not '$vcpus'"
    smp=$vcpus
  fi
  local xchg=()
  if [[ $role == uroce ]]; then
    make_tap "$xtap" 1
    xchg=(-netdev "tap,id=xchg,ifname=$xtap,script=no,downscript=no"
          -device "virtio-net-pci,netdev=xchg,mac=$xmac,romfile=")
    cmdline+=" nv.xmac=$xmac nv.xip=$xchg_ip/24"
  fi
  rm -f "$console" "$pidfile"
  echo "role=$role nic=$nic iommu=$iommu${bits:+ iommu_bits=$bits} pages=$pages queues=$queues mem=$mem smp=$smp" >"$setupfile"
  in_ns qemu-system-x86_64 -name "uroce-nic-vm-$name" \
    -machine "$machine" -cpu max -smp "$smp" -m "$mem" \
    -nodefaults -no-user-config -display none -no-reboot "${pre[@]}" \
    -kernel "$work/vmlinuz" -initrd "$work/initrd.img" -append "$cmdline" \
    -drive "file=$image,format=raw,if=virtio,snapshot=on,cache=unsafe" \
    -netdev "tap,id=roce,ifname=$tap,script=no,downscript=no$netq" \
    -device "$(roce_device "$nic" "$iommu" "$queues")" \
    "${xchg[@]}" \
    -netdev "user,id=ctl,restrict=on,hostfwd=tcp:127.0.0.1:$port-10.0.2.15:$agent_port" \
    -device "virtio-net-pci,netdev=ctl,mac=$ctlmac,romfile=" \
    -device virtio-rng-pci \
    -serial "file:$console" -pidfile "$pidfile" -daemonize ${UROCE_NIC_VM_QEMU_ARGS:-}
}

await() {
  local t0=$SECONDS limit=${UROCE_NIC_VM_BOOT_S:-300}
  until grep -q '^nv-ready' "$console" 2>/dev/null; do
    qemu_pid >/dev/null || { tail -15 "$console" >&2; fail "guest $name died while booting"; }
    ((SECONDS - t0 < limit)) || { tail -15 "$console" >&2; fail "guest $name not ready after $limit s"; }
    sleep 1
  done
  in_ns "$hostpy" "$rgctl" call --port "$port" --wait 60 true >/dev/null ||
    { tail -15 "$console" >&2; fail "guest $name booted, but its channel does not answer"; }
  note "guest $name ($(cat "$setupfile"), $guest_ip) up in $((SECONDS - t0)) s"
  grep '^nv-info' "$console" | sed "s/^/  [$name] /" >&2 || true
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
  rm -f "$pidfile" "$setupfile"
  ip -n "$netns" link del "$tap" 2>/dev/null || true
  ip -n "$netns" link del "$xtap" 2>/dev/null || true
}

# up [NAME] [--role R] [--nic N] [--iommu on|off] [--pages 4k|2m] [--queues N] [--mem MB] [--smp N]
cmd_up() {
  local g=u
  [[ ${1:-} =~ ^[a-z]$ ]] && { g=$1; shift; }
  local role=uroce nic=virtio iommu=off pages=4k queues=1 mem='' bits=48 vcpus=
  [[ $g == r ]] && role=rxe
  while (($#)); do
    (($# >= 2)) || fail "$1 needs a value"
    case $1 in
      --role) role=$2 ;; --nic) nic=$2 ;; --iommu) iommu=$2 ;; --pages) pages=$2 ;;
      --queues) queues=$2 ;; --mem) mem=$2 ;; --iommu-bits) bits=$2 ;; --smp) vcpus=$2 ;;
      *) fail "unknown option $1 (see $0 help)" ;;
    esac
    shift 2
  done
  [[ -n $mem ]] || { [[ $role == uroce ]] && mem=2048 || mem=768; }
  # A guest that does not come up is stopped again.
  trap 'stop "$g" >/dev/null 2>&1' EXIT
  [[ $iommu == on ]] || bits=''
  start "$g" "$role" "$nic" "$iommu" "$pages" "$queues" "$mem" "$bits" "$vcpus"
  await
  trap - EXIT
}

# guest NAME LIMIT CMD: CMD in guest NAME (the picked guest is left as it was).
guest() {
  local g=$1 limit=$2 p
  shift 2
  p=$((19300 + $(printf '%d' "'$g") - 96))
  in_ns "$hostpy" "$rgctl" call --port "$p" --limit "$limit" "$*"
}

# guest_bg NAME LIMIT CMD: as guest, for a background job: the job is the
# channel's client itself, so killing its pid stops CMD in the guest.
guest_bg() {
  local p=$((19300 + $(printf '%d' "'$1") - 96))
  exec ip netns exec "$netns" "$hostpy" "$rgctl" call --port "$p" --limit "$2" "$3"
}

# first_fails A B: waits until one of the two jobs ends; if that one failed
# while the other still runs, stops the other.
first_fails() {
  local a=$1 b=$2 rc=0
  while kill -0 "$a" 2>/dev/null && kill -0 "$b" 2>/dev/null; do sleep 0.5; done
  if ! kill -0 "$a" 2>/dev/null; then
    wait "$a" || rc=$?
    ((rc == 0)) || kill "$b" 2>/dev/null || true
  else
    wait "$b" || rc=$?
    ((rc == 0)) || kill "$a" 2>/dev/null || true
  fi
}

cmd_run() {
  local g=u limit='' input='' opt OPTIND=1
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
  exec ip netns exec "$netns" "$hostpy" "$rgctl" "${args[@]}" "$*"
}

cmd_env() {
  pick "${1:-u}"
  cat <<EOS
netns=$netns
bridge=$bridge
bridge_ip=$bridge_ip
guest_ip=$guest_ip
xchg_ip=$xchg_ip
console=$console
$(tr ' ' '\n' <"$setupfile" 2>/dev/null)
EOS
}

cmd_status() {
  local f any=''
  for f in "$rundir"/*.pid; do
    [[ -e $f ]] || continue
    pick "$(basename "$f" .pid)"
    qemu_pid >/dev/null || continue
    echo "guest $name: up, $guest_ip, $(cat "$setupfile" 2>/dev/null), qemu pid $(qemu_pid), console $console"
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

# ---- check: the acceptance matrix of one set-up ----------------------------

# One case: the uroce side in guest u and the Soft-RoCE side in guest r, in
# either role. Both logs go to $logdir/CASE.{uroce,rxe}.
#   run_case TOOL DIR SIZE
# TOOL: pingpong (uroce-pingpong), rc_pingpong, write_bw, read_bw (stock,
# under uroce-run). DIR: uroce-server or uroce-client.
run_case() {
  local tool=$1 dir=$2 size=$3 ucmd rcmd id=$1.$2.$3 t0=$SECONDS limit
  local ulog=$logdir/$id.uroce rlog=$logdir/$id.rxe urc rrc ok=PASS why='' zc=''
  local iters=$check_iters
  limit=$((120 + size / 4096))
  ((size >= 1048576)) && iters=5
  local rpeer='' upeer=''
  if [[ $dir == uroce-server ]]; then rpeer=$uroce_xchg; else upeer=$rxe_ip; fi
  case $tool in
    pingpong)
      ucmd="nv-uroce pingpong -g 1 -s $size -m 1024 -n $iters -c --counters $offset_arg $pp_timeout $upeer"
      rcmd="ibv_rc_pingpong -d rxe0 -g 1 -s $size -m 1024 -n $iters -c $rpeer" ;;
    rc_pingpong)
      ucmd="UROCE_COUNTERS=1 NV_TELEMETRY=$tel NV_MIN_ACK_TIMEOUT=$min_ack nv-uroce run ibv_rc_pingpong -d uroce0 -g 1 -s $size -m 1024 -n $iters -c $upeer"
      rcmd="ibv_rc_pingpong -d rxe0 -g 1 -s $size -m 1024 -n $iters -c $rpeer" ;;
    srq_pingpong)
      # With --queues > 1: 8 QPs from the peer, each flow on a UDP source
      # port of its own, spread by the NIC's RSS over the port's queues
      # (the check below wants both engines to have received).
      ucmd="UROCE_COUNTERS=1 NV_TELEMETRY=$tel NV_MIN_ACK_TIMEOUT=$min_ack nv-uroce run ibv_srq_pingpong -d uroce0 -g 1 -q 8 -s $size -m 1024 -n $iters -c $upeer"
      rcmd="ibv_srq_pingpong -d rxe0 -g 1 -q 8 -s $size -m 1024 -n $iters -c $rpeer" ;;
    write_bw | read_bw)
      ucmd="UROCE_COUNTERS=1 NV_TELEMETRY=$tel NV_MIN_ACK_TIMEOUT=$min_ack nv-uroce run ib_$tool -d uroce0 -x 1 -F -m 1024 -s $size -n $iters $upeer"
      rcmd="ib_$tool -d rxe0 -x 1 -F -m 1024 -s $size -n $iters $rpeer" ;;
  esac
  guest u 10 "rm -f $tel" >/dev/null 2>&1 || true
  # The client retries while the server is not listening yet (EAL start-up
  # under TCG takes seconds); any other failure ends it.
  # shellcheck disable=SC2016  # the guest's shell expands it
  local retry='for i in $(seq 30); do out=$(CMD 2>&1); rc=$?; echo "$out"; [[ $rc == 0 ]] && exit 0; grep -qiE "couldn.t connect|unable to open file descriptor|connection refused" <<<"$out" || exit $rc; echo "(retry $i)"; sleep 2; done; exit $rc'
  # When one side fails, the other is stopped at once (its closed channel
  # stops its command in the guest) instead of waiting out its limit.
  local upid rpid
  rrc=0 urc=0
  if [[ $dir == uroce-server ]]; then
    guest_bg u "$limit" "$ucmd" >"$ulog" 2>&1 &
    upid=$!
    guest_bg r "$limit" "${retry//CMD/$rcmd}" >"$rlog" 2>&1 &
    rpid=$!
  else
    guest_bg r "$limit" "$rcmd" >"$rlog" 2>&1 &
    rpid=$!
    sleep 2
    guest_bg u "$limit" "${retry//CMD/$ucmd}" >"$ulog" 2>&1 &
    upid=$!
  fi
  first_fails "$upid" "$rpid"
  wait "$upid" || urc=$?
  wait "$rpid" || rrc=$?
  ((urc == 0)) || why+=" uroce rc $urc;"
  ((rrc == 0)) || why+=" rxe rc $rrc;"
  # "Couldn't connect" is the retry above; any other such line is an error.
  # Counter lines are judged below, by value.
  grep -hvE "Couldn.t connect|^ *(uroce: +)?(qp|engine|port)\." "$ulog" "$rlog" |
    grep -qiE "invalid data|couldn.t|failed|error" && why+=" error line;"
  case $tool in
    pingpong | rc_pingpong | srq_pingpong)
      grep -q 'iters in' "$ulog" || why+=" uroce did not finish;"
      grep -q 'iters in' "$rlog" || why+=" rxe did not finish;" ;;
    *)
      grep -qE "^ *$size +[0-9]+ " "$ulog" || why+=" uroce printed no result row;"
      grep -qE "^ *$size +[0-9]+ " "$rlog" || why+=" rxe printed no result row;" ;;
  esac
  # --counters prints only the counters that are not zero.
  local copied refused unreg
  if [[ $tool != pingpong ]]; then
    guest u 10 "cat $tel" >"$ulog.port" 2>/dev/null || true
  fi
  zc=$(port_counter tx_zero_copy_frames)
  copied=$(port_counter tx_copied_bytes)
  refused=$(port_counter regions_register_failed)
  unreg=$(port_counter tx_copied_unregistered)
  # A region DPDK refused is copied from, never DMA'd: counted as
  # tx_zero_copy_frames all the same (see docs/nic-vm.md), so it fails here.
  [[ ${refused:-0} -gt 0 ]] && why+=" regions_register_failed $refused (tx_copied_unregistered ${unreg:-0});"
  # Where uroce sends payload (both pingpongs; write_bw as the client; read_bw
  # as the server, in its read responses), some of it must leave zero-copy.
  # The other side of write_bw and read_bw sends only ACKs or read requests.
  local sends=1
  [[ $tool == write_bw && $dir == uroce-server ]] && sends=0
  [[ $tool == read_bw && $dir == uroce-client ]] && sends=0
  # Payloads under 512 bytes are copied by design (drivers/dpdk/port_io.cc,
  # kZeroCopyFrom): there the copied bytes must show instead.
  if ((sends && size < 512)); then
    [[ ${copied:-0} -gt 0 ]] || why+=" tx_copied_bytes ${copied:-unknown};"
  elif ((sends)); then
    [[ ${zc:-0} -gt 0 ]] || why+=" tx_zero_copy_frames ${zc:-unknown};"
  fi
  if [[ $tool == srq_pingpong ]]; then
    # Every queue's engine received, and what one passed on the other took in.
    local q rx lines over=0 in=0
    lines=$(grep -E '^uroce: +engine [0-9]+ \(queue' "$ulog" || true)
    for ((q = 0; q < queues; ++q)); do
      rx=$(engine_value "$lines" "$q" rx_frames)
      ((rx > 0)) || why+=" engine $q received nothing;"
      over=$((over + $(engine_value "$lines" "$q" rx_handed_over)))
      in=$((in + $(engine_value "$lines" "$q" rx_handed_in)))
    done
    ((over == in)) || why+=" handed over $over, handed in $in;"
    grep -E '^uroce: +engine' "$ulog" | sed "s/^/  $id /" >>"$logdir/counters.txt"
  fi
  [[ -n $why ]] && ok=FAIL
  local tally=''
  tally=$(port_counters_line)
  printf '%s  %-7s iommu=%-3s pages=%-2s  %-11s %-12s %8s B  zc=%s copied=%s  %ss%s\n' "$ok" "$c_nic" "$c_iommu" \
    "$c_pages" "$tool" "$dir" "$size" "${zc:-?}" "${copied:-?}" "$((SECONDS - t0))" "${why:+  (${why%;})}"
  echo "  $id $tally" >>"$logdir/counters.txt"
  if [[ $ok == PASS ]]; then passed=$((passed + 1)); else
    failed=$((failed + 1))
    # (An empty log, e.g. of a side stopped when the other failed, must not
    # end the check: grep finds nothing and pipefail would stop the script.)
    { grep -v '^ *$' "$ulog" || true; } | tail -n 6 | sed 's/^/    uroce: /'
    { grep -v '^ *$' "$rlog" || true; } | tail -n 3 | sed 's/^/    rxe:   /'
  fi
}

# port_counter NAME: a uroce port counter of the case, from what uroce
# printed at exit (uroce-pingpong --counters; UROCE_COUNTERS=1 for the stock
# programs, where the library has it; both print only counters not zero),
# else from the last telemetry answer.
port_counter() {
  if grep -q 'counters (non-zero)' "$ulog"; then
    awk -v n="port.$1" '{for (i = 1; i < NF; ++i) if ($i == n) v = $(i + 1)} END {print v + 0}' "$ulog"
  elif [[ $tool != pingpong ]]; then
    grep -o "\"$1\": *[0-9]*" "$ulog.port" 2>/dev/null | grep -o '[0-9]*$' | tail -1
  fi
}

# engine_value LINES ENGINE NAME: a counter on the "engine N (queue N):" line
# that UROCE_COUNTERS=1 prints per engine; 0 if absent.
engine_value() {
  awk -v e="$2" -v n="$3" '$2 == "engine" && $3 == e {for (i = 4; i < NF; ++i) if ($i == n) v = $(i + 1)} END {print v + 0}' <<<"$1"
}

port_counters_line() {
  local n out=''
  for n in tx_zero_copy_frames tx_zero_copy_bytes tx_copied_bytes tx_copied_unregistered tx_pieces_split \
    regions_registered regions_dma_mapped regions_dma_unneeded regions_register_failed regions_iova_unknown; do
    out+=" $n=$(port_counter $n)"
  done
  echo "$out"
}

cmd_check() {
  # uroce-pingpong's buffer 3000 bytes into a page by default: at MTU 1024
  # the second packet's payload crosses into the next page (--offset 0: on
  # the boundary, as the stock programs' buffers are).
  local c_nic='' c_iommu='' c_pages='' sizes=1,4096,65536,1048576 offset=3000 smoke=0 driver='' queues=1 bits=48
  # Under TCG on a loaded host a Soft-RoCE guest falls behind by more than
  # the stock programs' 0.54 s (timeout 14, 7 retries) on big messages: uroce
  # waits at least 1.07 s (timeout 18) before each resend (docs/nic-vm.md).
  min_ack=18
  check_iters=${ITERS:-20}
  while (($#)); do
    case $1 in
      --smoke) smoke=1; shift; continue ;;
    esac
    (($# >= 2)) || fail "$1 needs a value"
    case $1 in
      --nic) c_nic=$2 ;; --iommu) c_iommu=$2 ;; --pages) c_pages=$2 ;; --sizes) sizes=$2 ;;
      --offset) offset=$2 ;; --iters) check_iters=$2 ;; --driver) driver=$2 ;; --queues) queues=$2 ;;
      --iommu-bits) bits=$2 ;; --min-ack-timeout) min_ack=$2 ;;
      *) fail "unknown option $1 (see $0 help)" ;;
    esac
    shift 2
  done
  if ((smoke)); then
    c_nic=${c_nic:-e1000e} c_iommu=${c_iommu:-on} c_pages=${c_pages:-2m}
    [[ $sizes == 1,4096,65536,1048576 ]] && sizes=4096
    check_iters=${ITERS:-10}
  fi
  [[ -n $c_nic && -n $c_iommu && -n $c_pages ]] || fail "check needs --nic, --iommu and --pages (or --smoke)"
  [[ $min_ack =~ ^[0-9]+$ ]] && ((min_ack <= 31)) || fail "--min-ack-timeout takes 0 (the programs' own) to 31"
  pp_timeout=''
  ((min_ack > 0)) && pp_timeout="-u $min_ack"
  local t0=$SECONDS passed=0 failed=0 tel=/tmp/nv-port.json offset_arg=''
  logdir=$work/check/$c_nic-iommu$c_iommu-$c_pages
  [[ $c_iommu == on && $bits != 48 ]] && logdir+=-aw$bits
  rm -rf "$logdir"; mkdir -p "$logdir"
  cmd_build >"$logdir/build.log" 2>&1 || { cat "$logdir/build.log" >&2; fail "build failed"; }
  trap 'cmd_down >/dev/null 2>&1' EXIT
  cmd_down >/dev/null 2>&1 || true
  (cmd_up r && cmd_up u --nic "$c_nic" --iommu "$c_iommu" --pages "$c_pages" --queues "$queues" --iommu-bits "$bits") \
    >"$logdir/up.log" 2>&1 || { cat "$logdir/up.log" >&2; fail "guests did not come up"; }
  note "guests up after $((SECONDS - t0)) s"
  grep 'nv-info' "$logdir/up.log" | sed 's/^ */  /' >&2
  pick r; rxe_ip=$guest_ip
  pick u; uroce_xchg=$xchg_ip
  if ! guest u 60 "nv-bind ${driver:+--driver $driver}" >"$logdir/bind.log" 2>&1; then
    sed 's/^/  /' "$logdir/bind.log" >&2
    echo "FAIL  $c_nic iommu=$c_iommu pages=$c_pages  binding the NIC"
    echo "0 passed, 1 failed"
    return 1
  fi
  sed 's/^/  /' "$logdir/bind.log" >&2
  if [[ $offset != 0 ]]; then
    if guest u 30 "/opt/uroce/build/apps/pingpong/uroce-pingpong --help" 2>&1 | grep -q -- '--offset'; then
      offset_arg="--offset $offset"
    else
      note "this uroce-pingpong has no --offset: buffers start on a page boundary"
    fi
  fi
  local size tool dir tools=(pingpong rc_pingpong write_bw read_bw)
  ((queues > 1)) && tools+=(srq_pingpong)
  for size in ${sizes//,/ }; do
    for tool in "${tools[@]}"; do
      for dir in uroce-server uroce-client; do
        run_case "$tool" "$dir" "$size"
      done
    done
  done
  guest u 30 "nv-bind --undo" >>"$logdir/bind.log" 2>&1 || note "nv-bind --undo failed (see $logdir/bind.log)"
  cmd_down >/dev/null 2>&1
  trap - EXIT
  note "check took $((SECONDS - t0)) s, logs in $logdir"
  echo "$passed passed, $failed failed"
  ((failed == 0))
}

# ---- compare: uroce beside Soft-RoCE, the same emulated NIC -----------------

# perf_pair SERVER CLIENT PEER_IP DEV PREFIX TOOL ARGS: perftest TOOL with ARGS
# between guests SERVER and CLIENT (the client connects to PEER_IP); PREFIX
# runs each (nv-uroce run for uroce). The client's output goes to stdout.
perf_pair() {
  local sg=$1 cg=$2 peer=$3 dev=$4 prefix=$5 tool=$6 targs=$7 id=$8 srv cli src=0 crc=0
  # shellcheck disable=SC2016  # the guest's shell expands it
  local retry='for i in $(seq 30); do out=$(CMD 2>&1); rc=$?; echo "$out"; [[ $rc == 0 ]] && exit 0; grep -qiE "couldn.t connect|unable to open file descriptor|connection refused" <<<"$out" || exit $rc; sleep 2; done; exit $rc'
  local scmd="$prefix $tool -d $dev -x 1 -F $targs" ccmd="$prefix $tool -d $dev -x 1 -F $targs $peer"
  guest_bg "$sg" 300 "$scmd" >"$logdir/$id.server" 2>&1 &
  srv=$!
  sleep 2
  guest_bg "$cg" 300 "${retry//CMD/$ccmd}" >"$logdir/$id.client" 2>&1 &
  cli=$!
  first_fails "$srv" "$cli"
  wait "$srv" || src=$?
  wait "$cli" || crc=$?
  ((src == 0 && crc == 0)) || { note "$id: server rc $src, client rc $crc (logs in $logdir)"; return 1; }
}

# row_value FILE SIZE COLUMN: a column of perftest's result row for SIZE.
row_value() {
  awk -v s="$2" -v c="$3" '$1 == s && NF >= c && $2 ~ /^[0-9]+$/ {v = $c} END {print v}' "$1"
}

# compare [--nic N] [--iters N]: ib_write_bw (65536 B), ib_write_lat and
# ib_send_lat (8 B) between two uroce guests (u, v), then between two
# Soft-RoCE guests (r, s): each guest 2 vCPUs and 2048 MB, its RoCE NIC the
# same model (default e1000e) without IOMMU (Soft-RoCE on the kernel's
# driver; uroce on DPDK's PMD, uio, EAL on hugepages), MTU 1024, in one run.
# Under TCG both stacks run on emulated CPUs, so the ratio is what counts.
cmd_compare() {
  local lat_iters=1000 bw_iters=2000 t0=$SECONDS nic=e1000e
  while (($#)); do
    (($# >= 2)) || fail "$1 needs a value"
    case $1 in
      --nic) nic=$2 ;;
      --iters) lat_iters=$2; bw_iters=$2 ;;
      *) fail "unknown option $1 (see $0 help)" ;;
    esac
    shift 2
  done
  logdir=$work/compare
  rm -rf "$logdir"; mkdir -p "$logdir"
  cmd_build >"$logdir/build.log" 2>&1 || { cat "$logdir/build.log" >&2; fail "build failed"; }
  trap 'cmd_down >/dev/null 2>&1' EXIT
  cmd_down >/dev/null 2>&1 || true
  local stack tests=("write_bw 65536 ib_write_bw -s 65536 -n $bw_iters" "write_lat 8 ib_write_lat -s 8 -n $lat_iters"
    "send_lat 8 ib_send_lat -s 8 -n $lat_iters")
  declare -A fig
  for stack in uroce rxe; do
    local a b dev prefix peer
    if [[ $stack == uroce ]]; then
      a=u b=v dev=uroce0 prefix="nv-uroce run"
      (cmd_up u --nic "$nic" --iommu off --pages 2m --smp 2 --mem 2048 &&
        cmd_up v --nic "$nic" --iommu off --pages 2m --smp 2 --mem 2048) >>"$logdir/up.log" 2>&1 ||
        { tail -20 "$logdir/up.log" >&2; fail "uroce guests did not come up"; }
      if ! guest u 60 nv-bind >>"$logdir/bind.log" 2>&1 || ! guest v 60 nv-bind >>"$logdir/bind.log" 2>&1; then
        cat "$logdir/bind.log" >&2
        fail "binding the NICs failed"
      fi
      pick v; peer=$xchg_ip
    else
      a=r b=s dev=rxe0 prefix=''
      (cmd_up r --role rxe --nic "$nic" --smp 2 --mem 2048 &&
        cmd_up s --role rxe --nic "$nic" --smp 2 --mem 2048) >>"$logdir/up.log" 2>&1 ||
        { tail -20 "$logdir/up.log" >&2; fail "Soft-RoCE guests did not come up"; }
      pick s; peer=$guest_ip
    fi
    note "$stack guests up after $((SECONDS - t0)) s"
    local t id size tool args
    for t in "${tests[@]}"; do
      read -r id size tool args <<<"$t"
      perf_pair "$b" "$a" "$peer" "$dev" "$prefix" "$tool" "-m 1024 $args" "$stack.$id" || fail "$stack $id failed"
      if [[ $id == write_bw ]]; then
        fig[$stack.$id]=$(row_value "$logdir/$stack.$id.client" "$size" 4)  # BW average, MB/s
      else
        fig[$stack.$id]=$(row_value "$logdir/$stack.$id.client" "$size" 5)  # t_typical (median), us
      fi
      [[ -n ${fig[$stack.$id]} ]] || fail "$stack $id printed no result row (see $logdir/$stack.$id.client)"
      note "$stack $id: ${fig[$stack.$id]}"
    done
    cmd_down >/dev/null 2>&1
  done
  trap - EXIT
  local u r ratio json='{' sep=''
  echo "NIC $nic, 2 vCPUs and 2048 MB a guest, MTU 1024"
  printf '%-10s %-8s %12s %12s %10s\n' test unit uroce soft-roce uroce/rxe
  for t in "${tests[@]}"; do
    read -r id size tool args <<<"$t"
    u=${fig[uroce.$id]} r=${fig[rxe.$id]}
    ratio=$(awk -v u="$u" -v r="$r" 'BEGIN {printf "%.2f", (r > 0 ? u / r : 0)}')
    local unit=us
    [[ $id == write_bw ]] && unit=MB/s
    printf '%-10s %-8s %12s %12s %10s\n' "$id" "$unit" "$u" "$r" "$ratio"
    json+="$sep\"$id\":{\"unit\":\"$unit\",\"uroce\":$u,\"soft_roce\":$r,\"ratio\":$ratio}"
    sep=,
  done
  json+="}"
  echo "$json" >"$logdir/compare.json"
  note "compare took $((SECONDS - t0)) s; figures in $logdir/compare.json, logs in $logdir"
}

usage() { sed -n '2,/^set -e/{/^#/s/^# \{0,1\}//p}' "$0"; }

main() {
  local cmd=${1:-help}
  (($# > 0)) && shift
  case $cmd in
    build) cmd_build ;;
    up) cmd_up "$@" ;;
    run) cmd_run "$@" ;;
    env) cmd_env "$@" ;;
    status) cmd_status ;;
    down) cmd_down "$@" ;;
    net) cmd_net ;;
    check) cmd_check "$@" ;;
    compare) cmd_compare "$@" ;;
    help | -h | --help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}
main "$@"
exit
