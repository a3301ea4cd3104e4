#!/usr/bin/env bash
# tools/nic-setup.sh on a made-up machine: a fake /sys and /proc in a
# temporary directory, and stand-ins for the kernel (a hook run after each
# sysfs write: unbind, drivers_probe, bind), for ip, modprobe and mount. No
# real device, module or mount is touched. It checks each finding's line
# (no IOMMU, no hugepages, hugetlbfs not mounted, no isolated cores, a NIC
# on its kernel driver carrying an address and the default route, a shared
# IOMMU group, compaction and --no-huge without an IOMMU), that such a NIC is refused
# without --force, that the set-up binds, reserves and mounts, that a second
# set-up changes nothing, and that --undo puts back exactly what it found:
# the driver, the interface's name, link state, address and route, the
# hugepage count, the mount, vm.compact_unevictable_allowed, vfio's
# no-IOMMU switch and the modules.
#
# usage: nic_setup_test.sh   (with GTEST_OUTPUT=xml:DIR/ it also writes a
# one-case report there, for tools/test.sh's count)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tool=$here/nic-setup.sh
tmp=$(mktemp -d /tmp/nic-setup-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=()
fail() { failures+=("$1"); echo "FAIL: $1" >&2; }

# ---- the made-up machine --------------------------------------------------

fake=$tmp/m
sys=$fake/sys
pci=0000:00:04.0
dev=$sys/bus/pci/devices/$pci

# The kernel's side of a sysfs write: what unbind, drivers_probe and bind do.
cat >"$tmp/hook" <<'EOF'
#!/usr/bin/env bash
sys=$FAKE/sys
path=$1 value=$2
dev=$sys/bus/pci/devices/$value
attach() {  # bind device dir $1 to driver $2; a net driver makes its interface
  ln -sfn "$sys/bus/pci/drivers/$2" "$1/driver"
  if [[ $2 == e1000e ]]; then
    local name
    name=$(cat "$1/kernel_name")
    mkdir -p "$1/net/$name" "$sys/class/net/$name"
    echo 0x1002 >"$sys/class/net/$name/flags"
    ln -sfn "$1" "$sys/class/net/$name/device"
  fi
}
case $path in
  */driver_override)
    [[ -z $value ]] && echo '(null)' >"$path" ;;
  */allow_unsafe_interrupts)
    if [[ $value == 1 || $value == Y ]]; then echo Y >"$path"; else echo N >"$path"; fi ;;
  */enable_unsafe_noiommu_mode)
    if [[ $value == 1 || $value == Y ]]; then echo Y >"$path"; else echo N >"$path"; fi ;;
  */driver/unbind)
    d=${path%/driver/unbind}
    # The interface goes, and its addresses and routes with it.
    for n in "$d"/net/*; do
      [[ -e $n ]] || continue
      rm -rf "$sys/class/net/${n##*/}" "$n" "$FAKE/net/${n##*/}.addrs"
      [[ -e $FAKE/net/routes ]] && sed -i "/ dev ${n##*/}\$/d" "$FAKE/net/routes"
    done
    rm -f "$d/driver" ;;
  */drivers_probe)
    [[ -e $dev/driver ]] && exit 0
    o=$(cat "$dev/driver_override")
    if [[ $o != '(null)' ]]; then
      [[ -d $sys/bus/pci/drivers/$o ]] && attach "$dev" "$o"
    else
      m=$(cat "$dev/matches")
      [[ -d $sys/bus/pci/drivers/$m ]] && attach "$dev" "$m"
    fi ;;
  */bind)
    drv=${path%/bind}
    attach "$dev" "${drv##*/}" ;;
esac
exit 0
EOF

# modprobe: the modules a kernel could load, each a directory in sys/module.
cat >"$tmp/bin-modprobe" <<'EOF'
#!/usr/bin/env bash
sys=$FAKE/sys
echo "modprobe $*" >>"$FAKE/log"
known=" vfio vfio-pci vfio_pci vfio_iommu_type1 uio_pci_generic "
load() {
  mkdir -p "$sys/module/$1"
  case $1 in
    vfio) mkdir -p "$sys/module/vfio/parameters"
          [[ -e $sys/module/vfio/parameters/enable_unsafe_noiommu_mode ]] ||
            echo "${noiommu:-N}" >"$sys/module/vfio/parameters/enable_unsafe_noiommu_mode" ;;
    vfio_pci) load vfio; mkdir -p "$sys/module/vfio_pci_core" "$sys/bus/pci/drivers/vfio-pci" ;;
    vfio_iommu_type1) mkdir -p "$sys/module/vfio_iommu_type1/parameters"
          echo "${unsafe:-N}" >"$sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts" ;;
    uio_pci_generic) mkdir -p "$sys/module/uio" "$sys/bus/pci/drivers/uio_pci_generic" ;;
  esac
}
if [[ $1 == -n ]]; then [[ $known == *" $3 "* ]]; exit; fi
if [[ $1 == -r ]]; then
  m=${2//-/_}
  case $m in
    vfio) [[ -d $sys/module/vfio_pci_core ]] && exit 1 ;;
    vfio_pci_core) [[ -d $sys/module/vfio_pci ]] && exit 1 ;;
    vfio_pci) rm -rf "$sys/bus/pci/drivers/vfio-pci" ;;
  esac
  rm -rf "${sys:?}/module/$m"
  exit 0
fi
m=${1//-/_}
[[ $known == *" $1 "* ]] || exit 1
[[ ${2:-} == enable_unsafe_noiommu_mode=1 ]] && noiommu=Y
[[ ${2:-} == allow_unsafe_interrupts=1 ]] && unsafe=Y
load "$m"
EOF

# ip: addresses and routes in files under $FAKE/net, link state in sysfs.
cat >"$tmp/bin-ip" <<'EOF'
#!/usr/bin/env bash
sys=$FAKE/sys net=$FAKE/net
echo "ip $*" >>"$FAKE/log"
fam=4
[[ $1 == -o ]] && shift
[[ $1 == -4 || $1 == -6 ]] && { fam=${1#-}; shift; }
case "$1 $2" in
  "addr show")
    i=$4
    [[ -e $sys/class/net/$i ]] || exit 1
    while read -r a; do echo "2: $i    inet $a scope global $i\\"; done <"$net/$i.addrs" 2>/dev/null ;;
  "addr add")
    echo "$3" >>"$net/$5.addrs" ;;
  "route show")
    if [[ $3 == default ]]; then
      [[ $fam == 4 ]] && cat "$net/routes" 2>/dev/null
    else
      [[ $fam == 4 ]] && sed -n "s/ dev $4\$//p" "$net/routes" 2>/dev/null
    fi ;;
  "route replace")
    shift 2
    echo "$*" >>"$net/routes" ;;
  "link set")
    i=$3
    case $4 in
      up) echo 0x1003 >"$sys/class/net/$i/flags" ;;
      down) echo 0x1002 >"$sys/class/net/$i/flags"; ;;
      name)
        d=$(readlink -f "$sys/class/net/$i/device")
        mv "$sys/class/net/$i" "$sys/class/net/$5"
        mv "$d/net/$i" "$d/net/$5"
        [[ -e $net/$i.addrs ]] && mv "$net/$i.addrs" "$net/$5.addrs" ;;
    esac ;;
esac
exit 0
EOF

# modinfo: vfio has its no-IOMMU switch unless the machine says not
# (Debian 12's kernel: CONFIG_VFIO_NOIOMMU off).
cat >"$tmp/bin-modinfo" <<'EOF'
#!/usr/bin/env bash
[[ ${*: -1} == vfio ]] || exit 1
[[ -e $FAKE/no-noiommu ]] || echo "enable_unsafe_noiommu_mode:Enable UNSAFE, no-IOMMU mode. (bool)"
EOF

cat >"$tmp/bin-mount" <<'EOF'
#!/usr/bin/env bash
echo "mount $*" >>"$FAKE/log"
echo "nodev ${*: -1} hugetlbfs rw,relatime,${4} 0 0" >>"$FAKE/proc/mounts"
EOF
cat >"$tmp/bin-umount" <<'EOF'
#!/usr/bin/env bash
echo "umount $*" >>"$FAKE/log"
[[ -e $FAKE/busy ]] && { echo "umount: $1: target is busy." >&2; exit 32; }
grep -v " $1 hugetlbfs " "$FAKE/proc/mounts" >"$FAKE/proc/mounts.new"
mv "$FAKE/proc/mounts.new" "$FAKE/proc/mounts"
EOF

mkdir -p "$tmp/bin"
for b in modprobe modinfo ip mount umount; do mv "$tmp/bin-$b" "$tmp/bin/$b"; done
chmod +x "$tmp/hook" "$tmp/bin"/*

# A machine with no IOMMU, no hugepages, nothing isolated, e1000e on
# 0000:00:04.0 as eth1, up, 10.9.0.5/24 and the default route; the kernel
# would name it eth7 on the next probe (udev's renaming is the case to undo).
make_machine() {
  rm -rf "$fake"
  mkdir -p "$sys/kernel/iommu_groups" "$sys/kernel/mm/hugepages/hugepages-2048kB" "$sys/module/e1000e" \
    "$sys/devices/system/cpu" "$sys/bus/pci/drivers/e1000e" "$dev" "$fake/proc/sys/vm" "$fake/net"
  echo 0 >"$sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
  : >"$sys/devices/system/cpu/isolated"
  : >"$sys/bus/pci/drivers_probe"
  echo '(null)' >"$dev/driver_override"
  echo e1000e >"$dev/matches"
  echo eth1 >"$dev/kernel_name"
  NIC_SETUP_SYSFS_HOOK='' FAKE=$fake "$tmp/hook" "$sys/bus/pci/drivers/e1000e/bind" "$pci"
  echo eth7 >"$dev/kernel_name"
  echo 0x1003 >"$sys/class/net/eth1/flags"
  echo 10.9.0.5/24 >"$fake/net/eth1.addrs"
  echo "default via 10.9.0.1 dev eth1" >"$fake/net/routes"
  echo "console=ttyS0 root=/dev/vda" >"$fake/proc/cmdline"
  echo "proc /proc proc rw 0 0" >"$fake/proc/mounts"
  echo 1 >"$fake/proc/sys/vm/compact_unevictable_allowed"
  : >"$fake/log"
}

# The tool on the made-up machine: its output in $out, its status in $rc.
run() {
  out=$(FAKE=$fake PATH="$tmp/bin:$PATH" NIC_SETUP_SYSFS=$sys NIC_SETUP_PROC=$fake/proc \
    NIC_SETUP_STATE=$fake/run NIC_SETUP_SYSFS_HOOK=$tmp/hook NIC_SETUP_HUGETLBFS=$fake/hugepages \
    "$tool" "$@" 2>&1)
  rc=$?
}

# expect WHAT STATUS LINE...: the last run exited STATUS and printed each
# LINE as the start of one of its lines.
expect() {
  local what=$1 status=$2 line
  shift 2
  [[ $rc == "$status" ]] || fail "$what: exit status $rc, not $status; output:"$'\n'"$out"
  for line in "$@"; do
    grep -qF -- "$line" <<<"$out" || fail "$what: no line '$line'; output:"$'\n'"$out"
  done
}
expect_no() {
  local what=$1 line=$2
  ! grep -qF -- "$line" <<<"$out" || fail "$what: printed '$line'; output:"$'\n'"$out"
}
expect_eq() { [[ $2 == "$3" ]] || fail "$1: '$2', not '$3'"; }
driver_of() { basename "$(readlink "$dev/driver" 2>/dev/null)"; }
modules() { local m; for m in "$sys/module"/*; do [[ -e $m ]] && printf '%s ' "${m##*/}"; done; }

# ---- the findings ---------------------------------------------------------

make_machine
run --check --nic eth1
expect "check" 1 \
  "nic-setup: note: no IOMMU (no entries in /sys/kernel/iommu_groups; intel_iommu=on is not on the kernel cmdline): use --driver vfio-noiommu or --driver uio" \
  "nic-setup: no 2M hugepages reserved: run with --pages N, or add hugepagesz=2M hugepages=N to the kernel cmdline" \
  "nic-setup: hugetlbfs (pagesize=2M) is not mounted: mount -t hugetlbfs -o pagesize=2M" \
  "nic-setup: note: no isolated cores (isolcpus/nohz_full absent from the kernel cmdline): add isolcpus=" \
  "nic-setup: $pci is bound to kernel driver e1000e (interface eth1, up, addresses 10.9.0.5/24, the default route): unbinding it cuts those off: tools/nic-setup.sh --nic $pci --force" \
  "nic-setup: vm.compact_unevictable_allowed is 1: with IOVA as PA, compaction may move a 4 KiB page of a region while a device reads it: sysctl -w vm.compact_unevictable_allowed=0" \
  "nic-setup: not ready: 4 problem(s)"
[[ $(grep -c '^nic-setup: ' <<<"$out") == "$(wc -l <<<"$out")" ]] || fail "check: a line not from nic-setup:"$'\n'"$out"

# By PCI address (short form) and without the address: the fix is to bind.
rm "$fake/net/eth1.addrs" "$fake/net/routes"
run --check --nic 00:04.0
expect "check, NIC idle" 1 "nic-setup: $pci is bound to kernel driver e1000e (interface eth1, up): tools/nic-setup.sh --nic $pci binds it to vfio-pci"
make_machine

# Hugepages reserved, none free.
echo 16 >"$sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
echo 0 >"$sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"
run --check
expect "check hugepages in use" 1 "nic-setup: all 16 2M hugepages are in use: reserve more (--pages N)"
expect_no "check hugepages in use" "hugepages reserved"
make_machine

# vfio-pci asked for without an IOMMU: a problem, no longer a note.
run --check --driver vfio-pci
expect "check vfio-pci" 1 "nic-setup: no IOMMU (no entries in /sys/kernel/iommu_groups; intel_iommu=on is not on the kernel cmdline): use --driver vfio-noiommu"
echo "console=ttyS0 intel_iommu=on" >"$fake/proc/cmdline"
run --check --driver vfio-pci
expect "check vfio-pci, cmdline asks" 1 "nic-setup: no IOMMU (no entries in /sys/kernel/iommu_groups; the kernel cmdline asks for one: is VT-d/AMD-Vi enabled in the firmware?)"

# Without an IOMMU: compaction may move 4 KiB pages of a region, and DPDK
# itself cannot run on them (--no-huge has no physical addresses).
run --check --pages 0 --driver uio
expect "check 4 KiB" 1 "nic-setup: vm.compact_unevictable_allowed is 1: with IOVA as PA, compaction may move a 4 KiB page" \
  "nic-setup: --pages 0 with IOVA as PA (uio): DPDK's --no-huge memory has no physical addresses, so it cannot drive the NIC: hugepages for DPDK's own memory"
expect_no "check 4 KiB" "hugepages reserved"
run --nic eth1 --pages 0 --driver uio --force
expect "set-up 4 KiB, uio" 1 "nic-setup: --pages 0 with IOVA as PA (uio): DPDK's --no-huge memory has no physical addresses (give --pages N)"
expect_eq "set-up 4 KiB, uio: driver" "$(driver_of)" e1000e
run --check --pages 0 --driver vfio-pci
expect_no "check 4 KiB, vfio-pci" "compact"
expect_no "check 4 KiB, vfio-pci" "--pages 0 with"

# A module the kernel does not have.
mv "$tmp/bin/modprobe" "$tmp/modprobe.real"
printf '#!/bin/sh\nexit 1\n' >"$tmp/bin/modprobe"
chmod +x "$tmp/bin/modprobe"
run --check --driver uio
expect "check module" 1 "nic-setup: module uio_pci_generic is not loadable: install the kernel's modules"
mv "$tmp/modprobe.real" "$tmp/bin/modprobe"

# An IOMMU group the NIC shares with a device on another driver.
mkdir -p "$sys/kernel/iommu_groups/7/devices" "$sys/bus/pci/devices/0000:00:04.1" "$sys/bus/pci/drivers/snd_hda_intel"
ln -s "$sys/kernel/iommu_groups/7" "$dev/iommu_group"
ln -s "$dev" "$sys/kernel/iommu_groups/7/devices/$pci"
ln -s "$sys/bus/pci/devices/0000:00:04.1" "$sys/kernel/iommu_groups/7/devices/0000:00:04.1"
ln -s "$sys/bus/pci/drivers/snd_hda_intel" "$sys/bus/pci/devices/0000:00:04.1/driver"
run --check --nic "$pci"
expect "check group" 1 "nic-setup: IOMMU group 7 of $pci also holds 0000:00:04.1 (snd_hda_intel): vfio needs every device of the group"
expect_no "check group" "no IOMMU"

# An IOMMU that does not remap interrupts (a vIOMMU without intremap=on):
# vfio_iommu_type1 would refuse the group. A problem, a refused set-up, and
# with --unsafe-interrupts a set-up that turns it on (and an undo that
# unloads the module it loaded). Interrupts shown as IR-: no such line.
run --check --nic "$pci" --driver vfio-pci
expect "check no IR" 1 "nic-setup: the IOMMU does not remap interrupts (no IR- in /proc/interrupts): vfio-pci will not take the NIC" \
  "or --unsafe-interrupts"
run --nic "$pci" --driver vfio-pci --force --pages 2
expect "set-up no IR" 1 "nic-setup: the IOMMU does not remap interrupts: not binding to vfio-pci"
expect_eq "set-up no IR: driver" "$(driver_of)" e1000e
rm -f "$sys/kernel/iommu_groups/7/devices/0000:00:04.1"
run --nic "$pci" --driver vfio-pci --force --pages 2 --unsafe-interrupts
expect "set-up unsafe interrupts" 0 "nic-setup: vfio_iommu_type1: allow_unsafe_interrupts on" "nic-setup: $pci: e1000e -> vfio-pci" "nic-setup: ready"
expect_eq "unsafe interrupts on" "$(cat "$sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts")" Y
run --undo
expect "undo unsafe interrupts" 0 "nic-setup: undone"
[[ ! -e $sys/module/vfio_iommu_type1 ]] || fail "undo left vfio_iommu_type1 loaded"
expect_eq "undo unsafe interrupts: driver" "$(driver_of)" e1000e
printf '  0:  1  IR-IO-APIC  2-edge  timer\n' >"$fake/proc/interrupts"
run --check --nic "$pci" --driver vfio-pci
expect_no "check with IR" "remap"
# qemu's intel-iommu by default: 39-bit addresses (cap d2008c22260206).
mkdir -p "$sys/class/iommu/dmar0/intel-iommu"
echo d2008c22260206 >"$sys/class/iommu/dmar0/intel-iommu/cap"
run --check --nic "$pci" --driver vfio-pci --pages 0
# A note, not a problem: uroce maps regions the IOMMU cannot reach at IOVAs of its
# own (the status is the bound NIC's).
expect "check 39-bit IOMMU" 1 "nic-setup: note: the IOMMU maps 39-bit addresses, user space reaches 47 bits: uroce maps regions above 512 GiB at IOVAs of its own below 4 GiB (at most about 2.75 GiB of them at once): for more, an IOMMU with 48 bits (qemu: -device intel-iommu,aw-bits=48)"
expect_no "check 39-bit IOMMU: a note only" "nic-setup: the IOMMU maps"
# aw-bits=48: d2008c22260206 with MGAW 47.
echo d2008c222f0206 >"$sys/class/iommu/dmar0/intel-iommu/cap"
run --check --nic "$pci" --driver vfio-pci --pages 0
expect_no "check 48-bit IOMMU" "bit addresses"
rm -r "$sys/class/iommu"
# 4 KiB pages behind an IOMMU: the first thing the set-up saves is a module
# it loads (seen failing in a guest when the state directory did not exist).
rm -f "$sys/kernel/iommu_groups/7/devices/0000:00:04.1"
run --nic "$pci" --driver vfio-pci --force --pages 0
expect "set-up vfio-pci, 4 KiB" 0 "nic-setup: $pci: e1000e -> vfio-pci" "nic-setup: ready"
run --undo
expect "undo vfio-pci, 4 KiB" 0 "nic-setup: undone"
expect_eq "undo vfio-pci, 4 KiB: modules" "$(modules)" "e1000e "
rm "$fake/proc/interrupts"
ln -s "$sys/bus/pci/devices/0000:00:04.1" "$sys/kernel/iommu_groups/7/devices/0000:00:04.1"

# A kernel without vfio's no-IOMMU mode: asked for, a problem; by default
# the set-up takes uio_pci_generic instead.
touch "$fake/no-noiommu"
run --check --driver vfio-noiommu
expect "check no noiommu" 1 "nic-setup: the kernel's vfio has no no-IOMMU mode (CONFIG_VFIO_NOIOMMU is off): use --driver uio"
rm -f "$sys/kernel/iommu_groups/7/devices"/* && rmdir "$sys/kernel/iommu_groups/7/devices" "$sys/kernel/iommu_groups/7"
run --nic eth1 --pages 4 --force
expect "set-up, no noiommu" 0 "nic-setup: $pci: e1000e -> uio_pci_generic" "nic-setup: ready"
run --undo
expect "undo, no noiommu" 0 "nic-setup: undone"
expect_eq "undo, no noiommu: driver" "$(driver_of)" e1000e

# The NIC as the last word, as with --nic.
make_machine
run --check "$pci"
expect "check, NIC as a word" 1 "nic-setup: $pci is bound to kernel driver e1000e (interface eth1, up, addresses 10.9.0.5/24"

# Bad usage: one line, status 2.
for bad in "--driver igb" "--pages x" "--page-size 4K" "--bogus" "eth1 eth2"; do
  # shellcheck disable=SC2086 # the words are the arguments
  run $bad
  expect "usage $bad" 2 "nic-setup: "
  [[ $(wc -l <<<"$out") == 1 ]] || fail "usage $bad: more than one line: $out"
done

# ---- set-up and undo ------------------------------------------------------

make_machine
run --nic eth1 --pages 64
expect "set-up, busy NIC" 1 "nic-setup: refusing to unbind $pci: eth1 has addresses 10.9.0.5/24; eth1 carries the default route; give --force"
expect_eq "refused: driver" "$(driver_of)" e1000e
expect_eq "refused: hugepages" "$(cat "$sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")" 0
[[ ! -e $fake/run/STATE ]] || fail "refused set-up left a state file"

run --nic eth1 --pages 64 --force
expect "set-up" 0 "nic-setup: 2M hugepages: 0 -> 64 (asked 64)" "nic-setup: hugetlbfs (pagesize=2M) mounted on $fake/hugepages" \
  "nic-setup: $pci: e1000e -> vfio-pci" "nic-setup: ready"
expect_eq "set-up: driver" "$(driver_of)" vfio-pci
expect_eq "set-up: override" "$(cat "$dev/driver_override")" vfio-pci
expect_eq "set-up: noiommu" "$(cat "$sys/module/vfio/parameters/enable_unsafe_noiommu_mode" 2>/dev/null)" Y
expect_eq "set-up: hugepages" "$(cat "$sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")" 64
expect_eq "set-up: compaction" "$(cat "$fake/proc/sys/vm/compact_unevictable_allowed")" 0
grep -q " $fake/hugepages hugetlbfs .*pagesize=2M" "$fake/proc/mounts" || fail "set-up: hugetlbfs not mounted: $(cat "$fake/proc/mounts")"
[[ ! -e $sys/class/net/eth1 ]] || fail "set-up: eth1 still there"

# Again: nothing changes, and --undo still restores the first state.
run --nic "$pci" --pages 64
expect "set-up again" 0 "nic-setup: $pci already on vfio-pci" "nic-setup: ready"
expect_no "set-up again" "mounted on"
run --check --nic "$pci" --pages 64
expect "check after set-up" 0 "nic-setup: ready"

run --undo
expect "undo" 0 "nic-setup: $pci back on e1000e" "nic-setup: interface eth1 restored (up)" "nic-setup: hugepages back to 0" "nic-setup: undone"
expect_eq "undo: driver" "$(driver_of)" e1000e
expect_eq "undo: override" "$(cat "$dev/driver_override")" '(null)'
expect_eq "undo: interface" "$(ls "$dev/net")" eth1
expect_eq "undo: link" "$(cat "$sys/class/net/eth1/flags" 2>/dev/null)" 0x1003
expect_eq "undo: address" "$(cat "$fake/net/eth1.addrs" 2>/dev/null)" 10.9.0.5/24
grep -q "^default via 10.9.0.1 dev eth1$" "$fake/net/routes" || fail "undo: default route: $(cat "$fake/net/routes")"
expect_eq "undo: hugepages" "$(cat "$sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")" 0
expect_eq "undo: compaction" "$(cat "$fake/proc/sys/vm/compact_unevictable_allowed")" 1
! grep -q hugetlbfs "$fake/proc/mounts" || fail "undo: hugetlbfs still mounted"
expect_eq "undo: modules" "$(modules)" "e1000e "
[[ ! -e $fake/run/STATE ]] || fail "undo: state file left"
run --undo
expect "undo twice" 0 "nic-setup: nothing to undo"

# An undo that stops half-way (the mount is busy) keeps only what is left
# to restore; run again once it is free, it finishes.
make_machine
run --nic eth1 --pages 16 --force
expect "set-up before a busy undo" 0 "nic-setup: ready"
touch "$fake/busy"
run --undo
expect "busy undo" 1 "nic-setup: cannot unmount $fake/hugepages: umount it once nothing uses it" "nic-setup: undo incomplete: 1 problem(s)"
expect_eq "busy undo: driver" "$(driver_of)" e1000e
expect_eq "busy undo: state left" "$(cut -d= -f1 "$fake/run/STATE" | tr '\n' ' ')" "hugetlbfs_mounted "
rm "$fake/busy"
run --undo
expect "undo after busy" 0 "nic-setup: undone"
expect_no "undo after busy" "back on"
! grep -q hugetlbfs "$fake/proc/mounts" || fail "undo after busy: hugetlbfs still mounted"

# vfio already loaded with no-IOMMU off, an idle NIC, uio... each restored:
# vfio's switch goes back to N and stays loaded; without an IOMMU the set-up
# turns compaction of locked pages off and --undo turns it back on.
make_machine
rm "$fake/net/eth1.addrs" "$fake/net/routes"
FAKE=$fake "$tmp/bin/modprobe" vfio-pci
run --nic eth1 --driver vfio-noiommu --pages 4
expect "set-up noiommu" 0 "nic-setup: vm.compact_unevictable_allowed set to 0" "nic-setup: $pci: e1000e -> vfio-pci" "nic-setup: ready"
expect_eq "noiommu on" "$(cat "$sys/module/vfio/parameters/enable_unsafe_noiommu_mode")" Y
expect_eq "compaction off" "$(cat "$fake/proc/sys/vm/compact_unevictable_allowed")" 0
run --undo
expect "undo noiommu" 0 "nic-setup: undone"
expect_eq "noiommu back" "$(cat "$sys/module/vfio/parameters/enable_unsafe_noiommu_mode")" N
expect_eq "compaction back" "$(cat "$fake/proc/sys/vm/compact_unevictable_allowed")" 1
[[ -d $sys/module/vfio_pci ]] || fail "undo unloaded vfio-pci, which it had not loaded"
expect_eq "undo: driver" "$(driver_of)" e1000e

make_machine
run --nic "$pci" --driver uio --pages 8 --force
expect "set-up uio" 0 "nic-setup: $pci: e1000e -> uio_pci_generic" "nic-setup: ready"
expect_eq "uio: driver" "$(driver_of)" uio_pci_generic
run --undo
expect "undo uio" 0 "nic-setup: undone"
expect_eq "undo uio: driver" "$(driver_of)" e1000e
expect_eq "undo uio: modules" "$(modules)" "e1000e "

# ---- result ---------------------------------------------------------------

if ((${#failures[@]} == 0)); then
  echo "nic_setup_test: all checks passed"
  message=''
else
  echo "nic_setup_test: ${#failures[@]} failed"
  message="${failures[*]}"
fi
if [[ ${GTEST_OUTPUT:-} == xml:*/ ]]; then
  dir=${GTEST_OUTPUT#xml:}
  mkdir -p "$dir"
  python3 "$here/case_report.py" "$dir/nic_setup_test.xml" Tools NicSetup ${message:+"$message"}
fi
((${#failures[@]} == 0))
