// Seeded random graphs of fusable ops, for the differential fuzzer (fuzz/differential.h).
//
// Each graph has one to three inputs of a random shape (ranks 1-4, extents such as 0, 1, 7,
// 31 and primes; now and then 2^20+3 elements) in f32, f16 or bf16 (sometimes f64), inputs
// that broadcast, and a chain of elementwise ops, casts, transposes, slices of inputs,
// compares and selects; several intermediate values are graph outputs, so kernels have
// several outputs. A graph is "exact" (only ops whose fused result must equal the
// interpreter bit for bit) or has one transcendental op followed only by ops that keep a
// relative error (casts, relu, clip, positive scaling), so a ULP bound applies.
#pragma once

#include "ir/graph.h"

#include <cstdint>

namespace ampfuse::fuzz {

struct RandomGraph {
  ir::Graph graph;             // types inferred
  bool transcendental = false;  // holds one transcendental op (compare within a ULP bound)
};

// The graph for `seed`: the same seed gives the same graph on every platform.
RandomGraph random_fusable_graph(uint64_t seed);

}  // namespace ampfuse::fuzz
