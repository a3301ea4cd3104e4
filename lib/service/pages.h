// The pages under a region (lib/service/memory.cc), and the stacks among
// them (lib/service/stack_pages.cc): what /proc/self/maps says of them, the
// move of private anonymous pages onto a memory file, and where the
// process's stacks lie, so that a move never pulls a running thread's
// frames from under it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace uroce::service::pages {

// One line of /proc/self/maps.
struct Vma {
  std::uintptr_t lo = 0, hi = 0;
  std::string perms;
  std::uint64_t offset = 0;
  std::uint64_t inode = 0;
  std::uint64_t dev = 0;  // as st_dev: an inode number alone repeats across filesystems
  std::string path;
  bool private_anonymous() const { return perms.compare(0, 2, "rw") == 0 && perms[3] == 'p' && inode == 0; }
};

std::vector<Vma> read_maps();

// Moves the private anonymous pages [b0, b1) onto a new memory file in
// place; its descriptor, or -1 and why. Writes to those pages between its
// copy and its remap are lost: nothing may run on them meanwhile.
int move_onto_file(std::uintptr_t b0, std::uintptr_t b1, std::string& why);

// Pages [lo, hi) to move onto a file of their own; the file once moved.
struct Move {
  std::uintptr_t lo, hi;
  int fd = -1;
  std::string why;
};

// Where the main thread's stack may lie, [lo, hi).
std::pair<std::uintptr_t, std::uintptr_t> main_stack_range(const std::vector<Vma>& maps);
// The thread (other than this one) whose stack holds pages of `moves`: its id, or 0.
pid_t stack_owner(const std::vector<Move>& moves, const std::vector<Vma>& maps);
// Whether any of `moves` lies on the stack this thread runs on.
bool on_own_stack(const std::vector<Move>& moves, const std::vector<Vma>& maps);
// Makes `moves` on a helper thread while this one sleeps: "" or why nothing was moved.
std::string move_while_still(std::vector<Move>& moves);
// Grows the main thread's stack one page below its lowest page `lo`.
void grow_stack_below(std::uintptr_t lo);

}  // namespace uroce::service::pages
