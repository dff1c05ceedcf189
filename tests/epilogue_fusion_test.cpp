// epilogue_fusion: a Convolution or FullyConnected with the add and LeakyReLU after it becomes
// one _fused_conv / _fused_fc, which oneDNN runs with post-ops (not relu or clip, whose
// post-ops turn NaN into 0). The pass (textual IR, positive
// cases beside the conditions that forbid it), the ops' semantics on the reference
// interpreter (the same bits as the unfused graph in f32, one rounding in bf16), oneDNN's
// post-op primitives against the reference kernels in both layouts and dtypes, and the
// executor: the op's output is never stored, the output is written over a dead residual,
// and results match the interpreter.
#include "engine/execution/executor.h"
#include "engine/passes/epilogue_fusion.h"

#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "ir/verifier.h"
#include "runtime/interpreter.h"
#include "tests/filecheck.h"
#include "tests/graph_checks.h"
#include "tests/onednn_check.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <variant>

namespace ampfuse::testing {
namespace {

bool accept_all(const ir::Node&, std::span<const ir::TensorType>) { return true; }

// What `ampfuse run` compiles for inference: constant weights, epilogues fused.
engine::ExecutorOptions inference_with_epilogues() {
  engine::ExecutorOptions opts;
  opts.constant_params = true;
  opts.fuse_epilogues = true;
  return opts;
}

// A residual block's tail, darknet style: conv + residual, then LeakyReLU.
constexpr const char* kConvAddLeaky = R"(graph {
  %x = var input : f32[2,4,9,9]
  %r = var input : f32[2,6,9,9]
  %w = var param : f32[6,4,3,3]
  %b = var param : f32[6]
  %conv = Convolution(%x, %w, %b) {kernel=[3,3], num_filter=6, pad=[1,1]}
  %sum = elemwise_add(%r, %conv)
  %y = LeakyReLU(%sum) {act_type="leaky", slope=0.1}
  return %y
})";

TEST(EpilogueFusion, AddAndLeakyReluBecomeOneFusedConvolution) {
  ir::Graph g = parsed(kConvAddLeaky);
  EXPECT_EQ(engine::fuse_epilogues(g, accept_all), 1);
  ir::verify(g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK-NOT: Convolution(
    CHECK: %y = _fused_conv(%x, %w, %b, %r) {act_type="leaky", {{.*}}slope=0.1, {{.*}}with_residual=true} : f32[2,6,9,9]
    CHECK-NEXT: return %y)");
  // f32: the convolution's f32 result plus the residual is the graph's own f32 add.
  for (uint64_t seed : {1, 2}) EXPECT_EQ(relative_difference(parsed(kConvAddLeaky), g, seed), 0.0) << "seed " << seed;
}

// The shorter chains, both operand orders, broadcast_add of equal shapes, a relu that stays
// after the add, channels-last, no bias, and a residual fed by another fused convolution.
TEST(EpilogueFusion, ShorterChainsAndEveryFormOfTheLinks) {
  struct Case {
    const char* name;
    std::string body;
    int fused;
    const char* check;
  };
  const std::string head = R"(graph {
    %x = var input : f32[1,8,8,4]
    %w = var param : f32[4,3,3,4]
    %w2 = var param : f32[4,1,1,4]
    %wf = var param : f32[4,4]
)";
  const Case cases[] = {
      {"conv -> LeakyReLU", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true, layout="NHWC"}
    %y = LeakyReLU(%c) {slope=0.1}
    return %y
  })", 1, R"(CHECK: %y = _fused_conv(%x, %w) {act_type="leaky", {{.*}}slope=0.1, {{.*}}with_residual=false})"},
      {"conv -> add -> relu: the add joins, the relu stays", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true, layout="NHWC"}
    %s = elemwise_add(%c, %x)
    %y = relu(%s)
    return %y
  })", 1, R"(CHECK: %s = _fused_conv(%x, %w, %x) {act_type="none", {{.*}}with_residual=true}
    CHECK-NEXT: %y = relu(%s))"},
      {"conv -> broadcast_add of equal shapes", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true, layout="NHWC"}
    %y = broadcast_add(%c, %x)
    return %y
  })", 1, R"(CHECK: %y = _fused_conv(%x, %w, %x) {act_type="none", {{.*}}with_residual=true})"},
      {"residual from a fused convolution", R"(
    %c1 = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true, layout="NHWC"}
    %a1 = LeakyReLU(%c1) {act_type="leaky", slope=0.2}
    %c2 = Convolution(%a1, %w2) {kernel=[1,1], num_filter=4, no_bias=true, layout="NHWC"}
    %s = elemwise_add(%c2, %a1)
    %y = LeakyReLU(%s) {slope=-0.5}
    return %y
  })", 2, R"(CHECK: %a1 = _fused_conv(%x, %w) {act_type="leaky", {{.*}}slope=0.2
    CHECK-NEXT: %y = _fused_conv(%a1, %w2, %a1) {act_type="leaky", {{.*}}slope=-0.5, {{.*}}with_residual=true})"},
      {"LeakyReLU read twice after the add: the add alone joins", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true, layout="NHWC"}
    %s = elemwise_add(%x, %c)
    %y = LeakyReLU(%s) {slope=0.1}
    return %y, %s
  })", 1, R"(CHECK: %s = _fused_conv(%x, %w, %x) {act_type="none", {{.*}}with_residual=true}
    CHECK-NEXT: %y = LeakyReLU(%s))"},
      {"FullyConnected -> add -> LeakyReLU", R"(
    %f = FullyConnected(%x, %wf) {num_hidden=4, flatten=false, no_bias=true}
    %s = elemwise_add(%f, %x)
    %y = LeakyReLU(%s) {slope=0.1}
    return %y
  })", 1, R"(CHECK: %y = _fused_fc(%x, %wf, %x) {act_type="leaky", flatten=false, no_bias=true, num_hidden=4, slope=0.1, with_residual=true} : f32[1,8,8,4])"},
      {"two convolutions meet at one add: the first takes it", R"(
    %c1 = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true, layout="NHWC"}
    %c2 = Convolution(%x, %w2) {kernel=[1,1], num_filter=4, no_bias=true, layout="NHWC"}
    %y = elemwise_add(%c1, %c2)
    return %y
  })", 1, R"(CHECK: %c2 = Convolution(%x, %w2)
    CHECK-NEXT: %y = _fused_conv(%x, %w, %c2) {act_type="none")"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ir::Graph original = parsed(head + c.body);
    ir::Graph g = original;
    EXPECT_EQ(engine::fuse_epilogues(g, accept_all), c.fused);
    ir::verify(g);
    EXPECT_FILECHECK(ir::print_graph(g), c.check);
    EXPECT_EQ(relative_difference(original, g, 3), 0.0);
  }
}

// Each graph breaks one condition: nothing fuses and the graph stays as it was.
TEST(EpilogueFusion, OnlyWhereNothingElseReadsTheLinksAndTypesAgree) {
  const std::string head = R"(graph {
    %x = var input : f32[1,4,6,6]
    %w = var param : f32[4,4,3,3]
    %row = var input : f32[1,4,1,1]
    %xl = var input : bf16[1,4,6,6]
    %wl = var param : bf16[4,4,3,3]
)";
  const std::pair<const char*, std::string> cases[] = {
      {"convolution read twice", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true}
    %y = LeakyReLU(%c) {slope=0.1}
    %z = elemwise_mul(%y, %c)
    return %z
  })"},
      {"convolution is a graph output", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true}
    %y = LeakyReLU(%c) {slope=0.1}
    return %y, %c
  })"},
      {"the add broadcasts its residual", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true}
    %y = broadcast_add(%c, %row)
    return %y
  })"},
      {"a cast between (bf16 convolution, f32 add)", R"(
    %c = Convolution(%xl, %wl) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true}
    %cf = amp_cast(%c) {dtype=f32}
    %y = elemwise_add(%cf, %x)
    return %y
  })"},
      {"the convolution added to itself", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true}
    %y = elemwise_add(%c, %c)
    return %y
  })"},
      {"another activation", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true}
    %y = Activation(%c) {act_type="tanh"}
    return %y
  })"},
      // oneDNN's relu and clip post-ops turn NaN into 0: EpilogueFusion.NaNStaysNaN.
      {"relu", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true}
    %y = Activation(%c) {act_type="relu"}
    return %y
  })"},
      {"clip (relu6)", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true}
    %y = clip(%c) {a_min=0, a_max=6}
    return %y
  })"},
      {"LeakyReLU of slope 0 (oneDNN's relu)", R"(
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true}
    %y = LeakyReLU(%c) {slope=0}
    return %y
  })"},
      {"a Deconvolution", R"(
    %c = Deconvolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1]}
    %y = LeakyReLU(%c) {slope=0.1}
    return %y
  })"},
  };
  for (const auto& [name, body] : cases) {
    SCOPED_TRACE(name);
    ir::Graph g = parsed(head + body);
    const std::string before = ir::print_graph(g);
    EXPECT_EQ(engine::fuse_epilogues(g, accept_all), 0);
    EXPECT_EQ(ir::print_graph(g), before);
  }
  // A chain the predicate refuses (oneDNN would run it with a reference kernel) stays too.
  ir::Graph g = parsed(kConvAddLeaky);
  const std::string before = ir::print_graph(g);
  EXPECT_EQ(engine::fuse_epilogues(g, [](const ir::Node&, std::span<const ir::TensorType>) { return false; }), 0);
  EXPECT_EQ(ir::print_graph(g), before);
}

// bf16: the fused op rounds once (the f32 sum), the graph twice (the convolution's output,
// then the sum): within a bf16 rounding of each other, and not always equal.
TEST(EpilogueFusion, Bf16RoundsOnceWhereTheGraphRoundedTwice) {
  const char* text = R"(graph {
    %x = var input : bf16[1,8,7,7]
    %r = var input : bf16[1,8,7,7]
    %w = var param : bf16[8,8,3,3]
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=8, pad=[1,1], no_bias=true}
    %s = elemwise_add(%c, %r)
    %y = LeakyReLU(%s) {slope=0.1}
    return %y
  })";
  const ir::Graph original = parsed(text);
  ir::Graph g = original;
  ASSERT_EQ(engine::fuse_epilogues(g, accept_all), 1);
  const double d = relative_difference(original, g, 5);
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, 1.0 / 128);  // bf16 keeps 8 significant bits
}

TEST(EpilogueFusion, ResidualOfAnotherTypeIsATypeErrorNamingIt) {
  EXPECT_EQ(error_message([] {
              parsed(R"(graph {
                %x = var input : f32[1,4,6,6]
                %w = var param : f32[4,4,3,3]
                %r = var input : f32[1,4,5,5]
                %y = _fused_conv(%x, %w, %r) {kernel=[3,3], num_filter=4, no_bias=true, with_residual=true}
                return %y
              })");
            }),
            "node 3 'y' (_fused_conv): the residual f32[1,4,5,5] differs from the output f32[1,4,4,4]");
}

// oneDNN's post-op primitive against the reference kernel: both layouts, f32 and bf16, with
// and without bias, residual and LeakyReLU; never one of oneDNN's reference implementations.
TEST(EpilogueFusion, OnednnPostOpsMatchTheReferenceKernel) {
  using runtime::onednn_check::filled;
  for (const bool nhwc : {false, true})
    for (const ir::DType dt : {ir::DType::f32, ir::DType::bf16})
      for (const bool bias : {false, true})
        for (const bool residual : {false, true})
          for (const char* act : {"none", "leaky"}) {
            const ir::Shape xs = nhwc ? ir::Shape{2, 7, 7, 16} : ir::Shape{2, 16, 7, 7};
            const ir::Shape ws = nhwc ? ir::Shape{32, 3, 3, 16} : ir::Shape{32, 16, 3, 3};
            const ir::Shape ys = nhwc ? ir::Shape{2, 7, 7, 32} : ir::Shape{2, 32, 7, 7};
            ir::Node n;
            n.op = "_fused_conv";
            n.name = "fc";
            ir::Attrs a;
            a.set("kernel", std::vector<int64_t>{3, 3});
            a.set("pad", std::vector<int64_t>{1, 1});
            a.set("num_filter", int64_t{32});
            a.set("no_bias", !bias);
            a.set("with_residual", residual);
            a.set("act_type", std::string(act));
            a.set("slope", 0.1);
            if (nhwc) a.set("layout", std::string("NHWC"));
            n.attrs = ir::complete_attrs(ir::OpRegistry::global().get(n.op), a);
            n.outputs = {{dt, ys}};
            std::vector<runtime::Tensor> in = {filled({dt, xs}, 1), filled({dt, ws}, 2)};
            if (bias) in.push_back(filled({ir::DType::f32, {32}}, 3));
            if (residual) in.push_back(filled({dt, ys}, 4));
            SCOPED_TRACE(fmt::format("{} {} bias {} residual {} {}", nhwc ? "NHWC" : "NCHW", ir::dtype_name(dt), bias,
                                     residual, act));
            const std::string impl =
                runtime::onednn_check::compare_node(n, in, dt == ir::DType::f32 ? 1e-5 : 2e-2);
            EXPECT_FALSE(impl.empty());
          }
}

// oneDNN's matmul with post-ops against the reference kernel: flatten and not, f32 and bf16,
// with and without bias, residual and LeakyReLU.
TEST(EpilogueFusion, OnednnFullyConnectedPostOpsMatchTheReferenceKernel) {
  using runtime::onednn_check::filled;
  for (const bool flatten : {false, true})
    for (const ir::DType dt : {ir::DType::f32, ir::DType::bf16})
      for (const bool bias : {false, true})
        for (const bool residual : {false, true})
          for (const char* act : {"none", "leaky"}) {
            const ir::Shape xs = {2, 24, 64};
            const ir::Shape ys = flatten ? ir::Shape{2, 96} : ir::Shape{2, 24, 96};
            ir::Node n;
            n.op = "_fused_fc";
            n.name = "ff";
            ir::Attrs a;
            a.set("num_hidden", int64_t{96});
            a.set("flatten", flatten);
            a.set("no_bias", !bias);
            a.set("with_residual", residual);
            a.set("act_type", std::string(act));
            a.set("slope", -0.3);
            n.attrs = ir::complete_attrs(ir::OpRegistry::global().get(n.op), a);
            n.outputs = {{dt, ys}};
            std::vector<runtime::Tensor> in = {filled({dt, xs}, 1),
                                               filled({dt, {96, flatten ? int64_t{24 * 64} : int64_t{64}}}, 2)};
            if (bias) in.push_back(filled({ir::DType::f32, {96}}, 3));
            if (residual) in.push_back(filled({dt, ys}, 4));
            SCOPED_TRACE(fmt::format("flatten {} {} bias {} residual {} {}", flatten, ir::dtype_name(dt), bias, residual,
                                     act));
            // Sums of up to 1536 products of values in [-1, 1]: f32 summation order shows.
            const std::string impl = runtime::onednn_check::compare_node(n, in, dt == ir::DType::f32 ? 1e-4 : 3e-2);
            EXPECT_FALSE(impl.empty());
          }
}

// A Transformer feed-forward block through the executor: the second FullyConnected takes the
// residual add, the relu after the first stays a fused kernel, and the result matches the
// interpreter.
TEST(EpilogueFusion, ExecutorRunsAFeedForwardBlockWithPostOps) {
  const char* text = R"(graph {
    %x = var input : f32[1,16,32]
    %w1 = var param : f32[64,32]
    %b1 = var param : f32[64]
    %w2 = var param : f32[32,64]
    %b2 = var param : f32[32]
    %h = FullyConnected(%x, %w1, %b1) {num_hidden=64, flatten=false}
    %a = Activation(%h) {act_type="relu"}
    %o = FullyConnected(%a, %w2, %b2) {num_hidden=32, flatten=false}
    %y = elemwise_add(%x, %o)
    %z = tanh(%y)
    return %z
  })";
  const ir::Graph g = parsed(text);
  const engine::Executable exe = engine::Executable::compile(g, inference_with_epilogues());
  EXPECT_EQ(exe.compile_stats().fused_epilogues, 1);
  EXPECT_EQ(count_op(exe.graph(), "_fused_fc"), 1);
  const runtime::Bindings vars = runtime::random_bindings(g, 11);
  const std::vector<runtime::Tensor> want = runtime::interpret(g, vars), got = exe.run(vars);
  ASSERT_EQ(got.size(), 1u);
  for (int64_t i = 0; i < want[0].size(); ++i) EXPECT_NEAR(got[0].get_f64(i), want[0].get_f64(i), 1e-5) << i;
}

// The executor (inference, constant params): every convolution of a residual block runs with
// its epilogue, no fused kernel is left, the block's last convolution writes its output over
// its dead residual, and the results match the interpreter on the original graph.
TEST(EpilogueFusion, ExecutorWritesOverTheDeadResidualAndMatchesTheInterpreter) {
  const char* text = R"(graph {
    %x = var input : f32[1,6,6,16]
    %w1 = var param : f32[16,3,3,16]
    %b1 = var param : f32[16]
    %w2 = var param : f32[16,1,1,16]
    %c1 = Convolution(%x, %w1, %b1) {kernel=[3,3], num_filter=16, pad=[1,1], layout="NHWC"}
    %a1 = LeakyReLU(%c1) {slope=0.1}
    %c2 = Convolution(%a1, %w2) {kernel=[1,1], num_filter=16, no_bias=true, layout="NHWC"}
    %a2 = LeakyReLU(%c2) {slope=0.1}
    %c3 = Convolution(%a2, %w1) {kernel=[3,3], num_filter=16, pad=[1,1], no_bias=true, layout="NHWC"}
    %s3 = elemwise_add(%c3, %a1)
    %a3 = LeakyReLU(%s3) {slope=0.1}
    %c4 = Convolution(%a3, %w2) {kernel=[1,1], num_filter=16, no_bias=true, layout="NHWC"}
    return %c4
  })";
  const ir::Graph g = parsed(text);
  const engine::Executable exe = engine::Executable::compile(g, inference_with_epilogues());
  EXPECT_EQ(exe.compile_stats().fused_epilogues, 3);
  EXPECT_EQ(count_op(exe.graph(), "Convolution"), 1);  // %c4: nothing after it
  for (const engine::PlanStep& step : exe.plan().steps) EXPECT_FALSE(std::holds_alternative<engine::FusedKernel>(step));
  // %a1 dies at the third convolution, which writes %a3 over it.
  EXPECT_EQ(exe.compile_stats().in_place, 1);
  EXPECT_EQ(engine::Executable::compile(g).compile_stats().fused_epilogues, 0);  // off by default

  for (uint64_t seed : {7, 8}) {
    const runtime::Bindings vars = runtime::random_bindings(g, seed);
    const std::vector<runtime::Tensor> want = runtime::interpret(g, vars);
    for (int run = 0; run < 2; ++run) {
      const std::vector<runtime::Tensor> got = exe.run(vars);
      ASSERT_EQ(got.size(), 1u);
      double worst = 0, largest = 0;
      for (int64_t i = 0; i < want[0].size(); ++i) {
        worst = std::max(worst, std::fabs(want[0].get_f64(i) - got[0].get_f64(i)));
        largest = std::max(largest, std::fabs(want[0].get_f64(i)));
      }
      EXPECT_LT(worst, 1e-5 * largest) << "seed " << seed << " run " << run;
    }
  }
}

// A residual that is a variable (the caller's tensor) or that a later step still reads is
// copied into the output first, never overwritten.
TEST(EpilogueFusion, ExecutorCopiesAResidualThatLivesOn) {
  const char* text = R"(graph {
    %x = var input : f32[1,16,5,5]
    %r = var input : f32[1,16,5,5]
    %w = var param : f32[16,16,3,3]
    %t = tanh(%r)
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=16, pad=[1,1], no_bias=true}
    %s = elemwise_add(%c, %t)
    %y = LeakyReLU(%s) {slope=0.1}
    %z = elemwise_mul(%t, %y)
    %c2 = Convolution(%x, %w) {kernel=[3,3], num_filter=16, pad=[1,1], no_bias=true}
    %y2 = elemwise_add(%r, %c2)
    return %z, %y2
  })";
  const ir::Graph g = parsed(text);
  engine::ExecutorOptions opts;
  opts.fuse_epilogues = true;
  opts.layout = "keep";  // channels-last would put transposes between the convolutions and adds
  const engine::Executable exe = engine::Executable::compile(g, opts);
  EXPECT_EQ(exe.compile_stats().fused_epilogues, 2);
  EXPECT_EQ(exe.compile_stats().in_place, 0);
  const runtime::Bindings vars = runtime::random_bindings(g, 9);
  const runtime::Tensor r_before = vars.at("r").clone();
  const std::vector<runtime::Tensor> want = runtime::interpret(g, vars), got = exe.run(vars);
  ASSERT_EQ(got.size(), 2u);
  for (size_t k = 0; k < 2; ++k)
    for (int64_t i = 0; i < want[k].size(); ++i)
      EXPECT_NEAR(got[k].get_f64(i), want[k].get_f64(i), 1e-5) << "output " << k << " element " << i;
  for (int64_t i = 0; i < r_before.size(); ++i) ASSERT_EQ(vars.at("r").get_f64(i), r_before.get_f64(i));
}

// NaN from the data: the interpreter keeps it through relu, clip and LeakyReLU, and so must
// the executor with epilogues. oneDNN's relu and clip post-ops would give 0 (and did, when
// relu was one); LeakyReLU's post-op keeps NaN too.
TEST(EpilogueFusion, NaNStaysNaN) {
  const char* text = R"(graph {
    %x = var input : f32[1,16,6,6]
    %w = var param : f32[16,16,1,1]
    %c1 = Convolution(%x, %w) {kernel=[1,1], num_filter=16, no_bias=true}
    %a1 = relu(%c1)
    %c2 = Convolution(%x, %w) {kernel=[1,1], num_filter=16, no_bias=true}
    %a2 = clip(%c2) {a_min=0, a_max=6}
    %c3 = Convolution(%x, %w) {kernel=[1,1], num_filter=16, no_bias=true}
    %a3 = LeakyReLU(%c3) {slope=0.1}
    return %a1, %a2, %a3
  })";
  const ir::Graph g = parsed(text);
  const engine::Executable exe = engine::Executable::compile(g, inference_with_epilogues());
  EXPECT_EQ(exe.compile_stats().fused_epilogues, 1);
  runtime::Bindings vars = runtime::random_bindings(g, 11);
  vars.at("x").set_f64(3, std::nan(""));  // one pixel of channel 0: every output channel there
  const std::vector<runtime::Tensor> want = runtime::interpret(g, vars), got = exe.run(vars);
  ASSERT_EQ(got.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    int nan = 0;
    for (int64_t i = 0; i < want[k].size(); ++i) {
      nan += std::isnan(want[k].get_f64(i));
      EXPECT_EQ(std::isnan(got[k].get_f64(i)), std::isnan(want[k].get_f64(i))) << "output " << k << " element " << i;
      // (oneDNN adds the products in another order than the reference kernel.)
      if (!std::isnan(want[k].get_f64(i))) {
        EXPECT_NEAR(got[k].get_f64(i), want[k].get_f64(i), 1e-5) << "output " << k << " element " << i;
      }
    }
    EXPECT_EQ(nan, 16) << "output " << k;
  }
}

// ExecutorOptions::relu_post_ops: the relu joins its convolution as oneDNN's post-op, and
// NaN becomes 0 there (what MXNet's oneDNN fusion gives), while the LeakyReLU keeps it.
TEST(EpilogueFusion, ReluPostOpsWhenAskedTurnNaNIntoZero) {
  ir::Graph g = parsed(R"(graph {
    %x = var input : f32[1,16,6,6]
    %w = var param : f32[16,16,1,1]
    %c1 = Convolution(%x, %w) {kernel=[1,1], num_filter=16, no_bias=true}
    %a1 = Activation(%c1) {act_type="relu"}
    %c3 = Convolution(%x, %w) {kernel=[1,1], num_filter=16, no_bias=true}
    %a3 = LeakyReLU(%c3) {slope=0.1}
    return %a1, %a3
  })");
  const ir::Graph original = g;
  EXPECT_EQ(engine::fuse_epilogues(g, accept_all, /*relu=*/true), 2);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %a1 = _fused_conv(%x, %w) {act_type="relu"
    CHECK-NEXT: %a3 = _fused_conv(%x, %w) {act_type="leaky")");
  // The reference kernel of act_type "relu" is relu's: the same as the graph, NaN kept.
  EXPECT_EQ(relative_difference(original, g, 3), 0.0);

  engine::ExecutorOptions opts = inference_with_epilogues();
  opts.relu_post_ops = true;
  const engine::Executable exe = engine::Executable::compile(original, opts);
  EXPECT_EQ(exe.compile_stats().fused_epilogues, 2);
  runtime::Bindings vars = runtime::random_bindings(original, 11);
  vars.at("x").set_f64(3, std::nan(""));
  const std::vector<runtime::Tensor> want = runtime::interpret(original, vars), got = exe.run(vars);
  int relu_zeros = 0, leaky_nans = 0;
  for (int64_t i = 0; i < want[0].size(); ++i) {
    if (std::isnan(want[0].get_f64(i))) relu_zeros += got[0].get_f64(i) == 0;
    if (std::isnan(want[1].get_f64(i))) leaky_nans += std::isnan(got[1].get_f64(i));
  }
  EXPECT_EQ(relu_zeros, 16);
  EXPECT_EQ(leaky_nans, 16);
}

// Training compiles ignore the option: _fused_conv has no gradient.
TEST(EpilogueFusion, TrainingCompilesKeepTheConvolutions) {
  engine::ExecutorOptions opts;
  opts.fuse_epilogues = true;
  opts.backward = engine::BackwardOptions{};
  const engine::Executable exe = engine::Executable::compile(parsed(kConvAddLeaky), opts);
  EXPECT_EQ(exe.compile_stats().fused_epilogues, 0);
  EXPECT_EQ(count_op(exe.graph(), "_fused_conv"), 0);
}

}  // namespace
}  // namespace ampfuse::testing
