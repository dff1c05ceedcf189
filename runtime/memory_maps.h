// The process's memory maps, against Linux's cap on them.
//
// Linux limits the memory maps (VMAs) one process may hold to vm.max_map_count, 65530 by
// default. Every object the JIT loads costs about two (its code and its constants are
// mapped with different permissions), so a process that kept every kernel it ever compiled
// reached the cap after ~34,000 kernels. There every mmap fails, malloc's included, and
// LLVM, which treats a failed allocation as fatal, aborts the process. runtime/jit.cpp
// therefore counts maps and refuses to compile or load code near the cap (JitMapBudget).
#pragma once

#include <cstdint>

namespace ampfuse::runtime {

// The maps this process holds now: the lines of /proc/self/maps (-1 where it cannot be
// read). Costs about 1 us per map: read it now and then, not per call.
int64_t process_map_count();

// vm.max_map_count (/proc/sys/vm/max_map_count), or -1 where it cannot be read.
int64_t system_max_map_count();

// The map count past which the JIT loads no more code, read once:
// AMPFUSE_JIT_MAX_MAPS=N when set (N >= 1; anything else is an Error naming the variable),
// else vm.max_map_count less an eighth (at least 1,024 maps) for everything else the
// process maps: malloc's arenas and large blocks, tensors, threads' stacks. -1: no limit
// (the cap cannot be read).
int64_t jit_map_limit();

// Decides when the JIT must count the process's maps before loading more code: counting
// costs time in proportion to the maps, and one load adds only a few, so it counts only when
// the loads since the last count could have brought the process near the limit.
class JitMapBudget {
 public:
  // At most kMapsPerLoad maps per loaded object (measured: about 2).
  static constexpr int64_t kMapsPerLoad = 8;

  // `limit` -1: never refuses; `count` reads the process's maps (tests substitute one).
  explicit JitMapBudget(int64_t limit, int64_t (*count)() = process_map_count);

  // Whether one more object may be loaded: counts the maps when they could be near the
  // limit, and says no when they are past it. `*maps` gets the last count (-1: never counted).
  bool allows_load(int64_t* maps);

  // An object was loaded (the next count comes sooner).
  void loaded() { ++loads_since_count_; }

  int64_t limit() const { return limit_; }

 private:
  int64_t limit_;
  int64_t (*count_)();
  int64_t last_count_ = -1;
  int64_t loads_since_count_ = 0;
};

}  // namespace ampfuse::runtime
