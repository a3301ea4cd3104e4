// uroced's side of the memory it maps for clients: regions on their memory
// files (each file checked on every request, mapped once, a hugepage file
// sealed against hole punching), and the budgets that every client's, every
// uid's and the daemon's memory and mappings are charged to.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "mem/odp.h"
#include "service/shm.h"
#include "service_daemon/server.h"
#include "verbs/internal.h"

namespace uroce::daemon {

using service::Reply;

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

// --- Memory regions ------------------------------------------------------------------

void Server::op_reg_mr(Client& c, const service::Request& req, const int* fds, int nfds, Reply& reply,
                       std::vector<int>&) {
  const service::RegMr& r = req.reg_mr;
  ProtectionDomain** pd = find(c.pds, r.pd, "PD", reply);
  if (pd == nullptr) return;
  if (r.access & IBV_ACCESS_ON_DEMAND) {
    reg_mr_odp(c, *pd, r, fds, nfds, reply);
    return;
  }
  RegionMapping m;
  if (!map_region(c, r, fds, nfds, reply, m)) return;
  // A region inside a file the port knows is counted in its registration;
  // any other (a view of several pieces, which has addresses of its own,
  // or a file past the client's share of registrations) is not made known
  // to the port at all: frames from it are copied.
  void* at = static_cast<char*>(m.view) + r.offset;
  MemoryRegion* mr = m.ported ? (*pd)->reg_mr_iova(at, r.length, r.iova, r.access)
                              : internal::reg_mr_copied(*pd, at, r.length, r.iova, r.access);
  if (mr == nullptr) {
    fail(reply, EINVAL, ctx_.last_error());
    unmap_region(m);
    return;
  }
  keep_region(c, m);
  reply.handle = c.next_handle++;
  reply.reg_mr.lkey = mr->lkey;
  reply.reg_mr.rkey = mr->rkey;
  c.mrs[reply.handle] = Mr{mr, m.view, m.own_view ? m.total : 0, m.own_view, std::move(m.keys)};
}

bool Server::map_region(Client& c, const service::RegMr& r, const int* fds, int nfds, Reply& reply,
                        RegionMapping& out) {
  if (r.pieces == 0 || r.pieces > service::kMaxPieces || static_cast<int>(r.pieces) != nfds) {
    fail(reply, EINVAL, "reg_mr names " + std::to_string(r.pieces) + " pieces of memory and passes " +
                            std::to_string(nfds) + " memory files: one file per piece, 1 to " +
                            std::to_string(service::kMaxPieces));
    return false;
  }
  // Every descriptor checked in full, every time (seals, memfd, identity by
  // device and inode): a file is never trusted because one like it was
  // seen before. Every piece whole pages inside its file.
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<service::MemoryFileInfo> info(r.pieces);
  std::vector<FileKey> keys(r.pieces);
  Charge add;
  std::map<FileKey, int> fresh;  // files new to this client -> a descriptor of each
  std::uint64_t total = 0;
  for (std::uint32_t i = 0; i < r.pieces; ++i) {
    const service::MemoryPiece& p = r.piece[i];
    if (std::string e = service::check_memory_file(fds[i], info[i]); !e.empty()) {
      fail(reply, EINVAL, "the region's memory file (piece " + std::to_string(i) + "): " + e);
      return false;
    }
    const std::uint64_t size = info[i].bytes;
    if (p.bytes == 0 || p.file_offset % page != 0 || p.bytes % page != 0 || p.file_offset > size ||
        p.bytes > size - p.file_offset) {
      fail(reply, EINVAL, "piece " + std::to_string(i) + " of the region (offset " + std::to_string(p.file_offset) +
                              ", " + std::to_string(p.bytes) + " bytes) is not whole pages of its memory file of " +
                              std::to_string(size) + " bytes");
      return false;
    }
    if (info[i].huge && r.pieces != 1) {
      // A view of several pieces is built from the file's one mapping
      // (mremap), which hugetlb mappings do not allow.
      fail(reply, EINVAL, "a region on a hugepage file must be one piece (inside its buffer)");
      return false;
    }
    keys[i] = FileKey{info[i].dev, info[i].ino};
    if (c.files.count(keys[i]) == 0 && fresh.count(keys[i]) == 0) {
      fresh[keys[i]] = fds[i];
      add.pinned += size;
      ++add.mappings;
    }
    total += p.bytes;
  }
  if (r.length == 0 || r.offset > total || r.length > total - r.offset) {
    fail(reply, EINVAL, "the region (offset " + std::to_string(r.offset) + ", " + std::to_string(r.length) +
                            " bytes) leaves its " + std::to_string(total) + " bytes of memory files");
    return false;
  }
  if (r.pieces > 1) add.mappings += r.pieces;  // its view: one mapping per piece
  std::string over = over_budget(c, add);
  if (!over.empty() && drop_idle_files(c, keys)) over = over_budget(c, add);
  if (!over.empty()) {
    fail(reply, ENOMEM, over);
    return false;
  }
  // The files mapped (once, for the daemon), then the view: inside the
  // file's mapping for one piece; else an address range reserved and the
  // pieces' pages mapped onto it side by side.
  std::vector<FileKey> used;  // files this request added a client use to, undone on failure
  auto undo = [&] {
    for (const FileKey& k : used) unuse_file(k);
  };
  std::map<FileKey, MappedFile*> maps;
  for (std::uint32_t i = 0; i < r.pieces; ++i) {
    if (maps.count(keys[i]) != 0) continue;
    MappedFile* m = nullptr;
    if (fresh.count(keys[i]) != 0) {
      std::string why;
      m = map_file(c, fds[i], info[i], why);
      if (m == nullptr) {
        undo();
        fail(reply, ENOMEM, "the region's memory file: " + why);
        return false;
      }
      used.push_back(keys[i]);
    } else {
      m = &mapped_files_.at(keys[i]);
    }
    maps[keys[i]] = m;
  }
  void* view = nullptr;
  if (r.pieces == 1) {
    view = static_cast<char*>(maps[keys[0]]->base) + r.piece[0].file_offset;
  } else {
    void* base = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    view = base == MAP_FAILED ? nullptr : base;
    std::uint64_t at = 0;
    for (std::uint32_t i = 0; view != nullptr && i < r.pieces; at += r.piece[i++].bytes) {
      // The file is sealed against new writable mappings: the pages come
      // from the daemon's own mapping of it (mremap of size 0 duplicates a
      // shared mapping).
      void* from = static_cast<char*>(maps[keys[i]]->base) + r.piece[i].file_offset;
      void* p = mremap(from, 0, r.piece[i].bytes, MREMAP_MAYMOVE | MREMAP_FIXED, static_cast<char*>(base) + at);
      if (p == MAP_FAILED) {
        const int e = errno;
        munmap(base, total);
        errno = e;
        view = nullptr;
      }
    }
  }
  if (view == nullptr) {
    const int e = errno;
    undo();
    fail(reply, ENOMEM, "mapping the region's memory files: " + errno_text(e));
    return false;
  }
  out.view = view;
  out.total = total;
  out.own_view = r.pieces > 1;
  out.ported = r.pieces == 1 && maps[keys[0]]->port_mr != nullptr;
  out.keys = std::move(keys);
  out.used = std::move(used);
  out.add = add;
  for (const auto& [key, fd] : fresh) out.fresh.push_back(key);
  return true;
}

void Server::unmap_region(RegionMapping& m) {
  if (m.own_view) munmap(m.view, m.total);
  for (const FileKey& k : m.used) unuse_file(k);
}

void Server::keep_region(Client& c, const RegionMapping& m) {
  if (m.own_view) mappings_total_ += static_cast<std::uint32_t>(m.keys.size());
  for (const FileKey& key : m.fresh) c.files[key] = File{mapped_files_.at(key).bytes, 0};
  for (const FileKey& key : m.keys) ++c.files[key].users;
  charge(c, m.add, +1);
}

namespace {

// The client's own /proc/PID/mem, passed by it: checked to be that file of
// the socket's peer (SO_PEERCRED's pid, never the client's word), opened
// for reading and writing. A process may always open its own, and one it
// opened for another process it could reach anyway; the check keeps the
// daemon from taking anything else (a file whose reads never end would
// hold an engine). The kernel checked the client's right to that memory
// when it opened the file: a descriptor names that address space, so a pid
// reused after the client died is never reached through it. A copy of it,
// or -1 and `why`.
int adopt_client_memory(int fd, pid_t pid, std::string& why) {
  const std::string want = "/proc/" + std::to_string(pid) + "/mem";
  struct statfs fs {};
  char path[64] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(link.c_str(), path, sizeof path - 1);
  if (fstatfs(fd, &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC || n <= 0 || want != path) {
    why = "the descriptor passed is not the client's own memory (" + want +
          "): pass your /proc/self/mem, opened read-write";
    return -1;
  }
  if ((fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR) {
    why = "the client's /proc/self/mem must be opened read-write (O_RDWR)";
    return -1;
  }
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) why = "cannot keep the client's memory descriptor: " + errno_text(errno);
  return copy;
}

}  // namespace

void Server::reg_mr_odp(Client& c, ProtectionDomain* pd, const service::RegMr& r, const int* fds, int nfds,
                        Reply& reply) {
  if (r.pieces != 0 || nfds > 1) {
    fail(reply, EINVAL,
         "an on-demand region comes with no memory files, only the client's /proc/self/mem: the daemon reaches it "
         "in place");
    return;
  }
  const bool implicit = r.addr == 0 && r.length == UINT64_MAX;
  if (!implicit && (r.addr == 0 || r.length == 0 || r.addr + r.length < r.addr)) {
    fail(reply, EINVAL, "bad on-demand region: no address, zero length, or past the end of the address space");
    return;
  }
  // The client's own address space, never by its word: its socket's peer
  // (mem/odp.h says why a /proc/PID/mem descriptor and not the pid). The
  // region's bounds, keys and access are the MR table's, as for any other.
  if (c.odp_mem < 0) {
    std::string why = "the client's socket gave no pid";
    if (nfds != 1) why = "the first on-demand region passes the client's /proc/self/mem (read-write)";
    c.odp_mem = c.pid > 0 && nfds == 1 ? adopt_client_memory(fds[0], c.pid, why) : -1;
    if (c.odp_mem < 0) {
      fail(reply, EINVAL, "on-demand regions: " + why);
      return;
    }
  }
  MemoryRegion* mr = internal::reg_mr_odp(pd, reinterpret_cast<void*>(r.addr), implicit ? SIZE_MAX : r.length,
                                          r.iova, r.access, mem::odp_owner_of_mem_fd(c.odp_mem));
  if (mr == nullptr) {
    fail(reply, EINVAL, ctx_.last_error());
    return;
  }
  reply.handle = c.next_handle++;
  reply.reg_mr.lkey = mr->lkey;
  reply.reg_mr.rkey = mr->rkey;
  c.mrs[reply.handle] = Mr{mr, nullptr, 0, false, {}};
}

Server::MappedFile* Server::map_file(const Client& c, int fd, const service::MemoryFileInfo& info, std::string& why) {
  const FileKey key{info.dev, info.ino};
  auto known = mapped_files_.find(key);
  if (known != mapped_files_.end()) {  // another client's file too: the same mapping
    ++known->second.clients;
    return &known->second;
  }
  if (info.write_sealed) {
    why = "already sealed against writers (F_SEAL_FUTURE_WRITE) before uroced mapped it";
    return nullptr;
  }
  if (mappings_total_ + 1 > mappings_budget_) {
    why = "the daemon's mappings are at their budget (half of vm.max_map_count)";
    return nullptr;
  }
  void* base = service::map_shared(fd, info.bytes);
  if (base == nullptr) {
    why = "mmap: " + errno_text(errno) + (info.huge ? " (no free hugepages for it?)" : "");
    return nullptr;
  }
  // A hugepage punched out of a file (FALLOC_FL_PUNCH_HOLE, MADV_REMOVE:
  // F_SEAL_SHRINK allows both) takes its reservation with it, and the
  // daemon's next touch of it faults with SIGBUS. So a hugepage file is
  // sealed against every new writer now that the daemon (and the client,
  // whose buffer it is) has mapped it: no hole can be punched any more. A
  // page punched between the mmap and the seal shows when the file is
  // populated, here, instead of killing the daemon later. The seal stays
  // on the file, so the daemon keeps this mapping while the client is
  // attached (see dereg_mr), to register the file again.
  // A tmpfs (normal pages) file is not sealed: a hole punched in it reads
  // back as zeros, the client's own data lost, nothing else.
  // Every file is populated here, whole (it is charged whole), on the
  // control thread and not in a control call: the port's registration of
  // the file below, and each region's, then find its pages present instead
  // of faulting them in with every worker parked.
  if (info.huge) why = service::seal_against_writers(fd);
  if (why.empty() && madvise(base, info.bytes, MADV_POPULATE_WRITE) != 0) {
    why = info.huge ? "its hugepages could not be faulted in (" + errno_text(errno) + "): a hole punched in it, or none free"
                    : "its pages could not be faulted in: " + errno_text(errno);
  }
  if (!why.empty()) {
    munmap(base, info.bytes);
    return nullptr;
  }
  MappedFile m;
  m.base = base;
  m.bytes = info.bytes;
  m.huge = info.huge;
  m.clients = 1;
  // The port (DPDK external memory, DMA mapping) learns of the file once:
  // regions inside it then take no registration of their own (DPDK has 128
  // for the whole daemon). A region in a PD of the daemon's, which no QP
  // uses, with no access rights.
  // Only within the client's and its uid's share of registrations, and the
  // daemon's: past them the file's regions are copied from (reg_mr).
  const Limits& l = c.limits;
  if (port_regs_client_[c.id] < l.port_registrations && port_regs_uid_[c.uid] < l.uid_port_registrations &&
      port_regs_total_ < kPortRegistrations) {
    if (files_pd_ == nullptr) files_pd_ = ctx_.alloc_pd();
    if (files_pd_ != nullptr) m.port_mr = files_pd_->reg_mr(base, info.bytes, 0);
  }
  if (m.port_mr != nullptr) {
    m.port_client = c.id;
    m.port_uid = c.uid;
    ++port_regs_client_[c.id];
    ++port_regs_uid_[c.uid];
    ++port_regs_total_;
  } else if (const std::uint64_t n = ++files_not_ported_; (n & (n - 1)) == 0) {  // the 1st, 2nd, 4th, ...: bounded
    spdlog::warn("uroced: client {} (pid {}, uid {}) has memory files past its share of the port's registrations "
                 "(max_port_registrations {}, uid_max_port_registrations {}): frames from regions on them are copied, "
                 "not read by the NIC ({} such files so far)",
                 c.id, c.pid, c.uid, l.port_registrations, l.uid_port_registrations, files_not_ported_);
  }
  ++mappings_total_;
  return &mapped_files_.emplace(key, m).first->second;
}

void Server::unuse_file(const FileKey& key) {
  auto it = mapped_files_.find(key);
  if (it == mapped_files_.end() || --it->second.clients != 0) return;
  MappedFile& m = it->second;
  // The port's registration goes first (its DMA mapping with it), then the
  // daemon's mapping. Frames still queued for the NIC from these pages: see
  // PortIo::unregister_memory.
  if (m.port_mr != nullptr) {
    files_pd_->dereg_mr(m.port_mr);
    if (--port_regs_client_[m.port_client] == 0) port_regs_client_.erase(m.port_client);
    if (--port_regs_uid_[m.port_uid] == 0) port_regs_uid_.erase(m.port_uid);
    --port_regs_total_;
  }
  munmap(m.base, m.bytes);
  --mappings_total_;
  mapped_files_.erase(it);
}

int Server::dereg_mr(Client& c, std::uint32_t handle) {
  auto it = c.mrs.find(handle);
  if (it == c.mrs.end()) return EINVAL;
  if (const int e = it->second.mr->pd->dereg_mr(it->second.mr); e != 0) return e;
  if (auto dm = c.dms.find(it->second.dm); it->second.dm != 0 && dm != c.dms.end()) --dm->second.regions;
  // dereg_mr returned: the engines no longer touch the view.
  release_view(c, it->second);
  c.mrs.erase(it);
  return 0;
}

void Server::release_view(Client& c, const Mr& mr) {
  Charge freed;
  if (mr.own_view) {
    munmap(mr.view, mr.view_bytes);
    freed.mappings += static_cast<std::uint32_t>(mr.files.size());
    mappings_total_ -= static_cast<std::uint32_t>(mr.files.size());
  }
  for (const FileKey& key : mr.files) {
    auto f = c.files.find(key);
    // A hugepage file stays mapped (and charged) with no region on it: it
    // is sealed against new writable mappings, so a mapping made again
    // would fail. It goes when the client does, or when its budget needs
    // the room (drop_idle_files).
    if (f != c.files.end() && --f->second.users == 0 && !mapped_files_.at(key).huge) {
      freed.pinned += f->second.bytes;
      ++freed.mappings;
      c.files.erase(f);
      unuse_file(key);
    }
  }
  charge(c, freed, -1);
}

bool Server::drop_idle_files(Client& c, const std::vector<FileKey>& keep) {
  Charge freed;
  for (auto f = c.files.begin(); f != c.files.end();) {
    if (f->second.users != 0 || std::find(keep.begin(), keep.end(), f->first) != keep.end()) {
      ++f;
      continue;
    }
    freed.pinned += f->second.bytes;
    ++freed.mappings;
    unuse_file(f->first);
    f = c.files.erase(f);
  }
  charge(c, freed, -1);
  return freed.mappings != 0;
}

// --- Budgets ----------------------------------------------------------------------------
// Everything a client makes the daemon hold is charged to the client, its
// uid and the daemon: region files once each (max_pinned_mb), CQs' and QPs'
// rings and engine arrays (max_object_mb), both per uid and in all
// (uid_max_memory_mb, max_memory_mb), and the mappings behind them
// (max_mappings, uid_max_mappings, half of vm.max_map_count in all), so
// that neither memory nor the address space's mapping count runs out for
// everyone because of one client or one user.

std::string Server::over_budget(const Client& c, const Charge& add) const {
  const Limits& l = c.limits;
  const std::uint64_t bytes = add.pinned + add.objects;
  auto mib = [](std::uint64_t b) { return std::to_string((b + kMiB - 1) / kMiB); };
  if (c.mapped + add.pinned > l.pinned_mb * kMiB) {
    return "this client would have " + mib(c.mapped + add.pinned) + " MiB registered, over its limit of " +
           std::to_string(l.pinned_mb) + " MiB (uroced max_pinned_mb)";
  }
  if (c.object_bytes + add.objects > l.object_mb * kMiB) {
    return "this client's CQs and QPs would take " + mib(c.object_bytes + add.objects) +
           " MiB of the daemon's memory, over its limit of " + std::to_string(l.object_mb) +
           " MiB (uroced max_object_mb): ask for fewer or smaller queues";
  }
  if (c.mappings + add.mappings > l.mappings) {
    return "this client would have " + std::to_string(c.mappings + add.mappings) +
           " mappings in the daemon (memory files, regions of several pieces, rings), over its limit of " +
           std::to_string(l.mappings) + " (uroced max_mappings): register fewer, larger regions";
  }
  const auto u = uid_memory_.find(c.uid);
  const UidMemory used = u == uid_memory_.end() ? UidMemory{} : u->second;
  if (used.bytes + bytes > l.uid_memory_mb * kMiB) {
    return "uid " + std::to_string(c.uid) + "'s clients would hold " + mib(used.bytes + bytes) +
           " MiB in the daemon, over the per-uid limit of " + std::to_string(l.uid_memory_mb) +
           " MiB (uroced uid_max_memory_mb)";
  }
  if (used.mappings + add.mappings > l.uid_mappings) {
    return "uid " + std::to_string(c.uid) + "'s clients would have " + std::to_string(used.mappings + add.mappings) +
           " mappings in the daemon, over the per-uid limit of " + std::to_string(l.uid_mappings) +
           " (uroced uid_max_mappings)";
  }
  if (memory_total_ + bytes > memory_budget_) {
    return "the daemon would hold " + mib(memory_total_ + bytes) + " MiB for its clients, over its budget of " +
           mib(memory_budget_) + " MiB (uroced max_memory_mb)";
  }
  if (mappings_total_ + add.mappings > mappings_budget_) {
    return "the daemon's mappings would pass their budget of " + std::to_string(mappings_budget_) +
           " (half of vm.max_map_count)";
  }
  return "";
}

void Server::charge(Client& c, const Charge& add, int sign) {
  // Unsigned arithmetic: a release subtracts exactly what was added.
  const std::uint64_t bytes = add.pinned + add.objects;
  UidMemory& u = uid_memory_[c.uid];
  if (sign > 0) {
    c.mapped += add.pinned;
    c.object_bytes += add.objects;
    c.mappings += add.mappings;
    u.bytes += bytes;
    u.mappings += add.mappings;
    memory_total_ += bytes;
  } else {
    c.mapped -= add.pinned;
    c.object_bytes -= add.objects;
    c.mappings -= add.mappings;
    u.bytes -= bytes;
    u.mappings -= add.mappings;
    memory_total_ -= bytes;
  }
  if (u.bytes == 0 && u.mappings == 0) uid_memory_.erase(c.uid);
}

}  // namespace uroce::daemon
