// Memory regions: registration, lkey/rkey lookup, and the bounds, access and
// protection-domain checks every placement passes before a byte moves
// (IBTA 10.6 memory protection: R_Key, bounds, access rights, PD).
#pragma once

#include <cstddef>
#include <cstdint>
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
};

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

  // SEND with Invalidate: the rkey stops working for peers (IBTA 10.6.6.1).
  // kBadKey if unknown, kBadPd if in another PD, kNoAccess if the region may
  // not be invalidated remotely (every reg_mr region).
  AccessResult invalidate(std::uint32_t rkey, std::uint64_t pd);

  const Region* find(std::uint32_t key) const;

  // Moves on whenever a key stops working (remove, invalidate). The data
  // path caches host addresses resolved under some key together with the
  // epoch it saw; a changed epoch makes it check the key again before the
  // next byte moves, so no packet touches a region after dereg_mr returned.
  std::uint64_t epoch() const { return epoch_; }

 private:
  std::uint32_t key_of(std::uint32_t slot, std::uint32_t generation) const;
  std::uint32_t slot_of(std::uint32_t key) const { return (key >> 8) & slot_mask_; }

  std::vector<Region> slots_;
  std::vector<std::uint32_t> generation_;  // per slot: the generation of its next key
  std::uint32_t slot_bits_ = 0;
  std::uint32_t slot_mask_ = 0;
  std::uint32_t next_slot_ = 1;  // next-fit: where the search for a free slot starts
  std::uint64_t epoch_ = 0;
  // Live regions per PD identity: dealloc_pd asks without scanning the table.
  std::unordered_map<std::uint64_t, std::uint32_t> pd_regions_;
};

}  // namespace uroce::mem
