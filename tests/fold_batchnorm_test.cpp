// fold_batchnorm: a BatchNorm right after a Convolution becomes the convolution's weights and
// bias. The folded graph computes what the original does up to rounding (checked on the
// interpreter in f32, NHWC, grouped, without bias, with fix_gamma, and under bf16), every
// condition that forbids folding leaves the graph alone, and in the executor no BatchNorm
// touches an activation while the folded weights are computed once.
#include "engine/execution/executor.h"
#include "engine/passes/fold_batchnorm.h"

#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "ir/verifier.h"
#include "runtime/interpreter.h"
#include "tests/filecheck.h"
#include "tests/graph_checks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <variant>

namespace ampfuse::testing {
namespace {

// conv -> BN -> Pooling: no elementwise op after the BatchNorm to fuse with.
constexpr const char* kConvBnPool = R"(graph {
  %x = var input : f32[2,3,9,9]
  %w = var param : f32[5,3,3,3]
  %b = var param : f32[5]
  %gamma = var param
  %beta = var param
  %mean = var aux
  %var = var aux
  %conv = Convolution(%x, %w, %b) {kernel=[3,3], num_filter=5}
  %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) {fix_gamma=false, eps=0.001}
  %pool = Pooling(%bn) {kernel=[2,2], stride=[2,2]}
  return %pool
})";

// BatchNorm nodes that read more than the weights: what folding removes (the folded
// weight and bias are computed by BatchNorms on parameters alone).
int batchnorms_on_activations(const ir::Graph& g) {
  const std::vector<bool> from_params = ir::computed_from_params(g);
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) n += g.nodes[i].op == "BatchNorm" && !from_params[i];
  return n;
}

TEST(FoldBatchnorm, BatchNormBecomesTheConvolutionsWeightsAndBias) {
  ir::Graph g = parsed(kConvBnPool);
  EXPECT_EQ(engine::fold_batchnorm(g), 1);
  ir::verify(g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %bn_zeros = zeros_like(%mean) : f32[5]
    CHECK-NEXT: %bn_ones = ones_like(%mean) : f32[5]
    CHECK-NEXT: %bn_scale = BatchNorm(%bn_ones, %gamma, %bn_zeros, %bn_zeros, %var) {axis=0, eps=0.001, fix_gamma=false{{.*}}} : f32[5]
    CHECK-NEXT: %bn_scale_per_filter = Reshape(%bn_scale) {{.*}} : f32[5,1,1,1]
    CHECK-NEXT: %bn_folded_weight_f32 = broadcast_mul(%w, %bn_scale_per_filter) : f32[5,3,3,3]
    CHECK-NEXT: %bn_folded_bias = BatchNorm(%b, %gamma, %beta, %mean, %var) {axis=0{{.*}}} : f32[5]
    CHECK-NEXT: %bn = Convolution(%x, %bn_folded_weight_f32, %bn_folded_bias) {{.*}} : f32[2,5,7,7]
    CHECK-NEXT: %pool = Pooling(%bn))");
  EXPECT_EQ(batchnorms_on_activations(g), 0);
  EXPECT_LT(relative_difference(parsed(kConvBnPool), g, 1), 1e-5);
}

// Layouts, groups, no bias, fix_gamma, and bf16 (the weight rounded once to bf16, the bias
// kept in f32): the folded graph agrees with the original within the dtype's rounding.
TEST(FoldBatchnorm, FoldedGraphsComputeWhatTheOriginalsDo) {
  struct Case {
    const char* name;
    std::string text;
    double tolerance;
  };
  const Case cases[] = {
      {"nhwc, no bias, fix_gamma", R"(graph {
        %x = var input : f32[1,8,8,4]
        %w = var param : f32[6,3,3,4]
        %gamma = var param
        %beta = var param
        %mean = var aux
        %var = var aux
        %conv = Convolution(%x, %w) {kernel=[3,3], num_filter=6, no_bias=true, layout="NHWC"}
        %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) {axis=3}
        return %bn
      })", 1e-5},
      {"grouped", R"(graph {
        %x = var input : f32[2,4,7,7]
        %w = var param : f32[8,2,3,3]
        %b = var param : f32[8]
        %gamma = var param
        %beta = var param
        %mean = var aux
        %var = var aux
        %conv = Convolution(%x, %w, %b) {kernel=[3,3], num_filter=8, num_group=2, pad=[1,1]}
        %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) {fix_gamma=false}
        return %bn
      })", 1e-5},
      {"bf16", R"(graph {
        %x = var input : f32[1,3,9,9]
        %w = var param : bf16[4,3,3,3]
        %b = var param : bf16[4]
        %gamma = var param
        %beta = var param
        %mean = var aux
        %var = var aux
        %xl = amp_cast(%x) {dtype=bf16}
        %conv = Convolution(%xl, %w, %b) {kernel=[3,3], num_filter=4}
        %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) {fix_gamma=false}
        %y = amp_cast(%bn) {dtype=f32}
        return %y
      })", 2e-2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ir::Graph original = parsed(c.text);
    ir::Graph g = original;
    ASSERT_EQ(batchnorms_on_activations(g), 1);
    ASSERT_EQ(engine::fold_batchnorm(g), 1);
    ir::verify(g);
    EXPECT_EQ(batchnorms_on_activations(g), 0);
    EXPECT_EQ(count_op(g, "Convolution"), 1);
    for (uint64_t seed : {1, 2}) EXPECT_LT(relative_difference(original, g, seed), c.tolerance) << "seed " << seed;
  }
}

// Each graph breaks one condition: nothing folds and the graph stays as it was.
TEST(FoldBatchnorm, OnlyWhenTheConvolutionFeedsTheBatchNormAloneAndParamsAreConstant) {
  const std::string head = R"(graph {
    %x = var input : f32[1,3,6,6]
    %w = var param : f32[4,3,3,3]
    %gamma = var param : f32[4]
    %beta = var param : f32[4]
    %mean = var aux : f32[4]
    %var = var aux : f32[4]
)";
  const std::pair<const char*, std::string> cases[] = {
      {"convolution read twice", R"(
    %conv = Convolution(%x, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var)
    %y = elemwise_add(%bn, %conv)
    return %y
  })"},
      {"convolution is a graph output", R"(
    %conv = Convolution(%x, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var)
    return %bn, %conv
  })"},
      {"not the channel axis", R"(
    %conv = Convolution(%x, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) {axis=2}
    return %bn
  })"},
      {"statistics from an input", R"(
    %m = var input : f32[4]
    %conv = Convolution(%x, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    %bn = BatchNorm(%conv, %gamma, %beta, %m, %var)
    return %bn
  })"},
      {"weight from an input", R"(
    %wi = var input : f32[4,3,3,3]
    %conv = Convolution(%x, %wi) {kernel=[3,3], num_filter=4, no_bias=true}
    %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var)
    return %bn
  })"},
      {"output_mean_var", R"(
    %conv = Convolution(%x, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) {output_mean_var=true}
    return %bn
  })"},
      {"after an elementwise op", R"(
    %conv = Convolution(%x, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    %r = relu(%conv)
    %bn = BatchNorm(%r, %gamma, %beta, %mean, %var)
    return %bn
  })"},
  };
  for (const auto& [name, body] : cases) {
    SCOPED_TRACE(name);
    ir::Graph g = parsed(head + body);
    const std::string before = ir::print_graph(g);
    EXPECT_EQ(engine::fold_batchnorm(g), 0);
    EXPECT_EQ(ir::print_graph(g), before);
  }
}

// In the executor (with constant_params, as at inference): no BatchNorm reads an
// activation, the folded weights are constant steps run once, and the result matches the original
// graph on the interpreter.
TEST(FoldBatchnorm, ExecutorRunsTheFoldedConvolutionAndComputesWeightsOnce) {
  const ir::Graph g = parsed(kConvBnPool);
  engine::ExecutorOptions opts;
  opts.constant_params = true;
  opts.fold_batchnorm = true;
  const engine::Executable exe = engine::Executable::compile(g, opts);
  EXPECT_EQ(exe.compile_stats().folded_batchnorms, 1);
  EXPECT_GT(exe.compile_stats().constant_steps, 0);
  EXPECT_EQ(batchnorms_on_activations(exe.graph()), 0);
  EXPECT_EQ(engine::Executable::compile(g).compile_stats().folded_batchnorms, 0);  // off by default

  const runtime::Bindings vars = runtime::random_bindings(g, 4);
  const std::vector<runtime::Tensor> want = runtime::interpret(g, vars);
  engine::RunStats rs;
  for (int run = 0; run < 2; ++run) {
    const std::vector<runtime::Tensor> got = exe.run(vars, &rs);
    EXPECT_EQ(rs.reused_constants, run == 1);
    ASSERT_EQ(got.size(), 1u);
    double worst = 0, largest = 0;
    for (int64_t i = 0; i < want[0].size(); ++i) {
      worst = std::max(worst, std::fabs(want[0].get_f64(i) - got[0].get_f64(i)));
      largest = std::max(largest, std::fabs(want[0].get_f64(i)));
    }
    EXPECT_LT(worst, 1e-5 * largest) << "run " << run;
  }
}

}  // namespace
}  // namespace ampfuse::testing
