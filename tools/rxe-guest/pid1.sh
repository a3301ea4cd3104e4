#!/bin/bash
# PID 1 of a tools/rxe-guest guest (installed as /sbin/rg-init by guest.sh
# build). No systemd and no udev: under TCG they would double the boot time.
# It brings up the RoCE NIC and rdma_rxe, starts the command channel and then
# only reaps orphans. Everything it prints goes to the serial console, which
# the host keeps in a file; guest.sh waits for the line "rg-ready".
#
# Kernel command line (set by guest.sh):
#   rg.ip=ADDR/LEN   rg.mac=MAC    address and MAC of the RoCE NIC (-> eth0)
#   rg.ctlmac=MAC                  MAC of the control NIC (qemu user net -> eth1)
#   rg.mtu=N                       MTU of eth0 (9000: room for RoCE MTU 4096)
#   rg.host=NAME                   host name
#   rg.port=N                      TCP port of rgctl.py on eth1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8

say() { echo "rg-init: $*"; }

# The initramfs hands over /proc, /sys and /dev already mounted.
mounted() { mountpoint -q "$1"; }
mounted /proc || mount -t proc proc /proc
mounted /sys || mount -t sysfs sys /sys
mounted /dev || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mounted /dev/pts || mount -t devpts devpts /dev/pts
mounted /dev/shm || mount -t tmpfs shm /dev/shm
mount -t tmpfs -o mode=755 run /run
mount -t tmpfs -o mode=1777 tmp /tmp
ln -sfn /proc/self/fd /dev/fd

ip=10.66.0.2/24 mac='' ctlmac='' mtu=9000 host=rxe-guest port=7000
for word in $(</proc/cmdline); do
  case $word in
    rg.ip=*) ip=${word#*=} ;;
    rg.mac=*) mac=${word#*=} ;;
    rg.ctlmac=*) ctlmac=${word#*=} ;;
    rg.mtu=*) mtu=${word#*=} ;;
    rg.host=*) host=${word#*=} ;;
    rg.port=*) port=${word#*=} ;;
  esac
done
hostname "$host"
printf '127.0.0.1 localhost\n%s %s\n' "${ip%/*}" "$host" >/etc/hosts
ip link set lo up

# No udev loads drivers for us. Both NICs are virtio-net; which is which
# is known only by MAC. Rename
# through temporary names so that neither rename collides with the other.
nic_with_mac() {
  local d
  for d in /sys/class/net/*; do
    [[ $(<"$d/address") == "$1" ]] && { echo "${d##*/}"; return; }
  done
}
modprobe -a virtio_net virtio_rng
for _ in {1..100}; do
  [[ -n $(nic_with_mac "$mac") && -n $(nic_with_mac "$ctlmac") ]] && break
  sleep 0.05
done
data=$(nic_with_mac "$mac") ctl=$(nic_with_mac "$ctlmac")
ip link set "$data" name rg-data && ip link set "$ctl" name rg-ctl
ip link set rg-data name eth0 && ip link set rg-ctl name eth1

ip link set eth0 mtu "$mtu" up
ip addr add "$ip" dev eth0
# The host captures on the tap: without offloads the frames there carry
# final checksums and are never GSO super-frames.
ethtool -K eth0 tx off tso off gso off >/dev/null 2>&1 || say "ethtool -K eth0 failed"
sysctl -qw net.ipv6.conf.eth1.disable_ipv6=1
ip link set eth1 up
ip addr add 10.0.2.15/24 dev eth1

ulimit -l unlimited
modprobe -a ib_uverbs rdma_ucm rdma_rxe
rdma link add rxe0 type rxe netdev eth0 || say "rdma link add rxe0 failed"

echo "rg-info kernel=$(uname -r) rdma-core=$(dpkg-query -W -f='${Version}' rdma-core) perftest=$(dpkg-query -W -f='${Version}' perftest)"
rdma link show | sed 's/^/rg-info /'

# The channel restarts if it ever dies; its own log stays in the guest.
(while :; do
   python3 /usr/local/sbin/rgctl.py serve --addr 10.0.2.15 --port "$port" >>/run/rgctl.log 2>&1
   sleep 1
 done) &

echo "rg-ready $host $ip after $(cut -d' ' -f1 /proc/uptime) s"

# SIGTERM from the host's `down` means: power off now (nothing to save,
# the disk is a throw-away snapshot).
trap 'echo o >/proc/sysrq-trigger' TERM
while :; do
  sleep 1000 &
  wait $!
done
