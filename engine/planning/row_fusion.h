// Row kernels: softmax, log_softmax, LayerNorm and the sum/mean/max/min of the last axis as
// generated kernels (codegen/row_loops.cpp), with the fused kernel that computes their data
// and the one that reads their result merged into them.
//
//   kernel [8,100,100] %add=broadcast_add        kernel [8,100,100] %add=broadcast_add
//   external %sm=softmax                   ->                       %sm=softmax
//   kernel [8,100,100] %c=amp_cast                                  %c=amp_cast
//
// One pass over memory instead of three, and no oneDNN primitive (oneDNN 2.6 runs LayerNorm
// with its slow `simple_layer_normalization` here). Runs after plan_fusion, on the plan.
#pragma once

#include "engine/planning/fusion_plan.h"
#include "ir/graph.h"

namespace ampfuse::engine {

// Whether node n can be a row kernel's centre: softmax or log_softmax (no length input),
// LayerNorm (one output), or the reduction sum, mean, max or min (of the last axis alone,
// not empty), over the last axis of f32/f16/bf16 values (computed in f32).
bool is_row_op(const ir::Graph& g, int32_t n);

// The index in k.nodes of a row kernel's row op (the one node of an external role a fused
// kernel holds), or k.nodes.size() for other kernels. The nodes before it give the row's
// data, those after it the body (engine/planning/kernel_lowering.h).
size_t row_op_index(const ir::Graph& g, const FusedKernel& k);

// Whether a row op gives one value a row (sum, mean, max, min) rather than a row.
bool is_row_reduction(const ir::Node& node);

// How a reduction's output of shape `out` is indexed from the row kernel's iteration space
// of rank `rank`: the row dimensions map to the output's, the row itself to nothing.
ir::AccessMap row_result_map(const ir::Shape& out, size_t rank);

// Turns every external step whose node is_row_op into a FusedKernel computing that node.
// The kernel producing its data joins it when it computes the data element for element
// over the same iteration space, cheaply (no transcendental function where the row kernel
// evaluates it in each of its three passes; the reductions take one); its other outputs,
// and the data where other steps read it too, the row kernel stores in its first pass
// (then no step before the merged kernel may read them). The kernel reading its result joins it when nothing else reads the result and
// it reads it element for element over the same iteration space (not for the reductions,
// whose result has another shape). No kernel drawing random bits joins. Returns how
// many row kernels the plan now has.
int fuse_row_kernels(const ir::Graph& g, Plan& plan);

}  // namespace ampfuse::engine
