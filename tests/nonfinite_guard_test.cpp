// The executor's guard for oneDNN primitives that differ from the reference kernel on
// non-finite data (runtime::onednn_differs_on_nonfinite): oneDNN 2.6's max pooling gives a
// number for a window holding NaN and its softmax leaves a NaN row partly NaN, where the
// interpreter propagates NaN. A run checks such a step's data (a flag raised by the fused
// kernel that writes it, or a scan of a graph input) and runs the reference kernel where
// the data is not all finite; finite data keeps oneDNN. Each case: NaN positions as the
// interpreter's, values as close as oneDNN's, and RunStats::reference_on_nonfinite telling
// which path ran. A sweep over every op given to oneDNN shows which ones need the guard,
// and a whole model (squeezenet) that a NaN pixel now reaches every output.
#include "engine/execution/executor.h"
#include "engine/lower.h"

#include "ir/mxnet_json.h"
#include "runtime/device_api.h"
#include "runtime/interpreter.h"
#include "runtime/onednn/onednn_ops.h"
#include "tests/graph_checks.h"
#include "tests/model_files.h"
#include "tests/onednn_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

namespace ampfuse::testing {
namespace {

// Runs `g` compiled with `opts` on `vars`; every element must be NaN where the
// interpreter's is, and within `tolerance` of it elsewhere. Returns the run's stats.
engine::RunStats expect_as_interpreter(const engine::Executable& exe, const ir::Graph& g,
                                       const runtime::Bindings& vars, double tolerance = 1e-6) {
  const std::vector<runtime::Tensor> want = runtime::interpret(g, vars);
  engine::RunStats rs;
  const std::vector<runtime::Tensor> got = exe.run(vars, &rs);
  EXPECT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size() && k < want.size(); ++k)
    for (int64_t i = 0; i < want[k].size(); ++i) {
      const double w = want[k].get_f64(i), v = got[k].get_f64(i);
      EXPECT_EQ(std::isnan(v), std::isnan(w)) << "output " << k << " element " << i << ": " << v << " against " << w;
      if (!std::isnan(w) && v != w) {  // (+-Inf equal)
        EXPECT_NEAR(v, w, tolerance) << "output " << k << " element " << i;
      }
    }
  return rs;
}

// `g` compiled with the model's own layout, its guards counted: `guarded` steps, of which
// `by_scan` read their data once more.
engine::Executable compiled_with_guards(const ir::Graph& g, int guarded, int by_scan) {
  engine::ExecutorOptions opts;
  opts.layout = "keep";
  engine::Executable exe = engine::Executable::compile(g, opts);
  EXPECT_EQ(exe.compile_stats().guarded_steps, guarded);
  EXPECT_EQ(exe.compile_stats().guards_by_scan, by_scan);
  return exe;
}

// Finite data runs every guarded step on oneDNN; with element `at` of variable `var` NaN,
// one step takes its reference kernel. Both runs as the interpreter's.
void expect_reference_only_for_nan(const engine::Executable& exe, const ir::Graph& g, uint64_t seed, const char* var,
                                   int64_t at, double tolerance = 1e-6) {
  runtime::Bindings vars = runtime::random_bindings(g, seed);
  EXPECT_EQ(expect_as_interpreter(exe, g, vars, tolerance).reference_on_nonfinite, 0) << "finite data";
  vars.at(var).set_f64(at, std::nan(""));
  EXPECT_EQ(expect_as_interpreter(exe, g, vars, tolerance).reference_on_nonfinite, 1) << "NaN in " << var;
}

int count_nan(const runtime::Tensor& t) {
  int n = 0;
  for (int64_t i = 0; i < t.size(); ++i) n += std::isnan(t.get_f64(i));
  return n;
}

// A relu kernel writes the pooling's data: its flag guards the pooling. 3x3 windows of
// stride 2 over 9x9 planes; one NaN sits in the windows of 4 outputs of its channel.
constexpr const char* kReluMaxPool = R"(graph {
  %x = var input : f32[2,16,9,9]
  %r = relu(%x)
  %p = Pooling(%r) {kernel=[3,3], stride=[2,2], pool_type="max"}
  return %p
})";

TEST(NonfiniteGuard, MaxPoolingAfterAKernelKeepsNaN) {
  const ir::Graph g = parsed(kReluMaxPool);
  for (const char* layout : {"keep", "nhwc"}) {
    SCOPED_TRACE(layout);
    engine::ExecutorOptions opts;
    opts.layout = layout;
    const engine::Executable exe = engine::Executable::compile(g, opts);
    EXPECT_EQ(exe.compile_stats().onednn_ops, 1);
    EXPECT_EQ(exe.compile_stats().guarded_steps, 1);
    EXPECT_EQ(exe.compile_stats().guards_by_scan, 0);
    runtime::Bindings vars = runtime::random_bindings(g, 5);
    EXPECT_EQ(expect_as_interpreter(exe, g, vars).reference_on_nonfinite, 0);  // finite: oneDNN
    vars.at("x").set_f64(2 * 81 + 4 * 9 + 4, std::nan(""));
    engine::RunStats rs = expect_as_interpreter(exe, g, vars);
    EXPECT_EQ(rs.reference_on_nonfinite, 1);
    EXPECT_FALSE(rs.nonfinite);  // the guard's flag is not check_nonfinite's report
    // +-Inf raises the flag too (the reference kernel then runs; same values).
    vars.at("x").set_f64(2 * 81 + 4 * 9 + 4, std::numeric_limits<double>::infinity());
    EXPECT_EQ(expect_as_interpreter(exe, g, vars).reference_on_nonfinite, 1);
    // The flag is cleared each run: finite data goes back to oneDNN.
    vars.at("x").set_f64(2 * 81 + 4 * 9 + 4, 0.5);
    EXPECT_EQ(expect_as_interpreter(exe, g, vars).reference_on_nonfinite, 0);
  }
}

// squeezenet's fire modules: max pooling of the concatenation of two relu kernels' outputs.
// The guard looks through the Concat to both kernels' flags.
// On a device whose memory is not the host's (the emulated GPU: the kernels' flags live in
// device memory), the host scans the data it downloads for the oneDNN step.
TEST(NonfiniteGuard, OnASeparateMemoryTheHostScans) {
  const ir::Graph g = parsed(kReluMaxPool);
  runtime::EmulatedDevice device;
  engine::ExecutorOptions opts;
  opts.device = &device;
  const engine::Executable exe = engine::Executable::compile(g, opts);
  EXPECT_EQ(exe.compile_stats().guarded_steps, 1);
  EXPECT_EQ(exe.compile_stats().guards_by_scan, 1);
  expect_reference_only_for_nan(exe, g, 5, "x", 2 * 81 + 4 * 9 + 4);
}

TEST(NonfiniteGuard, MaxPoolingOfAConcatOfKernelsReadsTheirFlags) {
  const ir::Graph g = parsed(R"(graph {
    %x = var input : f32[1,8,9,9]
    %y = var input : f32[1,8,9,9]
    %a = relu(%x)
    %b = _mul_scalar(%y) {scalar=3}
    %c = Concat(%a, %b) {dim=1, num_args=2}
    %p = Pooling(%c) {kernel=[3,3], stride=[2,2], pool_type="max"}
    return %p
  })");
  const engine::Executable exe = compiled_with_guards(g, 1, 0);
  for (const char* name : {"x", "y"}) expect_reference_only_for_nan(exe, g, 4, name, 5 * 81 + 40);
}

// f32 (which oneDNN pools natively on every CPU; bf16 data it computes in f32 on CPUs
// without AVX512-BF16 is widened by a cast kernel, whose flag guards instead), more
// elements than one block of the scan, the NaN in the last.
TEST(NonfiniteGuard, MaxPoolingOfAGraphInputScansIt) {
  const ir::Graph g = parsed(R"(graph {
    %x = var input : f32[1,8,33,33]
    %p = Pooling(%x) {kernel=[2,2], stride=[2,2], pool_type="max", pooling_convention="full"}
    return %p
  })");
  const engine::Executable exe = compiled_with_guards(g, 1, 1);
  ASSERT_EQ(exe.compile_stats().onednn_ops, 1);
  expect_reference_only_for_nan(exe, g, 3, "x", 8 * 33 * 33 - 1, 0);  // the last pixel: a padded window of its own
}

TEST(NonfiniteGuard, AveragePoolingIsNotGuarded) {
  const ir::Graph g = parsed(R"(graph {
    %x = var input : f32[2,16,9,9]
    %r = relu(%x)
    %p = Pooling(%r) {kernel=[3,3], stride=[2,2], pool_type="avg"}
    return %p
  })");
  const engine::Executable exe = engine::Executable::compile(g, {});
  EXPECT_EQ(exe.compile_stats().onednn_ops, 1);
  EXPECT_EQ(exe.compile_stats().guarded_steps, 0);
  runtime::Bindings vars = runtime::random_bindings(g, 5);
  vars.at("x").set_f64(7, std::nan(""));
  EXPECT_EQ(expect_as_interpreter(exe, g, vars, 1e-6).reference_on_nonfinite, 0);  // oneDNN's average keeps NaN
}

// The max pooling gradient: the reference gives a window without a maximum (NaN) its
// gradient at its last element; oneDNN recomputes the forward and routes it elsewhere.
TEST(NonfiniteGuard, MaxPoolingGradientRoutesANaNWindowAsTheReference) {
  const ir::Graph g = parsed(R"(graph {
    %x = var input : f32[1,8,9,9]
    %dy = var input : f32[1,8,4,4]
    %r = relu(%x)
    %g = _backward_Pooling(%r, %dy) {kernel=[3,3], stride=[2,2], pool_type="max"}
    return %g
  })");
  const engine::Executable exe = compiled_with_guards(g, 1, 0);
  ASSERT_EQ(exe.compile_stats().onednn_ops, 1);
  expect_reference_only_for_nan(exe, g, 6, "x", 3 * 81 + 2 * 9 + 2);  // the window at (0, 0) of channel 3
}

// Where a relu post-op writes the pooling's data no NaN reaches it (ExecutorOptions::
// relu_post_ops turned it into 0 already): nothing to guard, nothing to pay.
TEST(NonfiniteGuard, MaxPoolingAfterAReluPostOpIsNotGuarded) {
  const ir::Graph g = parsed(R"(graph {
    %x = var input : f32[1,16,8,8]
    %w = var param : f32[16,16,3,3]
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=16, pad=[1,1], no_bias=true}
    %a = relu(%c)
    %p = Pooling(%a) {kernel=[2,2], stride=[2,2], pool_type="max"}
    return %p
  })");
  engine::ExecutorOptions opts;
  opts.constant_params = true;
  opts.fuse_epilogues = true;
  const engine::Executable exact = engine::Executable::compile(g, opts);
  EXPECT_EQ(exact.compile_stats().fused_epilogues, 0);
  EXPECT_EQ(exact.compile_stats().guarded_steps, 1);  // the relu kernel's flag
  runtime::Bindings vars = runtime::random_bindings(g, 8);
  vars.at("x").set_f64(9, std::nan(""));
  EXPECT_EQ(expect_as_interpreter(exact, g, vars, 1e-5).reference_on_nonfinite, 1);

  opts.relu_post_ops = true;
  const engine::Executable fast = engine::Executable::compile(g, opts);
  EXPECT_EQ(fast.compile_stats().fused_epilogues, 1);
  EXPECT_EQ(fast.compile_stats().guarded_steps, 0);
  engine::RunStats rs;
  const std::vector<runtime::Tensor> got = fast.run(vars, &rs);
  EXPECT_EQ(count_nan(got[0]), 0);  // MXNet's semantics, asked for
  EXPECT_EQ(rs.reference_on_nonfinite, 0);
}

// softmax where oneDNN runs it (row kernels off, as in training compiles): a row holding
// NaN must come out NaN everywhere, as the interpreter's.
TEST(NonfiniteGuard, SoftmaxOnOneDnnKeepsANaNRowNaN) {
  const ir::Graph g = parsed(R"(graph {
    %x = var input : f32[4,37]
    %y = _mul_scalar(%x) {scalar=2}
    %s = softmax(%y) {axis=-1}
    return %s
  })");
  for (bool check_nonfinite : {false, true}) {
    SCOPED_TRACE(check_nonfinite ? "check_nonfinite" : "plain");
    engine::ExecutorOptions opts;
    opts.check_nonfinite = check_nonfinite;  // the kernel's own flag serves as the guard
    const engine::Executable exe = engine::Executable::compile(g, opts);
    ASSERT_EQ(exe.compile_stats().onednn_ops, 1);
    EXPECT_EQ(exe.compile_stats().guarded_steps, 1);
    runtime::Bindings vars = runtime::random_bindings(g, 2);
    EXPECT_EQ(expect_as_interpreter(exe, g, vars).reference_on_nonfinite, 0);
    vars.at("x").set_f64(37 + 5, std::nan(""));
    const engine::RunStats rs = expect_as_interpreter(exe, g, vars);
    EXPECT_EQ(rs.reference_on_nonfinite, 1);
    EXPECT_EQ(rs.nonfinite, check_nonfinite);
    EXPECT_EQ(count_nan(runtime::interpret(g, vars)[0]), 37);
  }
}

// Which primitives the guard must cover: every op oneDNN runs, with one NaN in its data
// (input 0), against its reference kernel. The ones onednn_differs_on_nonfinite names do
// differ (else the guard could go); every other one keeps NaN exactly where the reference
// does (else it needs the guard).
TEST(NonfiniteGuard, EveryOtherOneDnnOpKeepsNaNAsItsReference) {
  struct Case {
    const char* text;
    double tolerance;
  };
  const Case cases[] = {
      {R"(%x = var input : f32[2,8,9,9]
          %w = var param : f32[16,8,3,3]
          %b = var param : f32[16]
          %y = Convolution(%x, %w, %b) {kernel=[3,3], num_filter=16})", 1e-5},
      {R"(%x = var input : f32[2,9,9,8]
          %w = var param : f32[16,3,3,8]
          %y = Convolution(%x, %w) {kernel=[3,3], num_filter=16, no_bias=true, layout="NHWC"})", 1e-5},
      {R"(%x = var input : f32[1,8,6,6]
          %w = var param : f32[8,4,3,3]
          %y = Deconvolution(%x, %w) {kernel=[3,3], num_filter=4, pad=[1,1], no_bias=true})", 1e-5},
      {R"(%x = var input : f32[1,4,9,9]
          %w = var param : f32[6,4,3,3]
          %r = var input : f32[1,6,9,9]
          %y = _fused_conv(%x, %w, %r) {kernel=[3,3], num_filter=6, pad=[1,1], no_bias=true, with_residual=true, act_type="leaky", slope=0.1})", 1e-5},
      {R"(%x = var input : f32[3,20]
          %w = var param : f32[7,20]
          %b = var param : f32[7]
          %y = FullyConnected(%x, %w, %b) {num_hidden=7})", 1e-5},
      {R"(%x = var input : f32[2,3,4]
          %z = var input : f32[2,4,5]
          %y = batch_dot(%x, %z))", 1e-5},
      {R"(%x = var input : f32[3,4]
          %z = var input : f32[4,5]
          %y = dot(%x, %z))", 1e-5},
      {R"(%x = var input : f32[2,3,9,9]
          %y = Pooling(%x) {kernel=[3,3], stride=[2,2], pool_type="avg"})", 1e-6},
      {R"(%x = var input : f32[6,40]
          %g = var param : f32[40]
          %b = var param : f32[40]
          %y = LayerNorm(%x, %g, %b))", 1e-5},
      {R"(%x = var input : f32[4,6,10]
          %y = sum(%x) {axis=[0,2]})", 1e-5},
      {R"(%x = var input : f32[4,6,10]
          %y = mean(%x) {axis=[0]})", 1e-5},
      {R"(%x = var input : f32[2,8,5,5]
          %g = var param : f32[8]
          %b = var param : f32[8]
          %m = var aux : f32[8]
          %v = var aux : f32[8]
          %y = _BatchNorm_train(%x, %g, %b, %m, %v))", 1e-4},
      {R"(%x = var input : f32[1,4,8,8]
          %dy = var input : f32[1,2,6,6]
          %y = _backward_Convolution_weight(%x, %dy) {kernel=[3,3], num_filter=2, no_bias=true})", 1e-4},
      {R"(%dy = var input : f32[4,33]
          %out = var input : f32[4,33]
          %y = _backward_softmax(%dy, %out) {axis=-1, dtype=f32})", 1e-5},
      {R"(%dy = var input : f32[6,40]
          %x = var input : f32[6,40]
          %g = var param : f32[40]
          %y = _backward_LayerNorm(%dy, %x, %g))", 1e-4},
      // Guarded: these differ.
      {R"(%x = var input : f32[2,3,9,9]
          %y = Pooling(%x) {kernel=[3,3], stride=[2,2], pool_type="max"})", 0},
      {R"(%x = var input : f32[1,2,8,8]
          %dy = var input : f32[1,2,4,4]
          %y = _backward_Pooling(%x, %dy) {kernel=[2,2], stride=[2,2], pool_type="max"})", 0},
      {R"(%x = var input : f32[4,33]
          %y = softmax(%x) {axis=-1})", 0},
  };
  for (const Case& c : cases) {
    const ir::Graph g = parsed(std::string("graph {\n") + c.text + "\n  return %y:0\n}");
    const ir::Node& node = g.nodes[g.outputs[0].node];
    SCOPED_TRACE(node.op);
    const runtime::Bindings vars = runtime::random_bindings(g, 12);
    std::vector<runtime::Tensor> inputs;
    for (ir::ValueRef in : node.inputs) inputs.push_back(vars.at(g.nodes[in.node].name).clone());
    inputs[0].set_f64(inputs[0].size() / 2 + 1, std::nan(""));
    if (!runtime::onednn_differs_on_nonfinite(node)) {
      (void)runtime::onednn_check::compare_node(node, inputs, c.tolerance, /*hot=*/false);
      continue;
    }
    // Guarded: oneDNN's result differs from the reference's (NaN elsewhere, or the pooling
    // gradient's value at another element; these ops are otherwise exact).
    std::vector<runtime::Tensor> got, want;
    for (const ir::TensorType& t : node.outputs) got.emplace_back(t), want.emplace_back(t);
    runtime::onednn_run(node, inputs, got);
    (*runtime::find_reference_kernel(node.op))(node, inputs, want);
    int64_t differ = 0;
    for (int64_t i = 0; i < got[0].size(); ++i) {
      const double a = got[0].get_f64(i), e = want[0].get_f64(i);
      differ += std::isnan(a) != std::isnan(e) || (!std::isnan(e) && std::fabs(a - e) > 1e-6 * (1 + std::fabs(e)));
    }
    EXPECT_GT(differ, 0) << "oneDNN keeps NaN as the reference here now: the guard may go";
  }
}

// Not guarded, a difference of range (docs/ops.md, "NaN through oneDNN"): oneDNN's LayerNorm
// and sum add their statistics in f32, the reference kernels in f64, so data near f32's
// largest overflows in oneDNN only. What `ampfuse fuzz --rows --external-rows` found, held
// here so that the doc's description stays true.
TEST(NonfiniteGuard, OneDnnStatisticsOverflowInF32WhereTheReferenceDoesNot) {
  const auto both = [](const char* text, runtime::Tensor data, std::vector<runtime::Tensor>* got,
                       std::vector<runtime::Tensor>* want) {
    const ir::Graph g = parsed(text);
    const ir::Node& node = g.nodes[g.outputs[0].node];
    runtime::Bindings vars = runtime::random_bindings(g, 1);
    std::vector<runtime::Tensor> inputs;
    for (ir::ValueRef in : node.inputs) inputs.push_back(vars.at(g.nodes[in.node].name).clone());
    inputs[0] = std::move(data);
    for (const ir::TensorType& t : node.outputs) got->emplace_back(t), want->emplace_back(t);
    runtime::onednn_run(node, inputs, *got);
    (*runtime::find_reference_kernel(node.op))(node, inputs, *want);
  };
  // LayerNorm of a row holding -3e38: the f32 sum of squares overflows, the variance is
  // infinite and every output is beta; the reference normalizes.
  runtime::Tensor row = runtime::Tensor::zeros({ir::DType::f32, {1, 13}});
  for (int64_t i = 0; i < 13; ++i) row.set_f64(i, 0.1 * static_cast<double>(i));
  row.set_f64(5, -3e38);
  std::vector<runtime::Tensor> got, want;
  both(R"(graph {
    %x = var input : f32[1,13]
    %g = var param : f32[13]
    %b = var param : f32[13]
    %y = LayerNorm(%x, %g, %b) {eps=0.01}
    return %y
  })", row, &got, &want);
  EXPECT_TRUE(std::isfinite(want[0].get_f64(0)));
  EXPECT_GT(std::fabs(got[0].get_f64(5) - want[0].get_f64(5)), 0.1) << "oneDNN's LayerNorm now adds in a wider type";
  // A sum of 63 values of 3e38 and one -Inf: f32 partial sums reach +Inf and meet the -Inf
  // (NaN); the f64 sum stays finite until the -Inf (-Inf).
  runtime::Tensor sums = runtime::Tensor::zeros({ir::DType::f32, {1, 64}});
  for (int64_t i = 0; i < 64; ++i) sums.set_f64(i, 3e38);
  sums.set_f64(37, -INFINITY);
  got.clear(), want.clear();
  both(R"(graph {
    %x = var input : f32[1,64]
    %y = sum(%x) {axis=[1]}
    return %y
  })", sums, &got, &want);
  EXPECT_EQ(want[0].get_f64(0), -INFINITY);
  EXPECT_TRUE(std::isnan(got[0].get_f64(0))) << "oneDNN's sum now adds in a wider type: " << got[0].get_f64(0);
}

// A whole model: one NaN pixel reaches every output of squeezenet in the interpreter
// (convolutions spread it, relu and Concat keep it, max pooling propagates it, the global
// average and the softmax take it everywhere). The executor, as `ampfuse run` compiles it
// (weights constant, epilogues fused, row kernels), must agree in f32 and bf16; its three
// max poolings used to turn the NaN into numbers, and every output was finite.
TEST(NonfiniteGuard, SqueezenetKeepsANaNPixelAsTheInterpreter) {
  const std::string path = models_dir() + "/squeezenet_v1.1-mms-legacy-symbol.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
  ir::MxnetImportOptions io;
  io.input_shapes = {{"data", {1, 3, 64, 64}}};
  ir::Graph g = ir::load_mxnet_json_file(path, io);
  g.outputs.push_back(g.node(g.outputs[0]).inputs[0]);  // the logits, before SoftmaxOutput
  runtime::Bindings vars = runtime::random_bindings(g, 7);
  vars.at("data").set_f64(64 * 20 + 33, std::nan(""));
  const std::vector<runtime::Tensor> want = runtime::interpret(g, vars);
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(count_nan(want[0]), want[0].size());
  EXPECT_EQ(count_nan(want[1]), want[1].size());
  for (const char* target : {"off", "bf16"}) {
    SCOPED_TRACE(target);
    ir::Graph run_graph = g;
    if (std::string(target) == "bf16") {
      engine::AmpOptions amp;
      amp.target = ir::DType::bf16;
      run_graph = engine::convert_for_amp(g, amp);
    }
    engine::ExecutorOptions opts;
    opts.constant_params = true;
    opts.fold_batchnorm = true;
    opts.fuse_epilogues = true;
    opts.row_kernels = true;
    const engine::Executable exe = engine::Executable::compile(run_graph, opts);
    EXPECT_EQ(exe.compile_stats().guarded_steps, 3);  // the three max poolings
    EXPECT_EQ(exe.compile_stats().guards_by_scan, 0);
    engine::RunStats rs;
    const std::vector<runtime::Tensor> got = exe.run(vars, &rs);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(count_nan(got[0]), got[0].size());
    EXPECT_EQ(count_nan(got[1]), got[1].size());
    EXPECT_GE(rs.reference_on_nonfinite, 1);
  }
}

}  // namespace
}  // namespace ampfuse::testing
