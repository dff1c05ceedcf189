// training_mode: a graph's training form (MXNet is_train=True), where BatchNorm normalizes
// with the batch's statistics and updates the moving ones, and Dropout drops.
//
//   %y = BatchNorm(%x, %gamma, %beta, %mm, %mv)          (use_global_stats=False)
//     ->  %y, %new_mm, %new_mv, %mean, %invstd = _BatchNorm_train(%x, %gamma, %beta, %mm, %mv)
//         graph outputs += %new_mm, %new_mv
//   %y = Dropout(%x, p, mode='training' or 'always')     (p > 0)
//     ->  %y = _Dropout_train(%x, p, axes, seed, offset)
//
// BatchNorm with use_global_stats=True stays the inference op (MXNet normalizes with the
// moving statistics then, and does not update them), as does Dropout with p = 0 (the
// identity). With output_mean_var, readers of BatchNorm's mean and var outputs read the
// batch mean and inverse standard deviation instead (what MXNet reports in training).
//
// Moving statistics: for each rewritten BatchNorm, in graph order, the new moving_mean
// and then the new moving_var are appended to the graph outputs, after the existing ones;
// a trainer writes them back into the variables that feed that node's inputs 3 and 4
// (MXNet updates its aux states in place). Graph outputs of a rewritten BatchNorm are
// named "<node>_output0" onwards (Graph::output_name) since the node has several outputs.
//
// Dropout masks: the k-th rewritten Dropout (graph order) gets seed = options.seed and
// offset = options.offset + k; its mask is Philox-4x32-10 of (seed, offset, element index)
// (ir/philox.h), computed where the mask is used (inside fused kernels: its scalar recipe),
// so one (seed, offset) gives one mask on every backend and run. A trainer
// advances `offset` by the number of Dropout nodes at each step for fresh masks.
//
// Order: after AMP conversion, before build_backward (engine/passes/autodiff.h). MXNet
// converts the graph with BatchNorm and Dropout in it and is_train only picks their
// kernels, so AMP classes them by MXNet's lists (BatchNorm's statistics kept in f32) and
// the training ops read the inputs AMP gave their inference forms; autodiff then needs the
// training ops. fold_batchnorm does not apply (it folds inference BatchNorm only).
#pragma once

#include "ir/graph.h"

#include <cstdint>

namespace ampfuse::engine {

struct TrainingOptions {
  uint64_t seed = 0;    // the Philox key of every dropout mask
  uint64_t offset = 0;  // the first Dropout's counter offset; the k-th gets offset + k
};

// Rewrites `g` into its training form (above) and returns the number of nodes rewritten.
// Rewritten nodes are typed again (ir::infer_types) when the graph's input variables have
// types; otherwise the graph stays untyped. Throws what inference throws (naming the node),
// e.g. for a Dropout whose `axes` are out of range.
int to_training_mode(ir::Graph& g, const TrainingOptions& options = {});

}  // namespace ampfuse::engine
