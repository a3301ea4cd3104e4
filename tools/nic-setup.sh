#!/usr/bin/env bash
# The set-up a machine needs before uroce drives one of its NICs with a DPDK
# PMD (docs/nic-setup.md): the NIC bound to vfio-pci (with an IOMMU), to
# vfio-pci in no-IOMMU mode or to uio_pci_generic (without one), hugepages
# reserved and mounted; and the checks of what is missing, one line each
# with its fix. --undo puts back what it found.
#
#   nic-setup.sh --check [--nic PCI|IFACE] [--driver D] [--pages N] [--page-size S]
#                      report only; exit 0 when the set-up is ready
#   nic-setup.sh [--nic PCI|IFACE] [--driver D] [--pages N] [--page-size S] [--force]
#                [--unsafe-interrupts]
#                      check, then set up what is asked; exit 0 when ready
#   nic-setup.sh --undo
#                      restore what the set-up changed (saved in /run/uroce-nic-setup/STATE)
#
#   --nic PCI|IFACE    the NIC: a PCI address (0000:00:03.0 or 00:03.0) or its
#                      kernel interface name (eth1); also as the last word, without --nic
#   --driver D         vfio-pci (IOMMU; IOVA as VA), vfio-noiommu (vfio-pci with
#                      enable_unsafe_noiommu_mode=1; IOVA as PA), uio (uio_pci_generic;
#                      IOVA as PA); default: vfio-pci with an IOMMU, else vfio-noiommu
#                      where the kernel has it (CONFIG_VFIO_NOIOMMU), else uio
#   --pages N          hugepages to reserve (of --page-size); 0: none, DPDK on 4 KiB
#                      pages (--no-huge), which needs vfio-pci with an IOMMU. Without
#                      an IOMMU, vm.compact_unevictable_allowed is set to 0, so that
#                      compaction does not move a region's 4 KiB page under a DMA
#   --page-size 2M|1G  hugepage size (default 2M)
#   --force            unbind a NIC that carries an address or the default route
#                      (its addresses and routes are saved and restored by --undo)
#   --unsafe-interrupts  vfio-pci on an IOMMU that does not remap interrupts (a VM's
#                      vIOMMU without intremap=on): vfio_iommu_type1 with
#                      allow_unsafe_interrupts=1 (a device could then raise
#                      interrupts it was not given)
#
# Each problem is one line "nic-setup: <what>: <fix>"; advice that does not
# stop a set-up from working is "nic-setup: note: <what>: <fix>". Exit status:
# 0 ready, 1 not ready or an action failed, 2 bad usage. Needs root to act.
#
# For tests, NIC_SETUP_SYSFS and NIC_SETUP_PROC replace /sys and /proc,
# NIC_SETUP_STATE the state directory, NIC_SETUP_HUGETLBFS the mount point
# (default /dev/hugepages; 1G pages: its name + 1G), and NIC_SETUP_SYSFS_HOOK names a
# program run after each sysfs write (PATH VALUE) that plays the kernel.
set -uo pipefail

sys=${NIC_SETUP_SYSFS:-/sys}
proc=${NIC_SETUP_PROC:-/proc}
state_dir=${NIC_SETUP_STATE:-/run/uroce-nic-setup}
state=$state_dir/STATE
hugetlbfs_dir=${NIC_SETUP_HUGETLBFS:-/dev/hugepages}
me="tools/nic-setup.sh"

mode=setup nic='' driver='' pages='' page_size=2M force=0 unsafe_interrupts=0
problems=0

problem() { echo "nic-setup: $1: $2"; problems=$((problems + 1)); }
note() { echo "nic-setup: note: $1: $2"; }
say() { echo "nic-setup: $*"; }
die() { echo "nic-setup: $*" >&2; exit 1; }
usage_error() { echo "nic-setup: $* (see $me --help)" >&2; exit 2; }
usage() { sed -n '2,/^set -uo/{/^#/s/^# \{0,1\}//p}' "$0"; }

# A write to sysfs or procfs, then the test's kernel stand-in if there is one.
sysfs_write() {
  local path=$1 value=$2
  printf '%s\n' "$value" >"$path" 2>/dev/null || return 1
  if [[ -n ${NIC_SETUP_SYSFS_HOOK:-} ]]; then "$NIC_SETUP_SYSFS_HOOK" "$path" "$value" || return 1; fi
}

parse_args() {
  while (($# > 0)); do
    case $1 in
      --check) mode=check ;;
      --undo) mode=undo ;;
      --force) force=1 ;;
      --unsafe-interrupts) unsafe_interrupts=1 ;;
      --nic) (($# > 1)) || usage_error "--nic needs a PCI address or an interface"; nic=$2; shift ;;
      --driver) (($# > 1)) || usage_error "--driver needs a value"; driver=$2; shift ;;
      --pages) (($# > 1)) || usage_error "--pages needs a number"; pages=$2; shift ;;
      --page-size) (($# > 1)) || usage_error "--page-size needs 2M or 1G"; page_size=$2; shift ;;
      -h | --help) usage; exit 0 ;;
      -*) usage_error "unknown argument '$1'" ;;
      *) [[ -z $nic ]] || usage_error "one NIC at a time ('$nic', then '$1')"; nic=$1 ;;
    esac
    shift
  done
  case $driver in
    '' | vfio-pci | vfio-noiommu | uio) ;;
    *) usage_error "--driver: vfio-pci, vfio-noiommu or uio, not '$driver'" ;;
  esac
  [[ -z $pages || $pages =~ ^[0-9]+$ ]] || usage_error "--pages: a number of hugepages, not '$pages'"
  case $page_size in
    2M | 2m) page_size=2M hp_kb=2048 ;;
    1G | 1g) page_size=1G hp_kb=1048576 ;;
    *) usage_error "--page-size: 2M or 1G, not '$page_size'" ;;
  esac
  hp_dir=$sys/kernel/mm/hugepages/hugepages-${hp_kb}kB
}

# ---- what the machine has -------------------------------------------------

have_iommu() { [[ -n $(ls -A "$sys/kernel/iommu_groups" 2>/dev/null) ]]; }
cmdline() { cat "$proc/cmdline" 2>/dev/null; }
has_word() { [[ " $(cmdline) " =~ [[:space:]]$1 ]]; }

module_loaded() { [[ -d $sys/module/$1 ]]; }
# A module is there when loaded (or built in), or when modprobe could load it.
module_available() {
  module_loaded "${1//-/_}" && return 0
  command -v modprobe >/dev/null 2>&1 && modprobe -n -q "$1" 2>/dev/null
}

# The PCI address of --nic in $pci ("" if none such).
resolve_nic() {
  pci=''
  [[ -n $nic ]] || return 0
  local n=$nic
  [[ $n =~ ^[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]] && n=0000:$n
  if [[ -e $sys/bus/pci/devices/$n ]]; then
    pci=$n
  elif [[ -e $sys/class/net/$n/device ]]; then
    # A virtio NIC's interface hangs off virtioN, under the PCI device.
    local dev
    dev=$(readlink -f "$sys/class/net/$n/device")
    [[ ${dev##*/} == virtio* ]] && dev=${dev%/*}
    pci=${dev##*/}
  fi
}

nic_driver() { local d; d=$(readlink "$sys/bus/pci/devices/$1/driver" 2>/dev/null) && basename "$d"; }
nic_ifaces() {
  local d
  for d in "$sys/bus/pci/devices/$1"/net/* "$sys/bus/pci/devices/$1"/virtio*/net/*; do
    [[ -e $d ]] && echo "${d##*/}"
  done
}
iface_up() { local f; f=$(cat "$sys/class/net/$1/flags" 2>/dev/null) && (((f & 1) == 1)); }
# Global addresses of IFACE, one "inet 10.0.0.1/24" a line.
iface_addrs() { ip -o addr show dev "$1" scope global 2>/dev/null | awk '{print $3, $4}'; }
# (grep reads a variable, not a pipe: with pipefail, grep -q closing the pipe early fails it.)
carries_default_route() {
  local r
  r=$({ ip route show default; ip -6 route show default; } 2>/dev/null)
  grep -qw "dev $1" <<<"$r"
}
is_dpdk_driver() { [[ $1 == vfio-pci || $1 == uio_pci_generic || $1 == igb_uio ]]; }

# Whether vfio has a no-IOMMU mode (CONFIG_VFIO_NOIOMMU; Debian 12's kernel
# has none): the parameter once vfio is loaded, modinfo's list before.
noiommu_supported() {
  if module_loaded vfio; then
    [[ -e $sys/module/vfio/parameters/enable_unsafe_noiommu_mode ]]
  elif command -v modinfo >/dev/null 2>&1 && modinfo vfio >/dev/null 2>&1; then
    [[ $(modinfo -p vfio 2>/dev/null) == *enable_unsafe_noiommu_mode* ]]
  fi
}

# The driver the set-up uses: --driver, else by whether there is an IOMMU
# and whether vfio can do without one.
effective_driver() {
  if [[ -n $driver ]]; then echo "$driver"
  elif have_iommu; then echo vfio-pci
  elif noiommu_supported; then echo vfio-noiommu
  else echo uio
  fi
}
driver_module() { case $1 in vfio-pci | vfio-noiommu) echo vfio-pci ;; uio) echo uio_pci_generic ;; esac; }

# ---- checks ---------------------------------------------------------------

check_iommu() {
  local d=$1
  if have_iommu; then
    return
  fi
  local why="no IOMMU (no entries in /sys/kernel/iommu_groups"
  if has_word intel_iommu=on || has_word amd_iommu=on; then
    why+="; the kernel cmdline asks for one: is VT-d/AMD-Vi enabled in the firmware?)"
  else
    why+="; intel_iommu=on is not on the kernel cmdline)"
  fi
  local fix="use --driver vfio-noiommu or --driver uio (IOVA as PA)"
  noiommu_supported || fix="use --driver uio (IOVA as PA; this kernel's vfio has no no-IOMMU mode)"
  fix+=", or enable VT-d/AMD-Vi in the firmware and add intel_iommu=on iommu=pt to the kernel cmdline"
  if [[ $d == vfio-pci ]]; then problem "$why" "$fix"; else note "$why" "$fix"; fi
}

# vfio_iommu_type1 attaches a group only where the IOMMU remaps interrupts
# (so a device cannot raise one it was not given), unless told otherwise;
# DPDK then says only "failed to select IOMMU type". On x86, remapped
# interrupts show in /proc/interrupts as IR-IO-APIC, IR-PCI-MSI.
interrupts_remapped() {
  [[ $(uname -m) == x86_64 || $(uname -m) == i?86 ]] || return 0
  [[ $(cat "$sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts" 2>/dev/null) == Y ]] && return 0
  grep -q 'IR-' "$proc/interrupts" 2>/dev/null
}

check_interrupt_remapping() {
  [[ $1 == vfio-pci ]] && have_iommu || return 0
  interrupts_remapped && return 0
  ((unsafe_interrupts)) && return 0
  problem "the IOMMU does not remap interrupts (no IR- in /proc/interrupts): vfio-pci will not take the NIC (DPDK: \"failed to select IOMMU type\")" \
    "enable interrupt remapping (firmware; no intremap=off; qemu: -machine q35,kernel-irqchip=split -device intel-iommu,intremap=on), or --unsafe-interrupts"
}

# The IOMMU's input address width (Intel: MGAW, bits 21:16 of the cap
# register, plus 1), of the NIC's IOMMU or the first; "" if unknown.
iommu_address_bits() {
  local cap f
  for f in "$sys/bus/pci/devices/${pci:-none}/iommu/intel-iommu/cap" "$sys"/class/iommu/*/intel-iommu/cap; do
    [[ -e $f ]] || continue
    cap=$(cat "$f")
    echo $((((0x${cap#0x} >> 16) & 0x3f) + 1))
    return
  done
}

# IOVA as VA: a region's IOVA is its virtual address, and user space
# addresses go up to 2^47. An IOMMU with fewer address bits (qemu's
# intel-iommu: 39 by default) cannot map a buffer above its reach at its
# own address ("Cannot set up DMA remapping, error 22"). DPDK keeps its own
# memory low enough; uroce maps such regions at IOVAs of its own below
# 4 GiB (regions_iova_chosen), about 2.75 GiB of them: a note, not a
# problem.
check_address_width() {
  [[ $1 == vfio-pci ]] && have_iommu || return 0
  local bits
  bits=$(iommu_address_bits)
  [[ -n $bits ]] && ((bits < 48)) || return 0
  note "the IOMMU maps ${bits}-bit addresses, user space reaches 47 bits: uroce maps regions above $((1 << (bits - 30))) GiB at IOVAs of its own below 4 GiB (at most about 2.75 GiB of them at once)" \
    "for more, an IOMMU with 48 bits (qemu: -device intel-iommu,aw-bits=48)"
}

check_module() {
  local d=$1 m
  m=$(driver_module "$d")
  if ! command -v modprobe >/dev/null 2>&1 && ! module_loaded "${m//-/_}"; then
    problem "modprobe is missing and $m is not loaded" "install kmod (apt-get install kmod)"
    return
  fi
  module_available "$m" || problem "module $m is not loadable" \
    "install the kernel's modules (linux-image-$(uname -r)), or pick another --driver"
  if [[ $d == vfio-noiommu ]] && ! noiommu_supported; then
    problem "the kernel's vfio has no no-IOMMU mode (CONFIG_VFIO_NOIOMMU is off)" "use --driver uio (uio_pci_generic)"
  fi
}

hugetlbfs_mounted() {
  local want=$1
  awk -v want="$want" '$3 == "hugetlbfs" {
      ps = "2M"; n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] ~ /^pagesize=/) ps = substr(o[i], 10)
      if (toupper(ps) == want) found = 1 }
    END { exit !found }' "$proc/mounts" 2>/dev/null
}

check_hugepages() {
  local d=$1 n
  # IOVA as PA: DPDK looks a region's IOVA up once, when it is registered; a
  # region on 4 KiB pages (an application's) may then be moved by compaction
  # while the device reads it. Hugepages are not moved.
  if [[ $d != vfio-pci ]] && [[ $(cat "$proc/sys/vm/compact_unevictable_allowed" 2>/dev/null) == 1 ]]; then
    problem "vm.compact_unevictable_allowed is 1: with IOVA as PA, compaction may move a 4 KiB page of a region while a device reads it" \
      "sysctl -w vm.compact_unevictable_allowed=0 (the set-up does it), or regions on hugepages only"
  fi
  if [[ $pages == 0 ]]; then
    # EAL's --no-huge memory has no physical addresses: seen in a guest on
    # uio, "Requested device ... cannot be used".
    [[ $d == vfio-pci ]] || problem "--pages 0 with IOVA as PA ($d): DPDK's --no-huge memory has no physical addresses, so it cannot drive the NIC" \
      "hugepages for DPDK's own memory (--pages N; regions may still be on 4 KiB pages), or an IOMMU and --driver vfio-pci"
    return
  fi
  if [[ ! -d $hp_dir ]]; then
    problem "no $page_size hugepages in this kernel ($hp_dir missing)" "use --page-size 2M, or hugepagesz=$page_size on the kernel cmdline"
    return
  fi
  n=$(cat "$hp_dir/nr_hugepages")
  if ((n == 0)); then
    problem "no $page_size hugepages reserved" "run with --pages N, or add hugepagesz=$page_size hugepages=N to the kernel cmdline (or, with an IOMMU, --pages 0 for 4 KiB pages)"
  elif [[ -n $pages ]] && ((n < pages)); then
    problem "$n of the $pages $page_size hugepages asked for are reserved" "free memory (or reserve at boot: hugepagesz=$page_size hugepages=$pages)"
  elif [[ $(cat "$hp_dir/free_hugepages" 2>/dev/null) == 0 ]]; then
    problem "all $n $page_size hugepages are in use" "reserve more (--pages N), or stop what holds them (files in hugetlbfs mounts, other DPDK processes)"
  fi
  hugetlbfs_mounted "$page_size" || problem "hugetlbfs (pagesize=$page_size) is not mounted" \
    "mount -t hugetlbfs -o pagesize=$page_size nodev $hugetlbfs_dir (the set-up does it)"
}

check_cores() {
  local iso
  iso=$(cat "$sys/devices/system/cpu/isolated" 2>/dev/null)
  if [[ -z $iso ]] && ! has_word isolcpus= && ! has_word nohz_full=; then
    note "no isolated cores (isolcpus/nohz_full absent from the kernel cmdline)" \
      "add isolcpus=2-3 nohz_full=2-3 rcu_nocbs=2-3 (your cores) to the kernel cmdline and give uroce those cores (-l 2,3)"
  fi
}

check_memlock() {
  local l
  l=$(ulimit -l)
  [[ $l == unlimited ]] && return
  if (($(id -u) == 0)); then
    note "memlock limit $l KiB" "root is exempt (CAP_IPC_LOCK); for another user: ulimit -l unlimited (limits.conf memlock)"
  else
    problem "memlock limit $l KiB: vfio pins every DMA-mapped page" "ulimit -l unlimited, or memlock unlimited in /etc/security/limits.conf"
  fi
}

check_group() {
  local p=$1 g other drv list=''
  g=$(readlink "$sys/bus/pci/devices/$p/iommu_group" 2>/dev/null) || return 0
  for other in "$sys/kernel/iommu_groups/${g##*/}/devices"/*; do
    other=${other##*/}
    [[ $other == "$p" || ! -e $sys/bus/pci/devices/$other ]] && continue
    drv=$(nic_driver "$other")
    # vfio accepts group members with no driver, vfio-pci's, or PCIe ports.
    [[ -z $drv || $drv == vfio-pci || $drv == pcieport || $drv == pci-stub ]] && continue
    list+=" $other ($drv)"
  done
  [[ -z $list ]] || problem "IOMMU group ${g##*/} of $p also holds$list" \
    "vfio needs every device of the group unbound or on vfio-pci: bind them too, or use another slot (or a platform with ACS)"
}

# The NIC's binding. Sets nic_busy when unbinding it would cut the machine off.
check_nic() {
  local d=$1 drv ifs i addrs up
  nic_busy=''
  if [[ -z $pci ]]; then
    problem "no PCI device or interface '$nic'" "give a PCI address from lspci -D or an interface from ip link"
    return
  fi
  drv=$(nic_driver "$pci")
  [[ $d == vfio-pci ]] && check_group "$pci"
  if [[ -z $drv ]]; then
    problem "$pci is bound to no driver" "$me --nic $pci binds it"
    return
  fi
  if is_dpdk_driver "$drv"; then
    if [[ $d == uio && $drv != uio_pci_generic ]] || [[ $d != uio && $drv == uio_pci_generic ]]; then
      problem "$pci is bound to $drv, not to the driver asked for ($d)" "$me --undo, then set up again"
    fi
    return
  fi
  ifs=$(nic_ifaces "$pci" | tr '\n' ' ')
  local what="$pci is bound to kernel driver $drv"
  for i in $ifs; do
    up=down; iface_up "$i" && up=up
    addrs=$(iface_addrs "$i" | awk '{print $2}' | paste -sd, -)
    what+=" (interface $i, $up"
    [[ -n $addrs ]] && { what+=", addresses $addrs"; nic_busy+=" $i has addresses $addrs;"; }
    if carries_default_route "$i"; then what+=", the default route"; nic_busy+=" $i carries the default route;"; fi
    what+=")"
  done
  if [[ -n $nic_busy ]]; then
    problem "$what" "unbinding it cuts those off: $me --nic $pci --force (--undo restores them), or pick another NIC"
  else
    problem "$what" "$me --nic $pci binds it to $(driver_module "$d")"
  fi
}

run_checks() {
  local d
  d=$(effective_driver)
  problems=0
  check_iommu "$d"
  check_interrupt_remapping "$d"
  check_address_width "$d"
  check_module "$d"
  check_hugepages "$d"
  check_memlock
  check_cores
  [[ -n $nic ]] && check_nic "$d"
  return 0
}

# ---- state ----------------------------------------------------------------

# Saves KEY=VALUE unless the state already has KEY: a second set-up keeps
# what the first one found, so --undo restores the machine as it was.
save() {
  mkdir -p "$state_dir" || die "cannot create $state_dir"
  grep -q "^$1=" "$state" 2>/dev/null && return
  printf '%s=%q\n' "$1" "$2" >>"$state"
}
# The value saved under KEY ("" if none); the file holds KEY=%q lines.
# shellcheck disable=SC1090 # the state file is ours
saved() { (. "$state" 2>/dev/null; printf '%s' "${!1:-}"); }
has_saved() { grep -q "^$1=" "$state" 2>/dev/null; }

# Modules present now, to find those the set-up loads.
modules_now() { local m; for m in "$sys/module"/*; do [[ -e $m ]] && echo "${m##*/}"; done | sort; }

load_module() {
  local before after new
  before=$(modules_now)
  modprobe "$@" || return 1
  after=$(modules_now)
  new=$(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')
  if [[ -n $new ]]; then
    local prev
    mkdir -p "$state_dir" || die "cannot create $state_dir"
    prev=$(saved modules_loaded)
    sed -i '/^modules_loaded=/d' "$state" 2>/dev/null
    printf 'modules_loaded=%q\n' "${prev:+$prev }${new% }" >>"$state"
  fi
}

# ---- set-up ---------------------------------------------------------------

set_up_hugepages() {
  local d=$1 n
  if [[ $d != vfio-pci && $(cat "$proc/sys/vm/compact_unevictable_allowed" 2>/dev/null) == 1 ]]; then
    save compact_unevictable_allowed 1
    sysfs_write "$proc/sys/vm/compact_unevictable_allowed" 0 || die "cannot write vm.compact_unevictable_allowed"
    say "vm.compact_unevictable_allowed set to 0"
  fi
  [[ $pages != 0 && -d $hp_dir ]] || return 0
  n=$(cat "$hp_dir/nr_hugepages")
  save hp_dir "$hp_dir"
  save hp_count "$n"
  if [[ -n $pages && $n != "$pages" ]]; then
    sysfs_write "$hp_dir/nr_hugepages" "$pages" || die "cannot write $hp_dir/nr_hugepages"
    say "$page_size hugepages: $n -> $(cat "$hp_dir/nr_hugepages") (asked $pages)"
  fi
  if ! hugetlbfs_mounted "$page_size" && (($(cat "$hp_dir/nr_hugepages") > 0)); then
    local at=$hugetlbfs_dir
    [[ $page_size == 1G ]] && at=${hugetlbfs_dir}1G
    mkdir -p "$at" 2>/dev/null
    mount -t hugetlbfs -o "pagesize=$page_size" nodev "$at" || die "cannot mount hugetlbfs on $at"
    save hugetlbfs_mounted "$at"
    say "hugetlbfs (pagesize=$page_size) mounted on $at"
  fi
}

# vfio's no-IOMMU switch on (vfio loaded with it, or the parameter flipped).
enable_noiommu() {
  local param=$sys/module/vfio/parameters/enable_unsafe_noiommu_mode
  if [[ -e $param ]]; then
    save noiommu "$(cat "$param")"
    [[ $(cat "$param") == Y ]] || sysfs_write "$param" 1 || die "cannot write $param"
  else
    save noiommu unloaded
    load_module vfio enable_unsafe_noiommu_mode=1 || die "cannot load vfio with enable_unsafe_noiommu_mode=1"
  fi
  [[ $(cat "$param" 2>/dev/null) == Y ]] || die "vfio's no-IOMMU mode did not turn on (CONFIG_VFIO_NOIOMMU?): use --driver uio"
}

# --unsafe-interrupts: vfio_iommu_type1's allow_unsafe_interrupts on.
allow_unsafe_interrupts() {
  local param=$sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts
  if [[ -e $param ]]; then
    save unsafe_interrupts "$(cat "$param")"
    [[ $(cat "$param") == Y ]] || sysfs_write "$param" 1 || die "cannot write $param"
  else
    save unsafe_interrupts unloaded
    load_module vfio_iommu_type1 allow_unsafe_interrupts=1 || die "cannot load vfio_iommu_type1 with allow_unsafe_interrupts=1"
  fi
  say "vfio_iommu_type1: allow_unsafe_interrupts on"
}

# The NIC's interface: its state, addresses and routes saved, then down.
take_iface_down() {
  local i=$1
  save iface "$i"
  local up=0
  iface_up "$i" && up=1
  save iface_up "$up"
  save iface_addrs "$(iface_addrs "$i" | paste -sd';' -)"
  # The routes the kernel makes again by itself (with an address, from a
  # router advertisement) are left to it.
  save iface_routes "$( (ip route show dev "$i"; ip -6 route show dev "$i") 2>/dev/null |
    grep -v -e 'proto kernel' -e 'proto ra' -e '^fe80::' -e '^multicast' |
    sed -E 's/ expires [0-9]+sec//' | paste -sd';' -)"
  ip link set "$i" down 2>/dev/null
}

bind_nic() {
  local d=$1 m drv i
  m=$(driver_module "$d")
  drv=$(nic_driver "$pci")
  [[ $drv == "$m" ]] && { say "$pci already on $m"; return; }
  [[ $d == vfio-noiommu ]] && enable_noiommu
  [[ $d == vfio-pci ]] && ((unsafe_interrupts)) && allow_unsafe_interrupts
  module_loaded "${m//-/_}" || load_module "$m" || die "cannot load $m"
  save nic "$pci"
  save nic_driver "$drv"
  save nic_override "$(cat "$sys/bus/pci/devices/$pci/driver_override" 2>/dev/null)"
  for i in $(nic_ifaces "$pci"); do take_iface_down "$i"; break; done
  sysfs_write "$sys/bus/pci/devices/$pci/driver_override" "$m" || die "cannot write $pci's driver_override"
  if [[ -n $drv ]]; then
    sysfs_write "$sys/bus/pci/devices/$pci/driver/unbind" "$pci" || die "cannot unbind $pci from $drv"
  fi
  sysfs_write "$sys/bus/pci/drivers_probe" "$pci" || die "cannot probe $pci"
  [[ $(nic_driver "$pci") == "$m" ]] || die "$pci did not bind to $m (dmesg says why)"
  say "$pci: ${drv:-no driver} -> $m"
}

cmd_setup() {
  local d
  (($(id -u) == 0)) || [[ -n ${NIC_SETUP_SYSFS:-} ]] || die "needs root to set up (--check does not)"
  resolve_nic
  run_checks
  d=$(effective_driver)
  if [[ $d == vfio-pci ]] && ! have_iommu; then
    local instead="--driver vfio-noiommu or --driver uio"
    noiommu_supported || instead="--driver uio"
    die "no IOMMU: not binding to vfio-pci (use $instead)"
  fi
  if [[ $d == vfio-pci && -n $pci ]] && ! interrupts_remapped && ((!unsafe_interrupts)); then
    die "the IOMMU does not remap interrupts: not binding to vfio-pci, which DPDK could not use (--unsafe-interrupts, or --driver uio)"
  fi
  if [[ $pages == 0 && $d != vfio-pci ]]; then
    die "--pages 0 with IOVA as PA ($d): DPDK's --no-huge memory has no physical addresses (give --pages N)"
  fi
  # Before changing anything: a NIC that carries the machine's traffic stays.
  if [[ -n $pci && -n ${nic_busy:-} && $force != 1 ]]; then
    die "refusing to unbind $pci:$nic_busy give --force to do it anyway"
  fi
  set_up_hugepages "$d"
  [[ -n $pci ]] && bind_nic "$d"
  say "checking again"
  run_checks
  report
}

report() {
  if ((problems == 0)); then
    say "ready"
    return 0
  fi
  say "not ready: $problems problem(s)"
  return 1
}

# ---- undo -----------------------------------------------------------------

restore_nic() {
  local p orig override now i want up
  p=$(saved nic)
  orig=$(saved nic_driver)
  override=$(saved nic_override)
  now=$(nic_driver "$p")
  [[ $override == "(null)" ]] && override=''
  # An empty write clears driver_override.
  sysfs_write "$sys/bus/pci/devices/$p/driver_override" "$override" ||
    { problem "cannot restore $p's driver_override" "echo '$override' > $sys/bus/pci/devices/$p/driver_override"; }
  if [[ $now != "$orig" ]]; then
    [[ -n $now ]] && { sysfs_write "$sys/bus/pci/devices/$p/driver/unbind" "$p" || problem "cannot unbind $p from $now" "see dmesg"; }
    if [[ -n $orig ]]; then
      sysfs_write "$sys/bus/pci/drivers_probe" "$p"
      [[ $(nic_driver "$p") == "$orig" ]] || sysfs_write "$sys/bus/pci/drivers/$orig/bind" "$p"
    fi
    now=$(nic_driver "$p")
    [[ $now == "$orig" ]] || problem "$p is on '${now:-no driver}', not its original '$orig'" "echo $p > $sys/bus/pci/drivers/$orig/bind"
  fi
  [[ -n $now ]] && say "$p back on $now"
  has_saved iface || return 0
  want=$(saved iface)
  # udev may name the new interface differently; give it its old name.
  for _ in {1..50}; do i=$(nic_ifaces "$p" | head -1); [[ -n $i ]] && break; sleep 0.1; done
  [[ -n $i ]] || { problem "$p has no interface after rebinding" "see dmesg"; return; }
  if [[ $i != "$want" ]]; then
    ip link set "$i" down 2>/dev/null
    ip link set "$i" name "$want" || { problem "cannot rename $i to $want" "ip link set $i name $want"; want=$i; }
  fi
  up=$(saved iface_up)
  if [[ $up == 1 ]]; then ip link set "$want" up || problem "cannot bring $want up" "ip link set $want up"; fi
  local a r
  IFS=';' read -ra a <<<"$(saved iface_addrs)"
  for r in "${a[@]}"; do
    [[ -n $r ]] || continue
    ip addr add "${r#* }" dev "$want" 2>/dev/null || [[ $(ip addr show dev "$want") == *" ${r#* } "* ]] ||
      problem "cannot restore address ${r#* } on $want" "ip addr add ${r#* } dev $want"
  done
  IFS=';' read -ra a <<<"$(saved iface_routes)"
  for r in "${a[@]}"; do
    [[ -n $r ]] || continue
    local fam=-4
    [[ $r == *:* ]] && fam=-6
    # shellcheck disable=SC2086 # a saved route is words for ip
    ip $fam route replace $r dev "$want" 2>/dev/null || problem "cannot restore route '$r' on $want" "ip route add $r dev $want"
  done
  say "interface $want restored ($([[ $up == 1 ]] && echo up || echo down))"
}

# Drops KEYs from the state: what is restored is not restored again when
# an --undo that stopped half-way is run once more.
forget() {
  local k
  for k in "$@"; do sed -i "/^$k=/d" "$state"; done
}

# Runs undo step FUNCTION; forgets KEYs when it found no problem.
undo_step() {
  local before=$problems step=$1
  shift
  "$step"
  ((problems == before)) && forget "$@"
  return 0
}

undo_mount() {
  local at
  at=$(saved hugetlbfs_mounted)
  if awk -v at="$at" '$2 == at && $3 == "hugetlbfs" { found = 1 } END { exit !found }' "$proc/mounts"; then
    umount "$at" || problem "cannot unmount $at" "umount it once nothing uses it"
  fi
}

undo_hugepages() {
  local dir n
  dir=$(saved hp_dir) n=$(saved hp_count)
  sysfs_write "$dir/nr_hugepages" "$n" || problem "cannot restore $dir/nr_hugepages" "echo $n > $dir/nr_hugepages"
  [[ $(cat "$dir/nr_hugepages") == "$n" ]] || problem "hugepages: $(cat "$dir/nr_hugepages"), not $n" "echo $n > $dir/nr_hugepages once they are free"
  say "hugepages back to $n"
}

undo_compaction() {
  local v
  v=$(saved compact_unevictable_allowed)
  sysfs_write "$proc/sys/vm/compact_unevictable_allowed" "$v" ||
    problem "cannot restore vm.compact_unevictable_allowed" "sysctl -w vm.compact_unevictable_allowed=$v"
  say "vm.compact_unevictable_allowed back to $v"
}

undo_unsafe_interrupts() {
  local param=$sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts v=0
  [[ $(saved unsafe_interrupts) != unloaded && -e $param ]] || return 0
  [[ $(saved unsafe_interrupts) == Y ]] && v=1
  sysfs_write "$param" "$v" || problem "cannot restore $param" "echo $v > $param"
}

undo_noiommu() {
  local param=$sys/module/vfio/parameters/enable_unsafe_noiommu_mode v=0
  [[ $(saved noiommu) != unloaded && -e $param ]] || return 0
  [[ $(saved noiommu) == Y ]] && v=1
  sysfs_write "$param" "$v" || problem "cannot restore $param" "echo $v > $param"
}

# The modules the set-up loaded: a few passes, as one in use by another
# goes once its user has.
undo_modules() {
  local m
  for _ in 1 2 3; do
    for m in $(saved modules_loaded); do
      module_loaded "$m" && { modprobe -r "$m" 2>/dev/null || true; }
    done
  done
  for m in $(saved modules_loaded); do
    module_loaded "$m" && problem "module $m is still loaded" "modprobe -r $m"
  done
  [[ -n $(saved modules_loaded | tr -d ' ') ]] && say "modules unloaded: $(saved modules_loaded)"
  return 0
}

cmd_undo() {
  [[ -f $state ]] || { say "nothing to undo (no $state)"; return 0; }
  problems=0
  has_saved nic && undo_step restore_nic nic nic_driver nic_override iface iface_up iface_addrs iface_routes
  has_saved hugetlbfs_mounted && undo_step undo_mount hugetlbfs_mounted
  has_saved hp_count && undo_step undo_hugepages hp_dir hp_count
  has_saved compact_unevictable_allowed && undo_step undo_compaction compact_unevictable_allowed
  has_saved noiommu && undo_step undo_noiommu noiommu
  has_saved unsafe_interrupts && undo_step undo_unsafe_interrupts unsafe_interrupts
  has_saved modules_loaded && undo_step undo_modules modules_loaded
  if ((problems == 0)); then
    rm -f "$state"
    rmdir "$state_dir" 2>/dev/null
    say "undone"
    return 0
  fi
  say "undo incomplete: $problems problem(s); what is left to restore is in $state (--undo again)"
  return 1
}

main() {
  parse_args "$@"
  case $mode in
    check)
      resolve_nic
      run_checks
      report
      ;;
    setup) cmd_setup ;;
    undo) cmd_undo ;;
  esac
}

main "$@"
