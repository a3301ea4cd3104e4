// Device memory (Context::alloc_dm, ibv_alloc_dm): the arguments and the
// accounting both backends share, and the in-process backend's memory. A
// software device has no memory of its own on a bus: its "device memory"
// is memory its engines reach without the program's pages, a buffer of the
// Context in process, a memory file the daemon owns through uroced
// (lib/verbs/service_backend.cc, lib/service/daemon/dm.cc). Regions on it
// are zero-based, as verbs requires of ibv_reg_dm_mr.
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "verbs/local.h"
#include "verbs/verbs_impl.h"

namespace uroce {

using internal::ContextImpl;
using internal::impl_of;

namespace {

// ibv_memcpy_to_dm and _from_dm move 4-byte words: an offset or length that
// is not a multiple of 4 is refused, as mlx5 (rdma-core's one provider of
// device memory, whose tests expect it) refuses it.
constexpr std::uint64_t kDmWord = 4;
// Device memory is handed out in whole pages, and charged so against
// max_dm_size: a program cannot hold more pages than the budget names,
// however small its allocations.
constexpr std::uint64_t kDmPage = 4096;
std::uint64_t charged(std::size_t length) { return (length + kDmPage - 1) / kDmPage * kDmPage; }

bool in_words(const DeviceMemory& dm, std::uint64_t offset, std::size_t length) {
  return offset % kDmWord == 0 && length % kDmWord == 0 && offset <= dm.length() && length <= dm.length() - offset;
}

std::string range_text(std::uint64_t offset, std::size_t length, std::size_t size) {
  return "offset " + std::to_string(offset) + " and length " + std::to_string(length) + " in " +
         std::to_string(size) + " bytes of device memory";
}

bool owned(const ContextImpl& c, const DeviceMemory* dm) {
  for (const auto& d : c.dms) {
    if (d.get() == dm) return true;
  }
  return false;
}

}  // namespace

int DeviceMemory::copy_to(std::uint64_t offset, const void* src, std::size_t length) {
  if (!in_words(*this, offset, length)) {
    return impl_of(*ctx_).fail(EINVAL, "memcpy_to_dm: " + range_text(offset, length, length_) +
                                           ": both multiples of 4, inside the memory");
  }
  std::memcpy(addr_ + offset, src, length);
  return 0;
}

int DeviceMemory::copy_from(void* dst, std::uint64_t offset, std::size_t length) const {
  if (!in_words(*this, offset, length)) {
    return impl_of(*ctx_).fail(EINVAL, "memcpy_from_dm: " + range_text(offset, length, length_) +
                                           ": both multiples of 4, inside the memory");
  }
  std::memcpy(dst, addr_ + offset, length);
  return 0;
}

DeviceMemory* Context::alloc_dm(std::size_t length) {
  ContextImpl& c = *impl_;
  std::lock_guard<std::mutex> lock(c.dm_mutex);
  if (length == 0) {
    c.fail(EINVAL, "alloc_dm: zero length");
    return nullptr;
  }
  if (length > c.limits.max_dm_size || charged(length) > c.limits.max_dm_size - c.dm_bytes) {
    c.fail(ENOMEM, "alloc_dm: " + std::to_string(length) + " bytes asked (in 4 KiB pages), " +
                       std::to_string(c.limits.max_dm_size - c.dm_bytes) + " of the device's max_dm_size " +
                       std::to_string(c.limits.max_dm_size) + " left");
    return nullptr;
  }
  std::unique_ptr<DeviceMemory> dm = c.backend->alloc_dm(length);
  if (dm == nullptr) return nullptr;
  c.dm_bytes += charged(length);
  c.dms.push_back(std::move(dm));
  return c.dms.back().get();
}

int Context::free_dm(DeviceMemory* dm) {
  ContextImpl& c = *impl_;
  std::lock_guard<std::mutex> lock(c.dm_mutex);
  if (!owned(c, dm)) return c.fail(EINVAL, "free_dm: not device memory of this context");
  if (dm->regions.load() != 0) {
    return c.fail(EBUSY, "free_dm: " + std::to_string(dm->regions.load()) +
                             " regions are registered on this device memory; deregister them first");
  }
  if (const int e = c.backend->free_dm(dm); e != 0) return e;
  c.dm_bytes -= charged(dm->length());
  internal::erase_owned(c.dms, dm);
  return 0;
}

MemoryRegion* ProtectionDomain::reg_dm_mr(DeviceMemory* dm, std::uint64_t offset, std::size_t length, int access) {
  ContextImpl& c = impl_of(*ctx_);
  // Under dm_mutex: free_dm cannot free the memory meanwhile.
  std::lock_guard<std::mutex> lock(c.dm_mutex);
  if (!owned(c, dm)) {
    c.fail(EINVAL, "reg_dm_mr: not device memory of this context");
    return nullptr;
  }
  if (offset > dm->length() || length > dm->length() - offset) {
    c.fail(EINVAL, "reg_dm_mr: " + range_text(offset, length, dm->length()) + ": the region must lie inside it");
    return nullptr;
  }
  MemoryRegion* mr = c.backend->reg_dm_mr(this, dm, offset, length, access);
  if (mr == nullptr) return nullptr;
  mr->dm = dm;
  ++dm->regions;
  return mr;
}

namespace internal {

// Normal pages, never hugepages: a 2 MiB page per small allocation would
// hold far more than max_dm_size.
std::unique_ptr<DeviceMemory> LocalBackend::alloc_dm(std::size_t length) {
  const mem::Buffer b = mem::map_buffer(length, false);
  if (b.addr == nullptr) {
    c_.fail(ENOMEM, "alloc_dm: out of memory for " + std::to_string(length) + " bytes");
    return nullptr;
  }
  std::memset(b.addr, 0, b.bytes);
  buffers_[b.addr] = b;
  return std::make_unique<DeviceMemory>(&ctx_, b.addr, length, 0);
}

int LocalBackend::free_dm(DeviceMemory* dm) {
  free_buffer(dm->addr());
  return 0;
}

// A region of the memory as any other, at iova 0, copied from on send
// (as reg_mr_copied): the port's registrations (DPDK external memory) are
// few, and device memory is small.
MemoryRegion* LocalBackend::reg_dm_mr(ProtectionDomain* pd, DeviceMemory* dm, std::uint64_t offset,
                                      std::size_t length, int access) {
  if (length == 0) return reg_mr_empty(pd, dm->addr() + offset, access);
  return reg_mr(pd, dm->addr() + offset, length, 0, access, true);
}

// Verbs lets device memory have a region of no bytes (mlx5 registers one,
// and rdma-core's test_create_dm_mr asks for it); a region of the program's
// memory must have some (ibv_reg_mr refuses 0, as the kernel does). The
// port is not told of it: there is nothing to send from.
MemoryRegion* LocalBackend::reg_mr_empty(ProtectionDomain* pd, void* addr, int access) {
  return control([&]() -> MemoryRegion* {
    std::uint32_t key = 0;
    if (const int rc = mrs_.add_empty(pd->id(), addr, 0, access, key); rc != 0) {
      c_.fail(rc, rc == ENOMEM ? "too many memory regions (the device's max_mr)"
                               : "bad region: REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE");
      return nullptr;
    }
    auto mr = std::make_unique<MemoryRegion>();
    *mr = MemoryRegion{addr, 0, 0, key, key, access, pd};
    unported_.insert(mr.get());
    c_.mrs_owned.push_back(std::move(mr));
    return c_.mrs_owned.back().get();
  });
}

MemoryRegion* reg_mr_empty(ProtectionDomain* pd, void* addr, int access) {
  return LocalBackend::of(pd->context()).reg_mr_empty(pd, addr, access);
}

}  // namespace internal
}  // namespace uroce
