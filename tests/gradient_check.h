// Gradient checks against central finite differences, on the reference interpreter (what
// MXNet's check_numeric_gradient and torch's gradcheck do).
//
//   EXPECT_TRUE(check_gradients(graph));            // every float param and input
//   EXPECT_TRUE(check_gradients(graph, {.wrt = {"w"}, .given = {{"x", x}}}));
//
// The graph should compute in f64 (build it with f64 variables): the differences then
// agree with the analytic gradient to about 1e-7 relative. The check builds the backward
// graph (engine/passes/autodiff.h), binds random head gradients (so it checks the whole
// vector-Jacobian product, not only its sum) and compares each differentiated element, or
// `max_elements` of them spread over the tensor, with (L(x+eps) - L(x-eps)) / 2eps where
// L = sum over outputs of <head gradient, output>. Loss heads (SoftmaxOutput...) have no
// such L: check them against their formula instead.
#pragma once

#include "engine/passes/autodiff.h"
#include "ir/graph.h"
#include "runtime/interpreter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace ampfuse::testing {

struct GradCheckOptions {
  std::vector<std::string> wrt{};  // empty: every float param and input variable
  runtime::Bindings given{};       // values for some variables; the rest are random
  double eps = 1e-6;
  double rtol = 1e-5, atol = 1e-7;
  int max_elements = 40;  // per variable
  uint64_t seed = 7;
};

inline runtime::Tensor perturbed(const runtime::Tensor& t, int64_t i, double delta) {
  runtime::Tensor c = t.clone();
  switch (c.dtype()) {
    case ir::DType::f64: c.data<double>()[i] += delta; break;
    case ir::DType::f32: c.data<float>()[i] += static_cast<float>(delta); break;
    default: ADD_FAILURE() << "gradient checks perturb f32/f64 variables only";
  }
  return c;
}

inline ::testing::AssertionResult check_gradients(const ir::Graph& g, GradCheckOptions o = {}) {
  engine::BackwardOptions bo;
  bo.wrt = o.wrt;
  bo.with_inputs = o.wrt.empty();
  const engine::BackwardGraph bg = engine::build_backward(g, bo);
  runtime::Bindings vars = runtime::random_bindings(g, o.seed, o.given);
  // Random head gradients: the full vector-Jacobian product is checked.
  runtime::Bindings heads = runtime::random_bindings(bg.graph, o.seed + 1, vars);
  const std::vector<runtime::Tensor> results = runtime::interpret(bg.graph, heads);

  const auto loss = [&](const runtime::Bindings& b) {
    const std::vector<runtime::Tensor> outs = runtime::interpret(g, b);
    double l = 0;
    for (size_t k = 0; k < outs.size(); ++k) {
      const std::string head = g.output_name(k) + "_head_grad";
      if (!heads.count(head)) continue;
      const std::vector<double> y = runtime::to_f64_vector(outs[k]), w = runtime::to_f64_vector(heads.at(head));
      for (size_t i = 0; i < y.size(); ++i) l += y[i] * w[i];
    }
    return l;
  };
  for (size_t v = 0; v < bg.gradient_of.size(); ++v) {
    const std::string& name = bg.gradient_of[v];
    const runtime::Tensor& x = vars.at(name);
    const std::vector<double> analytic = runtime::to_f64_vector(results.at(bg.num_forward_outputs + v));
    if (static_cast<int64_t>(analytic.size()) != x.size())
      return ::testing::AssertionFailure() << "gradient of " << name << " has " << analytic.size() << " elements, not "
                                           << x.size();
    const int64_t n = x.size();
    const int64_t step = std::max<int64_t>(1, n / o.max_elements);
    for (int64_t i = 0; i < n; i += step) {
      runtime::Bindings plus = vars, minus = vars;
      plus[name] = perturbed(x, i, o.eps);
      minus[name] = perturbed(x, i, -o.eps);
      const double numeric = (loss(plus) - loss(minus)) / (2 * o.eps);
      if (std::abs(numeric - analytic[i]) > o.atol + o.rtol * std::abs(numeric))
        return ::testing::AssertionFailure() << "d/d " << name << "[" << i << "]: backward graph gives " << analytic[i]
                                             << ", finite differences " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ampfuse::testing
