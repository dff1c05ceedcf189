// The fusion planner on textual graphs: what joins a kernel, what is loaded through a map,
// what is stored, and the cases that must not fuse (cycles, broadcasts of inner values);
// kernels split at PlannerOptions' caps (and still computing what the interpreter does);
// and a network of 150k nodes.
#include "engine/execution/executor.h"
#include "engine/planning/fusion_plan.h"
#include "fuzz/differential.h"
#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "models/layered_model.h"
#include "runtime/kernel_cache.h"
#include "tests/filecheck.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ampfuse::engine {
namespace {

std::string plan_text(const std::string& ir, PlannerOptions opts = {}) {
  ir::Graph g = ir::parse_graph(ir);
  ir::infer_types(g);
  return print_plan(g, plan_fusion(g, opts));
}

TEST(FusionPlan, ElementwiseChainIsOneKernel) {
  const std::string p = plan_text(R"(graph {
    %x = var input : bf16[4,8]
    %y = var input : bf16[4,8]
    %a = amp_cast(%x) {dtype=f32}
    %b = amp_cast(%y) {dtype=f32}
    %c = elemwise_mul(%a, %b)
    %d = _plus_scalar(%c) {scalar=0.5}
    %e = relu(%d)
    %f = elemwise_sub(%e, %a)
    %g = amp_cast(%f) {dtype=bf16}
    return %g
  })");
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [4,8] nodes: %a=amp_cast %b=amp_cast %c=elemwise_mul %d=_plus_scalar %e=relu %f=elemwise_sub %g=amp_cast
    CHECK-SAME: in: %x %y  out: %g  bytes: 192
    CHECK-NOT: kernel 1)");
}

// A value rounded to bf16 and stored as bf16 is not rounded twice: the store narrows the
// unrounded value; a reader inside the kernel still gets the rounded one.
TEST(FusionPlan, AStoredValueIsRoundedByItsStoreAlone) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : bf16[64]
    %a = amp_cast(%x) {dtype=f32}
    %m = _mul_scalar(%a) {scalar=1.5}
    %o = amp_cast(%m) {dtype=bf16}
    %u = amp_cast(%o) {dtype=f32}
    %v = _plus_scalar(%u) {scalar=0.25}
    return %o, %v
  })");
  ir::infer_types(g);
  const Executable exe = Executable::compile(g);
  ASSERT_EQ(exe.kernel_specs().size(), 1u);
  const codegen::KernelSpec& spec = *exe.kernel_specs()[0];
  int roundings = 0;
  for (const ir::ScalarInstr& s : spec.body.instrs) roundings += s.op == ir::ScalarOp::round_to;
  EXPECT_EQ(roundings, 1) << ir::print_scalar_program(spec.body) << "(%v reads %o rounded; %o is stored unrounded)";
  EXPECT_NE(spec.body.instrs.at(spec.body.results.at(0)).op, ir::ScalarOp::round_to) << ir::print_scalar_program(spec.body);
  const fuzz::DifferentialResult r = fuzz::compare_fused_with_interpreter(g, 1, 0);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(FusionPlan, CastThenTransposeIsOnePassWithPermutedStore) {
  const std::string p = plan_text(R"(graph {
    %x = var input : f32[2,3,4,5]
    %c = amp_cast(%x) {dtype=bf16}
    %t = transpose(%c) {axes=[0,2,3,1]}
    return %t
  })");
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [2,3,4,5] nodes: %c=amp_cast %t=transpose
    CHECK-SAME: in: %x  out: %t(permuted)
    CHECK-NOT: kernel 1)");
}

TEST(FusionPlan, TransposeOfAnInputIsAMappedLoad) {
  const std::string p = plan_text(R"(graph {
    %x = var input : f32[2,3,4]
    %t = transpose(%x) {axes=[2,0,1]}
    %c = amp_cast(%t) {dtype=bf16}
    return %c
  })");
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [4,2,3] nodes: %t=transpose %c=amp_cast
    CHECK-SAME: in: %x(mapped)  out: %c
    CHECK-NOT: kernel 1)");
}

TEST(FusionPlan, BroadcastInputsAreMappedButInnerValuesDoNotBroadcast) {
  const std::string p = plan_text(R"(graph {
    %x = var input : f32[4,8]
    %bias = var input : f32[8]
    %small = relu(%bias)
    %y = broadcast_add(%x, %small)
    return %y
  })");
  // %small is computed over [8]; reading it broadcast over [4,8] inside the same kernel
  // would recompute it 4 times, so it is its own kernel and the add loads it with stride 0.
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [8] nodes: %small=relu
    CHECK: kernel 1 [4,8] nodes: %y=broadcast_add
    CHECK-SAME: in: %x %small(mapped))");
}

TEST(FusionPlan, NoCycleThroughAnExternalOp) {
  const std::string p = plan_text(R"(graph {
    %x = var input : f32[2,6]
    %w = var param : f32[6,6]
    %a = relu(%x)
    %b = sigmoid(%a)
    %fc = FullyConnected(%a, %w) {num_hidden=6, no_bias=true}
    %c = elemwise_add(%b, %fc)
    return %c
  })");
  // %c reads %fc, which reads kernel 0: putting %c into kernel 0 would be a cycle.
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [2,6] nodes: %a=relu %b=sigmoid
    CHECK-SAME: out: %a %b
    CHECK-NEXT: external %fc=FullyConnected
    CHECK-NEXT: kernel 1 [2,6] nodes: %c=elemwise_add)");
}

// A value has one access map in a kernel. %le reads %d as it is and through %t transposed,
// so it cannot share %d's kernel; %and could join either kernel, but merging the two (as
// the planner once did; fuzz seed 1108288) would read %t untransposed.
constexpr const char* kReadAsItIsAndTransposed = R"(graph {
    %b = var input : f32[8,8]
    %d = _div_scalar(%b) {scalar=-1.5}
    %t = transpose(%d) {axes=[1,0]}
    %tt = transpose(%t) {axes=[1,0]}
    %le = broadcast_lesser_equal(%t, %d)
    %and = broadcast_logical_and(%tt, %le)
    return %and
  })";

TEST(FusionPlan, GroupsReadingEachOtherUnderDifferentMapsStayApart) {
  EXPECT_FILECHECK(plan_text(kReadAsItIsAndTransposed), R"(
    CHECK: kernel 0 [8,8] nodes: %d=_div_scalar %t=transpose %tt=transpose
    CHECK-NEXT: kernel 1 [8,8] nodes: %le=broadcast_lesser_equal %and=broadcast_logical_and
    CHECK-NOT: kernel 2)");
  ir::Graph g = ir::parse_graph(kReadAsItIsAndTransposed);
  ir::infer_types(g);
  const fuzz::DifferentialResult r = fuzz::compare_fused_with_interpreter(g, 1, 0);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(FusionPlan, ViewsAliasAndUnfusedPlansHaveOneNodePerKernel) {
  const char* ir = R"(graph {
    %x = var input : f32[2,6]
    %a = relu(%x)
    %r = Reshape(%a) {shape=[3,4]}
    %b = sigmoid(%r)
    %c = exp(%b)
    return %c
  })";
  EXPECT_FILECHECK(plan_text(ir), R"(
    CHECK: kernel 0 [2,6] nodes: %a=relu
    CHECK-NEXT: view %r=Reshape
    CHECK-NEXT: kernel 1 [3,4] nodes: %b=sigmoid %c=exp)");
  EXPECT_FILECHECK(plan_text(ir, {.fuse = false}), R"(
    CHECK: kernel 0 [2,6] nodes: %a=relu  in
    CHECK: view %r=Reshape
    CHECK: kernel 1 [3,4] nodes: %b=sigmoid  in
    CHECK: kernel 2 [3,4] nodes: %c=exp  in)");
}

// What every plan must be: each computed node in exactly one step, every value a step
// reads computed by an earlier step (or a variable), and every value read outside its
// step stored by that step and loaded by the reader.
void expect_valid_plan(const ir::Graph& g, const Plan& plan) {
  std::vector<int> step_of(g.nodes.size(), -1);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const auto* k = std::get_if<FusedKernel>(&plan.steps[s]);
    for (int32_t n : k ? k->nodes : std::vector<int32_t>{step_node(plan.steps[s])}) {
      ASSERT_EQ(step_of[n], -1) << g.nodes[n].name << " is in two steps";
      step_of[n] = static_cast<int>(s);
    }
  }
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (g.nodes[n].is_var()) continue;
    ASSERT_GE(step_of[n], 0) << g.nodes[n].name << " is in no step";
    for (ir::ValueRef in : g.nodes[n].inputs) {
      if (g.nodes[in.node].is_var() || step_of[in.node] == step_of[n]) continue;
      ASSERT_LT(step_of[in.node], step_of[n]) << g.nodes[n].name << " runs before its input " << value_name(g, in);
      const std::vector<ir::ValueRef> stored = step_writes(g, plan.steps[step_of[in.node]]);
      const std::vector<ir::ValueRef> loaded = step_reads(g, plan.steps[step_of[n]]);
      EXPECT_NE(std::find(stored.begin(), stored.end(), in), stored.end()) << value_name(g, in) << " is not stored";
      EXPECT_NE(std::find(loaded.begin(), loaded.end(), in), loaded.end()) << value_name(g, in) << " is not loaded";
    }
  }
}

// For graphs where no node passes a cap by itself.
void expect_within_caps(const ir::Graph& g, const Plan& plan, const PlannerOptions& caps) {
  for (const PlanStep& step : plan.steps) {
    const auto* k = std::get_if<FusedKernel>(&step);
    if (!k) continue;
    const KernelWork work = kernel_work(g, *k);
    EXPECT_LE(work.transcendental_cost, caps.max_kernel_transcendental_cost);
    EXPECT_LE(work.instructions, caps.max_kernel_instructions);
    EXPECT_LE(work.inputs, caps.max_kernel_inputs);
  }
}

TEST(FusionPlan, ChainsSplitAtTheTranscendentalCap) {
  // A transcendental cost of 2 per kernel (PlannerOptions::max_kernel_transcendental_cost):
  // two exp, or one tanh. Where a chain is cut, one kernel stores the value the next loads.
  const std::string p = plan_text(R"(graph {
    %x = var input : f32[8]
    %e0 = exp(%x)
    %e1 = exp(%e0)
    %t0 = tanh(%e1)
    %t1 = tanh(%t0)
    return %t1
  })");
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [8] nodes: %e0=exp %e1=exp  in: %x  out: %e1  bytes: 64
    CHECK-NEXT: kernel 1 [8] nodes: %t0=tanh  in: %e1  out: %t0  bytes: 64
    CHECK-NEXT: kernel 2 [8] nodes: %t1=tanh  in: %t0  out: %t1  bytes: 64
    CHECK-NOT: kernel)");
}

// %a is computed before two cuts and read after them, by a node of the third kernel.
const char* kReadAcrossCuts = R"(graph {
    %x = var input : f32[64]
    %a = tanh(%x)
    %b = tanh(%a)
    %c = tanh(%b)
    %d = elemwise_add(%c, %a)
    return %d
  })";

TEST(FusionPlan, AValueReadAcrossCutsIsStoredAndLoaded) {
  EXPECT_FILECHECK(plan_text(kReadAcrossCuts), R"(
    CHECK: kernel 0 [64] nodes: %a=tanh  in: %x  out: %a
    CHECK-NEXT: kernel 1 [64] nodes: %b=tanh  in: %a  out: %b
    CHECK-NEXT: kernel 2 [64] nodes: %c=tanh %d=elemwise_add  in: %b %a  out: %d
    CHECK-NOT: kernel)");
}

TEST(FusionPlan, InstructionAndInputCapsSplitKernels) {
  const char* adds = R"(graph {
    %x0 = var input : f32[8]
    %x1 = var input : f32[8]
    %x2 = var input : f32[8]
    %x3 = var input : f32[8]
    %s1 = elemwise_add(%x0, %x1)
    %s2 = elemwise_add(%s1, %x2)
    %s3 = elemwise_add(%s2, %x3)
    return %s3
  })";
  EXPECT_FILECHECK(plan_text(adds, {.max_kernel_inputs = 3}), R"(
    CHECK: kernel 0 [8] nodes: %s1=elemwise_add %s2=elemwise_add  in: %x0 %x1 %x2  out: %s2
    CHECK-NEXT: kernel 1 [8] nodes: %s3=elemwise_add  in: %s2 %x3  out: %s3
    CHECK-NOT: kernel)");
  EXPECT_FILECHECK(plan_text(adds, {.max_kernel_instructions = 1}), R"(
    CHECK: kernel 0 [8] nodes: %s1=elemwise_add  in
    CHECK-NEXT: kernel 1 [8] nodes: %s2=elemwise_add  in
    CHECK-NEXT: kernel 2 [8] nodes: %s3=elemwise_add  in
    CHECK-NOT: kernel)");
  // A cast to bf16 is one more instruction: the rounding.
  EXPECT_FILECHECK(plan_text(R"(graph {
    %x = var input : f32[8]
    %r = relu(%x)
    %c = amp_cast(%r) {dtype=bf16}
    %s = sigmoid(%c)
    return %s
  })", {.max_kernel_instructions = 2}), R"(
    CHECK: kernel 0 [8] nodes: %r=relu %c=amp_cast  in: %x  out: %c
    CHECK-NEXT: kernel 1 [8] nodes: %s=sigmoid  in: %c
    CHECK-NOT: kernel)");
}

TEST(FusionPlan, ANodeOverACapTakesInNodesThatAddNothingToIt) {
  // mish calls exp, log1p and tanh: a transcendental cost of 4, over the cap of 2 alone.
  // The relu adds nothing to it and joins; the tanh would add 2 and starts the next kernel.
  EXPECT_FILECHECK(plan_text(R"(graph {
    %x = var input : f32[8]
    %m = Activation(%x) {act_type="mish"}
    %r = relu(%m)
    %t = tanh(%r)
    return %t
  })"), R"(
    CHECK: kernel 0 [8] nodes: %m=Activation %r=relu  in: %x  out: %r
    CHECK-NEXT: kernel 1 [8] nodes: %t=tanh  in: %r  out: %t
    CHECK-NOT: kernel)");
}

// A chain of n tanh: as one kernel, LLVM took minutes for 400.
ir::Graph tanh_chain(int n) {
  ir::GraphBuilder b;
  ir::ValueRef v = b.input("x", {ir::DType::f32, {256}});
  for (int i = 0; i < n; ++i) v = b.op("tanh", {v});
  b.output(v);
  return b.finish();
}

// Each tanh is within 3 ulp of the C library's (codegen/vector_math.h), and tanh never
// magnifies a relative error (x tanh'(x) / tanh(x) <= 1), so along a chain the errors only
// add up: 3n ulp of the result, relatively (same_element's bound). The 1000-long chain's
// largest difference is about 500 ulp.
int tanh_chain_ulps(int n) { return 3 * n; }

TEST(FusionPlan, AThousandTanhChainSplitsIntoKernelsWithinTheCaps) {
  constexpr int kLength = 1000;
  const ir::Graph g = tanh_chain(kLength);
  const PlannerOptions caps;
  const Plan plan = plan_fusion(g, caps);
  expect_valid_plan(g, plan);
  expect_within_caps(g, plan, caps);
  EXPECT_EQ(plan.steps.size(), size_t{kLength});  // one tanh each
  // The kernels are all alike (a tanh from one value to another): compiled once.
  runtime::KernelCache cache;
  ExecutorOptions eo;
  eo.cache = &cache;
  EXPECT_EQ(Executable::compile(g, eo).compile_stats().compilations, 1);
}

TEST(FusionPlan, SplitKernelsComputeWhatTheInterpreterDoes) {
  ir::Graph across = ir::parse_graph(kReadAcrossCuts);
  ir::infer_types(across);
  const fuzz::DifferentialResult r = fuzz::compare_fused_with_interpreter(across, 1, tanh_chain_ulps(3));
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.kernels, 3);
  const fuzz::DifferentialResult chain = fuzz::compare_fused_with_interpreter(tanh_chain(1000), 1, tanh_chain_ulps(1000));
  EXPECT_TRUE(chain.ok) << chain.message;
  EXPECT_EQ(chain.kernels, 1000);
}

// Planning time grows about linearly with the graph (bench/planner_bench.cpp measures it);
// at this size the planner used to take minutes.
TEST(FusionPlan, PlansANetworkOf150kNodes) {
#if defined(__SANITIZE_ADDRESS__)
  constexpr int64_t kNodes = 30000;  // the same blocks, fewer of them: ASan is ~10x slower
#else
  constexpr int64_t kNodes = 150000;
#endif
  const ir::Graph g = models::build_layered_model(kNodes);
  const Plan plan = plan_fusion(g);
  expect_valid_plan(g, plan);
  expect_within_caps(g, plan, {});
  // Convolutions and matrix products run alone, and nothing else does.
  int64_t heavy = 0, external = 0;
  for (const ir::Node& n : g.nodes) heavy += n.op == "Convolution" || n.op == "FullyConnected";
  for (const PlanStep& s : plan.steps) external += std::holds_alternative<ExternalStep>(s);
  EXPECT_EQ(external, heavy);
}

}  // namespace
}  // namespace ampfuse::engine
