# Sourced by tools/interop-rxe*.sh and tools/probe-rxe.sh (from the
# repository's root): `rxe_attach TOOL` makes sure a Soft-RoCE guest is up
# and tells where it is. The peer is this directory's guest.sh unless
# RXE_PEER names another control script with the same commands (build, up,
# run, down). After it returns 0:
#   peer           the control script
#   rxe_ns         the network namespace of the link
#   rxe_iface      the interface there for our DPDK port (net_af_packet)
#   rxe_ours       the address our DPDK side owns
#   rxe_host       the kernel's address on the link (the bridge), for TCP
#   rxe_bridge     the bridge's name (raw sockets bind to it)
#   rxe_guest      guest a's address
# shellcheck shell=bash disable=SC2034  # the variables are for the caller

rxe_attach() {
  local tool=$1 layout key value
  peer=${RXE_PEER:-$PWD/tools/rxe-guest/guest.sh}
  [[ -x $peer ]] || { echo "$tool: the Soft-RoCE peer $peer is not executable"; return 2; }
  "$peer" build >"/tmp/uroce-$tool-build.log" 2>&1 ||
    { echo "$tool: guest build failed, see /tmp/uroce-$tool-build.log"; return 1; }
  "$peer" up >"/tmp/uroce-$tool-up.log" 2>&1 ||
    { echo "$tool: guest did not boot, see /tmp/uroce-$tool-up.log"; return 1; }
  # A peer without `env` is taken to use the layout these tools were first
  # written against.
  rxe_ns=rxehost rxe_iface=rxedpdk0 rxe_ours=10.99.0.1 rxe_host=10.99.0.254
  rxe_bridge=rxebr0 rxe_guest=10.99.0.2
  layout=$("$peer" env 2>/dev/null) || return 0
  while IFS='=' read -r key value; do
    case $key in
      netns) rxe_ns=$value ;;
      dpdk_iface) rxe_iface=$value ;;
      dpdk_ip) rxe_ours=$value ;;
      bridge_ip) rxe_host=$value ;;
      bridge) rxe_bridge=$value ;;
      guest_ip) rxe_guest=$value ;;
    esac
  done <<<"$layout"
}
