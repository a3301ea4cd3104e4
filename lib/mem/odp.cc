#include "mem/odp.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>

#include "mem/arena.h"

namespace uroce::mem {
namespace {

constexpr std::uint64_t kPage = 4096;

// odp_readable through /proc/PID/mem: pages checked at a READ's request.
constexpr std::uint32_t kProbePagesByFd = 64;

// process_vm_readv/writev move at most this many iovecs per call.
constexpr std::size_t kIovMax = IOV_MAX;

// Serialises ODP atomics: each is a read and a write through the kernel, two
// steps another engine's atomic on the same word must not fall between.
std::atomic_flag atomic_lock = ATOMIC_FLAG_INIT;

}  // namespace

std::int32_t own_pid() {
  static const std::int32_t pid = static_cast<std::int32_t>(getpid());
  return pid;
}

namespace {

// Through /proc/PID/mem: an offset is an address (off_t holds every user one).
bool mem_fd_io(std::int32_t owner, bool write, void* here, std::uint64_t there, std::size_t len) {
  if (there > static_cast<std::uint64_t>(INT64_MAX) - len) return false;
  const int fd = odp_mem_fd_of_owner(owner);
  const auto at = static_cast<off_t>(there);
  // A short count means a fault part way (EIO or a partial transfer).
  const ssize_t n = write ? pwrite(fd, here, len, at) : pread(fd, here, len, at);
  return n == static_cast<ssize_t>(len);
}

}  // namespace

bool odp_read(std::int32_t owner, void* dst, std::uint64_t src, std::size_t len) {
  if (len == 0) return true;
  if (owner < 0) return mem_fd_io(owner, false, dst, src, len);
  iovec local{dst, len};
  iovec remote{reinterpret_cast<void*>(src), len};
  // A partial count means a fault part way (the kernel stops at the first
  // page it cannot reach).
  return process_vm_readv(owner, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(len);
}

bool odp_write(std::int32_t owner, std::uint64_t dst, const void* src, std::size_t len) {
  if (len == 0) return true;
  if (owner < 0) return mem_fd_io(owner, true, const_cast<void*>(src), dst, len);
  iovec local{const_cast<void*>(src), len};
  iovec remote{reinterpret_cast<void*>(dst), len};
  return process_vm_writev(owner, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(len);
}

bool odp_readable(std::int32_t owner, std::uint64_t addr, std::uint64_t len) {
  if (len == 0) return true;
  if (addr + len < addr) return false;
  if (owner < 0) {
    std::uint8_t byte = 0;
    std::uint64_t at = addr;
    for (std::uint32_t i = 0; i < kProbePagesByFd && at < addr + len; ++i, at = (at / kPage + 1) * kPage) {
      if (!odp_read(owner, &byte, at, 1)) return false;
    }
    return true;
  }
  std::uint8_t sink[kIovMax];
  iovec local[kIovMax];
  iovec remote[kIovMax];
  std::uint64_t page = addr / kPage * kPage;
  const std::uint64_t end = addr + len;
  while (page < end) {
    std::size_t n = 0;
    for (; n < kIovMax && page < end; ++n, page += kPage) {
      local[n] = iovec{&sink[n], 1};
      remote[n] = iovec{reinterpret_cast<void*>(std::max(page, addr)), 1};
    }
    if (process_vm_readv(owner, local, n, remote, n, 0) != static_cast<ssize_t>(n)) return false;
  }
  return true;
}

bool odp_atomic(std::int32_t owner, std::uint64_t addr, bool cas, std::uint64_t compare_add, std::uint64_t swap,
                std::uint64_t& orig) {
  while (atomic_lock.test_and_set(std::memory_order_acquire)) {
  }
  bool ok = odp_read(owner, &orig, addr, sizeof orig);
  if (ok) {
    const std::uint64_t next = cas ? (orig == compare_add ? swap : orig) : orig + compare_add;
    // A compare that fails writes nothing (the page may be read-only).
    if (!cas || orig == compare_add) ok = odp_write(owner, addr, &next, sizeof next);
  }
  atomic_lock.clear(std::memory_order_release);
  return ok;
}

bool odp_atomic_store(std::int32_t owner, std::uint64_t addr, std::uint64_t value) {
  while (atomic_lock.test_and_set(std::memory_order_acquire)) {
  }
  const bool ok = odp_write(owner, addr, &value, sizeof value);
  atomic_lock.clear(std::memory_order_release);
  return ok;
}

int odp_prefetch(std::uint64_t addr, std::uint64_t len, bool write) {
  if (len == 0) return 0;
  if (addr + len < addr) return EFAULT;
  // ENOMEM: part of the range is not mapped; EFAULT: a page cannot be
  // faulted in (a write to read-only memory); EINVAL: a kernel before 5.14,
  // where the advice is a hint we may ignore.
  const int e = populate_pages(reinterpret_cast<void*>(addr), len, write);
  return e == 0 || e == EINVAL ? 0 : EFAULT;
}

}  // namespace uroce::mem
