// Teams of threads or solo, per run (runtime/team_policy.h): the decision, solo runs giving
// the team runs' results, and the switch happening when foreign threads hold the cores.
#include "engine/execution/executor.h"
#include "engine/passes/autodiff.h"
#include "ir/text_format.h"
#include "ir/mxnet_json.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "runtime/onednn/onednn_ops.h"
#include "runtime/random.h"
#include "runtime/team_policy.h"
#include "runtime/thread_pool.h"
#include "tests/cli_util.h"
#include "tests/model_files.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

namespace ampfuse::runtime {
namespace {

constexpr int64_t kMs = 1'000'000;

// Restores the process's choice when a test is done with it.
class ScopedTeamChoice {
 public:
  explicit ScopedTeamChoice(TeamChoice c) : old_(set_team_choice(c)) {}
  ~ScopedTeamChoice() { set_team_choice(old_); }

 private:
  TeamChoice old_;
};

TEST(TeamPolicy, WaitingForCoresIsAMemberWaitingAQuarterOfTheSpan) {
  EXPECT_FALSE(TeamPolicy::waited_for_cores(10 * kMs, 2, 4 * kMs));
  EXPECT_FALSE(TeamPolicy::waited_for_cores(10 * kMs, 2, 5 * kMs));
  EXPECT_TRUE(TeamPolicy::waited_for_cores(10 * kMs, 2, 6 * kMs));
  EXPECT_FALSE(TeamPolicy::waited_for_cores(10 * kMs, 16, 39 * kMs));  // wake-ups of a big team
  EXPECT_TRUE(TeamPolicy::waited_for_cores(10 * kMs, 16, 41 * kMs));
  EXPECT_FALSE(TeamPolicy::waited_for_cores(10 * kMs, 0, 6 * kMs));  // no team found
  EXPECT_FALSE(TeamPolicy::waited_for_cores(0, 2, 6 * kMs));
}

TEST(TeamPolicy, BacksOffWhileProbesKeepWaitingAndForgetsAfterACleanOne) {
  TeamPolicy p;
  const int64_t first = TeamPolicy::kFirstBackoffNs;
  EXPECT_FALSE(p.solo_at(0));
  p.observe(0, 2 * kMs, 2, 3 * kMs);  // waited
  EXPECT_TRUE(p.solo_at(1));
  EXPECT_TRUE(p.solo_at(first - 1));
  EXPECT_FALSE(p.solo_at(first));  // the probe
  p.observe(first + kMs, 2 * kMs, 2, 3 * kMs);  // it waited again: twice as long
  EXPECT_EQ(p.backoff_ns(), 2 * first);
  EXPECT_TRUE(p.solo_at(first + kMs + 2 * first - 1));
  EXPECT_FALSE(p.solo_at(first + kMs + 2 * first));
  for (int i = 0; i < 20; ++i) p.observe(p.solo_until_ns(), 2 * kMs, 2, 3 * kMs);
  EXPECT_EQ(p.backoff_ns(), TeamPolicy::kLastBackoffNs);  // capped
  const int64_t t = p.solo_until_ns();
  p.observe(t, 2 * kMs, 2, kMs / 2);  // a clean probe
  EXPECT_EQ(p.backoff_ns(), first);
  EXPECT_FALSE(p.solo_at(t + 1));
  // Waiting long after the last back-off starts from the first one again.
  p.observe(t + 100 * first, 2 * kMs, 2, 3 * kMs);
  EXPECT_EQ(p.backoff_ns(), first);
}

TEST(TeamPolicy, SoloRunsParallelWorkOnTheCallingThread) {
  if (ThreadPool::global().threads() < 2) GTEST_SKIP() << "one thread here: every run is solo anyway";
  const ScopedTeamChoice never(TeamChoice::never);
  const RunTeams run;
  EXPECT_TRUE(run.solo());
  std::atomic<int> chunks{0};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> elsewhere{false};
  ThreadPool::global().parallel_for(1 << 20, [&](int64_t lo, int64_t hi) {
    ++chunks;
    if (std::this_thread::get_id() != caller) elsewhere = true;
    EXPECT_EQ(lo, 0);
    EXPECT_EQ(hi, 1 << 20);
  });
  EXPECT_EQ(chunks, 1);
  EXPECT_FALSE(elsewhere);
}

// A convolution net big enough for teams (oneDNN primitives made for several threads), with
// its backward: the weight gradient, whose threads split the reduction.
ir::Graph team_sized_graph() {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[4,16,32,32]
    %w = var param : f32[32,16,3,3]
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=32, no_bias=true, pad=[1,1]}
    %r = relu(%c)
    %v = var param : f32[32,32,3,3]
    %d = Convolution(%r, %v) {kernel=[3,3], num_filter=32, no_bias=true, pad=[1,1]}
    %t = tanh(%d)
    return %t
  })");
  ir::infer_types(g);
  return g;
}

TEST(TeamPolicy, SoloRunsGiveTheTeamRunsResults) {
  const ir::Graph g = team_sized_graph();
  engine::ExecutorOptions opts;
  opts.backward = engine::BackwardOptions{};
  const engine::Executable exe = engine::Executable::compile(g, opts);
  const Bindings vars = random_bindings(engine::build_backward(g).graph, 11);
  const std::vector<Tensor> want = interpret(engine::build_backward(g).graph, vars);
  engine::RunStats rs;
  std::vector<Tensor> team, solo;
  {
    const ScopedTeamChoice always(TeamChoice::always);
    team = exe.run(vars, &rs);
    EXPECT_FALSE(rs.solo);
  }
  const size_t primitives = onednn_primitives_created();
  {
    const ScopedTeamChoice never(TeamChoice::never);
    for (int k = 0; k < 2; ++k) {
      solo = exe.run(vars, &rs);
      EXPECT_TRUE(rs.solo);
    }
  }
  // The one-thread primitives were made on first need, once.
  if (ThreadPool::global().threads() > 1) {
    EXPECT_GT(onednn_primitives_created(), primitives);
  }
  const ScopedTeamChoice always(TeamChoice::always);
  const std::vector<Tensor> team_again = exe.run(vars, &rs);  // the teams' weight copies untouched
  ASSERT_EQ(team.size(), want.size());
  ASSERT_EQ(solo.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_LT(testing::relative_error(team[k], want[k]), 1e-5) << "output " << k;
    // A run's results do not depend on whether it went solo.
    EXPECT_EQ(std::memcmp(solo[k].raw(), team[k].raw(), team[k].bytes()), 0) << "output " << k;
    EXPECT_EQ(std::memcmp(team_again[k].raw(), team[k].raw(), team[k].bytes()), 0) << "output " << k;
  }
}

// One run with teams, one solo: the same bits in every output.
void expect_solo_run_gives_the_team_runs_bits(const engine::Executable& exe, const Bindings& vars) {
  std::vector<Tensor> team, solo;
  {
    const ScopedTeamChoice always(TeamChoice::always);
    team = exe.run(vars);
  }
  {
    const ScopedTeamChoice never(TeamChoice::never);
    solo = exe.run(vars);
  }
  ASSERT_EQ(team.size(), solo.size());
  for (size_t k = 0; k < team.size(); ++k)
    EXPECT_EQ(std::memcmp(solo[k].raw(), team[k].raw(), team[k].bytes()), 0) << "output " << k;
}

// Models whose oneDNN ops sum in another order on one thread (inner products, some
// convolutions) give the same bits solo as with teams: those ops keep their teams.
TEST(TeamPolicy, SoloRunsOfARealModelGiveTheTeamRunsBits) {
  const std::string path = testing::models_dir() + "/vgg_small-mkldnn-test-symbol.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
  ir::MxnetImportOptions io;
  io.input_shapes = {{"data", {2, 3, 32, 32}}};
  const ir::Graph g = ir::load_mxnet_json_file(path, io);
  engine::ExecutorOptions opts;
  opts.constant_params = true;
  const engine::Executable exe = engine::Executable::compile(g, opts);
  const Bindings vars = random_bindings(g, 5);
  expect_solo_run_gives_the_team_runs_bits(exe, vars);
}

// The same for a bf16 training step (the training form, forward and backward): its
// convolution weight gradients are bf16 sums that oneDNN splits otherwise on one thread,
// and a bf16 output hides most such differences from a probe (one rounding in hundreds
// differs), so low-precision outputs are never probed (runtime/onednn/onednn_ops.cpp).
// Before that rule solo runs on a Sapphire Rapids gave other bits in six of its outputs.
TEST(TeamPolicy, SoloRunsOfABf16TrainingStepGiveTheTeamRunsBits) {
  const std::string path = testing::models_dir() + "/cifar_resnet20_v2-gluoncv-symbol.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
  ir::MxnetImportOptions io;
  io.input_shapes = {{"data", {8, 3, 32, 32}}};
  const ir::Graph g = ir::load_mxnet_json_file(path, io);
  engine::ExecutorOptions opts;
  opts.amp.emplace();
  opts.amp->target = ir::DType::bf16;
  opts.training = engine::TrainingOptions{};
  opts.backward = engine::BackwardOptions{};
  const engine::Executable exe = engine::Executable::compile(g, opts);
  const Bindings vars = random_bindings(exe.graph(), 5);
  expect_solo_run_gives_the_team_runs_bits(exe, vars);
}

int usable_cpus() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(std::thread::hardware_concurrency());
}

// With a busy thread on every core (and one more), the runs' teams wait for cores and the
// runs after one that waited go solo.
TEST(TeamPolicy, RunsGoSoloWhileForeignThreadsHoldTheCores) {
  if (thread_run_delay_ns() < 0) GTEST_SKIP() << "no /proc/self/task/*/schedstat here: adaptive means always";
  if (ThreadPool::global().threads() < 2) GTEST_SKIP() << "one thread here: no teams to wait";
  const ScopedTeamChoice adaptive(TeamChoice::adaptive);
  const ir::Graph g = team_sized_graph();
  const engine::Executable exe = engine::Executable::compile(g);
  const Bindings vars = random_bindings(g, 3);
  const TeamCounters before = team_counters();
  exe.run(vars);  // primitives made, arena faulted in (on a loaded machine, maybe measured already)

  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i <= usable_cpus(); ++i)
    busy.emplace_back([&] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  int solo_runs = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  engine::RunStats rs;
  while (solo_runs < 3 && std::chrono::steady_clock::now() < deadline) {
    exe.run(vars, &rs);
    solo_runs += rs.solo ? 1 : 0;
  }
  stop = true;
  for (std::thread& t : busy) t.join();
  const TeamCounters after = team_counters();
  EXPECT_GT(after.measured_runs, before.measured_runs);
  EXPECT_GT(after.contended_runs, before.contended_runs);
  EXPECT_GE(solo_runs, 3);
}

TEST(TeamPolicyCli, RunReportsSoloRunsAndRefusesAnUnknownChoice) {
  const std::string cifar = model_path("cifar_resnet20_v2-gluoncv-symbol.json");
  SKIP_WITHOUT_MODEL(cifar);
  const CliResult solo =
      run_shell(fmt::format("AMPFUSE_TEAMS=never '{}' run '{}' --shape data=1,3,32,32 --no-baseline --repeat 3 --json",
                            AMPFUSE_CLI_PATH, cifar));
  ASSERT_EQ(solo.status, 0) << solo.err;
  EXPECT_EQ(parse_json(solo)["solo_runs"], 3);
  const CliResult text = run_shell(fmt::format("AMPFUSE_TEAMS=never '{}' run --no-baseline --repeat 2", AMPFUSE_CLI_PATH));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("2 of them solo"), std::string::npos) << text.out;
  const CliResult bad = run_shell(fmt::format("AMPFUSE_TEAMS=sometimes '{}' run --repeat 1", AMPFUSE_CLI_PATH));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("AMPFUSE_TEAMS='sometimes': expected adaptive, always or never"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace ampfuse::runtime
