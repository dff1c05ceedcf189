// The planner's own costs (bench/README.md, "Planning and kernel size"): planning time
// against graph size, and LLVM's time against a fused kernel's size, which
// PlannerOptions' caps are chosen from.
#include "engine/planning/fusion_plan.h"
#include "engine/planning/kernel_lowering.h"
#include "ir/builder.h"
#include "ir/type_inference.h"
#include "models/layered_model.h"
#include "runtime/kernel_cache.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <ctime>
#include <limits>
#include <string>
#include <vector>

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

// Kernels of chains of one op over f32[1024]. elemwise_add reads the chain and the input;
// "c8" repeats ../docs/design.md's C8 body (mul, add, max, mul, sub); "wide_in" adds a new
// input at each step; "wide_out" stores `length` values computed from one relu.
const char* const kChainOps[] = {"tanh", "erf", "_power_scalar", "exp", "sigmoid", "relu", "elemwise_add",
                                 "c8", "wide_in", "wide_out"};

ir::Graph chain_graph(const std::string& op, int length, int64_t elements = 1024) {
  ir::GraphBuilder b;
  const ir::TensorType type{ir::DType::f32, {elements}};
  const ir::ValueRef x = b.input("x", type);
  ir::ValueRef v = x;
  if (op == "wide_out") {
    v = b.op("relu", {x});
    for (int i = 0; i < length; ++i) b.output(b.op("_mul_scalar", {v}, {{"scalar", std::to_string(i + 2)}}));
    return b.finish(true);
  }
  for (int i = 0; i < length; ++i) {
    if (op == "c8") {
      v = b.op("_plus_scalar", {b.op("elemwise_mul", {v, x})}, {{"scalar", "0.5"}});
      v = b.op("_mul_scalar", {b.op("relu", {v})}, {{"scalar", "1.5"}});
      v = b.op("elemwise_sub", {v, x});
    } else if (op == "wide_in") {
      v = b.op("elemwise_add", {v, b.input(fmt::format("y{}", i), type)});
    } else if (op == "elemwise_add") {
      v = b.op(op, {v, x});
    } else if (op == "_power_scalar") {
      v = b.op(op, {v}, {{"scalar", "1.5"}});
    } else {
      v = b.op(op, {v});
    }
  }
  b.output(v);
  return b.finish(true);
}

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Compiles every kernel of `plan` into a fresh cache without a disk cache (which would
// answer from the second iteration on), as the executor would on a first, cold run.
// Returns the CPU time of the slowest kernel; counts compilations (kernels the cache had
// not seen: a chain split evenly repeats one kernel).
double compile_plan(const ir::Graph& g, const engine::Plan& plan, int64_t* compilations) {
  runtime::KernelCache cache(nullptr);
  double slowest = 0;
  int k = 0;
  for (const engine::PlanStep& step : plan.steps)
    if (const auto* kernel = std::get_if<engine::FusedKernel>(&step)) {
      const codegen::KernelSpec spec = engine::lower_kernel(g, *kernel, fmt::format("k{}", k++)).spec;
      const double start = thread_cpu_seconds();
      cache.get(spec);
      slowest = std::max(slowest, thread_cpu_seconds() - start);
    }
  *compilations = cache.stats().compilations;
  return slowest;
}

void warm_up_llvm() {
  static const bool warm = [] {
    const ir::Graph g = chain_graph("relu", 1);
    int64_t compilations = 0;
    compile_plan(g, engine::plan_fusion(g), &compilations);
    return true;
  }();
  benchmark::DoNotOptimize(warm);
}

// One kernel of `length` ops (caps lifted) over `elements` f32: LLVM's time against kernel
// size, CPU time of the compiling thread. Past 2^23 elements the outputs pass 32 MiB and
// the kernel also has the streaming loop (KernelSignature::streams); nothing is allocated.
void BM_CompileKernel(benchmark::State& state) {
  const std::string op = kChainOps[state.range(0)];
  const ir::Graph g = chain_graph(op, static_cast<int>(state.range(1)), state.range(2));
  engine::PlannerOptions uncapped;
  uncapped.max_kernel_transcendental_cost = uncapped.max_kernel_instructions = uncapped.max_kernel_inputs =
      std::numeric_limits<int>::max();
  const engine::Plan plan = engine::plan_fusion(g, uncapped);
  warm_up_llvm();
  int64_t compilations = 0;
  for (auto _ : state) compile_plan(g, plan, &compilations);
  const engine::KernelWork work = engine::kernel_work(g, std::get<engine::FusedKernel>(plan.steps.back()));
  state.SetLabel(fmt::format("{}: transcendental cost {}, {} other instructions, {} inputs", op, work.transcendental_cost,
                             work.instructions, work.inputs));
}

// A chain of `length` tanh under the default caps, compiled as the executor would: the
// CPU time of all kernels, how many were compiled (the rest were cache hits) and the
// slowest one.
void BM_CompileTanhChain(benchmark::State& state) {
  const ir::Graph g = chain_graph("tanh", static_cast<int>(state.range(0)));
  const engine::Plan plan = engine::plan_fusion(g);
  warm_up_llvm();
  int64_t compilations = 0;
  double slowest = 0;
  for (auto _ : state) slowest = compile_plan(g, plan, &compilations);
  state.counters["kernels"] = static_cast<double>(plan.steps.size());
  state.counters["compilations"] = static_cast<double>(compilations);
  state.counters["slowest_ms"] = slowest * 1e3;
}

BENCHMARK(BM_PlanFusion)->ArgName("nodes")->Arg(1000)->Arg(10000)->Arg(100000)->Arg(150000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_InferAndPlan)->ArgName("nodes")->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompileKernel)
    ->ArgNames({"op", "length", "elements"})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 4, 16, 64}, {1024}})
    ->Unit(benchmark::kMillisecond);
// tanh, exp, relu and C8 with the streaming loop, against the rows above.
BENCHMARK(BM_CompileKernel)
    ->ArgNames({"op", "length", "elements"})
    ->ArgsProduct({{0, 3, 5, 7}, {1, 4}, {1 << 24}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompileTanhChain)->ArgName("length")->Arg(100)->Arg(400)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ampfuse::bench
