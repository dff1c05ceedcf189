// Helpers for tests of graph passes: a typed graph from its text, counting ops, and how far
// two graphs' outputs are apart on the reference interpreter.
#pragma once

#include "ir/graph.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace ampfuse::testing {

// The graph of `text` with its types inferred.
inline ir::Graph parsed(const std::string& text) {
  ir::Graph g = ir::parse_graph(text);
  ir::infer_types(g);
  return g;
}

inline int count_op(const ir::Graph& g, const std::string& op) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == op; }));
}

// Largest |a - b| over both graphs' outputs on the interpreter (the same seeded random
// bindings), relative to the largest |value| of a's; the outputs' types must agree.
inline double relative_difference(const ir::Graph& a, const ir::Graph& b, uint64_t seed) {
  const runtime::Bindings vars = runtime::random_bindings(a, seed);
  const std::vector<runtime::Tensor> x = runtime::interpret(a, vars), y = runtime::interpret(b, vars);
  double worst = 0, largest = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    EXPECT_EQ(x[k].type(), y[k].type()) << "output " << k;
    for (int64_t i = 0; i < x[k].size(); ++i) {
      worst = std::max(worst, std::fabs(x[k].get_f64(i) - y[k].get_f64(i)));
      largest = std::max(largest, std::fabs(x[k].get_f64(i)));
    }
  }
  return worst / std::max(largest, 1e-30);
}

}  // namespace ampfuse::testing
