// The executor (engine/execution/executor.h) on the CPU: plans run fused, equal to the
// interpreter, with kernels cached across sizes; the static memory plan (slots reused, kernels
// in place, no allocation after the first run, output buffers handed back and reused); runs
// from several threads at once; the non-finite flag, views, constant params, fallbacks and
// strict mode.
#include "fuzz/differential.h"
#include "engine/execution/executor.h"
#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/device_api.h"
#include "runtime/kernel_cache.h"
#include "runtime/onednn/onednn_ops.h"
#include "tests/test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

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
  expect_same(runtime::interpret(g, vars), exe.run(vars));
  // Eleven intermediates (the last value is the output), each kernel writing over its input.
  EXPECT_EQ(exe.compile_stats().intermediate_bytes, 11 * 4096 * 4);
  EXPECT_EQ(exe.compile_stats().arena_bytes, 4096 * 4);
  EXPECT_EQ(exe.compile_stats().in_place, 10);
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

// A kernel without code is an error in strict mode (AMPFUSE_STRICT=1, as every test runs),
// else it runs on the interpreter after one warning naming the node and the reason.
TEST(Executor, KernelsTooDeepForCodegenFailInStrictModeOrFallBackAndSayWhy) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {2, 1, 2, 1, 2, 1, 2, 1, 3}});
  b.output(b.op("_mul_scalar", {b.op("negative", {x})}, {{"scalar", "2"}}));
  const ir::Graph g = b.finish();
  ExecutorOptions opts;
  opts.strict = true;
  EXPECT_ERROR(Executable::compile(g, opts), "kernel k0__mul_scalar (node '_mul_scalar0' (_mul_scalar)): ");
  opts.strict = false;
  ::testing::internal::CaptureStderr();
  const Executable exe = Executable::compile(g, opts);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("ampfuse: warning: kernel k0__mul_scalar (node '_mul_scalar0' (_mul_scalar)): "), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("its 2 nodes run on the reference interpreter"), std::string::npos) << warning;
  ASSERT_EQ(exe.compile_stats().fallbacks.size(), 1u);
  EXPECT_NE(exe.compile_stats().fallbacks[0].find("rank 9"), std::string::npos) << exe.compile_stats().fallbacks[0];
  const runtime::Bindings vars = runtime::random_bindings(g, 2);
  expect_same(runtime::interpret(g, vars), exe.run(vars));
}

TEST(Executor, StrictModeComesFromTheEnvironment) {
  const char* before = std::getenv("AMPFUSE_STRICT");
  const std::string saved = before ? before : "";
  setenv("AMPFUSE_STRICT", "1", 1);
  EXPECT_TRUE(strict_from_environment());
  setenv("AMPFUSE_STRICT", "0", 1);
  EXPECT_FALSE(strict_from_environment());
  setenv("AMPFUSE_STRICT", "yes", 1);
  EXPECT_ERROR(strict_from_environment(), "AMPFUSE_STRICT='yes': expected 1");
  unsetenv("AMPFUSE_STRICT");
  EXPECT_FALSE(strict_from_environment());
  if (before) setenv("AMPFUSE_STRICT", saved.c_str(), 1);
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
// param is bound to another buffer, or after forget_constants().
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

  // Written in place (same buffer, as a framework's optimizer does): the executable cannot
  // see it, and keeps the doubled weight of before, until forget_constants().
  const std::vector<Tensor> before = again;
  float* w = vars["w"].data<float>();
  for (int64_t i = 0; i < vars["w"].size(); ++i) w[i] = -3 * w[i] + 0.25f;
  again = exe.run(vars, &rs);
  EXPECT_TRUE(rs.reused_constants);
  expect_same(before, again);
  exe.forget_constants();
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

// Convolution nets compiled from four threads at once: each compile makes its oneDNN
// primitives on threads of its own (runtime::OnednnPrefetch) while other compiles make theirs,
// each primitive once however many compiles want it, and every executable computes what the
// interpreter does.
TEST(ExecutorThreads, ConvolutionNetsCompiledFromFourThreadsAtOnce) {
  // Threads 0 and 1 compile the same net, 2 and 3 each one of their own: input sizes no
  // other test uses, so that every primitive is made here.
  const auto net = [](int t) {
    const int side = 37 + 2 * std::max(t, 1);
    ir::Graph g = ir::parse_graph(fmt::format(R"(graph {{
      %x = var input : f32[1,8,{0},{0}]
      %w = var param : f32[24,8,3,3]
      %c = Convolution(%x, %w) {{kernel=[3,3], num_filter=24, no_bias=true, pad=[1,1]}}
      %r = Activation(%c) {{act_type="relu"}}
      %p = Pooling(%r) {{kernel=[3,3], stride=[2,2], pool_type="max"}}
      %v = var param : f32[16,24,1,1]
      %d = Convolution(%p, %v) {{kernel=[1,1], num_filter=16, no_bias=true}}
      %u = var param : f32[16,16,3,3]
      %e = Convolution(%d, %u) {{kernel=[3,3], num_filter=16, no_bias=true, pad=[1,1]}}
      return %e
    }})", side));
    ir::infer_types(g);
    return g;
  };
  // Compiled first, all four at once, and counted before any run: a run that goes solo (a
  // loaded machine) makes one-thread primitives of its own.
  const size_t created_before = runtime::onednn_primitives_created();
  std::vector<ir::Graph> graphs;
  for (int t = 0; t < 4; ++t) graphs.push_back(net(t));
  std::vector<std::optional<Executable>> exes(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      ExecutorOptions opts;
      opts.layout = "keep";
      exes[t].emplace(Executable::compile(graphs[t], opts));
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(runtime::onednn_primitives_created() - created_before, 3 * 4)
      << "three nets of four primitives each (three convolutions, one pooling), each made once";
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(exes[t]->compile_stats().onednn_ops, 4) << t;
    const runtime::Bindings vars = runtime::random_bindings(graphs[t], 6 + t);
    const std::vector<Tensor> want = runtime::interpret(graphs[t], vars);
    expect_near(want, exes[t]->run(vars), 1e-5);
  }
}

}  // namespace
}  // namespace ampfuse::engine

namespace ampfuse::engine {
namespace {

// A model-shaped graph: elementwise chains between external ops, a view, two outputs.
ir::Graph small_network() {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[8,64]
    %w1 = var param : f32[32,64]
    %w2 = var param : f32[16,32]
    %h = FullyConnected(%x, %w1) {num_hidden=32, no_bias=true}
    %a = Activation(%h) {act_type="relu"}
    %s = _mul_scalar(%a) {scalar=0.5}
    %f = FullyConnected(%s, %w2) {num_hidden=16, no_bias=true}
    %t = tanh(%f)
    %r = Reshape(%t) {shape=[128]}
    %o = _plus_scalar(%r) {scalar=1}
    return %o, %s
  })");
  ir::infer_types(g);
  return g;
}

// The memory plan is static: the first run allocates the arena (one device allocation,
// pre-faulted) and the output buffers; a later run, once the caller let go of the
// outputs, allocates nothing at all.
TEST(ExecutorMemory, ASecondRunAllocatesNothing) {
  const ir::Graph g = small_network();
  runtime::CpuDevice device;
  ExecutorOptions opts;
  opts.device = &device;
  const Executable exe = Executable::compile(g, opts);
  const runtime::Bindings vars = runtime::random_bindings(g, 1);
  RunStats rs;
  std::vector<Tensor> first = exe.run(vars, &rs);
  EXPECT_EQ(device.allocations(), 1) << "one arena";
  EXPECT_EQ(rs.allocations, 3) << "the arena and two output buffers";
  const std::vector<Tensor> want = runtime::interpret(g, vars);
  expect_near(want, first, 1e-6);
  first.clear();

  const int64_t tensors_before = runtime::tensor_buffer_allocations();
  std::vector<Tensor> second = exe.run(vars, &rs);
  EXPECT_EQ(rs.allocations, 0);
  EXPECT_EQ(device.allocations(), 1);
  EXPECT_EQ(runtime::tensor_buffer_allocations(), tensors_before);
  expect_near(want, second, 1e-6);

  // Outputs the caller still holds are never overwritten: that run gets new buffers.
  std::vector<Tensor> third = exe.run(vars, &rs);
  EXPECT_EQ(rs.allocations, 2);
  EXPECT_NE(third[0].raw(), second[0].raw());
  expect_same(second, third);
}

// The arena holds less than all intermediates together: values that are never live at the
// same time share bytes.
TEST(ExecutorMemory, SlotsOfDeadValuesAreReused) {
  const ir::Graph g = small_network();
  const Executable exe = Executable::compile(g);
  const CompileStats& st = exe.compile_stats();
  EXPECT_GT(st.intermediate_bytes, 0);
  EXPECT_LT(st.arena_bytes, st.intermediate_bytes);
  const MemoryPlan& m = exe.memory_plan();
  // Every slot lies inside the arena, and two values that are live at the same step never
  // share a byte.
  std::vector<const BufferValue*> slotted;
  for (const BufferValue& b : m.buffers)
    if (b.slot[0] >= 0 && b.bytes > 0) slotted.push_back(&b);
  for (const BufferValue* a : slotted) {
    EXPECT_LE(a->slot[0] + a->bytes, m.arena_bytes[0]);
    for (const BufferValue* b : slotted) {
      if (a == b || a->in_place_of >= 0 || b->in_place_of >= 0) continue;
      const bool overlap_time = a->live[0].first <= b->live[0].second && b->live[0].first <= a->live[0].second;
      const bool overlap_bytes = a->slot[0] < b->slot[0] + b->bytes && b->slot[0] < a->slot[0] + a->bytes;
      EXPECT_FALSE(overlap_time && overlap_bytes);
    }
  }
}

// Only a dead input read element for element like the output, of the same element size,
// is written over.
TEST(ExecutorMemory, KernelsWriteInPlaceOnlyWhereEachElementIsReadFirst) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[64,64]
    %w = var param : f32[64,64]
    %m = FullyConnected(%x, %w) {num_hidden=64, no_bias=true}
    %t = transpose(%m) {axes=[1,0]}
    %a = broadcast_add(%t, %m)
    %c = amp_cast(%a) {dtype=bf16}
    %n = FullyConnected(%c, %c) {num_hidden=64, no_bias=true}
    %o = negative(%n)
    %p = FullyConnected(%o, %o) {num_hidden=64, no_bias=true}
    return %p
  })");
  ir::infer_types(g);
  // Without oneDNN's native bf16 (AVX2, or ONEDNN_MAX_CPU_ISA=AVX2) compute_in_f32 would
  // widen n's inputs and narrow its output in graph casts, another graph than the one
  // this test is about: oneDNN widens inside the primitive instead.
  ExecutorOptions eo;
  eo.compute_in_f32 = false;
  const Executable exe = Executable::compile(g, eo);
  const MemoryPlan& m = exe.memory_plan();
  const auto in_place = [&](const char* name) {
    for (size_t n = 0; n < exe.graph().nodes.size(); ++n)
      if (exe.graph().nodes[n].name == name) return m.buffers[m.id({static_cast<int32_t>(n), 0})].in_place_of >= 0;
    ADD_FAILURE() << name;
    return false;
  };
  EXPECT_FALSE(in_place("c")) << "m is read transposed too, and bf16 is narrower than f32";
  EXPECT_TRUE(in_place("o")) << "n is dead after o and read element for element";
  EXPECT_EQ(exe.compile_stats().in_place, 1);
  const runtime::Bindings vars = runtime::random_bindings(g, 4);
  expect_near(runtime::interpret(g, vars), exe.run(vars), 1e-2);
}

// run() from several threads at once: each run takes a context of its own; constants are
// computed once for all of them.
TEST(ExecutorThreads, RunsFromFourThreadsAtOnceGiveTheSameResults) {
  const ir::Graph g = small_network();
  ExecutorOptions opts;
  opts.constant_params = true;
  const Executable exe = Executable::compile(g, opts);
  const runtime::Bindings vars = runtime::random_bindings(g, 5);
  const std::vector<Tensor> want = Executable::compile(g).run(vars);
  std::atomic<int> computed_constants{0}, mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int r = 0; r < 25; ++r) {
        RunStats rs;
        const std::vector<Tensor> got = exe.run(vars, &rs);
        computed_constants += !rs.reused_constants;
        for (size_t k = 0; k < got.size(); ++k)
          if (std::memcmp(got[k].raw(), want[k].raw(), got[k].bytes()) != 0) ++mismatches;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(computed_constants.load(), 1);
}

// oneDNN primitives made by the compiling thread run on other threads, each run on a
// thread of its own that never compiled anything (as a framework's worker threads call
// it). oneDNN's library-managed scratchpad is per thread and made with the primitive, so
// a convolution that needs one crashed here; the primitives take their scratchpad from
// the caller (runtime/onednn/onednn_ops.cpp).
TEST(ExecutorThreads, PrimitivesRunOnThreadsThatDidNotCreateThem) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[2,16,31,31]
    %w = var param : f32[32,16,3,3]
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=32, no_bias=true, pad=[1,1]}
    %p = Pooling(%c) {kernel=[3,3], stride=[2,2], pool_type="max"}
    %v = var param : f32[8,32,1,1]
    %d = Convolution(%p, %v) {kernel=[1,1], num_filter=8, no_bias=true}
    return %d
  })");
  ir::infer_types(g);
  const Executable exe = Executable::compile(g);
  const runtime::Bindings vars = runtime::random_bindings(g, 6);
  const std::vector<Tensor> want = runtime::interpret(g, vars);
  for (int t = 0; t < 3; ++t) {
    std::vector<Tensor> got;
    std::thread([&] { got = exe.run(vars); }).join();
    expect_near(want, got, 1e-5);
  }
}

// Compile statistics are the compiling executable's own, also when other threads compile
// into the same cache at the same time.
TEST(ExecutorThreads, CompileStatisticsBelongToTheirExecutable) {
  runtime::KernelCache cache;
  ExecutorOptions opts;
  opts.cache = &cache;
  std::vector<std::thread> threads;
  std::vector<int> compiled(4), hits(4), kernels(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      // Threads 0 and 1 compile the same graph, 2 and 3 each one of their own.
      ir::GraphBuilder b;
      ValueRef v = b.input("x", {DType::f32, {64}});
      for (int k = 0; k <= std::max(t, 1); ++k) v = b.op(k % 2 ? "tanh" : "negative", {v});
      b.output(v);
      ExecutorOptions o = opts;
      o.fuse = false;
      const Executable exe = Executable::compile(b.finish(), o);
      compiled[t] = exe.compile_stats().compilations;
      hits[t] = exe.compile_stats().cache_hits;
      kernels[t] = exe.compile_stats().kernels;
    });
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(compiled[t] + hits[t], kernels[t]) << t;
  EXPECT_EQ(compiled[0] + compiled[1] + compiled[2] + compiled[3], cache.stats().compilations);
  EXPECT_EQ(cache.stats().compilations, 2) << "negative and tanh on f32[64], each compiled once";
}

}  // namespace
}  // namespace ampfuse::engine
