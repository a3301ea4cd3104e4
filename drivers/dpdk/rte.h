// The DPDK headers uroce uses, included once, here. Only drivers/dpdk (and
// apps that start EAL) include this file.
#pragma once

#include <stdint.h>

#include <rte_common.h>

// DPDK 22.11's generic/rte_vect.h declares rte_vect_{get,set}_max_simd_bitwidth
// before the arch header opens its extern "C" block, so C++ would mangle
// them. Include it with C linkage first; its include guard does the rest.
extern "C" {
#include <generic/rte_vect.h>
}

#include <rte_alarm.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
