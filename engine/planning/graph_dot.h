// A Graphviz picture of a fusion plan: `ampfuse dot` and AMPFUSE_DUMP-style debugging.
#pragma once

#include "engine/planning/fusion_plan.h"
#include "ir/graph.h"

#include <string>

namespace ampfuse::engine {

// The graph as Graphviz `dot` text:
//   - each fused kernel of `plan` is a `subgraph cluster_K` labelled
//     "kernel K: N ops, B bytes" (B = kernel_bytes), holding its nodes as rounded boxes;
//   - external ops (convolution, matmul...) are bold boxes, views dashed boxes, variables
//     ellipses (inputs solid, weights and aux states dotted), graph outputs plain text;
//   - every node is filled with the colour of its output 0's dtype (f32, bf16, f16, f64,
//     integers, bool; white when untyped), shown in a `cluster_legend`;
//   - every edge is labelled with the value's dtype and shape ("bf16 [1,16,32,32]").
// `g` must have its types inferred (plan_fusion needs them anyway). Node names are escaped,
// so any MXNet name is safe.
std::string graph_to_dot(const ir::Graph& g, const Plan& plan);

// The fill colour graph_to_dot gives a dtype ("#rrggbb").
std::string dtype_fill_colour(ir::DType t);

}  // namespace ampfuse::engine
