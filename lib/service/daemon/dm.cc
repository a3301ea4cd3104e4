// Device memory of uroced's clients (ibv_alloc_dm through the service): a
// memory file the daemon makes and maps, its descriptor passed to the
// client that asked, which maps it too and reads and writes it directly
// (ibv_memcpy_to_dm). It is named by that client's handle only, so no other
// client can register it or map it. Regions on it are zero-based and
// copied from on send, never made known to the port: device memory is
// small, and the port's registrations are few (memory.cc).
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "service/shm.h"
#include "service_daemon/server.h"
#include "verbs/internal.h"

namespace uroce::daemon {

using service::Reply;
using service::Request;

void Server::op_alloc_dm(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>& fds) {
  const std::uint64_t length = req.alloc_dm.length;
  const std::uint64_t max = ctx_.limits().max_dm_size;
  // Charged in whole pages, as in process (lib/verbs/dm.cc).
  const std::size_t bytes = service::page_round(length);
  if (length == 0 || length > max || bytes > max - c.dm_bytes) {
    fail(reply, length == 0 ? EINVAL : ENOMEM,
         "alloc_dm: " + std::to_string(length) + " bytes asked (in whole pages), " + std::to_string(max - c.dm_bytes) +
             " of this client's max_dm_size " + std::to_string(max) + " left");
    return;
  }
  const Charge add{0, bytes, 1};
  if (std::string e = over_budget(c, add); !e.empty()) {
    fail(reply, ENOMEM, e);
    return;
  }
  // Sealed for good (kFinal): neither side can shrink it under the other.
  const int file = service::make_memory_file("uroced-dm", bytes, false, service::Sealing::kFinal);
  void* map = file >= 0 ? service::map_shared(file, bytes) : nullptr;
  if (map == nullptr) {
    const int e = errno;
    if (file >= 0) close(file);
    fail(reply, ENOMEM, std::string("alloc_dm: memory file: ") + std::strerror(e));
    return;
  }
  reply.handle = c.next_handle++;
  fds.push_back(file);
  c.dms[reply.handle] = Dm{map, bytes, length, 0};
  c.dm_bytes += bytes;
  charge(c, add, +1);
  ++mappings_total_;
}

int Server::free_dm(Client& c, std::uint32_t handle) {
  auto it = c.dms.find(handle);
  if (it == c.dms.end()) return EINVAL;
  if (it->second.regions != 0) return EBUSY;
  munmap(it->second.map, it->second.bytes);
  c.dm_bytes -= it->second.bytes;
  charge(c, Charge{0, it->second.bytes, 1}, -1);
  --mappings_total_;
  c.dms.erase(it);
  return 0;
}

void Server::op_free_dm(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  if (const int e = free_dm(c, req.handle); e != 0) {
    fail(reply, e, e == EINVAL ? no_object("device memory", req.handle)
                               : "free_dm: regions are registered on this device memory; deregister them first");
  }
}

void Server::op_reg_dm_mr(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  const service::RegDmMr& r = req.reg_dm_mr;
  ProtectionDomain** pd = find(c.pds, r.pd, "PD", reply);
  if (pd == nullptr) return;
  Dm* dm = find(c.dms, r.dm, "device memory", reply);
  if (dm == nullptr) return;
  if (r.offset > dm->length || r.length > dm->length - r.offset) {
    fail(reply, EINVAL, "reg_dm_mr: offset " + std::to_string(r.offset) + " and length " + std::to_string(r.length) +
                            " leave the " + std::to_string(dm->length) + " bytes of device memory");
    return;
  }
  char* start = static_cast<char*>(dm->map) + r.offset;
  MemoryRegion* mr = r.length == 0 ? internal::reg_mr_empty(*pd, start, r.access)
                                   : internal::reg_mr_copied(*pd, start, r.length, 0, r.access);
  if (mr == nullptr) {
    fail(reply, EINVAL, ctx_.last_error());
    return;
  }
  ++dm->regions;
  reply.handle = c.next_handle++;
  reply.reg_mr.lkey = mr->lkey;
  reply.reg_mr.rkey = mr->rkey;
  Mr rec;
  rec.mr = mr;
  rec.view = dm->map;
  rec.dm = r.dm;
  c.mrs[reply.handle] = std::move(rec);
}

}  // namespace uroce::daemon
