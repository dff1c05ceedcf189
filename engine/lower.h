// The compile order, in one place: every step from the graph a user gives to the plan the
// executor runs. Read lower() top to bottom:
//
//   infer-types      types and shapes of every value (when the graph has none yet)
//   amp-convert      with LowerOptions::amp: each op to the precision its AMP class says,
//   cast-fold          casts of the graph and of the conversion folded,
//   layout-optimize    convolution regions moved to NHWC (AmpOptions::layout)
//   dce              nodes no output depends on never run
//   ---------------- convert_for_amp stops here: what `ampfuse convert` writes
//   training-mode    with LowerOptions::training: BatchNorm with batch statistics (moving
//                      ones appended as outputs), Dropout drops (engine/passes/training_mode.h)
//   autodiff         with LowerOptions::backward: the gradients appended to the graph
//                      (engine/passes/autodiff.h), after AMP so that lp16 ops get lp16
//                      gradients and f32 weights f32 ones, as MXNet's AMP trains
//   fold-batchnorm   with fold_batchnorm: BatchNorm after Convolution into its weights
//   epilogue-fusion  with epilogues_run_fused: Convolution / FullyConnected + add + relu
//                      into one _fused_conv / _fused_fc that oneDNN runs with post-ops
//   compute-in-f32   casts around external ops computed in f32, so that they fuse
//   plan-fusion      fused kernels, external ops and views; with backward, forward and
//                      backward nodes in separate kernels, forward steps first
//                      (PlannerOptions::backward_nodes: Executable::run_forward)
//   row-kernels      with PlannerOptions::row_kernels: softmax, log_softmax, LayerNorm and
//                      the reductions over the last axis as generated kernels, with the kernels before and
//                      after them merged in (engine/planning/row_fusion.h)
//   recompute        with PlannerOptions::recompute: cheap values computed again in the
//                      kernels that read them instead of stored (engine/planning/recompute.h)
//
// Graph steps run through run_pipeline (engine/passes/pipeline.h): verified after the first
// and after each that changed the graph, the graph dumped after each with AMPFUSE_DUMP=ir;
// the plan is dumped with AMPFUSE_DUMP=plan.
// The executor (engine/execution/executor.h) takes the plan from here, lowers and compiles
// each fused kernel and plans memory; `ampfuse dot` draws the same plan.
#pragma once

#include "engine/passes/amp_options.h"
#include "engine/passes/autodiff.h"
#include "engine/passes/epilogue_fusion.h"
#include "engine/passes/training_mode.h"
#include "engine/planning/fusion_plan.h"
#include "engine/planning/recompute.h"
#include "ir/graph.h"

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace ampfuse::engine {

// What the AMP steps did, for `ampfuse convert --json` and the run report.
struct AmpStats {
  int casts_inserted = 0;  // by amp-convert
  int casts_removed = 0;   // by cast-fold and dce, counting casts of the input graph too
  int casts_final = 0;     // Cast / amp_cast nodes in the result
  int casts_shared = 0;    // of those, read by more than one op
  int params_offline = 0;  // params now stored in the target type
  int lp16_nodes = 0;      // op nodes (casts aside) with an output in the target type
  int fp32_nodes = 0;      // op nodes (casts aside) with float outputs, none in the target type
  // Op nodes of the input graph by the class they run as ("lowp", "fp32", "widest",
  // "neutral"; conditional ones resolved, excluded ones counted as "fp32").
  std::map<std::string, int> class_counts;
};

struct LowerOptions {
  std::optional<AmpOptions> amp;  // convert for mixed precision first
  // "" or "nhwc": run layout_optimize after the AMP passes, in f32 as in low precision.
  // Unset, AmpOptions::layout (amp::init and `convert` take it there) asks for it.
  std::string layout;
  bool fold_batchnorm = false;    // changes results by rounding (see fold_batchnorm.h)
  // Set: fuse Convolution / FullyConnected epilogues where it says oneDNN runs them
  // (epilogue_fusion.h; changes low-precision results by rounding). Excludes backward and
  // training.
  RunsFusedEpilogue epilogues_run_fused;
  bool relu_post_ops = false;  // with epilogues_run_fused: relu joins too (NaN becomes 0)
  // Differentiate: the graph's outputs become its forward outputs and then the gradients.
  // Excludes fold_batchnorm (folding would take the BatchNorm params out of the graph).
  std::optional<BackwardOptions> backward;
  // MXNet's is_train=True: the graph's training form, before autodiff. Excludes fold_batchnorm.
  std::optional<TrainingOptions> training;
  // Whether external node n (types inferred) is computed in f32 although it has bf16/f16
  // operands (oneDNN without native kernels for them); null: no node is.
  std::function<bool(const ir::Graph&, int32_t node)> computes_in_f32;
  PlannerOptions planner;
};

struct LowerStats {
  std::optional<AmpStats> amp;  // with LowerOptions::amp
  int folded_batchnorms = 0;
  int fused_epilogues = 0;      // _fused_conv / _fused_fc nodes epilogue-fusion made
  int row_kernels = 0;          // with PlannerOptions::row_kernels: the plan's row kernels
  int widened_external = 0;     // nodes compute-in-f32 rewrote
  // With LowerOptions::backward: what the graph's outputs are (BackwardGraph's fields).
  size_t forward_outputs = 0;
  std::vector<std::string> gradient_of, head_grads;
  // With LowerOptions::backward: the forward values that backward steps load (stored by
  // the forward pass for them; variables aside), and, with PlannerOptions::recompute, the
  // values the backward kernels computed again instead (recompute.h).
  int saved_values = 0;
  int64_t saved_bytes = 0;
  RecomputeStats recomputed;
};

struct Lowered {
  ir::Graph graph;  // after every graph step
  Plan plan;
  LowerStats stats;
};

// Runs every step above. Throws ampfuse::Error for bad AMP options (before any step runs),
// a graph that does not infer or verify, naming the step.
Lowered lower(ir::Graph g, const LowerOptions& opts);

// The steps up to dce with `opts` as LowerOptions::amp: the converted graph alone, as
// `ampfuse convert` writes it and blocks trace it. Fills `stats` when given.
ir::Graph convert_for_amp(ir::Graph g, const AmpOptions& opts, AmpStats* stats = nullptr);

}  // namespace ampfuse::engine
