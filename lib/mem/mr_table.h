// Memory regions: registration, lkey/rkey lookup, and the bounds, access and
// protection-domain checks every placement passes before a byte moves
// (IBTA 10.6 memory protection: R_Key, bounds, access rights, PD).
//
// Threads. Everything that adds, removes or re-registers a region or
// window runs in a control call, which holds every engine between two
// bursts (lib/verbs/local.h): it races with nothing. A window's binding
// changes on the data path, though, by whichever engine runs the bind,
// LOCAL_INV or SEND with Invalidate, while the other engines check rkeys
// against it: a window slot's changing fields (listed at Region::kind) are
// written under its sequence counter (odd while a writer is inside; writers
// exclude each other through it) and read as a consistent copy that is
// taken again if a writer came between, all through std::atomic_ref; a
// region's `windows` count is changed atomically. A region's own fields
// change only in control calls, so checking an ordinary MR's key reads
// them as before, with no counter and no retry. Not removed by this: a packet
// whose check passed just before another engine invalidated the window
// is still placed, as on a NIC where the invalidation races a packet
// already past its check.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace uroce::mem {

enum class AccessResult : std::uint8_t {
  kOk,
  kBadKey,       // no such key, or a stale or invalidated one
  kBadPd,        // the region belongs to another protection domain
  kOutOfBounds,  // the range leaves the region (or wraps)
  kNoAccess,     // the region does not grant the access asked
};

const char* access_result_name(AccessResult r);

struct Region {
  std::uint8_t* base = nullptr;  // host address of iova
  std::uint64_t iova = 0;        // the address peers and SGEs use
  std::uint64_t length = 0;
  int access = 0;                // ibv_access_flags
  std::uint64_t pd = 0;          // the PD's identity (never reused in a process)
  std::uint32_t key = 0;         // lkey == rkey
  bool valid = false;
  bool rkey_valid = false;       // cleared by SEND with Invalidate
  // Whether a peer's SEND with Invalidate may revoke the rkey: only memory
  // windows and fast-registered regions (IBTA 10.6.6, base memory management
  // extensions), which this stack does not have yet; reg_mr regions never.
  bool remote_invalidatable = false;
  // On-demand paging (mem/odp.h): 0 for a pinned region, mapped here and
  // reached with memcpy; else the owner of the address space that holds
  // `base` (a pid, or a /proc/PID/mem descriptor: mem/odp.h), reached only
  // through odp_read/odp_write, never by a load or store.
  std::int32_t odp_pid = 0;
  // Memory windows (IBTA 10.6.7; lib/mem/mr_window.cc): a window is a slot
  // of its own whose key is an rkey only. Bound, base/iova/length/access
  // describe the range it grants (iova 0 when zero-based) and rkey_valid is
  // set; unbound or invalidated, rkey_valid is clear.
  // While engines run, a window's key, rkey_valid, base, iova, length,
  // access, odp_pid, bound_mr and bound_qpn change under its slot's
  // sequence counter (the head of mr_table.h), and a region's `windows`
  // atomically; kind, pd and valid change only in control calls.
  enum class Kind : std::uint8_t { kRegion, kWindow1, kWindow2 } kind = Kind::kRegion;
  std::uint32_t bound_mr = 0;     // window: the key of the region it is bound to (0: none)
  std::uint32_t bound_qpn = 0;    // type 2 window: the QP it was bound through (its rkey works only there)
  std::uint32_t windows = 0;      // region: windows bound to it (dereg_mr is refused while any are)
  bool is_window() const { return kind != Kind::kRegion; }
};

// IBV_WR_BIND_MW (ibv_bind_mw for type 1): what the bind asks for.
struct WindowBind {
  std::uint32_t window_key = 0;  // the window: its slot, by the key it was allocated with or any later rkey
  std::uint32_t new_rkey = 0;    // the rkey it answers to once bound (same slot; low 8 bits the consumer's key)
  std::uint32_t mr_key = 0;      // the region bound to; 0 (or length 0): unbind (type 1 only)
  std::uint64_t addr = 0;        // the region's iova where the window starts
  std::uint64_t length = 0;
  int access = 0;                // ibv_access_flags: remote rights and IBV_ACCESS_ZERO_BASED
};

// Why a bind or a local invalidation is refused (each a row in bind_error_name).
enum class WindowResult : std::uint8_t {
  kOk,
  kNoWindow,       // no such window (never allocated, deallocated, or not a window's key)
  kWrongPd,        // the window or the region belongs to another PD than the QP
  kWrongKey,       // the new rkey names another slot
  kStillBound,     // o10-37.2.30: a type 2 window is bound already
  kNoRegion,       // the region's key names no region
  kNoBindRight,    // C10-73: the region lacks IBV_ACCESS_MW_BIND
  kNeedLocalWrite, // C10-74: remote write or atomic through a window needs local write on the region
  kOutOfBounds,    // C10-75: the window leaves the region
  kBadAccess,      // bits a window cannot grant, or zero-based on a type 1 window (o10-36.2.2)
  kNotInvalidatable,  // o10-37.2.26: LOCAL_INV or SEND with Invalidate of a type 1 window
};
const char* window_result_name(WindowResult r);

// Fills `bytes` bytes at `dst` with unpredictable ones (a CSPRNG).
using RandomFill = void (*)(void* dst, std::size_t bytes);

class MrTable {
 public:
  // With `random`, keys are unpredictable: each slot's generation starts at
  // a random value, and the search for a free slot at a random one. Without
  // (unit tests), generations start at 1 from slot 1.
  explicit MrTable(std::uint32_t capacity, RandomFill random = nullptr);

  // Registers a region. Returns 0 and the key, or EINVAL (zero length, bad
  // flags: remote write or atomic without local write) or ENOMEM (table full).
  int add(std::uint64_t pd, void* base, std::uint64_t iova, std::uint64_t length, int access,
          std::uint32_t& key);
  // A caller-chosen key (tests that replay captured traffic need the peer's
  // rkey); EEXIST if its slot is taken.
  int add_with_key(std::uint64_t pd, void* base, std::uint64_t iova, std::uint64_t length,
                   int access, std::uint32_t key);
  // An on-demand region (IBV_ACCESS_ON_DEMAND, given in `access` or not) of
  // owner `pid`'s memory (mem/odp.h; not 0): add()'s checks and answers. Implicit ODP is
  // iova 0, length UINT64_MAX, base nullptr: every address.
  int add_odp(std::uint64_t pd, void* base, std::uint64_t iova, std::uint64_t length, int access,
              std::int32_t pid, std::uint32_t& key);
  // A region of no bytes at `iova` (ibv_reg_dm_mr of length 0, which
  // rdma-core's tests register on device memory): only zero-length accesses
  // at its iova pass check(). 0 and the key, EINVAL (flags) or ENOMEM.
  int add_empty(std::uint64_t pd, void* base, std::uint64_t iova, int access, std::uint32_t& key);
  int remove(std::uint32_t key);
  // ibv_rereg_mr: the region under `key` takes a new translation, PD and
  // access in place (the caller passes the old values of what does not
  // change) and keeps its key. The epoch moves on, so whatever resolved the
  // key before checks it again against the new values before the next byte
  // moves (nothing touches the old memory after this returns). 0; EINVAL
  // (no such key, or add()'s checks of the arguments); nothing changed then.
  int rereg(std::uint32_t key, std::uint64_t pd, void* base, std::uint64_t iova, std::uint64_t length, int access);
  // add()'s checks of the arguments alone: 0 or EINVAL. Lets a caller
  // refuse a bad region before the slow part of registering it.
  static int check_args(std::uint64_t iova, std::uint64_t length, int access);
  std::uint32_t regions_in_pd(std::uint64_t pd) const;

  // Resolves [iova, iova + len) under `key` for a peer (`remote`: rkey) or a
  // local SGE (lkey) asking for `need` (ibv_access_flags bits; 0 for a local
  // read). On kOk sets `host` to the first byte.
  AccessResult check(std::uint32_t key, bool remote, std::uint64_t pd, std::uint64_t iova,
                     std::uint64_t len, int need, std::uint8_t*& host) const;

  // check() for a caller that can reach on-demand regions: `odp_pid` is
  // the region's (0: an ordinary one, `host` may be dereferenced).
  AccessResult check(std::uint32_t key, bool remote, std::uint64_t pd, std::uint64_t iova, std::uint64_t len,
                     int need, std::uint8_t*& host, std::int32_t& odp_pid) const;

  // SEND with Invalidate: the rkey stops working for peers (IBTA 10.6.6.1).
  // kBadKey if unknown, kBadPd if in another PD, kNoAccess if the region may
  // not be invalidated remotely (every reg_mr region).
  AccessResult invalidate(std::uint32_t rkey, std::uint64_t pd);

  const Region* find(std::uint32_t key) const;

  // --- Memory windows (IBTA 10.6.7; lib/mem/mr_window.cc) ------------------
  // ibv_alloc_mw: an unbound window of type 1 or 2 in `pd`. 0 and its key,
  // EINVAL (another type), ENOMEM (table full).
  int add_window(std::uint64_t pd, int type, std::uint32_t& key);
  // ibv_dealloc_mw: a bound window is unbound first (its rkey stops
  // working). EINVAL if `key` names no window.
  int remove_window(std::uint32_t key);
  // IBV_WR_BIND_MW through QP `qpn` of PD `pd`: kOk with the window bound
  // at `b.new_rkey`, or why not (the window unchanged).
  WindowResult bind_window(const WindowBind& b, std::uint64_t pd, std::uint32_t qpn);
  // IBV_WR_LOCAL_INV: a type 2 window of `pd` stops answering to `rkey`.
  WindowResult invalidate_window(std::uint32_t rkey, std::uint64_t pd);
  // check() for a peer's request on QP `qpn`: a type 2 window's rkey works
  // only on the QP that bound it (IBTA 10.6.7.2: type 2B).
  AccessResult check_remote(std::uint32_t rkey, std::uint64_t pd, std::uint32_t qpn, std::uint64_t iova,
                            std::uint64_t len, int need, std::uint8_t*& host) const;
  // The same, and the owner of the memory reached (Region::odp_pid: 0 for
  // pinned memory; a window on an ODP region has its region's).
  AccessResult check_remote(std::uint32_t rkey, std::uint64_t pd, std::uint32_t qpn, std::uint64_t iova,
                            std::uint64_t len, int need, std::uint8_t*& host, std::int32_t& odp_pid) const;
  // Whether `key` is (or was last bound as) a window's: the responder counts
  // refusals through windows apart.
  bool names_window(std::uint32_t key) const;

  // Moves on whenever a key stops working (remove, invalidate). The data
  // path caches host addresses resolved under some key together with the
  // epoch it saw; a changed epoch makes it check the key again before the
  // next byte moves, so no packet touches a region after dereg_mr returned.
  // Read the epoch BEFORE checking a key, and cache that value: an engine
  // may move it between the check and a later read.
  //
  // Acquire, paired with the writers' release (bump_epoch): an engine that
  // sees the new epoch checks again and must then see the change that moved
  // it (the window's slot as its writer left it), not an older copy that a
  // relaxed load would allow; it would cache that under the new epoch. On
  // x86 an acquire load is the plain load it was.
  std::uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

 private:
  std::uint32_t key_of(std::uint32_t slot, std::uint32_t generation) const;
  std::uint32_t slot_of(std::uint32_t key) const { return (key >> 8) & slot_mask_; }
  Region* window_of(std::uint32_t key);  // the window slot `key` names, whatever its low 8 bits
  // The window of slot `i` whose sequence counter the caller holds
  // (SlotWriter): unbound, its region's count of windows dropped.
  void unbind(Region& w);
  void bump_epoch() { epoch_.fetch_add(1, std::memory_order_release); }
  // Holds slot i's sequence counter odd (a writer inside) for its life.
  class SlotWriter;
  // A consistent copy of window slot i's changing fields.
  Region read_window(std::uint32_t i) const;
  AccessResult check_window(std::uint32_t i, std::uint32_t rkey, std::uint64_t pd, std::uint32_t qpn,
                            std::uint64_t iova, std::uint64_t len, int need, std::uint8_t*& host,
                            std::int32_t& odp_pid) const;

  std::vector<Region> slots_;
  std::vector<std::uint32_t> generation_;  // per slot: the generation of its next key
  std::uint32_t slot_bits_ = 0;
  std::uint32_t slot_mask_ = 0;
  std::uint32_t next_slot_ = 1;  // next-fit: where the search for a free slot starts
  // Per slot: even while no writer is inside, odd while one is (windows only).
  std::unique_ptr<std::atomic<std::uint32_t>[]> seq_;
  std::atomic<std::uint64_t> epoch_{0};
  // Live regions per PD identity: dealloc_pd asks without scanning the table.
  std::unordered_map<std::uint64_t, std::uint32_t> pd_regions_;
};

}  // namespace uroce::mem
