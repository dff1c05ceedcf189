// Seeded random graphs of fusable ops, for the differential fuzzer (fuzz/differential.h).
//
// Each graph has one to three inputs of a random shape (ranks 1-4, extents such as 0, 1, 7,
// 31 and primes; now and then 2^20+3 elements) in f32, f16 or bf16 (sometimes f64), inputs
// that broadcast, and a chain of casts, transposes, slices of inputs and ops drawn from the
// op registry: any op with a scalar recipe (fuzzable_ops()), attributes derived from its
// schema, other data inputs taken from the values so far and parameter inputs (BatchNorm's
// gamma, PReLU's slope) new variables of the types the op's inference asks for. Several
// intermediate values are graph outputs, so kernels have several outputs. A graph is
// "exact" (only ops whose recipe holds no transcendental or library call, so the fused
// result must equal the interpreter bit for bit) or has one transcendental op followed only
// by ops that keep a relative error (casts, relu, clip, positive scaling), so a ULP bound
// applies.
#pragma once

#include "ir/graph.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampfuse::fuzz {

struct RandomGraph {
  ir::Graph graph;             // types inferred
  bool transcendental = false;  // holds one transcendental op (compare within a ULP bound)
  // The transcendental op's recipe does arithmetic around its call (LeakyReLU gelu, a
  // derivative), which may cancel: compare within a bound relative to the largest |value|
  // of the outputs and of that op's inputs (cancel_terms) where the ULP bound fails.
  bool cancels = false;
  std::vector<ir::ValueRef> cancel_terms;
};

// The ops the generator draws: every op of the registry with a scalar recipe (sorted), so an
// op is fuzzed the day it is registered. tests/fusion_fuzz_test.cpp checks that CI's fixed
// seeds draw each of them.
std::vector<std::string> fuzzable_ops();

// The graph for `seed`: the same seed gives the same graph on every platform.
RandomGraph random_fusable_graph(uint64_t seed);

// A graph for the row kernels (engine/planning/row_fusion.h): random_fusable_graph(seed)
// with a row op over the last axis (softmax, log_softmax, LayerNorm, sum, max or mean, by
// seed) appended to its first f32/f16/bf16 output whose last extent is not 0, and an
// elementwise op after it, the graph's first output. nullopt where random_fusable_graph
// has a transcendental op (its ULP-bound values would be amplified by exp) or no such
// output.
struct RowGraph {
  ir::Graph graph;  // types inferred
  std::string row_op;
  ir::TensorType row_input;
  // How far the row kernel may be from the reference kernel, relative to each output's
  // largest |value|: row_rounding_tolerance of the row input's dtype, or for softmax the
  // reference's own error, n * 2^-24 (it adds a row's exponentials sequentially in f32;
  // the row kernel in 64 lanes).
  double tolerance = 0;
};
std::optional<RowGraph> random_row_graph(uint64_t seed);

// One rounding of `dtype` (bf16 2^-7, f16 2^-10), or 1e-5 for f32's summation order: how
// far a row kernel's output may be from the reference kernel's, relative to the largest.
double row_rounding_tolerance(ir::DType dtype);

}  // namespace ampfuse::fuzz
