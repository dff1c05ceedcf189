// The executor (engine/execution/executor.h): plans run fused, equal to the interpreter, with kernels
// cached across sizes, buffers reused, the non-finite flag, views and fallbacks.
#include "fuzz/differential.h"
#include "engine/execution/executor.h"
#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/kernel_cache.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ampfuse::engine {
namespace {

using ir::DType;
using ir::ValueRef;
using fuzz::compare_fused_with_interpreter;
using runtime::Tensor;

// bf16 AMP-style chain: x f32 -> bf16 -> (x*w + b) relu -> f32, over [batch, 8, 5].
ir::Graph amp_chain(int64_t batch) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {batch, 8, 5}});
  const ValueRef w = b.input("w", {DType::bf16, {8, 5}});
  const ValueRef bias = b.input("bias", {DType::bf16, {1, 1, 5}});
  const ValueRef xl = b.op("amp_cast", {x}, {{"dtype", "bfloat16"}});
  const ValueRef m = b.op("broadcast_mul", {xl, w});
  const ValueRef a = b.op("broadcast_add", {m, bias});
  const ValueRef r = b.op("Activation", {a}, {{"act_type", "relu"}});
  b.output(b.op("amp_cast", {r}, {{"dtype", "float32"}}));
  return b.finish();
}

// Within `tol` relative to the largest |value| of each output (oneDNN sums in its own order).
void expect_near(const std::vector<Tensor>& want, const std::vector<Tensor>& got, double tol) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].type(), got[k].type());
    double largest = 0;
    for (int64_t i = 0; i < want[k].size(); ++i) largest = std::max(largest, std::fabs(want[k].get_f64(i)));
    for (int64_t i = 0; i < want[k].size(); ++i)
      ASSERT_NEAR(want[k].get_f64(i), got[k].get_f64(i), tol * largest) << "output " << k << " element " << i;
  }
}

void expect_same(const std::vector<Tensor>& want, const std::vector<Tensor>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].type(), got[k].type());
    for (int64_t i = 0; i < want[k].size(); ++i) {
      const double a = want[k].get_f64(i), b = got[k].get_f64(i);
      if (std::isnan(a) && std::isnan(b)) continue;
      ASSERT_EQ(a, b) << "output " << k << " element " << i;
    }
  }
}

TEST(Executor, AmpChainIsOneKernelEqualToTheInterpreter) {
  const ir::Graph g = amp_chain(3);
  const Executable exe = Executable::compile(g);
  EXPECT_EQ(exe.compile_stats().kernels, 1);
  EXPECT_EQ(exe.compile_stats().fused_nodes, 5);
  EXPECT_TRUE(exe.compile_stats().fallbacks.empty());
  const runtime::Bindings vars = runtime::random_bindings(g, 7);
  expect_same(runtime::interpret(g, vars), exe.run(vars));
}

TEST(Executor, NewBatchSizeCompilesNothing) {
  runtime::KernelCache cache;
  ExecutorOptions opts;
  opts.cache = &cache;
  const Executable first = Executable::compile(amp_chain(2), opts);
  EXPECT_EQ(first.compile_stats().compilations, 1);
  for (int64_t batch : {5, 64, 3}) {
    const ir::Graph g = amp_chain(batch);
    const Executable again = Executable::compile(g, opts);
    EXPECT_EQ(again.compile_stats().compilations, 0) << "batch " << batch;
    EXPECT_EQ(again.compile_stats().cache_hits, 1);
    const runtime::Bindings vars = runtime::random_bindings(g, static_cast<uint64_t>(batch));
    expect_same(runtime::interpret(g, vars), again.run(vars));
  }
  EXPECT_EQ(cache.stats().compilations, 1);
}

TEST(Executor, UnfusedRunsOneKernelPerOpAndReusesBuffers) {
  ir::GraphBuilder b;
  ValueRef v = b.input("x", {DType::f32, {4096}});
  for (int k = 0; k < 12; ++k) v = b.op(k % 2 ? "negative" : "_plus_scalar", {v}, k % 2 ? std::map<std::string, std::string>{} : std::map<std::string, std::string>{{"scalar", "1"}});
  b.output(v);
  const ir::Graph g = b.finish();
  ExecutorOptions opts;
  opts.fuse = false;
  const Executable exe = Executable::compile(g, opts);
  EXPECT_EQ(exe.compile_stats().kernels, 12);
  const runtime::Bindings vars = runtime::random_bindings(g, 1);
  RunStats rs;
  expect_same(runtime::interpret(g, vars), exe.run(vars, &rs));
  // Twelve values, but a chain needs at most two live buffers at a time (plus the output).
  EXPECT_LE(rs.peak_bytes, 3 * 4096 * 4 + 3 * 128);
  EXPECT_EQ(Executable::compile(g).compile_stats().kernels, 1);
}

TEST(Executor, NonfiniteFlagSeesInputsAndRoundedOutputs) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {100}});
  b.output(b.op("amp_cast", {b.op("_mul_scalar", {x}, {{"scalar", "2"}})}, {{"dtype", "float16"}}));
  const ir::Graph g = b.finish();
  ExecutorOptions opts;
  opts.check_nonfinite = true;
  const Executable exe = Executable::compile(g, opts);
  Tensor t({DType::f32, {100}});
  for (int64_t i = 0; i < 100; ++i) t.set_f64(i, 0.5 * static_cast<double>(i));
  RunStats rs;
  exe.run({{"x", t}}, &rs);
  EXPECT_FALSE(rs.nonfinite);
  t.set_f64(99, 40000);  // 80000 overflows f16: the stored output is +Inf
  exe.run({{"x", t}}, &rs);
  EXPECT_TRUE(rs.nonfinite);
  t.set_f64(99, 1);
  t.set_f64(0, NAN);
  exe.run({{"x", t}}, &rs);
  EXPECT_TRUE(rs.nonfinite);
}

// MXNet #19318: its fused amp_multicast read every input with the first input's size. Here
// inputs of very different sizes meet in one kernel and in amp_multicast; ASan (make test's
// second build) reports any read past a buffer.
TEST(Executor, InputsOfDifferentSizesAreReadInBounds) {
  ir::GraphBuilder b;
  const ValueRef big = b.input("big", {DType::f16, {3, 1000}});
  const ValueRef small = b.input("small", {DType::f32, {1, 1}});
  const ValueRef mid = b.input("mid", {DType::bf16, {1000}});
  const std::vector<ValueRef> cast = b.op_multi("amp_multicast", {big, small, mid}, {{"num_outputs", "3"}});
  const ValueRef s = b.op("broadcast_add", {cast[0], cast[1]});
  b.output(b.op("broadcast_mul", {s, cast[2]}));
  b.output(cast[1]);
  const ir::Graph g = b.finish();
  const Executable exe = Executable::compile(g);
  const runtime::Bindings vars = runtime::random_bindings(g, 3);
  expect_same(runtime::interpret(g, vars), exe.run(vars));
}

TEST(Executor, CastAndTransposeAreOnePass) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {2, 16, 7, 9}});
  const ValueRef c = b.op("amp_cast", {x}, {{"dtype", "bfloat16"}});
  b.output(b.op("transpose", {c}, {{"axes", "(0,2,3,1)"}}));
  const ir::Graph g = b.finish();
  const Executable exe = Executable::compile(g);
  EXPECT_EQ(exe.compile_stats().kernels, 1);
  ASSERT_EQ(exe.kernel_specs().size(), 1u);
  EXPECT_EQ(exe.kernel_specs()[0]->inputs.size(), 1u);
  EXPECT_EQ(exe.kernel_specs()[0]->outputs.size(), 1u);
  const runtime::Bindings vars = runtime::random_bindings(g, 5);
  expect_same(runtime::interpret(g, vars), exe.run(vars));
}

TEST(Executor, ViewsAliasAndGraphOutputsSurvive) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {6, 4}});
  const ValueRef r = b.op("Activation", {x}, {{"act_type", "relu"}});
  const ValueRef flat = b.op("Reshape", {r}, {{"shape", "(24,)"}});
  const ValueRef y = b.op("_mul_scalar", {flat}, {{"scalar", "3"}});
  b.output(y);
  b.output(flat);
  const ir::Graph g = b.finish();
  const runtime::Bindings vars = runtime::random_bindings(g, 9);
  expect_same(runtime::interpret(g, vars), Executable::compile(g).run(vars));
}

TEST(Executor, KernelsTooDeepForCodegenFallBackAndSayWhy) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {2, 1, 2, 1, 2, 1, 2, 1, 3}});
  b.output(b.op("_mul_scalar", {x}, {{"scalar", "2"}}));
  const ir::Graph g = b.finish();
  const Executable exe = Executable::compile(g);
  ASSERT_EQ(exe.compile_stats().fallbacks.size(), 1u);
  EXPECT_NE(exe.compile_stats().fallbacks[0].find("rank 9"), std::string::npos) << exe.compile_stats().fallbacks[0];
  const runtime::Bindings vars = runtime::random_bindings(g, 2);
  expect_same(runtime::interpret(g, vars), exe.run(vars));
}

TEST(Executor, BadBindingsNameTheVariable) {
  const ir::Graph g = amp_chain(2);
  const Executable exe = Executable::compile(g);
  runtime::Bindings vars = runtime::random_bindings(g, 1);
  vars.erase("w");
  EXPECT_ERROR(exe.run(vars), "variable 'w' is not bound");
  vars = runtime::random_bindings(g, 1);
  vars["x"] = Tensor({DType::f32, {3, 8, 5}});
  EXPECT_ERROR(exe.run(vars), "variable 'x' is bound to f32[3,8,5] but the graph needs f32[2,8,5]");
}

TEST(Executor, LargeTensorsSplitAcrossThreadsEqualTheInterpreter) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::bf16, {(1 << 20) + 3}});
  const ValueRef y = b.input("y", {DType::f32, {(1 << 20) + 3}});
  const ValueRef s = b.op("broadcast_sub", {b.op("amp_cast", {x}, {{"dtype", "float32"}}), y});
  b.output(b.op("amp_cast", {b.op("clip", {s}, {{"a_min", "-0.3"}, {"a_max", "0.2"}})}, {{"dtype", "float16"}}));
  const ir::Graph g = b.finish();
  EXPECT_TRUE(compare_fused_with_interpreter(g, 11, 0).ok);
}

// constant_params: a step that reads params only (here the doubled weight, fed to an
// external op so that it cannot fuse with x) runs on the first run and again only when a
// param is bound to another buffer.
TEST(Executor, ConstantParamStepsRunOnceAndFollowRebinding) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[3,8]
    %w = var param : f32[4,8]
    %w2 = _mul_scalar(%w) {scalar=2}
    %y = FullyConnected(%x, %w2) {num_hidden=4, no_bias=true}
    return %y
  })");
  ir::infer_types(g);
  ExecutorOptions opts;
  opts.constant_params = true;
  const Executable exe = Executable::compile(g, opts);
  EXPECT_EQ(exe.compile_stats().constant_steps, 1);
  EXPECT_EQ(Executable::compile(g).compile_stats().constant_steps, 0);  // off by default

  runtime::Bindings vars = runtime::random_bindings(g, 1);
  RunStats rs;
  std::vector<Tensor> first = exe.run(vars, &rs);
  EXPECT_FALSE(rs.reused_constants);
  expect_near(runtime::interpret(g, vars), first, 1e-6);

  std::vector<Tensor> again = exe.run(vars, &rs);
  EXPECT_TRUE(rs.reused_constants);
  expect_same(first, again);

  vars["x"] = runtime::random_bindings(g, 2).at("x");  // a new input: constants still hold
  again = exe.run(vars, &rs);
  EXPECT_TRUE(rs.reused_constants);
  expect_near(runtime::interpret(g, vars), again, 1e-6);

  vars["w"] = runtime::random_bindings(g, 3).at("w");  // a new weight buffer: recomputed
  again = exe.run(vars, &rs);
  EXPECT_FALSE(rs.reused_constants);
  expect_near(runtime::interpret(g, vars), again, 1e-6);
}

// Convolution weights reordered by oneDNN are kept per node while the same buffer is bound,
// and replaced when another is (channels-last convolutions want blocked weights).
TEST(Executor, ReorderedConvolutionWeightsFollowRebinding) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[1,9,9,16]
    %w = var param : f32[16,3,3,16]
    %y = Convolution(%x, %w) {kernel=[3,3], num_filter=16, no_bias=true, layout="NHWC"}
    return %y
  })");
  ir::infer_types(g);
  ExecutorOptions opts;
  opts.constant_params = true;
  const Executable exe = Executable::compile(g, opts);
  runtime::Bindings vars = runtime::random_bindings(g, 1);
  for (uint64_t seed : {2, 3}) {
    expect_near(runtime::interpret(g, vars), exe.run(vars), 1e-5);
    expect_near(runtime::interpret(g, vars), exe.run(vars), 1e-5);
    vars["w"] = runtime::random_bindings(g, seed).at("w");
  }
}

}  // namespace
}  // namespace ampfuse::engine
