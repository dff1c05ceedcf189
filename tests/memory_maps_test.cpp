// The process's memory maps and the JIT's budget of them (runtime/memory_maps.h).
#include "runtime/memory_maps.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

namespace ampfuse::testing {
namespace {

TEST(MemoryMaps, CountsThisProcesssMaps) {
  const int64_t before = runtime::process_map_count();
  ASSERT_GT(before, 0);
  // 21 pages whose permissions alternate are 21 maps (neighbours with different permissions
  // never merge), less the two ends, which may merge with the maps beside them.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  constexpr int kPages = 21;
  auto* base = static_cast<char*>(mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(base, MAP_FAILED);
  for (int i = 1; i < kPages; i += 2) ASSERT_EQ(mprotect(base + i * page, page, PROT_READ), 0);
  const int64_t during = runtime::process_map_count();
  munmap(base, kPages * page);
  EXPECT_GE(during - before, kPages - 2);
  EXPECT_LT(runtime::process_map_count(), during);
}

TEST(MemoryMaps, ReadsTheSystemsCap) { EXPECT_GT(runtime::system_max_map_count(), 0); }

// A stand-in for the process's count, so the budget's decisions can be seen.
int64_t g_maps = 0;
int g_counts = 0;
int64_t fake_count() {
  ++g_counts;
  return g_maps;
}

TEST(JitMapBudget, CountsOnlyWhenTheLoadsSinceCouldReachTheLimit) {
  g_maps = 100;
  g_counts = 0;
  runtime::JitMapBudget budget(1000, fake_count);
  int64_t maps = 0;
  EXPECT_TRUE(budget.allows_load(&maps));
  EXPECT_EQ(g_counts, 1) << "the first load counts";
  EXPECT_EQ(maps, 100);
  // 100 maps and 8 a load: the 112th load since could reach 1000, not before.
  int loads = 0;
  while (g_counts == 1) {
    budget.loaded();
    ++loads;
    ASSERT_TRUE(budget.allows_load(&maps));
    ASSERT_LT(loads, 1000);
  }
  EXPECT_EQ(loads, (1000 - 100) / runtime::JitMapBudget::kMapsPerLoad);
}

TEST(JitMapBudget, NearTheLimitEveryLoadCountsAndAtItTheBudgetRefuses) {
  g_maps = 995;
  g_counts = 0;
  runtime::JitMapBudget budget(1000, fake_count);
  int64_t maps = 0;
  EXPECT_TRUE(budget.allows_load(&maps));
  budget.loaded();
  g_maps = 1000;
  EXPECT_FALSE(budget.allows_load(&maps));
  EXPECT_EQ(g_counts, 2);
  EXPECT_EQ(maps, 1000);
  EXPECT_FALSE(budget.allows_load(&maps));
  EXPECT_EQ(g_counts, 3);
  // Maps released (executables let go): loads go on.
  g_maps = 400;
  EXPECT_TRUE(budget.allows_load(&maps));
  EXPECT_EQ(maps, 400);
}

TEST(JitMapBudget, CountsAgainEvery256LoadsFarFromTheLimit) {
  g_maps = 10;
  g_counts = 0;
  runtime::JitMapBudget budget(int64_t{1} << 40, fake_count);
  for (int i = 0; i < 600; ++i) {
    ASSERT_TRUE(budget.allows_load(nullptr));
    budget.loaded();
  }
  EXPECT_EQ(g_counts, 3);  // loads 1, 257 and 513
}

TEST(JitMapBudget, WithoutALimitOrACountItNeverRefuses) {
  g_maps = 1 << 30;
  g_counts = 0;
  runtime::JitMapBudget unlimited(-1, fake_count);
  int64_t maps = 0;
  EXPECT_TRUE(unlimited.allows_load(&maps));
  EXPECT_EQ(g_counts, 0);
  EXPECT_EQ(maps, -1);
  g_maps = -1;  // /proc/self/maps unreadable
  runtime::JitMapBudget blind(10, fake_count);
  EXPECT_TRUE(blind.allows_load(&maps));
  EXPECT_EQ(maps, -1);
}

}  // namespace
}  // namespace ampfuse::testing
