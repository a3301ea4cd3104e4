// On-demand paging (ODP): memory regions the stack neither pins nor
// populates, and reaches without ever faulting on them. An ODP region's
// pages may be unmapped by the program at any time (or never have been
// mapped: implicit ODP covers the whole address space), so the engine reads
// and writes them through the kernel, which answers EFAULT for a page that
// is not there where a load or store would raise SIGSEGV in the engine.
//
// Whose memory, the region's owner, is an int32 (Region::odp_pid, the WQEs'
// odp_pid): > 0, a pid reached with process_vm_readv/writev (in process:
// this process, own_pid()); < 0, a descriptor of a client's /proc/PID/mem
// (odp_owner_of_mem_fd), which a client passes to uroced once: it names the
// client's address space itself, so a pid reused after the client died can
// never be reached through it, and its accesses never wait on a
// userfaultfd the client does not serve (the kernel's remote access through
// /proc/PID/mem takes no retryable fault; process_vm_readv would sleep in
// it and hold the daemon's engine). It writes as a debugger does: a page
// the client mapped read-only is written too (its own memory, as it could).
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::mem {

// Copies `len` bytes at `src` in the owner's address space to `dst`
// here. True when every byte was copied; false when some page of the source
// is not mapped or not readable (nothing is promised about `dst` then).
bool odp_read(std::int32_t owner, void* dst, std::uint64_t src, std::size_t len);

// Copies `len` bytes at `src` here to `dst` in the owner's address
// space. True when every byte was written; false when some page of the
// destination is not mapped or not writable (a prefix may have been written).
bool odp_write(std::int32_t owner, std::uint64_t dst, const void* src, std::size_t len);

// Whether every page of [addr, addr + len) of the owner is mapped and
// readable: one byte of each page is read through the kernel (a READ's
// source is checked when the request arrives, so a page missing then is
// NAKed with the request; one unmapped while the responses leave is caught
// by the read that builds each response). Through /proc/PID/mem one system
// call per page: only the first 64 pages are checked there.
bool odp_readable(std::int32_t owner, std::uint64_t addr, std::uint64_t len);

// An atomic on the 8 bytes at `addr` of the owner (IBTA 9.4.5): compare and swap
// (`cas`: swap in `swap` when the old value is `compare_add`) or fetch and
// add (`compare_add` added). Atomic with respect to every other ODP atomic
// of this process (one lock), as IBV_ATOMIC_HCA promises; not with respect
// to the program's own stores, which no verbs atomic is. False when the page
// is not mapped or not writable: nothing changed (the read fails first, or
// the write of the new value fails).
bool odp_atomic(std::int32_t owner, std::uint64_t addr, bool cas, std::uint64_t compare_add, std::uint64_t swap,
                std::uint64_t& orig);

// IBA 1.5 ATOMIC WRITE of `value` to the 8 bytes at `addr` of the owner,
// under odp_atomic's lock (so atomic with respect to the other ODP
// atomics). False when the page is not mapped or not writable.
bool odp_atomic_store(std::int32_t owner, std::uint64_t addr, std::uint64_t value);

// ibv_advise_mr's prefetch: faults the pages of [addr, addr + len) in (for
// writing with `write`) so the first transfer does not. Only for this
// process's own memory. Best effort, as the verbs allow: 0, or EFAULT when
// some page of the range is not mapped.
int odp_prefetch(std::uint64_t addr, std::uint64_t len, bool write);

// This process's pid, read once.
std::int32_t own_pid();

// The owner for a descriptor of /proc/PID/mem (open read-write), and back.
constexpr std::int32_t odp_owner_of_mem_fd(int fd) { return -(fd + 1); }
constexpr int odp_mem_fd_of_owner(std::int32_t owner) { return -owner - 1; }

}  // namespace uroce::mem
