// The planner's own cost (bench/README.md, "Planning"): planning time against graph size.
#include "engine/planning/fusion_plan.h"
#include "ir/type_inference.h"
#include "models/layered_model.h"

#include <benchmark/benchmark.h>

namespace ampfuse::bench {
namespace {

// Planning a synthetic network of state.range(0) nodes (models/layered_model.h).
void BM_PlanFusion(benchmark::State& state) {
  const ir::Graph g = models::build_layered_model(state.range(0));
  size_t steps = 0;
  for (auto _ : state) steps = engine::plan_fusion(g).steps.size();
  state.counters["nodes"] = static_cast<double>(g.nodes.size());
  state.counters["steps"] = static_cast<double>(steps);
}

// Type inference and planning, as `ampfuse run` does them before compiling.
void BM_InferAndPlan(benchmark::State& state) {
  const ir::Graph typed = models::build_layered_model(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    ir::Graph g = typed;
    state.ResumeTiming();
    ir::infer_types(g);
    benchmark::DoNotOptimize(engine::plan_fusion(g));
  }
  state.counters["nodes"] = static_cast<double>(typed.nodes.size());
}

BENCHMARK(BM_PlanFusion)->ArgName("nodes")->Arg(1000)->Arg(10000)->Arg(100000)->Arg(150000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_InferAndPlan)->ArgName("nodes")->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ampfuse::bench
