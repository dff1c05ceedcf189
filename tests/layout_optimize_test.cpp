// layout_optimize: channels-last regions, where their transposes go, and unchanged results.
#include "engine/passes/layout_optimize.h"

#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "runtime/interpreter.h"
#include "tests/filecheck.h"
#include "tests/graph_checks.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace ampfuse::testing {
namespace {

using ir::DType;

ir::Graph optimized(const char* text, bool expect_change = true) {
  ir::Graph g = ir::parse_graph(text);
  EXPECT_EQ(engine::layout_optimize(g, "nhwc"), expect_change);
  ir::verify(g);
  return g;
}

TEST(LayoutOptimize, ConvolutionRunsChannelsLastBetweenTwoTransposes) {
  const ir::Graph g = optimized(R"(graph {
    %data = var input : f32[1,3,8,8]
    %w = var param : f32[4,3,3,3]
    %conv = Convolution(%data, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    return %conv
  })");
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %data_NHWC = transpose(%data) {axes=[0,2,3,1]} : f32[1,8,8,3]
    CHECK-NEXT: %w_NHWC = transpose(%w) {axes=[0,2,3,1]} : f32[4,3,3,3]
    CHECK-NEXT: %conv_NHWC = Convolution(%data_NHWC, %w_NHWC)
    CHECK-SAME: layout="NHWC"
    CHECK-SAME: : f32[1,6,6,4]
    CHECK-NEXT: %conv = transpose(%conv_NHWC) {axes=[0,3,1,2]} : f32[1,4,6,6]
    CHECK-NEXT: return %conv)");
  // The output keeps its name (head gradients and saved outputs are named after it): the
  // transpose back takes it, the channels-last convolution is renamed.
  EXPECT_EQ(g.output_name(0), "conv_output");
}

TEST(LayoutOptimize, RegionTakesInBatchNormActivationPoolingAndCasts) {
  const ir::Graph g = optimized(R"(graph {
    %data = var input : f32[2,3,9,9]
    %w1 = var param : f32[4,3,3,3]
    %w2 = var param : f32[4,4,1,1]
    %gamma = var param
    %beta = var param
    %mean = var aux
    %var = var aux
    %conv1 = Convolution(%data, %w1) {kernel=[3,3], num_filter=4, no_bias=true}
    %bn = BatchNorm(%conv1, %gamma, %beta, %mean, %var)
    %relu = Activation(%bn) {act_type="relu"}
    %low = amp_cast(%relu) {dtype=bf16}
    %high = amp_cast(%low) {dtype=f32}
    %pool = Pooling(%high) {kernel=[2,2], stride=[2,2]}
    %conv2 = Convolution(%pool, %w2) {kernel=[1,1], num_filter=4, no_bias=true}
    return %conv2
  })");
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %data_NHWC = transpose(%data)
    CHECK-NEXT: %w1_NHWC = transpose(%w1)
    CHECK-NEXT: %conv1 = Convolution(%data_NHWC, %w1_NHWC)
    CHECK-NEXT: %bn = BatchNorm(%conv1, {{.*}}axis=3
    CHECK-NOT: transpose
    CHECK: %pool = Pooling(%high) {{.*}}layout="NHWC"
    CHECK: %w2_NHWC = transpose(%w2)
    CHECK-NEXT: %conv2_NHWC = Convolution(%pool, %w2_NHWC)
    CHECK-NEXT: %conv2 = transpose(%conv2_NHWC) {axes=[0,3,1,2]}
    CHECK-NEXT: return %conv2)");
  EXPECT_EQ(count_op(g, "transpose"), 4);  // data and output, two weights
}

TEST(LayoutOptimize, ResidualAddJoinsTheRegion) {
  const ir::Graph g = optimized(R"(graph {
    %data = var input : f32[1,4,6,6]
    %w1 = var param : f32[4,4,3,3]
    %w2 = var param : f32[4,4,3,3]
    %c1 = Convolution(%data, %w1) {kernel=[3,3], pad=[1,1], num_filter=4, no_bias=true}
    %sum = elemwise_add(%c1, %data)
    %r = relu(%sum)
    %c2 = Convolution(%r, %w2) {kernel=[3,3], pad=[1,1], num_filter=4, no_bias=true}
    return %c2
  })");
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %data_NHWC = transpose(%data)
    CHECK: %sum = elemwise_add(%c1, %data_NHWC) : f32[1,6,6,4]
    CHECK-NEXT: %r = relu(%sum) : f32[1,6,6,4]
    CHECK-NOT: NCHW
    CHECK: %c2 = transpose(%c2_NHWC)
    CHECK-NEXT: return %c2)");
  EXPECT_EQ(count_op(g, "transpose"), 4);
}

TEST(LayoutOptimize, ConcatOfChannelsJoinsTheRegionAndASplitStaysOut) {
  // A SqueezeNet fire module: squeeze, two expands concatenated on channels, then a split
  // into halves. Moving the transpose below the split would take one per half.
  const ir::Graph g = optimized(R"(graph {
    %data = var input : f32[1,4,6,6]
    %ws = var param : f32[2,4,1,1]
    %w1 = var param : f32[4,2,1,1]
    %w3 = var param : f32[4,2,3,3]
    %squeeze = Convolution(%data, %ws) {kernel=[1,1], num_filter=2, no_bias=true}
    %relu = relu(%squeeze)
    %e1 = Convolution(%relu, %w1) {kernel=[1,1], num_filter=4, no_bias=true}
    %e3 = Convolution(%relu, %w3) {kernel=[3,3], pad=[1,1], num_filter=4, no_bias=true}
    %cat = Concat(%e1, %e3) {num_args=2, dim=1}
    %halves = SliceChannel(%cat) {num_outputs=2}
    %sum = elemwise_add(%halves, %halves:1)
    return %sum
  })");
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %relu = relu(%squeeze) : f32[1,6,6,2]
    CHECK: %cat = Concat(%e1, %e3) {dim=3, num_args=2} : f32[1,6,6,8]
    CHECK-NEXT: %cat_NCHW = transpose(%cat) {axes=[0,3,1,2]} : f32[1,8,6,6]
    CHECK-NEXT: %halves = SliceChannel(%cat_NCHW) {axis=1, {{.*}} : (f32[1,4,6,6], f32[1,4,6,6])
    CHECK-NEXT: %sum = elemwise_add(%halves, %halves:1) : f32[1,4,6,6])");
  EXPECT_EQ(count_op(g, "transpose"), 5);  // data, three weights, the concat
}

TEST(LayoutOptimize, PoolingBeforeAConvolutionJoinsIt) {
  const ir::Graph g = optimized(R"(graph {
    %data = var input : f32[1,2,8,8]
    %w = var param : f32[3,2,3,3]
    %pool = Pooling(%data) {kernel=[2,2], stride=[2,2], pool_type="avg"}
    %conv = Convolution(%pool, %w) {kernel=[3,3], num_filter=3, no_bias=true}
    return %conv
  })");
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %data_NHWC = transpose(%data)
    CHECK-NEXT: %pool = Pooling(%data_NHWC) {{.*}}layout="NHWC"
    CHECK-NOT: transpose(%pool)
    CHECK: %conv_NHWC = Convolution(%pool,)");
}

TEST(LayoutOptimize, TransposesStayWhereMovingThemWouldAddOne) {
  // The bias broadcasts ([1,4,1,1]): a transpose cannot move through that add, and the
  // graph output needs the channels-first value anyway.
  const ir::Graph g = optimized(R"(graph {
    %data = var input : f32[1,3,8,8]
    %w = var param : f32[4,3,3,3]
    %b = var param : f32[1,4,1,1]
    %conv = Convolution(%data, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    %biased = broadcast_add(%conv, %b)
    return %biased
  })");
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %conv_NCHW = transpose(%conv)
    CHECK-NEXT: %biased = broadcast_add(%conv_NCHW, %b) : f32[1,4,6,6])");
}

TEST(LayoutOptimize, GraphsWithoutConvolutionsAreLeftAlone) {
  optimized(R"(graph {
    %data = var input : f32[1,3,8,8]
    %gamma = var param
    %beta = var param
    %mean = var aux
    %var = var aux
    %bn = BatchNorm(%data, %gamma, %beta, %mean, %var)
    %pool = Pooling(%bn) {kernel=[2,2]}
    return %pool
  })",
            false);
  optimized(R"(graph {
    %data = var input : f32[1,8,8,3]
    %w = var param : f32[4,3,3,3]
    %conv = Convolution(%data, %w) {kernel=[3,3], num_filter=4, no_bias=true, layout="NHWC"}
    return %conv
  })",
            false);
}

TEST(LayoutOptimize, TransposePairsMergeAndIdentitiesVanish) {
  const ir::Graph g = optimized(R"(graph {
    %x = var input : f32[2,3,4]
    %a = transpose(%x) {axes=[1,0,2]}
    %b = transpose(%a) {axes=[1,0,2]}
    %c = transpose(%x) {axes=[0,1,2]}
    %d = transpose(%x) {axes=[2,1,0]}
    %e = transpose(%d) {axes=[0,2,1]}
    %s = elemwise_add(%b, %c)
    return %s, %e
  })");
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %e = transpose(%x) {axes=[2,0,1]}
    CHECK-NEXT: %s = elemwise_add(%x, %x)
    CHECK-NEXT: return %s, %e)");
  EXPECT_EQ(count_op(g, "transpose"), 1);
}

TEST(LayoutOptimize, UnknownLayoutIsAnError) {
  ir::Graph g = ir::parse_graph("graph {\n %x = var input : f32[2]\n return %x\n}");
  EXPECT_ERROR(engine::layout_optimize(g, "nchw16c"), "layout 'nchw16c' is not supported");
}

// ---------------------------------------------------------------------------------------
// MXNet's test_optimize_layout: Conv, Conv+BN, Pool+Conv at 1 to 3 spatial dims give the
// same results with and without the pass.

enum class Net { conv, conv_bn, pool_conv };

ir::Graph build_net(Net net, int spatial) {
  ir::GraphBuilder b;
  ir::Shape shape{2, 3};
  for (int d = 0; d < spatial; ++d) shape.push_back(7 - d);
  const std::string kernel = spatial == 1 ? "(3,)" : spatial == 2 ? "(3, 3)" : "(3, 3, 3)";
  const std::string pool_kernel = spatial == 1 ? "(2,)" : spatial == 2 ? "(2, 2)" : "(2, 2, 2)";
  ir::ValueRef x = b.input("data", {DType::f32, shape});
  const std::string pad = spatial == 1 ? "(1,)" : spatial == 2 ? "(1, 1)" : "(1, 1, 1)";
  if (net == Net::pool_conv)
    x = b.op("Pooling", {x}, {{"kernel", pool_kernel}, {"pool_type", "avg"}, {"stride", pool_kernel}});
  x = b.op("Convolution", {x, b.param("weight"), b.param("bias")},
           {{"kernel", kernel}, {"num_filter", "5"}, {"pad", pad}});
  if (net == Net::conv_bn)
    x = b.op("BatchNorm", {x, b.param("gamma"), b.param("beta"), b.aux("mean"), b.aux("var")},
             {{"fix_gamma", "False"}});
  b.output(x);
  return b.finish();
}

TEST(LayoutOptimize, ResultsEqualWithAndWithoutAt1To3SpatialDims) {
  for (Net net : {Net::conv, Net::conv_bn, Net::pool_conv}) {
    for (int spatial = 1; spatial <= 3; ++spatial) {
      SCOPED_TRACE(::testing::Message() << "net " << static_cast<int>(net) << ", " << spatial << " spatial dims");
      const ir::Graph g = build_net(net, spatial);
      ir::Graph opt = g;
      ASSERT_TRUE(engine::layout_optimize(opt, "nhwc"));
      ir::verify(opt);
      const runtime::Bindings vars = runtime::random_bindings(g, 7);
      const auto want = runtime::interpret(g, vars);
      const auto got = runtime::interpret(opt, vars);
      ASSERT_EQ(want.size(), 1u);
      ASSERT_EQ(got[0].type(), want[0].type());
      // Same arithmetic in another order at most: MXNet's test allows 1e-2; we ask 1e-5.
      for (int64_t i = 0; i < want[0].size(); ++i)
        ASSERT_NEAR(got[0].get_f64(i), want[0].get_f64(i), 1e-5 * (1 + std::fabs(want[0].get_f64(i)))) << i;
      EXPECT_EQ(count_op(opt, "transpose"), 3);  // data, weight, result
    }
  }
}

}  // namespace
}  // namespace ampfuse::testing
