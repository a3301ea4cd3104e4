#!/bin/bash
# PID 1 of a tools/nic-vm.sh guest (installed as /sbin/nv-init). No systemd,
# no udev: under TCG they would double the boot time. It finds the RoCE NIC by
# its MAC, and then either runs Soft-RoCE on it (role rxe) or leaves it with
# its kernel driver for nv-bind to hand to DPDK (role uroce), starts the command
# channel on the control NIC and reaps orphans. The host waits for "nv-ready"
# on the serial console.
#
# Kernel command line (set by nic-vm.sh):
#   nv.role=uroce|rxe   nv.ip=ADDR/LEN   nv.mac=MAC (RoCE NIC)   nv.ctlmac=MAC
#   nv.nic=virtio|e1000e|vmxnet3   nv.iommu=on|off   nv.pages=4k|2m   nv.queues=N
#   nv.xmac=MAC nv.xip=ADDR/LEN   role uroce: the exchange NIC (-> eth2), kernel TCP
#                  for the handshakes of pingpong and perftest, since DPDK owns eth0
#   nv.host=NAME   nv.port=N (TCP port of rgctl.py on the control NIC)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8

say() { echo "nv-init: $*"; }
mounted() { mountpoint -q "$1"; }
mounted /proc || mount -t proc proc /proc
mounted /sys || mount -t sysfs sys /sys
mounted /dev || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm /dev/hugepages
mounted /dev/pts || mount -t devpts devpts /dev/pts
mounted /dev/shm || mount -t tmpfs shm /dev/shm
mount -t tmpfs -o mode=755 run /run
mount -t tmpfs -o mode=1777 tmp /tmp
ln -sfn /proc/self/fd /dev/fd

role=uroce ip='' mac='' ctlmac='' xmac='' xip='' nic=virtio iommu=off pages=4k queues=1 host=nic-vm port=7000
for word in $(</proc/cmdline); do
  case $word in
    nv.role=*) role=${word#*=} ;;
    nv.ip=*) ip=${word#*=} ;;
    nv.mac=*) mac=${word#*=} ;;
    nv.ctlmac=*) ctlmac=${word#*=} ;;
    nv.xmac=*) xmac=${word#*=} ;;
    nv.xip=*) xip=${word#*=} ;;
    nv.nic=*) nic=${word#*=} ;;
    nv.iommu=*) iommu=${word#*=} ;;
    nv.pages=*) pages=${word#*=} ;;
    nv.queues=*) queues=${word#*=} ;;
    nv.host=*) host=${word#*=} ;;
    nv.port=*) port=${word#*=} ;;
  esac
done
hostname "$host"
printf '127.0.0.1 localhost\n%s %s\n' "${ip%/*}" "$host" >/etc/hosts
ip link set lo up
grep -q hugepages= /proc/cmdline && mount -t hugetlbfs -o pagesize=2M nodev /dev/hugepages

nic_with_mac() {
  local d
  for d in /sys/class/net/*; do
    [[ $(<"$d/address") == "$1" ]] && { echo "${d##*/}"; return; }
  done
}
# The kernel driver a user's machine would have on the NIC before DPDK.
case $nic in
  e1000e) modprobe -a virtio_net e1000e ;;
  vmxnet3) modprobe -a virtio_net vmxnet3 ;;
  *) modprobe virtio_net ;;
esac
modprobe virtio_rng
for _ in {1..200}; do
  [[ -n $(nic_with_mac "$mac") && -n $(nic_with_mac "$ctlmac") && ( -z $xmac || -n $(nic_with_mac "$xmac") ) ]] && break
  sleep 0.05
done
data=$(nic_with_mac "$mac") ctl=$(nic_with_mac "$ctlmac") x=''
[[ -n $xmac ]] && x=$(nic_with_mac "$xmac")
[[ -n $data && -n $ctl ]] || say "NIC missing: RoCE $mac='$data', control $ctlmac='$ctl'"
# Through temporary names, so that no rename collides with a NIC not yet renamed.
ip link set "$data" name nv-data && ip link set "$ctl" name nv-ctl
[[ -n $x ]] && ip link set "$x" name nv-xchg
ip link set nv-data name eth0 && ip link set nv-ctl name eth1
if [[ -n $x ]]; then
  ip link set nv-xchg name eth2
  ip link set eth2 up
  ip addr add "$xip" dev eth2
  sysctl -qw net.ipv6.conf.eth2.disable_ipv6=1
fi
pci=$(basename "$(readlink -f /sys/class/net/eth0/device)")
# virtio: the netdev hangs off virtioN, whose parent is the PCI function.
[[ $pci == virtio* ]] && pci=$(basename "$(readlink -f /sys/class/net/eth0/device/..)")

sysctl -qw net.ipv6.conf.eth1.disable_ipv6=1
ip link set eth1 up
ip addr add 10.0.2.15/24 dev eth1
ulimit -l unlimited

cat >/run/nicvm.env <<EOS
NV_ROLE=$role
NV_IP=$ip
NV_XIP=$xip
NV_PCI=$pci
NV_NIC=$nic
NV_IOMMU=$iommu
NV_PAGES=$pages
NV_QUEUES=$queues
EOS
if [[ $role == rxe ]]; then
  # The bridge's MTU where the NIC takes it (e1000e's limit is lower).
  ip link set eth0 mtu 9000 2>/dev/null || ip link set eth0 mtu 8000 2>/dev/null || true
  ip link set eth0 up
  ip addr add "$ip" dev eth0
  ethtool -K eth0 tx off tso off gso off >/dev/null 2>&1 || true
  modprobe -a ib_uverbs rdma_ucm rdma_rxe
  rdma link add rxe0 type rxe netdev eth0 || say "rdma link add rxe0 failed"
  rdma link show | sed 's/^/nv-info /'
else
  # Until nv-bind: the kernel's, down, no address (DPDK will own $ip).
  ip link set eth0 down
fi
echo "nv-info kernel=$(uname -r) role=$role nic=$nic pci=$pci driver=$(basename "$(readlink -f /sys/bus/pci/devices/"$pci"/driver)") iommu=$iommu groups=$(ls /sys/kernel/iommu_groups 2>/dev/null | wc -l) hugepages=$(</proc/sys/vm/nr_hugepages) mem=$(awk '/MemTotal/{print $2}' /proc/meminfo)kB cpus=$(nproc)"

(while :; do
   python3 /usr/local/sbin/rgctl.py serve --addr 10.0.2.15 --port "$port" >>/run/rgctl.log 2>&1
   sleep 1
 done) &

echo "nv-ready $host $role after $(cut -d' ' -f1 /proc/uptime) s"
trap 'echo o >/proc/sysrq-trigger' TERM
while :; do
  sleep 1000 &
  wait $!
done
