// training_mode: a graph's training form (MXNet is_train=True), where BatchNorm normalizes
// with the batch's statistics and updates the moving ones, and Dropout drops.
//
//   %y = BatchNorm(%x, %gamma, %beta, %mm, %mv)          (use_global_stats=False)
//     ->  %y, %new_mm, %new_mv, %mean, %invstd = _BatchNorm_train(%x, %gamma, %beta, %mm, %mv)
//         graph outputs += %new_mm, %new_mv
//   %y = Dropout(%x, p, mode='training' or 'always')     (p > 0)
//     ->  %y = _Dropout_train(%x, p, axes, seed, offset)
//     or  %y = _Dropout_train(%x, %step, p, axes, seed, offset, step_stride)   (step_input)
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
// so one (seed, offset) gives one mask on every backend and run.
//
// Fresh masks every step without recompiling: with options.step_input set (and at least one
// Dropout rewritten), the pass adds ONE input variable of that name, an f32 scalar of shape
// () placed first in the graph, which every rewritten Dropout reads as its step s; each gets
// step_stride = the number of Dropouts rewritten, so its counter offset at step s is
// options.offset + k + s * step_stride and no (node, step) pair reuses another's counters.
// A trainer compiles the step once and binds s = 0, 1, 2, ... (exact integers below 2^24 in
// f32). At s = 0 the masks are those of the attribute form above. Without Dropouts no
// variable is added, so the graph's inputs stay those of the model.
//
// Order: after AMP conversion, before build_backward (engine/passes/autodiff.h). MXNet
// converts the graph with BatchNorm and Dropout in it and is_train only picks their
// kernels, so AMP classes them by MXNet's lists (BatchNorm's statistics kept in f32) and
// the training ops read the inputs AMP gave their inference forms; autodiff then needs the
// training ops. fold_batchnorm does not apply (it folds inference BatchNorm only).
#pragma once

#include "ir/graph.h"

#include <cstdint>
#include <string>

namespace ampfuse::engine {

struct TrainingOptions {
  uint64_t seed = 0;    // the Philox key of every dropout mask
  uint64_t offset = 0;  // the first Dropout's counter offset; the k-th gets offset + k
  // Non-empty: the name of the step input every rewritten Dropout reads (see above); empty:
  // the offsets are fixed when the graph compiles.
  std::string step_input{};
};

// Rewrites `g` into its training form (above) and returns the number of nodes rewritten.
// Rewritten nodes are typed again (ir::infer_types) when the graph's input variables have
// types; otherwise the graph stays untyped. Throws what inference throws (naming the node),
// e.g. for a Dropout whose `axes` are out of range, and when step_input names a variable
// the graph already has.
int to_training_mode(ir::Graph& g, const TrainingOptions& options = {});

}  // namespace ampfuse::engine
