// Checks of the executor (engine/execution/executor.h) on a device, shared by the emulated
// device's tests (tests/device_executor_test.cpp, every build) and the GPU's
// (tests/cuda_device_test.cpp): small graphs that exercise views, slices, broadcasts,
// host round trips, variables as outputs and empty tensors, the default model and the
// differential fuzzer's graphs, each run on a device and compared with the reference
// interpreter.
#pragma once

#include "models/default_model.h"
#include "fuzz/differential.h"
#include "engine/execution/executor.h"
#include "fuzz/random_graph.h"
#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace ampfuse::testing::device {

using ir::DType;
using ir::ValueRef;
using runtime::Tensor;

// The differential fuzzer's inputs (fuzz/differential.h): random values with special ones
// planted.
inline runtime::Bindings planted_bindings(const ir::Graph& g, uint64_t seed) { return fuzz::differential_inputs(g, seed); }

// fuzz::same_element's tolerance, or within a fraction of each output's largest |value|.
struct Tolerance {
  bool free_zero_sign = false;  // a kernel holds max/min, whose zero sign is free
  int ulps = 0;                 // 0: bit for bit (NaNs of any payload equal)
  double epsilon = 0;           // with ulps: or within ulps * epsilon relative to the value
  // Else within this fraction of the largest |value| of the output (external ops: oneDNN
  // sums in its own order).
  double of_largest = 0;
};

inline ::testing::AssertionResult same_outputs(const std::vector<Tensor>& want, const std::vector<Tensor>& got,
                                               const Tolerance& tol = {}) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << got.size() << " outputs, want " << want.size();
  for (size_t k = 0; k < want.size(); ++k) {
    if (want[k].type() != got[k].type())
      return ::testing::AssertionFailure() << "output " << k << " is " << ir::type_str(got[k].type()) << ", want "
                                           << ir::type_str(want[k].type());
    double largest = 0;
    for (int64_t i = 0; i < want[k].size(); ++i)
      if (std::isfinite(want[k].get_f64(i))) largest = std::max(largest, std::fabs(want[k].get_f64(i)));
    for (int64_t i = 0; i < want[k].size(); ++i) {
      if (fuzz::same_element(want[k], got[k], i, tol.ulps, tol.epsilon, tol.free_zero_sign)) continue;
      const double x = want[k].get_f64(i), y = got[k].get_f64(i);
      if (tol.of_largest > 0 && std::isfinite(x) && std::isfinite(y) && std::fabs(x - y) <= tol.of_largest * largest)
        continue;
      return ::testing::AssertionFailure() << "output " << k << " (" << ir::type_str(want[k].type()) << ") element "
                                           << i << ": got " << y << ", want " << x;
    }
  }
  return ::testing::AssertionSuccess();
}

inline ir::Graph parsed(const char* text) {
  ir::Graph g = ir::parse_graph(text);
  ir::infer_types(g);
  return g;
}

struct NamedGraph {
  std::string name;
  ir::Graph graph;
  // Without external ops the device must equal the interpreter bit for bit, special values
  // included. External ops (oneDNN) get finite inputs and a tolerance.
  bool exact = true;
  bool falls_back = false;  // has a kernel without code on purpose (compile it not strict)
};

// Small graphs, each aimed at one way the device path can go wrong.
inline std::vector<NamedGraph> device_graphs() {
  std::vector<NamedGraph> graphs;
  // Broadcast loads (stride 0) and an AMP cast chain in one kernel.
  graphs.emplace_back("broadcasts", parsed(R"(graph {
    %x = var input : f32[3,8,5]
    %w = var param : bf16[8,5]
    %b = var param : bf16[1,1,5]
    %xl = amp_cast(%x) {dtype=bf16}
    %m = broadcast_mul(%xl, %w)
    %a = broadcast_add(%m, %b)
    %r = Activation(%a) {act_type="relu"}
    %y = amp_cast(%r) {dtype=f32}
    return %y
  })"));
  // A view of a device value is a graph output and the input of a later kernel.
  graphs.emplace_back("views", parsed(R"(graph {
    %x = var input : f32[6,4]
    %r = Activation(%x) {act_type="relu"}
    %flat = Reshape(%r) {shape=[24]}
    %y = _mul_scalar(%flat) {scalar=3}
    %e = expand_dims(%y) {axis=0}
    %z = _plus_scalar(%e) {scalar=1}
    return %y, %flat, %z
  })"));
  // Slices start inside their input's buffer: the kernels get offset device pointers, also
  // into a buffer the device computed (u is an output, so it is not fused away).
  graphs.emplace_back("slices", parsed(R"(graph {
    %x = var input : f16[6,10]
    %a = slice_axis(%x) {axis=1, begin=3, end=9}
    %b = slice(%x) {begin=[1,2], end=[5,10], step=[2,3]}
    %u = _mul_scalar(%x) {scalar=2}
    %v = FullyConnected(%u, %x) {num_hidden=6, no_bias=true, flatten=false}
    %c = slice_axis(%u) {axis=0, begin=2, end=5}
    %d = broadcast_add(%c, %c)
    return %a, %b, %u, %v, %d
  })"), false);
  // Host round trips: a device value feeds oneDNN ops on the host, whose outputs a kernel
  // reads again; the first FullyConnected's output is also a graph output. The two
  // FullyConnected in a row stay on the host.
  graphs.emplace_back("round_trips", parsed(R"(graph {
    %x = var input : f32[4,8]
    %w = var param : f32[8,8]
    %w2 = var param : f32[8,8]
    %a = Activation(%x) {act_type="relu"}
    %f = FullyConnected(%a, %w) {num_hidden=8, no_bias=true}
    %g = FullyConnected(%f, %w2) {num_hidden=8, no_bias=true}
    %c = broadcast_add(%a, %g)
    %s = softmax(%c) {axis=-1}
    %t = _mul_scalar(%s) {scalar=0.5}
    return %t, %f, %c
  })"), false);
  // Graph outputs that are variables: one the device reads, one only the host reads.
  graphs.emplace_back("variable_outputs", parsed(R"(graph {
    %x = var input : f32[5,3]
    %w = var param : f32[2,3]
    %y = _mul_scalar(%x) {scalar=3}
    %f = FullyConnected(%y, %w) {num_hidden=2, no_bias=true}
    return %x, %f, %w, %y
  })"), false);
  // Empty tensors: kernels without elements launch nothing and get no device memory.
  graphs.emplace_back("zero_size", parsed(R"(graph {
    %x = var input : f32[0,5]
    %y = var input : bf16[3]
    %r = Activation(%x) {act_type="relu"}
    %z = _mul_scalar(%r) {scalar=2}
    %v = expand_dims(%z) {axis=0}
    %c = amp_cast(%y) {dtype=f32}
    %n = negative(%c)
    return %z, %v, %n, %x
  })"));
  // Outputs of one multi-output node of different sizes, one of them a graph output that a
  // later kernel reads as well.
  {
    ir::GraphBuilder b;
    const ValueRef big = b.input("big", {DType::f16, {3, 1000}});
    const ValueRef small = b.input("small", {DType::f32, {1, 1}});
    const ValueRef mid = b.input("mid", {DType::bf16, {1000}});
    const std::vector<ValueRef> cast = b.op_multi("amp_multicast", {big, small, mid}, {{"num_outputs", "3"}});
    const ValueRef s = b.op("broadcast_add", {cast[0], cast[1]});
    b.output(b.op("broadcast_mul", {s, cast[2]}));
    b.output(cast[1]);
    b.output(b.op("transpose", {b.op("amp_cast", {s}, {{"dtype", "bfloat16"}})}, {{"axes", "(1,0)"}}));
    graphs.emplace_back("multicast_transpose", b.finish());
  }
  // A kernel of rank 9 (no code: the host's interpreter) between two device kernels.
  graphs.emplace_back("host_kernel_between_device_kernels", parsed(R"(graph {
    %x = var input : f32[16,3]
    %a = _plus_scalar(%x) {scalar=1}
    %r = Reshape(%a) {shape=[2,1,2,1,2,1,2,1,3]}
    %m = _mul_scalar(%r) {scalar=2}
    %back = Reshape(%m) {shape=[16,3]}
    %y = broadcast_sub(%back, %x)
    return %y
  })"), true, true);
  return graphs;
}

// Runs `g` on `device` and on the interpreter with the same random inputs, special values
// planted when `exact`, else compared within 1e-5 of each output's largest |value|.
inline ::testing::AssertionResult device_matches_interpreter(const ir::Graph& g, runtime::DeviceApi& device,
                                                             uint64_t seed, Tolerance tol = {}, bool exact = true,
                                                             engine::ExecutorOptions opts = {}) {
  try {
    opts.device = &device;
    if (!exact) tol.of_largest = 1e-5;
    const runtime::Bindings vars = exact ? planted_bindings(g, seed) : runtime::random_bindings(g, seed);
    const std::vector<Tensor> want = runtime::interpret(g, vars);
    const engine::Executable exe = engine::Executable::compile(g, opts);
    tol.free_zero_sign = tol.free_zero_sign || fuzz::holds_min_max(exe.kernel_specs());
    const std::vector<Tensor> got = exe.run(vars);
    ::testing::AssertionResult r = same_outputs(want, got, tol);
    // Again, now that the pool hands out buffers the first run wrote.
    if (r) r = same_outputs(want, exe.run(vars), tol) << " (second run)";
    return r;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << e.what();
  }
}

// The fuzzer's graphs for seeds [first, first + count) on `device` against the
// interpreter: exact graphs bit for bit, the others within `transcendental_ulps` of the
// coarsest float type (a backend's transcendental functions differ from glibc's).
struct FuzzResult {
  int graphs = 0, failures = 0;
  std::string first_failure;
};
inline FuzzResult fuzz_on_device(runtime::DeviceApi& device, uint64_t first, uint64_t count, int transcendental_ulps) {
  FuzzResult fr;
  for (uint64_t seed = first; seed < first + count; ++seed) {
    const fuzz::RandomGraph rg = fuzz::random_fusable_graph(seed);
    Tolerance tol;
    if (rg.transcendental) tol = {.ulps = transcendental_ulps, .epsilon = fuzz::coarsest_epsilon(rg.graph)};
    ++fr.graphs;
    const ::testing::AssertionResult r = device_matches_interpreter(rg.graph, device, seed, tol);
    if (!r && fr.failures++ == 0)
      fr.first_failure = fmt::format("seed {}: {}\n{}", seed, r.message(), ir::print_graph(rg.graph));
  }
  return fr;
}

}  // namespace ampfuse::testing::device
