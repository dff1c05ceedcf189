#include "fuzz/differential.h"

#include "codegen/kernel_spec.h"
#include "engine/passes/autodiff.h"
#include "fuzz/random_graph.h"
#include "ir/error.h"
#include "ir/lowp.h"
#include "ir/op_registry.h"
#include "ir/scalar_derivative.h"
#include "ir/text_format.h"
#include "runtime/random.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace ampfuse::fuzz {

namespace {

using runtime::Tensor;

// Values that break careless kernels, planted into random inputs.
constexpr double kSpecial[] = {std::numeric_limits<double>::quiet_NaN(), INFINITY, -INFINITY, 0.0, -0.0,
                               65504.0, 65520.0, 1e5, -3e38, 1e-40, 1e-8, -6e-8, 3.0e-39, 1.0, -1.0};

void plant_special_values(runtime::Bindings& vars, uint64_t seed) {
  runtime::SplitMix64 rng(seed ^ 0x5bd1e995u);
  for (auto& [name, t] : vars) {
    if (!ir::is_float(t.dtype()) || t.size() == 0 || rng.next() % 3 == 0) continue;
    const int64_t count = 1 + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(std::max<int64_t>(1, t.size() / 16)));
    for (int64_t k = 0; k < count; ++k) {
      const int64_t i = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(t.size()));
      t.set_f64(i, kSpecial[rng.next() % std::size(kSpecial)]);
    }
  }
}

// Bits of element i as an integer ordered like the values (for ULP distances).
int64_t ordered_bits(const Tensor& t, int64_t i) {
  int64_t bits = 0;
  int64_t sign_bit = 0;
  switch (t.dtype()) {
    case ir::DType::f16:
    case ir::DType::bf16: bits = t.data<uint16_t>()[i]; sign_bit = 1 << 15; break;
    case ir::DType::f32: {
      uint32_t u;
      std::memcpy(&u, t.data<float>() + i, 4);
      bits = u, sign_bit = int64_t{1} << 31;
      break;
    }
    case ir::DType::f64: {
      uint64_t u;
      std::memcpy(&u, t.data<double>() + i, 8);
      // Keep the top 62 bits: enough to order f64 values within int64 arithmetic.
      bits = static_cast<int64_t>(u >> 2), sign_bit = int64_t{1} << 61;
      break;
    }
    default: return static_cast<int64_t>(t.get_f64(i));
  }
  return (bits & sign_bit) ? -(bits & (sign_bit - 1)) : bits;
}

}  // namespace

double coarsest_epsilon(const ir::Graph& g) {
  double eps = 0x1p-52;
  for (const ir::Node& n : g.nodes)
    for (const ir::TensorType& t : n.outputs) {
      if (t.dtype == ir::DType::bf16) eps = std::max(eps, 0x1p-7);
      if (t.dtype == ir::DType::f16) eps = std::max(eps, 0x1p-10);
      if (t.dtype == ir::DType::f32) eps = std::max(eps, 0x1p-23);
    }
  return eps;
}

bool same_element(const Tensor& a, const Tensor& b, int64_t i, int ulps, double epsilon, bool free_zero_sign) {
  const double x = a.get_f64(i), y = b.get_f64(i);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  if (x == 0 && y == 0) return free_zero_sign || std::signbit(x) == std::signbit(y);
  if (ulps == 0 || !ir::is_float(a.dtype())) return x == y;
  if (std::isinf(x) || std::isinf(y)) return x == y;
  if (std::llabs(ordered_bits(a, i) - ordered_bits(b, i)) <= ulps) return true;
  return std::fabs(x - y) <= ulps * epsilon * std::max(std::fabs(x), std::fabs(y));
}

bool holds_min_max(const std::vector<const codegen::KernelSpec*>& specs) {
  for (const codegen::KernelSpec* spec : specs)
    for (const ir::ScalarInstr& s : spec->body.instrs)
      if (s.op == ir::ScalarOp::max || s.op == ir::ScalarOp::min) return true;
  return false;
}

runtime::Bindings differential_inputs(const ir::Graph& g, uint64_t seed) {
  runtime::Bindings vars = runtime::random_bindings(g, seed);
  plant_special_values(vars, seed);
  return vars;
}

DifferentialResult compare_fused_with_interpreter(const ir::Graph& g, uint64_t seed, int ulps,
                                                  const engine::ExecutorOptions& opts, double of_largest,
                                                  std::span<const ir::ValueRef> scale_terms) {
  DifferentialResult r;
  const runtime::Bindings vars = differential_inputs(g, seed);
  // The scale terms as extra outputs of the same interpreter run.
  ir::Graph with_terms;
  if (!scale_terms.empty()) {
    with_terms = g;
    with_terms.outputs.insert(with_terms.outputs.end(), scale_terms.begin(), scale_terms.end());
  }
  std::vector<Tensor> want = runtime::interpret(scale_terms.empty() ? g : with_terms, vars);
  double largest_term = 0;
  for (size_t k = g.outputs.size(); k < want.size(); ++k)
    for (int64_t i = 0; i < want[k].size(); ++i)
      if (std::isfinite(want[k].get_f64(i))) largest_term = std::max(largest_term, std::fabs(want[k].get_f64(i)));
  want.erase(want.begin() + static_cast<std::ptrdiff_t>(g.outputs.size()), want.end());
  const engine::Executable exe = engine::Executable::compile(g, opts);
  r.kernels = exe.compile_stats().kernels;
  r.fused_nodes = exe.compile_stats().fused_nodes;
  r.row_kernels = exe.compile_stats().row_kernels;
  if (!exe.compile_stats().fallbacks.empty()) {
    r.ok = false;
    r.message = "a kernel fell back to the interpreter: " + exe.compile_stats().fallbacks[0];
    return r;
  }
  const std::vector<Tensor> got = exe.run(vars);
  const bool free_zero_sign = holds_min_max(exe.kernel_specs());
  const double epsilon = coarsest_epsilon(g);
  for (size_t k = 0; k < want.size(); ++k) {
    if (got[k].type() != want[k].type()) {
      r.ok = false;
      r.message = fmt::format("output {} ({}) is {}, the interpreter gives {}", k, g.output_name(k),
                              ir::type_str(got[k].type()), ir::type_str(want[k].type()));
      return r;
    }
    double largest = largest_term;
    for (int64_t i = 0; i < want[k].size() && of_largest > 0; ++i)
      if (std::isfinite(want[k].get_f64(i))) largest = std::max(largest, std::fabs(want[k].get_f64(i)));
    for (int64_t i = 0; i < want[k].size(); ++i) {
      if (same_element(want[k], got[k], i, ulps, epsilon, free_zero_sign)) continue;
      const double x = want[k].get_f64(i), y = got[k].get_f64(i);
      if (of_largest > 0 && std::isfinite(x) && std::isfinite(y) &&
          (std::fabs(x - y) <= of_largest * largest || std::llabs(ordered_bits(want[k], i) - ordered_bits(got[k], i)) <= 1))
        continue;
      r.ok = false;
      r.message = fmt::format("output {} ({}, {}) element {}: fused {} ({:#x}), interpreter {} ({:#x})", k,
                              g.output_name(k), ir::type_str(want[k].type()), i, got[k].get_f64(i),
                              ordered_bits(got[k], i), want[k].get_f64(i), ordered_bits(want[k], i));
      return r;
    }
  }
  return r;
}

DifferentialResult check_random_graph(uint64_t seed, const engine::ExecutorOptions& opts) {
  try {
    const RandomGraph rg = random_fusable_graph(seed);
    // A transcendental recipe with arithmetic around its call may cancel (gelu's 1 + erf):
    // there the backward graphs' bound relative to the largest |value| applies, of the
    // outputs or of the op's inputs, whichever is larger: where every output is what is
    // left of a cancellation (a tanh derivative g * (1 - t*t) with t a step from 1 at every
    // element, seed 11290182), a step of t moves the output by g times a step of 1.
    const double of_largest = rg.cancels ? kBackwardTolerance * coarsest_epsilon(rg.graph) : 0;
    DifferentialResult r = compare_fused_with_interpreter(rg.graph, seed, rg.transcendental ? kTranscendentalUlps : 0,
                                                          opts, of_largest, rg.cancel_terms);
    if (!r.ok) r.message = fmt::format("seed {}: {}\n{}", seed, r.message, ir::print_graph(rg.graph));
    return r;
  } catch (const std::exception& e) {
    return {false, fmt::format("seed {}: {}", seed, e.what()), 0, 0};
  }
}

DifferentialResult check_random_row_graph(uint64_t seed, bool* skipped, engine::ExecutorOptions opts, bool external) {
  *skipped = false;
  try {
    const std::optional<RowGraph> rg = random_row_graph(seed);
    // External: oneDNN's LayerNorm, sum and mean add their statistics in f32, which
    // overflow on the values planted near f32's largest (-3e38) where the reference's f64
    // ones do not (docs/ops.md, "NaN through oneDNN"): those row ops are left out.
    if (!rg || (external && (rg->row_op == "LayerNorm" || rg->row_op == "sum" || rg->row_op == "mean"))) {
      *skipped = true;
      return {};
    }
    opts.row_kernels = opts.fuse && !external;  // (without fusion the row op runs on its reference kernel)
    DifferentialResult r = compare_fused_with_interpreter(rg->graph, seed, 0, opts, rg->tolerance);
    if (r.ok && r.row_kernels != (opts.row_kernels ? 1 : 0)) {
      r.ok = false;
      r.message = fmt::format("{} row kernels planned, {} expected", r.row_kernels, opts.row_kernels ? 1 : 0);
    }
    if (!r.ok)
      r.message = fmt::format("row seed {} ({} of {}): {}\n{}", seed, rg->row_op, ir::type_str(rg->row_input), r.message,
                              ir::print_graph(rg->graph));
    return r;
  } catch (const std::exception& e) {
    return {false, fmt::format("row seed {}: {}", seed, e.what())};
  }
}

namespace {

// Whether build_backward can differentiate every node of `g`. Two kinds of recipe ops it
// cannot, which the generator draws all the same (forward they are fuzzed like any other):
// tgamma and lgamma, whose derivative needs digamma, also inside a _backward_elementwise;
// and _backward_elementwise itself, a derived gradient, whose own gradient (second order)
// elementwise_gradient does not build: the derived node's attributes keep one fwd_op.
bool every_node_has_a_gradient(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes) {
    if (n.is_var()) continue;
    if (n.op == "_backward_elementwise") return false;
    const ir::OpDef& def = ir::OpRegistry::global().get(n.op);
    if (!def.has_recipe(n.attrs)) continue;
    try {
      const int inputs = static_cast<int>(n.inputs.size());
      for (int i = 0; i < inputs; ++i) {
        ir::ScalarBuilder probe(inputs);
        const auto results = def.recipe(probe, n.attrs);
        (void)ir::scalar_tangent(probe, 0, results.at(0), i);
      }
    } catch (const Error&) {
      return false;
    }
  }
  return true;
}

}  // namespace

DifferentialResult check_random_graph_backward(uint64_t seed, bool* skipped, const engine::ExecutorOptions& opts) {
  *skipped = false;
  try {
    const RandomGraph rg = random_fusable_graph(seed);
    bool differentiable = false;
    for (const ir::Node& n : rg.graph.nodes) differentiable |= n.is_var() && ir::is_float(n.outputs.at(0).dtype);
    if (!differentiable || !every_node_has_a_gradient(rg.graph)) {
      *skipped = true;
      return {};
    }
    const engine::BackwardGraph bg = engine::build_backward(rg.graph, {.wrt = {}, .with_inputs = true});
    const double of_largest = rg.transcendental ? kBackwardTolerance * coarsest_epsilon(bg.graph) : 0;
    engine::ExecutorOptions reference_externals = opts;
    reference_externals.use_onednn = false;
    DifferentialResult r = compare_fused_with_interpreter(bg.graph, seed, 0, reference_externals, of_largest);
    if (!r.ok) r.message = fmt::format("seed {} (backward): {}\n{}", seed, r.message, ir::print_graph(bg.graph));
    return r;
  } catch (const std::exception& e) {
    return {false, fmt::format("seed {} (backward): {}", seed, e.what()), 0, 0};
  }
}

}  // namespace ampfuse::fuzz
