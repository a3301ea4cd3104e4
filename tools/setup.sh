#!/usr/bin/env bash
# Installs the Debian 12 packages uroce needs to build, test and run (only the
# ones missing), then configures and builds in ./build (or $UROCE_BUILD_DIR).
# Idempotent: with everything installed and built it takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ meson ninja-build pkg-config python3
  libdpdk-dev dpdk dpdk-dev     # DPDK 22.11: ethdev, EAL; dpdk-hugepages.py, dpdk-testpmd, dpdk-telemetry.py
  libisal-dev                   # ISA-L: the CRC-32 behind the ICRC
  libibverbs-dev                # rdma-core's <infiniband/verbs.h> (header only; no kernel device needed)
  libspdlog-dev libfmt-dev      # control-path logging
  libgtest-dev                  # GoogleTest
  libpcap-dev                   # pcap files
  libhugetlbfs-bin              # hugeadm, for reserving hugepages
  iproute2                      # network namespaces and veth pairs for the integration tests
  tshark                        # the tests check that our frames dissect as InfiniBand
  ibverbs-utils                 # stock ibv_devinfo, ibv_devices, ibv_rc_pingpong, run on our libibverbs.so.1 by the tests
  perftest                      # stock ib_write_bw & co., run on our libibverbs.so.1 by the tests
  librdmacm-dev                 # rdma-core's <rdma/rdma_cma.h>, the ABI lib/rdmacm implements (header only)
  rdmacm-utils                  # stock rping, rdma_server, cmtime, run on our librdmacm.so.1 by the tests
  libfabric-bin                 # stock fi_info, fi_pingpong: libfabric's verbs provider on our libraries, by the tests
  ucx-utils                     # stock ucx_perftest (UCX over rc_verbs and ud_verbs) on our libraries, by the tests
  python3-matplotlib            # tools/plot.py: the plots of docs/ (and its test)
  prometheus                    # a real Prometheus server scraping uroced's /metrics, and promtool, in the tests
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "uroce setup: missing packages: ${missing[*]}; run this as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "uroce setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

build=${UROCE_BUILD_DIR:-build}
if [[ ! -f $build/build.ninja ]]; then
  meson setup "$build" >/dev/null || { echo "uroce setup: meson setup failed; see $build/meson-logs/meson-log.txt" >&2; exit 1; }
fi
ninja -C "$build" >/dev/null || { ninja -C "$build" | tail -40 >&2; exit 1; }
