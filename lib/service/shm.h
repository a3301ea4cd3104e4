// Shared memory between uroced and a client: the ring layout both sides map
// (a header of cursors, then fixed-size slots), memory files, and messages
// with file descriptors on a UNIX socket.
//
// Each side keeps its own cursor privately and only stores it into the
// shared header; what it loads from there is the other side's word, which
// the daemon treats as untrusted (a client may write anything into memory it
// shares): every index is bounded before a slot is read, and a slot is
// copied out before it is checked.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ring/spsc_ring.h"

namespace uroce::service {

// One ring's header: the cursors of lib/ring's SpscRing (the producer's
// `head`, the next slot it writes; the consumer's `tail`, the next it
// reads), then words of the service's own, each group on a cache line of
// its own. Work-queue rings also carry `retired` (the daemon: requests the
// engine has finished with; it, not `tail`, frees the client's slots) and
// `state` (the QP's state as the daemon last saw it). CQ rings carry `armed`
// (ibv_req_notify_cq, written by the client: 0 none, 1 solicited, 2 next),
// `overflow` (the daemon: the CQ overflowed) and `covered` (the head as of
// the last event, advanced by either side: an arm fires at once only for
// completions past it, transport::CompletionRing::missed; a daemon that
// leaves it 0 makes every waiting completion count).
struct RingHeader : ring::Cursors {
  alignas(64) std::atomic<std::uint32_t> retired{0};
  std::atomic<std::uint32_t> state{0};
  alignas(64) std::atomic<std::uint32_t> armed{0};
  std::atomic<std::uint32_t> overflow{0};
  std::atomic<std::uint32_t> covered{0};
};
static_assert(sizeof(RingHeader) == 256, "RingHeader is part of the protocol");

// A ring of `slots` (a power of two) T after its header, as one side maps
// it: lib/ring's SpscRing on the header's words.
template <typename T>
struct Ring : ring::SpscRing<T> {
  RingHeader* header = nullptr;
  using ring::SpscRing<T>::at;  // the consumer's entries, beside the factory below

  static std::size_t bytes(std::uint32_t slots) { return sizeof(RingHeader) + sizeof(T) * slots; }
  // A CQ's ring: the consumer (the client) frees slots with `tail`.
  static Ring at(void* base, std::uint32_t slots) {
    Ring r;
    r.header = static_cast<RingHeader*>(base);
    r.attach(r.header, first_slot(base), slots, slots);
    return r;
  }
  // A work queue's ring: the daemon frees slots with `retired` (work the
  // engine is done with); the client posts at most `limit` beyond it.
  static Ring work_queue_at(void* base, std::uint32_t slots, std::uint32_t limit) {
    Ring r;
    r.header = static_cast<RingHeader*>(base);
    r.attach(&r.header->head, &r.header->retired, first_slot(base), slots, limit);
    return r;
  }
  std::uint32_t slots() const { return this->capacity(); }

 private:
  static T* first_slot(void* base) { return reinterpret_cast<T*>(static_cast<char*>(base) + sizeof(RingHeader)); }
};

// The smallest power of two >= n (n >= 1).
std::uint32_t ring_slots(std::uint32_t n);
// `bytes` rounded up to whole pages.
std::size_t page_round(std::size_t bytes);

// Whether a memory file's sealing is finished when it is made. kOpen (a
// region's file, made by the client) leaves F_SEAL_SEAL off, so uroced can
// add F_SEAL_FUTURE_WRITE to a hugepage file once it has mapped it: from
// then on nobody can punch a hole in it (F_SEAL_SHRINK alone does not
// forbid FALLOC_FL_PUNCH_HOLE, and a punched hugetlb page faults with
// SIGBUS). kFinal (the daemon's ring files, which the client maps after it
// gets them) ends sealing at once.
enum class Sealing { kOpen, kFinal };

// A memory file of `bytes` (memfd, close-on-exec), sealed against shrinking
// and growing (so a peer that maps it never meets SIGBUS), zero-filled; of
// 2 MiB hugepages with `huge` (bytes a multiple of 2 MiB; mapping it
// reserves them). -1 and errno on failure.
int make_memory_file(const char* name, std::size_t bytes, bool huge = false, Sealing sealing = Sealing::kOpen);

// What uroced learns of a region's memory file from its descriptor.
struct MemoryFileInfo {
  std::uint64_t dev = 0, ino = 0;  // the file's identity: an inode number alone repeats across filesystems
  std::uint64_t bytes = 0;
  bool huge = false;                // on hugetlbfs (MFD_HUGETLB)
  bool write_sealed = false;        // F_SEAL_FUTURE_WRITE already on: uroced sealed it (or nobody can map it writable)
};
// Whether `fd` can hold registered memory: a memfd (a regular file on tmpfs
// or hugetlbfs), open read-write, sealed against shrinking and growing, not
// against writing; a hugepage file also open to uroced's
// F_SEAL_FUTURE_WRITE (no F_SEAL_SEAL) or already carrying it. Run on every
// descriptor of every request. "" and `info`, or why not.
std::string check_memory_file(int fd, MemoryFileInfo& info);
// Adds F_SEAL_FUTURE_WRITE (once the daemon has mapped `fd` writable):
// no new writable mapping, write() or hole punching by anyone after it;
// mappings made before keep working. "" or why not.
std::string seal_against_writers(int fd);
// Maps `bytes` of `fd` shared, read-write, at `offset`; nullptr and errno on failure.
void* map_shared(int fd, std::size_t bytes, std::size_t offset = 0);

// One message of `len` bytes with up to kMaxFds descriptors on a SOCK_SEQPACKET
// socket. send_message: 0 or an errno value. recv_message: the message's
// length (0: the peer closed), or -errno; `fds` receives the descriptors
// (`nfds` how many; extras beyond `max_fds` are closed); a message longer
// than `len` is reported as -EMSGSIZE.
int send_message(int sock, const void* buf, std::size_t len, const int* fds = nullptr, int nfds = 0);
long recv_message(int sock, void* buf, std::size_t len, int* fds, int max_fds, int& nfds);

}  // namespace uroce::service
