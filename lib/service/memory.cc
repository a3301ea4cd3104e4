// The client's memory in service mode (research verbs-abi.md §7): a region
// the program registers must be pages of memory files the daemon can map,
// at the addresses the program uses. Private anonymous pages (heap, stack,
// anonymous mmap) are moved onto a new file in place: copied into it, then
// the file is mapped over them. Pages already on one of our files are
// passed as they are. So a region is a row of pieces, each whole pages of
// one file, and a page is moved at most once however many regions cover it
// (buffers that share a page with a live region, as neighbours on a heap
// do, register as verbs allows).
//
// What is on which file is read from /proc/self/maps at each registration,
// never remembered by address: a heap that gives pages back (brk shrinks,
// munmap) and takes new ones at the same addresses has new anonymous pages
// there, which are moved afresh.
//
// Stacks: pages of the registering thread's own stack are moved by a
// helper thread while it sleeps; another thread's are refused
// (stack_pages.cc).
//
// fork(): the moved pages were private memory, so a child must get a copy,
// not the parent's pages (a child's malloc on shared heap pages would
// corrupt the parent's heap). As the kernel copies pinned pages into a
// child at fork (Linux >= 5.13, so rdma-core needs no ibv_fork_init
// there), a fork handler makes every page of our files private in the
// child, a copy taken while the parent's forking thread waits for it.
// With RDMAV_FORK_SAFE or IBV_FORK_SAFE the pages are MADV_DONTFORK
// instead, as rdma-core after ibv_fork_init: the child has none.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "service/client.h"
#include "service/pages.h"

namespace uroce::service {

using pages::Move;
using pages::Vma;
using pages::grow_stack_below;
using pages::main_stack_range;
using pages::move_onto_file;
using pages::move_while_still;
using pages::on_own_stack;
using pages::read_maps;
using pages::stack_owner;

std::vector<Vma> pages::read_maps() {
  std::vector<Vma> all;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, offset, dev;
    Vma v;
    in >> range >> v.perms >> offset >> dev >> v.inode;
    std::getline(in >> std::ws, v.path);
    const std::size_t dash = range.find('-');
    if (dash == std::string::npos || v.perms.size() < 4) continue;
    v.lo = std::stoull(range.substr(0, dash), nullptr, 16);
    v.hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    v.offset = std::stoull(offset, nullptr, 16);
    const std::size_t colon = dev.find(':');
    if (colon != std::string::npos) {
      v.dev = makedev(static_cast<unsigned>(std::stoul(dev.substr(0, colon), nullptr, 16)),
                      static_cast<unsigned>(std::stoul(dev.substr(colon + 1), nullptr, 16)));
    }
    all.push_back(std::move(v));
  }
  return all;
}

namespace {

std::uintptr_t page_size() { return static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE)); }

// mmap and munmap straight to the kernel: allocators that hook them (UCX's
// ucm, Open MPI's patcher) would otherwise see the remap as an unmap and
// drop the very registration being made.
void* raw_mmap(void* addr, std::size_t len, int prot, int flags, int fd, off_t off) {
  return reinterpret_cast<void*>(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
}
int raw_munmap(void* addr, std::size_t len) { return static_cast<int>(syscall(SYS_munmap, addr, len)); }


// Our memory files, by device and inode: each kept open while the process maps it, to
// be passed again for a later region on its pages. Process-wide: a later
// context (a program that closes and reopens the device) finds them too.
struct File {
  int fd = -1;
  bool buffer = false;         // alloc_buffer's, closed by free_buffer only
  std::uintptr_t page = 4096;  // its page size: 2 MiB for a hugepage buffer
};
struct Files {
  std::mutex mutex;
  using Key = std::pair<std::uint64_t, std::uint64_t>;  // st_dev, st_ino
  std::map<Key, File> by_inode;
  std::map<std::uintptr_t, std::pair<std::size_t, Key>> buffers;  // alloc_buffer's: bytes, file
};
Files& files() {
  static auto* f = new Files;  // never freed: mappings outlive every Client
  return *f;
}

Files::Key inode_of(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return {0, 0};
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

// Whole pages, other objects' bytes among them (freed ones too), copied by
// the kernel: a sanitizer's memcpy would take the reads of freed chunks for
// a use after free.
void copy_pages(void* dst, const void* src, std::size_t bytes) {
  iovec to{dst, bytes};
  iovec from{const_cast<void*>(src), bytes};
  if (process_vm_readv(getpid(), &to, 1, &from, 1, 0) != static_cast<ssize_t>(bytes)) std::memcpy(dst, src, bytes);
}

// [lo, hi) becomes private anonymous memory with the same bytes.
void make_private(std::uintptr_t lo, std::uintptr_t hi) {
  const std::size_t bytes = hi - lo;
  void* copy = raw_mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) return;
  copy_pages(copy, reinterpret_cast<const void*>(lo), bytes);
  // One step, so the range is never unmapped in between.
  if (mremap(copy, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(lo)) == MAP_FAILED) {
    raw_munmap(copy, bytes);
  }
}

// --- fork ---------------------------------------------------------------------------------

// The child's side: runs single-threaded in the child before fork()
// returns there, so it allocates nothing (the heap may be on the very pages
// it copies) and reads /proc/self/maps with read(2) into static buffers.
constexpr std::size_t kForkRanges = 1024;
std::pair<std::uintptr_t, std::uintptr_t> g_fork_ranges[kForkRanges];
char g_maps_chunk[1 << 16];
char g_maps_line[8192];

// Up to kForkRanges of our files' shared mappings; how many.
std::size_t collect_shared_ranges() {
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::size_t n = 0, len = 0;
  for (;;) {
    const ssize_t got = read(fd, g_maps_chunk, sizeof g_maps_chunk);
    if (got <= 0) break;
    for (ssize_t i = 0; i < got; ++i) {
      const char ch = g_maps_chunk[i];
      if (ch != '\n') {
        if (len + 1 < sizeof g_maps_line) g_maps_line[len++] = ch;
        continue;
      }
      g_maps_line[len] = '\0';
      len = 0;
      char* end = nullptr;
      const std::uintptr_t lo = std::strtoul(g_maps_line, &end, 16);
      if (end == nullptr || *end != '-') continue;
      const std::uintptr_t hi = std::strtoul(end + 1, &end, 16);
      if (end == nullptr || std::strncmp(end, " rw-s ", 6) != 0) continue;
      if (std::strstr(end, " /memfd:uroce-") == nullptr) continue;
      if (n < kForkRanges) g_fork_ranges[n++] = {lo, hi};
    }
  }
  close(fd);
  return n;
}

void fork_child_copies() {
  for (;;) {
    const std::size_t n = collect_shared_ranges();
    for (std::size_t i = 0; i < n; ++i) make_private(g_fork_ranges[i].first, g_fork_ranges[i].second);
    if (n < kForkRanges) break;  // more may be left: look again
  }
}

int g_fork_pipe[2] = {-1, -1};  // the child tells the waiting parent it has its copy

void fork_prepare() {
  files().mutex.lock();  // no registration half done in another thread
  if (pipe2(g_fork_pipe, O_CLOEXEC) != 0) g_fork_pipe[0] = g_fork_pipe[1] = -1;
}
void fork_parent() {
  if (g_fork_pipe[1] >= 0) {
    close(g_fork_pipe[1]);
    // Until the child has copied the pages (or died: end of file): this
    // thread must not change them meanwhile.
    char done;
    while (read(g_fork_pipe[0], &done, 1) < 0 && errno == EINTR) {
    }
    close(g_fork_pipe[0]);
  }
  files().mutex.unlock();
}
void fork_child() {
  fork_child_copies();
  if (g_fork_pipe[1] >= 0) {
    const char done = 1;
    [[maybe_unused]] const ssize_t w = write(g_fork_pipe[1], &done, 1);
    close(g_fork_pipe[1]);
    close(g_fork_pipe[0]);
  }
  files().mutex.unlock();
}

void install_fork_handlers() {
  static const int once = pthread_atfork(fork_prepare, fork_parent, fork_child);
  (void)once;
}

bool fork_safe() { return std::getenv("RDMAV_FORK_SAFE") != nullptr || std::getenv("IBV_FORK_SAFE") != nullptr; }

std::string hex_range(std::uintptr_t a, std::uintptr_t b) {
  char text[48];
  std::snprintf(text, sizeof text, "%#lx-%#lx", static_cast<unsigned long>(a), static_cast<unsigned long>(b));
  return text;
}

}  // namespace

int pages::move_onto_file(std::uintptr_t b0, std::uintptr_t b1, std::string& why) {
  const std::size_t bytes = b1 - b0;
  const int file = make_memory_file("uroce-mr", bytes);
  if (file < 0) {
    why = std::string("memfd_create: ") + std::strerror(errno);
    return -1;
  }
  void* temp = raw_mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
  if (temp == MAP_FAILED) {
    why = std::string("mmap: ") + std::strerror(errno);
    close(file);
    return -1;
  }
  // Whole pages: the head and tail pages may hold other objects (malloc's
  // own among them). Writes by other threads between this copy and the
  // remap are lost: a buffer must be quiescent while it is registered.
  copy_pages(temp, reinterpret_cast<const void*>(b0), bytes);
  void* at = raw_mmap(reinterpret_cast<void*>(b0), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, file, 0);
  const int e = errno;
  raw_munmap(temp, bytes);
  if (at != reinterpret_cast<void*>(b0)) {
    why = std::string("mmap over the region: ") + std::strerror(e);
    close(file);
    return -1;
  }
  // As rdma-core after ibv_fork_init: a child does not inherit registered
  // pages. Without it a child shares them (MAP_SHARED), where private memory
  // would be copy-on-write: README "Running as a service" says so.
  if (fork_safe()) madvise(reinterpret_cast<void*>(b0), bytes, MADV_DONTFORK);
  return file;
}


namespace {

std::atomic<std::uint64_t> g_refused{0};

// A refusal: counted, and said on stderr (ibv_reg_mr only sets errno).
int refuse(int err, const std::string& why) {
  g_refused.fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "uroce: reg_mr through uroced refused: %s\n", why.c_str());
  return err;
}


}  // namespace

std::uint64_t Client::refused_shares() { return g_refused.load(std::memory_order_relaxed); }

int Client::share(void* addr, std::size_t len, SharedRange& out, std::string& why) {
  const std::uintptr_t page = page_size();
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t a0 = a & ~(page - 1);
  const std::uintptr_t a1 = (a + len + page - 1) & ~(page - 1);
  install_fork_handlers();
  Files& all = files();
  std::lock_guard<std::mutex> lock(all.mutex);
  const std::vector<Vma> maps = read_maps();

  // Files no longer mapped here (their pages given back by the program) are
  // closed: the daemon keeps its own mapping for the regions still on them.
  std::set<Files::Key> mapped;
  for (const Vma& v : maps) mapped.insert({v.dev, v.inode});
  for (auto it = all.by_inode.begin(); it != all.by_inode.end();) {
    if (!it->second.buffer && mapped.count(it->first) == 0) {
      close(it->second.fd);
      it = all.by_inode.erase(it);
    } else {
      ++it;
    }
  }

  // The plan: [a0, a1) as runs on our files and runs of anonymous pages
  // (fd -1) to move, checked whole before anything moves.
  struct Run {
    std::uintptr_t lo, hi;
    int fd;
    std::uint64_t file_offset;
    std::uintptr_t page;  // of its file: pieces are whole pages of it
  };
  std::vector<Run> runs;
  std::uintptr_t grow_below = 0;  // the main stack's lowest page, when a run starts there
  const auto [stack_lo, stack_hi] = main_stack_range(maps);
  std::uintptr_t covered = a0;
  std::uintptr_t previous_hi = 0;  // the end of the mapping before v
  for (const Vma& v : maps) {
    const std::uintptr_t below = previous_hi;
    previous_hi = v.hi;
    if (v.hi <= covered || covered >= a1) continue;
    if (v.lo > covered) break;  // a hole
    const std::uintptr_t lo = covered, hi = std::min(v.hi, a1);
    const auto ours = v.inode != 0 ? all.by_inode.find({v.dev, v.inode}) : all.by_inode.end();
    if (ours != all.by_inode.end() && v.path.rfind("/memfd:uroce-", 0) == 0 && v.perms.compare(0, 2, "rw") == 0 &&
        v.perms[3] == 's') {
      const std::uint64_t off = v.offset + (lo - v.lo);
      if (!runs.empty() && runs.back().fd == ours->second.fd &&
          runs.back().file_offset + (runs.back().hi - runs.back().lo) == off) {
        runs.back().hi = hi;  // the same file, continued (a VMA split by mprotect or madvise)
      } else {
        runs.push_back(Run{lo, hi, ours->second.fd, off, ours->second.page});
      }
    } else if (v.private_anonymous()) {
      // (Not at the stack's size limit: there it cannot grow, and the move leaves it as it is.)
      if (lo == v.lo && below != v.lo && v.lo >= stack_lo + page && v.hi <= stack_hi) grow_below = lo;
      if (!runs.empty() && runs.back().fd < 0) {
        runs.back().hi = hi;
      } else {
        runs.push_back(Run{lo, hi, -1, 0, page});
      }
    } else {
      why = "cannot share memory at " + hex_range(a, a + len) + " with uroced: the pages at " + hex_range(lo, hi) +
            " are " + v.perms + " " + (v.path.empty() ? "memory" : v.path) +
            ", not private anonymous memory: allocate the buffer with malloc or "
            "mmap(MAP_PRIVATE|MAP_ANONYMOUS)";
      return refuse(EINVAL, why);
    }
    covered = hi;
  }
  if (covered < a1) {
    why = "cannot share memory at " + hex_range(a, a + len) + " with uroced: the pages at " +
          hex_range(covered, a1) + " are not mapped";
    return refuse(EFAULT, why);
  }
  if (runs.size() > kMaxPieces) {
    why = "the region lies on " + std::to_string(runs.size()) + " pieces of memory (pages moved for earlier "
          "regions between others), more than " + std::to_string(kMaxPieces) +
          " in one registration: register it in parts, or its buffer before those inside it";
    return refuse(EINVAL, why);
  }

  // A hugepage buffer's file is mapped in whole hugepages, at addresses
  // aligned to them, which a row of pieces cannot promise: such a region
  // lies inside its buffer, as one piece of whole hugepages.
  for (Run& r : runs) {
    if (r.page == page) continue;
    if (runs.size() != 1) {
      why = "a region at " + hex_range(a, a + len) + " reaches past its hugepage buffer (alloc_buffer): "
            "in service mode it must lie inside it";
      return refuse(EINVAL, why);
    }
    const std::uintptr_t head = r.lo & (r.page - 1);  // the VMA is hugepage-aligned, so this stays inside it
    r.lo -= head;
    r.file_offset -= head;
    r.hi = (r.hi + r.page - 1) & ~(r.page - 1);
  }
  std::vector<Move> moves;
  for (const Run& r : runs) {
    if (r.fd < 0) moves.push_back(Move{r.lo, r.hi, -1, {}});
  }
  if (!moves.empty()) {
    if (const pid_t owner = stack_owner(moves, maps); owner != 0) {
      why = "cannot share memory at " + hex_range(a, a + len) + " with uroced: it is on another thread's stack "
            "(thread " + std::to_string(owner) + "), whose frames would be lost while it moves: register it from "
            "that thread, or use malloc'd memory";
      return refuse(EINVAL, why);
    }
    if (grow_below != 0) grow_stack_below(grow_below);
    if (on_own_stack(moves, maps)) {
      if (std::string e = move_while_still(moves); !e.empty()) {
        why = e;
        return refuse(ENOMEM, why);
      }
    } else {
      // Pages this thread does not run on: moved here, as they always were.
      for (Move& m : moves) {
        m.fd = move_onto_file(m.lo, m.hi, m.why);
        if (m.fd < 0) break;
      }
    }
    for (const Move& m : moves) {
      if (m.fd < 0) {
        why = m.why.empty() ? "an earlier piece failed" : m.why;
        // The pieces moved before it stay on their files, as memory of ours.
        for (const Move& done : moves) {
          if (done.fd >= 0) all.by_inode[inode_of(done.fd)] = File{done.fd, false};
        }
        return ENOMEM;
      }
      all.by_inode[inode_of(m.fd)] = File{m.fd, false};
    }
  }
  out.pieces.clear();
  std::size_t next_move = 0;
  for (Run& r : runs) {
    if (r.fd < 0) r.fd = moves[next_move++].fd;
    out.pieces.push_back(SharedRange::Piece{r.fd, r.file_offset, r.hi - r.lo});
  }
  out.offset = a - runs.front().lo;
  return 0;
}

void* Client::alloc_buffer(std::size_t bytes) {
  install_fork_handlers();
  // Hugepages when the buffer fills at least one and some are free (the
  // mapping reserves them, so none free fails here, not on a later fault);
  // normal pages otherwise.
  constexpr std::size_t kHuge = 2u << 20;
  std::size_t size = 0;
  int file = -1;
  void* p = MAP_FAILED;
  if (bytes >= kHuge) {
    size = (bytes + kHuge - 1) & ~(kHuge - 1);
    file = make_memory_file("uroce-buffer", size, true);
    if (file >= 0) p = raw_mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    if (p == MAP_FAILED && file >= 0) {
      close(file);
      file = -1;
    }
  }
  const bool huge = p != MAP_FAILED;
  if (!huge) {
    size = page_round(bytes == 0 ? 1 : bytes);
    file = make_memory_file("uroce-buffer", size);
    if (file < 0) return nullptr;
    p = raw_mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    if (p == MAP_FAILED) {
      close(file);
      return nullptr;
    }
  }
  Files& all = files();
  std::lock_guard<std::mutex> lock(all.mutex);
  const Files::Key inode = inode_of(file);
  all.by_inode[inode] = File{file, true, huge ? kHuge : page_size()};
  all.buffers[reinterpret_cast<std::uintptr_t>(p)] = {size, inode};
  return p;
}

void Client::free_buffer(void* p) {
  Files& all = files();
  std::lock_guard<std::mutex> lock(all.mutex);
  auto it = all.buffers.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == all.buffers.end()) return;
  raw_munmap(p, it->second.first);
  auto f = all.by_inode.find(it->second.second);
  if (f != all.by_inode.end()) {
    close(f->second.fd);
    all.by_inode.erase(f);
  }
  all.buffers.erase(it);
}

}  // namespace uroce::service
