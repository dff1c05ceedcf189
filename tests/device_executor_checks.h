// Checks of the device executor (engine/device_executor.h) shared by the emulated device's
// tests (tests/device_executor_test.cpp, every build) and the GPU's
// (tests/cuda_device_test.cpp): small graphs that exercise views, slices, broadcasts,
// host round trips, variables as outputs and empty tensors, the default model and the
// differential fuzzer's graphs, each run on a device and compared with the reference
// interpreter.
#pragma once

#include "engine/default_model.h"
#include "engine/device_executor.h"
#include "engine/random_graph.h"
#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace ampfuse::testing::device {

using ir::DType;
using ir::ValueRef;
using runtime::Tensor;

// Random bindings with NaN, +-Inf, -0, subnormals and values beyond f16 planted in float
// variables (a few each), as the differential fuzzer does.
inline runtime::Bindings planted_bindings(const ir::Graph& g, uint64_t seed) {
  runtime::Bindings vars = runtime::random_bindings(g, seed);
  constexpr double kSpecial[] = {NAN, INFINITY, -INFINITY, -0.0, 65520.0, 1e-40, -6e-8, 3.0e-39};
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 17; };
  for (auto& [name, t] : vars) {
    if (!ir::is_float(t.dtype()) || t.size() == 0 || next() % 3 == 0) continue;
    for (int k = 0; k < 3; ++k) t.set_f64(static_cast<int64_t>(next() % static_cast<uint64_t>(t.size())), kSpecial[next() % 8]);
  }
  return vars;
}

// Bits of a float element as an integer ordered like the values (ULP distances).
inline int64_t ordered_bits(const Tensor& t, int64_t i) {
  uint64_t bits = 0;
  int width = 0;
  switch (t.dtype()) {
    case DType::f16:
    case DType::bf16: bits = t.data<uint16_t>()[i], width = 16; break;
    case DType::f32: std::memcpy(&bits, t.data<float>() + i, 4), width = 32; break;
    case DType::f64: std::memcpy(&bits, t.data<double>() + i, 8), bits >>= 2, width = 62; break;
    default: return 0;
  }
  const uint64_t sign = uint64_t{1} << (width - 1);
  return (bits & sign) ? -static_cast<int64_t>(bits & (sign - 1)) : static_cast<int64_t>(bits);
}

struct Tolerance {
  bool free_zero_sign = false;  // a kernel holds max/min, whose zero sign is free
  int ulps = 0;                 // 0: bit for bit (NaNs of any payload equal)
  double relative = 0;          // or within this relative difference
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
      const double x = want[k].get_f64(i), y = got[k].get_f64(i);
      bool same = x == y && std::signbit(x) == std::signbit(y);
      if (std::isnan(x) || std::isnan(y)) same = std::isnan(x) && std::isnan(y);
      else if (x == 0 && y == 0) same = tol.free_zero_sign || std::signbit(x) == std::signbit(y);
      else if (!same && tol.ulps > 0 && std::isfinite(x) && std::isfinite(y) && ir::is_float(want[k].dtype()))
        same = std::llabs(ordered_bits(want[k], i) - ordered_bits(got[k], i)) <= tol.ulps ||
               std::fabs(x - y) <= tol.relative * std::max(std::fabs(x), std::fabs(y));
      if (!same && tol.of_largest > 0 && std::isfinite(x) && std::isfinite(y))
        same = std::fabs(x - y) <= tol.of_largest * largest;
      if (!same)
        return ::testing::AssertionFailure() << "output " << k << " (" << ir::type_str(want[k].type()) << ") element "
                                             << i << ": got " << y << ", want " << x;
    }
  }
  return ::testing::AssertionSuccess();
}

inline bool holds_min_max(const engine::DeviceExecutable& exe) {
  for (const codegen::KernelSpec* spec : exe.kernel_specs())
    for (const ir::ScalarInstr& s : spec->body.instrs)
      if (s.op == ir::ScalarOp::max || s.op == ir::ScalarOp::min) return true;
  return false;
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
  })"));
  return graphs;
}

// Runs `g` on `device` and on the interpreter with the same random inputs, special values
// planted when `exact`, else compared within 1e-5 of each output's largest |value|.
inline ::testing::AssertionResult device_matches_interpreter(const ir::Graph& g, runtime::DeviceApi& device,
                                                             uint64_t seed, Tolerance tol = {}, bool exact = true,
                                                             engine::DeviceExecutorOptions opts = {}) {
  try {
    opts.device = &device;
    if (!exact) tol.of_largest = 1e-5;
    const runtime::Bindings vars = exact ? planted_bindings(g, seed) : runtime::random_bindings(g, seed);
    const std::vector<Tensor> want = runtime::interpret(g, vars);
    const engine::DeviceExecutable exe = engine::DeviceExecutable::compile(g, opts);
    tol.free_zero_sign = tol.free_zero_sign || holds_min_max(exe);
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
    const engine::RandomGraph rg = engine::random_fusable_graph(seed);
    Tolerance tol;
    if (rg.transcendental) {
      tol.ulps = transcendental_ulps;
      double eps = 0x1p-52;  // a result rounded through bf16 differs by a bf16 step
      for (const ir::Node& n : rg.graph.nodes)
        for (const ir::TensorType& t : n.outputs)
          eps = std::max(eps, t.dtype == DType::bf16 ? 0x1p-7 : t.dtype == DType::f16 ? 0x1p-10
                                                              : t.dtype == DType::f32 ? 0x1p-23 : 0.0);
      tol.relative = transcendental_ulps * eps;
    }
    ++fr.graphs;
    const ::testing::AssertionResult r = device_matches_interpreter(rg.graph, device, seed, tol);
    if (!r && fr.failures++ == 0)
      fr.first_failure = fmt::format("seed {}: {}\n{}", seed, r.message(), ir::print_graph(rg.graph));
  }
  return fr;
}

}  // namespace ampfuse::testing::device
