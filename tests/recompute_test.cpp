// recompute_in_readers (engine/planning/recompute.h) on textual plans: which stored values
// become recomputed in their readers and which stay stored (a graph output, a transcendental
// or random chain, a chain of variables only, more bytes to load than to store, a broadcast
// read); and a backward graph run with and without it, bit for bit the interpreter's.
#include "engine/execution/executor.h"
#include "engine/lower.h"
#include "engine/planning/recompute.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "tests/filecheck.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace ampfuse::engine {
namespace {

struct Recomputed {
  std::string plan;
  RecomputeStats stats;
};

Recomputed recompute(const std::string& ir) {
  ir::Graph g = ir::parse_graph(ir);
  ir::infer_types(g);
  const PlannerOptions opts;
  Plan plan = plan_fusion(g, opts);
  const RecomputeStats stats = recompute_in_readers(g, plan, opts);
  return {print_plan(g, plan), stats};
}

// %b is read by kernel 1, which cannot join kernel 0 (it reads %w, computed from kernel 0's
// %t): storing %b moves 2 x 128 bytes, loading %u and %bias in kernel 1 moves 128 + 32.
TEST(Recompute, InnerValueReadByALaterKernelIsComputedThere) {
  const Recomputed r = recompute(R"(graph {
    %x = var input : f32[4,8]
    %bias = var input : f32[8]
    %u = softmax(%x) {axis=-1}
    %b = broadcast_add(%u, %bias)
    %t = relu(%b)
    %w = softmax(%t) {axis=-1}
    %r = elemwise_mul(%b, %w)
    return %t, %r
  })");
  EXPECT_FILECHECK(r.plan, R"(
    CHECK: external %u=softmax
    CHECK-NEXT: kernel 0 [4,8] nodes: %b=broadcast_add %t=relu  in: %u %bias(mapped)  out: %t  bytes: 288
    CHECK-NOT: recomputed
    CHECK-NEXT: external %w=softmax
    CHECK-NEXT: kernel 1 [4,8] nodes: %b=broadcast_add %r=elemwise_mul  in: %u %bias(mapped) %w  out: %r
    CHECK-SAME: recomputed: %b)");
  EXPECT_EQ(r.stats.values, 1);
  EXPECT_EQ(r.stats.bytes_not_moved, 2 * 128 - (128 + 32));
}

// Both later readers compute %b: 2 x 128 loaded of %u against 128 + 2 x 128 stored and loaded.
TEST(Recompute, EveryReaderComputesTheValue) {
  const Recomputed r = recompute(R"(graph {
    %x = var input : f32[4,8]
    %u = softmax(%x) {axis=-1}
    %b = _mul_scalar(%u) {scalar=2}
    %t = relu(%b)
    %w = softmax(%t) {axis=-1}
    %r = elemwise_mul(%b, %w)
    %v = softmax(%r) {axis=-1}
    %z = elemwise_add(%b, %v)
    return %t, %z
  })");
  EXPECT_FILECHECK(r.plan, R"(
    CHECK: kernel 0 [4,8] nodes: %b=_mul_scalar %t=relu  in: %u  out: %t  bytes: 256
    CHECK: kernel 1 [4,8] nodes: %b=_mul_scalar %r=elemwise_mul  in: %u %w  out: %r
    CHECK-SAME: recomputed: %b
    CHECK: kernel 2 [4,8] nodes: %b=_mul_scalar %z=elemwise_add  in: %u %v  out: %z
    CHECK-SAME: recomputed: %b)");
  EXPECT_EQ(r.stats.values, 1);
  EXPECT_EQ(r.stats.bytes_not_moved, 3 * 128 - 2 * 128);
}

TEST(Recompute, GraphOutputsTranscendentalsAndVariablesOnlyStayStored) {
  for (const char* chain : {"%b = exp(%u)", "%b = broadcast_add(%x, %x)", "%b = _Dropout_train(%u) {p=0.5, seed=3}"}) {
    const Recomputed r = recompute(fmt::format(R"(graph {{
      %x = var input : f32[4,8]
      %u = softmax(%x) {{axis=-1}}
      {}
      %t = relu(%b)
      %w = softmax(%t) {{axis=-1}}
      %r = elemwise_mul(%b, %w)
      return %t, %r
    }})",
                                               chain));
    EXPECT_EQ(r.stats.values, 0) << chain << "\n" << r.plan;
  }
  const Recomputed output = recompute(R"(graph {
    %x = var input : f32[4,8]
    %u = softmax(%x) {axis=-1}
    %b = _mul_scalar(%u) {scalar=2}
    %t = relu(%b)
    %w = softmax(%t) {axis=-1}
    %r = elemwise_mul(%b, %w)
    return %b, %r
  })");
  EXPECT_EQ(output.stats.values, 0) << output.plan;
}

// Recomputing a bf16 cast of an f32 value would load 4 bytes per element to save 2 + 2: no gain.
TEST(Recompute, MoreBytesToLoadThanToStoreStaysStored) {
  const Recomputed r = recompute(R"(graph {
    %x = var input : f32[4,8]
    %u = softmax(%x) {axis=-1}
    %b = amp_cast(%u) {dtype=bf16}
    %t = relu(%b)
    %w = softmax(%t) {axis=-1}
    %r = elemwise_mul(%b, %w)
    return %t, %r
  })");
  EXPECT_EQ(r.stats.values, 0) << r.plan;
  EXPECT_FILECHECK(r.plan, R"(
    CHECK: kernel 0 [4,8] nodes: %b=amp_cast %t=relu  in: %u  out: %b %t
    CHECK-NOT: recomputed)");
}

// Kernel 1 reads %b broadcast along a new axis: %b's nodes cannot run at its points.
TEST(Recompute, BroadcastReadStaysStored) {
  const Recomputed r = recompute(R"(graph {
    %x = var input : f32[8]
    %y = var input : f32[3,8]
    %u = softmax(%x) {axis=-1}
    %b = _mul_scalar(%u) {scalar=2}
    %t = relu(%b)
    %w = softmax(%y) {axis=-1}
    %r = broadcast_mul(%b, %w)
    return %t, %r
  })");
  EXPECT_EQ(r.stats.values, 0) << r.plan;
}

// relu's derivative reads %s, which the forward kernel computes on its way to %a: with
// recompute the backward kernel computes %s again from %h and %w instead of loading it.
TEST(Recompute, BackwardRunsBitForBitWithAndWithout) {
  const ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[5,7]
    %w = var param : f32[7]
    %h = softmax(%x) {axis=-1}
    %s = broadcast_mul(%h, %w)
    %a = relu(%s)
    %y = softmax(%a) {axis=-1}
    return %y
  })");
  ExecutorOptions opts;
  opts.use_onednn = false;  // every external op on the reference: bit for bit
  opts.backward = BackwardOptions{};
  const Executable with = Executable::compile(g, opts);
  opts.recompute = false;
  const Executable without = Executable::compile(g, opts);
  EXPECT_GE(with.compile_stats().recomputed.values, 1);
  EXPECT_EQ(without.compile_stats().recomputed.values, 0);
  EXPECT_LT(with.compile_stats().saved_bytes, without.compile_stats().saved_bytes);
  EXPECT_GT(with.compile_stats().saved_values, 0);
  opts.recompute = true;
  opts.fuse = false;  // the unfused path stays one op a kernel
  EXPECT_EQ(Executable::compile(g, opts).compile_stats().recomputed.values, 0);

  const BackwardGraph bg = build_backward(g);
  const runtime::Bindings vars = runtime::random_bindings(bg.graph, 5);
  const std::vector<runtime::Tensor> want = runtime::interpret(bg.graph, vars);
  for (const Executable* exe : {&with, &without}) {
    const std::vector<runtime::Tensor> got = exe->run(vars);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k)
      for (int64_t i = 0; i < want[k].size(); ++i)
        ASSERT_EQ(got[k].get_f64(i), want[k].get_f64(i)) << "output " << k << " element " << i;
  }
}

}  // namespace
}  // namespace ampfuse::engine
