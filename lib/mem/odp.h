// On-demand paging (ODP): memory regions the stack neither pins nor
// populates, and reaches without ever faulting on them. An ODP region's
// pages may be unmapped by the program at any time (or never have been
// mapped: implicit ODP covers the whole address space), so the engine reads
// and writes them through the kernel (process_vm_readv/writev on the owning
// process), which answers EFAULT for a page that is not there where a load
// or store would raise SIGSEGV in the engine. In process the owner is this
// process; through uroced it is the client (its socket's SO_PEERCRED pid),
// whose pages the daemon does not map at all.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::mem {

// Copies `len` bytes at `src` in process `pid`'s address space to `dst`
// here. True when every byte was copied; false when some page of the source
// is not mapped or not readable (nothing is promised about `dst` then).
bool odp_read(std::int32_t pid, void* dst, std::uint64_t src, std::size_t len);

// Copies `len` bytes at `src` here to `dst` in process `pid`'s address
// space. True when every byte was written; false when some page of the
// destination is not mapped or not writable (a prefix may have been written).
bool odp_write(std::int32_t pid, std::uint64_t dst, const void* src, std::size_t len);

// Whether every page of [addr, addr + len) in `pid` is mapped and readable:
// one byte of each page is read through the kernel (a READ's source is
// checked when the request arrives, so a page missing then is NAKed with
// the request; one unmapped while the responses leave is caught by the
// read that builds each response).
bool odp_readable(std::int32_t pid, std::uint64_t addr, std::uint64_t len);

// An atomic on the 8 bytes at `addr` in `pid` (IBTA 9.4.5): compare and swap
// (`cas`: swap in `swap` when the old value is `compare_add`) or fetch and
// add (`compare_add` added). Atomic with respect to every other ODP atomic
// of this process (one lock), as IBV_ATOMIC_HCA promises; not with respect
// to the program's own stores, which no verbs atomic is. False when the page
// is not mapped or not writable: nothing changed (the read fails first, or
// the write of the new value fails).
bool odp_atomic(std::int32_t pid, std::uint64_t addr, bool cas, std::uint64_t compare_add, std::uint64_t swap,
                std::uint64_t& orig);

// ibv_advise_mr's prefetch: faults the pages of [addr, addr + len) in (for
// writing with `write`) so the first transfer does not. Only for this
// process's own memory. Best effort, as the verbs allow: 0, or EFAULT when
// some page of the range is not mapped.
int odp_prefetch(std::uint64_t addr, std::uint64_t len, bool write);

// This process's pid, read once.
std::int32_t own_pid();

}  // namespace uroce::mem
