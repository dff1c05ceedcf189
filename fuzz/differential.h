// The differential check: a graph run fused equals the reference interpreter.
//
// Inputs are seeded random values with NaN, +-Inf, +-0, subnormals and values beyond the
// f16 range planted in them. Outputs must match bit for bit (NaNs of any payload count as
// equal; +0 and -0 as equal only where the kernel holds max/min, whose zero sign is free,
// see ir/scalar_program.h), except in graphs with a transcendental op, which must match
// within kTranscendentalUlps units in the last place of the output dtype, or as many steps
// of the coarsest float type in the graph, relative to the value (a transcendental result
// rounded to bf16 and then widened to f16 differs by a bf16 step).
#pragma once

#include "engine/execution/executor.h"
#include "ir/graph.h"
#include "runtime/interpreter.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ampfuse::fuzz {

// The bound for graphs with one transcendental op: the largest bound of
// codegen/vector_math.h (tanh, 3 ulp in f32) plus one rounding of each op after it.
inline constexpr int kTranscendentalUlps = 6;

struct DifferentialResult {
  bool ok = true;
  std::string message;  // the first mismatch: output, element index, both values
  int kernels = 0;
  int fused_nodes = 0;
  int row_kernels = 0;  // CompileStats::row_kernels
};

// The fuzzer's inputs for `g`: random_bindings(g, seed) with NaN, +-Inf, +-0, subnormals
// and values beyond f16 planted in float variables.
runtime::Bindings differential_inputs(const ir::Graph& g, uint64_t seed);

// Whether element i of `want` and `got` (same type) agree: NaN equals NaN; zeros must have
// the same sign unless `free_zero_sign`; with ulps > 0, floats may differ by `ulps` steps of
// their dtype or by ulps * epsilon relative to the value; otherwise they must be equal.
bool same_element(const runtime::Tensor& want, const runtime::Tensor& got, int64_t i, int ulps, double epsilon,
                  bool free_zero_sign);

// The epsilon of the coarsest float type any node of `g` produces: a transcendental result
// rounded through bf16 and widened again differs by a bf16 step.
double coarsest_epsilon(const ir::Graph& g);

// Whether one of these kernels holds max or min (whose zero sign is free).
bool holds_min_max(const std::vector<const codegen::KernelSpec*>& specs);

// Runs `g` (types inferred) on the interpreter and fused (Executable with `opts`) on the
// same inputs (seeded by `seed`) and compares, exactly or within `ulps` when ulps > 0, or
// (of_largest > 0) within that fraction of the output's largest finite |value| or one step
// of the output's dtype, which two results a hair apart may round to: where the output's
// values are f16 subnormals, a step is far above any relative bound (row seed 2007180: a
// softmax over 2^20 f16 columns, every output near 4e-7, one step 6e-8). `scale_terms`:
// values of `g` whose largest finite |value| the fraction is taken of too, where larger
// (the terms that cancelled before the output; check_random_graph).
DifferentialResult compare_fused_with_interpreter(const ir::Graph& g, uint64_t seed, int ulps,
                                                  const engine::ExecutorOptions& opts = {}, double of_largest = 0,
                                                  std::span<const ir::ValueRef> scale_terms = {});

// random_fusable_graph(seed) through compare_fused_with_interpreter. Never throws: an
// error while building, compiling or running is a failure whose message names the seed.
DifferentialResult check_random_graph(uint64_t seed, const engine::ExecutorOptions& opts = {});

// random_row_graph(seed) (fuzz/random_graph.h) through compare_fused_with_interpreter with
// row kernels on (where opts.fuse is), of_largest the graph's tolerance; a plan without its
// row kernel fails. `skipped` is set for a seed that gives no row graph (a transcendental
// op, or no float output to append the row op to). With `external`, row kernels off: the
// row op runs as an external step (oneDNN's softmax, behind the executor's guard; the
// reference kernels of log_softmax and max) on the same data, NaN and Inf planted;
// LayerNorm, sum and mean, whose oneDNN statistics overflow in f32 on the planted -3e38,
// are skipped.
DifferentialResult check_random_row_graph(uint64_t seed, bool* skipped, engine::ExecutorOptions opts = {},
                                          bool external = false);

// The same for the backward graph of random_fusable_graph(seed) with respect to its float
// inputs (engine/passes/autodiff.h; head gradients are inputs with planted values too):
// bit for bit for exact graphs. With a transcendental op a derivative may cancel (tanh's
// 1 - y*y near |y| = 1), so no ULP bound holds per element: such graphs must agree within
// kBackwardTolerance steps of the coarsest float type relative to each output's largest
// |value|. `skipped` is set for a graph with no float input that reaches an output, or
// with an op build_backward cannot differentiate (tgamma, lgamma, _backward_elementwise). The
// backward graph's external ops (the sums of broadcast gradients) run on their reference
// kernels whatever opts.use_onednn says: runtime/onednn adds in another order, and the
// fused kernels are what this checks, bit for bit.
inline constexpr int kBackwardTolerance = 64;
DifferentialResult check_random_graph_backward(uint64_t seed, bool* skipped, const engine::ExecutorOptions& opts = {});

}  // namespace ampfuse::fuzz
